"""Request and response models shared by the long-term memory routes (memories, search,
documents): a fact as clients see it (without its embedding), scope parameters, checks."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypedDict

from fastapi import Depends, Query
from pydantic import BaseModel

from memlane.errors import NotFoundError
from memlane.memory import AsyncMemory
from memlane.models import Fact
from memlane.service.auth import Principal, authorize

__all__ = ["FactOut", "ScopeIds", "ScopeQuery", "Scoped", "check_room"]


class FactOut(BaseModel):
    """A memory (its embedding is not returned)."""

    id: str
    content: str
    hash: str
    scope: Literal["user", "agent", "room"]
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    kind: Literal["fact", "message", "document", "fragment", "description", "custom", "summary"]
    author: str | None
    seq: int | None
    occurred_at: datetime | None
    formed_at: datetime
    updated_at: datetime
    access_count: int
    version: int
    source_event_ids: list[str]
    valid_from: datetime
    invalid_at: datetime | None
    metadata: dict[str, Any]

    @classmethod
    def of(cls, fact: Fact) -> FactOut:
        return cls.model_validate(fact.model_dump(exclude={"embedding"}))


async def check_room(memory: AsyncMemory, caller: Principal, session_id: str | None, app: str) -> None:
    """A user-bound key names a room (``session_id``) only if its user takes part in that
    session of ``app`` and in every other app's session of that id; otherwise the room is not
    found (404, its existence not revealed).

    Room memories are keyed by agent and session id, not by app (``r|agent|room``): checking
    only the named app let a user open a session of the same id in another app and read a
    room of which she is no member. The check is made where the room lives: every session
    that carries its id."""
    if session_id is None or caller.user_id is None:
        return
    sessions = await memory.sessions.sessions_with_id(session_id)
    if not any(s.app == app for s in sessions) or any(caller.user_id not in s.user_ids for s in sessions):
        raise NotFoundError(f"no session {session_id!r} in app {app!r}")


class ScopeIds(TypedDict):
    """The scope keywords of an engine call."""

    user_id: str | None
    agent_id: str | None
    session_id: str | None


class ScopeQuery:
    """The scope query parameters every memory read and write takes: whose memory
    (``user_id``), under which agent (``agent_id``), in which room (``session_id`` of ``app``)."""

    def __init__(
        self,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        app: Annotated[str, Query(description="the app of session_id (the room a user-bound key names)")] = "default",
    ) -> None:
        self.user_id, self.agent_id, self.session_id, self.app = user_id, agent_id, session_id, app

    async def ids(self, memory: AsyncMemory, caller: Principal, *, write: bool) -> ScopeIds:
        """``user_id`` / ``agent_id`` / ``session_id`` for the engine call, once the caller may
        act for that user (:func:`authorize`) and, for a user-bound key, takes part in the room."""
        user = authorize(caller, user_id=self.user_id, write=write)
        await check_room(memory, caller, self.session_id, self.app)
        return ScopeIds(user_id=user, agent_id=self.agent_id, session_id=self.session_id)

    async def ids_to_change(self, memory: AsyncMemory, caller: Principal, memory_id: str) -> ScopeIds:
        """:meth:`ids` for a change of memory ``memory_id``: a user-bound key never changes the
        agent's shared memory (the memory's own scope is checked, not only the request's)."""
        ids = await self.ids(memory, caller, write=True)
        if caller.user_id is not None:
            current = await memory.get(memory_id, **ids)
            authorize(caller, user_id=ids["user_id"], write=True, scope=current.scope)
        return ids


#: The scope parameters as a FastAPI dependency (query parameters).
Scoped = Annotated[ScopeQuery, Depends()]
