"""One person across channels: the identity map through the engine (issue 20).

Gaia's dispatcher resolves an inbound ``(channel, sender)`` to a canonical user, so "sam" on
Telegram and "+15550100" on SMS share one memory. Here the app links each sender once
(:meth:`IdentityMethods.link_identity`); then ``add``, ``create_session`` and ``add_event`` take
``channel=`` / ``sender=`` instead of ``user_id``. An unknown sender is an
:class:`~memlane.errors.UnknownIdentityError`, never a new user: Gaia answers only senders its
user store knows, and a memory silently created per unknown handle is the split this map
exists to prevent. The links live in the long-term store
(:class:`~memlane.stores.base.IdentityStore`), beside the memory they lead to: ``forget``
erases them and ``export_user`` includes them.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.errors import InvalidInputError, NotSupportedError, UnknownIdentityError
from memlane.models import Event, Identity, Session
from memlane.stores.base import FactStore, IdentityStore

__all__ = ["IdentityMethods", "event_for", "identity_store", "resolve_user"]


def identity_store(facts: FactStore) -> IdentityStore:
    """The engine's identity map: its long-term store, when that keeps one."""
    if not isinstance(facts, IdentityStore):
        raise NotSupportedError(f"{type(facts).__name__} keeps no identity map (link_identity needs a SQL store)")
    return facts


def _key(channel: object, sender: object) -> tuple[str, str]:
    return inputs.identifier(channel, "channel"), inputs.identifier(sender, "sender")


async def resolve_user(facts: FactStore, user_id: object, channel: object, sender: object) -> str | None:
    """The user a call acts for: ``user_id``, or the user ``(channel, sender)`` is linked to.

    Raises:
        InvalidInputError: only one of ``channel`` / ``sender``, or a ``user_id`` that is not
            the linked user.
        UnknownIdentityError: no user is linked to ``(channel, sender)``.
    """
    user = inputs.optional_id(user_id, "user_id")
    if channel is None and sender is None:
        return user
    if channel is None or sender is None:
        raise InvalidInputError("channel= and sender= go together: pass both (or user_id= alone)")
    ch, who = _key(channel, sender)
    found = await identity_store(facts).resolve_identity(ch, who)
    if found is None:
        raise UnknownIdentityError(
            f"no user is linked to sender {who!r} on channel {ch!r}: link it first with "
            f"link_identity({ch!r}, {who!r}, user_id) (memlane identity link)"
        )
    if user is not None and user != found.user_id:
        raise InvalidInputError(
            f"user_id={user!r} and sender {who!r} on channel {ch!r} name different users: pass one of them"
        )
    return found.user_id


class IdentityMethods(EngineState):
    """The engine's methods for the identity map, and the session calls that take a sender."""

    @opening
    async def link_identity(self, channel: str, sender: str, user_id: str) -> Identity:
        """Link a sender on a channel to a user: from now on ``add(..., channel=, sender=)``,
        ``create_session`` and ``add_event`` given that pair act for ``user_id``. Linking the
        same pair to the same user again changes nothing (the first link is returned).

        Raises:
            ConflictError: the pair is linked to another user (unlink it first).
            ScopeError: an empty or invalid channel, sender or user id.
        """
        ch, who = _key(channel, sender)
        user = inputs.identifier(user_id, "user_id")
        return await identity_store(self.facts).link_identity(ch, who, user)

    @opening
    async def unlink_identity(self, channel: str, sender: str, *, user_id: str | None = None) -> bool:
        """Remove the link of a sender on a channel (with ``user_id``: only if it is that
        user's); True when one went. The user's memory stays (it is the user's, not the
        channel's)."""
        ch, who = _key(channel, sender)
        user = inputs.optional_id(user_id, "user_id")
        return await identity_store(self.facts).unlink_identity(ch, who, user_id=user)

    @opening
    async def resolve_identity(self, channel: str, sender: str) -> str | None:
        """The user a sender on a channel is linked to, or None (Gaia's dispatcher lookup)."""
        ch, who = _key(channel, sender)
        found = await identity_store(self.facts).resolve_identity(ch, who)
        return None if found is None else found.user_id

    @opening
    async def identities(self, user_id: str) -> builtins.list[Identity]:
        """The user's links, by channel then sender."""
        return await identity_store(self.facts).identities(inputs.identifier(user_id, "user_id"))

    @opening
    async def create_session(
        self,
        *,
        channel: str | None = None,
        sender: str | None = None,
        user_ids: Sequence[str] = (),
        app: str = "default",
        agent_id: str | None = None,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> Session:
        """Create a session, its participant named by ``channel`` + ``sender`` (the linked user;
        the session's ``channel`` is that channel) or by ``user_ids``. Gaia keys a user's
        session on a channel ``session_key(user_id, channel)``.

        Raises:
            UnknownIdentityError: no user is linked to ``(channel, sender)``.
            InvalidInputError: ``user_ids`` given with a sender and without the linked user, or
                ``session_id`` already exists in ``app``.
        """
        app = inputs.identifier(app, "app")
        users = [inputs.identifier(u, "user_ids[]") for u in user_ids]
        if sender is not None:
            user = await resolve_user(self.facts, None, channel, sender)
            if users and user not in users:
                raise InvalidInputError(f"user_ids={users!r} does not hold {user!r}, the user the sender is linked to")
            users = users or [str(user)]
        return await self.sessions.create_session(
            app=app,
            user_ids=users,
            agent_id=inputs.optional_id(agent_id, "agent_id"),
            channel=inputs.optional_id(channel, "channel"),
            session_id=inputs.optional_id(session_id, "session_id"),
            state=state,
        )


async def event_for(facts: FactStore, event: Event, channel: object, sender: object) -> Event:
    """``event`` with ``metadata["user_id"]`` set to the user ``(channel, sender)`` is linked to
    (``add_event(..., channel=, sender=)``), so ``forget`` finds the user's turns in a group
    session; the event unchanged without a sender."""
    if channel is None and sender is None:
        return event
    user = await resolve_user(facts, event.metadata.get("user_id"), channel, sender)
    return event.model_copy(update={"metadata": {**event.metadata, "user_id": user}})
