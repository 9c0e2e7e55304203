"""KAOS's method names on memlane's session stores under their KAOS names: :class:`KaosNames`.

``LocalMemory``, ``RedisMemory`` and ``NullMemory`` are :class:`~memlane.stores.local.LocalSessionStore`,
:class:`~memlane.stores.redis.sessions.RedisSessionStore` and :class:`~memlane.stores.null.NullSessionStore`
with this mixin (and, for ``RedisMemory``, KAOS's ``redis_url=`` constructor); :mod:`memlane.compat`
lists them with the other seed names.

KAOS code written against ``LocalMemory`` / ``RedisMemory`` / ``NullMemory`` runs unchanged::

    session_id = await memory.create_session(app_name="agent", user_id="user123")
    session_id = await memory.get_or_create_session(session_id=session_id, app_name="agent")
    event = memory.create_event("user_message", "Hello!", metadata={"source": "api"})
    await memory.add_event(session_id, event)
    events = await memory.get_session_events(session_id, event_types=["user_message"])

``create_session`` and ``get_or_create_session`` keep memlane's keyword form too (``app=``,
``user_ids=``, ... returning the :class:`~memlane.models.Session`); given KAOS's ``app_name`` /
``user_id`` they return the session's id, as KAOS does. The mixin goes first in the bases, before the memlane store it
extends (``class LocalMemory(KaosNames, LocalSessionStore)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast, overload

from memlane import inputs
from memlane.errors import InvalidInputError
from memlane.models import Event, EventType, Session

__all__ = ["KaosNames"]

_TYPES = ", ".join(t.value for t in EventType)


class KaosNames:
    """KAOS's ``create_session(app_name, user_id)``, ``get_or_create_session(session_id,
    app_name)``, ``create_event`` and ``get_session_events``."""

    @overload
    async def create_session(self, app_name: str, user_id: str, session_id: str | None = None) -> str: ...

    @overload
    async def create_session(
        self,
        *,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
        session_id: str | None = None,
        state: dict[str, object] | None = None,
    ) -> Session: ...

    async def create_session(
        self,
        app_name: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        *,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
        state: dict[str, object] | None = None,
    ) -> Session | str:
        """Create a session. KAOS's form (``app_name``, ``user_id``, optional ``session_id``)
        returns its id; memlane's keyword form returns the :class:`Session`.

        Raises:
            InvalidInputError: both forms mixed (``app_name`` with ``app``, ``user_id`` with
                ``user_ids``), or what the store refuses (an existing ``session_id``, bad ids).
        """
        store = cast(Any, super())
        if app_name is None and user_id is None:
            session: Session = await store.create_session(
                app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=state
            )
            return session
        if app != "default" or user_ids:
            raise InvalidInputError("give KAOS's app_name= and user_id=, or memlane's app= and user_ids=, not both")
        users = [user_id] if user_id is not None else []
        session = await store.create_session(
            app=app_name if app_name is not None else app,
            user_ids=users,
            agent_id=agent_id,
            channel=channel,
            session_id=session_id,
            state=state,
        )
        return session.id

    @overload
    async def get_or_create_session(self, session_id: str, app_name: str, user_id: str | None = None) -> str: ...

    @overload
    async def get_or_create_session(
        self,
        *,
        session_id: str,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session: ...

    async def get_or_create_session(
        self,
        session_id: str | None = None,
        app_name: str | None = None,
        user_id: str | None = None,
        *,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session | str:
        """The session (created when missing): idempotent. KAOS's form (``session_id``,
        ``app_name``, optional ``user_id``) returns its id; memlane's keyword form the
        :class:`Session`.

        Raises:
            InvalidInputError: no ``session_id``, or both forms mixed.
        """
        if session_id is None:
            raise InvalidInputError("get_or_create_session needs session_id")
        store = cast(Any, super())
        if app_name is None and user_id is None:
            session: Session = await store.get_or_create_session(
                session_id=session_id, app=app, user_ids=user_ids, agent_id=agent_id, channel=channel
            )
            return session
        if app != "default" or user_ids:
            raise InvalidInputError("give KAOS's app_name= and user_id=, or memlane's app= and user_ids=, not both")
        session = await store.get_or_create_session(
            session_id=session_id,
            app=app_name if app_name is not None else app,
            user_ids=[user_id] if user_id is not None else [],
            agent_id=agent_id,
            channel=channel,
        )
        return session.id

    def create_event(self, event_type: str, content: Any, metadata: Mapping[str, Any] | None = None) -> Event:
        """A new event (not stored: pass it to ``add_event``), as KAOS's ``create_event``.

        Raises:
            InvalidInputError: an unknown event type or metadata that is not a mapping.
        """
        try:
            kind = EventType(event_type)
        except ValueError:
            raise InvalidInputError(
                f"unknown event_type {inputs.show(event_type)}; event types are: {_TYPES}"
            ) from None
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a mapping, got {inputs.show(metadata)}")
        return Event(type=kind, content=content, metadata=dict(metadata or {}))

    async def get_session_events(
        self, session_id: str, event_types: Sequence[EventType | str] | None = None, *, app: str = "default"
    ) -> list[Event]:
        """The session's events, oldest first, optionally only ``event_types``; an unknown
        session has none (``[]``), as in KAOS."""
        events: list[Event] = await cast(Any, self).get_events(session_id, event_types, app=app)
        return events
