"""The session log, read-only and always on: ``GET /memory/events`` and ``GET /memory/sessions``
(KAOS's memory endpoints; this module was ``routes/kaos.py``, still importable under that name).

Same shapes as KAOS's agent server: ``{"agent", "events": [{event_id, timestamp, event_type,
content, metadata}], "total"}`` and ``{"agent", "sessions": [<session id>, ...], "total"}``.
``agent`` is the app the sessions belong to (query parameter ``app``, optional: the default
app ``default``). Both show what the session store holds: with memory turned off
(``MEMORY_ENABLED=false``: the null session store, KAOS's NullMemory, ``sessions.backend: null``) nothing is kept, so
both answer empty lists. An unknown session answers an empty list, as KAOS does; a user-bound
key sees only the sessions its user takes part in (another user's session looks unknown).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from memlane.errors import NotFoundError
from memlane.models import Event, Session
from memlane.service.deps import Caller, Engine, check_session, page
from memlane.service.routes.identities import acting_user

router = APIRouter(prefix="/memory", tags=["kaos"])

Channel = Annotated[str | None, Query(description="with sender: only the sessions of the user linked to them")]
Sender = Annotated[str | None, Query(description="with channel: the sender (/v1/identities)")]

#: How many events ``/memory/events`` returns by default (clamped to the server's page size).
DEFAULT_EVENTS = 100


class KaosEvent(BaseModel):
    """A KAOS ``MemoryEvent.to_dict()``."""

    event_id: str
    timestamp: datetime
    event_type: str
    content: Any
    metadata: dict[str, Any]

    @classmethod
    def of(cls, event: Event) -> KaosEvent:
        return cls(
            event_id=event.id,
            timestamp=event.timestamp,
            event_type=event.type.value,
            content=event.content,
            metadata=event.metadata,
        )


class KaosEvents(BaseModel):
    agent: str
    events: list[KaosEvent]
    total: int


class KaosSessions(BaseModel):
    agent: str
    sessions: list[str]
    total: int


async def _sessions(
    memory: Engine, caller: Caller, app: str, channel: str | None = None, sender: str | None = None
) -> list[Session]:
    user = await acting_user(memory, caller, None, channel, sender, write=False)
    return await memory.sessions.list_sessions(app=app, user_id=user)


@router.get("/events", operation_id="kaos_memory_events")
async def memory_events(
    request: Request,
    memory: Engine,
    caller: Caller,
    session_id: str | None = None,
    limit: Annotated[
        int | None, Query(description="the newest N events (default 100; cap: the server's page size)")
    ] = None,
    app: str = "default",
    channel: Channel = None,
    sender: Sender = None,
) -> KaosEvents:
    """Events of one session (``session_id``; an unknown one: none), or of every session of the
    app, oldest first; with ``channel`` + ``sender``, only the linked user's sessions."""
    limit = page(request, limit, default=DEFAULT_EVENTS)
    if session_id is not None:
        session = await memory.sessions.get_session(session_id, app=app)
        user = await acting_user(memory, caller, None, channel, sender, write=False)
        try:
            check_session(caller, session, session_id, app, write=False)
            if user is not None and session is not None and user not in session.user_ids:
                raise NotFoundError(session_id)
        except NotFoundError:  # KAOS: an unknown session has no events (another user's looks the same)
            return KaosEvents(agent=app, events=[], total=0)
        events = await memory.sessions.get_events(session_id, limit=limit, app=app)
    else:
        events = []
        for session in await _sessions(memory, caller, app, channel, sender):
            events += await memory.sessions.get_events(session.id, limit=limit, app=app)
        events.sort(key=lambda e: e.timestamp)
        events = events[-limit:]
    out = [KaosEvent.of(e) for e in events]
    return KaosEvents(agent=app, events=out, total=len(out))


@router.get("/sessions", operation_id="kaos_memory_sessions")
async def memory_sessions(
    memory: Engine, caller: Caller, app: str = "default", channel: Channel = None, sender: Sender = None
) -> KaosSessions:
    """The app's session ids, newest activity first (with ``channel`` + ``sender``: the linked user's)."""
    ids = [s.id for s in await _sessions(memory, caller, app, channel, sender)]
    return KaosSessions(agent=app, sessions=ids, total=len(ids))
