"""The embedding lifecycle: embed for storage and for queries, defer on failure, backfill,
the background queue (:mod:`memlane.ingest.embedding_queue`), its progress and drain.

A failing embedder never loses an ``add``: the rows are stored keyword-only and
:attr:`EmbeddingLifecycle.pending` is set, so the next successful write (or the background
queue, once one runs) embeds what the store lacks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.engine.status import EmbeddingProgress
from memlane.errors import EmbedderError, ProviderError
from memlane.ingest.embedding_queue import EmbeddingQueue, Priority, set_embeddings
from memlane.providers.embed.base import (
    Embedder,
    Matrix,
    check_matrix,
    embed_query_texts,
    sync_query_embedding,
)
from memlane.providers.embed.windows import Embedded, Windowing, extra_windows, window_limit
from memlane.stores.base import FactStore

__all__ = ["QUERY_CACHE_SIZE", "EmbeddingLifecycle", "EmbeddingMethods", "Prestart", "QueryVectors"]

log = logging.getLogger("memlane")

#: Query embeddings kept in memory (LRU).
QUERY_CACHE_SIZE = 1024


class _Timed(Future[Matrix]):
    """A query embedding's future that knows when its result arrived (``perf_counter``)."""

    ready_at = 0.0

    def set_result(self, result: Matrix) -> None:
        self.ready_at = time.perf_counter()
        super().set_result(result)


class Prestart:
    """Query embeddings a thread computes itself while the search it waits for runs (the
    sync facade, issue 22): :meth:`EmbeddingLifecycle.prestart` registers them, :meth:`run`
    embeds them in the calling thread, :meth:`close` settles what :meth:`run` did not and
    forgets the entries the search did not take."""

    def __init__(
        self, owner: EmbeddingLifecycle, embed: Callable[[list[str]], Matrix], futures: dict[str, _Timed]
    ) -> None:
        self.owner, self.embed, self.futures = owner, embed, futures

    def run(self) -> None:
        """Embed the registered texts here (an embedder error goes to the search, which then
        searches by keywords as it would have; nothing is raised)."""
        pending = {t: f for t, f in self.futures.items() if not f.done()}
        if not pending:
            return
        texts = list(pending)
        embedder = self.owner.embedder
        assert embedder is not None
        try:
            out = check_matrix(self.embed(texts), len(texts), embedder.dim, embedder.name)
        except Exception as exc:
            for f in pending.values():
                f.set_exception(exc)
            return
        except BaseException:  # KeyboardInterrupt: the search must not wait for vectors forever
            self.close()
            raise
        for t, v in zip(texts, out, strict=True):
            pending[t].set_result(v)

    def close(self) -> None:
        """Fail what was not embedded, forget the entries still registered (idempotent)."""
        for t, f in self.futures.items():
            if not f.done():
                f.set_exception(EmbedderError("the query embedding was not computed"))
            if self.owner.prestarted.get(t) is f:
                self.owner.prestarted.pop(t, None)


class QueryVectors:
    """Query vectors on their way (:meth:`EmbeddingLifecycle.query_vectors`): calling it
    blocks until they are there and returns them (stacked, in the queries' order) with the
    ``time.perf_counter`` when the last one was computed (0.0: all were cached); raises the
    embedder's error."""

    def __init__(
        self,
        queries: list[str],
        cached: dict[str, Matrix],
        taken: dict[str, _Timed],
        missing: list[str],
        job: Future[tuple[Matrix, float]] | None,
    ) -> None:
        self.queries, self.cached, self.taken, self.missing, self.job = queries, cached, taken, missing, job

    def done(self) -> bool:
        """Whether calling would not wait."""
        return all(f.done() for f in self.taken.values()) and (self.job is None or self.job.done())

    def __call__(self) -> tuple[Matrix, float]:
        vecs = dict(self.cached)
        ready = 0.0
        for q, f in self.taken.items():
            vecs[q] = f.result()
            ready = max(ready, f.ready_at)
        if self.job is not None:
            out, at = self.job.result()
            vecs.update(zip(self.missing, out, strict=True))
            ready = max(ready, at)
        return np.stack([vecs[q] for q in self.queries]), ready


class EmbeddingLifecycle:
    """The engine's vectors over one fact store.

    Args:
        facts: the store vectors are written to (and its embedder bound to on first use).
        embedder: None for a keyword-only memory.
        query_cache: the LRU of query embeddings (the engine's ``_query_cache``, which
            benchmarks clear to time real query embeddings).
    """

    def __init__(
        self,
        facts: FactStore,
        embedder: Embedder | None,
        query_cache: OrderedDict[str, Any],
        windowing: Callable[[], Windowing] = Windowing,
    ) -> None:
        self.facts = facts
        self.embedder = embedder
        self.query_cache = query_cache
        #: how long texts are windowed, read at each embedding (the engine's retrieval config)
        self.windowing = windowing
        #: Facts may lack vectors (checked once after open; set again when an embedding fails).
        self.pending = True
        #: The background queue (``add(embed="high"|"normal"|"low")``), made on first use.
        self.queue: EmbeddingQueue | None = None
        #: Query embeddings being computed by the threads waiting for searches (:meth:`prestart`).
        self.prestarted: dict[str, _Timed] = {}
        #: Query embeddings of :meth:`query_vectors` (a blocking embedder off the event loop).
        self._query_pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    async def embed(self, texts: list[str], query: bool = False) -> Matrix | None:
        """The embedder's checked vectors for ``texts`` (None without an embedder or texts)."""
        if self.embedder is None or not texts:
            return None
        out = await (embed_query_texts(self.embedder, texts) if query else self.embedder.embed_batch(texts))
        out = check_matrix(out, len(texts), self.embedder.dim, self.embedder.name)
        if self.facts.dim is None:
            await self.facts.bind_embedder(self.embedder.name, int(out.shape[1]))
        return out

    async def embed_stored(self, texts: list[str], windowed: Sequence[bool] | None = None) -> Embedded | None:
        """Vectors for texts about to be stored, with the windows of those longer than the
        encoder reads (``windowed[i]`` False: text ``i`` gets its one vector only, e.g. a
        document row, which is never searched itself). One embedder call for all of them.
        None without an embedder or texts."""
        if self.embedder is None or not texts:
            return None
        windowing = self.windowing()
        extra: list[list[str]] = [[] for _ in texts]
        limit = window_limit(self.embedder, windowing)
        if limit is not None and any(len(t) > limit[1] for t in texts):
            wanted = [t if windowed is None or windowed[i] else "" for i, t in enumerate(texts)]
            # tokenising long texts takes a while: off the event loop
            extra = await asyncio.to_thread(extra_windows, self.embedder, wanted, windowing)
        flat = list(texts) + [w for ws in extra for w in ws]
        out = await self.embed(flat)
        assert out is not None
        n = len(texts)
        windows: list[Matrix | None] = []
        at = n
        for ws in extra:
            windows.append(out[at : at + len(ws)] if ws else None)
            at += len(ws)
        return Embedded(out[:n], windows)

    async def windowed(self, texts: list[str]) -> list[bool]:
        """Whether each text is longer than the encoder reads, i.e. embedded in windows under
        today's window settings (:func:`~memlane.providers.embed.windows.extra_windows`; a
        text of at most the window size in characters is never tokenised)."""
        windowing = self.windowing()
        limit = window_limit(self.embedder, windowing)
        if self.embedder is None or limit is None or not any(len(t) > limit[1] for t in texts):
            return [False] * len(texts)
        extra = await asyncio.to_thread(extra_windows, self.embedder, texts, windowing)
        return [bool(ws) for ws in extra]

    async def embed_queries(self, queries: list[str]) -> Matrix | None:
        """Embed queries through a small LRU cache: agents repeat queries (preload per turn)."""
        assert self.embedder is not None
        missing = [q for q in dict.fromkeys(queries) if q not in self.query_cache]
        taken = {q: f for q in missing if (f := self.prestarted.pop(q, None)) is not None}
        if taken:  # embedded by the thread waiting for this search
            missing = [q for q in missing if q not in taken]
            for q, f in taken.items():
                self.query_cache[q] = await asyncio.wrap_future(f)
        if missing:
            vecs = await self.embed(missing, query=True)
            assert vecs is not None
            for q, v in zip(missing, vecs, strict=True):
                self.query_cache[q] = v
        for q in queries:
            self.query_cache.move_to_end(q)
        while len(self.query_cache) > QUERY_CACHE_SIZE:
            self.query_cache.popitem(last=False)
        return np.stack([self.query_cache[q] for q in queries])

    def prestart(self, texts: list[str]) -> Prestart | None:
        """Register query texts a thread about to wait for a search embeds itself (any
        thread; :class:`Prestart`): those neither cached nor being embedded already. None when
        there are none, without a blocking embedder, or before the store knows its vectors'
        dimension (the first embedding binds it, on the event loop)."""
        embedder = self.embedder
        if embedder is None or self.facts.dim is None:
            return None
        embed = sync_query_embedding(embedder)
        if embed is None:
            return None
        mine: dict[str, _Timed] = {}
        for t in dict.fromkeys(texts):
            if t in self.query_cache or t in self.prestarted:
                continue
            f = _Timed()
            if self.prestarted.setdefault(t, f) is f:
                mine[t] = f
        return Prestart(self, embed, mine) if mine else None

    def query_vectors(self, queries: list[str]) -> QueryVectors | None:
        """The queries' vectors without the event loop (:class:`QueryVectors`, to call on
        another thread): from the cache, from the embeddings a waiting
        thread computes (:meth:`prestart`) and, for the rest, from the embedder's blocking path
        started now on a worker thread. Raises the embedder's error. None without a blocking
        path for a query that needs one (the caller awaits :meth:`embed_queries`). Record the
        result with :meth:`remember`."""
        embedder = self.embedder
        if embedder is None or self.facts.dim is None:
            return None
        cached = {q: self.query_cache[q] for q in queries if q in self.query_cache}
        need = [q for q in dict.fromkeys(queries) if q not in cached]
        embed = sync_query_embedding(embedder)
        if embed is None and any(q not in self.prestarted for q in need):
            return None
        taken = {q: f for q in need if (f := self.prestarted.pop(q, None)) is not None}
        missing = [q for q in need if q not in taken]
        job: Future[tuple[Matrix, float]] | None = None
        if missing:
            assert embed is not None

            def compute() -> tuple[Matrix, float]:
                out = check_matrix(embed(missing), len(missing), embedder.dim, embedder.name)
                return out, time.perf_counter()

            job = self._pool().submit(compute)

        return QueryVectors(queries, cached, taken, missing, job)

    def remember(self, queries: list[str], vectors: Matrix) -> None:
        """Keep :meth:`query_vectors`' result in the query cache (on the event loop)."""
        for q, v in zip(queries, vectors, strict=True):
            self.query_cache[q] = v
            self.query_cache.move_to_end(q)
        while len(self.query_cache) > QUERY_CACHE_SIZE:
            self.query_cache.popitem(last=False)

    def _pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._query_pool is None:
                self._query_pool = ThreadPoolExecutor(2, thread_name_prefix="memlane-query")
            return self._query_pool

    async def embed_or_defer(self, texts: list[str], windowed: Sequence[bool] | None = None) -> Embedded | None:
        """Embed for storage (:meth:`embed_stored`); on provider failure store without vectors
        (backfilled later)."""
        try:
            return await self.embed_stored(texts, windowed)
        except ProviderError as exc:
            log.warning("memlane: embedding failed (%s); stored keyword-only, will backfill later", exc)
            self.pending = True
            return None

    def background(self) -> EmbeddingQueue:
        """The background queue, started on first use."""
        if self.queue is None:
            self.queue = EmbeddingQueue(self.facts, self.embed_stored)
            self.pending = False  # the queue's worker embeds what the store lacks
        return self.queue

    def put(self, ids: list[str], priority: Priority) -> None:
        """Queue stored facts' ids for the background worker."""
        self.background().put(ids, priority)

    async def catch_up(self) -> None:
        """After a write with vectors: embed what an earlier failure left without them."""
        if self.queue is not None:  # its worker embeds what the store lacks, in the background
            if self.pending:
                self.pending = False
                self.queue.start()
            return
        if self.pending and self.embedder is not None:
            try:
                await self.backfill()
            except ProviderError as exc:
                log.warning("memlane: embedding backfill failed again (%s); will retry later", exc)

    async def backfill(self, batch_size: int = 256) -> int:
        """Embed facts stored without vectors; returns how many got vectors."""
        batch_size = inputs.integer(batch_size, "batch_size", 1, 10_000)
        if self.embedder is None:
            return 0
        done = 0
        while True:
            rows = await self.facts.missing_embeddings(limit=batch_size)
            if not rows:
                break
            embedded = await self.embed_stored([text for _, text in rows])
            assert embedded is not None
            await set_embeddings(self.facts, [fid for fid, _ in rows], embedded)
            done += len(rows)
        self.pending = False
        return done

    def progress(self) -> EmbeddingProgress:
        """The background queue's counts (all zero, idle, before it was first used)."""
        return EmbeddingProgress() if self.queue is None else EmbeddingProgress(**self.queue.progress())

    async def drain(self) -> EmbeddingProgress:
        """Wait until every queued fact, and every fact stored without a vector, has its
        vector (raises the embedder's error when a batch fails meanwhile)."""
        if self.embedder is not None:
            await self.background().drain()
        return self.progress()

    async def close(self) -> None:
        """Stop the background worker (what it had not embedded is embedded after the next open)."""
        if self.queue is not None:
            await self.queue.close()
        with self._pool_lock:
            pool, self._query_pool = self._query_pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown)


class EmbeddingMethods(EngineState):
    """The engine's methods for the embedding lifecycle: ``embedding_progress``,
    ``drain_embeddings``, ``backfill_embeddings``."""

    @opening
    async def embedding_progress(self) -> EmbeddingProgress:
        """The background embedding queue's counts: ``high`` / ``normal`` / ``low`` and
        ``queued`` (facts waiting), ``done`` (embedded since open), ``failed`` (facts of
        batches that failed; they stay queued and are retried), ``last_error``, ``idle``."""
        return self._embeddings.progress()

    @opening
    async def drain_embeddings(self) -> EmbeddingProgress:
        """Wait until every queued fact, and every fact stored without a vector (from before
        a restart, or a failed embedding), has its vector. Raises the embedder's error when
        a batch fails meanwhile (the facts stay keyword-searchable and queued; the worker
        retries them). Returns :meth:`embedding_progress`."""
        return await self._embeddings.drain()

    @opening
    async def backfill_embeddings(self, *, batch_size: int = 256) -> int:
        """Embed facts stored without vectors (e.g. while the embedder was failing).

        Returns:
            How many facts got vectors.
        """
        return await self._embeddings.backfill(batch_size)
