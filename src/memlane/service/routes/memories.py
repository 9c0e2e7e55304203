"""``/v1/memories``: long-term memories: add (verbatim, or ``infer`` as a 202 job), list
(paginated by cursor), get, update, delete, history.

Who: ``user_id`` names the user (a user-bound key acts for its own user only, 403 otherwise;
``add`` also takes ``channel`` + ``sender``, the user linked to them: /v1/identities),
``agent_id`` the agent namespace, ``session_id`` a source session or the room of a room memory
(a user-bound key may name only sessions of ``app`` its user takes part in).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from memlane.errors import InvalidInputError
from memlane.models import Fact, HistoryEntry, Job
from memlane.service.deps import Caller, Engine, page
from memlane.service.routes._memory_models import FactOut, Scoped, check_room
from memlane.service.routes._temporal import AsOf, ValidAt
from memlane.service.routes.identities import acting_user
from memlane.service.routes.sessions import JobAccepted, accepted

router = APIRouter(prefix="/v1/memories", tags=["memories"])

Kind = Literal["fact", "message", "document", "fragment", "description", "custom", "summary"]


class MessageIn(BaseModel):
    """One chat message to remember verbatim (or to infer facts from)."""

    model_config = ConfigDict(extra="forbid")

    role: str
    content: str
    name: str | None = None
    timestamp: datetime | None = None
    metadata: dict[str, Any] | None = None


class MemoryCreate(BaseModel):
    """What to remember: ``text`` (one memory) or ``messages`` (one memory per message)."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    messages: list[MessageIn] | None = None
    user_id: str | None = None
    channel: str | None = Field(default=None, description="with sender, instead of user_id: the linked user")
    sender: str | None = Field(default=None, description="with channel, instead of user_id (/v1/identities)")
    agent_id: str | None = None
    session_id: str | None = None
    app: str = Field(default="default", description="the app of session_id (user-bound keys)")
    scope: Literal["user", "agent", "room", "private", "shared"] = "user"
    metadata: dict[str, Any] | None = None
    infer: bool = Field(default=False, description="extract facts with the formation model: 202 and a job")
    kind: Literal["fact", "message", "description", "custom"] | None = None
    timestamp: datetime | None = None


class MemoriesAdded(BaseModel):
    """201: the stored memories, in input order (an identical stored memory is returned as is)."""

    memories: list[FactOut]


class MemoryPage(BaseModel):
    """A page of memories, newest first; pass ``next_cursor`` as ``cursor`` for the next page."""

    memories: list[FactOut]
    next_cursor: str | None
    total: int


class MemoryUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


class HistoryOut(BaseModel):
    history: list[HistoryEntry]


@router.post(
    "",
    status_code=201,
    operation_id="add_memories",
    response_model=MemoriesAdded | JobAccepted,
    responses={202: {"model": JobAccepted, "description": "infer=true: a formation job was queued"}},
)
async def add_memories(
    body: MemoryCreate, memory: Engine, caller: Caller, response: Response
) -> MemoriesAdded | JobAccepted:
    """Remember a text or messages; ``infer=true`` extracts facts in a background job (202)."""
    user = await acting_user(memory, caller, body.user_id, body.channel, body.sender, write=True, scope=body.scope)
    await check_room(memory, caller, body.session_id, body.app)
    if (body.text is None) == (body.messages is None):
        raise InvalidInputError("give exactly one of text or messages")
    what: Any = body.text if body.text is not None else [m.model_dump(exclude_none=True) for m in body.messages or []]
    common: dict[str, Any] = {
        "user_id": user,
        "agent_id": body.agent_id,
        "session_id": body.session_id,
        "metadata": body.metadata,
        "scope": body.scope,
        "timestamp": body.timestamp,
    }
    if body.infer:
        job = await memory.add(what, infer=True, wait=False, **common)
        assert isinstance(job, Job)
        return accepted(job, response)
    facts = await memory.add(what, kind=body.kind, **common)
    assert isinstance(facts, list)
    return MemoriesAdded(memories=[FactOut.of(f) for f in facts])


@router.get("", operation_id="list_memories", response_model=MemoryPage)
async def list_memories(
    request: Request,
    memory: Engine,
    caller: Caller,
    scoped: Scoped,
    kind: Kind | None = None,
    author: str | None = None,
    scope: Annotated[
        Literal["user", "agent", "room", "private", "shared"] | None, Query(description="only this scope")
    ] = None,
    include_invalid: bool = False,
    limit: Annotated[int | None, Query(description="page size (1..the server's cap)")] = None,
    cursor: str | None = None,
    as_of: AsOf = None,
    valid_at: ValidAt = None,
) -> MemoryPage:
    """Memories newest first, paginated (``next_cursor``); filters: ``kind``, ``author``, ``scope``;
    ``as_of`` / ``valid_at``: as memory held them then, or those true then (docs/temporal.md)."""
    ids = await scoped.ids(memory, caller, write=False)
    filters = {k: v for k, v in (("author", author), ("scope", scope)) if v is not None}
    result = await memory.list(
        **ids,
        limit=page(request, limit),
        cursor=cursor,
        include_invalid=include_invalid,
        kind=kind,
        filters=filters or None,
        as_of=as_of,
        valid_at=valid_at,
    )
    return MemoryPage(
        memories=[FactOut.of(f) for f in result.items], next_cursor=result.next_cursor, total=result.total
    )


@router.get("/{memory_id}", operation_id="get_memory", response_model=FactOut)
async def get_memory(
    memory_id: str, memory: Engine, caller: Caller, scope: Scoped, as_of: AsOf = None, valid_at: ValidAt = None
) -> FactOut:
    """One memory (404 when absent or outside the named user/agent/room; with ``as_of`` /
    ``valid_at``: the version then, 404 when it did not exist or hold then)."""
    ids = await scope.ids(memory, caller, write=False)
    return FactOut.of(await memory.get(memory_id, **ids, as_of=as_of, valid_at=valid_at))


@router.patch("/{memory_id}", operation_id="update_memory", response_model=FactOut)
async def update_memory(memory_id: str, body: MemoryUpdate, memory: Engine, caller: Caller, scope: Scoped) -> FactOut:
    """Replace a memory's text (version + 1; the old text stays in its history)."""
    ids = await scope.ids_to_change(memory, caller, memory_id)
    fact: Fact = await memory.update(memory_id, body.text, **ids)
    return FactOut.of(fact)


@router.delete("/{memory_id}", operation_id="delete_memory", response_model=FactOut)
async def delete_memory(memory_id: str, memory: Engine, caller: Caller, scope: Scoped) -> FactOut:
    """Soft delete: the memory leaves search and stays in history (a document's fragments with it)."""
    ids = await scope.ids_to_change(memory, caller, memory_id)
    return FactOut.of(await memory.delete(memory_id, **ids))


@router.get("/{memory_id}/history", operation_id="memory_history", response_model=HistoryOut)
async def memory_history(memory_id: str, memory: Engine, caller: Caller, scope: Scoped) -> HistoryOut:
    """Every change to a memory, oldest first."""
    ids = await scope.ids(memory, caller, write=False)
    await memory.get(memory_id, **ids)  # 404 outside the scope
    return HistoryOut(history=await memory.history(memory_id, **ids))
