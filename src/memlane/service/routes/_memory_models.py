"""Request and response models shared by the long-term memory routes (memories, search,
documents): a fact as clients see it (without its embedding), scope parameters, checks."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from memlane.errors import NotFoundError
from memlane.memory import AsyncMemory
from memlane.models import Fact
from memlane.service.auth import Principal

__all__ = ["FactOut", "check_room"]


class FactOut(BaseModel):
    """A memory (its embedding is not returned)."""

    id: str
    content: str
    hash: str
    scope: Literal["user", "agent", "room"]
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    kind: Literal["fact", "message", "document", "fragment", "description", "custom"]
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
    session of ``app``; otherwise the room is not found (404, its existence not revealed)."""
    if session_id is None or caller.user_id is None:
        return
    session = await memory.sessions.get_session(session_id, app=app)
    if session is None or caller.user_id not in session.user_ids:
        raise NotFoundError(f"no session {session_id!r} in app {app!r}")
