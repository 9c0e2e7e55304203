"""``GET /v1/users/{user_id}/summaries``: the user's session summaries, the latest session first
(docs/summaries.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from memlane.formation.summaries import SessionSummary
from memlane.service.deps import Caller, Engine, authorize, page

router = APIRouter(prefix="/v1/users", tags=["users"])


class SummaryList(BaseModel):
    user_id: str
    summaries: list[SessionSummary]


@router.get("/{user_id}/summaries", operation_id="list_summaries", response_model=SummaryList)
async def list_summaries(
    user_id: str,
    request: Request,
    memory: Engine,
    caller: Caller,
    agent_id: Annotated[str | None, Query(description="only sessions formed under this agent")] = None,
    since: Annotated[str | None, Query(description="ISO-8601: only sessions still going at or after it")] = None,
    until: Annotated[str | None, Query(description="ISO-8601: only sessions begun at or before it")] = None,
    limit: Annotated[int | None, Query(description="at most this many (1..the server's cap)")] = None,
) -> SummaryList:
    """What the user talked about: one summary per formed session (time range, message count,
    topics, text), filtered to the sessions overlapping ``since``..``until``."""
    user = str(authorize(caller, user_id=user_id, write=False))
    found = await memory.summaries(user, agent_id=agent_id, since=since, until=until, limit=page(request, limit))
    return SummaryList(user_id=user, summaries=found)
