"""``/v1/sessions``: sessions and their events; formation on demand (202 + a job).

A session belongs to an ``app`` (query parameter, default ``default``) inside the caller's
tenant. A user-bound key sees, and writes to, only the sessions its user takes part in
(another user's session is answered 404, as if it did not exist).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from memlane import inputs
from memlane.errors import ConflictError, InvalidInputError
from memlane.formation.runner import FormationResult
from memlane.models import Event, EventType, Job, Session
from memlane.service.deps import Caller, Engine, authorize, check_session, page
from memlane.service.routes.identities import acting_user
from memlane.stores.base import EventCounts

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

App = Annotated[str, Query(description="the application the session belongs to (inside your tenant)")]
Limit = Annotated[
    int | None, Query(description="at most this many, the newest (default and cap: the server's page size)")
]

#: Asked as the default page: clamped to the server's largest page (``server.max_page_size``).
WHOLE_PAGE = 1_000_000


def strict_json(value: Any) -> Any:
    """``value`` when it is standard JSON (no NaN / Infinity, which Python's parser accepts but
    JSON does not and a reply could not carry back); else a 422."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise ValueError("numbers must be finite (NaN and Infinity are not JSON)") from exc
    return value


StrictJson = Annotated[Any, AfterValidator(strict_json)]


class SessionCreate(BaseModel):
    """A new session."""

    model_config = ConfigDict(extra="forbid")

    app: str = "default"
    session_id: str | None = Field(default=None, description="omit for a generated id")
    user_ids: list[str] = Field(default_factory=list, description="participants; several = a group session")
    agent_id: str | None = None
    channel: str | None = None
    sender: str | None = Field(default=None, description="with channel: the participant is the user linked to them")
    state: Annotated[dict[str, Any] | None, AfterValidator(strict_json)] = None


class ListedSession(Session):
    """A session in a list: without its events, with how many it holds."""

    event_count: int | None = Field(
        default=None, description="the session's number of events (null when its store cannot count them)"
    )


class SessionList(BaseModel):
    sessions: list[ListedSession]
    total: int


class EventCreate(BaseModel):
    """One event to append (KAOS event types)."""

    model_config = ConfigDict(extra="forbid")

    type: EventType = EventType.USER_MESSAGE
    content: StrictJson = None
    author: str = "user"
    metadata: Annotated[dict[str, Any], AfterValidator(strict_json)] = Field(default_factory=dict)
    timestamp: datetime | None = Field(default=None, description="default: now (UTC)")
    id: str | None = Field(default=None, description="default: a generated id")
    channel: str | None = Field(default=None, description="with sender: who sent it (/v1/identities)")
    sender: str | None = Field(
        default=None, description="with channel: the linked user is recorded as metadata.user_id"
    )


class EventList(BaseModel):
    events: list[Event]
    total: int


class JobAccepted(BaseModel):
    """202: the work runs in the background; poll ``status_url``."""

    job_id: str
    status: str
    status_url: str


def accepted(job: Job, response: Response) -> JobAccepted:
    """The 202 answer for a queued job (also sets ``Location``)."""
    url = f"/v1/jobs/{job.id}"
    response.status_code = 202
    response.headers["Location"] = url
    return JobAccepted(job_id=job.id, status=job.status, status_url=url)


@router.post("", status_code=201, operation_id="create_session")
async def create_session(body: SessionCreate, memory: Engine, caller: Caller) -> Session:
    """Create a session. With a user-bound key the participants default to (and must be) its user."""
    app = inputs.identifier(body.app, "app")
    session_id = inputs.optional_id(body.session_id, "session_id")
    users = [inputs.identifier(u, "user_ids[]") for u in body.user_ids]
    if body.sender is not None:  # the participant is the user the sender is linked to
        user = str(await acting_user(memory, caller, None, body.channel, body.sender, write=True))
        if users and user not in users:
            raise InvalidInputError("user_ids does not hold the user the sender is linked to")
        users = users or [user]
    if not users:
        own = authorize(caller, user_id=None, write=True)
        users = [own] if own is not None else []
    for user in users:
        authorize(caller, user_id=user, write=True)
    taken = ConflictError(f"session {session_id!r} already exists in app {app!r}")
    if session_id is not None and await memory.sessions.get_session(session_id, app=app) is not None:
        raise taken
    try:
        return await memory.sessions.create_session(
            app=app,
            user_ids=users,
            agent_id=body.agent_id,
            channel=body.channel,
            session_id=session_id,
            state=body.state,
        )
    except InvalidInputError:
        if session_id is not None and await memory.sessions.get_session(session_id, app=app) is not None:
            raise taken from None  # created concurrently by another request
        raise


@router.get("", operation_id="list_sessions")
async def list_sessions(
    request: Request,
    memory: Engine,
    caller: Caller,
    app: App = "default",
    user_id: str | None = None,
    channel: str | None = None,
    sender: str | None = None,
    limit: Limit = None,
) -> SessionList:
    """Sessions of ``app`` (of one user with ``user_id``, or ``channel`` + ``sender``: the linked
    user), newest activity first, without events but with their ``event_count``. ``total``
    counts them all; ``sessions`` holds the first ``limit``."""
    size = page(request, limit, default=WHOLE_PAGE)
    user = await acting_user(memory, caller, user_id, channel, sender, write=False)
    found = await memory.sessions.list_sessions(app=app, user_id=user)
    shown = found[:size]
    counts: dict[str, int] = {}
    if isinstance(memory.sessions, EventCounts):
        counts = await memory.sessions.event_counts([s.id for s in shown], app=app)
    return SessionList(
        sessions=[ListedSession(**dict(s), event_count=counts.get(s.id)) for s in shown], total=len(found)
    )


@router.get("/{session_id}", operation_id="get_session")
async def get_session(session_id: str, memory: Engine, caller: Caller, app: App = "default") -> Session:
    """A session with its events."""
    found = await memory.sessions.get_session(session_id, app=app)
    return check_session(caller, found, session_id, app, write=False)


@router.delete("/{session_id}", status_code=204, operation_id="delete_session")
async def delete_session(session_id: str, memory: Engine, caller: Caller, app: App = "default") -> Response:
    """Delete a session and its events (memories formed from it stay)."""
    found = await memory.sessions.get_session(session_id, app=app)
    check_session(caller, found, session_id, app, write=True)
    await memory.sessions.delete_session(session_id, app=app)
    return Response(status_code=204)


@router.post("/{session_id}/events", status_code=201, operation_id="add_event")
async def add_event(
    session_id: str,
    body: EventCreate,
    memory: Engine,
    caller: Caller,
    app: App = "default",
    tier: Annotated[int | None, Query(ge=0, description="the user's tier (premium model at or above it)")] = None,
) -> Event:
    """Append an event; the formation triggers run (a formation job may be queued)."""
    found = await memory.sessions.get_session(session_id, app=app)
    check_session(caller, found, session_id, app, write=True)
    if body.channel is not None or body.sender is not None:  # a user-bound key: its own senders only
        await acting_user(memory, caller, None, body.channel, body.sender, write=True)
    fields: dict[str, Any] = {
        "type": body.type,
        "content": body.content,
        "author": body.author,
        "metadata": body.metadata,
    }
    if body.timestamp is not None:
        fields["timestamp"] = body.timestamp
    if body.id is not None:
        fields["id"] = body.id
    return await memory.add_event(
        session_id, Event(**fields), app=app, tier=tier, channel=body.channel, sender=body.sender
    )


@router.get("/{session_id}/events", operation_id="list_events")
async def list_events(
    request: Request,
    session_id: str,
    memory: Engine,
    caller: Caller,
    app: App = "default",
    event_types: Annotated[list[EventType] | None, Query(description="only these types (repeat the parameter)")] = None,
    limit: Limit = None,
) -> EventList:
    """The session's events, oldest first (the newest ``limit``)."""
    size = page(request, limit, default=WHOLE_PAGE)
    found = await memory.sessions.get_session(session_id, app=app)
    check_session(caller, found, session_id, app, write=False)
    events = await memory.sessions.get_events(session_id, event_types=event_types, limit=size, app=app)
    return EventList(events=events, total=len(events))


async def _queue(memory: Engine, caller: Caller, session_id: str, app: str, what: str) -> Job:
    found = await memory.sessions.get_session(session_id, app=app)
    check_session(caller, found, session_id, app, write=True)
    method = {"form": memory.form, "end": memory.end_session, "reset": memory.reset_session}[what]
    job = await method(session_id, app=app, wait=False)
    assert not isinstance(job, FormationResult)
    return job


@router.post("/{session_id}/form", status_code=202, operation_id="form_session")
async def form_session(
    session_id: str, memory: Engine, caller: Caller, response: Response, app: App = "default"
) -> JobAccepted:
    """Form the session's not-yet-formed messages into memory (a background job)."""
    return accepted(await _queue(memory, caller, session_id, app, "form"), response)


@router.post("/{session_id}/end", status_code=202, operation_id="end_session")
async def end_session(
    session_id: str, memory: Engine, caller: Caller, response: Response, app: App = "default"
) -> JobAccepted:
    """Session end: a final formation, then consolidation (a background job). The session is kept."""
    return accepted(await _queue(memory, caller, session_id, app, "end"), response)


@router.post("/{session_id}/reset", status_code=202, operation_id="reset_session")
async def reset_session(
    session_id: str, memory: Engine, caller: Caller, response: Response, app: App = "default"
) -> JobAccepted:
    """``/reset``: form the conversation into memory, then delete the session (a background job)."""
    return accepted(await _queue(memory, caller, session_id, app, "reset"), response)
