"""A user's memory over time: ``GET /v1/users/{user_id}/timeline`` (every change to their
memories, newest first, paged by time) and ``GET /v1/users/{user_id}/growth`` (added,
invalidated and valid memories per day, week or month). A user-bound key reads only its own
user (403 otherwise)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from memlane.models import Growth, GrowthPoint, TimelineEvent
from memlane.service.deps import Caller, Engine, authorize, page

router = APIRouter(prefix="/v1/users", tags=["users"])


class TimelineOut(BaseModel):
    """A page of the timeline, newest first; pass ``next_before`` as ``before`` for older events
    (null: no more)."""

    user_id: str
    events: list[TimelineEvent]
    next_before: datetime | None


class GrowthOut(BaseModel):
    """Memory growth, oldest bucket first, through the bucket holding today."""

    user_id: str
    bucket: Literal["day", "week", "month"]
    points: list[GrowthPoint]


@router.get("/{user_id}/timeline", operation_id="user_timeline", response_model=TimelineOut)
async def timeline(
    user_id: str,
    request: Request,
    memory: Engine,
    caller: Caller,
    agent_id: Annotated[str | None, Query(description="only the user's memories under this agent")] = None,
    limit: Annotated[int | None, Query(description="about this many events (1..the server's cap)")] = None,
    before: Annotated[str | None, Query(description="ISO-8601: events recorded before it (next_before)")] = None,
) -> TimelineOut:
    """Every change to the user's memories (ADD, UPDATE, DELETE, NONE) with the text before and
    after, newest first; a page ends after every event of its last instant."""
    user = str(authorize(caller, user_id=user_id, write=False))
    found = await memory.timeline(user, agent_id=agent_id, limit=page(request, limit), before=before)
    return TimelineOut(user_id=user, events=found.events, next_before=found.next_before)


@router.get("/{user_id}/growth", operation_id="user_growth", response_model=GrowthOut)
async def growth(
    user_id: str,
    memory: Engine,
    caller: Caller,
    bucket: Literal["day", "week", "month"] = "day",
    agent_id: Annotated[str | None, Query(description="only the user's memories under this agent")] = None,
) -> GrowthOut:
    """Memories added (recorded) and invalidated per UTC day, week (from Monday) or month, and
    those valid at each bucket's end."""
    user = str(authorize(caller, user_id=user_id, write=False))
    found: Growth = await memory.growth(user, bucket=bucket, agent_id=agent_id)
    return GrowthOut(user_id=user, bucket=found.bucket, points=found.points)
