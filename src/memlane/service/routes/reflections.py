"""Always-in-context memory for the inspector: ``GET /v1/reflections`` (a scope's reflection
buffer) and ``GET /v1/consolidated`` (the scope's current blob).

``scope`` names the buffer: ``user`` (keyed by ``user_id`` and ``agent_id``), ``agent`` (by
``agent_id`` alone: the agent's shared buffer, which a user-bound key may read as it reads the
agent's shared memories) or ``session`` (by ``session_id``, ``user_id`` and ``agent_id``). A
user-bound key acts for its own user only (403 naming another) and names only rooms its user
takes part in (404 otherwise).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from memlane.models import ConsolidatedMemory, Reflection
from memlane.service.deps import Caller, Engine
from memlane.service.routes._memory_models import Scoped, ScopeIds

router = APIRouter(prefix="/v1", tags=["reflections"])

ScopeName = Literal["user", "agent", "session"]
ScopeParam = Annotated[ScopeName, Query(description="the buffer: user, agent or session")]


class ReflectionOut(BaseModel):
    """One reflection of a scope's buffer (``absorbed``: already merged into the blob)."""

    id: str
    content: str
    scope: ScopeName
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    absorbed: bool
    formed_at: datetime

    @classmethod
    def of(cls, r: Reflection) -> ReflectionOut:
        return cls.model_validate(r.model_dump(exclude={"source_user_ids"}))


class ReflectionList(BaseModel):
    reflections: list[ReflectionOut]


class ConsolidatedOut(BaseModel):
    """A scope's current consolidated blob; ``content`` is null (and ``version`` 0) before its
    first consolidation."""

    scope: ScopeName
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    id: str | None
    content: str | None
    version: int
    word_limit: int
    word_count: int
    last_consolidated_at: datetime | None

    @classmethod
    def of(
        cls,
        blob: ConsolidatedMemory | None,
        scope: ScopeName,
        ids: dict[str, str | None],
        word_limit: int,
    ) -> ConsolidatedOut:
        if blob is None:
            return cls(
                scope=scope,
                agent_id=ids["agent_id"],
                user_id=ids["user_id"],
                session_id=ids["session_id"],
                id=None,
                content=None,
                version=0,
                word_limit=word_limit,
                word_count=0,
                last_consolidated_at=None,
            )
        return cls(
            scope=scope,
            agent_id=blob.agent_id,
            user_id=blob.user_id,
            session_id=blob.session_id,
            id=blob.id,
            content=blob.consolidated_content,
            version=blob.version,
            word_limit=blob.word_limit,
            word_count=len(blob.consolidated_content.split()),
            last_consolidated_at=blob.last_consolidated_at,
        )


def _key(scope: ScopeName, ids: ScopeIds) -> dict[str, str | None]:
    """The ids a scope's buffer and blob are keyed by (``formation.pipeline.scope_key``)."""
    return {
        "agent_id": ids["agent_id"],
        "user_id": ids["user_id"] if scope != "agent" else None,
        "session_id": ids["session_id"] if scope == "session" else None,
    }


@router.get("/reflections", operation_id="list_reflections", response_model=ReflectionList)
async def list_reflections(
    memory: Engine,
    caller: Caller,
    ids: Scoped,
    scope: ScopeParam = "user",
    absorbed: Annotated[bool | None, Query(description="true: merged ones only; false: the pending buffer")] = None,
) -> ReflectionList:
    """A scope's reflections, oldest first."""
    who = await ids.ids(memory, caller, write=False)
    found = await memory.reflections(scope, absorbed=absorbed, **who)
    return ReflectionList(reflections=[ReflectionOut.of(r) for r in found])


@router.get("/consolidated", operation_id="get_consolidated", response_model=ConsolidatedOut)
async def get_consolidated(memory: Engine, caller: Caller, ids: Scoped, scope: ScopeParam = "user") -> ConsolidatedOut:
    """A scope's current consolidated blob (null ``content`` before its first consolidation)."""
    who = await ids.ids(memory, caller, write=False)
    blob = await memory.consolidated(scope, **who)
    return ConsolidatedOut.of(blob, scope, _key(scope, who), memory.formation_config.word_limit[scope])
