"""Reflections and consolidated blobs on PostgreSQL: a mixin of
:class:`~memlane.stores.postgres.facts.PgFactStore` (the store implements ``purge_user`` and
``close`` of :class:`~memlane.stores.base.ReflectionStore` itself).

Semantics are the SQLite store's: ``user`` / ``agent`` buffers gather the reflections of every
session, a blob is keyed by ``(scope, agent_id, user_id, session_id)`` with ``''`` for a missing
id, an agent-scope reflection records the users it was formed from (``contributors``) and a
blob that absorbs it inherits them, so ``forget`` finds what holds a user's words.

Replicas consolidating the same scope at once are safe: :meth:`PgReflectionMixin.put_consolidated`
with ``expected_version`` locks the blob's row (``SELECT ... FOR UPDATE``) or, when there is
none yet, inserts it with ``ON CONFLICT DO NOTHING`` and re-reads the winner's row, so exactly
one writer of a version wins and the other gets :class:`~memlane.errors.ConflictError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from memlane.errors import ConflictError
from memlane.models import ConsolidatedMemory, Reflection
from memlane.stores.base import ReflectionKey
from memlane.stores.postgres.dialect import PgDialect, run
from memlane.stores.postgres.rows import Conn, dec, dec_json, digest, enc, enc_json
from memlane.stores.sql.facts import insert_reflection
from memlane.stores.sql.stmt import run_all

if TYPE_CHECKING:
    from memlane.stores.postgres.db import PgDatabase

__all__ = ["PgReflectionMixin"]

_BLOB_KEY = "scope = %s AND agent_id = %s AND user_id = %s AND session_id = %s"


def _is(column: str, value: str | None) -> tuple[str, list[Any]]:
    """SQLite's ``column IS ?`` (NULL-safe equality) in a form PostgreSQL can index."""
    if value is None:
        return f"{column} IS NULL", []
    return f"{column} = %s", [enc(value)]


def _reflection_where(
    scope: str, agent_id: str | None, user_id: str | None, session_id: str | None, *, by_session: bool
) -> tuple[str, list[Any]]:
    """The rows of one reflection scope; ``by_session`` narrows to ``session_id`` too."""
    where, args = ["scope = %s"], [scope]
    columns = [("agent_id", agent_id), ("user_id", user_id)]
    if by_session:
        columns.append(("session_id", session_id))
    for column, value in columns:
        cond, cargs = _is(column, value)
        where.append(cond)
        args += cargs
    return " AND ".join(where), args


def _blob_key(scope: str, agent_id: str | None, user_id: str | None, session_id: str | None) -> tuple[Any, ...]:
    return (scope, enc(agent_id or ""), enc(user_id or ""), enc(session_id or ""))


class PgReflectionMixin:
    """Reflection buffers and consolidated blobs on ``self.db``."""

    db: PgDatabase

    async def reflection_stamp(self, keys: Sequence[ReflectionKey]) -> str:
        """A token over the scopes' reflection counts, absorption, newest reflection, text size
        and blob version (and the database's purge generation): moves on every write."""
        async with self.db.connection() as conn:
            cur = await conn.execute("SELECT value FROM meta WHERE key = 'generation'")
            generation = await cur.fetchone()
            parts: list[Any] = [list(generation) if generation else None]
            for k in keys:
                where, args = _reflection_where(
                    k.scope, k.agent_id, k.user_id, k.session_id, by_session=k.scope == "session"
                )
                cur = await conn.execute(
                    "SELECT COUNT(*), COALESCE(SUM(absorbed::int), 0), MAX(formed_at),"
                    f" COALESCE(SUM(length(content)), 0) FROM reflections WHERE {where}",
                    args,
                )
                parts.append(list(await cur.fetchone() or ()))
                cur = await conn.execute(
                    f"SELECT version, last_consolidated_at FROM consolidated WHERE {_BLOB_KEY}",
                    _blob_key(k.scope, k.agent_id, k.user_id, k.session_id),
                )
                blob = await cur.fetchone()
                parts.append(list(blob) if blob is not None else None)
        return digest(parts)

    async def put_reflection(self, reflection: Reflection) -> Reflection:
        """Store a reflection in its scope's buffer (a known id changes nothing)."""
        async with self.db.transaction() as conn:
            await run(conn, run_all(insert_reflection(PgDialect(self.db.schema), reflection)))
        return reflection

    async def list_reflections(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        absorbed: bool | None = None,
    ) -> list[Reflection]:
        """Reflections of one scope, oldest first (user/agent buffers: of every session)."""
        where, args = _reflection_where(scope, agent_id, user_id, session_id, by_session=scope == "session")
        if absorbed is not None:
            where += " AND absorbed = %s"
            args.append(bool(absorbed))
        async with self.db.connection() as conn:
            cur = await conn.execute(
                "SELECT id, content, scope, agent_id, user_id, session_id, absorbed, formed_at"
                f" FROM reflections WHERE {where} ORDER BY formed_at, id",
                args,
            )
            rows = await cur.fetchall()
        return [
            Reflection(
                id=r[0], content=dec(r[1]) or "", scope=r[2], agent_id=dec(r[3]), user_id=dec(r[4]),
                session_id=dec(r[5]), absorbed=bool(r[6]), formed_at=r[7],
            )
            for r in rows
        ]  # fmt: skip

    async def get_consolidated(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> ConsolidatedMemory | None:
        """The scope's consolidated blob, if any."""
        async with self.db.connection() as conn:
            cur = await conn.execute(
                "SELECT id, scope, agent_id, user_id, session_id, consolidated_content, word_limit, version,"
                f" unabsorbed_ids, last_consolidated_at FROM consolidated WHERE {_BLOB_KEY}",
                _blob_key(scope, agent_id, user_id, session_id),
            )
            r = await cur.fetchone()
        if r is None:
            return None
        return ConsolidatedMemory(
            id=r[0], scope=r[1], agent_id=dec(r[2]) or None, user_id=dec(r[3]) or None,
            session_id=dec(r[4]) or None, consolidated_content=dec(r[5]) or "", word_limit=r[6], version=r[7],
            unabsorbed_ids=dec_json(r[8]), last_consolidated_at=r[9],
        )  # fmt: skip

    async def put_consolidated(
        self, blob: ConsolidatedMemory, absorbed_ids: Sequence[str] = (), *, expected_version: int | None = None
    ) -> ConsolidatedMemory:
        """Upsert the blob and mark ``absorbed_ids`` absorbed, in one transaction.

        Raises:
            ConflictError: ``expected_version`` is given and the stored blob's version (0 when
                there is none) differs: another consolidation (maybe on another replica) won.
        """
        b = blob
        key = _blob_key(b.scope, b.agent_id, b.user_id, b.session_id)
        values = (enc(b.consolidated_content), b.word_limit, b.version, Jsonb(enc_json(b.unabsorbed_ids)),
                  b.last_consolidated_at)  # fmt: skip
        ids = list(dict.fromkeys(absorbed_ids))
        async with self.db.transaction() as conn:
            if expected_version is None:
                cur = await conn.execute(
                    "INSERT INTO consolidated (id, scope, agent_id, user_id, session_id, consolidated_content,"
                    " word_limit, version, unabsorbed_ids, last_consolidated_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (scope, agent_id, user_id, session_id) DO UPDATE SET"
                    " consolidated_content = excluded.consolidated_content, word_limit = excluded.word_limit,"
                    " version = excluded.version, unabsorbed_ids = excluded.unabsorbed_ids,"
                    " last_consolidated_at = excluded.last_consolidated_at RETURNING id",
                    (b.id, *key, *values),
                )
                row = await cur.fetchone()
                assert row is not None
                stored_id: str = row[0]
            else:
                stored_id = await self._put_expected(conn, b.id, key, values, b.scope, expected_version)
            if ids:
                await conn.execute("UPDATE reflections SET absorbed = TRUE WHERE id = ANY(%s)", (ids,))
                # the blob now holds the words of everyone its reflections came from
                await conn.execute(
                    "INSERT INTO contributors (user_id, kind, item_id) SELECT user_id, 'blob', %s"
                    " FROM contributors WHERE kind = 'reflection' AND item_id = ANY(%s) ON CONFLICT DO NOTHING",
                    (stored_id, ids),
                )
        return b

    @staticmethod
    async def _put_expected(
        conn: Conn, blob_id: str, key: tuple[Any, ...], values: tuple[Any, ...], scope: str, expected: int
    ) -> str:
        """Write the blob only if the stored version is ``expected`` (row locked meanwhile);
        the stored blob's id."""
        for _ in range(2):  # a second round only after losing an insert race
            cur = await conn.execute(f"SELECT id, version FROM consolidated WHERE {_BLOB_KEY} FOR UPDATE", key)
            row = await cur.fetchone()
            current = row[1] if row is not None else 0
            if current != expected:
                raise ConflictError(
                    f"the {scope} blob is at version {current}, expected {expected}: "
                    "another consolidation ran first; retry"
                )
            if row is not None:
                await conn.execute(
                    "UPDATE consolidated SET consolidated_content = %s, word_limit = %s, version = %s,"
                    " unabsorbed_ids = %s, last_consolidated_at = %s WHERE id = %s",
                    (*values, row[0]),
                )
                return str(row[0])
            # No blob yet: insert unless a concurrent writer just did (it waits for that
            # writer's commit), then look again under the lock.
            cur = await conn.execute(
                "INSERT INTO consolidated (id, scope, agent_id, user_id, session_id, consolidated_content,"
                " word_limit, version, unabsorbed_ids, last_consolidated_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (scope, agent_id, user_id, session_id) DO NOTHING RETURNING id",
                (blob_id, *key, *values),
            )
            inserted = await cur.fetchone()
            if inserted is not None:
                return str(inserted[0])
        raise ConflictError(f"the {scope} blob changed while it was written: another consolidation ran; retry")

    async def clear_session_memory(self, *, agent_id: str | None, user_id: str | None, session_id: str) -> int:
        """Delete one session's reflections and blob; returns rows removed."""
        where, args = _reflection_where("session", agent_id, user_id, session_id, by_session=True)
        async with self.db.transaction() as conn:
            cur = await conn.execute(f"DELETE FROM reflections WHERE {where}", args)
            n = cur.rowcount
            cur = await conn.execute(
                f"DELETE FROM consolidated WHERE {_BLOB_KEY}", _blob_key("session", agent_id, user_id, session_id)
            )
            n += cur.rowcount
        return int(n)
