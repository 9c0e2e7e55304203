"""What every group of the engine's methods reads: :class:`EngineState`, and :func:`opening`.

:class:`memlane.memory.AsyncMemory` is assembled from method groups, one per concept, each in
its module under ``engine/`` (documents, embeddings, privacy, status, formation) beside the
store-level functions it calls. The groups read the engine's state through the attributes
declared here (set by ``AsyncMemory.open``), so none of them imports ``memory.py``.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from memlane.agent.config import RecallConfig
from memlane.formation.config import FormationConfig
from memlane.models import Scope
from memlane.providers.embed.base import Embedder
from memlane.providers.llm.base import UsageMeter
from memlane.retrieval.hybrid import RetrievalConfig
from memlane.stores.base import ContextCache, FactStore, JobStore, ReflectionStore, SessionStore

if TYPE_CHECKING:
    from memlane.engine.embeddings import EmbeddingLifecycle
    from memlane.engine.search import Searcher
    from memlane.engine.writes import Writer
    from memlane.formation.pipeline import Pipeline
    from memlane.formation.runner import FormationRunner

__all__ = ["MAX_TIER", "EngineState", "EngineStores", "opening"]

#: Highest user tier accepted (``profile(tier=...)``, ``add_event(tier=...)``).
MAX_TIER = 1_000_000


@dataclass(frozen=True)
class EngineStores:
    """The stores an open engine works on, each named for what it holds (``memory.stores``).

    ``memory.facts``, ``memory.jobs``, ``memory.sessions`` and ``memory.contexts`` are the same
    objects; the reflection store is ``memory.stores.reflections`` (also
    ``memory.reflection_store``), because ``memory.reflections(...)`` is the method that lists
    reflections."""

    facts: FactStore
    """Long-term memories: facts, messages, documents and their history."""
    reflections: ReflectionStore
    """Reflections and the versioned consolidated blobs (often the same object as ``facts``)."""
    jobs: JobStore
    """The formation job queue."""
    sessions: SessionStore
    """Sessions and their events."""
    contexts: ContextCache
    """Assembled memory contexts, cached."""


class EngineState:
    """The engine's state, declared for its method groups (annotations only: the values are
    set by ``AsyncMemory.__init__`` and ``AsyncMemory.open``)."""

    db_path: str
    retrieval: RetrievalConfig
    formation_config: FormationConfig
    recall_config: RecallConfig
    facts: FactStore
    reflection_store: ReflectionStore
    jobs: JobStore
    sessions: SessionStore
    contexts: ContextCache
    stores: EngineStores
    embedder: Embedder | None
    meter: UsageMeter
    pipeline: Pipeline
    formation: FormationRunner
    search_engine: Searcher
    _opened: bool
    _erasures: int
    _embeddings: EmbeddingLifecycle
    _writer: Writer
    _query_cache: OrderedDict[str, Any]

    async def open(self) -> Any:  # pragma: no cover - AsyncMemory.open
        raise NotImplementedError

    @staticmethod
    def _scope(user_id: str | None, agent_id: str | None, session_id: str | None = None) -> Scope:
        return Scope(user_id=user_id, agent_id=agent_id, session_id=session_id)


S = TypeVar("S", bound=EngineState)
P = ParamSpec("P")
R = TypeVar("R")


def opening(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """Open the memory (stores, embedder, models) on first use of a public method."""

    @functools.wraps(method)
    async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if not self._opened:
            await self.open()
        return await method(self, *args, **kwargs)

    return wrapper
