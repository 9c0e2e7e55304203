"""Durable formation jobs and per-session formation cursors in PostgreSQL (``PgJobStore``).

The leasing, heartbeat, retry and cursor rules live in :mod:`memlane.stores.sql.jobs`; this
module supplies what PostgreSQL does differently, for many workers and replicas on one database:

* ``claim`` never waits on another claimer: it takes the candidate key's lock with
  ``pg_try_advisory_xact_lock`` (moving on to the next key when another claimer holds it), then
  picks the key's oldest due job ``FOR UPDATE SKIP LOCKED`` under the lock. The key lock closes
  the race where two claimers pick two *different* queued jobs of one key at the same moment:
  only one gets the lock, and it is released only when its transaction commits, so the other's
  re-check sees the job it started. ``renew`` takes the same lock (waiting), so no claim slips
  in between its check and its write.
* Every time is the database server's (``now()``: the transaction's start), never a replica's
  clock, so leases mean the same thing on every machine. ``idle_cursors(before)`` compares the
  server's activity stamps with the caller's ``before``.
* Strings (ids, keys, errors, JSON strings in payloads, checkpoints and results) go through
  the NUL-safe codec of :mod:`memlane.stores.postgres.rows`, as in every PostgreSQL store.
* ``enqueue(coalesce=True)`` holds a per-key advisory lock (another lock space than
  ``claim``'s) so two replicas coalescing into one key at once still make one job.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from memlane.errors import InvalidInputError, StorageError
from memlane.models import as_utc
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.dialect import run
from memlane.stores.postgres.rows import dec, dec_json, enc, enc_json
from memlane.stores.sql.jobs import CURSOR_COLS, JobDialect, SqlJobStore
from memlane.stores.sql.stmt import Program, one

__all__ = ["PgJobStore"]

T = TypeVar("T")

#: Advisory lock spaces (first key of the two-int form), per schema so tenants never collide.
_SPACES = {
    "claim": "hashtext('memlane.jobs.claim:' || current_schema())",
    "enqueue": "hashtext('memlane.jobs.enqueue:' || current_schema())",
}


class PgJobDialect(JobDialect):
    """NUL-safe text and ``jsonb``, the server's clock, advisory key locks, ``RETURNING``."""

    key_locks = True
    returning = True
    empty_json = "'{}'::jsonb"
    for_update = " FOR UPDATE"

    def text(self, value: str | None) -> Any:
        return enc(value)

    def untext(self, value: Any) -> Any:
        return dec(value)

    def json(self, value: Any) -> Any:
        return Jsonb(enc_json(value))

    def unjson(self, value: Any) -> Any:
        return dec_json(value)

    def ts(self, value: datetime) -> Any:
        return as_utc(value)

    def unts(self, value: Any) -> datetime:
        return as_utc(value)

    def limit(self, n: int) -> Any:
        return None if n < 0 else n  # SQLite reads a negative LIMIT as "no limit"; PostgreSQL NULL

    def now(self, at: datetime) -> str:
        return "now()"

    def later(self, at: datetime, seconds: float) -> str:
        return f"now() + make_interval(secs => {seconds!r})"

    def lists_user(self, column: str) -> str:
        return f"{column} @> jsonb_build_array(?::text)"

    def result_filter(self) -> str:
        return " AND (result->'consolidated' IS NOT NULL OR jsonb_path_exists(result, '$.changes[*].previous'))"

    def key_lock(self, space: str, key: Any, *, wait: bool) -> Program[bool]:
        fn = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        row = yield from one(f"SELECT {fn}({_SPACES[space]}, hashtext(?))", (key,))
        return wait or (row is not None and bool(row[0]))


_D = PgJobDialect()


def _export_row(names: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """A row for an export: decoded, timestamps as ISO-8601 text (what the SQLite export holds)."""
    return {k: v.isoformat() if isinstance(v, datetime) else dec_json(v) for k, v in zip(names, row, strict=True)}


class PgJobStore(SqlJobStore):
    """Jobs and cursors (see :class:`memlane.stores.base.JobStore`) on a :class:`PgDatabase`.

    Args:
        db: the database to share with the other stores of the location; this store takes a
            reference now and gives it back once on :meth:`close` (the pool closes with the
            last reference).
    """

    def __init__(self, db: PgDatabase) -> None:
        self._db = db.acquire()
        self._closed = False

    async def close(self) -> None:
        """Give back the database reference. Idempotent; other calls afterwards raise StorageError."""
        if self._closed:
            return
        self._closed = True
        await self._db.release()

    # ------------------------------------------------------------------ runners
    @property
    def _d(self) -> JobDialect:
        return _D

    async def _query(self, program: Program[T]) -> T:
        async with self._tx(single=True) as conn:
            return await run(conn, program)

    async def _write(self, program: Program[T]) -> T:
        async with self._tx(single=True) as conn:
            return await run(conn, program)

    async def _transact(self, program: Program[T]) -> T:
        async with self._tx() as conn:
            return await run(conn, program)

    @asynccontextmanager
    async def _tx(self, *, single: bool = False) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One transaction (``single``: an autocommit connection, for one statement, which is
        atomic by itself and saves the BEGIN/COMMIT round trips); a value PostgreSQL refuses
        (NaN in ``jsonb``, say) is bad input (nothing is written), any other database failure a
        StorageError."""
        if self._closed:
            raise StorageError("this PgJobStore is closed; open a new one")
        try:
            async with self._db.connection() if single else self._db.transaction() as conn:
                yield conn
        except psycopg.DataError as exc:
            raise InvalidInputError(f"PostgreSQL refused a job value: {exc.diag.message_primary or exc}") from exc
        except psycopg.Error as exc:
            raise StorageError(f"job store: {exc}") from exc

    async def check(self) -> builtins.list[str]:
        """Broken job invariants (empty when healthy): running jobs without a lease, and keys
        with more than one job running on a live lease. Reads only."""
        problems: builtins.list[str] = []
        async with self._tx() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM jobs WHERE status='running' AND (lease_until IS NULL OR worker IS NULL)"
            )
            row = await cur.fetchone()
            if row is not None and row[0]:
                problems.append(f"jobs: {row[0]} running job(s) without a lease holder")
            cur = await conn.execute(
                "SELECT key, count(*) FROM jobs WHERE status='running' AND lease_until>=now()"
                " GROUP BY key HAVING count(*)>1 ORDER BY key LIMIT 100"
            )
            for key, n in await cur.fetchall():
                problems.append(f"jobs: key {dec(key)!r} has {n} jobs running at once")
        return problems

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's jobs (input and status; checkpoints and results are derived and may quote
        the agent's shared memory) and the formation cursors of their sessions, as the SQLite
        store exports them (:func:`memlane.stores.sqlite.export.jobs_part`)."""
        async with self._tx() as conn:
            cur = await conn.execute(
                "SELECT id, kind, key, status, payload, attempts, max_attempts, last_error, next_run_at, created_at,"
                " updated_at FROM jobs WHERE user_id=%s ORDER BY created_at, id",
                (enc(user_id),),
            )
            names = [d.name for d in cur.description or ()]
            jobs = [_export_row(names, r) for r in await cur.fetchall()]
            cur = await conn.execute(
                f"SELECT {CURSOR_COLS} FROM formation_cursors WHERE user_ids @> jsonb_build_array(%s::text)"
                " ORDER BY app, session_id",
                (enc(user_id),),
            )
            names = [d.name for d in cur.description or ()]
            cursors = [_export_row(names, r) for r in await cur.fetchall()]
        return {"jobs": jobs, "formation_cursors": cursors}
