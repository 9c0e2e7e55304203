"""Durable formation jobs and per-session formation cursors, in the memlane SQLite file.

The leasing, heartbeat, retry and cursor rules live in :mod:`memlane.stores.sql.jobs`; this
module supplies SQLite's encodings and clock and runs the core's programs on the database's
worker threads. Each write is one ``BEGIN IMMEDIATE`` transaction: the file's write lock makes
a claim (read the oldest due job of a free key, lease it) atomic across threads and processes.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
from datetime import datetime, timedelta
from typing import Any, TypeVar

from memlane.models import as_utc
from memlane.stores.sql.jobs import JobDialect, SqlJobStore
from memlane.stores.sql.stmt import Program
from memlane.stores.sqlite import export as export_
from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.dialect import run

__all__ = ["SqliteJobStore"]

T = TypeVar("T")


class SqliteJobDialect(JobDialect):
    """JSON and ISO-8601 text; the process's clock, read once per operation."""

    def text(self, value: str | None) -> Any:
        return value

    def untext(self, value: Any) -> Any:
        return value

    def json(self, value: Any) -> Any:
        return json.dumps(value)

    def unjson(self, value: Any) -> Any:
        return json.loads(value)

    def ts(self, value: datetime) -> Any:
        return value.isoformat()

    def unts(self, value: Any) -> datetime:
        return as_utc(datetime.fromisoformat(value))

    # An ISO-8601 literal of our own clock reading (no quote can occur in it).
    def now(self, at: datetime) -> str:
        return f"'{at.isoformat()}'"

    def later(self, at: datetime, seconds: float) -> str:
        return f"'{(at + timedelta(seconds=seconds)).isoformat()}'"

    def lists_user(self, column: str) -> str:
        return f"EXISTS (SELECT 1 FROM json_each(formation_cursors.{column}) WHERE value=?)"


_D = SqliteJobDialect()


class SqliteJobStore(SqlJobStore):
    """Jobs and cursors (see :class:`memlane.stores.base.JobStore`)."""

    def __init__(self, db: Database | str | os.PathLike[str]) -> None:
        self._db = db.acquire() if isinstance(db, Database) else Database(db).open_sync().acquire()

    async def close(self) -> None:
        await self._db.release()

    async def check(self) -> builtins.list[str]:
        """Integrity problems of the database file this store lives in (shared with the fact
        and session stores); empty when healthy. See :meth:`Database.check_sync`."""
        return await self._db.check()

    @property
    def _d(self) -> JobDialect:
        return _D

    async def _query(self, program: Program[T]) -> T:
        return await self._db.run(lambda c: run(c, program))

    async def _write(self, program: Program[T]) -> T:
        return await self._transact(program)

    async def _transact(self, program: Program[T]) -> T:
        def op(c: sqlite3.Connection) -> T:
            with self._db.write(c):  # BEGIN IMMEDIATE: the file's write lock
                return run(c, program)

        return await self._db.run(op)

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's jobs and their sessions' formation cursors (see :mod:`memlane.stores.sqlite.export`)."""
        return await self._db.run(lambda c: export_.jobs_part(c, user_id))
