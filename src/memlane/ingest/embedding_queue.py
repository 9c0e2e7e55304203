"""The background embedding queue (elizaOS ``queueEmbeddingGeneration``): bulk ingestion
without waiting for the embedder.

``add(..., embed="high" | "normal" | "low")`` stores the memories at once, keyword-searchable,
and hands their ids to this queue; one background task embeds them in batches, every ``high``
fact before any ``normal`` one, every ``normal`` before any ``low``. A batch holds one priority
only; a ``high`` fact queued while a ``low`` batch runs goes next.

Nothing depends on the queue's memory: a fact stored without a vector is the durable record
that it still needs one. When the in-memory lists are empty the worker asks the store for
facts still lacking vectors (left by a restart, a crash, a failed inline embedding) and
embeds those too, oldest first. A failing embedder loses nothing: the batch goes back to the
front of its list and is retried after a backoff (0.5 s doubling up to ``max_retry_delay``);
the facts stay keyword-searchable meanwhile.

Batch size: a priority with a short list is embedded in batches of ``batch_size`` (64), so a
``high`` fact waits for little; a backlog of ``4 * batch_size`` or more (a bulk import,
``add_many(..., embed="low")``) is embedded in batches of up to ``max_batch_size`` (1,024)
across sessions, as are the store's facts left without vectors: one call of 1,024 LoCoMo
turns embeds ~1.45x more turns per CPU-second than 16 calls of 64 (numpy MiniLM; the
embedder sorts a call's texts by length, so bigger calls pad less).

The texts are read from the store when a batch is embedded, not kept in the queue: a fact
deleted or forgotten while queued is skipped (its text never reaches the embedder), and the
queue holds ids only. A fact updated, deleted or forgotten while its batch is at the embedder
does not get that vector: before writing, the batch re-reads which facts still wait with the
text it embedded (a change landing between that read and the write, one database round trip,
is the remaining window).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

from memlane.providers.embed.windows import Embedded
from memlane.stores.base import FactStore

log = logging.getLogger("memlane")

Priority = Literal["high", "normal", "low"]
#: Priorities, most urgent first.
PRIORITIES: tuple[Priority, ...] = ("high", "normal", "low")
#: Facts per embedding call.
DEFAULT_BATCH_SIZE = 64
#: Facts per embedding call when a backlog builds up (bulk ingest, backfill after a restart).
MAX_BATCH_SIZE = 1024


class EmbeddingQueue:
    """Priority queue of fact ids waiting for vectors, and the task that embeds them.

    Args:
        facts: the fact store (texts are read from it, vectors written to it).
        embed: embeds a list of texts (the engine's checked embedding call).
        batch_size: facts per embedding call.
        max_batch_size: facts per embedding call once a priority's list holds at least
            ``4 * batch_size``, and per scan of the store for facts left without vectors.
        retry_delay: first wait after a failed batch (doubles per consecutive failure).
        max_retry_delay: longest wait between retries.
    """

    def __init__(
        self,
        facts: FactStore,
        embed: Callable[[list[str]], Awaitable[Embedded | None]],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_size: int = MAX_BATCH_SIZE,
        retry_delay: float = 0.5,
        max_retry_delay: float = 60.0,
    ) -> None:
        self.facts = facts
        self.embed = embed
        self.batch_size = batch_size
        self.max_batch_size = max(batch_size, max_batch_size)
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._queues: dict[Priority, OrderedDict[str, None]] = {p: OrderedDict() for p in PRIORITIES}
        self._done = 0
        self._failed = 0
        self._failures_in_a_row = 0
        self._last_error: BaseException | None = None
        self._idle = False  # True once the store had nothing left to embed and no id is queued
        self._changed: asyncio.Condition | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ queueing
    def put(self, fact_ids: Iterable[str], priority: Priority) -> None:
        """Queue facts for embedding (an id already queued keeps its place and priority,
        unless ``priority`` is more urgent: then it moves up). Starts the worker."""
        rank = PRIORITIES.index(priority)
        added = False
        for fid in fact_ids:
            current = next((p for p in PRIORITIES if fid in self._queues[p]), None)
            if current is not None and PRIORITIES.index(current) <= rank:
                continue
            if current is not None:
                del self._queues[current][fid]
            self._queues[priority][fid] = None
            added = True
        if added:
            self._idle = False
        self.start()

    def start(self) -> None:
        """Start the worker on the running loop (idempotent); it first looks in the store for
        facts left without vectors."""
        if self._closed:
            return
        if self._wake is None:
            self._wake = asyncio.Event()
            self._changed = asyncio.Condition()
        self._idle = False  # the worker looks again (in the store too) before it says so
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="memlane-embedding-queue")

    def progress(self) -> dict[str, Any]:
        """Counts for a progress bar: queued per priority, ``queued`` in all, ``done`` (facts
        embedded by the queue since the memory was opened), ``failed`` (facts in batches
        that failed; they stay queued and are retried), ``last_error``, and ``idle``
        (nothing queued and nothing left without a vector in the store)."""
        queued: dict[str, int] = {p: len(q) for p, q in self._queues.items()}
        return {
            **queued,
            "queued": sum(queued.values()),
            "done": self._done,
            "failed": self._failed,
            "last_error": None if self._last_error is None else str(self._last_error),
            "idle": self._idle,
        }

    async def drain(self) -> None:
        """Wait until every queued fact (and every fact of the store lacking a vector) is
        embedded. Raises the embedder's error when a batch fails meanwhile: the facts stay
        queued and the worker keeps retrying them in the background."""
        self.start()
        assert self._changed is not None
        failures = self._failed
        async with self._changed:
            await self._changed.wait_for(lambda: self._idle or self._failed > failures or self._closed)
        if self._failed > failures and not self._idle and self._last_error is not None:
            raise self._last_error

    async def close(self) -> None:
        """Stop the worker. What it had not embedded stays in the store without vectors and is
        embedded after the next open."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    # ------------------------------------------------------------------ worker
    def _next_batch(self) -> tuple[Priority, list[str]] | None:
        for priority in PRIORITIES:
            queue = self._queues[priority]
            if queue:
                size = self.batch_size if len(queue) < 4 * self.batch_size else self.max_batch_size
                ids = []
                for fid in queue:
                    ids.append(fid)
                    if len(ids) == size:
                        break
                for fid in ids:
                    del queue[fid]
                return priority, ids
        return None

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._closed:
            batch = self._next_batch()
            priority, ids = batch if batch is not None else ("low", [])
            if await self._step(ids, from_store=batch is None):
                await self._notify()
                continue
            if self._idle:
                self._wake.clear()
                await self._notify()
                await self._wake.wait()
                continue
            if batch is not None:  # failed: back to the front of its list, in order
                queue = self._queues[priority]
                for fid in reversed(ids):
                    if not any(fid in q for q in self._queues.values()):
                        queue[fid] = None
                        queue.move_to_end(fid, last=False)
            await self._notify()
            await asyncio.sleep(min(self.max_retry_delay, self.retry_delay * 2 ** (self._failures_in_a_row - 1)))

    async def _step(self, ids: list[str], *, from_store: bool) -> bool:
        """Embed one batch: ``ids`` from the lists, or (``from_store``) the oldest facts the
        store holds without vectors. False when it failed or (``_idle``) there was nothing."""
        rows: list[tuple[str, str]] = []
        try:
            if from_store:
                rows = await self.facts.missing_embeddings(limit=self.max_batch_size)
                if not rows:
                    self._idle = True
                    return False
            else:
                rows = await self.facts.missing_embeddings(limit=len(ids), fact_ids=ids)
                if not rows:  # deleted, forgotten or embedded meanwhile
                    return True
            embedded = await self.embed([text for _, text in rows])
            if embedded is None:  # no embedder
                self._idle = True
                return False
            # The embedder may have taken a while: a fact updated meanwhile (with its own new
            # vector), deleted or forgotten must not get the old text's vector. Only the facts
            # still waiting with the very text embedded get theirs.
            waiting = dict(await self.facts.missing_embeddings(limit=len(rows), fact_ids=[fid for fid, _ in rows]))
            keep = [i for i, (fid, text) in enumerate(rows) if waiting.get(fid) == text]
            if keep:
                windows = [embedded.windows[i] for i in keep]
                await set_embeddings(self.facts, [rows[i][0] for i in keep], Embedded(embedded.vectors[keep], windows))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the embedder or the store failed: keep everything, retry
            self._failed += len(rows) or len(ids) or 1
            self._failures_in_a_row += 1
            self._last_error = exc
            log.warning("memlane: background embedding failed (%s); will retry", exc)
            return False
        self._done += len(rows)
        self._failures_in_a_row = 0
        return True


async def set_embeddings(facts: FactStore, fact_ids: list[str], embedded: Embedded) -> None:
    """``facts.set_embeddings`` with the windows when a text has some (a store is called as
    before issue 22 when none has)."""
    windows = embedded.windows_or_none()
    if windows is None:
        await facts.set_embeddings(fact_ids, embedded.vectors)
    else:
        await facts.set_embeddings(fact_ids, embedded.vectors, windows=windows)
