"""adk-rs's ingest endpoint: ``PATCH /apps/{app}/users/{user}/memory`` with ``{"sessionId"}``.

Loads the session ``sessionId`` of ``app`` (``user`` must take part in it) and adds it to
long-term memory like ADK's ``add_session_to_memory``: one memory per event with text, its
author and timestamp kept (re-ingesting stores nothing twice). A one-user session goes to that
user's memory under the app; a group session to the app's shared memory. 400 ``config_error``
when memory is turned off in the settings (no memory service), 404 when the session does not exist.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from memlane import inputs
from memlane.errors import ConfigError, NotFoundError, ScopeError
from memlane.models import agent_namespace
from memlane.service.app import memory_enabled
from memlane.service.deps import Caller, Engine, authorize, settings_of

router = APIRouter(tags=["adk"])


class IngestSession(BaseModel):
    """adk-rs's body."""

    model_config = ConfigDict(populate_by_name=True)

    session_id: str = Field(alias="sessionId", description="the session to add to long-term memory")


class IngestResult(BaseModel):
    app: str
    user: str
    session_id: str = Field(serialization_alias="sessionId")
    stored: int = Field(description="memories stored or already there (one per event with text)")
    scope: str = Field(description="user: the user's memory; agent: the app's shared memory (group session)")


@router.patch("/apps/{app}/users/{user}/memory", operation_id="adk_add_session_to_memory", response_model_by_alias=True)
async def add_session_to_memory(
    app: str, user: str, body: IngestSession, request: Request, memory: Engine, caller: Caller
) -> IngestResult:
    """Add a session's events to long-term memory (adk-rs ``add_session_to_memory``)."""
    if not memory_enabled(settings_of(request)):
        raise ConfigError("no memory service is configured: memory is turned off (memory.enabled / MEMORY_ENABLED)")
    app = inputs.identifier(app, "app")
    user = inputs.identifier(user, "user")
    session_id = inputs.identifier(body.session_id, "sessionId")
    session = await memory.sessions.get_session(session_id, app=app)
    if session is None or user not in session.user_ids or (caller.user_id not in (None, user)):
        raise NotFoundError(f"no session {session_id!r} of user {user!r} in app {app!r}")
    group = session.is_group
    authorize(caller, user_id=user, write=True, scope="agent" if group else "user")
    events = [e for e in session.events if inputs.has_visible(e.text)]
    ns = agent_namespace(session.app, session.agent_id)
    if group:
        if ns is None:
            raise ScopeError(
                "a group session needs an app name (not 'default') to be stored as the app's shared memory"
            )
        facts = await memory.add(events, agent_id=ns, session_id=session.id, scope="agent") if events else []
    else:
        facts = await memory.add(events, user_id=user, agent_id=ns, session_id=session.id) if events else []
    return IngestResult(
        app=app, user=user, session_id=session_id, stored=len(facts), scope="agent" if group else "user"
    )
