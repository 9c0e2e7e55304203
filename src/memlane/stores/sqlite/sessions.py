"""``SqliteSessionStore``: durable sessions in memlane's shared SQLite file.

The rules live in :mod:`memlane.stores.sql.sessions`; this module supplies SQLite's encodings
and runs the core's programs on the database's worker threads. A new store object on the same
file resumes every session exactly (Gaia's durable ``{user}:{channel}`` session), and any
number of stores, threads and processes may write to one file at once: each write is one
``BEGIN IMMEDIATE`` transaction (the file's write lock), so no acknowledged event is lost.

Encodings: timestamps are ISO-8601 UTC with microseconds and a ``+00:00`` offset (fixed
width, so they sort as text and round-trip exactly); event content, event metadata, session
state and user ids are JSON. Unlike ``LocalSessionStore`` there is no bound on sessions or events.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from datetime import datetime
from typing import Any, TypeVar

from memlane.sessions import to_utc
from memlane.stores.sql.sessions import SessionDialect, SqlSessionStore
from memlane.stores.sql.stmt import Program
from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.dialect import run

__all__ = ["SqliteSessionStore"]

T = TypeVar("T")


def _ts(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (``2024-05-01T12:00:00.000000+00:00``)."""
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


class SqliteSessionDialect(SessionDialect):
    """Text timestamps and JSON; the write transaction locks the file (no row locks)."""

    list_order = "s.updated_at DESC, s.rowid DESC"
    event_user_sql = "json_extract(metadata, '$.user_id') = ?"

    def text(self, value: str | None) -> Any:
        return value

    def untext(self, value: Any) -> str | None:
        return value  # type: ignore[no-any-return]

    def ts(self, value: datetime) -> Any:
        return _ts(value)

    def unts(self, value: Any) -> datetime:
        return to_utc(datetime.fromisoformat(value))

    def json(self, value: Any) -> Any:
        return json.dumps(value, ensure_ascii=False)

    def unjson(self, value: Any) -> Any:
        return json.loads(value)


_D = SqliteSessionDialect()


def _open_database(path: str | os.PathLike[str]) -> Database:
    db = Database(path)
    try:
        return db.open_sync()
    except BaseException:
        db.close_sync()  # don't leak the connection opened to inspect the file
        raise


class SqliteSessionStore(SqlSessionStore):
    """Durable :class:`~memlane.stores.base.SessionStore` on a memlane SQLite file.

    Args:
        db: an open :class:`Database` to share with other stores (this store takes a
            reference with ``acquire()`` and gives it back with ``release_sync()`` on
            :meth:`close`; the last release closes the database, so keep a reference of
            your own if you use it afterwards), or a file path: the store then opens its
            own ``Database`` right here, synchronously (use :meth:`open` inside an event
            loop to open off the loop), and closes it on :meth:`close`.

    All SQL runs on the database's worker threads (``await db.run``); the event loop never
    blocks on disk.
    """

    db: Database

    def __init__(self, db: Database | str | os.PathLike[str]) -> None:
        if isinstance(db, Database):
            self.db = db.acquire()
            self.owns_db = False
        else:
            self.db = _open_database(db).acquire()
            self.owns_db = True
        self._closed = False

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> SqliteSessionStore:
        """Open (create, migrate) the file at ``path`` on a worker thread and own it."""
        db = await asyncio.to_thread(_open_database, path)
        store = cls(db)
        store.owns_db = True
        return store

    # ------------------------------------------------------------------ runners
    @property
    def _d(self) -> SessionDialect:
        return _D

    async def _query(self, program: Program[T]) -> T:
        self._check_open()
        return await self.db.run(lambda c: run(c, program))

    async def _snapshot(self, program: Program[T]) -> T:
        self._check_open()

        def op(c: sqlite3.Connection) -> T:
            c.execute("BEGIN")  # a read transaction: every SELECT sees one state
            try:
                return run(c, program)
            finally:
                c.execute("COMMIT")

        return await self.db.run(op)

    async def _transact(self, program: Program[T]) -> T:
        self._check_open()

        def op(c: sqlite3.Connection) -> T:
            with self.db.write(c):  # BEGIN IMMEDIATE: the file's write lock
                return run(c, program)

        return await self.db.run(op)
