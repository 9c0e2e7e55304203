"""Point-in-time reads (docs/temporal.md): ``search``, ``list``, ``get``, ``context`` and
``profile`` with ``as_of=`` (record time: what memory held then) and ``valid_at=`` (world
time: what was true then).

The store reconstructs the scope's snapshot (:mod:`memlane.stores.sql.temporal`: the fact
rows and their history, replayed); this module ranks it as ``search`` ranks the live memory:
BM25 over the snapshot's texts (:mod:`memlane.retrieval.snapshot`) and cosines with the query
embeddings, fused by :func:`memlane.retrieval.hybrid.fuse` with the same settings. A version
whose text is the stored one keeps its stored vector; the others are embedded on the fly,
in one call. The live search path (:mod:`memlane.engine.search`) is not involved.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

import numpy as np

from memlane import inputs
from memlane.engine.base import EngineState
from memlane.engine.search import SearchMode, call_config, dedupe, fact_filter, redact_contributor
from memlane.errors import ConfigError, NotFoundError, ProviderError
from memlane.models import Candidate, Fact, FactFilter, FactScope, Hit, Page, Scope, SearchResult
from memlane.providers.embed.base import Matrix
from memlane.retrieval.hybrid import fuse
from memlane.retrieval.snapshot import bm25_scores
from memlane.retrieval.text import date_words, parse_query
from memlane.stores.base import FactStore, TemporalReadable, Vector

__all__ = ["Embed", "TemporalQuery", "get_at", "list_at", "search_at", "snapshot_store"]

#: Embeds document texts (the engine's embedder; None without one).
Embed = Callable[[list[str]], Awaitable[Matrix | None]]


class TemporalQuery:
    """The two times of a point-in-time read, checked: ``as_of`` (record time) and
    ``valid_at`` (world time), timezone-aware UTC; both None for a live read."""

    __slots__ = ("as_of", "valid_at")

    def __init__(self, as_of: datetime | str | None, valid_at: datetime | str | None) -> None:
        self.as_of = inputs.timestamp(as_of, "as_of")
        self.valid_at = inputs.timestamp(valid_at, "valid_at")

    @property
    def live(self) -> bool:
        """Neither time given: the ordinary read."""
        return self.as_of is None and self.valid_at is None


def snapshot_store(facts: FactStore) -> TemporalReadable:
    """The store's point-in-time reads, or ConfigError for a store without them."""
    if not isinstance(facts, TemporalReadable):
        raise ConfigError(f"{type(facts).__name__} has no point-in-time reads (as_of / valid_at)")
    return facts


def _when(t: TemporalQuery) -> str:
    parts = [
        f"as_of={t.as_of.isoformat()}" if t.as_of else "",
        f"valid_at={t.valid_at.isoformat()}" if t.valid_at else "",
    ]
    return " and ".join(p for p in parts if p)


async def get_at(facts: FactStore, fact_id: str, scope: Scope, t: TemporalQuery) -> Fact:
    """One fact as it was (NotFoundError if not recorded yet at ``as_of``, or if no version of
    it held at ``valid_at``)."""
    fact = await snapshot_store(facts).fact_as_of(fact_id, scope, t.as_of, t.valid_at)
    if fact is None:
        raise NotFoundError(f"no fact {fact_id!r} at {_when(t)}")
    return redact_contributor(fact, scope.user_id)


async def list_at(
    facts: FactStore,
    scope: Scope,
    t: TemporalQuery,
    *,
    limit: int,
    cursor: str | None,
    include_invalid: bool,
    flt: FactFilter | None,
    only: FactScope | None,
) -> Page:
    """A page of the snapshot, newest first (``cursor``: an offset into it, from ``next_cursor``)."""
    start = inputs.check_cursor(cursor) or 0
    narrowed = (flt or FactFilter()).in_session(scope.session_id)
    if narrowed is None:
        return Page(items=[], next_cursor=None, total=0)
    found = await snapshot_store(facts).snapshot(
        scope,
        as_of=t.as_of,
        valid_at=t.valid_at,
        filter=None if narrowed.empty else narrowed,
        only=only,
        include_invalid=include_invalid,
    )
    items = [f for f, _ in found]
    page = items[start : start + limit]
    more = start + limit < len(items)
    return Page(
        items=[redact_contributor(f, scope.user_id) for f in page],
        next_cursor=str(start + limit) if more else None,
        total=len(items),
    )


def _doc_text(f: Fact) -> str:
    """What keyword search reads of a fact: its text (a document's fragments are searched, not
    it) and its date in words."""
    return ("" if f.kind == "document" else f.content) + " " + date_words(f.occurred_at)


def _cosines(qvec: Any, vectors: Matrix) -> list[float]:
    q = np.asarray(qvec, dtype=np.float32)
    q = q / (np.linalg.norm(q) or 1.0)
    norms = np.linalg.norm(vectors, axis=1)
    norms[norms == 0] = 1.0
    return [float(x) for x in (vectors @ q) / norms]


async def _vectors(snapshot: list[tuple[Fact, Vector | None]], embed: Embed) -> Matrix | None:
    """One vector per snapshot fact: the stored one where its text is the stored text, the
    older texts embedded now (one call); zeros for a fact with no vector stored (no vector
    evidence, as in the live search); None when the embedder fails."""
    todo = [i for i, (_, v) in enumerate(snapshot) if v is None]
    fresh = await embed([snapshot[i][0].content for i in todo]) if todo else None
    if todo and fresh is None:
        return None
    dim = fresh.shape[1] if fresh is not None else max((len(v) for _, v in snapshot if v is not None), default=0)
    out = np.zeros((len(snapshot), dim), dtype=np.float32)
    for i, (_, v) in enumerate(snapshot):
        if v is not None and len(v) == dim:
            out[i] = v
    if fresh is not None:
        for j, i in enumerate(todo):
            out[i] = fresh[j]
    return out


async def search_at(
    engine: EngineState,
    scope: Scope,
    queries: list[str],
    t: TemporalQuery,
    top_k: int,
    filters: Mapping[str, Any] | None,
    debug: bool,
    mode: SearchMode,
    match_threshold: float | None,
    unique: bool,
) -> SearchResult:
    """``search`` over the snapshot at ``as_of`` / ``valid_at`` (see the module docstring), with
    ``engine``'s store, search settings and embedder. Access counts are not bumped: a look at
    the past is not a use of today's memory."""
    facts, searcher = engine.facts, engine.search_engine
    embed = engine._embeddings.embed if engine.embedder is not None else None
    t0 = time.perf_counter()
    queries, filters = searcher.redacted(queries, filters)  # as the live search: stored texts are redacted
    cfg = call_config(searcher.config, mode, match_threshold)
    requested, only = fact_filter(filters)
    narrowed = requested.in_session(scope.session_id)
    if narrowed is None:
        return SearchResult(hits=[], debug={"timings": {}, "filter": requested} if debug else None)
    readable = searcher.vector_queries(queries, match_threshold)
    use_vectors = embed is not None and searcher.embed_queries is not None and cfg.vector_weight > 0
    use_vectors = use_vectors and bool(readable) and mode != "substring"
    pairs = await snapshot_store(facts).snapshot(
        scope,
        as_of=t.as_of,
        valid_at=t.valid_at,
        filter=None if narrowed.empty else narrowed,
        only=only,
        vectors=use_vectors,
    )
    snap = [f for f, _ in pairs]
    by_id = {f.id: f for f in snap}
    wanted = top_k
    if mode == "substring":
        needles = [q.casefold() for q in queries]
        hits = [Hit(fact=f, score=1.0) for f in snap if any(n in f.content.casefold() for n in needles)]
    else:
        top_k = top_k * 3 if unique else top_k
        depth = max(cfg.depth, top_k)
        docs = [_doc_text(f) for f in snap]
        authors = list(dict.fromkeys(f.author for f in snap if f.author))
        kw_lists: list[list[Candidate]] = []
        for q in queries if mode != "vector" else []:
            kq = parse_query(q, authors, author_boost=cfg.author_boost)
            boost = {a.lower() for a in kq.boost_authors}
            scores = bm25_scores(kq.terms, docs)
            found = [
                Candidate(f.id, s * (kq.author_boost if f.author and f.author.lower() in boost else 1.0), f.author)
                for f, s in zip(snap, scores, strict=True)
                if s > 0
            ]
            found.sort(key=lambda c: -c.score)
            kw_lists.append(found[:depth])
        if mode == "vector":
            kw_lists = [[] for _ in queries]
        vec_lists: list[list[Candidate]] = []
        if use_vectors and embed is not None and searcher.embed_queries is not None and snap:
            try:
                qvecs = await searcher.embed_queries([queries[i] for i in readable])
                vectors = await _vectors(pairs, embed) if qvecs is not None else None
            except ProviderError:
                qvecs = vectors = None
            if qvecs is not None and vectors is not None:
                by_query: dict[int, list[Candidate]] = {}
                for j, i in enumerate(readable):
                    cos = _cosines(qvecs[j], vectors)
                    ranked = sorted(
                        (Candidate(f.id, c, f.author) for f, c in zip(snap, cos, strict=True)), key=lambda c: -c.score
                    )
                    by_query[i] = ranked[:depth]
                vec_lists = [by_query.get(i, []) for i in range(len(queries))]
        hits = []
        for fz in fuse(kw_lists, vec_lists, cfg, top_k=top_k):
            kr = min((r for n, r in fz.ranks.items() if n.startswith("keyword")), default=None)
            vr = min((r for n, r in fz.ranks.items() if n.startswith("vector")), default=None)
            ks = max((s for n, s in fz.raw.items() if n.startswith("keyword")), default=None)
            vs = max((s for n, s in fz.raw.items() if n.startswith("vector")), default=None)
            hits.append(
                Hit(
                    fact=by_id[fz.key],
                    score=fz.score,
                    keyword_rank=kr,
                    vector_rank=vr,
                    keyword_score=ks,
                    vector_score=vs,
                )
            )
    if unique:
        hits = dedupe(hits)
    hits = [h.model_copy(update={"fact": redact_contributor(h.fact, scope.user_id)}) for h in hits[:wanted]]
    dbg = None
    if debug:
        dbg = {
            "timings": {"total_ms": (time.perf_counter() - t0) * 1000},
            "queries": queries,
            "as_of": t.as_of,
            "valid_at": t.valid_at,
            "snapshot": len(snap),
            "config": cfg.model_dump(),
            "filter": narrowed,
        }
    return SearchResult(hits=hits, debug=dbg)
