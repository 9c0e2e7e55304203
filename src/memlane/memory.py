"""The engine: :class:`AsyncMemory`. Its sync facade :class:`Memory` is in ``memlane.sync``.

Data flow: ``add`` validates input -> builds :class:`Fact` rows (verbatim turns keep
author, time, session position) -> one batched embedding call -> the fact store writes
facts, keyword index and vectors in one transaction. ``search`` parses each query (up to
three, run concurrently) -> keyword and vector candidates per scope partition -> weighted
RRF -> facts fetched, access counts bumped (orchestrated by :mod:`memlane.search`).

The engine builds nothing backend-specific: stores come from :mod:`memlane.registry` by URL,
opened on first use, so the constructor does no I/O.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, overload

from memlane import inputs
from memlane._env import default_db_path, redact_url
from memlane.agent.config import CONFIGURED, ConfiguredInt, RecallConfig
from memlane.bulk import AddBatch
from memlane.documents import document_rows
from memlane.engine import documents, privacy, status
from memlane.engine.context import (
    FACTS_FIFO_LIMIT,
    ContextQuery,
    LocalContextCache,
    WindowQuery,
    build_context,
    read_window,
)
from memlane.engine.embeddings import QUERY_CACHE_SIZE as QUERY_CACHE_SIZE  # re-exported
from memlane.engine.embeddings import EmbeddingLifecycle
from memlane.engine.status import ConsolidationStatus, EmbeddingProgress, MemoryStats
from memlane.engine.writes import Writer, write_scope
from memlane.errors import (
    ConfigError,
    EmbedderError,
    InvalidInputError,
    NotFoundError,
    UsageError,
)
from memlane.formation.config import FormationConfig, ReflectionScopeName
from memlane.formation.model import FormationModel
from memlane.formation.pipeline import Pipeline, Target, scope_key
from memlane.formation.runner import FormationResult, FormationRunner
from memlane.inputs import MAX_TEXT_CHARS as MAX_TEXT_CHARS  # re-exported
from memlane.inputs import clean_text as _clean_text
from memlane.messages import MAX_BATCH as MAX_BATCH  # re-exported
from memlane.messages import Message as Message  # re-exported
from memlane.models import (
    FACT_KINDS,
    CheckReport,
    ConsolidatedMemory,
    EmbedPriority,
    Event,
    Fact,
    FactKind,
    HistoryEntry,
    Job,
    Page,
    Reflection,
    Scope,
    ScopeName,
    SearchResult,
)
from memlane.providers.embed.base import Embedder, is_latin_only
from memlane.providers.llm.base import LLM, UsageMeter
from memlane.registry import (
    Stores,
    check_embedder_spec,
    make_embedder,
    make_formation_model,
    open_job_store,
    open_session_store,
    open_stores,
    store_location,
)
from memlane.retrieval.hybrid import MAX_QUERIES, RetrievalConfig
from memlane.search import SEARCH_MODES, Searcher, SearchMode, fact_filter, redact_contributor
from memlane.settings import MemlaneSettings, engine_arguments, load_settings
from memlane.stores.base import (
    Checkable,
    ContextCache,
    FactStore,
    JobStore,
    ReflectionStore,
    SessionStore,
    StoreStats,
    UserExportable,
)

log = logging.getLogger("memlane")

#: Highest user tier accepted (``profile(tier=...)``, ``add_event(tier=...)``).
MAX_TIER = 1_000_000


#: Attributes :meth:`AsyncMemory.open` sets.
_OPENED_ATTRS = frozenset(
    {
        "facts",
        "reflection_store",
        "jobs",
        "sessions",
        "contexts",
        "embedder",
        "meter",
        "pipeline",
        "formation",
        "search_engine",
    }
)

P = ParamSpec("P")
R = TypeVar("R")


def _opening(
    method: Callable[Concatenate[AsyncMemory, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[AsyncMemory, P], Coroutine[Any, Any, R]]:
    """Open the memory (stores, embedder, models) on first use of a public method."""

    @functools.wraps(method)
    async def wrapper(self: AsyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if not self._opened:
            await self.open()
        return await method(self, *args, **kwargs)

    return wrapper


async def _close_stores(stores: Stores) -> None:
    await stores.jobs.close()
    if stores.sessions is not None:
        await stores.sessions.close()
    if stores.reflections is not stores.facts:  # type: ignore[comparison-overlap]
        await stores.reflections.close()
    await stores.facts.close()


class AsyncMemory:
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
    ) -> None:
        # No I/O here: stores, models and the embedder are opened by :meth:`open` (called by
        # ``async with`` and by the first call), on worker threads, never on the event loop.
        self.db_path = store_location(db) if db is not None else default_db_path()
        self.retrieval = retrieval or RetrievalConfig()
        self.formation_config = formation or FormationConfig()
        if recall is not None and not isinstance(recall, RecallConfig):
            raise InvalidInputError(f"recall must be a RecallConfig, got {type(recall).__name__}")
        self.recall_config = recall or RecallConfig()
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
        embedder_spec, sessions_spec, llm, strong_llm = self._specs
        cfg = self.formation_config
        stores = await open_stores(self.db_path)
        opened: list[SessionStore | JobStore] = []  # closed again if opening fails
        try:
            sessions = await open_session_store(sessions_spec, stores)
            if isinstance(sessions_spec, str):
                opened.append(sessions)
            jobs = await open_job_store(self._jobs_spec, stores)
            if isinstance(self._jobs_spec, str):
                opened.append(jobs)
            embedder = await asyncio.to_thread(make_embedder, embedder_spec)  # may read model files
            # An embedder that learns its dimension from its first call (an OpenAI-compatible
            # server with an unknown model reports dim 0) is bound on that first call instead.
            if embedder is not None and embedder.dim > 0:
                await stores.facts.bind_embedder(embedder.name, embedder.dim)
            fast = make_formation_model(
                llm if llm is not None else cfg.model, meter=UsageMeter(), max_tokens=cfg.max_tokens
            )
            strong_spec = strong_llm if strong_llm is not None else cfg.strong_model
            strong = (
                make_formation_model(strong_spec, meter=fast.meter, max_tokens=cfg.max_tokens)
                if strong_spec is not None
                else None
            )
        except BaseException:
            for own in opened:
                if own is not stores.sessions and own is not stores.jobs:
                    await own.close()
            await _close_stores(stores)
            raise
        if stores.sessions is not None and stores.sessions is not sessions:
            await stores.sessions.close()  # the backend's own session store is not the one used
        if jobs is not stores.jobs:
            await stores.jobs.close()  # nor its own job table
        self.facts: FactStore = stores.facts
        self.reflection_store: ReflectionStore = stores.reflections
        self.jobs: JobStore = jobs
        self.sessions: SessionStore = sessions
        self.contexts: ContextCache = stores.contexts if stores.contexts is not None else LocalContextCache()
        self.embedder: Embedder | None = embedder
        self.meter: UsageMeter = fast.meter
        self._embeddings = EmbeddingLifecycle(self.facts, embedder, self._query_cache)
        self.pipeline = Pipeline(
            facts=self.facts, reflections=self.reflection_store, embed=self._embeddings.embed, config=cfg, fast=fast,
            strong=strong,
        )  # fmt: skip
        self.formation = FormationRunner(
            pipeline=self.pipeline, jobs=self.jobs, sessions=self.sessions, config=cfg, meter=self.meter
        )
        self._writer = Writer(self.facts, self._embeddings, self.formation)
        self.search_engine = Searcher(
            self.facts, self.retrieval, self._embeddings.embed_queries, latin_only=is_latin_only(embedder)
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
    @staticmethod
    def _scope(user_id: str | None, agent_id: str | None, session_id: str | None = None) -> Scope:
        return Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)

    # ------------------------------------------------------------------ writes
    @overload
    @_opening
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
    ) -> list[Fact]: ...

    @overload
    @_opening
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
    ) -> Job: ...

    @_opening
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
            messages, user_id=user_id, agent_id=agent_id, session_id=session_id, metadata=metadata, infer=infer,
            scope=scope, timestamp=timestamp, wait=wait, kind=kind, embed=embed,
        )  # fmt: skip

    @_opening
    async def add_many(
        self, batches: Iterable[AddBatch | Mapping[str, Any]], *, embed: EmbedPriority = "now"
    ) -> builtins.list[builtins.list[Fact]]:
        """Bulk :meth:`add`: many sessions' turns at once (an import, a migration). Stores
        exactly what one ``add`` per batch would (the same rows, session positions, neighbour
        context, history), in chunks of about 2,048 rows: one transaction per chunk and, with
        ``embed="now"``, one embedding call per chunk across sessions.

        Args:
            batches: :class:`~memlane.bulk.AddBatch` items (or dicts of their fields), one per
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

    @_opening
    async def add_document(
        self,
        text: str,
        *,
        title: str | None = None,
        source: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        scope: ScopeName = "user",
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        embed: EmbedPriority = "now",
    ) -> Fact:
        """Store a document (elizaOS ``DOCUMENT``) whatever its length: the ``document`` row
        keeps the whole text and is not searched itself; its ``fragment`` rows (~1,000 tokens,
        cut at headings and paragraphs first; a short document has one) are embedded and
        searched, each with ``metadata["document_id"]`` (see :meth:`fragments`). Deleting the
        document deletes its fragments. Adding the same text again returns the stored document.

        Args:
            text: the document (Markdown, code or prose), up to 5,000,000 characters.
            title: stored as ``metadata["title"]``.
            source: where it came from (``"filesystem"``, ``"discord"``, a URL...), stored as
                ``metadata["source"]`` (filter with ``filters={"source": ...}``).
            scope: as :meth:`add`: ``"user"``/``"private"``, ``"agent"``/``"shared"``
                (a knowledge base for all the agent's users), ``"room"``.
            metadata: stored on the document and on every fragment.
            embed: as :meth:`add`: ``"now"``, or queue the fragments at ``"high"`` /
                ``"normal"`` / ``"low"`` priority.

        Returns:
            The document fact (``metadata["fragments"]``: how many fragments it has).
        """
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        fact_scope = write_scope(scope, user_id, agent_id, session_id, "add_document()")
        doc = documents.document_fact(
            text, title=title, source=source, scope=fact_scope, user_id=user_id, agent_id=agent_id,
            session_id=session_id, metadata=metadata, timestamp=timestamp,
        )  # fmt: skip
        embed = inputs.embed_priority(embed)
        return (await self._writer.store_rows(document_rows(doc), embed))[0]

    @_opening
    async def fragments(
        self,
        document_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> builtins.list[Fact]:
        """A document's fragments in reading order (NotFoundError when the document is not
        visible from this scope; ``session_id`` names the room of a room document)."""
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return await documents.read_fragments(self.facts, document_id, **ids)

    @_opening
    async def parent_document(
        self,
        fragment_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> Fact:
        """The document a fragment belongs to (a search hit's source)."""
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return await documents.read_parent(self.facts, fragment_id, **ids)

    @_opening
    async def embedding_progress(self) -> EmbeddingProgress:
        """The background embedding queue's counts: ``high`` / ``normal`` / ``low`` and
        ``queued`` (facts waiting), ``done`` (embedded since open), ``failed`` (facts of
        batches that failed; they stay queued and are retried), ``last_error``, ``idle``."""
        return self._embeddings.progress()

    @_opening
    async def drain_embeddings(self) -> EmbeddingProgress:
        """Wait until every queued fact, and every fact stored without a vector (from before
        a restart, or a failed embedding), has its vector. Raises the embedder's error when
        a batch fails meanwhile (the facts stay keyword-searchable and queued; the worker
        retries them). Returns :meth:`embedding_progress`."""
        return await self._embeddings.drain()

    @_opening
    async def backfill_embeddings(self, *, batch_size: int = 256) -> int:
        """Embed facts stored without vectors (e.g. while the embedder was failing).

        Returns:
            How many facts got vectors.
        """
        return await self._embeddings.backfill(batch_size)

    @_opening
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
        text = _clean_text(text, "text")
        scope = self._scope(user_id, agent_id, session_id)
        current = await self.facts.get_fact(fact_id, scope)
        if current is not None and current.kind in ("document", "fragment"):
            raise InvalidInputError(
                f"{fact_id!r} is a {current.kind}; documents are not edited in place: delete the document and add "
                "the new text"
            )
        try:
            vectors = await self._embeddings.embed([text])
        except EmbedderError:
            vectors = None
            self._embeddings.pending = True
        updated = await self.facts.update_fact(
            fact_id, scope, text, vectors[0] if vectors is not None else None, actor="api"
        )
        return redact_contributor(updated, user_id)

    @_opening
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

    @_opening
    async def forget(self, user_id: str, *, shared: Literal["erase", "keep"] = "erase", sessions: bool = True) -> int:
        """Hard purge everything of ``user_id``: facts, history, reflections, blobs, pending
        formation jobs, the sessions the user took part in alone, and the user's own events in
        group sessions (``author`` or ``metadata["user_id"]`` is the user id). None of the user's text stays
        in the database file (the keyword index is merged, deleted pages zeroed, the WAL truncated).

        Args:
            shared: what happens to the agent's shared memories formed from the user's words
                (agent facts, agent reflections, the consolidated agent blob). ``"erase"``
                (default, privacy first): they are erased too; a blob that absorbed them is
                dropped and rebuilt from the remaining reflections at the next consolidation.
                ``"keep"``: the agent keeps them for its other users, unlinked from the user.
            sessions: ``False`` erases the long-term memory only (Gaia's ``/forget``): the
                user's sessions, their events and their formation cursors stay (short-term
                memory is untouched; turns not formed yet are still formed later, turns already
                formed are not formed again). Everything formed from them (facts, reflections of
                every scope, blobs) and the formation jobs, which hold formed text, are erased,
                and the file is scrubbed as with the default.

        Returns:
            The number of rows removed.
        """
        user_id = inputs.identifier(user_id, "user_id")
        inputs.choice(shared, "shared", ("erase", "keep"))
        sessions = inputs.flag(sessions, "sessions")
        removed = await privacy.forget(
            user_id, shared=shared, sessions=sessions, facts=self.facts, reflections=self.reflection_store,
            jobs=self.jobs, session_store=self.sessions, contexts=self.contexts,
        )  # fmt: skip
        self._erasures += 1
        return removed

    @_opening
    async def export_user(self, user_id: str) -> dict[str, Any]:
        """Everything memlane holds about ``user_id``, as JSON data (a data-subject export):
        what :meth:`forget` erases, plus references to the agent's shared memories formed from
        the user's words.

        Sections: ``facts`` (every fact holding the user's id, in every partition, valid and
        invalid, each with its ``history``), ``shared_changes`` (the user's changes to facts that
        are not theirs: what they said, not what was there), ``reflections`` and
        ``consolidated`` (keyed by the user), ``shared`` (``{kind, id, scope, agent_id}``
        references to agent memories formed from the user's words; their text holds other
        users' words too), ``sessions`` (the sessions the user takes part in, with events; a
        group session with the user's own events only), ``jobs`` (their formation jobs: input
        and status) and ``formation_cursors``. ``not_included`` says what is left out and why
        (caches and indexes derived from the exported rows); ``not_exported`` names a store
        that cannot export (a custom store without ``export_user``).
        """
        user_id = inputs.identifier(user_id, "user_id")
        return await privacy.export_user(
            user_id, facts=self.facts, reflections=self.reflection_store, jobs=self.jobs, session_store=self.sessions
        )

    # ------------------------------------------------------------------ reads
    @_opening
    async def get(
        self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> Fact:
        """One fact by id (NotFoundError if absent or outside the scope; ``session_id`` names
        the room of a room memory)."""
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return await documents.visible_fact(self.facts, fact_id, **ids)

    @_opening
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
    ) -> Page:
        """Facts newest first; pass ``page.next_cursor`` as ``cursor`` for the next page
        (``page.total`` counts what the filters keep).

        Args:
            kind: only memories of this type: ``"fact"``, ``"message"``, ``"document"``,
                ``"fragment"``, ``"description"`` or ``"custom"``.
            filters: the filters of :meth:`search`, applied in the store's query: exact matches
                on ``kind``, ``author``, ``session_id``, ``scope`` (``"user"``/``"private"``,
                ``"agent"``/``"shared"``, ``"room"``) or on ``metadata`` keys (a dotted key is a
                path into nested metadata: ``{"sender.id": "123"}``).
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
        page = await self.facts.list_facts(
            scope, limit=limit, cursor=cursor, include_invalid=include_invalid, filter=None if flt.empty else flt,
            only=only,
        )  # fmt: skip
        page.items = [redact_contributor(f, user_id) for f in page.items]
        return page

    @_opening
    async def history(
        self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> builtins.list[HistoryEntry]:
        """Every change to a fact, oldest first (``session_id`` names the room of a room memory)."""
        fact_id = inputs.identifier(fact_id, "fact_id", error=InvalidInputError)
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        return await self.facts.history(fact_id, self._scope(user_id, agent_id, session_id))

    async def check(self) -> CheckReport:
        """Check the storage for damage: SQLite's integrity check (every page and index) and
        the full-text index's consistency. Reads only; takes a while on a large database.
        ``memlane check`` runs it from the shell. When it reports problems, stop the processes
        using the file and restore it from a backup."""
        problems: list[str] = []
        seen: set[int] = set()
        for store in (self.jobs, self.facts, self.reflection_store, self.sessions):
            if not isinstance(store, Checkable) or id(store) in seen:
                continue
            seen.add(id(store))
            problems += [p for p in await store.check() if p not in problems]  # stores may share one file
        return CheckReport(ok=not problems, problems=problems, location=redact_url(self.db_path))

    @_opening
    async def stats(self, *, user_id: str | None = None, agent_id: str | None = None) -> StoreStats:
        """Counts for one scope, or for the whole database when no id is given."""
        user_id, agent_id, _ = inputs.scope_ids(user_id, agent_id)
        scope = self._scope(user_id, agent_id) if (user_id or agent_id) else None
        st = await self.facts.stats(scope)
        if scope is None:  # operators' view: the session store counts its own tables
            st.sessions, st.events = await self.sessions.counts()
        elif user_id is not None and isinstance(self.sessions, UserExportable):
            # The user's sessions (every app) and the events in them: in a group session the
            # user's own, as export_user shows them.
            sessions = (await self.sessions.export_user(user_id)).get("sessions", [])
            st.sessions, st.events = len(sessions), sum(len(s.get("events", [])) for s in sessions)
        return st

    @_opening
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
        return await self.search_engine.search(
            scope, queries, top_k=top_k, filters=filters, debug=debug, use_vectors=self.embedder is not None,
            mode=mode, match_threshold=match_threshold, unique=unique,
        )  # fmt: skip

    # ------------------------------------------------------------------ context
    @_opening
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
    ) -> str:
        """The always-in-context ``<MemoryContext>`` block for a turn (Eden + Gaia): the user
        profile, the agent / user / session consolidated memory and recent reflections, and
        the recent facts (<= 40, last 7 days, newest first). Cached 5 minutes while the
        memory is unchanged. See :func:`memlane.agent.context.assemble_context`."""
        q = ContextQuery.checked(
            session_id=session_id, user_id=user_id, agent_id=agent_id, budget_tokens=budget_tokens, profile=profile,
            facts_limit=facts_limit, now=now, use_cache=use_cache,
        )  # fmt: skip
        return await build_context(self.facts, self.reflection_store, self.contexts, self._profile_of, q)

    async def _profile_of(self, user_id: str, agent_id: str | None) -> str | None:
        return await self.profile(user_id, agent_id=agent_id)

    @_opening
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

    # ------------------------------------------------------------------ formation
    @_opening
    async def add_event(self, session_id: str, event: Event, *, app: str = "default", tier: int | None = None) -> Event:
        """Append an event to a session and run the formation triggers: after an agent
        response, once 45 messages or 1500 weighted tokens have accumulated since the last
        formation (never fewer than 4 messages), a formation job is queued; every event
        re-arms the session's idle timer (30 min: form, then clear).

        Args:
            tier: the user's tier (``>= formation.premium_tier`` selects the strong model);
                remembered for the session.
        """
        session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
        tier = inputs.optional_integer(tier, "tier", 0, MAX_TIER)
        if not isinstance(event, Event):
            raise InvalidInputError(f"event must be an Event, got {inputs.show(event)}")
        stored = await self.sessions.add_event(session_id, event, app=app)
        self.formation.start()
        await self.formation.on_event(app, session_id, stored, tier=tier)
        return stored

    async def _form_session(
        self, session_id: str, app: str, reason: str, *, clear: bool, final: bool, wait: bool
    ) -> FormationResult | Job:
        session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
        wait = inputs.flag(wait, "wait")
        if await self.sessions.get_session(session_id, app=app) is None:
            raise NotFoundError(f"no session {session_id!r} in app {app!r}")
        job = await self.formation.enqueue_session(app, session_id, reason=reason, clear=clear, final=final)
        if not wait:
            self.formation.start()
            return job
        return await self.formation.wait_for(job)

    @_opening
    async def form(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """Form the session's not-yet-formed messages into memory now (extraction, dedup,
        reflections, consolidation when a buffer reaches its threshold)."""
        return await self._form_session(session_id, app, "manual", clear=False, final=False, wait=wait)

    @_opening
    async def end_session(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """Session end (Eden ``on_session_end``): a final formation, then every scope with
        pending reflections is consolidated. The session is kept."""
        return await self._form_session(session_id, app, "end", clear=False, final=True, wait=wait)

    @_opening
    async def reset_session(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """``/reset`` (Gaia): form the conversation into memory, then delete the session."""
        return await self._form_session(session_id, app, "reset", clear=True, final=True, wait=wait)

    @_opening
    async def sweep_idle(self) -> builtins.list[Job]:
        """Queue idle formation for sessions silent longer than ``idle_minutes`` (the startup
        sweep; also a cold-session job to run from cron). Returns the queued jobs."""
        jobs = await self.formation.sweep_idle()
        if jobs:
            self.formation.start()
        return jobs

    @_opening
    async def run_jobs(self, *, max_jobs: int | None = None) -> int:
        """Run due formation jobs now, in this task (tests, cron, or ``background=False``).
        A failing job is rescheduled with backoff, not raised. Returns how many ran."""
        max_jobs = inputs.optional_integer(max_jobs, "max_jobs", 0, inputs.MAX_INT)
        n = 0
        while max_jobs is None or n < max_jobs:
            try:
                ran = await self.formation.run_pending(max_jobs=1)
            except Exception as exc:  # recorded on the job; keep draining
                log.info("memlane: a formation job failed and was rescheduled: %s", exc)
                ran = 1
            if not ran:
                break
            n += ran
        return n

    @_opening
    async def get_job(self, job_id: str) -> Job:
        """A formation job's status, attempts, last error and result."""
        job_id = inputs.identifier(job_id, "job_id", error=InvalidInputError)
        job = await self.jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no formation job {job_id!r}")
        return job

    @_opening
    async def list_jobs(self, *, status: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """Formation jobs, newest first (``status``: queued, running, done, failed)."""
        inputs.optional_choice(status, "status", ("queued", "running", "done", "failed"))
        limit = inputs.integer(limit, "limit", 1, 10_000)
        return await self.jobs.list(status=status, limit=limit)

    @_opening
    async def retry_job(self, job_id: str) -> Job:
        """Queue a failed job again with a fresh set of attempts."""
        job_id = inputs.identifier(job_id, "job_id", error=InvalidInputError)
        job = await self.jobs.retry(job_id)
        self.formation.kick()
        return job

    @_opening
    async def profile(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        items: Sequence[str] = (),
        tier: int = 0,
    ) -> str | None:
        """Gaia's session-start profile: the user's facts (plus recent ``items`` such as tasks
        or projects) distilled by one model call into <= ``preload_limit`` importance-ranked
        bullets. None when memory is off or the user has nothing; the raw fact list if the
        call fails."""
        user_id = inputs.identifier(user_id, "user_id")
        agent_id = inputs.optional_id(agent_id, "agent_id")
        items, tier = inputs.texts(items, "items", MAX_BATCH), inputs.integer(tier, "tier", 0, MAX_TIER)
        scope = self._scope(user_id, agent_id)
        assert scope.user_id is not None
        return await self.pipeline.profile(scope.user_id, agent_id, items=list(items), tier=tier)

    def _reflection_target(self, user_id: str | None, agent_id: str | None, session_id: str | None) -> Target:
        return Target(session_id=session_id, user_id=user_id, agent_ns=agent_id)

    @_opening
    async def reflections(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        absorbed: bool | None = None,
    ) -> builtins.list[Reflection]:
        """A scope's reflections, oldest first (``absorbed=False``: the pending buffer)."""
        inputs.reflection_scope(scope, user_id, agent_id, session_id)
        absorbed = inputs.optional_flag(absorbed, "absorbed")
        key = scope_key(self._reflection_target(user_id, agent_id, session_id), scope)
        return await self.reflection_store.list_reflections(scope=scope, absorbed=absorbed, **key)

    @_opening
    async def consolidated(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> ConsolidatedMemory | None:
        """A scope's consolidated blob (``VERSION: n`` ...), or None before its first consolidation."""
        inputs.reflection_scope(scope, user_id, agent_id, session_id)
        key = scope_key(self._reflection_target(user_id, agent_id, session_id), scope)
        return await self.reflection_store.get_consolidated(scope=scope, **key)

    @_opening
    async def get_consolidation_status(
        self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> dict[str, ConsolidationStatus]:
        """Eden's ``get_consolidation_status``: per scope, the buffer size, threshold, word limit
        and whether consolidation is due."""
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return await status.consolidation_status(self.reflection_store, self.formation_config, **ids)

    @_opening
    async def get_memory_stats(
        self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> MemoryStats:
        """Eden's ``get_memory_stats``: per scope, word counts of the blob, reflection counts and
        timestamps; plus fact counts, job counts and model usage so far."""
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        scopes = await status.scope_stats(self.reflection_store, **ids)
        facts = await self.stats(user_id=user_id, agent_id=agent_id)
        return MemoryStats(
            scopes=scopes, facts=facts.facts, valid_facts=facts.valid_facts, jobs=await self.jobs.counts(),
            usage=self.meter.snapshot(),
        )  # fmt: skip
