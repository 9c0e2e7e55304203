"""The sync facade: :class:`Memory` drives the one engine, :class:`AsyncMemory`, on a
private event-loop thread. Every method is a one-line pass-through; no logic lives here."""

from __future__ import annotations

import builtins
import concurrent.futures.thread
import contextlib
import os
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from datetime import date, datetime
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

from memlane._portal import LoopThread
from memlane.agent.config import CONFIGURED, ConfiguredInt, RecallConfig
from memlane.engine.context import FACTS_FIFO_LIMIT
from memlane.engine.search import SearchMode
from memlane.engine.status import ConsolidationStatus, EmbeddingProgress, MemoryStats
from memlane.formation.config import FormationConfig, ReflectionScopeName
from memlane.formation.model import FormationModel
from memlane.formation.runner import FormationResult
from memlane.formation.summaries import SessionSummary
from memlane.ingest.bulk import AddBatch
from memlane.memory import AsyncMemory, Message
from memlane.models import (
    CheckReport,
    ConsolidatedMemory,
    ConsolidatedVersion,
    Directory,
    EmbedPriority,
    Event,
    Fact,
    FactKind,
    Growth,
    HistoryEntry,
    Identity,
    Job,
    Page,
    Proposal,
    ProposalAction,
    Reflection,
    ScopeName,
    SearchResult,
    Session,
    Timeline,
    UserPage,
)
from memlane.privacy.redaction import RedactSpec
from memlane.providers.embed.base import Embedder
from memlane.providers.llm.base import LLM
from memlane.retrieval.hybrid import RetrievalConfig
from memlane.settings import MemlaneSettings, engine_arguments, load_settings
from memlane.stores.base import JobStore, SessionStore, StoreStats

T = TypeVar("T")

#: How long interpreter exit waits for an open Memory's engine to close (a loop thread stuck in
#: a blocking call is left to die with the process instead of holding the exit forever).
EXIT_CLOSE_SECONDS = 30.0

#: Every Memory not yet closed; :func:`_close_at_exit` closes them when the interpreter exits.
_OPEN: set[Memory] = set()


def _close_at_exit() -> None:
    """Close every Memory a script left open, while the interpreter can still run threads.

    It runs among threading's exit hooks, before ``concurrent.futures`` refuses new work (which
    the engine's loop needs for every database call): without it, a script ending without
    ``close()`` left a claimed formation job ``running`` until its lease expired and printed
    "formation worker error (cannot schedule new futures after shutdown)". Closing stops the
    worker, which hands a job it had started back to the queue; queued jobs stay queued in the
    store for the next process that opens it. Nothing is printed."""
    for m in list(_OPEN):
        with contextlib.suppress(Exception):
            m._close(timeout=EXIT_CLOSE_SECONDS)


# Registered after concurrent.futures.thread registered its own hook, so this one runs first
# (threading runs them in reverse order). Private API with a documented fallback: atexit runs
# later, when the executors are already shut down, but still stops the worker's thread.
_register_atexit: Any = getattr(threading, "_register_atexit", None)
assert concurrent.futures.thread  # imported above so that its hook is registered before ours
if _register_atexit is not None:
    _register_atexit(_close_at_exit)
else:  # pragma: no cover - every CPython >= 3.9 has threading._register_atexit
    import atexit

    atexit.register(_close_at_exit)


class Memory:
    """Synchronous memlane. Same constructor and methods as :class:`AsyncMemory`.

    Example:
        >>> with Memory(":memory:", embedder="hash") as m:  # doctest: +SKIP
        ...     m.add("Alice is vegetarian", user_id="alice")
        ...     m.search("what does alice eat", user_id="alice")
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
        self._portal = LoopThread()
        try:
            self._async = self._portal.call(
                _build(db, embedder, sessions, retrieval, formation, llm, strong_llm, jobs, recall, redact)
            )
        except BaseException:
            self._portal.stop()
            raise
        _OPEN.add(self)

    @classmethod
    def from_settings(cls, settings: MemlaneSettings | str | os.PathLike[str] | None = None) -> Memory:
        """A memory configured by memlane's settings: see :meth:`AsyncMemory.from_settings`."""
        if not isinstance(settings, MemlaneSettings):
            settings = load_settings(settings)
        return cls(**engine_arguments(settings))

    @property
    def sessions(self) -> SyncSessions:
        """The session store, with blocking methods (``create_session``, ``add_event``, ...)."""
        return SyncSessions(self._async.sessions, self._portal)

    @property
    def engine(self) -> AsyncMemory:
        """The async engine behind this facade."""
        return self._async

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of the engine (:attr:`engine`) on this memory's loop thread and block
        until it finishes: how sync code calls an engine method the facade does not wrap
        (``m.run(m.engine.sessions.get_session("s1"))``). Exceptions propagate.

        Raises:
            UsageError: called on the loop thread itself (a coroutine running there awaits the
                engine directly), after :meth:`close`, or in a process forked after this
                memory was made.
        """
        return self._portal.call(coro)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await a coroutine of the engine from async code: it runs on this memory's loop thread
        while the caller's event loop keeps serving other tasks (an async framework, such as an
        ADK ``Runner`` or a LangGraph ``ainvoke``, driving a sync ``Memory``). Cancelling the
        caller cancels the coroutine. On the loop thread itself the coroutine is awaited there.

        Raises:
            UsageError: after :meth:`close`, or in a process forked after this memory was made.
        """
        return await self._portal.call_async(coro)

    def close(self) -> None:
        """Close the engine and stop the loop thread (idempotent). A Memory left open is closed
        when the interpreter exits, quietly: queued formation jobs stay queued in the store and a
        job the worker had started is handed back to the queue."""
        self._close(timeout=None)

    def _close(self, *, timeout: float | None) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        _OPEN.discard(self)
        if self._portal.forked:  # a forked child: the engine and its thread belong to the parent
            return
        try:
            self._portal.call(self._async.close(), timeout=timeout)
        except TimeoutError:  # at exit, a loop stuck in a blocking call: leave the daemon thread
            return
        finally:
            if not self._portal.stuck:
                self._portal.stop()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @overload
    def add(
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
    def add(
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

    def add(
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
        """See :meth:`AsyncMemory.add`."""
        engine_add: Any = self._async.add
        result: list[Fact] | Job = self._portal.call(
            engine_add(
                messages,
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                metadata=metadata,
                infer=infer,
                scope=scope,
                timestamp=timestamp,
                wait=wait,
                kind=kind,
                embed=embed,
                channel=channel,
                sender=sender,
            )
        )
        return result

    def add_many(
        self, batches: Iterable[AddBatch | Mapping[str, Any]], *, embed: EmbedPriority = "now"
    ) -> builtins.list[builtins.list[Fact]]:
        """See :meth:`AsyncMemory.add_many`."""
        return self._portal.call(self._async.add_many(batches, embed=embed))

    def add_document(
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
        """See :meth:`AsyncMemory.add_document`."""
        return self._portal.call(
            self._async.add_document(
                text,
                title=title,
                source=source,
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                scope=scope,
                metadata=metadata,
                timestamp=timestamp,
                embed=embed,
            )
        )

    def fragments(
        self,
        document_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> builtins.list[Fact]:
        """See :meth:`AsyncMemory.fragments`."""
        return self._portal.call(
            self._async.fragments(document_id, user_id=user_id, agent_id=agent_id, session_id=session_id)
        )

    def parent_document(
        self,
        fragment_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> Fact:
        """See :meth:`AsyncMemory.parent_document`."""
        return self._portal.call(
            self._async.parent_document(fragment_id, user_id=user_id, agent_id=agent_id, session_id=session_id)
        )

    def embedding_progress(self) -> EmbeddingProgress:
        """See :meth:`AsyncMemory.embedding_progress`."""
        return self._portal.call(self._async.embedding_progress())

    def drain_embeddings(self) -> EmbeddingProgress:
        """See :meth:`AsyncMemory.drain_embeddings`."""
        return self._portal.call(self._async.drain_embeddings())

    def search(
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
        """See :meth:`AsyncMemory.search` (the query is embedded in this thread meanwhile:
        :meth:`AsyncMemory._search_prestart`)."""
        return self._portal.call(
            self._async.search(
                query,
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                top_k=top_k,
                filters=filters,
                debug=debug,
                mode=mode,
                match_threshold=match_threshold,
                unique=unique,
                as_of=as_of,
                valid_at=valid_at,
            ),
            meanwhile=self._async._search_prestart(query, mode=mode, match_threshold=match_threshold),
        )

    def get(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        as_of: datetime | str | None = None,
        valid_at: datetime | str | None = None,
    ) -> Fact:
        """See :meth:`AsyncMemory.get`."""
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return self._portal.call(self._async.get(fact_id, **ids, as_of=as_of, valid_at=valid_at))

    def list(
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
        """See :meth:`AsyncMemory.list`."""
        return self._portal.call(
            self._async.list(
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                limit=limit,
                cursor=cursor,
                include_invalid=include_invalid,
                kind=kind,
                filters=filters,
                as_of=as_of,
                valid_at=valid_at,
            )
        )

    def update(
        self,
        fact_id: str,
        text: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> Fact:
        """See :meth:`AsyncMemory.update`."""
        return self._portal.call(
            self._async.update(fact_id, text, user_id=user_id, agent_id=agent_id, session_id=session_id)
        )

    def delete(
        self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> Fact:
        """See :meth:`AsyncMemory.delete`."""
        return self._portal.call(self._async.delete(fact_id, user_id=user_id, agent_id=agent_id, session_id=session_id))

    def history(
        self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> builtins.list[HistoryEntry]:
        """See :meth:`AsyncMemory.history`."""
        return self._portal.call(
            self._async.history(fact_id, user_id=user_id, agent_id=agent_id, session_id=session_id)
        )

    def forget(self, user_id: str, *, shared: Literal["erase", "keep"] = "erase", sessions: bool = True) -> int:
        """See :meth:`AsyncMemory.forget`."""
        return self._portal.call(self._async.forget(user_id, shared=shared, sessions=sessions))

    def export_user(self, user_id: str) -> dict[str, Any]:
        """See :meth:`AsyncMemory.export_user`."""
        return self._portal.call(self._async.export_user(user_id))

    def check(self) -> CheckReport:
        """See :meth:`AsyncMemory.check`."""
        return self._portal.call(self._async.check())

    def stats(self, *, user_id: str | None = None, agent_id: str | None = None) -> StoreStats:
        """See :meth:`AsyncMemory.stats`."""
        return self._portal.call(self._async.stats(user_id=user_id, agent_id=agent_id))

    def users(
        self, agent_id: str | None = None, limit: int = 50, cursor: str | None = None, *, user_id: str | None = None
    ) -> UserPage:
        """See :meth:`AsyncMemory.users`."""
        return self._portal.call(self._async.users(agent_id, limit, cursor, user_id=user_id))

    def directory(self, *, user_id: str | None = None) -> Directory:
        """See :meth:`AsyncMemory.directory`."""
        return self._portal.call(self._async.directory(user_id=user_id))

    def backfill_embeddings(self, *, batch_size: int = 256) -> int:
        """See :meth:`AsyncMemory.backfill_embeddings`."""
        return self._portal.call(self._async.backfill_embeddings(batch_size=batch_size))

    # ---- formation
    def start(self) -> None:
        """See :meth:`AsyncMemory.start` (called by the constructor)."""
        return self._portal.call(self._async.start())

    def add_event(
        self,
        session_id: str,
        event: Event,
        *,
        app: str = "default",
        tier: int | None = None,
        channel: str | None = None,
        sender: str | None = None,
    ) -> Event:
        """See :meth:`AsyncMemory.add_event`."""
        return self._portal.call(
            self._async.add_event(session_id, event, app=app, tier=tier, channel=channel, sender=sender)
        )

    def link_identity(self, channel: str, sender: str, user_id: str) -> Identity:
        """See :meth:`AsyncMemory.link_identity`."""
        return self._portal.call(self._async.link_identity(channel, sender, user_id))

    def unlink_identity(self, channel: str, sender: str, *, user_id: str | None = None) -> bool:
        """See :meth:`AsyncMemory.unlink_identity`."""
        return self._portal.call(self._async.unlink_identity(channel, sender, user_id=user_id))

    def resolve_identity(self, channel: str, sender: str) -> str | None:
        """See :meth:`AsyncMemory.resolve_identity`."""
        return self._portal.call(self._async.resolve_identity(channel, sender))

    def identities(self, user_id: str) -> builtins.list[Identity]:
        """See :meth:`AsyncMemory.identities`."""
        return self._portal.call(self._async.identities(user_id))

    def create_session(
        self,
        *,
        channel: str | None = None,
        sender: str | None = None,
        user_ids: Sequence[str] = (),
        app: str = "default",
        agent_id: str | None = None,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> Session:
        """See :meth:`AsyncMemory.create_session`."""
        return self._portal.call(
            self._async.create_session(
                channel=channel,
                sender=sender,
                user_ids=user_ids,
                app=app,
                agent_id=agent_id,
                session_id=session_id,
                state=state,
            )
        )

    def form(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """See :meth:`AsyncMemory.form`."""
        return self._portal.call(self._async.form(session_id, app=app, wait=wait))

    def end_session(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """See :meth:`AsyncMemory.end_session`."""
        return self._portal.call(self._async.end_session(session_id, app=app, wait=wait))

    def reset_session(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """See :meth:`AsyncMemory.reset_session`."""
        return self._portal.call(self._async.reset_session(session_id, app=app, wait=wait))

    def sweep_idle(self) -> builtins.list[Job]:
        """See :meth:`AsyncMemory.sweep_idle`."""
        return self._portal.call(self._async.sweep_idle())

    def run_jobs(self, *, max_jobs: int | None = None) -> int:
        """See :meth:`AsyncMemory.run_jobs`."""
        return self._portal.call(self._async.run_jobs(max_jobs=max_jobs))

    def get_job(self, job_id: str) -> Job:
        """See :meth:`AsyncMemory.get_job`."""
        return self._portal.call(self._async.get_job(job_id))

    def list_jobs(self, *, status: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """See :meth:`AsyncMemory.list_jobs`."""
        return self._portal.call(self._async.list_jobs(status=status, limit=limit))

    def retry_job(self, job_id: str) -> Job:
        """See :meth:`AsyncMemory.retry_job`."""
        return self._portal.call(self._async.retry_job(job_id))

    def profile(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        items: Sequence[str] = (),
        tier: int = 0,
        as_of: datetime | str | None = None,
    ) -> str | None:
        """See :meth:`AsyncMemory.profile`."""
        return self._portal.call(self._async.profile(user_id, agent_id=agent_id, items=items, tier=tier, as_of=as_of))

    def reflections(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        absorbed: bool | None = None,
    ) -> builtins.list[Reflection]:
        """See :meth:`AsyncMemory.reflections`."""
        return self._portal.call(
            self._async.reflections(scope, user_id=user_id, agent_id=agent_id, session_id=session_id, absorbed=absorbed)
        )

    def consolidated(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> ConsolidatedMemory | None:
        """See :meth:`AsyncMemory.consolidated`."""
        return self._portal.call(
            self._async.consolidated(scope, user_id=user_id, agent_id=agent_id, session_id=session_id)
        )

    def consolidated_history(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> builtins.list[ConsolidatedVersion]:
        """See :meth:`AsyncMemory.consolidated_history`."""
        return self._portal.call(
            self._async.consolidated_history(
                scope, user_id=user_id, agent_id=agent_id, session_id=session_id, limit=limit
            )
        )

    def consolidate(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        wait: bool = True,
    ) -> FormationResult | Job:
        """See :meth:`AsyncMemory.consolidate`."""
        return self._portal.call(
            self._async.consolidate(scope, user_id=user_id, agent_id=agent_id, session_id=session_id, wait=wait)
        )

    def summaries(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        since: datetime | date | str | None = None,
        until: datetime | date | str | None = None,
        limit: int = 100,
    ) -> builtins.list[SessionSummary]:
        """See :meth:`AsyncMemory.summaries`."""
        return self._portal.call(
            self._async.summaries(user_id, agent_id=agent_id, since=since, until=until, limit=limit)
        )

    def timeline(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        limit: int = 50,
        before: datetime | str | None = None,
    ) -> Timeline:
        """See :meth:`AsyncMemory.timeline`."""
        return self._portal.call(self._async.timeline(user_id, agent_id=agent_id, limit=limit, before=before))

    def growth(
        self, user_id: str, *, bucket: Literal["day", "week", "month"] = "day", agent_id: str | None = None
    ) -> Growth:
        """See :meth:`AsyncMemory.growth`."""
        return self._portal.call(self._async.growth(user_id, bucket=bucket, agent_id=agent_id))

    def get_consolidation_status(
        self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> dict[str, ConsolidationStatus]:
        """See :meth:`AsyncMemory.get_consolidation_status`."""
        return self._portal.call(
            self._async.get_consolidation_status(user_id=user_id, agent_id=agent_id, session_id=session_id)
        )

    def get_memory_stats(
        self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> MemoryStats:
        """See :meth:`AsyncMemory.get_memory_stats`."""
        return self._portal.call(
            self._async.get_memory_stats(user_id=user_id, agent_id=agent_id, session_id=session_id)
        )

    def context(
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
        """See :meth:`AsyncMemory.context`."""
        return self._portal.call(
            self._async.context(
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
        )

    def window(
        self,
        session_id: str,
        *,
        app: str = "default",
        user_turns: ConfiguredInt = CONFIGURED,
        last_n: ConfiguredInt = CONFIGURED,
    ) -> builtins.list[Event]:
        """See :meth:`AsyncMemory.window`."""
        return self._portal.call(self._async.window(session_id, app=app, user_turns=user_turns, last_n=last_n))

    # ---- the review queue (docs/review.md)
    def propose(
        self,
        text: str | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        action: ProposalAction = "add",
        target_id: str | None = None,
        reason: str | None = None,
        scope: ScopeName = "user",
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        origin: str = "api",
    ) -> Proposal:
        """See :meth:`AsyncMemory.propose`."""
        return self._portal.call(
            self._async.propose(
                text,
                user_id=user_id,
                agent_id=agent_id,
                action=action,
                target_id=target_id,
                reason=reason,
                scope=scope,
                session_id=session_id,
                metadata=metadata,
                origin=origin,
            )
        )

    def proposals(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        status: str | None = "pending",
        limit: int = 50,
    ) -> builtins.list[Proposal]:
        """See :meth:`AsyncMemory.proposals`."""
        return self._portal.call(self._async.proposals(user_id=user_id, agent_id=agent_id, status=status, limit=limit))

    def get_proposal(self, proposal_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> Proposal:
        """See :meth:`AsyncMemory.get_proposal`."""
        return self._portal.call(self._async.get_proposal(proposal_id, user_id=user_id, agent_id=agent_id))

    def review(
        self,
        proposal_id: str,
        *,
        approve: bool = True,
        edit: str | None = None,
        reviewer: str = "reviewer",
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Proposal:
        """See :meth:`AsyncMemory.review`."""
        return self._portal.call(
            self._async.review(
                proposal_id, approve=approve, edit=edit, reviewer=reviewer, user_id=user_id, agent_id=agent_id
            )
        )


async def _build(
    db: str | os.PathLike[str] | None,
    embedder: str | Embedder | None,
    sessions: str | SessionStore,
    retrieval: RetrievalConfig | None,
    formation: FormationConfig | None,
    llm: str | LLM | FormationModel | None,
    strong_llm: str | LLM | FormationModel | None,
    jobs: str | JobStore | None = None,
    recall: RecallConfig | None = None,
    redact: RedactSpec = None,
) -> AsyncMemory:
    memory = AsyncMemory(
        db,
        embedder=embedder,
        sessions=sessions,
        jobs=jobs,
        retrieval=retrieval,
        formation=formation,
        llm=llm,
        strong_llm=strong_llm,
        recall=recall,
        redact=redact,
    )
    await memory.start()
    return memory


class SyncSessions:
    """Blocking view of a :class:`SessionStore`, returned by :attr:`Memory.sessions`."""

    def __init__(self, store: SessionStore, portal: LoopThread) -> None:
        self._store = store
        self._portal = portal

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._portal.call(attr(*args, **kwargs))

        call.__doc__ = attr.__doc__
        call.__name__ = name
        return call
