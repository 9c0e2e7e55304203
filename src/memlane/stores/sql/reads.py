"""Long-term memory's reads, once for every SQL dialect (sans-IO: see :mod:`memlane.stores.sql`).

Every read names its partitions (a :class:`~memlane.models.Scope` or a
:class:`~memlane.stores.base.PartitionFilter`, resolved by
:func:`memlane.stores.sql.facts.partitions`); there is no unscoped read of facts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from memlane.errors import InvalidInputError
from memlane.inputs import check_cursor
from memlane.models import Fact, FactFilter, FactScope, HistoryEntry, Page, PartitionFilter, Scope
from memlane.stores.base import StoreStats
from memlane.stores.sql.dialect import FACT_COLS, Dialect
from memlane.stores.sql.facts import partitions, visible_row
from memlane.stores.sql.stmt import Program, all_rows, one

__all__ = [
    "authors",
    "authors_in",
    "digest",
    "get_facts",
    "get_facts_in",
    "history",
    "list_facts",
    "memory_stamp",
    "null_safe_eq",
    "stats",
]


def digest(parts: list[Any]) -> str:
    """A short stable token of JSON-able ``parts`` (for memory and reflection stamps)."""
    return hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=12).hexdigest()


def null_safe_eq(d: Dialect, column: str, value: str | None) -> tuple[str, list[Any]]:
    """``column`` equals ``value``, NULL equal to NULL, in a form every dialect can index."""
    if value is None:
        return f"{column} IS NULL", []
    return f"{column} = ?", [d.text(value)]


def get_facts(d: Dialect, fact_ids: Sequence[str], scope: Scope) -> Program[dict[str, Fact]]:
    """Facts by id, only those visible from ``scope``."""
    parts = yield from partitions(d, scope.partition_filter())
    return (yield from get_facts_in(d, fact_ids, parts))


def get_facts_in(d: Dialect, fact_ids: Sequence[str], parts: Sequence[str]) -> Program[dict[str, Fact]]:
    """Facts by id, only those in ``parts`` (the partitions a scope names, resolved)."""
    ids = list(dict.fromkeys(fact_ids))
    out: dict[str, Fact] = {}
    if not ids or not parts:
        return out
    pcond, pargs = d.in_list(d.unindexed("partition"), parts)
    for i in range(0, len(ids), d.chunk):
        icond, iargs = d.in_list("id", [d.text(x) for x in ids[i : i + d.chunk]])
        # SQLite: `+partition` keeps the planner on the id index (without ANALYZE statistics it
        # picked the partition index and scanned the whole partition: 131 ms at 100k rows).
        rows = yield from all_rows(f"SELECT {FACT_COLS} FROM facts WHERE {icond} AND {pcond}", (*iargs, *pargs))
        for r in rows:
            fact = d.fact(r)
            out[fact.id] = fact
    return out


def list_facts(
    d: Dialect,
    scope: Scope,
    *,
    limit: int,
    cursor: str | None,
    include_invalid: bool,
    filter: FactFilter | None,
    only: FactScope | None,
) -> Program[Page]:
    """Facts newest first, paginated by an opaque cursor; ``filter`` applied in the query."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or limit > 10_000:
        raise InvalidInputError("limit must be between 1 and 10000")
    before = check_cursor(cursor)
    pf = scope.partition_filter(only)
    flt = (filter or FactFilter()).in_session(scope.session_id)
    parts = yield from partitions(d, pf)
    if not parts or flt is None:  # no partition, or filters naming another session
        return Page(items=[], next_cursor=None, total=0)
    where, args = d.in_list("partition", parts)
    if not include_invalid:
        where += " AND invalid_at IS NULL"
    fsql, fargs = d.filter_sql(flt, "facts")
    where += fsql
    args += fargs
    total = yield from one(f"SELECT COUNT(*) FROM facts WHERE {where}", args)
    q = f"SELECT {FACT_COLS} FROM facts WHERE {where}"
    if before is not None:
        q += " AND rowid < ?"
        args.append(before)
    rows = yield from all_rows(q + " ORDER BY rowid DESC LIMIT ?", (*args, limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(
        items=[d.fact(r) for r in rows],
        next_cursor=str(rows[-1][0]) if more and rows else None,
        total=int(total[0]) if total else 0,
    )


def history(d: Dialect, fact_id: str, scope: Scope) -> Program[list[HistoryEntry]]:
    """All changes to a fact visible from ``scope``, oldest first."""
    yield from visible_row(d, fact_id, scope)
    rows = yield from all_rows(
        "SELECT id, fact_id, event, old_content, new_content, actor, at FROM history"
        " WHERE fact_id=? ORDER BY at, rowid",
        (d.text(fact_id),),
    )
    return [
        HistoryEntry(
            id=r[0],
            fact_id=d.untext(r[1]) or "",
            event=r[2],
            old_content=d.untext(r[3]),
            new_content=d.untext(r[4]),
            actor=d.untext(r[5]) or "",
            at=d.unts(r[6]),
        )
        for r in rows
    ]


def authors(d: Dialect, pf: PartitionFilter) -> Program[list[str]]:
    """Distinct authors of verbatim memories in these partitions."""
    parts = yield from partitions(d, pf)
    return (yield from authors_in(d, parts))


def authors_in(d: Dialect, parts: Sequence[str]) -> Program[list[str]]:
    """Distinct authors of verbatim memories in ``parts`` (resolved partitions)."""
    if not parts:
        return []
    cond, args = d.in_list("partition", parts)
    rows = yield from all_rows(f"SELECT DISTINCT author FROM authors WHERE {cond}", args)
    return [d.untext(r[0]) or "" for r in rows]


def memory_stamp(d: Dialect, pf: PartitionFilter) -> Program[str]:
    """A token that changes whenever a fact in these partitions is added, changed or removed
    (by any writer), and after a purge; reads counters only."""
    parts = sorted((yield from partitions(d, pf)))
    generation = yield from one("SELECT value FROM meta WHERE key='generation'")
    rows: list[Any] = []
    if parts:
        cond, args = d.in_list("partition", parts)
        rows = yield from all_rows(
            f"SELECT partition, appends, changes FROM partitions WHERE {cond} ORDER BY partition{d.byte_order}", args
        )
    return digest([generation[0] if generation else "", *map(list, rows)])


def stats(d: Dialect, scope: Scope | None, *, embedder: str | None, dim: int | None) -> Program[StoreStats]:
    """Fact counts (the whole store when ``scope`` is None: for operators, no content)."""
    where, args = "1=1", list[Any]()
    if scope is not None:
        parts = yield from partitions(d, scope.partition_filter())
        where, args = d.in_list("partition", parts or [""])
    row = yield from one(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN invalid_at IS NULL THEN 1 ELSE 0 END), 0), COUNT(DISTINCT partition)"
        f" FROM facts WHERE {where}",
        args,
    )
    facts, valid, nparts = (int(v) for v in row) if row else (0, 0, 0)
    st = StoreStats(facts=facts, valid_facts=valid, partitions=nparts, embedder=embedder, dim=dim)
    if scope is None:
        n = yield from one("SELECT COUNT(*) FROM reflections")
        st.reflections = int(n[0]) if n else 0
        n = yield from one("SELECT COUNT(*) FROM consolidated")
        st.consolidated = int(n[0]) if n else 0
        return st
    ucond, uargs = null_safe_eq(d, "user_id", scope.user_id)
    acond, aargs = null_safe_eq(d, "agent_id", scope.agent_id)
    n = yield from one(f"SELECT COUNT(*) FROM reflections WHERE {ucond} AND {acond}", (*uargs, *aargs))
    st.reflections = int(n[0]) if n else 0
    n = yield from one(  # blobs keep '' for "no id"
        "SELECT COUNT(*) FROM consolidated WHERE user_id = ? AND agent_id = ?",
        (d.text(scope.user_id or ""), d.text(scope.agent_id or "")),
    )
    st.consolidated = int(n[0]) if n else 0
    return st


def fact_owner(d: Dialect, fact_id: str) -> Program[Scope | None]:
    """The scope fact ``fact_id`` lives in, by its id alone (see ``FactStore.fact_owner``)."""
    rows = yield from all_rows(
        "SELECT user_id, agent_id, session_id, scope FROM facts WHERE id = ?", (d.text(fact_id),)
    )
    if not rows:
        return None
    user, agent, session, kind = (d.untext(v) if isinstance(v, str) else v for v in rows[0])
    return Scope(user_id=user or None, agent_id=agent or None, session_id=session if kind == "room" else None)
