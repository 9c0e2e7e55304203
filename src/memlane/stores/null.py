"""``NullSessionStore``: memory disabled (KAOS ``MEMORY_ENABLED=false``, ``sessions.backend: null``).

Every method is a no-op that returns an empty result, so an agent runs stateless without
special-casing: sessions are built but never stored, events are accepted and forgotten.
Input is not validated (nothing is kept that could be corrupted). :class:`NullMemory` is KAOS's
name: the same store answering KAOS's method names too (:class:`~memlane.stores.kaos.KaosNames`,
:mod:`memlane.compat`).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

from memlane.models import Event, EventType, Session, new_id
from memlane.stores.kaos import KaosNames

__all__ = ["NullMemory", "NullSessionStore"]


class NullSessionStore:
    """A :class:`~memlane.stores.base.SessionStore` that stores nothing."""

    async def create_session(
        self,
        *,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
        session_id: str | None = None,
        state: dict[str, object] | None = None,
    ) -> Session:
        """A new, unstored Session built from the arguments."""
        return Session(
            id=session_id if session_id is not None else new_id(),
            app=app,
            user_ids=list(user_ids),
            agent_id=agent_id,
            channel=channel,
            state=dict(state or {}),
        )

    async def get_or_create_session(
        self,
        *,
        session_id: str,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session:
        """A new, empty, unstored Session with ``session_id``."""
        return await self.create_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id
        )

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        """Always None."""
        return None

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        """Always ``[]``."""
        return []

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        """Always ``[]``."""
        return []

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        """Always False (nothing existed)."""
        return False

    async def counts(self) -> tuple[int, int]:
        """Nothing is stored."""
        return 0, 0

    async def delete_user_sessions(self, user_id: str) -> int:
        """Always 0 (nothing is stored)."""
        return 0

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """No sessions (nothing is stored)."""
        return {"sessions": []}

    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        """Returns ``event`` unchanged; nothing is stored and no session is required."""
        return event

    async def get_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
        *,
        app: str = "default",
    ) -> list[Event]:
        """Always ``[]``."""
        return []

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        """Always None (nothing is stored)."""
        return None

    async def close(self) -> None:
        """Nothing to release."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class NullMemory(KaosNames, NullSessionStore):
    """KAOS's ``NullMemory``: the :class:`NullSessionStore` with KAOS's method names too
    (``create_session(app_name=, user_id=)`` returns a session id, ``create_event``,
    ``get_session_events``: always ``[]``)."""
