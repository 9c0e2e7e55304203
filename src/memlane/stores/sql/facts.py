"""Long-term memory's write and read algorithms, once for every SQL dialect (sans-IO: see
:mod:`memlane.stores.sql`). Each function is a program run inside the caller's transaction.

* :func:`apply_changes`: a formation batch, exactly once per key: the batch row is claimed
  first (``ON CONFLICT DO NOTHING``: a concurrent replica waits on it, then replays the
  stored result), then each change is resolved by core policy
  (:func:`memlane.policy.resolve_change`) against the state read in this transaction.
* :func:`update_row` / :func:`invalidate_row`: a content change (version + 1) or a soft
  delete, with its history row, change counter, contributors and neighbours' context.
* :func:`refresh_context`: the neighbour-context keyword text of the turns around changed ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memlane.errors import ConflictError, InvalidInputError, NotFoundError
from memlane.models import Fact, PartitionFilter, Reflection, Scope, content_hash, fact_copy, new_id, utcnow
from memlane.policy import merge_provenance, resolve_change
from memlane.retrieval.context import CONTEXT_RADIUS, affected_range, neighbour_context, neighbour_contexts
from memlane.retrieval.text import date_words, keyword_text
from memlane.stores.base import AppliedChange, FactChange, Vector
from memlane.stores.sql.dialect import FACT_COLS, Dialect, NewFact
from memlane.stores.sql.stmt import MANY, Memo, Program, Row, Stmt, all_rows, count, one, run_all

__all__ = [
    "add_contributors",
    "apply_changes",
    "history",
    "insert_facts",
    "insert_reflection",
    "invalidate_facts",
    "invalidate_row",
    "partition_keys",
    "partitions",
    "put_facts",
    "refresh_context",
    "search_text",
    "update_fact",
    "update_row",
    "visible_row",
]


def search_text(kind: str, content: str) -> str:
    """What keyword search reads of a fact: a document's fragments are searched, not it; CJK
    runs as characters and pairs (:func:`memlane.retrieval.text.keyword_text`)."""
    return "" if kind == "document" else keyword_text(content)


def history(
    d: Dialect,
    fact_id: str,
    user_id: str | None,
    event: str,
    old: str | None,
    new: str | None,
    actor: str,
    at: datetime,
    effective: datetime | None = None,
) -> Stmt:
    """One history row: ``at`` when it was recorded, ``effective`` the world time the change
    took effect (an ADD's or UPDATE's text holds from then; a DELETE ends the fact then)."""
    return Stmt(
        "INSERT INTO history (id, fact_id, user_id, event, old_content, new_content, actor, at, effective_at)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        (
            new_id(),
            d.text(fact_id),
            d.text(user_id),
            event,
            d.text(old),
            d.text(new),
            d.text(actor),
            d.ts(at),
            None if effective is None else d.ts(effective),
        ),
    )


def add_contributors(d: Dialect, kind: str, item_id: str, user_ids: Sequence[str | None]) -> list[Stmt]:
    """Record that ``item_id`` holds words of ``user_ids`` (for ``forget``; never read back)."""
    return [
        Stmt(
            "INSERT INTO contributors (user_id, kind, item_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (d.text(uid), kind, item_id),
        )
        for uid in dict.fromkeys(u for u in user_ids if u)
    ]


def insert_reflection(d: Dialect, r: Reflection) -> list[Stmt]:
    """Store one reflection (a known id changes nothing); record its contributors when it is
    not keyed by a user (``forget`` finds it by them)."""
    return [
        Stmt(
            "INSERT INTO reflections (id, content, scope, agent_id, user_id, session_id, absorbed, formed_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            (
                r.id,
                d.text(r.content),
                r.scope,
                d.text(r.agent_id),
                d.text(r.user_id),
                d.text(r.session_id),
                d.boolean(r.absorbed),
                d.ts(r.formed_at),
            ),
        ),
        *(add_contributors(d, "reflection", r.id, r.source_user_ids) if r.user_id is None else ()),
    ]


def partition_keys(facts: Sequence[Fact]) -> list[str]:
    """Each fact's partition (which validates its scope fields), computed once per distinct scope."""
    seen: dict[tuple[str, str | None, str | None, str | None], str] = {}
    out = []
    for f in facts:
        key = (f.scope, f.agent_id, f.user_id, f.session_id if f.scope == "room" else None)
        part = seen.get(key)
        if part is None:
            part = seen[key] = f.partition
        out.append(part)
    return out


def put_facts(
    d: Dialect,
    facts: Sequence[Fact],
    vectors: Vector | None,
    actor: str,
    groups: Sequence[int] | None = None,
    windows: Sequence[Vector | None] | None = None,
    parts: Sequence[str] | None = None,
) -> Program[list[tuple[Fact, bool]]]:
    """Store facts (all or none) under their partitions' locks: :func:`insert_facts`
    (``parts``: :func:`partition_keys` of ``facts`` when the caller has them)."""
    parts = partition_keys(facts) if parts is None else parts
    yield from run_all(d.lock_partitions(sorted(set(parts))))
    return (yield from insert_facts(d, facts, vectors, actor, groups, parts=parts, windows=windows))


def write_windows(d: Dialect, items: Sequence[tuple[str, str, Vector | None]], *, replace: bool = False) -> list[Stmt]:
    """The window vectors of facts ``(fact_id, partition, (k, dim) matrix or None)``: rows
    1..k of ``fact_windows`` (window 0 is ``facts.embedding``); ``replace``: the facts' earlier
    windows are deleted first (a new text, or its first vectors)."""
    out: list[Stmt] = []
    if replace and items:
        out.append(Stmt("DELETE FROM fact_windows WHERE fact_id=?", [(d.text(fid),) for fid, _, _ in items], MANY))
    rows = [
        (d.text(fid), k, part, d.vector_value(vec))
        for fid, part, mat in items
        if mat is not None
        for k, vec in enumerate(mat, start=1)
    ]
    if rows:
        out.append(
            Stmt("INSERT INTO fact_windows (fact_id, win, partition, embedding) VALUES (?, ?, ?, ?)", rows, MANY)
        )
    return out


def insert_facts(
    d: Dialect,
    facts: Sequence[Fact],
    vectors: Vector | None,
    actor: str,
    groups: Sequence[int] | None = None,
    *,
    parts: Sequence[str] | None = None,
    windows: Sequence[Vector | None] | None = None,
) -> Program[list[tuple[Fact, bool]]]:
    """Insert in bulk, idempotently by content hash within a partition: one de-dup query and
    one next-seq query per partition, turn numbers counted here, multi-row inserts, and each
    new turn's neighbour context computed before its keyword row is written (only turns
    already stored beside new ones are rewritten). The rows, seqs, context and history are
    the same as inserting the facts one by one. Returns ``(stored fact, created)`` per input.

    ``groups``: sizes of consecutive runs of ``facts`` that each count as one append of the
    partitions they add rows to (``add_many``: one per session, as one ``add`` per session
    would); default: the whole call is one. ``parts``: :func:`partition_keys` of ``facts``
    when the caller has them. ``windows``: per fact, the vectors of its further windows
    (:func:`write_windows`), written with the new rows.
    """
    now = utcnow()
    parts = partition_keys(facts) if parts is None else parts
    hashes = [f.hash or content_hash(f.content) for f in facts]
    found: dict[tuple[str, str], Fact] = {}  # valid stored rows with an incoming (partition, hash)
    sessions: dict[str, set[str]] = {part: set() for part in dict.fromkeys(parts)}
    incoming: dict[str, dict[str, None]] = {part: {} for part in sessions}  # each partition's hashes, in order
    for f, part, h in zip(facts, parts, hashes, strict=True):
        incoming[part][h] = None
        if f.session_id:
            sessions[part].add(f.session_id)
    stored_max: dict[tuple[str, str], int | None] = {}  # (partition, session) -> highest stored seq
    for part, sids in sessions.items():
        want = list(incoming[part])
        for k in range(0, len(want), d.chunk):
            cond, args = d.in_list("hash", want[k : k + d.chunk])
            rows = yield from all_rows(
                f"SELECT {FACT_COLS} FROM facts WHERE partition=? AND {cond} AND invalid_at IS NULL", (part, *args)
            )
            found.update(((part, r[4]), d.fact(r)) for r in rows)
        ids = sorted(sids)
        for k in range(0, len(ids), d.chunk):
            cond, args = d.in_list("session_id", [d.text(x) for x in ids[k : k + d.chunk]])
            rows = yield from all_rows(
                f"SELECT session_id, MAX(seq) FROM facts WHERE partition=? AND {cond} GROUP BY session_id",
                (part, *args),
            )
            stored_max.update(((part, d.untext(sid) or ""), top) for sid, top in rows)
    next_seq = {key: 0 if top is None else top + 1 for key, top in stored_max.items()}
    out: list[tuple[Fact, bool]] = []
    new: list[tuple[int, Fact]] = []  # (input index, stored fact)
    turns: dict[tuple[str, str], list[tuple[int, int, str]]] = {}  # per session: (seq, index in new, text)
    for i, f in enumerate(facts):
        part, h = parts[i], hashes[i]
        hit = found.get((part, h))
        if hit is not None:
            out.append((hit, False))
            continue
        seq = f.seq
        if f.session_id:
            key = (part, f.session_id)
            if seq is None:
                if f.kind == "message":  # the next turn of its session
                    seq = next_seq.get(key, 0)
                    next_seq[key] = seq + 1
            elif seq >= next_seq.get(key, 0):
                next_seq[key] = seq + 1
        stored = fact_copy(f, {"hash": h, "seq": seq, "embedding": None})
        if stored.invalid_at is None:  # a later identical fact of this call finds this one
            found[(part, h)] = stored
            if seq is not None and f.session_id:  # a turn: its neighbours' words index it
                turns.setdefault(key, []).append((seq, len(new), f.content))
        new.append((i, stored))
        out.append((stored, True))
    if not new:
        return out
    rowids = yield from d.new_rowids(len(new))
    ctx = yield from _new_context(d, turns, len(new), stored_max)
    dates = Memo(date_words)
    rows_new = [
        NewFact(
            rowid=r,
            partition=parts[i],
            fact=s,
            vector=vectors[i] if vectors is not None else None,
            text="" if s.kind == "document" else keyword_text(s.content),  # search_text, inlined
            ctx=c,
            date=dates[s.occurred_at],
        )
        for (i, s), r, c in zip(new, rowids, ctx, strict=True)
    ]
    yield from run_all(d.insert_facts(rows_new))
    if windows is not None and vectors is not None:
        yield from run_all(write_windows(d, [(s.id, parts[i], windows[i]) for i, s in new if windows[i] is not None]))
    yield from run_all(d.insert_partitions(list(dict.fromkeys(parts[i] for i, _ in new))))
    authors = list(dict.fromkeys((parts[i], s.author) for i, s in new if s.author))
    if authors:
        yield Stmt(
            "INSERT INTO authors (partition, author) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(p, d.text(a)) for p, a in authors],
            MANY,
        )
    at, who, text, ts = d.ts(now), d.text(actor), d.text, Memo(d.ts)  # one timestamp value per distinct time
    yield Stmt(
        "INSERT INTO history (id, fact_id, user_id, event, old_content, new_content, actor, at, effective_at)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        [
            (new_id(), text(s.id), text(s.user_id), "ADD", None, text(s.content), who, at, ts[s.valid_from])
            for _, s in new
        ],
        MANY,
    )
    appends: dict[str, int] = {}  # one append per group per partition it added rows to
    created = [False] * len(facts)
    for i, _ in new:
        created[i] = True
    start = 0
    for size in list(groups) if groups is not None else [len(facts)]:
        for part in dict.fromkeys(parts[j] for j in range(start, start + size) if created[j]):
            appends[part] = appends.get(part, 0) + 1
        start += size
    yield Stmt(
        "UPDATE partitions SET appends = appends + ? WHERE partition=?", [(n, p) for p, n in appends.items()], MANY
    )
    return out


def _new_context(
    d: Dialect,
    turns: dict[tuple[str, str], list[tuple[int, int, str]]],
    n: int,
    stored_max: dict[tuple[str, str], int | None],
) -> Program[list[str]]:
    """The neighbour-context text of each of ``n`` new rows, computed before they are written
    (``turns``: per ``(partition, session)``, its new valid turns ``(seq, row index, text)``;
    the other rows get ""); turns already stored within :data:`CONTEXT_RADIUS` of new ones get
    theirs rewritten here (a session seen for the first time needs no read at all)."""
    out = [""] * n
    for (part, session_id), new in turns.items():
        seqs = [t[0] for t in new]
        lo, hi = min(seqs), max(seqs)
        by_seq = {seq: text for seq, _, text in new}
        stored: list[tuple[int, int, Any]] = []  # (rowid, seq, ctx) of stored turns whose context changes
        top = stored_max.get((part, session_id))
        if top is not None and top >= lo - CONTEXT_RADIUS:
            rows = yield from all_rows(
                d.context_rows_sql, (part, d.text(session_id), lo - 2 * CONTEXT_RADIUS, hi + 2 * CONTEXT_RADIUS)
            )
            valid = [r for r in rows if r[3]]
            by_seq = {r[1]: r[2] for r in valid} | by_seq
            stored = [(r[0], r[1], r[4]) for r in valid if lo - CONTEXT_RADIUS <= r[1] <= hi + CONTEXT_RADIUS]
        for (_, j, _), joined in zip(new, neighbour_contexts(by_seq, seqs), strict=True):
            out[j] = keyword_text(joined)
        changes = [
            (ctx, rowid)
            for (rowid, _, old), joined in zip(stored, neighbour_contexts(by_seq, [r[1] for r in stored]), strict=True)
            if (ctx := keyword_text(joined)) != old
        ]
        if changes:
            yield Stmt(d.set_context_sql, changes, MANY)
    return out


def partitions(d: Dialect, pf: PartitionFilter) -> Program[list[str]]:
    """The concrete partitions a filter names: exact keys plus, for each prefix, the stored
    partitions in the key range ``[prefix, prefix + "\\U0010ffff")`` (an index range scan)."""
    parts = list(pf.exact)
    for prefix in pf.prefixes:
        rows = yield from all_rows(d.partition_range_sql, (prefix, prefix + "\U0010ffff"))
        parts.extend(r[0] for r in rows if r[0] not in parts)
    return parts


def visible_row(d: Dialect, fact_id: str, scope: Scope, *, lock: bool = False) -> Program[Row]:
    """The fact's row if ``scope`` sees it (valid or not), else :class:`NotFoundError`. With
    ``lock`` (where the dialect locks rows): also take its partition's write lock and re-read
    the row under it."""
    parts = yield from partitions(d, scope.partition_filter())
    cond, args = d.in_list("partition", parts or [""])
    query = f"SELECT {FACT_COLS} FROM facts WHERE id=? AND {cond}"
    row = yield from one(query, (d.text(fact_id), *args))
    if row is not None and lock and d.row_locks:
        yield from run_all(d.lock_partitions([row[2]]))
        row = yield from one(query + d.for_update, (d.text(fact_id), *args))
    if row is None:
        raise NotFoundError(f"no fact {fact_id!r} in this scope")
    return tuple(row)


def refresh_context(d: Dialect, part: str, session_id: str, seqs: Sequence[int | None]) -> Program[None]:
    """Rewrite the neighbour-context keyword text of new, changed or removed turns' neighbours
    in one session (the text is core policy: :func:`memlane.retrieval.context.neighbour_context`).
    Rows in the range that are no longer valid get an empty context: their neighbours' words
    leave them."""
    span = affected_range(s for s in seqs if s is not None)
    if span is None:
        return
    lo, hi = span
    rows = yield from all_rows(d.context_rows_sql, (part, d.text(session_id), lo - CONTEXT_RADIUS, hi + CONTEXT_RADIUS))
    by_seq = {r[1]: r[2] for r in rows if r[3]}
    changes: list[tuple[str, int]] = []
    for rowid, seq, _, valid, old in rows:
        if not lo <= seq <= hi:
            continue
        ctx = keyword_text(neighbour_context(by_seq, seq)) if valid else ""
        if ctx != old:
            changes.append((ctx, rowid))
    if changes:
        yield Stmt(d.set_context_sql, changes, MANY)


def update_row(
    d: Dialect,
    row: Row,
    content: str,
    vector: Vector | None,
    actor: str,
    contributor: str | None = None,
    effective: datetime | None = None,
    windows: Vector | None = None,
) -> Program[Fact]:
    """Change one fact's content. ``contributor``: the user whose words the new content is
    (recorded when it is not the fact's own user). ``effective``: the world time the new text
    holds from (the statement's time; default now), the fact's new ``valid_from``.
    ``windows``: the new text's further window vectors (the old text's are dropped always)."""
    old = d.fact(row)
    fact_id = old.id
    if old.invalid_at is not None:
        raise InvalidInputError(f"fact {fact_id!r} was deleted; add a new fact instead")
    h = content_hash(content)
    clash = yield from one(
        "SELECT id FROM facts WHERE partition=? AND hash=? AND invalid_at IS NULL AND rowid<>?", (row[2], h, row[0])
    )
    if clash:
        raise InvalidInputError(f"an identical fact already exists: {d.untext(clash[0])}")
    now = utcnow()
    since = now if effective is None else min(effective, now)
    yield from run_all(d.set_content(row[0], content, h, now, search_text(old.kind, content), vector))
    yield from run_all(write_windows(d, [(fact_id, row[2], windows if vector is not None else None)], replace=True))
    yield Stmt("UPDATE facts SET valid_from=? WHERE rowid=?", (d.ts(since), row[0]))
    yield Stmt("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (row[2],))
    if contributor is not None and contributor != old.user_id:
        yield from run_all(add_contributors(d, "fact", fact_id, [contributor]))
    if old.session_id and old.seq is not None:  # neighbours' context held the old words
        yield from refresh_context(d, row[2], old.session_id, [old.seq])
    yield history(d, fact_id, old.user_id, "UPDATE", old.content, content, actor, now, since)
    return old.model_copy(
        update={"content": content, "hash": h, "version": old.version + 1, "updated_at": now, "valid_from": since}
    )


def invalidate_row(d: Dialect, row: Row, actor: str, until: datetime | None = None) -> Program[Fact]:
    """Soft-delete one fact (no-op when already invalid): out of the keyword index, history kept.
    ``until``: when it stopped holding in the world (a contradicting statement's time; never
    before its ``valid_from``), else now; the history row records now (record time)."""
    fact = d.fact(row)
    if fact.invalid_at is not None:
        return fact
    now = utcnow()
    ended = now if until is None else min(now, max(until, fact.valid_from))
    yield from run_all(d.invalidate(row[0], ended))
    yield Stmt("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (row[2],))
    if fact.session_id and fact.seq is not None:  # neighbours' context held its words
        yield from refresh_context(d, row[2], fact.session_id, [fact.seq])
    yield history(d, fact.id, fact.user_id, "DELETE", fact.content, None, actor, now, ended)
    return fact.model_copy(update={"invalid_at": ended})


def update_fact(
    d: Dialect,
    fact_id: str,
    scope: Scope,
    content: str,
    vector: Vector | None,
    actor: str,
    windows: Vector | None = None,
) -> Program[Fact]:
    """Change a visible fact's content (version + 1, history row)."""
    row = yield from visible_row(d, fact_id, scope, lock=True)
    return (yield from update_row(d, row, content, vector, actor, contributor=scope.user_id, windows=windows))


def invalidate_facts(d: Dialect, fact_ids: Sequence[str], scope: Scope, actor: str) -> Program[list[Fact]]:
    """Soft delete several facts: all visible, or nothing changes."""
    ids = list(dict.fromkeys(fact_ids))
    rows = []
    for fid in ids:
        rows.append((yield from visible_row(d, fid, scope)))
    if not d.row_locks:
        done = []
        for row in rows:
            done.append((yield from invalidate_row(d, row, actor)))
        return done
    yield from run_all(d.lock_partitions(sorted({r[2] for r in rows})))
    out: dict[int, Fact] = {}
    for row in sorted(rows, key=lambda r: int(r[0])):  # row locks in rowid order
        fresh = yield from one(f"SELECT {FACT_COLS} FROM facts WHERE rowid=?{d.for_update}", (row[0],))
        if fresh is None:  # purged meanwhile
            raise NotFoundError(f"no fact {d.untext(row[1])!r} in this scope")
        out[row[0]] = yield from invalidate_row(d, fresh, actor)
    return [out[row[0]] for row in rows]


# ---------------------------------------------------------------------- formation batches
def _encode_applied(changes: list[AppliedChange]) -> list[dict[str, Any]]:
    return [{"event": a.event, "fact": a.fact.model_dump(mode="json"), "previous": a.previous} for a in changes]


def _decode_applied(data: Any) -> list[AppliedChange]:
    return [AppliedChange(x["event"], Fact.model_validate(x["fact"]), x["previous"]) for x in data]


def apply_changes(
    d: Dialect,
    changes: Sequence[FactChange],
    reflections: Sequence[Reflection],
    *,
    key: str,
    actor: str,
) -> Program[list[AppliedChange]]:
    """Apply a formation batch, exactly once per ``key``.

    The batch's ``applied_batches`` row is inserted first (``ON CONFLICT DO NOTHING``): a
    replica applying the same key at the same time waits on that row's unique index until the
    first commits (then returns its result) or rolls back (then applies it itself).
    """
    claimed = yield from count(  # no RETURNING: SQLite has it only from 3.35
        "INSERT INTO applied_batches (key, user_id, at, result) VALUES (?, NULL, ?, ?) ON CONFLICT (key) DO NOTHING",
        (d.text(key), d.ts(utcnow()), d.json([])),
    )
    if not claimed:
        done = yield from one("SELECT result FROM applied_batches WHERE key=?", (d.text(key),))
        if done is None:  # purged between the two statements: nothing to replay
            raise ConflictError(f"batch {key!r} was removed while being replayed; retry")
        return _decode_applied(d.unjson(done[0]))
    parts: set[str] = set()
    for ch in changes:
        parts.add(ch.partition)
        if ch.fact is not None:
            parts.add(ch.fact.partition)
    yield from run_all(d.lock_partitions(sorted(parts)))
    out = []
    for ch in changes:
        out.append((yield from _apply_one(d, ch, actor)))
    for r in reflections:
        yield from run_all(insert_reflection(d, r))
    # the batch belongs to whoever's words it holds: the changes' own facts first
    # (an UPDATE's stored fact may carry the earlier contributor)
    owner = next((ch.fact.user_id for ch in changes if ch.fact is not None and ch.fact.user_id), None)
    owner = owner or next((a.fact.user_id for a in out if a.fact.user_id), None)
    owner = owner or next((r.user_id for r in reflections if r.user_id), None)
    owner = owner or next((u for r in reflections for u in r.source_user_ids), None)
    yield Stmt(
        "UPDATE applied_batches SET user_id=?, result=? WHERE key=?",
        (d.text(owner), d.json(_encode_applied(out)), d.text(key)),
    )
    return out


def _said_at(fact: Fact | None) -> datetime | None:
    """World time a superseding statement ends its target's validity: when it was said."""
    return None if fact is None else (fact.occurred_at or fact.valid_from)


def _target_row(d: Dialect, ch: FactChange) -> Program[Row | None]:
    """The change's target, only if it is a valid fact in the same partition as the change."""
    if ch.target_id is None:
        return None
    row = yield from one(
        f"SELECT {FACT_COLS} FROM facts WHERE id=? AND partition=?{d.for_update}", (d.text(ch.target_id), ch.partition)
    )
    if row is None or row[19] is not None:
        return None
    return tuple(row)


def _apply_one(d: Dialect, ch: FactChange, actor: str) -> Program[AppliedChange]:
    """Resolve one change with core policy against the state read in this transaction, then do it."""
    target_row = yield from _target_row(d, ch)
    target = d.fact(target_row) if target_row is not None else None
    new_fact = ch.fact
    # resolve_change looks up at most these hashes: read them first (its lookup is synchronous)
    hashes: set[str] = set()
    if new_fact is not None:
        hashes.add(new_fact.hash or content_hash(new_fact.content))
    text = ch.text or (new_fact.content if new_fact is not None else None)
    if ch.event == "UPDATE" and text:
        hashes.add(content_hash(text))
    found: dict[str, Fact] = {}
    if hashes:
        cond, args = d.in_list("hash", sorted(hashes))
        rows = yield from all_rows(
            f"SELECT {FACT_COLS} FROM facts WHERE partition=? AND {cond} AND invalid_at IS NULL", (ch.partition, *args)
        )
        found = {r[4]: d.fact(r) for r in rows}
    res = resolve_change(ch, target, found.get)
    if res.action in ("none", "retire"):
        assert res.existing is not None
        existing = res.existing
        previous = existing.content
        if res.action == "retire":  # the new fact is stored already; the value it replaces goes
            assert target_row is not None and res.retired is not None
            previous = (yield from invalidate_row(d, target_row, actor, _said_at(new_fact))).content
        yield history(
            d,
            existing.id,
            existing.user_id,
            "NONE",
            existing.content,
            new_fact.content if new_fact else None,
            actor,
            utcnow(),
        )
        return AppliedChange("NONE" if res.action == "none" else "DELETE", existing, previous)
    if res.action == "update":
        assert target_row is not None and target is not None and res.text is not None
        contributor = new_fact.user_id if new_fact is not None else None
        updated = yield from update_row(
            d,
            target_row,
            res.text,
            ch.vector,
            actor,
            contributor=contributor,
            effective=_said_at(new_fact),
            windows=ch.windows,
        )
        if new_fact is not None:
            sources, when = merge_provenance(updated, new_fact)
            yield from run_all(d.set_provenance(target_row[0], sources, when, date_words(when)))
            updated = updated.model_copy(update={"source_event_ids": sources, "occurred_at": when})
        if ch.metadata is not None:
            yield Stmt("UPDATE facts SET metadata=? WHERE rowid=?", (d.json(ch.metadata), target_row[0]))
            updated = updated.model_copy(update={"metadata": dict(ch.metadata)})
        return AppliedChange("UPDATE", updated, target.content)
    assert new_fact is not None
    previous_text = None
    if res.action == "delete":
        assert target_row is not None
        previous_text = (yield from invalidate_row(d, target_row, actor, _said_at(new_fact))).content
    vectors = ch.vector.reshape(1, -1) if ch.vector is not None else None
    stored, _ = (yield from insert_facts(d, [new_fact], vectors, actor, windows=[ch.windows]))[0]
    return AppliedChange("DELETE" if previous_text is not None else "ADD", stored, previous_text)
