"""Who am I, and what is there: ``GET /v1/whoami``, ``GET /v1/tenants`` (admin keys),
``GET /v1/users`` and ``GET /v1/agents`` (docs/http.md). The web inspector starts here.

Who: any valid key calls ``whoami``. ``tenants`` is for admin keys (and the key-less loopback
server) only. ``users`` and ``agents`` list ids and counts of the caller's tenant; a user-bound
key sees its own user only (and the agents and apps holding its data).
"""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from memlane.errors import PermissionDeniedError
from memlane.models import AgentCount, AppCount, UserActivity
from memlane.service.auth import KeyStore
from memlane.service.deps import Caller, Engine, authorize, hub_of, page

router = APIRouter(prefix="/v1", tags=["directory"])


class WhoAmI(BaseModel):
    """The caller: its tenant (after ``X-Memlane-Tenant``), its bindings and its key."""

    tenant: str
    user_id: str | None
    read_only: bool
    admin: bool
    key_id: str | None
    keys_configured: bool


class TenantEntry(BaseModel):
    tenant: str
    current: bool


class TenantList(BaseModel):
    tenants: list[TenantEntry]


class UserList(BaseModel):
    users: list[UserActivity]
    next_cursor: str | None


class AgentList(BaseModel):
    agents: list[AgentCount]
    apps: list[AppCount]


def _keys(request: Request) -> KeyStore | None:
    keys: KeyStore | None = getattr(request.app.state, "keys", None)
    return keys


@router.get("/whoami", operation_id="whoami", response_model=WhoAmI)
async def whoami(request: Request, caller: Caller) -> WhoAmI:
    """The caller as the server sees it. A key-less (loopback-only) server answers tenant
    ``default``, admin, ``keys_configured: false``."""
    return WhoAmI(
        tenant=caller.tenant,
        user_id=caller.user_id,
        read_only=caller.read_only,
        admin=caller.admin,
        key_id=caller.key_id,
        keys_configured=caller.key_id is not None,
    )


@router.get("/tenants", operation_id="list_tenants", response_model=TenantList)
async def list_tenants(request: Request, caller: Caller) -> TenantList:
    """The tenants the server knows (the default one, those with a store, those of live API
    keys); ``current`` marks the caller's (its own, or the one ``X-Memlane-Tenant`` names).
    Admin keys only."""
    if not caller.admin:
        raise PermissionDeniedError(
            f"API key {caller.key_id} is not an admin key: only an admin key lists the tenants "
            "(memlane keys create --tenant APP --admin)"
        )
    keys = _keys(request)
    known: list[str] = []
    if keys is not None:
        live = await anyio.to_thread.run_sync(lambda: keys.list(include_revoked=False))
        known = [k.tenant for k in live]
    names = await hub_of(request).tenants([*known, caller.tenant])
    return TenantList(tenants=[TenantEntry(tenant=t, current=t == caller.tenant) for t in names])


@router.get("/users", operation_id="list_users", response_model=UserList)
async def list_users(
    request: Request,
    memory: Engine,
    caller: Caller,
    agent_id: Annotated[str | None, Query(description="only users with data under this agent")] = None,
    limit: Annotated[int | None, Query(description="users per page (1..the server's cap)")] = None,
    cursor: Annotated[str | None, Query(description="a page's next_cursor, for the next page")] = None,
) -> UserList:
    """The users of the tenant, sorted by id: those with memories and those taking part in
    sessions, with counts and the last activity. A user-bound key gets its own user only (an
    empty list when it holds nothing)."""
    only = authorize(caller, user_id=None, write=False)
    found = await memory.users(agent_id, page(request, limit), cursor, user_id=only)
    return UserList(users=found.users, next_cursor=found.next_cursor)


@router.get("/agents", operation_id="list_agents", response_model=AgentList)
async def list_agents(memory: Engine, caller: Caller) -> AgentList:
    """The agents (with their memories, shared ones included) and apps (with their sessions)
    of the tenant. A user-bound key gets those holding its user's data, counting that data."""
    only = authorize(caller, user_id=None, write=False)
    found = await memory.directory(user_id=only)
    return AgentList(agents=found.agents, apps=found.apps)
