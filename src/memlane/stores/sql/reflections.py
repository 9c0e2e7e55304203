"""Reflections and consolidated blobs, once for every SQL dialect (sans-IO: see
:mod:`memlane.stores.sql`).

``user`` / ``agent`` buffers gather the reflections of every session; a blob is keyed by
``(scope, agent_id, user_id, session_id)`` with ``''`` for a missing id; an agent-scope
reflection records the users it was formed from (``contributors``) and a blob that absorbs it
inherits them, so ``forget`` finds what holds a user's words.

Writers consolidating the same scope at once are safe: :func:`put_consolidated` with
``expected_version`` reads the blob's row under its lock (``FOR UPDATE`` where the dialect
locks rows; SQLite's write transaction locks the file) or, when there is none yet, inserts it
with ``ON CONFLICT DO NOTHING`` and reads again, so exactly one writer of a version wins and
the other gets :class:`~memlane.errors.ConflictError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memlane.errors import ConflictError
from memlane.models import ConsolidatedMemory, ConsolidatedVersion, Reflection
from memlane.stores.base import ReflectionKey
from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.reads import digest, null_safe_eq
from memlane.stores.sql.stmt import Program, Stmt, all_rows, count, one

__all__ = [
    "BLOB_KEY",
    "blob_key",
    "clear_session_memory",
    "consolidated_history",
    "export_versions",
    "get_consolidated",
    "list_reflections",
    "put_consolidated",
    "reflection_stamp",
    "reflection_where",
]

BLOB_KEY = "scope = ? AND agent_id = ? AND user_id = ? AND session_id = ?"

_BLOB_COLS = "consolidated_content, word_limit, version, unabsorbed_ids, last_consolidated_at"
_VERSION_KEY = "scope, agent_id, user_id, session_id"


def blob_key(
    d: Dialect, scope: str, agent_id: str | None, user_id: str | None, session_id: str | None
) -> tuple[Any, ...]:
    """The arguments of :data:`BLOB_KEY` (a blob keeps ``''`` for a missing id)."""
    return (scope, d.text(agent_id or ""), d.text(user_id or ""), d.text(session_id or ""))


def reflection_where(
    d: Dialect, scope: str, agent_id: str | None, user_id: str | None, session_id: str | None, *, by_session: bool
) -> tuple[str, list[Any]]:
    """The rows of one reflection scope; ``by_session`` narrows to ``session_id`` too."""
    where, args = ["scope = ?"], [scope]
    columns = [("agent_id", agent_id), ("user_id", user_id)]
    if by_session:
        columns.append(("session_id", session_id))
    for column, value in columns:
        cond, cargs = null_safe_eq(d, column, value)
        where.append(cond)
        args += cargs
    return " AND ".join(where), args


def reflection_stamp(d: Dialect, keys: Sequence[ReflectionKey]) -> Program[str]:
    """A token over the scopes' reflection counts, absorption, newest reflection, text size and
    blob version (and the database's purge generation): moves on every write."""
    generation = yield from one("SELECT value FROM meta WHERE key = 'generation'")
    parts: list[Any] = [list(generation) if generation else None]
    for k in keys:
        where, args = reflection_where(d, k.scope, k.agent_id, k.user_id, k.session_id, by_session=k.scope == "session")
        counts = yield from one(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN absorbed THEN 1 ELSE 0 END), 0), MAX(formed_at),"
            f" COALESCE(SUM(LENGTH(content)), 0) FROM reflections WHERE {where}",
            args,
        )
        parts.append(list(counts or ()))
        blob = yield from one(
            f"SELECT version, last_consolidated_at FROM consolidated WHERE {BLOB_KEY}",
            blob_key(d, k.scope, k.agent_id, k.user_id, k.session_id),
        )
        parts.append(list(blob) if blob is not None else None)
    return digest(parts)


def list_reflections(
    d: Dialect,
    *,
    scope: str,
    agent_id: str | None,
    user_id: str | None,
    session_id: str | None,
    absorbed: bool | None,
) -> Program[list[Reflection]]:
    """Reflections of one scope, oldest first (user/agent buffers: of every session)."""
    where, args = reflection_where(d, scope, agent_id, user_id, session_id, by_session=scope == "session")
    if absorbed is not None:
        where += " AND absorbed = ?"
        args.append(d.boolean(absorbed))
    rows = yield from all_rows(
        "SELECT id, content, scope, agent_id, user_id, session_id, absorbed, formed_at"
        f" FROM reflections WHERE {where} ORDER BY formed_at, rowid",
        args,
    )
    return [
        Reflection(
            id=r[0],
            content=d.untext(r[1]) or "",
            scope=r[2],
            agent_id=d.untext(r[3]),
            user_id=d.untext(r[4]),
            session_id=d.untext(r[5]),
            absorbed=bool(r[6]),
            formed_at=d.unts(r[7]),
        )
        for r in rows
    ]


def get_consolidated(
    d: Dialect, *, scope: str, agent_id: str | None, user_id: str | None, session_id: str | None
) -> Program[ConsolidatedMemory | None]:
    """The scope's consolidated blob, if any."""
    r = yield from one(
        f"SELECT id, scope, agent_id, user_id, session_id, {_BLOB_COLS} FROM consolidated WHERE {BLOB_KEY}",
        blob_key(d, scope, agent_id, user_id, session_id),
    )
    if r is None:
        return None
    return ConsolidatedMemory(
        id=r[0],
        scope=r[1],
        agent_id=d.untext(r[2]) or None,
        user_id=d.untext(r[3]) or None,
        session_id=d.untext(r[4]) or None,
        consolidated_content=d.untext(r[5]) or "",
        word_limit=r[6],
        version=r[7],
        unabsorbed_ids=d.unjson(r[8]),
        last_consolidated_at=d.unts(r[9]) if r[9] else None,
    )


def put_consolidated(
    d: Dialect, b: ConsolidatedMemory, absorbed_ids: Sequence[str], *, expected_version: int | None
) -> Program[ConsolidatedMemory]:
    """Upsert the blob and mark ``absorbed_ids`` absorbed.

    Raises:
        ConflictError: ``expected_version`` is given and the stored blob's version (0 when
            there is none) differs: another consolidation (maybe on another replica) won.
    """
    key = blob_key(d, b.scope, b.agent_id, b.user_id, b.session_id)
    values = (
        d.text(b.consolidated_content),
        b.word_limit,
        b.version,
        d.json(b.unabsorbed_ids),
        d.ts(b.last_consolidated_at),
    )
    insert = (
        f"INSERT INTO consolidated (id, scope, agent_id, user_id, session_id, {_BLOB_COLS})"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, agent_id, user_id, session_id)"
    )
    if expected_version is None:
        yield Stmt(
            insert + " DO UPDATE SET consolidated_content = excluded.consolidated_content,"
            " word_limit = excluded.word_limit, version = excluded.version,"
            " unabsorbed_ids = excluded.unabsorbed_ids, last_consolidated_at = excluded.last_consolidated_at",
            (b.id, *key, *values),
        )
        row = yield from one(f"SELECT id FROM consolidated WHERE {BLOB_KEY}", key)
        assert row is not None
        stored_id = str(row[0])
    else:
        stored_id = yield from _put_expected(d, b.id, key, values, insert + " DO NOTHING", b.scope, expected_version)
    yield _version_row(d, key, stored_id, b)
    ids = list(dict.fromkeys(absorbed_ids))
    for i in range(0, len(ids), d.chunk):
        cond, args = d.in_list("id", ids[i : i + d.chunk])
        yield Stmt(f"UPDATE reflections SET absorbed = ? WHERE {cond}", (d.boolean(True), *args))
        # the blob now holds the words of everyone its reflections came from
        cond, args = d.in_list("item_id", ids[i : i + d.chunk])
        yield Stmt(
            "INSERT INTO contributors (user_id, kind, item_id) SELECT user_id, 'blob', ?"
            f" FROM contributors WHERE kind = 'reflection' AND {cond} ON CONFLICT DO NOTHING",
            (stored_id, *args),
        )
    return b


def _version_row(d: Dialect, key: tuple[Any, ...], blob_id: str, b: ConsolidatedMemory) -> Stmt:
    """The blob's version in ``consolidated_versions`` (a version written again replaces its row)."""
    return Stmt(
        f"INSERT INTO consolidated_versions ({_VERSION_KEY}, version, blob_id, content, word_limit, consolidated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, agent_id, user_id, session_id, version) DO UPDATE"
        " SET blob_id = excluded.blob_id, content = excluded.content, word_limit = excluded.word_limit,"
        " consolidated_at = excluded.consolidated_at",
        (*key, b.version, blob_id, d.text(b.consolidated_content), b.word_limit, d.ts(b.last_consolidated_at)),
    )


def consolidated_history(
    d: Dialect,
    *,
    scope: str,
    agent_id: str | None,
    user_id: str | None,
    session_id: str | None,
    limit: int,
) -> Program[list[ConsolidatedVersion]]:
    """The scope's blob versions, newest first, at most ``limit``."""
    rows = yield from all_rows(
        "SELECT version, content, word_limit, consolidated_at FROM consolidated_versions"
        f" WHERE {BLOB_KEY} ORDER BY version DESC LIMIT ?",
        (*blob_key(d, scope, agent_id, user_id, session_id), limit),
    )
    return [
        ConsolidatedVersion(
            version=r[0],
            content=d.untext(r[1]) or "",
            word_limit=r[2],
            consolidated_at=d.unts(r[3]) if r[3] is not None else None,
        )
        for r in rows
    ]


def export_versions(d: Dialect, user_id: str) -> Program[list[dict[str, Any]]]:
    """The versions of the user's own blobs as JSON data (``export_user``'s
    ``consolidated_versions``), by scope, agent, session, then version."""
    rows = yield from all_rows(
        f"SELECT {_VERSION_KEY}, version, content, word_limit, consolidated_at FROM consolidated_versions"
        " WHERE user_id = ? ORDER BY scope, agent_id, session_id, version",
        (d.text(user_id),),
    )
    return [
        {
            "scope": r[0],
            "agent_id": d.untext(r[1]) or None,
            "user_id": d.untext(r[2]) or None,
            "session_id": d.untext(r[3]) or None,
            **ConsolidatedVersion(
                version=r[4],
                content=d.untext(r[5]) or "",
                word_limit=r[6],
                consolidated_at=d.unts(r[7]) if r[7] is not None else None,
            ).model_dump(mode="json"),
        }
        for r in rows
    ]


def _put_expected(
    d: Dialect, blob_id: str, key: tuple[Any, ...], values: tuple[Any, ...], insert: str, scope: str, expected: int
) -> Program[str]:
    """Write the blob only if the stored version is ``expected`` (row locked meanwhile); the
    stored blob's id."""
    for _ in range(2):  # a second round only after losing an insert race
        row = yield from one(f"SELECT id, version FROM consolidated WHERE {BLOB_KEY}{d.for_update}", key)
        current = row[1] if row is not None else 0
        if current != expected:
            raise ConflictError(
                f"the {scope} blob is at version {current}, expected {expected}: another consolidation ran first; retry"
            )
        if row is not None:
            yield Stmt(
                "UPDATE consolidated SET consolidated_content = ?, word_limit = ?, version = ?,"
                " unabsorbed_ids = ?, last_consolidated_at = ? WHERE id = ?",
                (*values, row[0]),
            )
            return str(row[0])
        # No blob yet: insert unless a concurrent writer just did (this waits for that writer's
        # commit), then look again under the lock.
        if (yield from count(insert, (blob_id, *key, *values))):
            return blob_id
    raise ConflictError(f"the {scope} blob changed while it was written: another consolidation ran; retry")


def clear_session_memory(d: Dialect, *, agent_id: str | None, user_id: str | None, session_id: str) -> Program[int]:
    """Delete one session's reflections and blob (with its versions); the reflections and blob
    removed (a blob's older versions go with it and are not counted again)."""
    where, args = reflection_where(d, "session", agent_id, user_id, session_id, by_session=True)
    n = yield from count(f"DELETE FROM reflections WHERE {where}", args)
    key = blob_key(d, "session", agent_id, user_id, session_id)
    n += yield from count(f"DELETE FROM consolidated WHERE {BLOB_KEY}", key)
    yield from count(f"DELETE FROM consolidated_versions WHERE {BLOB_KEY}", key)
    return n
