"""The engine: :class:`AsyncMemory`. Its sync facade :class:`Memory` is in ``memlane.sync``.

Data flow: ``add`` validates input -> builds :class:`Fact` rows (verbatim turns keep
author, time, session position) -> one batched embedding call -> the fact store writes
facts, keyword index and vectors in one transaction. ``search`` parses each query (up to
three, run concurrently) -> keyword and vector candidates per scope partition -> weighted
RRF -> facts fetched, access counts bumped (orchestrated by :mod:`memlane.engine.search`).

The engine builds nothing backend-specific: stores come from :mod:`memlane.registry` by URL,
opened on first use (:mod:`memlane.engine.opening`), so the constructor does no I/O. The
engine's parts live in :mod:`memlane.engine`: the write path, context assembly, and one
method group per concept (documents, embeddings, privacy, status, formation) that
:class:`AsyncMemory` inherits; this module keeps the lifecycle, writes, reads and search.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, overload

from memlane import inputs
from memlane._env import default_db_path
from memlane.agent.config import CONFIGURED, ConfiguredInt, RecallConfig
from memlane.engine import documents
from memlane.engine.activity import ActivityMethods
from memlane.engine.base import MAX_TIER as MAX_TIER  # re-exported
from memlane.engine.base import EngineStores, opening
from memlane.engine.context import (
    FACTS_FIFO_LIMIT,
    ContextQuery,
    ProfileOf,
    WindowQuery,
    build_context,
    read_window,
)
from memlane.engine.directory import DirectoryMethods
from memlane.engine.documents import DocumentMethods
from memlane.engine.embeddings import QUERY_CACHE_SIZE as QUERY_CACHE_SIZE  # re-exported
from memlane.engine.embeddings import EmbeddingLifecycle, EmbeddingMethods, Prestart
from memlane.engine.formation import FormationMethods
from memlane.engine.identity import IdentityMethods, resolve_user
from memlane.engine.opening import open_parts
from memlane.engine.privacy import PrivacyMethods
from memlane.engine.review import ReviewMethods
from memlane.engine.search import SEARCH_MODES, Searcher, SearchMode, fact_filter, redact_contributor
from memlane.engine.status import StatusMethods
from memlane.engine.summaries import SummaryMethods
from memlane.engine.temporal import TemporalQuery, get_at, list_at, search_at
from memlane.engine.writes import Writer
from memlane.errors import ConfigError, EmbedderError, InvalidInputError, UsageError
from memlane.formation.config import FormationConfig
from memlane.formation.model import FormationModel
from memlane.formation.pipeline import Pipeline
from memlane.formation.runner import FormationRunner
from memlane.ingest.bulk import AddBatch
from memlane.ingest.messages import MAX_BATCH as MAX_BATCH  # re-exported
from memlane.ingest.messages import Message as Message  # re-exported
from memlane.inputs import MAX_TEXT_CHARS as MAX_TEXT_CHARS  # re-exported
from memlane.inputs import clean_text as _clean_text
from memlane.models import (
    FACT_KINDS,
    EmbedPriority,
    Event,
    Fact,
    FactKind,
    HistoryEntry,
    Job,
    Page,
    ScopeName,
    SearchResult,
)
from memlane.privacy.redaction import RedactSpec, as_config
from memlane.providers.embed.base import Embedder, is_latin_only
from memlane.providers.embed.windows import Windowing
from memlane.providers.llm.base import LLM, UsageMeter
from memlane.registry import check_embedder_spec, store_location
from memlane.retrieval.hybrid import MAX_QUERIES, RetrievalConfig
from memlane.settings import MemlaneSettings, engine_arguments, load_settings
from memlane.stores.base import (
    ContextCache,
    FactStore,
    JobStore,
    ReflectionStore,
    SessionStore,
)

log = logging.getLogger("memlane")


#: Attributes :meth:`AsyncMemory.open` sets.
_OPENED_ATTRS = frozenset(
    {
        "facts",
        "reflection_store",
        "jobs",
        "sessions",
        "contexts",
        "stores",
        "embedder",
        "meter",
        "pipeline",
        "formation",
        "search_engine",
    }
)


class AsyncMemory(
    ActivityMethods,
    FormationMethods,
    DocumentMethods,
    EmbeddingMethods,
    PrivacyMethods,
    StatusMethods,
    IdentityMethods,
    ReviewMethods,
    SummaryMethods,
    DirectoryMethods,
):
    """memlane's memory engine (async). Use :class:`memlane.Memory` from sync code.

    Args:
        db: the long-term store: a SQLite file (default ``$MEMLANE_DB`` or the user data
            dir), ``":memory:"`` for a throwaway database, or a store URL
            (``sqlite:///a.db``, ``postgresql://user@host/db`` for PostgreSQL + pgvector).
        embedder: ``"auto"`` (local MiniLM when installed, else keyword-only), ``"local"``,
            ``"local:/path/to/model"``, ``"hash"``, ``"openai:MODEL"``, ``"gemini:MODEL"``,
            ``"none"``, or an :class:`~memlane.providers.embed.base.Embedder` instance.
        sessions: session store: ``"sqlite"`` (durable, in the long-term store, whichever
            backend it is), ``"local"`` (in-process), ``"null"`` (disabled), a URL
            (``redis://127.0.0.1:6379/0`` shared by replicas, ``sqlite:///s.db``), or a
            :class:`SessionStore`.
        jobs: the formation job queue: None (the long-term store's own table), a queue URL
            (``redis://127.0.0.1:6379/0``), or a :class:`JobStore`.
        retrieval: fusion weights and thresholds.
        formation: memory-formation settings (models, thresholds, triggers); defaults are
            Eden's and Gaia's, with the ``offline`` rule-based model.
        llm: overrides ``formation.model`` (fast model): a ``provider:model`` name,
            ``"offline"``, an :class:`~memlane.providers.llm.base.LLM` or a
            :class:`~memlane.formation.model.FormationModel`.
        strong_llm: overrides ``formation.strong_model`` (premium-tier model), same forms.
        recall: what a turn recalls by default (:class:`~memlane.agent.config.RecallConfig`):
            the hits ``load_memory`` returns and the session window :meth:`window` replays.
        redact: PII redaction before storage (docs/redaction.md): kinds (``"email"``, ``"phone"``,
            ``"card"``, ``"iban"``, ``"ip"``) and custom regexes, or a :class:`RedactionConfig`.
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        embedder: str | Embedder | None = "auto",
        sessions: str | SessionStore = "sqlite",
        jobs: str | JobStore | None = None,
        retrieval: RetrievalConfig | None = None,
        formation: FormationConfig | None = None,
        llm: str | LLM | FormationModel | None = None,
        strong_llm: str | LLM | FormationModel | None = None,
        recall: RecallConfig | None = None,
        redact: RedactSpec = None,
    ) -> None:
        # No I/O here: stores, models and the embedder are opened by :meth:`open` (called by
        # ``async with`` and by the first call), on worker threads, never on the event loop.
        self.db_path = store_location(db) if db is not None else default_db_path()
        self.retrieval = retrieval or RetrievalConfig()
        self.formation_config = formation or FormationConfig()
        if recall is not None and not isinstance(recall, RecallConfig):
            raise InvalidInputError(f"recall must be a RecallConfig, got {type(recall).__name__}")
        self.recall_config = recall or RecallConfig()
        self.redaction = as_config(redact)
        check_embedder_spec(embedder)
        self._specs = (embedder, sessions, llm, strong_llm)
        self._jobs_spec = jobs
        self._query_cache: OrderedDict[str, Any] = OrderedDict()
        self._open_lock: asyncio.Lock | None = None
        self._opened = False
        self._closed = False
        self._erasures = 0

    @classmethod
    def from_settings(cls, settings: MemlaneSettings | str | os.PathLike[str] | None = None) -> AsyncMemory:
        """An (unopened) engine configured by memlane's settings (docs/configuration.md): a
        :class:`~memlane.config.MemlaneSettings`, a YAML file, or None (``$MEMLANE_CONFIG`` if
        set, and the environment), as ``memlane serve`` builds its engines.

        Raises:
            ConfigError: the file or a variable is invalid, or a setting the engine cannot use.
        """
        if not isinstance(settings, MemlaneSettings):
            settings = load_settings(settings)
        return cls(**engine_arguments(settings))

    @property
    def erasures(self) -> int:
        """How many ``forget`` calls this engine has run: in-process caches built from memory
        (e.g. :class:`memlane.agent.state.StateComposer`) drop what they hold when it moves."""
        return self._erasures

    def __getattr__(self, name: str) -> Any:
        # Reached only for attributes :meth:`open` sets (stores, models): a clear error, not AttributeError.
        if name in _OPENED_ATTRS:
            raise UsageError(
                f"AsyncMemory.{name} is available once the memory is open: use `async with AsyncMemory(...) as m`, "
                "`await m.open()`, or call any async method first"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _windowing(self) -> Windowing:
        """How long memories are embedded, from the retrieval config (read at each embedding)."""
        r = self.retrieval
        return Windowing(r.embed_windows, r.embed_window_size, r.embed_window_overlap)

    # ------------------------------------------------------------------ lifecycle
    async def open(self) -> AsyncMemory:
        """Open the stores (through :mod:`memlane.registry`), the embedder and the models, on
        worker threads. Idempotent; every method calls it, so it is only needed explicitly to
        use ``memory.sessions`` / ``memory.facts`` before any other call."""
        if self._opened:
            return self
        if self._closed:
            raise UsageError("this AsyncMemory is closed")
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._opened:
                await self._open()
        return self

    async def _open(self) -> None:
        embedder, sessions, llm, strong_llm = self._specs
        cfg = self.formation_config
        parts = await open_parts(
            self.db_path,
            embedder=embedder,
            sessions=sessions,
            jobs=self._jobs_spec,
            formation=cfg,
            llm=llm,
            strong_llm=strong_llm,
            redact=self.redaction,
        )
        self.facts: FactStore = parts.facts
        self.reflection_store: ReflectionStore = parts.reflections
        self.jobs: JobStore = parts.jobs
        self.sessions: SessionStore = parts.sessions
        self.contexts: ContextCache = parts.contexts
        self.stores = EngineStores(self.facts, self.reflection_store, self.jobs, self.sessions, self.contexts)
        self.embedder: Embedder | None = parts.embedder
        self.meter: UsageMeter = parts.fast.meter
        self._embeddings = EmbeddingLifecycle(self.facts, parts.embedder, self._query_cache, self._windowing)
        self.pipeline = Pipeline(
            facts=self.facts,
            reflections=self.reflection_store,
            embed=self._embeddings.embed,
            config=cfg,
            fast=parts.fast,
            strong=parts.strong,
        )
        self.formation = FormationRunner(
            pipeline=self.pipeline, jobs=self.jobs, sessions=self.sessions, config=cfg, meter=self.meter
        )
        latin, red = is_latin_only(parts.embedder), parts.redactor
        self._writer = Writer(self.facts, self._embeddings, self.formation, red)
        self.search_engine = Searcher(
            self.facts,
            self.retrieval,
            self._embeddings.embed_queries,
            latin_only=latin,
            redactor=red,
            query_vectors=self._embeddings.query_vectors,
            remember_vectors=self._embeddings.remember,
            windowed=self._embeddings.windowed,
        )
        self._opened = True

    async def close(self) -> None:
        """Close stores and providers (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if not self._opened:
            return
        await self._embeddings.close()  # what it had not embedded is embedded after the next open
        await self.formation.close()
        await self.pipeline.fast.aclose()
        if self.pipeline.strong is not self.pipeline.fast:
            await self.pipeline.strong.aclose()
        await self.jobs.close()
        await self.sessions.close()
        if self.reflection_store is not self.facts:  # type: ignore[comparison-overlap]
            await self.reflection_store.close()
        close_contexts = getattr(self.contexts, "close", None)  # a cache holding a database reference
        if close_contexts is not None:
            await close_contexts()
        await self.facts.close()
        if self.embedder is not None:
            await self.embedder.aclose()

    async def __aenter__(self) -> AsyncMemory:
        await self.start()
        return self

    async def start(self) -> None:
        """Open, then start background formation on the running loop: the job worker, and the
        startup sweep of sessions that went idle while the process was down. Called by
        ``async with`` and by the first :meth:`add_event`; idempotent."""
        await self.open()
        self.formation.start()

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    # ------------------------------------------------------------------ helpers

    # ------------------------------------------------------------------ writes
    @overload
    @opening
    async def add(
        self,
        messages: str | Sequence[Message],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        infer: bool = False,
        scope: ScopeName = "user",
        timestamp: datetime | None = None,
        wait: Literal[True] = True,
        kind: FactKind | None = None,
        embed: EmbedPriority = "now",
        channel: str | None = None,
        sender: str | None = None,
    ) -> list[Fact]: ...

    @overload
    @opening
    async def add(
        self,
        messages: str | Sequence[Message],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        infer: bool = False,
        scope: ScopeName = "user",
        timestamp: datetime | None = None,
        wait: Literal[False],
        kind: FactKind | None = None,
        embed: EmbedPriority = "now",
        channel: str | None = None,
        sender: str | None = None,
    ) -> Job: ...

    @opening
    async def add(
        self,
        messages: str | Sequence[Message],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        infer: bool = False,
        scope: ScopeName = "user",
        timestamp: datetime | None = None,
        wait: bool = True,
        kind: FactKind | None = None,
        embed: EmbedPriority = "now",
        channel: str | None = None,
        sender: str | None = None,
    ) -> list[Fact] | Job:
        """Store memories: verbatim (default), or, with ``infer=True``, as facts an LLM extracts
        and de-duplicates against the scope's existing facts (mem0-style).

        Args:
            messages: one text (stored as one fact), or chat messages (``{"role", "content",
                "name"?, "timestamp"?, "metadata"?}`` dicts or :class:`Event` objects), each stored as one
                memory that keeps its author, time and position in ``session_id``.
            user_id: owner (required for ``scope="user"``).
            agent_id: the agent / app namespace (required for ``scope="agent"``).
            session_id: source session; orders turns and links neighbours for retrieval.
            metadata: stored on every memory.
            infer: extract facts with the formation model (extraction + dedup ADD / UPDATE /
                DELETE / NONE) instead of storing the text verbatim. Runs as a durable job.
            scope: ``"user"`` (the user's own; elizaOS ``"private"``), ``"agent"`` (shared by
                the agent's users; elizaOS ``"shared"``) or ``"room"`` (the agent's memory of
                the room ``session_id``, read only by calls naming that room; docs/documents.md).
            timestamp: when a plain text was said (messages carry their own).
            wait: with ``infer=True``: True runs the job now and returns the facts it added
                or changed; False returns the queued :class:`Job` (see :meth:`get_job`).
            kind: the memory type (elizaOS): ``"fact"`` (a text's default), ``"message"`` (a
                message's default), ``"description"`` (an entity's description) or
                ``"custom"`` (application-defined; name its type in ``metadata``). Documents:
                :meth:`add_document`.
            embed: ``"now"`` embeds before returning; ``"high"`` / ``"normal"`` / ``"low"``
                store at once (keyword-searchable) and embed in the background, by priority
                (:meth:`embedding_progress`, :meth:`drain_embeddings`).
            channel, sender: instead of ``user_id``: the user linked to this sender on this
                channel (:meth:`link_identity`; ``UnknownIdentityError`` when none is).

        Returns:
            Verbatim: the stored facts in input order; an identical memory already stored is
            returned as it was (idempotent), not duplicated. ``infer=True``: the facts added,
            updated or re-added (NONE excluded), or the Job when ``wait=False``.

        Raises:
            InvalidInputError: empty or oversized text, invalid UTF-8, bad message shape,
                metadata that is not JSON, a bad timestamp, scope or flag (docs/inputs.md).
            ScopeError: missing user_id / agent_id for the scope.
            FormationError: ``infer=True, wait=True`` and the model failed; the job is kept
                and retried later, the input is not lost.
        """
        return await self._writer.add(
            messages,
            user_id=await resolve_user(self.facts, user_id, channel, sender),
            agent_id=agent_id,
            session_id=session_id,
            metadata=metadata,
            infer=infer,
            scope=scope,
            timestamp=timestamp,
            wait=wait,
            kind=kind,
            embed=embed,
        )

    @opening
    async def add_many(
        self, batches: Iterable[AddBatch | Mapping[str, Any]], *, embed: EmbedPriority = "now"
    ) -> builtins.list[builtins.list[Fact]]:
        """Bulk :meth:`add`: many sessions' turns at once (an import, a migration). Stores
        exactly what one ``add`` per batch would (the same rows, session positions, neighbour
        context, history), in chunks of about 2,048 rows: one transaction per chunk and, with
        ``embed="now"``, one embedding call per chunk across sessions. Python's cyclic garbage
        collector is paused while it runs (reference counting frees memory as usual) and
        restored as it was when it returns.

        Args:
            batches: :class:`~memlane.ingest.bulk.AddBatch` items (or dicts of their fields), one per
                ``add`` call: ``AddBatch(messages, user_id=..., session_id=...)``.
            embed: ``"now"`` embeds each chunk before storing it; ``"high"`` / ``"normal"`` /
                ``"low"`` store at keyword-index speed and queue the vectors for the background
                worker (:meth:`drain_embeddings`); rows without a vector are its durable queue,
                so a crash loses none.

        Returns:
            Per batch, the stored facts in input order (as :meth:`add` returns them).

        Raises:
            InvalidInputError: a batch ``add`` would refuse (the message names its index);
                every batch is checked before the first is stored, so nothing is written.
        """
        return await self._writer.add_many(batches, embed=embed)

    @opening
    async def update(
        self,
        fact_id: str,
        text: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> Fact:
        """Replace a fact's text (version + 1; the old text stays in history). ``session_id``
        names the room of a room memory."""
        fact_id = inputs.identifier(fact_id, "fact_id", error=InvalidInputError)
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        text = _clean_text(self._writer.redact_text(text), "text")
        scope = self._scope(user_id, agent_id, session_id)
        current = await self.facts.get_fact(fact_id, scope)
        if current is not None and current.kind in ("document", "fragment"):
            raise InvalidInputError(
                f"{fact_id!r} is a {current.kind}; documents are not edited in place: delete the document and add "
                "the new text"
            )
        try:
            embedded = await self._embeddings.embed_stored([text])
        except EmbedderError:
            embedded = None
            self._embeddings.pending = True
        vector = embedded.vectors[0] if embedded is not None else None
        window = embedded.windows[0] if embedded is not None else None
        # the old text's windows go with it (the store drops them); the new text's come with it
        extra: dict[str, Any] = {} if window is None else {"windows": window}
        updated = await self.facts.update_fact(fact_id, scope, text, vector, actor="api", **extra)
        return redact_contributor(updated, user_id)

    @opening
    async def delete(
        self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> Fact:
        """Soft delete: the fact leaves search but stays in history with ``invalid_at`` set
        (a document's fragments with it). ``session_id`` names the room of a room memory."""
        fact_id = inputs.identifier(fact_id, "fact_id", error=InvalidInputError)
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        scope = self._scope(user_id, agent_id, session_id)
        fact = await self.facts.get_fact(fact_id, scope)
        ids = [fact_id]
        if fact is not None and fact.kind == "document":  # its fragments go with it, in one transaction
            room = fact.session_id if fact.scope == "room" else None
            ids += await documents.fragment_ids(self.facts, fact, self._scope(user_id, agent_id, room))
        return (await self.facts.invalidate_facts(ids, scope, actor="api"))[0]

    # ------------------------------------------------------------------ reads
    @opening
    async def get(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        as_of: datetime | str | None = None,
        valid_at: datetime | str | None = None,
    ) -> Fact:
        """One fact by id (NotFoundError if absent or outside the scope; ``session_id`` names
        the room of a room memory). ``as_of`` / ``valid_at``: as it was (docs/temporal.md)."""
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        if (t := TemporalQuery(as_of, valid_at)).live:
            return await documents.visible_fact(self.facts, fact_id, **ids)
        fact = await documents.visible_fact(self.facts, fact_id, **ids)  # checks ids and the scope
        return await get_at(self.facts, fact.id, self._scope(*inputs.scope_ids(user_id, agent_id, session_id)), t)

    @opening
    async def list(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        include_invalid: bool = False,
        kind: FactKind | None = None,
        filters: Mapping[str, Any] | None = None,
        as_of: datetime | str | None = None,
        valid_at: datetime | str | None = None,
    ) -> Page:
        """Facts newest first; pass ``page.next_cursor`` as ``cursor`` for the next page
        (``page.total`` counts what the filters keep).

        Args:
            kind: only memories of this type: ``"fact"``, ``"message"``, ``"document"``,
                ``"fragment"``, ``"description"``, ``"custom"`` or ``"summary"``.
            filters: the filters of :meth:`search`, applied in the store's query: exact matches
                on ``kind``, ``author``, ``session_id``, ``scope`` (``"user"``/``"private"``,
                ``"agent"``/``"shared"``, ``"room"``) or on ``metadata`` keys (a dotted key is a
                path into nested metadata: ``{"sender.id": "123"}``).
            as_of: the memories as memory held them then; ``valid_at``: those true then
                (docs/temporal.md; ``cursor`` is then an offset into that snapshot).
        """
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        limit, cursor = inputs.integer(limit, "limit", 1, 10_000), inputs.cursor(cursor)
        include_invalid = inputs.flag(include_invalid, "include_invalid")
        wanted = inputs.filters(filters) or {}
        if kind is not None:
            inputs.choice(kind, "kind", FACT_KINDS)
            if wanted.get("kind", kind) != kind:
                raise InvalidInputError(f"kind={kind!r} and filters['kind']={wanted['kind']!r} contradict each other")
            wanted["kind"] = kind
        flt, only = fact_filter(wanted)
        scope = self._scope(user_id, agent_id, session_id)
        if not (t := TemporalQuery(as_of, valid_at)).live:
            return await list_at(
                self.facts, scope, t, limit=limit, cursor=cursor, include_invalid=include_invalid, flt=flt, only=only
            )
        page = await self.facts.list_facts(
            scope,
            limit=limit,
            cursor=cursor,
            include_invalid=include_invalid,
            filter=None if flt.empty else flt,
            only=only,
        )
        page.items = [redact_contributor(f, user_id) for f in page.items]
        return page

    @opening
    async def history(
        self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> builtins.list[HistoryEntry]:
        """Every change to a fact, oldest first (``session_id`` names the room of a room memory)."""
        fact_id = inputs.identifier(fact_id, "fact_id", error=InvalidInputError)
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        return await self.facts.history(fact_id, self._scope(user_id, agent_id, session_id))

    @opening
    async def search(
        self,
        query: str | Sequence[str],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        top_k: int = 10,
        filters: Mapping[str, Any] | None = None,
        debug: bool = False,
        mode: SearchMode = "hybrid",
        match_threshold: float | None = None,
        unique: bool = False,
        as_of: datetime | str | None = None,
        valid_at: datetime | str | None = None,
    ) -> SearchResult:
        """Hybrid search (keyword + vector, fused: :attr:`retrieval`) within one scope. A memory
        is a hit only with evidence, a keyword match or a cosine above the floor; under the
        default ``blend`` fusion every hit's ``score`` is positive (docs/retrieval.md).

        Args:
            query: a query, or up to 3 queries run concurrently and fused.
            user_id: search this user's memories (and the agent's shared ones when
                ``agent_id`` is given).
            agent_id: the agent / app namespace.
            session_id: only memories from this session.
            top_k: results to return (1..100).
            filters: exact-match filters on fact fields (``kind``, ``author``) or on
                ``metadata`` keys.
            debug: include per-stage timings and candidate lists.
            mode: ``"hybrid"``; ``"keyword"`` or ``"vector"`` (needs an embedder) alone; or
                ``"substring"``: the memories whose text holds the query, any case, newest
                first, score 1.0 (adk-rs's in-memory service).
            match_threshold: elizaOS: the cosine (-1..1) a memory must reach to be found by
                meaning, for this call (a hard floor instead of ``min_vector_score`` and its
                soft margin). Keyword matches still count (``mode="vector"`` leaves them out).
            unique: elizaOS: one hit per distinct text (case and spacing ignored), the best.
            as_of: search memory as it was then (record time); ``valid_at``: what was true
                then (world time). Ranked in memory over the snapshot (docs/temporal.md).

        Raises:
            ConfigError: ``mode="vector"`` on a memory without an embedder.
        """
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        scope = self._scope(user_id, agent_id, session_id)
        queries = inputs.queries(query, MAX_QUERIES)
        top_k, filters = inputs.integer(top_k, "top_k", 1, 100), inputs.filters(filters)
        debug, unique = inputs.flag(debug, "debug"), inputs.flag(unique, "unique")
        inputs.choice(mode, "mode", SEARCH_MODES)
        match_threshold = inputs.optional_number(match_threshold, "match_threshold", -1.0, 1.0)
        if mode == "vector" and self.embedder is None:
            raise ConfigError("mode='vector' needs an embedder; this memory has none (embedder=None)")
        self.search_engine.config = self.retrieval  # callers may swap the config between searches
        if not (t := TemporalQuery(as_of, valid_at)).live:
            return await search_at(self, scope, queries, t, top_k, filters, debug, mode, match_threshold, unique)
        return await self.search_engine.search(
            scope,
            queries,
            top_k=top_k,
            filters=filters,
            debug=debug,
            use_vectors=self.embedder is not None,
            mode=mode,
            match_threshold=match_threshold,
            unique=unique,
        )

    def _search_prestart(
        self, query: str | Sequence[str], *, mode: str = "hybrid", match_threshold: float | None = None
    ) -> Prestart | None:
        """For the sync facade (:class:`memlane.Memory`), in the thread about to wait for a
        :meth:`search` with these arguments: the query embeddings that search will need,
        registered for that thread to compute while the search's keyword stage runs
        (:meth:`Prestart.run`; the search then waits for them instead of embedding). None when
        there is nothing to compute ahead (keyword mode, cached queries, a remote embedder, a
        memory not opened yet, arguments the search will refuse). Issue 22."""
        try:
            if not self._opened or self.embedder is None or mode not in ("hybrid", "vector"):
                return None
            if mode == "hybrid" and self.retrieval.vector_weight <= 0:
                return None
            queries = inputs.queries(query, MAX_QUERIES)
            threshold = inputs.optional_number(match_threshold, "match_threshold", -1.0, 1.0)
            engine = self.search_engine
            queries, _ = engine.redacted(queries, None)
            return self._embeddings.prestart([queries[i] for i in engine.vector_queries(queries, threshold)])
        except Exception:  # the search itself reports bad arguments
            return None

    # ------------------------------------------------------------------ context
    @opening
    async def context(
        self,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        budget_tokens: int | None = None,
        profile: bool = True,
        facts_limit: int = FACTS_FIFO_LIMIT,
        now: datetime | None = None,
        use_cache: bool = True,
        as_of: datetime | str | None = None,
    ) -> str:
        """The always-in-context ``<MemoryContext>`` block for a turn (Eden + Gaia): the user
        profile, the agent / user / session consolidated memory and recent reflections, and
        the recent facts (<= 40, last 7 days, newest first). Cached 5 minutes while the
        memory is unchanged. ``as_of``: the block as memory held it then (docs/temporal.md).
        See :func:`memlane.agent.context.assemble_context`."""
        q = ContextQuery.checked(
            session_id=session_id,
            user_id=user_id,
            agent_id=agent_id,
            budget_tokens=budget_tokens,
            profile=profile,
            facts_limit=facts_limit,
            now=now,
            use_cache=use_cache,
            as_of=as_of,
        )
        return await build_context(self.facts, self.reflection_store, self.contexts, self._profile_of(q.as_of), q)

    def _profile_of(self, as_of: datetime | None) -> ProfileOf:
        return lambda user_id, agent_id: self.profile(user_id, agent_id=agent_id, as_of=as_of)

    @opening
    async def window(
        self,
        session_id: str,
        *,
        app: str = "default",
        user_turns: ConfiguredInt = CONFIGURED,
        last_n: ConfiguredInt = CONFIGURED,
    ) -> builtins.list[Event]:
        """The session's tail to replay to the model: the last ``user_turns`` user turns with
        everything after them, and at most the last ``last_n`` events; the shorter window wins.
        By default the engine's :attr:`recall_config` (``window_turns``: Gaia, 30;
        ``context_limit``: KAOS ``MEMORY_CONTEXT_LIMIT``, no event bound unless set); None
        lifts a bound."""
        q = WindowQuery.checked(self.recall_config, session_id, app=app, user_turns=user_turns, last_n=last_n)
        return await read_window(self.sessions, q)
