"""``forget``: a user's hard delete, once for every SQL dialect (sans-IO: see
:mod:`memlane.stores.sql`). What runs after the transaction to take the words out of the
files (an FTS5 merge and a WAL truncation; a vacuum and a GIN rebuild) is the backend's.

The order: unlink what the agent keeps (``shared="keep"``), then delete the user's facts with
their keyword rows, history and contributor links; with ``shared="erase"`` the agent-scope
reflections formed from their words and each blob those went into, with its versions (its
other reflections become unabsorbed, so the next consolidation rebuilds it without the user);
then the user's own reflections, blobs and blob versions, applied batches and review-queue
proposals; then rewrite the neighbour context of the turns beside deleted ones, drop or bump
the touched partitions' counters and authors, and move the database's purge generation
(caches keyed by counters must not take a new partition for the one they cached).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.facts import refresh_context
from memlane.stores.sql.proposals import purge_proposals
from memlane.stores.sql.reflections import reflection_where
from memlane.stores.sql.stmt import Program, Stmt, all_rows, count, one, run_all

__all__ = ["Purged", "drop_blob", "purge_user"]

#: (rows removed, the partitions that lost facts, whether any fact went)
Purged = tuple[int, list[str], bool]


def _delete_in(d: Dialect, sql: str, values: Sequence[Any], column: str) -> Program[int]:
    """``sql`` (a ``DELETE ... WHERE``) for ``column`` in ``values``, in chunks; rows deleted."""
    n = 0
    if d.delete_batch == 1:
        for value in values:
            n += yield from count(f"{sql} {column}=?", (value,))
        return n
    for i in range(0, len(values), d.delete_batch):
        cond, args = d.in_list(column, values[i : i + d.delete_batch])
        n += yield from count(f"{sql} {cond}", args)
    return n


def purge_user(d: Dialect, user_id: str, *, erase: bool) -> Program[Purged]:
    """Hard delete everything of ``user_id`` (see the module docstring for the order)."""
    uid = d.text(user_id)

    def mine(kind: str) -> str:
        return f"SELECT item_id FROM contributors WHERE user_id=? AND kind='{kind}'"

    where = "user_id=?" + (f" OR id IN ({mine('fact')})" if erase else "")
    wargs = (uid, uid) if erase else (uid,)
    if d.row_locks:  # lock the partitions about to change first (sorted, like every writer)
        rows = yield from all_rows(f"SELECT DISTINCT partition FROM facts WHERE {where}", wargs)
        yield from run_all(d.lock_partitions(sorted(r[0] for r in rows)))
    removed = 0
    if not erase:  # the agent keeps what the user told it, unlinked from the user
        yield Stmt(
            "UPDATE history SET user_id=NULL WHERE user_id=? AND fact_id IN"
            " (SELECT id FROM facts WHERE user_id=? AND scope IN ('agent', 'room'))",
            (uid, uid),
        )
        yield Stmt("UPDATE facts SET user_id=NULL WHERE user_id=? AND scope IN ('agent', 'room')", (uid,))
    victims = yield from all_rows(
        f"SELECT rowid, id, partition, session_id, seq FROM facts WHERE {where}{d.for_update}", wargs
    )
    rowids = [v[0] for v in victims]
    ids = [v[1] for v in victims]
    yield from run_all(d.drop_keywords(rowids))
    removed += yield from _delete_in(d, "DELETE FROM facts WHERE", rowids, "rowid")
    yield from _delete_in(d, "DELETE FROM fact_windows WHERE", ids, "fact_id")
    removed += yield from _delete_in(d, "DELETE FROM history WHERE", ids, "fact_id")
    removed += yield from count("DELETE FROM history WHERE user_id=?", (uid,))
    yield from _delete_in(d, "DELETE FROM contributors WHERE kind='fact' AND", ids, "item_id")
    if erase:
        refl = [r[0] for r in (yield from all_rows(mine("reflection"), (uid,)))]
        removed += yield from _delete_in(d, "DELETE FROM reflections WHERE", refl, "id")
        yield from _delete_in(d, "DELETE FROM contributors WHERE kind='reflection' AND", refl, "item_id")
        for (blob_id,) in (yield from all_rows(mine("blob"), (uid,))):
            removed += yield from drop_blob(d, blob_id)
    removed += yield from count("DELETE FROM reflections WHERE user_id=?", (uid,))
    removed += yield from count("DELETE FROM consolidated WHERE user_id=?", (uid,))
    removed += yield from count("DELETE FROM consolidated_versions WHERE user_id=?", (uid,))
    yield Stmt("DELETE FROM contributors WHERE user_id=?", (uid,))
    removed += yield from count("DELETE FROM applied_batches WHERE user_id=?", (uid,))
    removed += yield from purge_proposals(d, user_id)
    sessions: dict[tuple[str, str], list[int | None]] = {}
    for _, _, part, session_id, seq in victims:
        if session_id and seq is not None:
            sessions.setdefault((part, d.untext(session_id) or ""), []).append(seq)
    for (part, session_id), seqs in sessions.items():
        yield from refresh_context(d, part, session_id, seqs)
    parts = sorted({v[2] for v in victims})
    for part in parts:
        left = yield from one("SELECT 1 FROM facts WHERE partition=? LIMIT 1", (part,))
        if left is None:
            yield Stmt("DELETE FROM partitions WHERE partition=?", (part,))
            yield Stmt("DELETE FROM authors WHERE partition=?", (part,))
        else:
            yield Stmt("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (part,))
            yield Stmt(
                "DELETE FROM authors WHERE partition=? AND author NOT IN"
                " (SELECT author FROM facts WHERE partition=? AND author IS NOT NULL)",
                (part, part),
            )
    yield Stmt("UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key='generation'")
    return removed, parts, bool(victims)


def drop_blob(d: Dialect, blob_id: str) -> Program[int]:
    """Delete a consolidated blob with its versions and mark its scope's remaining reflections
    unabsorbed, so the next consolidation rebuilds the blob from them."""
    row = yield from one("SELECT scope, agent_id, user_id, session_id FROM consolidated WHERE id=?", (blob_id,))
    yield Stmt("DELETE FROM contributors WHERE kind='blob' AND item_id=?", (blob_id,))
    removed = yield from count("DELETE FROM consolidated_versions WHERE blob_id=?", (blob_id,))
    if row is None:
        return 0
    scope, agent_id, user_id, session_id = (row[0], *(d.untext(v) or None for v in row[1:]))
    where, args = reflection_where(d, scope, agent_id, user_id, session_id, by_session=scope == "session")
    yield Stmt(f"UPDATE reflections SET absorbed = ? WHERE {where}", (d.boolean(False), *args))
    return removed + (yield from count("DELETE FROM consolidated WHERE id=?", (blob_id,)))
