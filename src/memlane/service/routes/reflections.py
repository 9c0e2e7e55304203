"""Always-in-context memory for the inspector: ``GET /v1/reflections`` (a scope's reflection
buffer), ``GET /v1/consolidated`` (the scope's current blob), ``GET /v1/consolidated/history``
(every version of it) and ``POST /v1/consolidate`` (merge the buffer into the blob now).

``scope`` names the buffer: ``user`` (keyed by ``user_id`` and ``agent_id``), ``agent`` (by
``agent_id`` alone: the agent's shared buffer, which a user-bound key may read as it reads the
agent's shared memories) or ``session`` (by ``session_id``, ``user_id`` and ``agent_id``). A
user-bound key acts for its own user only (403 naming another) and names only rooms its user
takes part in (404 otherwise); it never consolidates the agent's shared buffer (403), and a
read-only key never consolidates.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from memlane.formation.runner import FormationResult
from memlane.models import ConsolidatedMemory, ConsolidatedVersion, Reflection
from memlane.service.deps import Caller, Engine, authorize, page
from memlane.service.routes._memory_models import Scoped, ScopeIds, ScopeQuery
from memlane.service.routes.sessions import JobAccepted, accepted

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


class VersionOut(BaseModel):
    """One version of the blob, as that consolidation wrote it."""

    version: int
    content: str
    consolidated_at: datetime | None
    word_count: int
    word_limit: int

    @classmethod
    def of(cls, v: ConsolidatedVersion) -> VersionOut:
        return cls(
            version=v.version,
            content=v.content,
            consolidated_at=v.consolidated_at,
            word_count=v.word_count,
            word_limit=v.word_limit,
        )


class VersionList(BaseModel):
    """The blob's versions, newest first."""

    scope: ScopeName
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    versions: list[VersionOut]


@router.get("/consolidated/history", operation_id="consolidated_history", response_model=VersionList)
async def consolidated_history(
    request: Request,
    memory: Engine,
    caller: Caller,
    ids: Scoped,
    scope: ScopeParam = "user",
    limit: Annotated[int | None, Query(description="at most this many (1..the server's cap)")] = None,
) -> VersionList:
    """Every version of a scope's consolidated blob, newest first."""
    who = await ids.ids(memory, caller, write=False)
    found = await memory.consolidated_history(scope, limit=page(request, limit), **who)
    return VersionList(scope=scope, **_key(scope, who), versions=[VersionOut.of(v) for v in found])


class ConsolidateRequest(BaseModel):
    """Which buffer to consolidate now, and whether to wait for it."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeName = "user"
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    app: str = Field(default="default", description="the app of session_id (user-bound keys)")
    wait: bool = Field(default=False, description="true: run it now and answer 200 with the new blob")


class Consolidated(BaseModel):
    """200 (``wait: true``): the job ran; ``consolidated`` is the new blob, or null (with
    ``skipped``) when no reflection was waiting."""

    job_id: str
    status: str
    consolidated: ConsolidatedOut | None
    skipped: str | None


@router.post(
    "/consolidate",
    status_code=202,
    operation_id="consolidate",
    response_model=JobAccepted | Consolidated,
    responses={200: {"model": Consolidated, "description": "wait=true: the job ran"}},
)
async def consolidate(
    body: ConsolidateRequest, memory: Engine, caller: Caller, response: Response
) -> JobAccepted | Consolidated:
    """Merge a scope's pending reflections into its blob now, however few (a ``consolidate``
    job: 202 and its ``status_url``, or with ``wait: true`` 200 and the new blob)."""
    authorize(caller, user_id=body.user_id, write=True, scope="agent" if body.scope == "agent" else "user")
    query = ScopeQuery(user_id=body.user_id, agent_id=body.agent_id, session_id=body.session_id, app=body.app)
    who = await query.ids(memory, caller, write=True)
    if not body.wait:
        job = await memory.consolidate(body.scope, wait=False, **who)
        assert not isinstance(job, FormationResult)
        return accepted(job, response)
    result = await memory.consolidate(body.scope, wait=True, **who)
    assert isinstance(result, FormationResult)
    response.status_code = 200
    blob = result.consolidated[0] if result.consolidated else None
    out = ConsolidatedOut.of(blob, body.scope, _key(body.scope, who), memory.formation_config.word_limit[body.scope])
    return Consolidated(
        job_id=result.job_id, status="done", consolidated=out if blob is not None else None, skipped=result.skipped
    )
