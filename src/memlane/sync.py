"""The sync facade: :class:`Memory` drives the one engine, :class:`AsyncMemory`, on a
private event-loop thread. Every method is a one-line pass-through; no logic lives here."""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

from memlane._portal import LoopThread
from memlane.memory import AsyncMemory, Message
from memlane.models import Fact, HistoryEntry, Page, SearchMemoryResponse, SearchResult, Session
from memlane.providers.embed.base import Embedder
from memlane.retrieval.hybrid import RetrievalConfig
from memlane.stores.base import SessionStore, StoreStats


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
        retrieval: RetrievalConfig | None = None,
    ) -> None:
        self._portal = LoopThread()
        try:
            self._async = self._portal.call(_build(db, embedder, sessions, retrieval))
        except BaseException:
            self._portal.stop()
            raise

    @property
    def sessions(self) -> SyncSessions:
        """The session store, with blocking methods (``create_session``, ``add_event``, ...)."""
        return SyncSessions(self._async.sessions, self._portal)

    @property
    def engine(self) -> AsyncMemory:
        """The async engine behind this facade."""
        return self._async

    def close(self) -> None:
        """Close the engine and stop the loop thread (idempotent)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            self._portal.call(self._async.close())
        finally:
            self._portal.stop()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def add(
        self,
        messages: str | Sequence[Message],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        infer: bool = False,
        scope: Literal["user", "agent"] = "user",
        timestamp: datetime | None = None,
    ) -> list[Fact]:
        """See :meth:`AsyncMemory.add`."""
        return self._portal.call(
            self._async.add(
                messages, user_id=user_id, agent_id=agent_id, session_id=session_id, metadata=metadata,
                infer=infer, scope=scope, timestamp=timestamp,
            )
        )  # fmt: skip

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
    ) -> SearchResult:
        """See :meth:`AsyncMemory.search`."""
        return self._portal.call(
            self._async.search(
                query, user_id=user_id, agent_id=agent_id, session_id=session_id, top_k=top_k,
                filters=filters, debug=debug,
            )
        )  # fmt: skip

    def get(self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> Fact:
        """See :meth:`AsyncMemory.get`."""
        return self._portal.call(self._async.get(fact_id, user_id=user_id, agent_id=agent_id))

    def list(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        include_invalid: bool = False,
    ) -> Page:
        """See :meth:`AsyncMemory.list`."""
        return self._portal.call(
            self._async.list(
                user_id=user_id, agent_id=agent_id, session_id=session_id, limit=limit, cursor=cursor,
                include_invalid=include_invalid,
            )
        )  # fmt: skip

    def update(self, fact_id: str, text: str, *, user_id: str | None = None, agent_id: str | None = None) -> Fact:
        """See :meth:`AsyncMemory.update`."""
        return self._portal.call(self._async.update(fact_id, text, user_id=user_id, agent_id=agent_id))

    def delete(self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> Fact:
        """See :meth:`AsyncMemory.delete`."""
        return self._portal.call(self._async.delete(fact_id, user_id=user_id, agent_id=agent_id))

    def history(
        self, fact_id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> builtins.list[HistoryEntry]:
        """See :meth:`AsyncMemory.history`."""
        return self._portal.call(self._async.history(fact_id, user_id=user_id, agent_id=agent_id))

    def forget(self, user_id: str) -> int:
        """See :meth:`AsyncMemory.forget`."""
        return self._portal.call(self._async.forget(user_id))

    def stats(self, *, user_id: str | None = None, agent_id: str | None = None) -> StoreStats:
        """See :meth:`AsyncMemory.stats`."""
        return self._portal.call(self._async.stats(user_id=user_id, agent_id=agent_id))

    def backfill_embeddings(self, *, batch_size: int = 256) -> int:
        """See :meth:`AsyncMemory.backfill_embeddings`."""
        return self._portal.call(self._async.backfill_embeddings(batch_size=batch_size))

    def add_session_to_memory(self, session: Session) -> builtins.list[Fact]:
        """See :meth:`AsyncMemory.add_session_to_memory`."""
        return self._portal.call(self._async.add_session_to_memory(session))

    def search_memory(self, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """See :meth:`AsyncMemory.search_memory`."""
        return self._portal.call(self._async.search_memory(app_name, user_id, query))


async def _build(
    db: str | os.PathLike[str] | None,
    embedder: str | Embedder | None,
    sessions: str | SessionStore,
    retrieval: RetrievalConfig | None,
) -> AsyncMemory:
    return AsyncMemory(db, embedder=embedder, sessions=sessions, retrieval=retrieval)


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
