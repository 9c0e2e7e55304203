"""``PgSessionStore``: durable sessions in PostgreSQL, shared by any number of replicas.

The port of :mod:`memlane.stores.sqlite.sessions` (same semantics, errors and input checks,
from :mod:`memlane.sessions`). A session is one ``sessions`` row (participants mirrored in
``session_users`` for the ``user_id`` filter); its events live in ``events`` ordered by the
``seq`` sequence: insertion order is the event order, whatever the events' timestamps say.

Concurrency: ``add_event`` and ``pop_event`` first lock the session's row (an ``UPDATE`` of
``updated_at``, or ``SELECT ... FOR NO KEY UPDATE``), so writers of one session are serialised
and ``seq`` order is commit order; ``get_or_create_session`` inserts with ``ON CONFLICT DO
NOTHING`` and then reads, so two replicas creating one id at once both get the one session.
A session and its events are read in one ``REPEATABLE READ`` snapshot.

Encodings: session and event timestamps are ``timestamptz`` (microseconds, UTC, taken from
this process's clock, as the SQLite store does, so a created session equals what a later read
returns); event content is JSON text (exact round trip), event metadata, session state and
user ids are ``jsonb``. Every string goes through the PostgreSQL stores' NUL-safe codec
(:func:`memlane.stores.postgres.rows.enc`; ``memlane migrate`` uses it too), so ids and text
holding NUL round-trip as on SQLite. ``jsonb`` refuses NaN and Infinity: such state or
metadata raises InvalidInputError and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

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
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.rows import dec, dec_json, enc, enc_json

__all__ = ["PgSessionStore"]

_SESSION_COLS = "app, id, user_ids, agent_id, channel, state, created_at, updated_at"
_EVENT_COLS = "id, type, ts, author, content, metadata"

Conn = psycopg.AsyncConnection[Any]


class PgSessionStore:
    """Durable :class:`~memlane.stores.base.SessionStore` on a :class:`PgDatabase`.

    Args:
        db: an open database to share with the other stores of the location; this store takes
            a reference now and gives it back once on :meth:`close` (the pool closes with the
            last reference). :meth:`open` opens a database of its own from a URL instead.
    """

    def __init__(self, db: PgDatabase) -> None:
        self.db = db.acquire()
        self._closed = False

    @classmethod
    async def open(cls, location: str) -> PgSessionStore:
        """Connect to (and migrate) the database at ``location`` (``postgresql://...?schema=``)
        and own it: :meth:`close` closes its pool (``sessions="postgresql://..."``)."""
        return cls(await PgDatabase.open(location))

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
        async with self._tx() as conn:
            if not await self._insert_session(conn, session):
                raise InvalidInputError(
                    f"session {session.id!r} already exists in app {app!r}; use get_or_create_session to resume it"
                )
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
        """Return the session (with its events) or create it: idempotent, also across replicas.

        An existing session is returned unchanged (the other arguments are ignored).
        """
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=None
        )
        existing = await self._read_session(app, session_id)
        if existing is not None:
            return existing
        async with self._tx() as conn:
            # Another replica may be creating it right now: ON CONFLICT waits for its commit and decides.
            inserted = await self._insert_session(conn, session)
        if inserted:
            return session
        found = await self._read_session(app, session_id)
        if found is None:  # pragma: no cover - deleted between the two transactions
            raise StorageError(f"session {session_id!r} vanished while being created; retry")
        return found

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        """The session with all its stored events, or None."""
        check_app(app)
        check_session_id(session_id)
        return await self._read_session(app, session_id)

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        """Sessions of ``app`` (optionally of one user), newest activity first, without events."""
        check_app(app)
        cols = ", ".join(f"s.{c.strip()}" for c in _SESSION_COLS.split(","))
        order = "ORDER BY s.updated_at DESC, s.created_at DESC, s.id DESC"
        async with self._tx(single=True) as conn:
            if user_id is None:
                cur = await conn.execute(f"SELECT {cols} FROM sessions s WHERE s.app = %s {order}", (enc(app),))
            else:
                cur = await conn.execute(
                    f"SELECT {cols} FROM sessions s JOIN session_users u ON u.app = s.app AND u.session_id = s.id"
                    f" WHERE s.app = %s AND u.user_id = %s {order}",
                    (enc(app), enc(user_id)),
                )
            return [self._session_from_row(r) for r in await cur.fetchall()]

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        """Every session named ``session_id``, in every app, without events (an app's sessions
        are keyed by (app, id): the same id may exist in several apps). The room check of the
        service reads it: a room memory is keyed by agent and session id, not by app."""
        check_session_id(session_id)
        cols = ", ".join(f"s.{c.strip()}" for c in _SESSION_COLS.split(","))
        async with self._tx(single=True) as conn:
            cur = await conn.execute(
                f"SELECT {cols} FROM sessions s WHERE s.id = %s ORDER BY s.app", (enc(session_id),)
            )
            return [self._session_from_row(r) for r in await cur.fetchall()]

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        """Delete a session and its events; True if it existed."""
        check_app(app)
        check_session_id(session_id)
        async with self._tx(single=True) as conn:
            # session_users and events go by ON DELETE CASCADE
            cur = await conn.execute("DELETE FROM sessions WHERE app = %s AND id = %s", (enc(app), enc(session_id)))
            return cur.rowcount > 0

    async def counts(self) -> tuple[int, int]:
        """(sessions, events) in the store (this schema)."""
        async with self._tx(single=True) as conn:
            cur = await conn.execute("SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM events)")
            row = await cur.fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

    async def delete_user_sessions(self, user_id: str) -> int:
        """Delete, in every app, the sessions whose only participant is ``user_id``; in group
        sessions, delete the user's own events (author or ``metadata["user_id"]`` is the user)
        and remove the user from the participants. Returns the rows deleted. One transaction."""
        check_user_ids([user_id])
        user = enc(user_id)
        async with self._tx() as conn:
            cur = await conn.execute(
                "DELETE FROM sessions WHERE (app, id) IN ("
                " SELECT app, session_id FROM session_users GROUP BY app, session_id"
                " HAVING COUNT(*) = 1 AND MAX(user_id) = %s)",
                (user,),
            )
            n = cur.rowcount
            cur = await conn.execute("SELECT app, session_id FROM session_users WHERE user_id = %s", (user,))
            for app, sid in await cur.fetchall():
                deleted = await conn.execute(
                    "DELETE FROM events WHERE app = %s AND session_id = %s"
                    " AND (author = %s OR metadata->'user_id' = to_jsonb(%s::text))",
                    (app, sid, user, user),
                )
                n += deleted.rowcount
                await conn.execute(
                    "DELETE FROM session_users WHERE app = %s AND session_id = %s AND user_id = %s",
                    (app, sid, user),
                )
                await conn.execute(
                    "UPDATE sessions SET user_ids = COALESCE((SELECT jsonb_agg(u.v ORDER BY u.i)"
                    " FROM jsonb_array_elements(user_ids) WITH ORDINALITY AS u(v, i) WHERE u.v <> to_jsonb(%s::text)),"
                    " '[]'::jsonb) WHERE app = %s AND id = %s",
                    (user, app, sid),
                )
            return n

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The sessions the user takes part in, with events (a group session: the user's own
        events only; see :func:`memlane.sessions.export_session`), read in one snapshot."""
        check_user_ids([user_id])
        async with self._snapshot() as conn:
            cur = await conn.execute(
                "SELECT app, session_id FROM session_users WHERE user_id = %s ORDER BY app, session_id", (enc(user_id),)
            )
            out: list[dict[str, Any]] = []
            for app, sid in await cur.fetchall():
                session = await self._read_in(conn, dec(app) or "", dec(sid) or "")
                if session is not None:
                    out.append(export_session(session, user_id))
        return {"sessions": out}

    # ------------------------------------------------------------------ events
    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        """Append ``event`` and touch the session's ``updated_at``.

        Returns the stored copy (timestamp normalised to UTC).

        Raises:
            NotFoundError: no such session in ``app``; nothing is written.
            InvalidInputError: the event's content or metadata is not JSON (or holds what
                ``jsonb`` cannot store: NaN, Infinity); nothing is written.
        """
        check_app(app)
        check_session_id(session_id)
        stored = prepare_event(event)
        content = check_json("event content", stored.content)
        metadata = check_json("event metadata", stored.metadata)
        # Return exactly what a later read gives back (JSON turns tuples into lists, ...).
        stored.content = json.loads(content)
        stored.metadata = json.loads(metadata)
        async with self._tx() as conn:
            # Locks the session's row: writers of one session go one at a time, in seq order.
            cur = await conn.execute(
                "UPDATE sessions SET updated_at = %s WHERE app = %s AND id = %s",
                (utcnow(), enc(app), enc(session_id)),
            )
            if cur.rowcount == 0:
                raise NotFoundError(
                    f"no session {session_id!r} in app {app!r}; create it first (get_or_create_session)"
                )
            await conn.execute(
                f"INSERT INTO events (app, session_id, {_EVENT_COLS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    enc(app),
                    enc(session_id),
                    enc(stored.id),
                    stored.type.value,
                    stored.timestamp,
                    enc(stored.author),
                    enc(content),
                    Jsonb(enc_json(stored.metadata)),
                ),
            )
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
        sql = f"SELECT {_EVENT_COLS} FROM events WHERE app = %s AND session_id = %s"
        args: list[Any] = [enc(app), enc(session_id)]
        if types is not None:
            sql += " AND type = ANY(%s)"
            args.append(sorted(t.value for t in types))
        async with self._tx(single=True) as conn:
            if limit is None:
                cur = await conn.execute(sql + " ORDER BY seq", args)
                rows = await cur.fetchall()
            else:
                cur = await conn.execute(sql + " ORDER BY seq DESC LIMIT %s", [*args, limit])
                rows = await cur.fetchall()
                rows.reverse()
        return [self._event_from_row(r) for r in rows]

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        """Remove and return the newest event in one transaction (None when there is none)."""
        check_app(app)
        check_session_id(session_id)
        async with self._tx() as conn:
            # Lock the session first: a concurrent pop or add waits, then sees the new newest event.
            cur = await conn.execute(
                "SELECT 1 FROM sessions WHERE app = %s AND id = %s FOR NO KEY UPDATE", (enc(app), enc(session_id))
            )
            if await cur.fetchone() is None:
                return None
            cur = await conn.execute(
                f"DELETE FROM events WHERE seq = (SELECT seq FROM events WHERE app = %s AND session_id = %s"
                f" ORDER BY seq DESC LIMIT 1) RETURNING {_EVENT_COLS}",
                (enc(app), enc(session_id)),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            await conn.execute(
                "UPDATE sessions SET updated_at = %s WHERE app = %s AND id = %s",
                (utcnow(), enc(app), enc(session_id)),
            )
            return self._event_from_row(row)

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Give back the database reference (closing the pool if this was the last one).

        Idempotent; any other call afterwards raises StorageError.
        """
        if self._closed:
            return
        self._closed = True
        await self.db.release()

    async def __aenter__(self) -> PgSessionStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ internals
    @asynccontextmanager
    async def _tx(self, *, single: bool = False) -> AsyncIterator[Conn]:
        """One transaction (``single``: an autocommit connection, for one statement); a value
        PostgreSQL refuses is bad input (nothing is written), any other database failure a
        StorageError."""
        if self._closed:
            raise StorageError("this PgSessionStore is closed; open a new one")
        try:
            async with self.db.connection() if single else self.db.transaction() as conn:
                yield conn
        except psycopg.DataError as exc:
            raise InvalidInputError(
                f"PostgreSQL cannot store this session data: {exc.diag.message_primary or exc}"
            ) from exc
        except psycopg.Error as exc:
            raise StorageError(f"session store: {exc}") from exc

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[Conn]:
        """A read-only transaction in which every SELECT sees one consistent state."""
        async with self._tx() as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    @staticmethod
    async def _insert_session(conn: Conn, session: Session) -> bool:
        """Insert ``session`` unless its id exists in its app; True if inserted."""
        cur = await conn.execute(
            f"INSERT INTO sessions ({_SESSION_COLS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (app, id) DO NOTHING",
            (
                enc(session.app),
                enc(session.id),
                Jsonb(enc_json(session.user_ids)),
                enc(session.agent_id),
                enc(session.channel),
                Jsonb(enc_json(session.state)),
                session.created_at,
                session.updated_at,
            ),
        )
        if cur.rowcount == 0:
            return False
        if session.user_ids:
            async with conn.cursor() as c:
                await c.executemany(
                    "INSERT INTO session_users (app, session_id, user_id) VALUES (%s, %s, %s)",
                    [(enc(session.app), enc(session.id), enc(u)) for u in session.user_ids],
                )
        return True

    async def _read_session(self, app: str, session_id: str) -> Session | None:
        async with self._snapshot() as conn:
            return await self._read_in(conn, app, session_id)

    async def _read_in(self, conn: Conn, app: str, session_id: str) -> Session | None:
        key = (enc(app), enc(session_id))
        cur = await conn.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE app = %s AND id = %s", key)
        row = await cur.fetchone()
        if row is None:
            return None
        cur = await conn.execute(
            f"SELECT {_EVENT_COLS} FROM events WHERE app = %s AND session_id = %s ORDER BY seq", key
        )
        session = self._session_from_row(row)
        session.events = [self._event_from_row(r) for r in await cur.fetchall()]
        return session

    @staticmethod
    def _session_from_row(row: Sequence[Any]) -> Session:
        app, sid, user_ids, agent_id, channel, state, created_at, updated_at = row
        return Session(
            app=dec(app),
            id=dec(sid),
            user_ids=dec_json(user_ids),
            agent_id=dec(agent_id),
            channel=dec(channel),
            state=dec_json(state),
            created_at=_utc(created_at),
            updated_at=_utc(updated_at),
        )

    @staticmethod
    def _event_from_row(row: Sequence[Any]) -> Event:
        eid, etype, ts, author, content, metadata = row
        return Event(
            id=dec(eid),
            type=EventType(etype),
            timestamp=_utc(ts),
            author=dec(author),
            content=json.loads(dec(content) or "null") if content is not None else None,
            metadata=dec_json(metadata),
        )


def _utc(value: datetime) -> datetime:
    return to_utc(value)
