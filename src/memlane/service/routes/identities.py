"""``/v1/identities``: the identity map, one person across channels (issue 20).

``POST`` links a sender on a channel to a user, ``DELETE`` unlinks it, ``GET /resolve`` says
which user a sender is, ``GET`` lists a user's links. A user-bound key links, resolves and
unlinks only its own user's senders (another user's sender answers 404, as an unknown one);
a read-only key cannot link or unlink. Other routes take ``channel`` + ``sender`` where they
take a ``user_id`` (memories, sessions, session events, the session log):
:func:`acting_user` resolves them under the same rules.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from memlane.engine.identity import resolve_user
from memlane.errors import InvalidInputError, NotFoundError, ScopeError, UnknownIdentityError
from memlane.memory import AsyncMemory
from memlane.models import Identity
from memlane.service.auth import Principal
from memlane.service.deps import Caller, Engine, authorize

__all__ = ["IdentityLink", "IdentityList", "ResolvedIdentity", "acting_user", "router"]

router = APIRouter(prefix="/v1/identities", tags=["identities"])

Channel = Annotated[str, Query(description="where the sender writes from (telegram, sms, ...)")]
Sender = Annotated[str, Query(description="the sender as the channel names them (a handle, a phone number)")]


class IdentityLink(BaseModel):
    """A sender on a channel, and the user it is."""

    model_config = ConfigDict(extra="forbid")

    channel: str
    sender: str
    user_id: str | None = Field(default=None, description="default: the user-bound key's user")


class IdentityList(BaseModel):
    """A user's links, by channel then sender."""

    user_id: str
    identities: list[Identity]


class ResolvedIdentity(BaseModel):
    """The user a sender on a channel is."""

    channel: str
    sender: str
    user_id: str


def _unknown(channel: str, sender: str) -> UnknownIdentityError:
    return UnknownIdentityError(
        f"no user is linked to sender {sender!r} on channel {channel!r}: link it first (POST /v1/identities)"
    )


async def acting_user(
    memory: AsyncMemory,
    caller: Principal,
    user_id: str | None,
    channel: str | None,
    sender: str | None,
    *,
    write: bool,
    scope: str = "user",
) -> str | None:
    """The user a request acts for, named by ``user_id`` or by ``channel`` + ``sender`` (the
    linked user), under :func:`memlane.service.auth.authorize`'s rules. For a user-bound key
    a sender linked to another user is unknown (404): its link is not revealed.

    Raises:
        UnknownIdentityError: no user (or, for a user-bound key, not its user) is linked.
        InvalidInputError: only one of channel / sender, or a ``user_id`` that is not the linked user.
    """
    if channel is None and sender is None:
        return authorize(caller, user_id=user_id, write=write, scope=scope)
    authorize(caller, user_id=None, write=write, scope=scope)  # a read-only key writes nothing
    try:
        user = await resolve_user(memory.facts, None, channel, sender)
    except UnknownIdentityError:
        raise _unknown(str(channel), str(sender)) from None
    if caller.user_id is not None and user != caller.user_id:
        raise _unknown(str(channel), str(sender))
    if user_id is not None and user_id != user:
        raise InvalidInputError("user_id and the sender name different users: pass one of them")
    return authorize(caller, user_id=user, write=write, scope=scope)


@router.post("", status_code=201, operation_id="link_identity")
async def link_identity(body: IdentityLink, memory: Engine, caller: Caller) -> Identity:
    """Link a sender on a channel to a user (again to the same user: the first link, unchanged;
    to another user: 409, unlink it first)."""
    user = authorize(caller, user_id=body.user_id, write=True)
    if user is None:
        raise ScopeError("user_id is required: the user this sender is")
    return await memory.link_identity(body.channel, body.sender, user)


@router.delete("", status_code=204, operation_id="unlink_identity")
async def unlink_identity(channel: Channel, sender: Sender, memory: Engine, caller: Caller) -> Response:
    """Remove a sender's link (the user's memory stays)."""
    authorize(caller, user_id=None, write=True)
    if not await memory.unlink_identity(channel, sender, user_id=caller.user_id):
        raise NotFoundError(f"no link of sender {sender!r} on channel {channel!r}")
    return Response(status_code=204)


@router.get("/resolve", operation_id="resolve_identity")
async def resolve_identity(channel: Channel, sender: Sender, memory: Engine, caller: Caller) -> ResolvedIdentity:
    """The user a sender on a channel is (404 when none is linked)."""
    user = await acting_user(memory, caller, None, channel, sender, write=False)
    return ResolvedIdentity(channel=channel, sender=sender, user_id=str(user))


@router.get("", operation_id="list_identities")
async def list_identities(memory: Engine, caller: Caller, user_id: str | None = None) -> IdentityList:
    """A user's links (a user-bound key: its own user's)."""
    user = authorize(caller, user_id=user_id, write=False)
    if user is None:
        raise ScopeError("user_id is required: whose links to list")
    return IdentityList(user_id=user, identities=await memory.identities(user))
