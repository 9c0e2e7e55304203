"""One PostgreSQL database (or one schema of it) behind a psycopg 3 async connection pool.

Location: a libpq URL, ``postgresql://user:pass@host:5432/dbname?sslmode=require``, plus
memlane's own query parameters (removed before connecting):

* ``schema=NAME`` - keep every table in that schema (created on first open). The service
  gives each tenant a schema of its own this way, and the tests a fresh one per test.
* ``pool_min=N`` / ``pool_max=N`` - connection pool bounds (default 1 and 10).
* ``pool_timeout=SECONDS`` - how long a call waits for a connection (default 30) before
  failing with a :class:`~memlane.errors.StorageError` that says why the server cannot be
  reached.
* ``purge=vacuum|rewrite`` - what ``forget`` does to the table files after deleting a user's
  rows: ``vacuum`` (default; the freed space is reused, but PostgreSQL does not zero it) or
  ``rewrite`` (``VACUUM FULL``: the deleted bytes leave the files; the tables are locked while
  it runs).

Opening creates the ``vector`` extension when missing (that needs a role allowed to; ask your
DBA to run ``CREATE EXTENSION vector`` once otherwise) and applies the schema migrations of
:mod:`memlane.stores.postgres.migrations` under an advisory lock, so replicas starting at once
migrate exactly once. The stores of one location share one :class:`PgDatabase`; each holds a
reference and the pool closes with the last.

A server restart costs no failed call once the server is back (:meth:`PgDatabase.connection`):
a pooled connection the server closed is never handed out (a socket with something to read
while idle, or idle for :data:`CHECK_IDLE_SECONDS`, is checked first; a dead one is replaced at
once), and while the pool is still reconnecting (its backoff grew during the outage) a call
that waited :data:`RECONNECT_SLICE_SECONDS` for a pooled connection uses a connection of its
own when the server answers (at most ``pool_max`` of them at a time), instead of waiting out the
backoff. A call made while the server is down waits up to ``pool_timeout`` for it, then fails
with a :class:`~memlane.errors.StorageError` (503); a call running when the server goes away
fails the same way.
"""

from __future__ import annotations

import asyncio
import logging
import re
import select
import time
import weakref
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg  # the registry turns a missing one into "pip install 'memlane[postgres]'"
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from memlane.errors import ConfigError, StorageError
from memlane.stores.postgres.migrations import MIGRATIONS

__all__ = ["PgDatabase", "parse_pg_location", "redact"]

_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
log = logging.getLogger("memlane.stores")

#: A pooled connection idle this long is checked (one round trip) before it is handed out.
CHECK_IDLE_SECONDS = 2.0
#: How long a call waits for a pooled connection before it looks at why there is none: when
#: the pool is short of connections (not all busy) and the server answers, the pool is still
#: reconnecting after an outage, and the call uses a connection of its own.
RECONNECT_SLICE_SECONDS = 1.0
#: The same wait once calls are using connections of their own (the pool is reconnecting).
_RECONNECTING_SLICE_SECONDS = 0.05

_OWN_PARAMS = ("schema", "pool_min", "pool_max", "purge", "pool_timeout")


def redact(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def parse_pg_location(location: str) -> tuple[str, str | None, int, int]:
    """``(libpq url, schema, pool_min, pool_max)`` of a store location.

    Raises:
        ConfigError: a bad schema name or pool bound.
    """
    parts = urlsplit(location)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"not a PostgreSQL URL: {redact(location)!r}")
    params = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in params if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in params if k not in _OWN_PARAMS]
    schema = own.get("schema") or None
    if schema is not None and not _SCHEMA_RE.match(schema):
        raise ConfigError(f"schema= must be a plain identifier (letters, digits, _; at most 63), got {schema!r}")
    try:
        pool_min = int(own.get("pool_min", "1"))
        pool_max = int(own.get("pool_max", "10"))
    except ValueError as exc:
        raise ConfigError(f"pool_min / pool_max must be integers in {redact(location)!r}") from exc
    if not 0 <= pool_min <= pool_max or pool_max < 1:
        raise ConfigError(f"need 0 <= pool_min <= pool_max and pool_max >= 1, got {pool_min}, {pool_max}")
    url = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(rest)))
    return url, schema, pool_min, pool_max


class PgDatabase:
    """A connection pool on one database/schema, with the schema migrated. Build with :meth:`open`."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.url, self.schema, pool_min, pool_max = parse_pg_location(location)
        params = dict(parse_qsl(urlsplit(location).query))
        purge = params.get("purge", "vacuum")
        if purge not in ("vacuum", "rewrite"):
            raise ConfigError(f"purge= takes vacuum or rewrite, got {purge!r}")
        self.purge_rewrite = purge == "rewrite"
        try:
            self.pool_timeout = float(params.get("pool_timeout", "30"))
        except ValueError as exc:
            raise ConfigError(f"pool_timeout= must be a number of seconds in {redact(location)!r}") from exc
        if not self.pool_timeout > 0:
            raise ConfigError(f"pool_timeout= must be > 0, got {self.pool_timeout:g}")
        """Rewrite the tables after a purge (``purge=rewrite``)."""
        self._refs = 0
        # reset=: when each connection went back to the pool; connection() checks one idle for
        # CHECK_IDLE_SECONDS or more (or with something to read) as it leaves, so after a server
        # restart the dead ones are replaced instead of failing the call that got them; a busy
        # pool pays no extra round trip per checkout.
        self._returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            self.url,
            min_size=pool_min,
            max_size=pool_max,
            open=False,
            configure=self._configure,
            kwargs={"autocommit": True},
            reset=self._returned_now,
            name=f"memlane:{self.schema or 'public'}",
        )
        self._in_use = 0  # pooled connections handed out by connection()
        self._reconnecting = False  # calls use connections of their own until the pool hands one out again
        self._own = asyncio.Semaphore(pool_max)  # connections of their own while the pool reconnects
        self.own_connections = 0
        """Calls served on a connection of their own while the pool was reconnecting (a count)."""
        self.replaced = 0
        """Pooled connections found dead as they left the pool and replaced (a count)."""
        self._vector_ready = False

    @classmethod
    async def open(cls, location: str) -> PgDatabase:
        """Connect, create the extension and schema if needed, migrate.

        Raises:
            ConfigError: the server cannot be reached, or ``vector`` is not installed in it.
        """
        db = cls(location)
        try:
            await db._bootstrap()
            await db._pool.open(wait=True, timeout=30)
        except BaseException:
            await db._pool.close()
            raise
        return db

    def acquire(self) -> PgDatabase:
        """Take a reference (one per store sharing this database)."""
        self._refs += 1
        return self

    async def release(self) -> None:
        """Drop a reference; the pool closes with the last one."""
        self._refs -= 1
        if self._refs <= 0:
            await self._pool.close()

    @property
    def closed(self) -> bool:
        return bool(self._pool.closed)

    async def _returned_now(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not conn.closed:
            self._returned[conn] = time.monotonic()

    async def _usable(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Whether a connection leaving the pool works: checked (one round trip) when it is new,
        idle for :data:`CHECK_IDLE_SECONDS`, or its socket has something to read while idle (a
        server that shut down sends its goodbye and closes)."""
        returned = self._returned.pop(conn, None)
        if conn.closed or conn.broken:
            return False
        if returned is not None and time.monotonic() - returned < CHECK_IDLE_SECONDS and not _readable(conn):
            return True
        try:
            await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            return False
        return True

    async def _checkout(self) -> tuple[psycopg.AsyncConnection[Any], bool]:
        """A working connection and whether it is one of the call's own (not pooled).

        Raises:
            StorageError: none within ``pool_timeout``.
        """
        deadline = time.monotonic() + self.pool_timeout
        while True:
            left = deadline - time.monotonic()
            wait = _RECONNECTING_SLICE_SECONDS if self._reconnecting else RECONNECT_SLICE_SECONDS
            try:
                conn = await self._pool.getconn(timeout=max(min(left, wait), 0.0))
            except PoolTimeout:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StorageError(
                        f"no PostgreSQL connection within {self.pool_timeout:g} s at {redact(self.url)}: "
                        f"{await self._why_unreachable()}"
                    ) from None
                if self._in_use < self._pool.max_size:  # not all busy: the pool is reconnecting
                    own = await self._own_connection(left)
                    if own is not None:
                        return own, True
                continue
            try:
                usable = await self._usable(conn)
            except BaseException:
                await self._pool.putconn(conn)
                raise
            if usable:
                self._in_use += 1
                self._reconnecting = False
                return conn, False
            self.replaced += 1
            await conn.close()
            await self._pool.putconn(conn)  # a closed connection: the pool connects a new one at once

    async def _own_connection(self, left: float) -> psycopg.AsyncConnection[Any] | None:
        """A connection of the call's own, once fewer than ``pool_max`` such connections are open
        (waiting at most ``left`` seconds for that), when the server answers; None otherwise."""
        try:
            async with asyncio.timeout(left):
                await self._own.acquire()
        except TimeoutError:
            return None
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=max(1, min(int(left), 10))
            )
        except psycopg.Error:  # the server is down: back to waiting for the pool
            self._own.release()
            self._reconnecting = False
            return None
        try:
            await self._configure(conn)
        except BaseException:
            self._own.release()
            await conn.close()
            raise
        if not self._reconnecting:
            self._reconnecting = True
            log.info(
                "memlane: the PostgreSQL pool at %s is reconnecting; calls use connections of their own meanwhile",
                redact(self.url),
            )
        self.own_connections += 1
        return conn

    async def _checkin(self, conn: psycopg.AsyncConnection[Any], own: bool) -> None:
        if own:
            try:
                await conn.close()
            finally:
                self._own.release()
            return
        self._in_use -= 1
        await self._pool.putconn(conn)

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("SET TIME ZONE 'UTC'")  # timestamptz values come back in UTC
        if self.schema is not None:
            await conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(self.schema)))
        if self._vector_ready:
            from pgvector.psycopg import register_vector_async

            await register_vector_async(conn)

    async def _bootstrap(self) -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=15)
        except psycopg.OperationalError as exc:
            raise ConfigError(f"cannot connect to PostgreSQL at {redact(self.url)}: {exc}".strip()) from exc
        async with conn:
            lock = zlib.crc32(f"memlane:{self.schema or 'public'}".encode())
            await conn.execute("SELECT pg_advisory_lock(%s)", (lock,))
            try:
                has = await (await conn.execute("SELECT 1 FROM pg_extension WHERE extname='vector'")).fetchone()
                if has is None:
                    try:
                        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    except psycopg.Error as exc:
                        raise ConfigError(
                            f"the PostgreSQL at {redact(self.url)} has no pgvector extension and this role "
                            f"cannot create it ({exc.diag.message_primary or exc}); install pgvector and run "
                            "CREATE EXTENSION vector once as a superuser"
                        ) from exc
                if self.schema is not None:
                    await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
                    await conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(self.schema)))
                await self._migrate(conn)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))
        self._vector_ready = True

    @staticmethod
    async def _migrate(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
        )
        done = {r[0] for r in await (await conn.execute("SELECT name FROM schema_migrations")).fetchall()}
        known = {name for name, _ in MIGRATIONS}
        unknown = done - known
        if unknown:
            raise StorageError(
                f"this database was migrated by a newer memlane ({', '.join(sorted(unknown))}); upgrade memlane"
            )
        for name, steps in MIGRATIONS:
            if name in done:
                continue
            async with conn.transaction():
                for step in steps:
                    await conn.execute(step)
                await conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (%s, now())", (name,))

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in autocommit mode (each statement its own transaction).

        Raises:
            StorageError: no connection within ``pool_timeout`` (saying why), or the server
                failed the work (``psycopg.OperationalError``: connection lost, lock timeout,
                deadlock): retry later.
        """
        if self._pool.closed:
            raise StorageError("the PostgreSQL store is closed")
        conn, own = await self._checkout()
        try:
            yield conn
        except psycopg.OperationalError as exc:  # the server went away, a lock timed out...
            raise StorageError(f"PostgreSQL at {redact(self.url)}: {str(exc).strip()}") from exc
        finally:
            await self._checkin(conn, own)

    async def _why_unreachable(self) -> str:
        """What a fresh connection attempt says (the pool only logs its errors)."""
        try:
            probe = await psycopg.AsyncConnection.connect(self.url, connect_timeout=5)
        except psycopg.Error as exc:
            return str(exc).strip() or type(exc).__name__
        await probe.close()
        return (
            f"the server answers now, but all {self._pool.max_size} pooled connections stayed busy (and so did the "
            "connections calls open of their own while the pool reconnects): raise pool_max= or pool_timeout="
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction (committed on exit, rolled back on error)."""
        async with self.connection() as conn, conn.transaction():
            yield conn


def _readable(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket has something to read (or is gone): a server that
    shut down or ended the session sent its error and closed the socket."""
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    ready, _, _ = select.select([fd], [], [], 0)  # pragma: no cover - Windows
    return bool(ready)
