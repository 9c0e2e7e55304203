"""The durable session store written once for every SQL backend (sans-IO, as :mod:`.facts`).

A session is one ``sessions`` row keyed by ``(app, id)``, its participants mirrored in
``session_users`` (for the ``user_id`` filter and the erasure of a user), its events in
``events`` ordered by ``seq``: insertion order is the event order, whatever the events'
timestamps say. The input checks and the rules shared with the in-memory and Redis stores
come from :mod:`memlane.sessions`.

:class:`SqlSessionStore` implements :class:`~memlane.stores.base.SessionStore` over three
runners a backend supplies: :meth:`~SqlSessionStore._query` (one autocommit read),
:meth:`~SqlSessionStore._snapshot` (several reads that see one state) and
:meth:`~SqlSessionStore._transact` (one write transaction). A :class:`SessionDialect` holds
what differs: how timestamps, text and JSON are stored, the session row lock (PostgreSQL locks
the session's row so writers of one session go one at a time and ``seq`` order is commit
order; SQLite's ``BEGIN IMMEDIATE`` locks the file), the JSON condition on an event's
``metadata.user_id``, and the tie-break of the session order.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

from memlane.errors import InvalidInputError, NotFoundError, StorageError
from memlane.models import Directory, Event, EventType, Session, UserActivity, utcnow
from memlane.sessions import (
    check_app,
    check_json,
    check_limit,
    check_session_id,
    check_user_ids,
    event_type_filter,
    export_session,
    new_session,
    prepare_event,
)
from memlane.stores.sql import directory
from memlane.stores.sql.stmt import MANY, Program, Row, Stmt, all_rows, count, one

__all__ = ["SessionDialect", "SqlSessionStore"]

T = TypeVar("T")

SESSION_COLS = "app, id, user_ids, agent_id, channel, state, created_at, updated_at"
EVENT_COLS = "id, type, ts, author, content, metadata"
_S_COLS = ", ".join(f"s.{c.strip()}" for c in SESSION_COLS.split(","))


class SessionDialect(ABC):
    """One backend's differences in the session tables.

    Attributes:
        lock_session: appended to ``SELECT ... FROM sessions WHERE app = ? AND id = ?`` to lock
            the session's row until the transaction ends (empty where a write transaction
            locks the whole database).
        list_order: the ``ORDER BY`` terms of :meth:`SqlSessionStore.list_sessions` (table
            alias ``s``): newest activity first, then a stable tie-break.
        event_user_sql: the condition "the event's ``metadata["user_id"]`` is ``?``".
        byte_order: the collation clause that orders text byte-wise (user ids in the directory).
    """

    lock_session: str = ""
    byte_order: str = ""
    list_order: str
    event_user_sql: str

    @abstractmethod
    def text(self, value: str | None) -> Any:
        """A user-supplied string as stored and compared."""

    @abstractmethod
    def untext(self, value: Any) -> str | None:
        """The inverse of :meth:`text`."""

    @abstractmethod
    def ts(self, value: datetime) -> Any:
        """A timestamp as stored."""

    @abstractmethod
    def unts(self, value: Any) -> datetime:
        """A stored timestamp as an aware UTC datetime."""

    @abstractmethod
    def json(self, value: Any) -> Any:
        """JSON data (state, user ids, event metadata) as stored."""

    @abstractmethod
    def unjson(self, value: Any) -> Any:
        """The inverse of :meth:`json`."""

    def session(self, row: Row) -> Session:
        """A session (without events) from a row of ``SESSION_COLS``."""
        app, sid, user_ids, agent_id, channel, state, created_at, updated_at = row
        return Session(
            app=self.untext(app),
            id=self.untext(sid),
            user_ids=self.unjson(user_ids),
            agent_id=self.untext(agent_id),
            channel=self.untext(channel),
            state=self.unjson(state),
            created_at=self.unts(created_at),
            updated_at=self.unts(updated_at),
        )

    def event(self, row: Row) -> Event:
        """An event from a row of ``EVENT_COLS``."""
        eid, etype, ts, author, content, metadata = row
        return Event(
            id=self.untext(eid),
            type=EventType(etype),
            timestamp=self.unts(ts),
            author=self.untext(author),
            content=json.loads(self.untext(content) or "null") if content is not None else None,
            metadata=self.unjson(metadata),
        )


# ---------------------------------------------------------------------- programs
def insert_session(d: SessionDialect, session: Session) -> Program[bool]:
    """Insert ``session`` unless its id exists in its app; True if inserted."""
    n = yield from count(
        f"INSERT INTO sessions ({SESSION_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (app, id) DO NOTHING",
        (
            d.text(session.app),
            d.text(session.id),
            d.json(session.user_ids),
            d.text(session.agent_id),
            d.text(session.channel),
            d.json(session.state),
            d.ts(session.created_at),
            d.ts(session.updated_at),
        ),
    )
    if n == 0:
        return False
    if session.user_ids:
        yield Stmt(
            "INSERT INTO session_users (app, session_id, user_id) VALUES (?, ?, ?)",
            [(d.text(session.app), d.text(session.id), d.text(u)) for u in session.user_ids],
            MANY,
        )
    return True


def create_session(d: SessionDialect, session: Session) -> Program[None]:
    if not (yield from insert_session(d, session)):
        raise InvalidInputError(
            f"session {session.id!r} already exists in app {session.app!r}; use get_or_create_session to resume it"
        )


def read_session(d: SessionDialect, app: str, session_id: str) -> Program[Session | None]:
    """The session with every event (run in one snapshot)."""
    key = (d.text(app), d.text(session_id))
    row = yield from one(f"SELECT {SESSION_COLS} FROM sessions WHERE app = ? AND id = ?", key)
    if row is None:
        return None
    events = yield from all_rows(f"SELECT {EVENT_COLS} FROM events WHERE app = ? AND session_id = ? ORDER BY seq", key)
    session = d.session(row)
    session.events = [d.event(r) for r in events]
    return session


def list_sessions(d: SessionDialect, app: str, user_id: str | None) -> Program[list[Session]]:
    if user_id is None:
        rows = yield from all_rows(
            f"SELECT {_S_COLS} FROM sessions s WHERE s.app = ? ORDER BY {d.list_order}", (d.text(app),)
        )
    else:
        rows = yield from all_rows(
            f"SELECT {_S_COLS} FROM sessions s JOIN session_users u ON u.app = s.app AND u.session_id = s.id"
            f" WHERE s.app = ? AND u.user_id = ? ORDER BY {d.list_order}",
            (d.text(app), d.text(user_id)),
        )
    return [d.session(r) for r in rows]


def sessions_with_id(d: SessionDialect, session_id: str) -> Program[list[Session]]:
    rows = yield from all_rows(f"SELECT {SESSION_COLS} FROM sessions WHERE id = ? ORDER BY app", (d.text(session_id),))
    return [d.session(r) for r in rows]


def delete_session(d: SessionDialect, app: str, session_id: str) -> Program[bool]:
    # session_users and events go by ON DELETE CASCADE
    n = yield from count("DELETE FROM sessions WHERE app = ? AND id = ?", (d.text(app), d.text(session_id)))
    return n > 0


def counts(d: SessionDialect) -> Program[tuple[int, int]]:
    row = yield from one("SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM events)")
    assert row is not None
    return int(row[0]), int(row[1])


#: Session ids per ``IN (...)`` list of :func:`event_counts` (under SQLite's parameter limit).
COUNT_CHUNK = 500


def event_counts(d: SessionDialect, app: str, session_ids: Sequence[str]) -> Program[dict[str, int]]:
    """Each named session's number of events (one grouped count per chunk of ids); a session
    that does not exist is left out."""
    out: dict[str, int] = {}
    ids = list(dict.fromkeys(session_ids))
    for start in range(0, len(ids), COUNT_CHUNK):
        chunk = ids[start : start + COUNT_CHUNK]
        marks = ", ".join("?" * len(chunk))
        rows = yield from all_rows(
            f"SELECT s.id, COUNT(e.session_id) FROM sessions s"
            f" LEFT JOIN events e ON e.app = s.app AND e.session_id = s.id"
            f" WHERE s.app = ? AND s.id IN ({marks}) GROUP BY s.id",
            (d.text(app), *(d.text(i) for i in chunk)),
        )
        out.update((str(r[0]), int(r[1])) for r in rows)
    return out


def delete_user_sessions(d: SessionDialect, user_id: str) -> Program[int]:
    """Sessions whose only participant is the user go; in group sessions the user's own events
    and participation go (one write transaction)."""
    user = d.text(user_id)
    n = yield from count(
        "DELETE FROM sessions WHERE (app, id) IN ("
        " SELECT app, session_id FROM session_users GROUP BY app, session_id"
        " HAVING COUNT(*) = 1 AND MAX(user_id) = ?)",
        (user,),
    )
    groups = yield from all_rows("SELECT app, session_id FROM session_users WHERE user_id = ?", (user,))
    for app, sid in groups:  # stored (encoded) keys, passed back as they are
        n += yield from count(
            f"DELETE FROM events WHERE app = ? AND session_id = ? AND (author = ? OR {d.event_user_sql})",
            (app, sid, user, user),
        )
        yield Stmt("DELETE FROM session_users WHERE app = ? AND session_id = ? AND user_id = ?", (app, sid, user))
        row = yield from one(f"SELECT user_ids FROM sessions WHERE app = ? AND id = ?{d.lock_session}", (app, sid))
        if row is None:  # pragma: no cover - a session_users row outlives its session only mid-cascade
            continue
        kept = [u for u in d.unjson(row[0]) if u != user_id]
        yield Stmt("UPDATE sessions SET user_ids = ? WHERE app = ? AND id = ?", (d.json(kept), app, sid))
    return n


def export_user(d: SessionDialect, user_id: str) -> Program[list[dict[str, Any]]]:
    """The user's sessions with events (group sessions: the user's own events), one snapshot."""
    keys = yield from all_rows(
        "SELECT app, session_id FROM session_users WHERE user_id = ? ORDER BY app, session_id", (d.text(user_id),)
    )
    out: list[dict[str, Any]] = []
    for app, sid in keys:
        session = yield from read_session(d, d.untext(app) or "", d.untext(sid) or "")
        if session is not None:
            out.append(export_session(session, user_id))
    return out


def add_event(d: SessionDialect, app: str, session_id: str, stored: Event, content: str) -> Program[None]:
    key = (d.text(app), d.text(session_id))
    # Locks the session's row where rows lock: writers of one session go one at a time, in seq order.
    n = yield from count("UPDATE sessions SET updated_at = ? WHERE app = ? AND id = ?", (d.ts(utcnow()), *key))
    if n == 0:
        raise NotFoundError(f"no session {session_id!r} in app {app!r}; create it first (get_or_create_session)")
    yield Stmt(
        f"INSERT INTO events (app, session_id, {EVENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *key,
            d.text(stored.id),
            stored.type.value,
            d.ts(stored.timestamp),
            d.text(stored.author),
            d.text(content),
            d.json(stored.metadata),
        ),
    )


def get_events(
    d: SessionDialect, app: str, session_id: str, types: frozenset[EventType] | None, limit: int | None
) -> Program[list[Event]]:
    sql = f"SELECT {EVENT_COLS} FROM events WHERE app = ? AND session_id = ?"
    args: list[Any] = [d.text(app), d.text(session_id)]
    if types is not None:
        sql += f" AND type IN ({', '.join('?' * len(types))})"
        args.extend(sorted(t.value for t in types))
    if limit is None:
        rows = yield from all_rows(sql + " ORDER BY seq", args)
    else:
        rows = yield from all_rows(sql + " ORDER BY seq DESC LIMIT ?", [*args, limit])
        rows.reverse()
    return [d.event(r) for r in rows]


def pop_event(d: SessionDialect, app: str, session_id: str) -> Program[Event | None]:
    key = (d.text(app), d.text(session_id))
    # Lock the session first: a concurrent pop or add waits, then sees the new newest event.
    if (yield from one(f"SELECT 1 FROM sessions WHERE app = ? AND id = ?{d.lock_session}", key)) is None:
        return None
    row = yield from one(
        f"SELECT seq, {EVENT_COLS} FROM events WHERE app = ? AND session_id = ? ORDER BY seq DESC LIMIT 1", key
    )
    if row is None:
        return None
    yield Stmt("DELETE FROM events WHERE seq = ?", (row[0],))
    yield Stmt("UPDATE sessions SET updated_at = ? WHERE app = ? AND id = ?", (d.ts(utcnow()), *key))
    return d.event(row[1:])


# ---------------------------------------------------------------------- the store
class _Db(Protocol):
    async def release(self) -> None: ...


class SqlSessionStore(ABC):
    """:class:`~memlane.stores.base.SessionStore` over one SQL dialect: the rules once; a
    backend supplies ``db`` (released on :meth:`close`), the dialect and the runners."""

    db: _Db
    _closed: bool = False

    # ------------------------------------------------------------------ what a backend supplies
    @property
    @abstractmethod
    def _d(self) -> SessionDialect:
        """The backend's session dialect."""

    @abstractmethod
    async def _query(self, program: Program[T]) -> T:
        """Run a program of one read statement."""

    @abstractmethod
    async def _snapshot(self, program: Program[T]) -> T:
        """Run a read-only program whose statements all see one consistent state."""

    @abstractmethod
    async def _transact(self, program: Program[T]) -> T:
        """Run a program in one write transaction (rolled back when it raises)."""

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"this {type(self).__name__} is closed; open a new one")

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
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=state
        )
        await self._transact(create_session(self._d, session))
        return session

    async def get_or_create_session(
        self,
        *,
        session_id: str,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session:
        """Return the session (with its events) or create it: idempotent, also across processes
        and replicas. An existing session is returned unchanged (the other arguments are ignored).
        """
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=None
        )
        existing = await self._snapshot(read_session(self._d, app, session_id))
        if existing is not None:
            return existing
        # Another writer may be creating it right now: ON CONFLICT DO NOTHING decides.
        if await self._transact(insert_session(self._d, session)):
            return session
        found = await self._snapshot(read_session(self._d, app, session_id))
        if found is None:  # pragma: no cover - deleted between the two transactions
            raise StorageError(f"session {session_id!r} vanished while being created; retry")
        return found

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        """The session with all its stored events, or None."""
        check_app(app)
        check_session_id(session_id)
        return await self._snapshot(read_session(self._d, app, session_id))

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        """Sessions of ``app`` (optionally of one user), newest activity first, without events."""
        check_app(app)
        return await self._query(list_sessions(self._d, app, user_id))

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        """Every session named ``session_id``, in every app, without events (an app's sessions
        are keyed by (app, id): the same id may exist in several apps). The room check of the
        service reads it: a room memory is keyed by agent and session id, not by app."""
        check_session_id(session_id)
        return await self._query(sessions_with_id(self._d, session_id))

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        """Delete a session and its events; True if it existed."""
        check_app(app)
        check_session_id(session_id)
        return await self._transact(delete_session(self._d, app, session_id))

    async def counts(self) -> tuple[int, int]:
        """(sessions, events) in the store."""
        return await self._query(counts(self._d))

    async def event_counts(self, session_ids: Sequence[str], *, app: str = "default") -> dict[str, int]:
        """Each named session's number of events (:class:`~memlane.stores.base.EventCounts`);
        sessions that do not exist are left out."""
        check_app(app)
        for session_id in session_ids:
            check_session_id(session_id)
        return await self._query(event_counts(self._d, app, session_ids))

    async def delete_user_sessions(self, user_id: str) -> int:
        """Delete, in every app, the sessions whose only participant is ``user_id``; in group
        sessions, delete the user's own events (author or ``metadata["user_id"]`` is the user)
        and remove the user from the participants. Returns the rows deleted. One transaction."""
        check_user_ids([user_id])
        return await self._transact(delete_user_sessions(self._d, user_id))

    async def directory_users(
        self, *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
    ) -> list[UserActivity]:
        """The sessions' participants, by user id (:class:`~memlane.stores.base.UserDirectory`)."""
        self._check_open()
        return await self._query(
            directory.session_users(self._d, agent_id=agent_id, user_id=user_id, after=after, limit=limit)
        )

    async def directory(self, *, user_id: str | None) -> Directory:
        """The apps and their sessions (:class:`~memlane.stores.base.UserDirectory`)."""
        self._check_open()
        return await self._query(directory.session_directory(self._d, user_id=user_id))

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The sessions the user takes part in, with events (a group session: the user's own
        events only; see :func:`memlane.sessions.export_session`), read in one snapshot."""
        check_user_ids([user_id])
        return {"sessions": await self._snapshot(export_user(self._d, user_id))}

    # ------------------------------------------------------------------ events
    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        """Append ``event`` and touch the session's ``updated_at``.

        Returns the stored copy (timestamp normalised to UTC).

        Raises:
            NotFoundError: no such session in ``app``; nothing is written.
            InvalidInputError: the event's content or metadata is not JSON (or, on PostgreSQL,
                holds what ``jsonb`` cannot store: NaN, Infinity); nothing is written.
        """
        check_app(app)
        check_session_id(session_id)
        stored = prepare_event(event)
        content = check_json("event content", stored.content)
        metadata = check_json("event metadata", stored.metadata)
        # Return exactly what a later read gives back (JSON turns tuples into lists, ...).
        stored.content = json.loads(content)
        stored.metadata = json.loads(metadata)
        await self._transact(add_event(self._d, app, session_id, stored, content))
        return stored

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
        check_app(app)
        check_session_id(session_id)
        types = event_type_filter(event_types)
        check_limit(limit)
        if limit == 0 or types == frozenset():
            return []
        return await self._query(get_events(self._d, app, session_id, types, limit))

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        """Remove and return the newest event in one transaction (None when there is none)."""
        check_app(app)
        check_session_id(session_id)
        return await self._transact(pop_event(self._d, app, session_id))

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Give back the database reference (closing it if this was the last one).

        Idempotent; any other call afterwards raises StorageError.
        """
        if self._closed:
            return
        self._closed = True
        await self.db.release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
