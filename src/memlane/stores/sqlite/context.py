"""The SQLite :class:`~memlane.stores.base.ContextCache`: assembled memory contexts kept in the
same database file as the memory they were built from (table ``context_cache``)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from memlane.stores.base import CachedContext
from memlane.stores.sqlite.db import Database


class SqliteContextCache:
    """Context cache rows on a shared :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get_context(self, key: str) -> CachedContext | None:
        def op(c: sqlite3.Connection) -> CachedContext | None:
            r = c.execute(
                "SELECT key, stamp, text, built_at, user_id, agent_id, session_id FROM context_cache WHERE key=?",
                (key,),
            ).fetchone()
            if r is None:
                return None
            return CachedContext(
                key=r[0],
                stamp=r[1],
                text=r[2],
                built_at=datetime.fromisoformat(r[3]),
                user_id=r[4],
                agent_id=r[5],
                session_id=r[6],
            )

        return await self._db.run(op)

    async def put_context(self, entry: CachedContext) -> None:
        e = entry

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                c.execute(
                    "INSERT OR REPLACE INTO context_cache VALUES (?,?,?,?,?,?,?)",
                    (e.key, e.stamp, e.text, e.built_at.isoformat(), e.user_id, e.agent_id, e.session_id),
                )

        await self._db.run(op)

    async def drop_contexts(self, *, user_id: str | None = None, session_id: str | None = None) -> int:
        where, args = "1", []
        if user_id is not None:
            where += " AND user_id=?"
            args.append(user_id)
        if session_id is not None:
            where += " AND session_id=?"
            args.append(session_id)

        def op(c: sqlite3.Connection) -> int:
            with self._db.write(c):
                return c.execute(f"DELETE FROM context_cache WHERE {where}", args).rowcount

        return await self._db.run(op)
