"""``/v1/proposals``: the review queue (docs/review.md). Propose a change to long-term memory,
list proposals, review one (approve, with an optional edit, or reject).

Who: a user-bound key proposes, lists and reviews its own user's proposals only (another
user's is not found); it reviews no proposal about agent-shared memory (403), as it writes none.
A read-only key lists and reads, and is refused proposing and reviewing (403). A tenant-wide key
lists by ``user_id``, by ``agent_id`` (the agent's review queue: every user's), or both.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from memlane.models import Proposal
from memlane.service.auth import Principal
from memlane.service.deps import Caller, Engine, authorize, page
from memlane.service.routes._memory_models import check_room

router = APIRouter(prefix="/v1/proposals", tags=["proposals"])

StatusQuery = Literal["pending", "approved", "rejected", "stale", "all"]


class ProposalCreate(BaseModel):
    """A change to propose: ``add`` a fact, ``update`` a fact's text, ``delete`` a fact (with
    ``text``: the statement replacing it)."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    action: Literal["add", "update", "delete"] = "add"
    target_id: str | None = Field(default=None, description="the fact an update or delete changes")
    reason: str | None = None
    scope: Literal["user", "agent", "private", "shared"] = Field(default="user", description="an add's scope")
    session_id: str | None = Field(default=None, description="the source session, or a room memory target's room")
    app: str = Field(default="default", description="the app of session_id (user-bound keys)")
    metadata: dict[str, Any] | None = None


class ReviewIn(BaseModel):
    """A reviewer's decision."""

    model_config = ConfigDict(extra="forbid")

    approve: bool = True
    edit: str | None = Field(default=None, description="approve this text instead of the proposed one")
    reviewer: str | None = Field(
        default=None, description="who decides, recorded as the history's actor (default: the API key's id)"
    )


class ProposalList(BaseModel):
    proposals: list[Proposal]
    total: int


def _reviewer(caller: Principal, named: str | None) -> str:
    if named is not None:
        return named
    return f"key:{caller.key_id}" if caller.key_id else "api"


@router.get("", operation_id="list_proposals", response_model=ProposalList)
async def list_proposals(
    request: Request,
    memory: Engine,
    caller: Caller,
    user_id: str | None = None,
    agent_id: str | None = None,
    status: Annotated[
        StatusQuery, Query(description="pending (default), approved, rejected, stale or all")
    ] = "pending",
    limit: Annotated[int | None, Query(description="at most this many (1..the server's cap)")] = None,
) -> ProposalList:
    """Proposals newest first: a user's, an agent's (every user's), or a user's under an agent."""
    user = authorize(caller, user_id=user_id, write=False)
    found = await memory.proposals(
        user_id=user, agent_id=agent_id, status=None if status == "all" else status, limit=page(request, limit)
    )
    return ProposalList(proposals=found, total=len(found))


@router.post("", status_code=201, operation_id="propose", response_model=Proposal)
async def propose(body: ProposalCreate, memory: Engine, caller: Caller) -> Proposal:
    """Queue a change for a reviewer (nothing changes in memory until it is approved)."""
    user = authorize(caller, user_id=body.user_id, write=True)
    await check_room(memory, caller, body.session_id, body.app)
    return await memory.propose(
        body.text,
        user_id=user,
        agent_id=body.agent_id,
        action=body.action,
        target_id=body.target_id,
        reason=body.reason,
        scope=body.scope,
        session_id=body.session_id,
        metadata=body.metadata,
    )


@router.get("/{proposal_id}", operation_id="get_proposal", response_model=Proposal)
async def get_proposal(proposal_id: str, memory: Engine, caller: Caller) -> Proposal:
    """One proposal (404 for another user's, with a user-bound key)."""
    authorize(caller, user_id=None, write=False)
    return await memory.get_proposal(proposal_id, user_id=caller.user_id)


@router.post("/{proposal_id}/review", operation_id="review_proposal", response_model=Proposal)
async def review_proposal(proposal_id: str, body: ReviewIn, memory: Engine, caller: Caller) -> Proposal:
    """Approve (apply through formation's write path; ``status`` ``stale`` when the target changed
    since it was proposed: nothing applied) or reject a pending proposal; 409 once reviewed."""
    authorize(caller, user_id=None, write=True)
    p = await memory.get_proposal(proposal_id, user_id=caller.user_id)
    authorize(caller, user_id=p.user_id, write=True, scope=p.scope)
    return await memory.review(
        p.id,
        approve=body.approve,
        edit=body.edit,
        reviewer=_reviewer(caller, body.reviewer),
        user_id=caller.user_id,
    )
