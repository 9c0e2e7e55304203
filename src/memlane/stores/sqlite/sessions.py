"""``SqliteSessionStore``: durable sessions in memlane's shared SQLite file.

A session lives in ``sessions`` (one row, participants mirrored in ``session_users`` for the
``user_id`` filter) and its events in ``events``, ordered by the autoincrement ``seq``:
insertion order is the event order, whatever the events' timestamps say. A new store object
on the same file resumes every session exactly (Gaia's durable ``{user}:{channel}``
session), and any number of stores, threads and processes may write to one file at once:
each write is one ``BEGIN IMMEDIATE`` transaction, so no acknowledged event is lost.

Encodings: timestamps are ISO-8601 UTC with microseconds and a ``+00:00`` offset (fixed
width, so they sort as text and round-trip exactly); event content, event metadata, session
state and user ids are JSON. Unlike ``LocalSessionStore`` there is no bound on sessions or events.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from memlane.errors import InvalidInputError, NotFoundError, StorageError
from memlane.models import Event, EventType, Session, utcnow
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
    to_utc,
)
from memlane.stores.sqlite.db import Database

T = TypeVar("T")

_SESSION_COLS = "app, id, user_ids, agent_id, channel, state, created_at, updated_at"
_EVENT_COLS = "id, type, ts, author, content, metadata"


def _ts(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (``2024-05-01T12:00:00.000000+00:00``)."""
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _parse_ts(text: str) -> datetime:
    return to_utc(datetime.fromisoformat(text))


def _open_database(path: str | os.PathLike[str]) -> Database:
    db = Database(path)
    try:
        return db.open_sync()
    except BaseException:
        db.close_sync()  # don't leak the connection opened to inspect the file
        raise


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A read transaction, so several SELECTs see one consistent state."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


class SqliteSessionStore:
    """Durable :class:`~memlane.stores.base.SessionStore` on a memlane SQLite file.

    Args:
        db: an open :class:`Database` to share with other stores (this store takes a
            reference with ``acquire()`` and gives it back with ``release_sync()`` on
            :meth:`close`; the last release closes the database, so keep a reference of
            your own if you use it afterwards), or a file path: the store then opens its
            own ``Database`` right here, synchronously (use :meth:`open` inside an event
            loop to open off the loop), and closes it on :meth:`close`.

    All SQL runs on the database's worker threads (``await db.run``); the event loop never
    blocks on disk.
    """

    def __init__(self, db: Database | str | os.PathLike[str]) -> None:
        if isinstance(db, Database):
            self.db = db.acquire()
            self.owns_db = False
        else:
            self.db = _open_database(db).acquire()
            self.owns_db = True
        self._closed = False

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> SqliteSessionStore:
        """Open (create, migrate) the file at ``path`` on a worker thread and own it."""
        db = await asyncio.to_thread(_open_database, path)
        store = cls(db)
        store.owns_db = True
        return store

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

        def fn(conn: sqlite3.Connection) -> None:
            with self.db.write(conn) as c:
                if not self._insert_session(c, session):
                    raise InvalidInputError(
                        f"session {session.id!r} already exists in app {app!r}; use get_or_create_session to resume it"
                    )

        await self._run(fn)
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
        """Return the session (with its events) or create it: idempotent, also across processes.

        An existing session is returned unchanged (the other arguments are ignored).
        """
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=None
        )

        def fn(conn: sqlite3.Connection) -> Session:
            existing = self._read_session(conn, app, session_id)
            if existing is not None:
                return existing
            with self.db.write(conn) as c:
                # Another writer may have created it since the read: INSERT OR IGNORE decides.
                if self._insert_session(c, session):
                    return session
            found = self._read_session(conn, app, session_id)
            if found is None:  # pragma: no cover - deleted between the two transactions
                raise StorageError(f"session {session_id!r} vanished while being created; retry")
            return found

        return await self._run(fn)

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        """The session with all its stored events, or None."""
        check_app(app)
        check_session_id(session_id)
        return await self._run(lambda conn: self._read_session(conn, app, session_id))

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        """Sessions of ``app`` (optionally of one user), newest activity first, without events."""
        check_app(app)

        def fn(conn: sqlite3.Connection) -> list[Session]:
            if user_id is None:
                rows = conn.execute(
                    f"SELECT {_SESSION_COLS} FROM sessions WHERE app = ? ORDER BY updated_at DESC, rowid DESC",
                    (app,),
                ).fetchall()
            else:
                cols = ", ".join(f"s.{c.strip()}" for c in _SESSION_COLS.split(","))
                rows = conn.execute(
                    f"SELECT {cols} FROM sessions s JOIN session_users u "
                    "ON u.app = s.app AND u.session_id = s.id "
                    "WHERE s.app = ? AND u.user_id = ? ORDER BY s.updated_at DESC, s.rowid DESC",
                    (app, user_id),
                ).fetchall()
            return [self._session_from_row(r) for r in rows]

        return await self._run(fn)

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        """Every session named ``session_id``, in every app, without events (an app's sessions
        are keyed by (app, id): the same id may exist in several apps). The room check of the
        service reads it: a room memory is keyed by agent and session id, not by app."""
        check_session_id(session_id)

        def fn(conn: sqlite3.Connection) -> list[Session]:
            rows = conn.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = ? ORDER BY app", (session_id,))
            return [self._session_from_row(r) for r in rows.fetchall()]

        return await self._run(fn)

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        """Delete a session and its events; True if it existed."""
        check_app(app)
        check_session_id(session_id)

        def fn(conn: sqlite3.Connection) -> bool:
            with self.db.write(conn) as c:
                # session_users and events go by ON DELETE CASCADE
                cur = c.execute("DELETE FROM sessions WHERE app = ? AND id = ?", (app, session_id))
                return cur.rowcount > 0

        return await self._run(fn)

    async def counts(self) -> tuple[int, int]:
        """(sessions, events) in the file."""

        def fn(conn: sqlite3.Connection) -> tuple[int, int]:
            sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            return int(sessions), int(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])

        return await self._run(fn)

    async def delete_user_sessions(self, user_id: str) -> int:
        """Delete, in every app, the sessions whose only participant is ``user_id``; in group
        sessions, delete the user's own events (author or ``metadata["user_id"]`` is the user)
        and remove the user from the participants. Returns the rows deleted."""
        check_user_ids([user_id])

        def fn(conn: sqlite3.Connection) -> int:
            with self.db.write(conn) as c:
                cur = c.execute(
                    "DELETE FROM sessions WHERE (app, id) IN ("
                    " SELECT app, session_id FROM session_users GROUP BY app, session_id"
                    " HAVING COUNT(*) = 1 AND MAX(user_id) = ?)",
                    (user_id,),
                )
                n = cur.rowcount
                groups = c.execute("SELECT app, session_id FROM session_users WHERE user_id = ?", (user_id,)).fetchall()
                for app, sid in groups:
                    n += c.execute(
                        "DELETE FROM events WHERE app = ? AND session_id = ?"
                        " AND (author = ? OR json_extract(metadata, '$.user_id') = ?)",
                        (app, sid, user_id, user_id),
                    ).rowcount
                    c.execute(
                        "DELETE FROM session_users WHERE app = ? AND session_id = ? AND user_id = ?",
                        (app, sid, user_id),
                    )
                    (users,) = c.execute(
                        "SELECT user_ids FROM sessions WHERE app = ? AND id = ?", (app, sid)
                    ).fetchone()
                    kept = [u for u in json.loads(users) if u != user_id]
                    c.execute("UPDATE sessions SET user_ids = ? WHERE app = ? AND id = ?", (json.dumps(kept), app, sid))
                return n

        return await self._run(fn)

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The sessions the user takes part in, with events (a group session: the user's own
        events only; see :mod:`memlane.stores.sqlite.export`)."""
        check_user_ids([user_id])

        def fn(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            keys = conn.execute(
                "SELECT app, session_id FROM session_users WHERE user_id = ? ORDER BY app, session_id", (user_id,)
            ).fetchall()
            found = (self._read_session(conn, app, sid) for app, sid in keys)
            return [export_session(s, user_id) for s in found if s is not None]

        return {"sessions": await self._run(fn)}

    # ------------------------------------------------------------------ events
    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        """Append ``event`` and touch the session's ``updated_at``.

        Returns the stored copy (timestamp normalised to UTC).

        Raises:
            NotFoundError: no such session in ``app``; nothing is written.
            InvalidInputError: the event's content or metadata is not JSON; nothing is written.
        """
        check_app(app)
        check_session_id(session_id)
        stored = prepare_event(event)
        content = check_json("event content", stored.content)
        metadata = check_json("event metadata", stored.metadata)
        # Return exactly what a later read gives back (JSON turns tuples into lists, ...).
        stored.content = json.loads(content)
        stored.metadata = json.loads(metadata)
        row = (
            app,
            session_id,
            stored.id,
            stored.type.value,
            _ts(stored.timestamp),
            stored.author,
            content,
            metadata,
        )

        def fn(conn: sqlite3.Connection) -> None:
            with self.db.write(conn) as c:
                cur = c.execute(
                    "UPDATE sessions SET updated_at = ? WHERE app = ? AND id = ?",
                    (_ts(utcnow()), app, session_id),
                )
                if cur.rowcount == 0:
                    raise NotFoundError(
                        f"no session {session_id!r} in app {app!r}; create it first (get_or_create_session)"
                    )
                c.execute(
                    f"INSERT INTO events (app, session_id, {_EVENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )

        await self._run(fn)
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

        def fn(conn: sqlite3.Connection) -> list[Event]:
            sql = f"SELECT {_EVENT_COLS} FROM events WHERE app = ? AND session_id = ?"
            args: list[Any] = [app, session_id]
            if types is not None:
                sql += f" AND type IN ({', '.join('?' * len(types))})"
                args.extend(sorted(t.value for t in types))
            if limit is None:
                rows = conn.execute(sql + " ORDER BY seq", args).fetchall()
            else:
                rows = conn.execute(sql + " ORDER BY seq DESC LIMIT ?", [*args, limit]).fetchall()
                rows.reverse()
            return [self._event_from_row(r) for r in rows]

        return await self._run(fn)

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        """Remove and return the newest event in one transaction (None when there is none)."""
        check_app(app)
        check_session_id(session_id)

        def fn(conn: sqlite3.Connection) -> Event | None:
            with self.db.write(conn) as c:
                row = c.execute(
                    f"SELECT seq, {_EVENT_COLS} FROM events WHERE app = ? AND session_id = ? ORDER BY seq DESC LIMIT 1",
                    (app, session_id),
                ).fetchone()
                if row is None:
                    return None
                c.execute("DELETE FROM events WHERE seq = ?", (row[0],))
                now = _ts(utcnow())
                c.execute("UPDATE sessions SET updated_at = ? WHERE app = ? AND id = ?", (now, app, session_id))
                return self._event_from_row(row[1:])

        return await self._run(fn)

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Give back the database reference (closing the file if this was the last one).

        Idempotent; any other call afterwards raises StorageError.
        """
        if self._closed:
            return
        self._closed = True
        await self.db.release()

    async def __aenter__(self) -> SqliteSessionStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ internals
    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StorageError("this SqliteSessionStore is closed; open a new one")
        return await self.db.run(fn)

    @staticmethod
    def _insert_session(conn: sqlite3.Connection, session: Session) -> bool:
        """Insert ``session`` unless its id exists in its app; True if inserted."""
        cur = conn.execute(
            f"INSERT OR IGNORE INTO sessions ({_SESSION_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session.app,
                session.id,
                json.dumps(session.user_ids, ensure_ascii=False),
                session.agent_id,
                session.channel,
                json.dumps(session.state, ensure_ascii=False),
                _ts(session.created_at),
                _ts(session.updated_at),
            ),
        )
        if cur.rowcount == 0:
            return False
        conn.executemany(
            "INSERT INTO session_users (app, session_id, user_id) VALUES (?, ?, ?)",
            [(session.app, session.id, u) for u in session.user_ids],
        )
        return True

    def _read_session(self, conn: sqlite3.Connection, app: str, session_id: str) -> Session | None:
        with _snapshot(conn) as c:
            row = c.execute(
                f"SELECT {_SESSION_COLS} FROM sessions WHERE app = ? AND id = ?", (app, session_id)
            ).fetchone()
            if row is None:
                return None
            events = c.execute(
                f"SELECT {_EVENT_COLS} FROM events WHERE app = ? AND session_id = ? ORDER BY seq",
                (app, session_id),
            ).fetchall()
        session = self._session_from_row(row)
        session.events = [self._event_from_row(r) for r in events]
        return session

    @staticmethod
    def _session_from_row(row: tuple[Any, ...]) -> Session:
        app, sid, user_ids, agent_id, channel, state, created_at, updated_at = row
        return Session(
            app=app,
            id=sid,
            user_ids=json.loads(user_ids),
            agent_id=agent_id,
            channel=channel,
            state=json.loads(state),
            created_at=_parse_ts(created_at),
            updated_at=_parse_ts(updated_at),
        )

    @staticmethod
    def _event_from_row(row: tuple[Any, ...]) -> Event:
        eid, etype, ts, author, content, metadata = row
        return Event(
            id=eid,
            type=EventType(etype),
            timestamp=_parse_ts(ts),
            author=author,
            content=json.loads(content) if content is not None else None,
            metadata=json.loads(metadata),
        )
