"""Always-in-context memory over HTTP: ``GET /v1/context`` (the ``<MemoryContext>`` block),
``GET /v1/profile``, ``GET /v1/stats``, ``GET /v1/consolidation-status``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from memlane.engine.context import estimate_tokens
from memlane.service.deps import Caller, Engine, authorize
from memlane.service.routes._memory_models import Scoped
from memlane.service.routes._temporal import AsOf

router = APIRouter(prefix="/v1", tags=["context"])


class ContextOut(BaseModel):
    """The block, with its size by the counter the budget cut uses (``estimate_tokens``)."""

    context: str
    tokens: int
    budget_tokens: int | None


class ProfileOut(BaseModel):
    user_id: str
    profile: str | None


class StatsOut(BaseModel):
    facts: int
    valid_facts: int
    partitions: int
    reflections: int
    consolidated: int
    sessions: int
    events: int
    embedder: str | None
    dim: int | None


class ScopeStatus(BaseModel):
    buffer_size: int
    threshold: int
    needs_consolidation: bool
    word_limit: int
    current_word_count: int
    version: int
    last_consolidated_at: datetime | None


class ConsolidationStatus(BaseModel):
    scopes: dict[str, ScopeStatus]


@router.get("/context", operation_id="memory_context", response_model=ContextOut)
async def context(
    memory: Engine,
    caller: Caller,
    scope: Scoped,
    budget_tokens: Annotated[int | None, Query(description="cut the block to this many tokens")] = None,
    as_of: AsOf = None,
) -> ContextOut:
    """The ``<MemoryContext>`` block for a turn (profile, consolidated memory, recent facts)
    and its size in tokens (memlane's estimate, the one ``budget_tokens`` cuts by); ``as_of``:
    the block as memory held it then (docs/temporal.md)."""
    ids = await scope.ids(memory, caller, write=False)
    text = await memory.context(**ids, budget_tokens=budget_tokens, as_of=as_of)
    return ContextOut(context=text, tokens=estimate_tokens(text), budget_tokens=budget_tokens)


@router.get("/profile", operation_id="profile", response_model=ProfileOut)
async def profile(
    memory: Engine, caller: Caller, user_id: str | None = None, agent_id: str | None = None, as_of: AsOf = None
) -> ProfileOut:
    """The user's profile: their facts distilled into importance-ranked bullets (null: nothing
    known); ``as_of``: from their facts as memory held them then."""
    user = authorize(caller, user_id=user_id, write=False)
    text = await memory.profile(user, agent_id=agent_id, as_of=as_of)  # type: ignore[arg-type]  # None: the engine's 400
    return ProfileOut(user_id=str(user), profile=text)


@router.get("/stats", operation_id="stats", response_model=StatsOut)
async def stats(memory: Engine, caller: Caller, user_id: str | None = None, agent_id: str | None = None) -> StatsOut:
    """Counts for one user/agent, or for the whole tenant when neither is given."""
    user = authorize(caller, user_id=user_id, write=False)
    st = await memory.stats(user_id=user, agent_id=agent_id)
    return StatsOut(
        facts=st.facts,
        valid_facts=st.valid_facts,
        partitions=st.partitions,
        reflections=st.reflections,
        consolidated=st.consolidated,
        sessions=st.sessions,
        events=st.events,
        embedder=st.embedder,
        dim=st.dim,
    )


@router.get("/consolidation-status", operation_id="consolidation_status", response_model=ConsolidationStatus)
async def consolidation_status(memory: Engine, caller: Caller, scope: Scoped) -> ConsolidationStatus:
    """Per scope (agent / user / session): the reflection buffer, its threshold, the blob's size."""
    status = await memory.get_consolidation_status(**await scope.ids(memory, caller, write=False))
    return ConsolidationStatus(scopes={k: ScopeStatus.model_validate(v.model_dump()) for k, v in status.items()})
