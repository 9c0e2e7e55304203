"""adk-rs's memory services as thin configurations of the memlane engine (no extra needed).

adk-rs (``adk_rs::services::mem``) ships two ``MemoryService`` backends; these classes give the
same surface over one memlane memory, an :class:`~memlane.memory.AsyncMemory` or a sync
:class:`~memlane.sync.Memory`::

    memory = AsyncMemory("agent.db")
    vectors = VectorMemoryService(memory).with_top_k(5).with_min_score(0.3)
    substrings = InMemoryMemoryService(memory)
    await vectors.add_session_to_memory(session)          # a memlane Session
    found = await vectors.search_memory(app_name="hotel", user_id="alice", query="room preferences")

* :class:`InMemoryMemoryService`: ``search_memory`` is a case-insensitive substring match over
  each memory's text (``search(mode="substring")``), newest first.
* :class:`VectorMemoryService`: ranks by cosine similarity alone (``search(mode="vector")``):
  top 5 by default and no similarity floor (every memory with a vector can be returned);
  ``with_top_k(k)`` and ``with_min_score(score)`` (a cosine in [-1, 1], memlane's per-call
  ``match_threshold``) return a reconfigured service, as adk-rs's builders do.

Both keep one bucket per ``(app_name, user_id)``: the app is memlane's agent namespace
(:func:`memlane.models.agent_namespace`, ``"default"`` meaning none) and the user memlane's
``user_id``; an entry is stored per event with non-empty text, author and timestamp kept, as a
verbatim memory. Unlike adk-rs's process-local stores, it is durable (the memlane database).

Results are :class:`SearchMemoryResponse` ``{memories: [MemoryEntry]}`` shaped as adk-rs's:
``content`` is a Content (``{"role", "parts": [{"text"}]}``), ``author`` the original event's
author, ``timestamp`` the original event time in **seconds** (a float, adk-rs's ``Option<f64>``;
google-adk's Python ``MemoryEntry`` takes an ISO-8601 string instead: see
:mod:`memlane.adapters.adk`).
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from memlane import inputs
from memlane._binding import Binding, MemoryLike
from memlane.errors import InvalidInputError, ScopeError
from memlane.memory import AsyncMemory
from memlane.models import Hit, agent_namespace
from memlane.models import Session as MemlaneSession
from memlane.search import SearchMode

__all__ = [
    "VECTOR_TOP_K",
    "Content",
    "InMemoryMemoryService",
    "MemoryEntry",
    "Part",
    "SearchMemoryResponse",
    "VectorMemoryService",
]

#: adk-rs ``VectorMemoryService::new``: top 5 results.
VECTOR_TOP_K = 5
#: adk-rs's ``InMemoryMemoryService`` returns every match; memlane returns at most this many.
SUBSTRING_TOP_K = 100
#: A search with app ``"default"`` reads every memory of the user; this many are fetched before
#: the other apps' memories are left out.
_WIDE_TOP_K = 100


class Part(BaseModel):
    """One part of a :class:`Content` (text only)."""

    model_config = ConfigDict(extra="forbid")

    text: str


class Content(BaseModel):
    """adk-rs's ``Content``: a role and its parts."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "model"]
    parts: list[Part]

    def text(self) -> str:
        """The parts' text, concatenated (adk-rs ``text_concat``)."""
        return "".join(p.text for p in self.parts)


class MemoryEntry(BaseModel):
    """adk-rs's ``MemoryEntry``: the recalled snippet plus provenance from the original event."""

    model_config = ConfigDict(extra="forbid")

    content: Content
    """The memory content, a text part."""
    author: str | None = None
    """Author of the original event (``"user"`` or an agent name)."""
    timestamp: float | None = None
    """Original event timestamp in seconds (Unix time, UTC)."""
    id: str | None = Field(default=None, exclude=True)
    """The memlane fact id (not part of adk-rs's shape; left out of ``model_dump``)."""


class SearchMemoryResponse(BaseModel):
    """adk-rs's ``SearchMemoryResponse { memories }`` envelope."""

    model_config = ConfigDict(extra="forbid")

    memories: list[MemoryEntry] = Field(default_factory=list)


def _entry(hit: Hit) -> MemoryEntry:
    fact = hit.fact
    role: Literal["user", "model"] = "user" if fact.author in (None, "user") else "model"
    when = fact.occurred_at or fact.formed_at
    return MemoryEntry(
        content=Content(role=role, parts=[Part(text=fact.content)]),
        author=fact.author,
        timestamp=when.timestamp(),
        id=fact.id,
    )


class _MemoryService:
    """The adk-rs ``MemoryService`` trait over one memlane memory, searching with ``mode``."""

    mode: SearchMode

    def __init__(self, memory: MemoryLike, *, top_k: int, min_score: float | None) -> None:
        self._memory = memory
        self._binding = Binding(memory, who=type(self).__name__)
        self.top_k = inputs.integer(top_k, "top_k", 1, 100)
        self.min_score = inputs.optional_number(min_score, "min_score", -1.0, 1.0)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(top_k={self.top_k}, min_score={self.min_score})"

    @property
    def memory(self) -> AsyncMemory:
        """The memlane engine this service writes to and reads from."""
        return self._binding.require(type(self).__name__)

    async def add_session_to_memory(self, session: MemlaneSession) -> None:
        """Index a session's events: one verbatim memory per event with text (author and
        timestamp kept; adding a session again stores nothing twice). A session with several
        users, or none, goes to the app's shared memory, never into one user's."""
        if not isinstance(session, MemlaneSession):
            raise InvalidInputError(f"session must be a memlane Session, got {inputs.show(session)}")
        events = [e for e in session.events if inputs.has_visible(e.text)]
        if not events:
            return
        ns = agent_namespace(session.app, session.agent_id)
        engine = self.memory
        if session.is_group or session.user_id is None:
            if ns is None:
                raise ScopeError("a session without one user needs an app name to be stored as the app's shared memory")
            await self._binding.run(engine.add(events, agent_id=ns, session_id=session.id, scope="agent"))
            return
        await self._binding.run(engine.add(events, user_id=session.user_id, agent_id=ns, session_id=session.id))

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The ``(app_name, user_id)`` entries matching ``query``, best first (at most
        ``top_k``). A blank query finds nothing."""
        app_name = inputs.identifier(app_name, "app_name", error=InvalidInputError)
        user_id = inputs.identifier(user_id, "user_id", error=InvalidInputError)
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {inputs.show(query)}")
        if not inputs.has_visible(query):
            return SearchMemoryResponse()
        ns = agent_namespace(app_name)
        top_k = self.top_k if ns is not None else max(self.top_k, _WIDE_TOP_K)
        result = await self._binding.run(
            self.memory.search(
                query, user_id=user_id, agent_id=ns, top_k=top_k, mode=self.mode, match_threshold=self.min_score
            )
        )
        hits = result.hits if ns is not None else [h for h in result.hits if h.fact.agent_id is None]
        return SearchMemoryResponse(memories=[_entry(h) for h in hits[: self.top_k]])


class InMemoryMemoryService(_MemoryService):
    """adk-rs ``InMemoryMemoryService``: a case-insensitive substring match over each entry's
    text (memlane ``search(mode="substring")``), newest first, at most ``top_k`` (100)."""

    mode: SearchMode = "substring"

    def __init__(self, memory: MemoryLike, *, top_k: int = SUBSTRING_TOP_K) -> None:
        super().__init__(memory, top_k=top_k, min_score=None)


class VectorMemoryService(_MemoryService):
    """adk-rs ``VectorMemoryService``: entries ranked by cosine similarity to the query
    (memlane ``search(mode="vector")``, the memory's embedder), the top ``top_k`` (5) above an
    optional similarity floor ``min_score`` (none by default: memlane's own 0.3 floor is off).

    Raises:
        ConfigError: on search, when the memory has no embedder.
    """

    mode: SearchMode = "vector"

    def __init__(self, memory: MemoryLike, *, top_k: int = VECTOR_TOP_K, min_score: float | None = None) -> None:
        # no floor: every cosine counts (-1 is the lowest a cosine can be)
        super().__init__(memory, top_k=top_k, min_score=-1.0 if min_score is None else min_score)
        self._floor = min_score

    def __repr__(self) -> str:
        return f"VectorMemoryService(top_k={self.top_k}, min_score={self._floor})"

    def with_top_k(self, k: int) -> Self:
        """The same service returning at most ``k`` results per search."""
        return type(self)(self._memory, top_k=k, min_score=self._floor)

    def with_min_score(self, score: float) -> Self:
        """The same service returning only entries with cosine similarity >= ``score`` (-1..1)."""
        if score is None:
            raise InvalidInputError("min_score must be a number from -1 to 1, got None")
        return type(self)(self._memory, top_k=self.top_k, min_score=score)
