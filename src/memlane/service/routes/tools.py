"""``/v1/tools``: memlane's memory tools for a model's tool loop: their schemas, and a call
dispatched through :class:`memlane.agent.tools.MemoryTools`. Whose memory a call reads or
writes is fixed by the request (the key's user, or ``user_id`` in the query), never by the
tool's arguments (an argument ``user_id`` is refused as invalid)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query

from memlane.agent.tools import DEFAULT_TOOLS, MemoryTools
from memlane.errors import ScopeError
from memlane.service.deps import Caller, Engine, authorize
from memlane.service.routes._memory_models import check_room

router = APIRouter(prefix="/v1/tools", tags=["tools"])


@router.get("", operation_id="tool_schemas", response_model=list[dict[str, Any]])
async def tool_schemas(
    caller: Caller,
    format: Literal["openai", "openai_responses", "anthropic", "gemini"] = "openai",
) -> list[dict[str, Any]]:
    """The tools as function-calling definitions for ``format`` (behind the key, as every
    route but ``/health``)."""
    del caller
    return MemoryTools(None, user_id="schema").schemas(format)


@router.post("/{name}", operation_id="call_tool", response_model=dict[str, Any])
async def call_tool(
    name: Literal["search_facts", "load_memory", "remember"],
    memory: Engine,
    caller: Caller,
    arguments: Annotated[dict[str, Any], Body(description="the tool's arguments as the model gave them")],
    user_id: Annotated[str | None, Query(description="whose memory (a user-bound key: its user)")] = None,
    agent_id: str | None = None,
    session_id: Annotated[str | None, Query(description="the current session (provenance of remember)")] = None,
    app: str = "default",
) -> dict[str, Any]:
    """Run one tool call; the model's mistakes come back as ``{"error": {...}}`` (200)."""
    user = authorize(caller, user_id=user_id, write=name == "remember")
    if user is None:
        raise ScopeError("a tool call needs user_id (the user whose memory the tool uses)")
    await check_room(memory, caller, session_id, app)
    tools = MemoryTools(memory, user_id=user, agent_id=agent_id, session_id=session_id, app=app, tools=DEFAULT_TOOLS)
    return await tools.call(name, arguments)
