"""``/v1/users/{user_id}``: a user's data export (everything memlane holds about them) and purge."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel

from memlane.service.deps import Caller, Engine, authorize

router = APIRouter(prefix="/v1/users", tags=["users"])


class UserExport(BaseModel):
    """:meth:`memlane.AsyncMemory.export_user`'s sections (see docs/http.md)."""

    format: str
    user_id: str
    exported_at: str
    facts: list[dict[str, Any]]
    shared_changes: list[dict[str, Any]]
    reflections: list[dict[str, Any]]
    consolidated: list[dict[str, Any]]
    shared: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    formation_cursors: list[dict[str, Any]]
    identities: list[dict[str, Any]] = []
    proposals: list[dict[str, Any]] = []
    consolidated_versions: list[dict[str, Any]] = []
    not_included: dict[str, str]
    not_exported: list[str]


class Purged(BaseModel):
    user_id: str
    removed: int


@router.get("/{user_id}/export", operation_id="export_user", response_model=UserExport)
async def export_user(user_id: str, memory: Engine, caller: Caller) -> UserExport:
    """Everything memlane holds about the user, as JSON."""
    user = authorize(caller, user_id=user_id, write=False)
    return UserExport.model_validate(await memory.export_user(str(user)))


@router.delete("/{user_id}", operation_id="forget_user", response_model=Purged)
async def forget_user(
    user_id: str,
    memory: Engine,
    caller: Caller,
    shared: Literal["erase", "keep"] = "erase",
    sessions: bool = True,
) -> Purged:
    """Hard purge of the user (``shared``: the agent's memories formed from their words;
    ``sessions=false``: keep their sessions, erase long-term memory only)."""
    user = authorize(caller, user_id=user_id, write=True)
    return Purged(user_id=str(user), removed=await memory.forget(str(user), shared=shared, sessions=sessions))
