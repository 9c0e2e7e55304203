"""Session stores: the shared contract over every backend, plus backend-specific behaviour,
and the pure helpers of ``memlane.sessions``."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from memlane.errors import InvalidInputError, NotFoundError, StorageError
from memlane.models import Event, EventType, Session, session_key
from memlane.sessions import events_to_messages, window_events
from memlane.stores.base import SessionStore
from memlane.stores.local import LocalMemory
from memlane.stores.null import NullMemory
from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.migrations import MIGRATIONS
from memlane.stores.sqlite.sessions import SqliteSessionStore
from memlane.testing import SessionStoreContract

U, A, TC, TR = EventType.USER_MESSAGE, EventType.AGENT_RESPONSE, EventType.TOOL_CALL, EventType.TOOL_RESULT
D = EventType.TASK_DELEGATION_RECEIVED


def ev(content: object = "x", type: EventType = U, **kw: object) -> Event:
    return Event(type=type, content=content, **kw)


# --------------------------------------------------------------------------- the contract


class TestLocalMemoryContract(SessionStoreContract):
    @pytest.fixture
    async def session_store(self) -> AsyncIterator[SessionStore]:
        store = LocalMemory()
        yield store
        await store.close()


class TestSqliteContract(SessionStoreContract):
    @pytest.fixture
    async def session_store(self, tmp_path: Path) -> AsyncIterator[SessionStore]:
        store = SqliteSessionStore(tmp_path / "memlane.db")
        yield store
        await store.close()


class TestSqliteInMemoryContract(SessionStoreContract):
    @pytest.fixture
    async def session_store(self) -> AsyncIterator[SessionStore]:
        store = await SqliteSessionStore.open(":memory:")
        yield store
        await store.close()


# --------------------------------------------------------------------------- NullMemory


class TestNullMemory:
    async def test_everything_is_a_no_op(self) -> None:
        store = NullMemory()
        assert isinstance(store, SessionStore)
        s = await store.create_session(app="a", user_ids=["u"], channel="cli", session_id="s", state={"k": 1})
        assert isinstance(s, Session)
        assert (s.id, s.app, s.user_ids, s.channel, s.state, s.events) == (
            "s",
            "a",
            ["u"],
            "cli",
            {"k": 1},
            [],
        )
        assert (await store.create_session()).id  # a generated id
        assert await store.get_session("s", app="a") is None
        assert await store.list_sessions(app="a") == []
        assert await store.list_sessions(app="a", user_id="u") == []
        event = ev("hello")
        assert await store.add_event("s", event, app="a") is event
        assert await store.add_event("never-created", event) is event  # no NotFoundError
        assert await store.get_events("s", app="a") == []
        assert await store.get_events("s", ["user_message"], 5, app="a") == []
        assert await store.delete_session("s", app="a") is False
        g = await store.get_or_create_session(session_id=session_key("u", "cli"))
        assert g.id == "u:cli" and g.events == []
        assert await store.get_session("u:cli") is None
        await store.close()
        await store.close()

    async def test_context_manager(self) -> None:
        async with NullMemory() as store:
            assert await store.list_sessions() == []


# --------------------------------------------------------------------------- LocalMemory


class TestLocalMemory:
    async def test_evicts_one_oldest_at_ten(self) -> None:
        store = LocalMemory(max_sessions=10)
        for i in range(10):
            await store.create_session(session_id=f"s{i}")
        assert len(store) == 10
        await store.create_session(session_id="s10")
        assert len(store) == 10
        assert await store.get_session("s0") is None
        assert await store.get_session("s1") is not None
        assert await store.get_session("s10") is not None

    async def test_evicts_oldest_ten_percent_by_creation_order(self) -> None:
        store = LocalMemory(max_sessions=100)
        for i in range(100):
            await store.create_session(session_id=f"s{i}")
        await store.add_event("s0", ev("recent activity does not protect s0"))
        await store.create_session(session_id="new")
        assert len(store) == 91
        remaining = {s.id for s in await store.list_sessions()}
        assert remaining == {f"s{i}" for i in range(10, 100)} | {"new"}
        with pytest.raises(NotFoundError):
            await store.add_event("s0", ev())

    @pytest.mark.parametrize(("max_sessions", "evicted"), [(1, 1), (5, 1), (11, 2), (30, 3), (1000, 100)])
    async def test_eviction_count_is_ceil_of_ten_percent(self, max_sessions: int, evicted: int) -> None:
        store = LocalMemory(max_sessions=max_sessions)
        for i in range(max_sessions):
            await store.create_session(session_id=f"s{i}")
        await store.get_or_create_session(session_id="one-more")  # get_or_create evicts too
        assert len(store) == max_sessions - evicted + 1
        # get_or_create of an existing session never evicts
        await store.get_or_create_session(session_id="one-more")
        assert len(store) == max_sessions - evicted + 1

    async def test_eviction_spans_apps(self) -> None:
        store = LocalMemory(max_sessions=2)
        await store.create_session(app="a", session_id="s")
        await store.create_session(app="b", session_id="s")
        await store.create_session(app="c", session_id="s")
        assert await store.get_session("s", app="a") is None
        assert await store.get_session("s", app="b") is not None

    async def test_event_deque_is_bounded(self) -> None:
        store = LocalMemory(max_session_events=5)
        await store.create_session(session_id="s")
        for i in range(8):
            await store.add_event("s", ev(i))
        assert [e.content for e in await store.get_events("s")] == [3, 4, 5, 6, 7]
        session = await store.get_session("s")
        assert session is not None and [e.content for e in session.events] == [3, 4, 5, 6, 7]
        assert [e.content for e in await store.get_events("s", limit=2)] == [6, 7]

    @pytest.mark.parametrize("kwargs", [{"max_sessions": 0}, {"max_session_events": 0}, {"max_sessions": -1}])
    def test_bounds_must_be_positive(self, kwargs: dict[str, int]) -> None:
        with pytest.raises(InvalidInputError):
            LocalMemory(**kwargs)

    async def test_context_manager(self) -> None:
        async with LocalMemory() as store:
            await store.create_session(session_id="s")
            assert len(await store.list_sessions()) == 1


# --------------------------------------------------------------------------- SqliteSessionStore


async def _count(store: SqliteSessionStore, table: str) -> int:
    def fn(conn: sqlite3.Connection) -> int:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    return await store.db.run(fn)


def _write_events(path: str, writer: int, n: int) -> None:
    """One writer with its own store on ``path``: n events tagged (writer, i)."""

    async def main() -> None:
        store = SqliteSessionStore(path)
        try:
            for i in range(n):
                await store.add_event("shared", ev(f"w{writer}-{i}", metadata={"writer": writer, "i": i}))
        finally:
            await store.close()

    asyncio.run(main())


def _start_and_join(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive()


def _assert_all_events(events: list[Event], writers: int, n: int) -> None:
    assert len(events) == writers * n
    assert len({e.id for e in events}) == writers * n
    for w in range(writers):
        mine = [e.metadata["i"] for e in events if e.metadata["writer"] == w]
        assert mine == list(range(n)), f"writer {w} lost or reordered events"


class TestSqliteSessionStore:
    async def test_restart_resumes_exact_session(self, tmp_path: Path) -> None:
        path = tmp_path / "m.db"
        store = SqliteSessionStore(path)
        key = session_key("alice", "telegram")
        await store.get_or_create_session(session_id=key, user_ids=["alice"], agent_id="gaia", channel="telegram")
        base = datetime(2024, 5, 1, 8, 30, 0, 1, tzinfo=timezone(timedelta(hours=-7)))
        sent = [
            ev("hi", timestamp=base, metadata={"source": "telegram", "msg_id": 17}),
            ev({"name": "lookup", "args": {"q": "weather"}}, type=TC, author="lookup"),
            ev({"text": "sunny", "raw": [1, 2]}, type=TR, author="lookup", metadata={"tool_call_id": "c1"}),
            ev("It is sunny.", type=A, author="gaia", timestamp=base + timedelta(seconds=3)),
        ]
        for e in sent:
            await store.add_event(key, e)
        before = await store.get_session(key)
        await store.close()

        reopened = SqliteSessionStore(path)
        try:
            after = await reopened.get_session(key)
            assert before is not None and after is not None
            assert after.model_dump() == before.model_dump()
            assert [e.model_dump() for e in after.events] == [e.model_dump() for e in sent]
            assert after.events[0].timestamp == base
            resumed = await reopened.get_or_create_session(session_id=key, user_ids=["alice"])
            assert resumed.model_dump() == before.model_dump()
            assert [s.id for s in await reopened.list_sessions(user_id="alice")] == [key]
        finally:
            await reopened.close()

    async def test_timestamps_stored_as_fixed_width_utc_text(self, tmp_path: Path) -> None:
        async with SqliteSessionStore(tmp_path / "m.db") as store:
            await store.create_session(session_id="s")
            await store.add_event("s", ev(timestamp=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)))

            def fn(conn: sqlite3.Connection) -> tuple[str, str]:
                sql = "SELECT e.ts, s.created_at FROM events e JOIN sessions s ON s.id = e.session_id"
                ts, created = conn.execute(sql).fetchone()
                return str(ts), str(created)

            ts, created = await store.db.run(fn)
            assert ts == "2024-01-02T03:04:05.000000+00:00"
            assert created.endswith("+00:00") and len(created) == len(ts)

    async def test_add_event_to_missing_session_writes_nothing(self, tmp_path: Path) -> None:
        async with SqliteSessionStore(tmp_path / "m.db") as store:
            with pytest.raises(NotFoundError):
                await store.add_event("ghost", ev())
            assert await _count(store, "events") == 0
            assert await _count(store, "sessions") == 0

    async def test_delete_cascades(self, tmp_path: Path) -> None:
        async with SqliteSessionStore(tmp_path / "m.db") as store:
            await store.create_session(session_id="s", user_ids=["u1", "u2"])
            await store.add_event("s", ev())
            assert (await _count(store, "session_users"), await _count(store, "events")) == (2, 1)
            assert await store.delete_session("s")
            assert (await _count(store, "session_users"), await _count(store, "events")) == (0, 0)

    async def test_shared_database_reference_counting(self, tmp_path: Path) -> None:
        db = Database(tmp_path / "m.db").open_sync().acquire()  # our own reference
        one, two = SqliteSessionStore(db), SqliteSessionStore(db)
        assert not one.owns_db
        await one.create_session(session_id="s")
        await one.close()
        with pytest.raises(StorageError, match="closed"):
            await one.get_session("s")
        assert await two.get_session("s") is not None  # the database stays open for `two`
        await two.close()
        assert await db.run(lambda c: c.execute("SELECT count(*) FROM sessions").fetchone()[0]) == 1
        db.release_sync()  # the last reference closes the file
        with pytest.raises(StorageError, match="closed"):
            await db.run(lambda c: None)

    async def test_owned_database_closed_on_close(self, tmp_path: Path) -> None:
        store = SqliteSessionStore(tmp_path / "m.db")
        assert store.owns_db
        await store.close()
        with pytest.raises(StorageError):
            await store.db.run(lambda c: None)

    async def test_open_classmethod(self, tmp_path: Path) -> None:
        store = await SqliteSessionStore.open(tmp_path / "sub" / "m.db")
        try:
            assert store.owns_db
            await store.create_session(session_id="s")
        finally:
            await store.close()
        assert (tmp_path / "sub" / "m.db").exists()

    async def test_no_schema_change(self, tmp_path: Path) -> None:
        async with SqliteSessionStore(tmp_path / "m.db") as store:
            assert store.db.applied_migrations() == [name for name, _ in MIGRATIONS]

    async def test_gaia_stable_key(self, tmp_path: Path) -> None:
        path = tmp_path / "m.db"
        key = session_key("u42", "whatsapp")
        async with SqliteSessionStore(path) as store:
            first = await store.get_or_create_session(session_id=key, user_ids=["u42"], channel="whatsapp")
            second = await store.get_or_create_session(session_id=key, user_ids=["u42"], channel="whatsapp")
            assert first.model_dump() == second.model_dump()
            await store.add_event(key, ev("remember me"))
        async with SqliteSessionStore(path) as store:
            third = await store.get_or_create_session(session_id=key, user_ids=["u42"], channel="whatsapp")
            assert third.created_at == first.created_at
            assert [e.content for e in third.events] == ["remember me"]
            assert len(await store.list_sessions()) == 1

    async def test_concurrent_writers_threads(self, tmp_path: Path) -> None:
        path = str(tmp_path / "m.db")
        async with SqliteSessionStore(path) as store:
            await store.create_session(session_id="shared")
        writers, n = 8, 25
        errors: list[BaseException] = []

        def run(w: int) -> None:
            try:
                _write_events(path, w, n)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
        await asyncio.to_thread(_start_and_join, threads)
        assert errors == []
        async with SqliteSessionStore(path) as store:
            _assert_all_events(await store.get_events("shared"), writers, n)

    async def test_concurrent_get_or_create_threads(self, tmp_path: Path) -> None:
        path = str(tmp_path / "m.db")
        async with SqliteSessionStore(path):  # create the file and schema first
            pass
        created: list[str] = []

        def run() -> None:
            async def main() -> None:
                async with SqliteSessionStore(path) as store:
                    s = await store.get_or_create_session(session_id="race", user_ids=["u"])
                    created.append(s.created_at.isoformat())

            asyncio.run(main())

        threads = [threading.Thread(target=run) for _ in range(8)]
        await asyncio.to_thread(_start_and_join, threads)
        assert len(created) == 8 and len(set(created)) == 1
        async with SqliteSessionStore(path) as store:
            assert await _count(store, "sessions") == 1
            assert await _count(store, "session_users") == 1

    async def test_concurrent_writers_processes(self, tmp_path: Path) -> None:
        path = str(tmp_path / "m.db")
        async with SqliteSessionStore(path) as store:
            await store.create_session(session_id="shared")
        writers, n = 2, 30
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_write_events, args=(path, w, n)) for w in range(writers)]
        for p in procs:
            p.start()
        for p in procs:
            await asyncio.to_thread(p.join, 120)
        assert [p.exitcode for p in procs] == [0] * writers
        for p in procs:
            p.close()
        async with SqliteSessionStore(path) as store:
            _assert_all_events(await store.get_events("shared"), writers, n)


# --------------------------------------------------------------------------- window_events


def _log(*types: EventType) -> list[Event]:
    return [ev(f"e{i}", type=t) for i, t in enumerate(types)]


class TestWindowEvents:
    LOG = _log(A, U, A, TC, TR, A, U, A, D, A)  # turn starts at 1, 6, 8

    def contents(self, events: list[Event]) -> list[object]:
        return [e.content for e in events]

    def test_no_limits_returns_a_copy(self) -> None:
        out = window_events(self.LOG)
        assert out == self.LOG and out is not self.LOG

    def test_last_n(self) -> None:
        assert self.contents(window_events(self.LOG, last_n=3)) == ["e7", "e8", "e9"]
        assert window_events(self.LOG, last_n=0) == []
        assert window_events(self.LOG, last_n=100) == self.LOG
        assert window_events([], last_n=3) == []

    def test_user_turns(self) -> None:
        assert self.contents(window_events(self.LOG, user_turns=1)) == [
            "e8",
            "e9",
        ]  # delegation starts a turn
        assert self.contents(window_events(self.LOG, user_turns=2)) == ["e6", "e7", "e8", "e9"]
        assert self.contents(window_events(self.LOG, user_turns=3)) == [f"e{i}" for i in range(1, 10)]
        # fewer turns than asked: nothing is trimmed, leading non-user events included
        assert window_events(self.LOG, user_turns=4) == self.LOG
        assert window_events(self.LOG, user_turns=0) == []
        assert window_events([], user_turns=2) == []

    def test_user_turns_without_user_events(self) -> None:
        log = _log(A, TC, TR)
        assert window_events(log, user_turns=1) == log

    def test_turn_start_is_last_event(self) -> None:
        log = _log(U, A, U)
        assert self.contents(window_events(log, user_turns=1)) == ["e2"]

    def test_both_limits_shorter_wins(self) -> None:
        assert self.contents(window_events(self.LOG, last_n=3, user_turns=2)) == ["e7", "e8", "e9"]
        assert self.contents(window_events(self.LOG, last_n=8, user_turns=1)) == ["e8", "e9"]

    @pytest.mark.parametrize("kwargs", [{"last_n": -1}, {"user_turns": -2}, {"last_n": 1.5}, {"user_turns": True}])
    def test_bad_limits(self, kwargs: dict[str, object]) -> None:
        with pytest.raises(InvalidInputError):
            window_events(self.LOG, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- events_to_messages


class TestEventsToMessages:
    def test_mapping(self) -> None:
        events = [
            ev("hello", type=U, author="alice"),
            ev("do the task", type=D, author="parent-agent"),
            ev({"name": "search", "text": "search: weather"}, type=TC, author="search"),
            ev("22C and sunny", type=TR, author="search"),
            ev("It's sunny.", type=A, author="helper"),
        ]
        assert events_to_messages(events) == [
            {"role": "user", "content": "hello", "name": "alice"},
            {"role": "user", "content": "do the task", "name": "parent-agent"},
            {"role": "tool", "content": "search: weather", "name": "search"},
            {"role": "tool", "content": "22C and sunny", "name": "search"},
            {"role": "assistant", "content": "It's sunny.", "name": "helper"},
        ]

    def test_skips_events_without_text_and_other_types(self) -> None:
        events = [
            ev("", type=U),
            ev("   \n", type=A),
            ev(None, type=A),
            ev({"name": "search", "args": {"q": "x"}}, type=TC),  # a dict without "text"
            ev(["a"], type=TR),
            ev(7, type=U),
            ev("sub-agent, please", type=EventType.DELEGATION_REQUEST),
            ev("done", type=EventType.DELEGATION_RESPONSE),
            ev("boom", type=EventType.ERROR),
            ev("kept", type=U),
        ]
        assert events_to_messages(events) == [{"role": "user", "content": "kept", "name": "user"}]

    def test_empty(self) -> None:
        assert events_to_messages([]) == []
        assert events_to_messages(iter(_log(U))) == [{"role": "user", "content": "e0", "name": "user"}]
