"""The PostgreSQL :class:`~memlane.stores.base.ContextCache`: assembled memory contexts kept in
the same database (table ``context_cache``) as the memory they were built from, so every
replica reuses one replica's build while its stamps match."""

from __future__ import annotations

from memlane.stores.base import CachedContext
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.rows import dec, enc

__all__ = ["PgContextCache"]


class PgContextCache:
    """Context cache rows on a shared :class:`PgDatabase` (one reference, dropped by :meth:`close`)."""

    def __init__(self, db: PgDatabase) -> None:
        self._db = db.acquire()
        self._closed = False

    async def get_context(self, key: str) -> CachedContext | None:
        """The entry stored under ``key``, or None."""
        async with self._db.connection() as conn:
            cur = await conn.execute(
                "SELECT key, stamp, text, built_at, user_id, agent_id, session_id FROM context_cache WHERE key = %s",
                (enc(key),),
            )
            r = await cur.fetchone()
        if r is None:
            return None
        return CachedContext(
            key=dec(r[0]) or "",
            stamp=dec(r[1]) or "",
            text=dec(r[2]) or "",
            built_at=r[3],
            user_id=dec(r[4]),
            agent_id=dec(r[5]),
            session_id=dec(r[6]),
        )

    async def put_context(self, entry: CachedContext) -> None:
        """Store (replace) an entry."""
        e = entry
        async with self._db.connection() as conn:
            await conn.execute(
                "INSERT INTO context_cache (key, stamp, text, built_at, user_id, agent_id, session_id)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO UPDATE SET stamp = excluded.stamp,"
                " text = excluded.text, built_at = excluded.built_at, user_id = excluded.user_id,"
                " agent_id = excluded.agent_id, session_id = excluded.session_id",
                (enc(e.key), enc(e.stamp), enc(e.text), e.built_at, enc(e.user_id), enc(e.agent_id), enc(e.session_id)),
            )

    async def drop_contexts(self, *, user_id: str | None = None, session_id: str | None = None) -> int:
        """Delete the entries of a user, of a session, of both, or (neither given) all; returns how many."""
        where, args = ["TRUE"], []
        if user_id is not None:
            where.append("user_id = %s")
            args.append(enc(user_id))
        if session_id is not None:
            where.append("session_id = %s")
            args.append(enc(session_id))
        async with self._db.connection() as conn:
            cur = await conn.execute(f"DELETE FROM context_cache WHERE {' AND '.join(where)}", args)
            return int(cur.rowcount)

    async def close(self) -> None:
        """Release this cache's reference to the database (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        await self._db.release()
