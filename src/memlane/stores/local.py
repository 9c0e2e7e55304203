"""``LocalSessionStore``: the in-process session store; ``LocalMemory`` is KAOS's name for it
(the same store answering KAOS's method names too, :mod:`memlane.compat`).

Bounded on both axes, so a long-running process cannot grow without limit:

* each session keeps at most ``max_session_events`` events in a
  ``deque(maxlen=...)``; adding to a full session silently drops its oldest event;
* creating a session when ``max_sessions`` are already stored first evicts the oldest
  10% of sessions (at least one) **of the new session's own users**: sessions whose
  participants are all among the new session's (for a session without users, the other
  sessions without users). One user creating sessions never evicts another user's; when
  none of the stored sessions are the creator's, creating fails with
  :class:`~memlane.errors.StoreFullError` (HTTP 507) and nothing changes. "Oldest" means
  **creation order**, not last activity: eviction is predictable, and a busy session that
  was created long ago is the one most likely to have been consolidated into long-term
  memory already.

Everything is deep-copied on the way in and out, so callers never share state with the
store. Methods are ``async`` for the :class:`~memlane.stores.base.SessionStore` protocol
but never await, so each call is atomic on its event loop; the store is not thread-safe
(use it from one event loop).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count, islice
from types import TracebackType
from typing import Any, Self

from memlane.errors import InvalidInputError, NotFoundError, StoreFullError
from memlane.models import Directory, Event, EventType, Session, UserActivity, utcnow
from memlane.sessions import (
    check_app,
    check_limit,
    check_session_id,
    check_user_ids,
    directory_apps,
    directory_users,
    event_type_filter,
    export_session,
    full_message,
    new_session,
    prepare_event,
)
from memlane.stores.kaos import KaosNames

#: When full, ``ceil(max_sessions / EVICT_DIVISOR)`` sessions are evicted (KAOS: oldest 10%).
EVICT_DIVISOR = 10


@dataclass
class _Entry:
    session: Session  # identity and state; ``events`` is always empty here
    events: deque[Event]
    order: int  # creation counter: eviction order and list_sessions tie-break


class LocalSessionStore:
    """In-process, bounded session store.

    Args:
        max_sessions: sessions kept (over all apps). When this many exist, creating another
            first evicts ``ceil(10% of max_sessions)`` (at least 1) of the oldest-created
            sessions of its own users (never another user's: StoreFullError if there is none).
        max_session_events: events kept per session; older ones are dropped first.

    Raises:
        InvalidInputError: a bound below 1.
    """

    def __init__(self, max_sessions: int = 1000, max_session_events: int = 500) -> None:
        for name, value in (("max_sessions", max_sessions), ("max_session_events", max_session_events)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be an integer >= 1, got {value!r}")
        self.max_sessions = max_sessions
        self.max_session_events = max_session_events
        self._sessions: dict[tuple[str, str], _Entry] = {}  # insertion order == creation order
        self._counter = count()

    def __len__(self) -> int:
        """Number of stored sessions (all apps)."""
        return len(self._sessions)

    # ------------------------------------------------------------------ sessions
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
        """Create a session; raises InvalidInputError if ``session_id`` exists in ``app``."""
        check_app(app)
        if session_id is not None:
            check_session_id(session_id)
            if (app, session_id) in self._sessions:
                raise InvalidInputError(
                    f"session {session_id!r} already exists in app {app!r}; use get_or_create_session to resume it"
                )
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=state
        )
        return self._insert(session)

    async def get_or_create_session(
        self,
        *,
        session_id: str,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session:
        """Return the session (with its events) or create it: idempotent.

        An existing session is returned unchanged (the other arguments are ignored).
        """
        check_app(app)
        check_session_id(session_id)
        entry = self._sessions.get((app, session_id))
        if entry is not None:
            return self._export(entry)
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=None
        )
        return self._insert(session)

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        """The session with all its stored events, or None."""
        entry = self._lookup(session_id, app)
        return None if entry is None else self._export(entry)

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        """Sessions of ``app`` (optionally of one user), newest activity first, without events."""
        check_app(app)
        entries = [
            e for (a, _), e in self._sessions.items() if a == app and (user_id is None or user_id in e.session.user_ids)
        ]
        entries.sort(key=lambda e: (e.session.updated_at, e.order), reverse=True)
        return [e.session.model_copy(deep=True) for e in entries]

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        """Every session named ``session_id``, in every app, without events (an app's sessions
        are keyed by (app, id): the same id may exist in several apps). The room check of the
        service reads it: a room memory is keyed by agent and session id, not by app."""
        check_session_id(session_id)
        return [e.session.model_copy(deep=True) for (_, sid), e in self._sessions.items() if sid == session_id]

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        """Delete a session and its events; True if it existed."""
        check_app(app)
        check_session_id(session_id)
        return self._sessions.pop((app, session_id), None) is not None

    async def counts(self) -> tuple[int, int]:
        """(sessions, events) held in this process."""
        return len(self._sessions), sum(len(e.events) for e in self._sessions.values())

    async def event_counts(self, session_ids: Sequence[str], *, app: str = "default") -> dict[str, int]:
        """Each named session's number of events (:class:`~memlane.stores.base.EventCounts`);
        sessions that do not exist are left out."""
        check_app(app)
        for session_id in session_ids:
            check_session_id(session_id)
        found = ((i, self._sessions.get((app, i))) for i in session_ids)
        return {i: len(e.events) for i, e in found if e is not None}

    async def delete_user_sessions(self, user_id: str) -> int:
        """Delete, in every app, the sessions whose only participant is ``user_id``; in group
        sessions, delete the user's own events (author or ``metadata["user_id"]`` is the user)
        and remove the user from the participants. Returns how many sessions and events went."""
        check_user_ids([user_id])
        doomed = [k for k, e in self._sessions.items() if e.session.user_ids == [user_id]]
        for k in doomed:
            del self._sessions[k]
        n = len(doomed)
        for entry in self._sessions.values():
            if user_id not in entry.session.user_ids:
                continue
            entry.session.user_ids = [u for u in entry.session.user_ids if u != user_id]
            kept = [e for e in entry.events if e.author != user_id and e.metadata.get("user_id") != user_id]
            n += len(entry.events) - len(kept)
            entry.events.clear()
            entry.events.extend(kept)
        return n

    async def directory_users(
        self, *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
    ) -> list[UserActivity]:
        """The sessions' participants, by user id (:class:`~memlane.stores.base.UserDirectory`)."""
        sessions = [e.session for e in self._sessions.values()]
        return directory_users(sessions, agent_id=agent_id, user_id=user_id, after=after, limit=limit)

    async def directory(self, *, user_id: str | None) -> Directory:
        """The apps and their sessions (:class:`~memlane.stores.base.UserDirectory`)."""
        return directory_apps([e.session for e in self._sessions.values()], user_id=user_id)

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The sessions the user takes part in, with events (a group session: the user's own
        events only; see :func:`memlane.sessions.export_session`)."""
        check_user_ids([user_id])
        found = sorted((k, e) for k, e in self._sessions.items() if user_id in e.session.user_ids)
        return {"sessions": [export_session(self._export(e), user_id) for _, e in found]}

    # ------------------------------------------------------------------ events
    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        """Append a copy of ``event``; raises NotFoundError when the session does not exist.

        The stored copy (timestamp normalised to UTC) is returned, itself copied.
        """
        stored = prepare_event(event)
        entry = self._lookup(session_id, app)
        if entry is None:
            raise NotFoundError(f"no session {session_id!r} in app {app!r}; create it first (get_or_create_session)")
        entry.events.append(stored)  # a full deque drops its oldest event
        entry.session.updated_at = utcnow()
        return stored.model_copy(deep=True)

    async def get_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
        *,
        app: str = "default",
    ) -> list[Event]:
        """Events oldest first, optionally filtered by type; ``limit`` keeps the newest N.

        A missing session has no events (``[]``).
        """
        types = event_type_filter(event_types)
        check_limit(limit)
        entry = self._lookup(session_id, app)
        if entry is None or limit == 0:
            return []
        events = [e for e in entry.events if types is None or e.type in types]
        if limit is not None:
            events = events[-limit:]
        return [e.model_copy(deep=True) for e in events]

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        """Remove and return the newest event (None when there is none)."""
        entry = self._lookup(session_id, app)
        if entry is None or not entry.events:
            return None
        entry.session.updated_at = utcnow()
        return entry.events.pop()

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Nothing to release; the sessions stay (idempotent)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ internals
    def _lookup(self, session_id: str, app: str) -> _Entry | None:
        check_app(app)
        check_session_id(session_id)
        return self._sessions.get((app, session_id))

    def _insert(self, session: Session) -> Session:
        if len(self._sessions) >= self.max_sessions:
            evict = max(1, -(-self.max_sessions // EVICT_DIVISOR))  # integer ceil, no float error
            users = set(session.user_ids)
            own = (key for key, e in self._sessions.items() if set(e.session.user_ids) <= users)
            victims = list(islice(own, evict))
            if not victims:
                raise StoreFullError(full_message(self.max_sessions, session.user_ids))
            for key in victims:
                del self._sessions[key]
        entry = _Entry(session=session, events=deque(maxlen=self.max_session_events), order=next(self._counter))
        self._sessions[(session.app, session.id)] = entry
        return self._export(entry)

    @staticmethod
    def _export(entry: _Entry) -> Session:
        session = entry.session.model_copy(deep=True)
        session.events = [e.model_copy(deep=True) for e in entry.events]
        return session


class LocalMemory(KaosNames, LocalSessionStore):
    """KAOS's ``LocalMemory``: the :class:`LocalSessionStore` with KAOS's method names too
    (``create_session(app_name=, user_id=)`` returns a session id, ``create_event``,
    ``get_session_events``)."""
