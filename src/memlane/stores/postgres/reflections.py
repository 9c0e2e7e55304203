"""The PostgreSQL runner of the core's programs (:class:`PgReflectionMixin`): transactions and
reads on the pool with psycopg's errors mapped to memlane's, and with them the reflection
buffers and consolidated blobs of :class:`~memlane.stores.sql.store.SqlReflectionStore`
(semantics and the concurrency of ``put_consolidated``: :mod:`memlane.stores.sql.reflections`).
:class:`~memlane.stores.postgres.facts.PgFactStore` adds the facts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

import psycopg

from memlane.errors import ConflictError, MemlaneError, StorageError
from memlane.stores.postgres.dialect import PgDialect, run
from memlane.stores.postgres.rows import Conn
from memlane.stores.sql.stmt import Program
from memlane.stores.sql.store import SqlReflectionStore

if TYPE_CHECKING:
    from memlane.stores.postgres.db import PgDatabase

__all__ = ["PgReflectionMixin"]

T = TypeVar("T")


class PgReflectionMixin(SqlReflectionStore):
    """Core programs, and reflection buffers and consolidated blobs, on ``self.db``."""

    db: PgDatabase
    _dialect: PgDialect | None = None

    @property
    def _d(self) -> PgDialect:
        if self._dialect is None or self._dialect.schema != self.db.schema:
            self._dialect = PgDialect(self.db.schema)  # advisory-lock keys name the schema
        return self._dialect

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Conn]:
        """One write transaction; database errors become memlane's typed errors."""
        try:
            async with self.db.transaction() as conn:
                yield conn
        except MemlaneError:
            raise
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            raise ConflictError(f"a concurrent write got in the way; retry ({exc.diag.message_primary})") from exc
        except psycopg.errors.IntegrityError as exc:
            raise StorageError(f"constraint failed: {exc.diag.message_primary or exc}") from exc
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc.diag.message_primary or exc}") from exc

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Conn]:
        """A pooled connection for reads; database errors become :class:`StorageError`."""
        try:
            async with self.db.connection() as conn:
                yield conn
        except MemlaneError:
            raise
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc.diag.message_primary or exc}") from exc

    async def _query(self, program: Program[T]) -> T:
        async with self._read() as conn:
            return await run(conn, program)

    async def _transact(self, program: Program[T]) -> T:
        async with self._tx() as conn:
            return await run(conn, program)
