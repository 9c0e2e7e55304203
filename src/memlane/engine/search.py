"""Search orchestration: one scope's hybrid search, from query text to ranked hits.

Data flow: queries (up to 3) -> keyword candidates per query (the store's BM25, then the
author boost here) and, concurrently, query embeddings -> vector candidates -> fusion
(:func:`memlane.retrieval.hybrid.fuse`: normalised score blend by default, or weighted RRF)
-> facts fetched in the scope (unless the candidates came with them) -> access counts bumped (written in the background:
:mod:`memlane.stores.sql.access`). Filters
are pushed down into the store's queries, so they cut candidates before ``limit``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from memlane.engine.embeddings import QueryVectors
from memlane.engine.redaction import ID_KEYS
from memlane.errors import InvalidInputError, ProviderError
from memlane.models import (
    FACT_KINDS,
    SCOPE_ALIASES,
    Candidate,
    Fact,
    FactFilter,
    FactScope,
    Hit,
    PartitionFilter,
    Scope,
    SearchResult,
)
from memlane.privacy.redaction import Redactor
from memlane.providers.embed.base import Matrix
from memlane.retrieval.feedback import expansion_terms, mix
from memlane.retrieval.fusion import Fused
from memlane.retrieval.hybrid import RetrievalConfig, fuse
from memlane.retrieval.text import mostly_non_latin, parse_query, query_terms
from memlane.stores.base import FactStore, SearchPrograms, SyncSearchReads

log = logging.getLogger("memlane")

#: Keyword lists are fetched this many times deeper when the author boost may reorder them.
BOOST_OVERFETCH = 3
#: Filter keys that name fact fields; any other key filters on ``metadata``.
FIELD_FILTERS = ("kind", "author", "session_id", "scope")
#: ``search(mode=...)``: ``hybrid`` (keyword + vector, fused), ``keyword`` or ``vector`` alone,
#: or ``substring`` (adk-rs's in-memory service: the memories holding the query, any case).
SearchMode = Literal["hybrid", "keyword", "vector", "substring"]
SEARCH_MODES: tuple[SearchMode, ...] = ("hybrid", "keyword", "vector", "substring")
#: ``unique=True`` fuses this many times ``top_k`` candidates, so duplicates dropped still
#: leave ``top_k`` hits when there are enough distinct ones.
UNIQUE_OVERFETCH = 3
#: ``mode="substring"`` reads the scope's memories in pages of this many.
SUBSTRING_PAGE = 1000


def fact_filter(filters: Mapping[str, Any] | None) -> tuple[FactFilter, FactScope | None]:
    """``search(filters=...)`` as a pushed-down :class:`FactFilter`, plus the ``scope`` filter
    (``"user"`` / ``"agent"`` / ``"room"``, or elizaOS's ``"private"`` / ``"shared"``), which
    selects partitions instead."""
    filters = dict(filters or {})
    scope = filters.pop("scope", None)
    scope = SCOPE_ALIASES.get(scope, scope) if isinstance(scope, str) else scope
    if scope not in (None, "user", "agent", "room"):
        raise InvalidInputError(f"filters['scope'] must be 'user', 'agent' or 'room', got {scope!r}")
    fields = {k: filters.pop(k) for k in ("kind", "author", "session_id") if k in filters}
    for key, value in fields.items():
        if not isinstance(value, str):
            raise InvalidInputError(f"filters[{key!r}] must be a string, got {type(value).__name__}")
    if "kind" in fields and fields["kind"] not in FACT_KINDS:
        raise InvalidInputError(f"filters['kind'] must be one of {', '.join(FACT_KINDS)}; got {fields['kind']!r}")
    return FactFilter(metadata=tuple(sorted(filters.items())), **fields), scope


def call_config(config: RetrievalConfig, mode: SearchMode, match_threshold: float | None) -> RetrievalConfig:
    """The retrieval settings of one call: ``mode`` leaves a side out (``keyword``: no vectors;
    ``vector``: no keywords), and ``match_threshold`` (elizaOS) is a hard cosine floor for
    this call, replacing ``min_vector_score`` and the soft margin (a threshold under
    ``vector_floor`` also lowers the cosine worth nothing:
    :func:`memlane.retrieval.hybrid.calibration_floor`)."""
    update: dict[str, Any] = {}
    if mode == "keyword":
        update["vector_weight"] = 0.0
    elif mode == "vector":
        update["keyword_weight"] = 0.0
        if config.vector_weight <= 0:
            update["vector_weight"] = 1.0
    if match_threshold is not None:
        update.update(min_vector_score=match_threshold, vector_margin=None)
    return config.model_copy(update=update) if update else config


def dedupe(hits: list[Hit]) -> list[Hit]:
    """The best hit of each distinct text (elizaOS ``unique``: case and spacing ignored)."""
    seen: set[str] = set()
    out: list[Hit] = []
    for h in hits:
        key = " ".join(h.fact.content.split()).casefold()
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out


def redact_contributor(fact: Fact, reader: str | None) -> Fact:
    """An agent's shared memory records which user it came from (so ``forget`` can erase it);
    other readers see it without that user's id."""
    if fact.scope != "user" and fact.user_id is not None and fact.user_id != reader:
        return fact.model_copy(update={"user_id": None})
    return fact


def _boosted(found: list[Candidate], boost: set[str], factor: float, limit: int) -> list[Candidate]:
    """Keyword candidates with the author boost applied (``boost``: lower-cased authors the
    query names), best first, at most ``limit``."""
    if not boost:
        return found
    for c in found:
        if c.author is not None and c.author.lower() in boost:
            c.score *= factor
    found.sort(key=lambda c: -c.score)
    return found[:limit]


def _likely_hits(kw_lists: list[list[Candidate]], top_k: int) -> list[str]:
    """The best ``top_k`` keyword matches of each query: most hits are among them, so a search
    program reads their rows while the query embedding is still running."""
    return list(dict.fromkeys(c.fact_id for lst in kw_lists for c in lst[:top_k] if c.score > 0))


@dataclass
class _Ran:
    """What a search program (:meth:`Searcher._program`, on the store's thread) found."""

    kw_lists: list[list[Candidate]]
    #: None: the scope is too large to score vectors there (the event loop's path does)
    vec_lists: list[list[Candidate]] | None = None
    qvecs: Matrix | None = None
    fused: list[Fused] = field(default_factory=list)
    rows: dict[str, Fact] = field(default_factory=dict)
    #: the query vectors (blocking), for the event loop's path of a large scope
    vectors: QueryVectors | None = None


class Searcher:
    """Hybrid search over one :class:`FactStore` (the engine's ``search``).

    Args:
        facts: the store searched.
        config: fusion settings (the engine swaps it between searches).
        embed_queries: embeds query texts; None without an embedder (keyword-only).
        latin_only: the embedder reads Latin-script text only (the default local MiniLM,
            ``Embedder.latin_only``). Its cosines between texts in other scripts are noise
            that clears the default floor (MiniLM: 0.36-0.54 between unrelated Japanese or
            Chinese sentences, "天気" -> "私の名前は太郎です" 0.42), so a query mostly in another
            script takes no vector evidence under the default floor: it is searched by keywords
            alone. An explicit ``match_threshold`` is the caller's own floor and still applies.
        redactor: the engine's redaction (``AsyncMemory(redact=...)``): queries and metadata
            filters are redacted as stored texts are, so ``[email]`` or a hash token matches.
        windowed: tells which texts are longer than the encoder reads (embedded in windows),
            for ``RetrievalConfig.window_bonus`` (a search with it runs in stages, not as one
            store program); None: no memory counts as long.
    """

    def __init__(
        self,
        facts: FactStore,
        config: RetrievalConfig,
        embed_queries: Callable[[list[str]], Awaitable[Matrix | None]] | None,
        *,
        latin_only: bool = False,
        redactor: Redactor | None = None,
        query_vectors: Callable[[list[str]], QueryVectors | None] | None = None,
        remember_vectors: Callable[[list[str], Matrix], None] | None = None,
        windowed: Callable[[list[str]], Awaitable[list[bool]]] | None = None,
    ) -> None:
        self.facts = facts
        self.config = config
        self.embed_queries = embed_queries
        self.latin_only = latin_only
        self.redactor = redactor
        self.query_vectors = query_vectors
        self.remember_vectors = remember_vectors
        self.windowed = windowed
        #: Run a search as one program on the store's thread when the store can
        #: (:class:`SearchPrograms`; tests compare both paths).
        self.programs = True

    def redacted(
        self, queries: list[str], filters: Mapping[str, Any] | None
    ) -> tuple[list[str], Mapping[str, Any] | None]:
        """The queries and filters as search reads them (the engine's redaction applied)."""
        red = self.redactor
        if red is None:
            return queries, filters
        queries = [r if (r := red.redact(q)).strip() else q for q in queries]  # drop mode: a query of PII only
        if filters:
            filters = {k: v if k in FIELD_FILTERS or k in ID_KEYS else red.redact_value(v) for k, v in filters.items()}
        return queries, filters

    def vector_queries(self, queries: list[str], match_threshold: float | None) -> list[int]:
        """Indexes of the queries the vector side searches: all of them, except, with a
        Latin-only embedder under the default floor, those mostly in another script."""
        if not self.latin_only or match_threshold is not None:
            return list(range(len(queries)))
        return [i for i, q in enumerate(queries) if not mostly_non_latin(q)]

    async def keyword(
        self,
        pf: PartitionFilter,
        query: str,
        authors: Sequence[str],
        *,
        limit: int,
        flt: FactFilter,
        scope: Scope | None = None,
    ) -> list[Candidate]:
        """BM25 candidates, then the author boost: memories by an author the query names
        score ``author_boost`` times higher (core policy, not the store's). With feedback on
        (``RetrievalConfig.feedback``) and a ``scope`` to read the hits' texts in, the query is
        then expanded with terms of its best hits and searched again (RM3,
        :mod:`memlane.retrieval.feedback`); the first search's candidates are re-scored with
        the second's scores (none is added)."""
        cfg = self.config
        found = await self._keyword_once(pf, query, authors, limit=limit, flt=flt)
        if not cfg.feedback or scope is None or not found:
            return found
        top = found[: cfg.feedback_docs]
        texts = {c.fact_id: c.fact.content for c in top if c.fact is not None}
        missing = [c.fact_id for c in top if c.fact_id not in texts]
        if missing:
            texts.update({k: f.content for k, f in (await self.facts.get_facts(missing, scope, settle=False)).items()})
        docs = [(texts[c.fact_id], c.score) for c in top if c.fact_id in texts]
        extra = expansion_terms(query_terms(query), docs, terms=cfg.feedback_terms)
        if not extra:
            return found
        second = await self._keyword_once(pf, query + " " + " ".join(extra), authors, limit=limit, flt=flt)
        return mix(found, second, weight=cfg.feedback_weight)

    async def _keyword_once(
        self, pf: PartitionFilter, query: str, authors: Sequence[str], *, limit: int, flt: FactFilter
    ) -> list[Candidate]:
        kq = parse_query(query, authors, author_boost=self.config.author_boost)
        boost = {a.lower() for a in kq.boost_authors}
        fetch = limit * BOOST_OVERFETCH if boost else limit
        found = await self.facts.keyword_search(pf, kq.terms, limit=fetch, filter=flt)
        return _boosted(found, boost, kq.author_boost, limit)

    def _keyword_sync(
        self,
        reads: SyncSearchReads,
        pf: PartitionFilter,
        query: str,
        authors: Sequence[str],
        *,
        limit: int,
        flt: FactFilter,
    ) -> list[Candidate]:
        """:meth:`_keyword_once` inside a search program."""
        kq = parse_query(query, authors, author_boost=self.config.author_boost)
        boost = {a.lower() for a in kq.boost_authors}
        fetch = limit * BOOST_OVERFETCH if boost else limit
        found = reads.keyword_search(pf, kq.terms, limit=fetch, filter=flt)
        return _boosted(found, boost, kq.author_boost, limit)

    async def search(
        self,
        scope: Scope,
        queries: list[str],
        *,
        top_k: int,
        filters: Mapping[str, Any] | None,
        debug: bool,
        use_vectors: bool,
        mode: SearchMode = "hybrid",
        match_threshold: float | None = None,
        unique: bool = False,
    ) -> SearchResult:
        t0 = time.perf_counter()
        queries, filters = self.redacted(queries, filters)
        cfg = call_config(self.config, mode, match_threshold)
        requested, only = fact_filter(filters)
        narrowed = requested.in_session(scope.session_id)
        if narrowed is None:  # filters name another session than session_id: nothing matches
            return SearchResult(hits=[], debug={"timings": {}, "filter": requested} if debug else None)
        flt, pf = narrowed, scope.partition_filter(only)
        if mode == "substring":
            return await self._substring(
                scope, queries, top_k=top_k, flt=flt, only=only, unique=unique, t0=t0, debug=debug
            )
        wanted, top_k = top_k, top_k * UNIQUE_OVERFETCH if unique else top_k
        depth = max(cfg.depth, top_k)
        timings: dict[str, float] = {}
        t = time.perf_counter()
        readable = self.vector_queries(queries, match_threshold)
        use_vectors = use_vectors and self.embed_queries is not None and cfg.vector_weight > 0 and bool(readable)
        ran = await self._run_program(
            scope, pf, queries, readable, mode=mode, depth=depth, top_k=top_k, flt=flt, cfg=cfg,
            use_vectors=use_vectors, timings=timings, t=t,
        )  # fmt: skip
        if ran is not None and ran.vec_lists is not None:
            kw_lists, vec_lists, qvecs, fused, rows = ran.kw_lists, ran.vec_lists, ran.qvecs, ran.fused, ran.rows
            t = time.perf_counter()
        else:
            vec_task: asyncio.Future[tuple[Matrix | None, list[list[Candidate]]]] | None
            if ran is not None:  # a large scope: its vectors are scored off the store's thread
                kw_lists = ran.kw_lists
                vec_task = (
                    asyncio.ensure_future(
                        self._vectors(pf, queries, readable, depth=depth, flt=flt, timings=timings, got=ran.vectors)
                    )
                    if ran.vectors is not None
                    else None
                )
            else:
                kw_lists, vec_task = await self._keywords_and_vectors(
                    scope, pf, queries, readable, mode=mode, depth=depth, flt=flt, use_vectors=use_vectors,
                    timings=timings, t=t,
                )  # fmt: skip
            qvecs, vec_lists = await vec_task if vec_task is not None else (None, [])
            t = time.perf_counter()
            if cfg.window_bonus > 0 and self.windowed is not None and any(vec_lists):
                vec_lists = await self._window_bonus(scope, vec_lists, cfg.window_bonus)
            fused = fuse(kw_lists, vec_lists, cfg, top_k=top_k)
            # the hits' rows: those the candidate search returned (PostgreSQL), the rest read
            rows = {c.fact_id: c.fact for lst in (*kw_lists, *vec_lists) for c in lst if c.fact is not None}
            missing = [f.key for f in fused if f.key not in rows]
            if missing:
                rows.update(await self.facts.get_facts(missing, scope, settle=False))
        hits: list[Hit] = []
        for f in fused:
            fact = rows.get(f.key)
            if fact is None:
                continue
            fact = redact_contributor(fact, scope.user_id)
            kr = min((r for n, r in f.ranks.items() if n.startswith("keyword")), default=None)
            vr = min((r for n, r in f.ranks.items() if n.startswith("vector")), default=None)
            ks = max((s for n, s in f.raw.items() if n.startswith("keyword")), default=None)
            vs = max((s for n, s in f.raw.items() if n.startswith("vector")), default=None)
            hits.append(
                Hit(fact=fact, score=f.score, keyword_rank=kr, vector_rank=vr, keyword_score=ks, vector_score=vs)
            )
        if unique:
            hits = dedupe(hits)
        hits = hits[:wanted]
        timings["fuse_fetch_ms"] = timings.get("fuse_fetch_ms", 0.0) + (time.perf_counter() - t) * 1000
        await self.facts.record_access([h.fact.id for h in hits])
        timings["total_ms"] = (time.perf_counter() - t0) * 1000
        dbg = None
        if debug:
            dbg = {
                "timings": timings,
                "queries": queries,
                "keyword": [[(c.fact_id, c.score) for c in lst] for lst in kw_lists],
                "vector": [[(c.fact_id, c.score) for c in lst] for lst in vec_lists],
                "config": cfg.model_dump(),
                "vectors_used": qvecs is not None,
                "filter": flt,
            }
        return SearchResult(hits=hits, debug=dbg)

    async def _keywords_and_vectors(
        self,
        scope: Scope,
        pf: PartitionFilter,
        queries: list[str],
        readable: list[int],
        *,
        mode: SearchMode,
        depth: int,
        flt: FactFilter,
        use_vectors: bool,
        timings: dict[str, float],
        t: float,
    ) -> tuple[list[list[Candidate]], asyncio.Future[tuple[Matrix | None, list[list[Candidate]]]] | None]:
        """The keyword lists, with the vector side (embedding, then its statements) started
        first so that it runs while the keyword side does (one store call per stage)."""
        vec_task = (
            asyncio.ensure_future(self._vectors(pf, queries, readable, depth=depth, flt=flt, timings=timings))
            if use_vectors
            else None
        )
        try:
            authors = await self.facts.authors(pf)
            if mode == "vector":  # keywords left out
                kw_lists: list[list[Candidate]] = [[] for _ in queries]
            else:
                kw_lists = list(
                    await asyncio.gather(
                        *(self.keyword(pf, q, authors, limit=depth, flt=flt, scope=scope) for q in queries)
                    )
                )
                if getattr(self.facts, "authors_cached", False):  # a store answering authors from a
                    fresh = await self.facts.authors(pf)  # cache its keyword search refreshed: free
                    if set(fresh) != set(authors):  # a speaker came or went since: boost with them
                        authors = fresh
                        kw_lists = list(
                            await asyncio.gather(
                                *(self.keyword(pf, q, authors, limit=depth, flt=flt, scope=scope) for q in queries)
                            )
                        )
        except BaseException:
            if vec_task is not None:
                vec_task.cancel()
                await asyncio.gather(vec_task, return_exceptions=True)
            raise
        timings["keyword_ms"] = (time.perf_counter() - t) * 1000
        return kw_lists, vec_task

    async def _run_program(
        self,
        scope: Scope,
        pf: PartitionFilter,
        queries: list[str],
        readable: list[int],
        *,
        mode: SearchMode,
        depth: int,
        top_k: int,
        flt: FactFilter,
        cfg: RetrievalConfig,
        use_vectors: bool,
        timings: dict[str, float],
        t: float,
    ) -> _Ran | None:
        """The search as one program on the store's thread (:class:`SearchPrograms`): keyword
        lists, then (the query vectors computed meanwhile on another thread) vector scoring,
        fusion and the hits' rows: one thread hand-off. None when the store cannot, keyword
        feedback is on, or the query vectors need the event loop (a remote embedder): the
        stages then run one store call each."""
        facts = self.facts
        if not self.programs or cfg.feedback or cfg.window_bonus > 0 or not isinstance(facts, SearchPrograms):
            return None
        texts = [queries[i] for i in readable]
        vectors: QueryVectors | None = None
        if use_vectors:
            vectors = self.query_vectors(texts) if self.query_vectors is not None else None
            if vectors is None:
                return None
        got = vectors

        def program(reads: SyncSearchReads) -> _Ran:
            authors = reads.authors(pf)
            kw_lists: list[list[Candidate]] = [[] for _ in queries]
            if mode != "vector":
                kw_lists = [self._keyword_sync(reads, pf, q, authors, limit=depth, flt=flt) for q in queries]
                fresh = reads.authors(pf)  # the keyword search refreshed them
                if set(fresh) != set(authors):  # a speaker came or went since: boost with them
                    kw_lists = [self._keyword_sync(reads, pf, q, fresh, limit=depth, flt=flt) for q in queries]
            timings["keyword_ms"] = (time.perf_counter() - t) * 1000
            ran = _Ran(kw_lists, [])
            if got is not None:
                scorer = reads.vector_scorer(pf, limit=depth, filter=flt)
                if scorer is None:
                    ran.vec_lists = None
                    return ran
                if not got.done():  # the query is still being embedded: read the likely hits meanwhile
                    ran.rows = reads.get_facts(_likely_hits(kw_lists, top_k), scope)
                try:
                    ran.qvecs, ready = got()
                    # when the vectors were there (computed while the keyword stage ran; 0: cached)
                    timings["embed_ms"] = max(0.0, ready - t) * 1000
                except ProviderError as exc:
                    log.warning("memlane: query embedding failed (%s); keyword-only results", exc)
                    timings["embed_ms"] = (time.perf_counter() - t) * 1000
                if ran.qvecs is not None:
                    tv = time.perf_counter()
                    by_query = {i: scorer(ran.qvecs[j]) for j, i in enumerate(readable)}
                    ran.vec_lists = [by_query.get(i, []) for i in range(len(queries))]
                    timings["vector_ms"] = (time.perf_counter() - tv) * 1000
            tf = time.perf_counter()
            ran.fused = fuse(kw_lists, ran.vec_lists or [], cfg, top_k=top_k)
            need = [f.key for f in ran.fused if f.key not in ran.rows]
            if need:
                ran.rows.update(reads.get_facts(need, scope))
            timings["fuse_fetch_ms"] = (time.perf_counter() - tf) * 1000
            return ran

        ran = await facts.run_search(program)
        ran.vectors = got
        if ran.qvecs is not None and self.remember_vectors is not None:
            self.remember_vectors(texts, ran.qvecs)
        return ran

    async def _window_bonus(
        self, scope: Scope, vec_lists: list[list[Candidate]], bonus: float
    ) -> list[list[Candidate]]:
        """``RetrievalConfig.window_bonus``: the vector candidates whose memory is embedded in
        windows get ``bonus`` added to their cosine, each list re-sorted. Their rows are read
        here (unless the store returned them) and kept on the candidates for the hits."""
        assert self.windowed is not None
        missing = list(dict.fromkeys(c.fact_id for lst in vec_lists for c in lst if c.fact is None))
        rows = await self.facts.get_facts(missing, scope, settle=False) if missing else {}
        facts = {c.fact_id: c.fact or rows.get(c.fact_id) for lst in vec_lists for c in lst}
        known = [(k, f.content) for k, f in facts.items() if f is not None]
        flags = await self.windowed([text for _, text in known])
        long = {k for (k, _), w in zip(known, flags, strict=True) if w}
        out: list[list[Candidate]] = []
        for lst in vec_lists:
            raised = [
                replace(c, score=c.score + bonus if c.fact_id in long else c.score, fact=facts[c.fact_id]) for c in lst
            ]
            raised.sort(key=lambda c: -c.score)  # stable: equal scores keep the store's order
            out.append(raised)
        return out

    async def _vectors(
        self,
        pf: PartitionFilter,
        queries: list[str],
        readable: list[int],
        *,
        depth: int,
        flt: FactFilter,
        timings: dict[str, float],
        got: QueryVectors | None = None,
    ) -> tuple[Matrix | None, list[list[Candidate]]]:
        """The queries' embeddings (``readable`` ones; ``got``: from that blocking function, on
        a worker thread), then their vector candidates (one list per query, empty for the
        others); no vectors when the embedder fails (logged)."""
        assert self.embed_queries is not None
        t = time.perf_counter()
        qvecs: Matrix | None
        try:
            if got is not None:
                found, _ = await asyncio.to_thread(got)
                if self.remember_vectors is not None:
                    self.remember_vectors([queries[i] for i in readable], found)
                qvecs = found
            else:
                qvecs = await self.embed_queries([queries[i] for i in readable])
        except ProviderError as exc:
            log.warning("memlane: query embedding failed (%s); keyword-only results", exc)
            qvecs = None
        timings["embed_ms"] = (time.perf_counter() - t) * 1000
        if qvecs is None:
            return None, []
        t = time.perf_counter()
        found_vec = await asyncio.gather(
            *(self.facts.vector_search(pf, qvecs[j], limit=depth, filter=flt) for j in range(len(readable)))
        )
        by_query = dict(zip(readable, found_vec, strict=True))
        timings["vector_ms"] = (time.perf_counter() - t) * 1000
        return qvecs, [by_query.get(i, []) for i in range(len(queries))]

    async def _substring(
        self,
        scope: Scope,
        queries: list[str],
        *,
        top_k: int,
        flt: FactFilter,
        only: FactScope | None,
        unique: bool,
        t0: float,
        debug: bool,
    ) -> SearchResult:
        """adk-rs ``InMemoryMemoryService``: the memories whose text holds a query (any case),
        newest first, each with score 1.0 (a match; there is no ranking)."""
        needles = [q.casefold() for q in queries]
        hits: list[Hit] = []
        cursor: str | None = None
        while len(hits) < top_k:
            page = await self.facts.list_facts(scope, limit=SUBSTRING_PAGE, cursor=cursor, filter=flt, only=only)
            for fact in page.items:
                text = fact.content.casefold()
                if any(n in text for n in needles):
                    hits.append(Hit(fact=redact_contributor(fact, scope.user_id), score=1.0))
            if unique:
                hits = dedupe(hits)
            cursor = page.next_cursor
            if cursor is None:
                break
        hits = hits[:top_k]
        await self.facts.record_access([h.fact.id for h in hits])
        dbg = {"timings": {"total_ms": (time.perf_counter() - t0) * 1000}, "queries": queries, "filter": flt}
        return SearchResult(hits=hits, debug=dbg if debug else None)
