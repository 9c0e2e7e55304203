"""``PgSessionStore``: durable sessions in PostgreSQL, shared by any number of replicas.

The rules live in :mod:`memlane.stores.sql.sessions` (the same as SQLite's, with the input
checks of :mod:`memlane.sessions`); this module supplies PostgreSQL's encodings, row lock and
runners.

Concurrency: ``add_event`` and ``pop_event`` first lock the session's row (an ``UPDATE`` of
``updated_at``, or ``SELECT ... FOR NO KEY UPDATE``), so writers of one session are serialised
and ``seq`` order is commit order; ``get_or_create_session`` inserts with ``ON CONFLICT DO
NOTHING`` and then reads, so two replicas creating one id at once both get the one session.
A session and its events are read in one ``REPEATABLE READ`` snapshot.

Encodings: session and event timestamps are ``timestamptz`` (microseconds, UTC, taken from
this process's clock, as the SQLite store does, so a created session equals what a later read
returns); event content is JSON text (exact round trip), event metadata, session state and
user ids are ``jsonb``. Every string goes through the PostgreSQL stores' NUL-safe codec
(:func:`memlane.stores.postgres.rows.enc`; ``memlane migrate`` uses it too), so ids and text
holding NUL round-trip as on SQLite. ``jsonb`` refuses NaN and Infinity: such state or
metadata raises InvalidInputError and nothing is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from memlane.errors import InvalidInputError, StorageError
from memlane.sessions import to_utc
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.dialect import run
from memlane.stores.postgres.rows import Conn, dec, dec_json, enc, enc_json
from memlane.stores.sql.sessions import SessionDialect, SqlSessionStore
from memlane.stores.sql.stmt import Program

__all__ = ["PgSessionStore"]

T = TypeVar("T")


class PgSessionDialect(SessionDialect):
    """NUL-safe text, ``timestamptz``, ``jsonb``; the session's row locked by its writers."""

    lock_session = " FOR NO KEY UPDATE"
    list_order = "s.updated_at DESC, s.created_at DESC, s.id DESC"
    byte_order = ' COLLATE "C"'
    event_user_sql = "metadata->'user_id' = to_jsonb(?::text)"

    def text(self, value: str | None) -> Any:
        return enc(value)

    def untext(self, value: Any) -> str | None:
        return dec(value)

    def ts(self, value: datetime) -> Any:
        return value

    def unts(self, value: Any) -> datetime:
        return to_utc(value)

    def json(self, value: Any) -> Any:
        return Jsonb(enc_json(value))

    def unjson(self, value: Any) -> Any:
        return dec_json(value)


_D = PgSessionDialect()


class PgSessionStore(SqlSessionStore):
    """Durable :class:`~memlane.stores.base.SessionStore` on a :class:`PgDatabase`.

    Args:
        db: an open database to share with the other stores of the location; this store takes
            a reference now and gives it back once on :meth:`close` (the pool closes with the
            last reference). :meth:`open` opens a database of its own from a URL instead.
    """

    db: PgDatabase

    def __init__(self, db: PgDatabase) -> None:
        self.db = db.acquire()
        self._closed = False

    @classmethod
    async def open(cls, location: str) -> PgSessionStore:
        """Connect to (and migrate) the database at ``location`` (``postgresql://...?schema=``)
        and own it: :meth:`close` closes its pool (``sessions="postgresql://..."``)."""
        return cls(await PgDatabase.open(location))

    # ------------------------------------------------------------------ runners
    @property
    def _d(self) -> SessionDialect:
        return _D

    async def _query(self, program: Program[T]) -> T:
        async with self._tx(single=True) as conn:
            return await run(conn, program)

    async def _snapshot(self, program: Program[T]) -> T:
        async with self._tx() as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return await run(conn, program)

    async def _transact(self, program: Program[T]) -> T:
        async with self._tx() as conn:
            return await run(conn, program)

    @asynccontextmanager
    async def _tx(self, *, single: bool = False) -> AsyncIterator[Conn]:
        """One transaction (``single``: an autocommit connection, for one statement); a value
        PostgreSQL refuses is bad input (nothing is written), any other database failure a
        StorageError."""
        self._check_open()
        try:
            async with self.db.connection() if single else self.db.transaction() as conn:
                yield conn
        except psycopg.DataError as exc:
            raise InvalidInputError(
                f"PostgreSQL cannot store this session data: {exc.diag.message_primary or exc}"
            ) from exc
        except psycopg.Error as exc:
            raise StorageError(f"session store: {exc}") from exc
