"""The write path of ``add``, ``add_many`` and ``add_document``: arguments checked, rows built
(verbatim turns keep author, time and session position; long texts become a document and
its fragments), one batched embedding call per chunk (or the background queue), one
transaction per chunk. ``add(infer=True)`` queues a formation job instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, cast

from memlane import inputs
from memlane.engine.embeddings import EmbeddingLifecycle
from memlane.engine.redaction import redact_messages, redact_metadata
from memlane.errors import InvalidInputError, ScopeError, UsageError
from memlane.formation.runner import FormationRunner
from memlane.ingest import messages as messages_
from memlane.ingest.bulk import CHUNK_ROWS, AddBatch, as_batch, collector_paused
from memlane.ingest.documents import split_documents
from memlane.ingest.messages import Message
from memlane.models import Fact, Job, Scope
from memlane.privacy.redaction import Redactor
from memlane.providers.embed.windows import Embedded
from memlane.stores.base import FactStore, GroupWritable

__all__ = ["Writer", "write_scope"]

Rows = list[Fact]


def write_scope(
    scope: object, user_id: str | None, agent_id: str | None, session_id: str | None, what: str
) -> Literal["user", "agent", "room"]:
    """A write's scope name checked against the ids it needs (elizaOS names mapped)."""
    fact_scope = inputs.fact_scope(scope)
    if fact_scope == "user" and not user_id:
        raise ScopeError(f"{what} needs user_id=... for user-scoped (private) memory")
    if fact_scope == "agent" and not agent_id:
        raise ScopeError(f"{what} with scope='agent' (shared) needs agent_id=...")
    if fact_scope == "room" and not (agent_id and session_id):
        raise ScopeError(f"{what} with scope='room' needs agent_id=... and session_id=... (the room)")
    Scope(user_id=user_id, agent_id=agent_id)  # validates the ids
    return fact_scope


class Writer:
    """Stores what ``add`` / ``add_many`` / ``add_document`` are given.

    Args:
        facts: the fact store written to.
        embeddings: the engine's embedding lifecycle (inline vectors, or the background queue).
        formation: the formation runner (``add(infer=True)`` queues a job on it).
        redactor: ``AsyncMemory(redact=...)``: texts and metadata are redacted before anything
            is built from them (rows, idempotency hashes, vectors, queued turns).
    """

    def __init__(
        self,
        facts: FactStore,
        embeddings: EmbeddingLifecycle,
        formation: FormationRunner,
        redactor: Redactor | None = None,
    ) -> None:
        self.facts = facts
        self.embeddings = embeddings
        self.formation = formation
        self.redactor = redactor

    def redact_text(self, text: Any) -> Any:
        """A text redacted (what is not a text is left for the input checks)."""
        return self.redactor.redact(text) if self.redactor is not None and isinstance(text, str) else text

    def redact_data(self, value: Any) -> Any:
        """Every string in ``value`` (metadata) redacted, ids kept (:data:`~memlane.engine.redaction.ID_KEYS`)."""
        return redact_metadata(self.redactor, value) if self.redactor is not None else value

    async def add(
        self,
        messages: str | Sequence[Message],
        *,
        user_id: str | None,
        agent_id: str | None,
        session_id: str | None,
        metadata: Mapping[str, Any] | None,
        infer: bool,
        scope: object,
        timestamp: datetime | None,
        wait: bool,
        kind: object,
        embed: object,
    ) -> list[Fact] | Job:
        """:meth:`memlane.memory.AsyncMemory.add`, arguments unchecked."""
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        infer, wait = inputs.flag(infer, "infer"), inputs.flag(wait, "wait")
        fact_scope = write_scope(scope, user_id, agent_id, session_id, "add()")
        metadata, timestamp = inputs.metadata(metadata), inputs.timestamp(timestamp)
        fact_kind, priority = inputs.memory_kind(kind), inputs.embed_priority(embed)
        if not wait and not infer:
            raise UsageError("wait=False only applies to infer=True (verbatim writes are immediate)")
        meta = dict(self.redact_data(metadata or {}))
        redacted = redact_messages(self.redactor, messages)
        if redacted is None:  # drop mode left nothing to store
            return []
        messages = cast("str | Sequence[Message]", redacted)
        if infer:
            if fact_kind is not None or priority != "now" or fact_scope == "room":
                raise UsageError("kind=, embed= and scope='room' apply to verbatim writes, not to infer=True")
            return await self._infer(messages, user_id, agent_id, session_id, meta, fact_scope, timestamp, wait)
        facts = messages_.to_facts(
            messages,
            scope=fact_scope,
            user_id=user_id,
            agent_id=agent_id,
            session_id=session_id,
            metadata=meta,
            timestamp=timestamp,
            kind=fact_kind,
        )
        rows, firsts = split_documents(facts)
        stored = await self.store_rows(rows, priority)
        return [stored[i] for i in firsts]

    async def _infer(
        self,
        messages: str | Sequence[Message],
        user_id: str | None,
        agent_id: str | None,
        session_id: str | None,
        meta: dict[str, Any],
        scope: Literal["user", "agent"],
        timestamp: datetime | None,
        wait: bool,
    ) -> list[Fact] | Job:
        facts = (
            []
            if isinstance(messages, str | bytes)
            else messages_.to_facts(
                messages,
                scope=scope,
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                metadata=meta,
                timestamp=timestamp,
            )
        )
        turns = messages_.to_turns(messages, facts, timestamp=timestamp)
        job = await self.formation.enqueue_infer(
            turns, user_id=user_id, agent_id=agent_id, session_id=session_id, scope=scope, metadata=meta
        )
        if not wait:
            self.formation.start()
            return job
        result = await self.formation.wait_for(job)
        return result.facts

    def _verbatim_rows(self, b: AddBatch) -> tuple[Rows, list[int]]:
        """One ``add_many`` batch checked as verbatim ``add`` checks its arguments: its rows
        (documents followed by their fragments) and the index of each input's first row."""
        user_id, agent_id, session_id = inputs.scope_ids(b.user_id, b.agent_id, b.session_id)
        fact_scope = write_scope(b.scope, user_id, agent_id, session_id, "add_many()")
        metadata, timestamp = inputs.metadata(b.metadata), inputs.timestamp(b.timestamp)
        messages = redact_messages(self.redactor, b.messages)
        if messages is None:  # drop mode left nothing to store
            return [], []
        facts = messages_.to_facts(
            messages,
            scope=fact_scope,
            user_id=user_id,
            agent_id=agent_id,
            session_id=session_id,
            metadata=dict(self.redact_data(metadata or {})),
            timestamp=timestamp,
            kind=inputs.memory_kind(b.kind),
        )
        return split_documents(facts)

    async def store_rows(self, rows: Rows, embed: str) -> Rows:
        """Write rows (documents followed by their fragments), embedded now (``embed="now"``)
        or queued for the background worker at that priority."""
        queued: list[str] = []
        [stored] = await self._store_groups([rows], embed, queued)
        if queued:
            self.embeddings.put(queued, embed)  # type: ignore[arg-type]
        return stored

    async def add_many(self, batches: Iterable[AddBatch | Mapping[str, Any]], *, embed: object) -> list[Rows]:
        """:meth:`memlane.memory.AsyncMemory.add_many`, arguments unchecked."""
        priority = inputs.embed_priority(embed)
        with collector_paused():  # every row built here lives until the call returns
            return await self._add_many(batches, priority)

    async def _add_many(self, batches: Iterable[AddBatch | Mapping[str, Any]], priority: str) -> list[Rows]:
        checked: list[tuple[Rows, list[int]]] = []
        for index, item in enumerate(batches):
            try:
                checked.append(self._verbatim_rows(as_batch(item, index)))
            except InvalidInputError as exc:
                raise type(exc)(f"batch {index}: {exc}") from exc
        out: list[Rows] = []
        queued: list[str] = []  # new ids to embed in the background (embed != "now")
        start = 0
        try:
            while start < len(checked):
                end, rows = start, 0
                while end < len(checked) and (rows == 0 or rows + len(checked[end][0]) <= CHUNK_ROWS):
                    rows += len(checked[end][0])
                    end += 1
                chunk = checked[start:end]
                stored = await self._store_groups([rows for rows, _ in chunk], priority, queued)
                out += [[group[i] for i in firsts] for group, (_, firsts) in zip(stored, chunk, strict=True)]
                start = end
        finally:  # queued once stored (the worker's embedding does not slow the writes), even on failure
            if queued:
                self.embeddings.put(queued, priority)  # type: ignore[arg-type]
        return out

    async def _store_groups(self, groups: list[Rows], embed: str, queued: list[str]) -> list[Rows]:
        """Write several batches' rows in one transaction, embedded in one call (``embed="now"``);
        with a background priority, the new rows' ids are appended to ``queued`` instead."""
        if self.embeddings.embedder is None:  # keyword-only: nothing to embed or queue
            return [[f for f, _ in g] for g in await self._put_groups(groups, None)]
        if embed != "now":
            stored = await self._put_groups(groups, None)
            queued += [f.id for g in stored for f, created in g if created]
            return [[f for f, _ in g] for g in stored]
        # A document is not searched itself (its fragments are): it gets its first fragment's vector.
        texts = [
            next(f.content for f in rows[i + 1 :]) if f.kind == "document" else f.content
            for rows in groups
            for i, f in enumerate(rows)
        ]
        # (a document row's vector is its first fragment's; the fragment itself is windowed)
        windowed = [f.kind != "document" for rows in groups for f in rows]
        embedded = await self.embeddings.embed_or_defer(texts, windowed)
        stored = await self._put_groups(groups, embedded)
        if embedded is not None:
            await self.embeddings.catch_up()
        return [[f for f, _ in g] for g in stored]

    async def _put_groups(self, groups: list[Rows], embedded: Embedded | None) -> list[list[tuple[Fact, bool]]]:
        vectors = embedded.vectors if embedded is not None else None
        windows = embedded.windows_or_none() if embedded is not None else None
        # a store is called as before issue 22 unless a text has windows
        extra: dict[str, Any] = {} if windows is None else {"windows": windows}
        if hasattr(self.facts, "put_fact_groups"):  # GroupWritable: one transaction
            return await cast(GroupWritable, self.facts).put_fact_groups(groups, vectors, actor="api", **extra)
        out, start = [], 0  # one put_facts per group: the same rows, a transaction each
        for g in groups:
            part: dict[str, Any] = {} if windows is None else {"windows": windows[start : start + len(g)]}
            out.append(
                await self.facts.put_facts(g, None if vectors is None else vectors[start : start + len(g)], **part)
            )
            start += len(g)
        return out
