"""Test support shipped with memlane: contract suites every backend must pass.

Only tests import this module (it imports pytest).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memlane.errors import InvalidInputError, NotFoundError
from memlane.models import Event, EventType, session_key
from memlane.stores.base import SessionStore

# --------------------------------------------------------------------------- session store contract
#
# Usage, in a test module (needs pytest-asyncio with ``asyncio_mode = "auto"``):
#
#     class TestMyStore(SessionStoreContract):
#         @pytest.fixture
#         async def session_store(self, tmp_path):
#             store = MyStore(...)
#             yield store
#             await store.close()
#
# Every store must pass all of it; ``NullMemory`` (memory disabled) is the one exception.


def _sev(content: object = "hi", type: EventType = EventType.USER_MESSAGE, **kw: object) -> Event:
    return Event(type=type, content=content, **kw)


async def _session_tick() -> None:
    """Let the clock move so ``updated_at`` values differ (coarse clocks on some systems)."""
    await asyncio.sleep(0.002)


class SessionStoreContract:
    """The behaviour every :class:`~memlane.stores.base.SessionStore` shares.

    Subclass it in a test module and provide a ``session_store`` fixture yielding a fresh,
    empty store (and closing it afterwards).
    """

    # ------------------------------------------------------------------ sessions
    async def test_is_a_session_store(self, session_store: SessionStore) -> None:
        assert isinstance(session_store, SessionStore)

    async def test_create_and_get(self, session_store: SessionStore) -> None:
        created = await session_store.create_session(
            app="a",
            user_ids=["alice"],
            agent_id="helper",
            channel="cli",
            session_id="s1",
            state={"k": [1, "two"], "n": None},
        )
        assert (created.id, created.app, created.user_ids) == ("s1", "a", ["alice"])
        assert (created.agent_id, created.channel) == ("helper", "cli")
        assert created.state == {"k": [1, "two"], "n": None}
        assert created.events == []
        assert created.created_at.tzinfo is not None
        assert created.created_at.utcoffset() == timedelta(0)
        got = await session_store.get_session("s1", app="a")
        assert got is not None
        assert got.model_dump() == created.model_dump()

    async def test_create_generates_unique_ids(self, session_store: SessionStore) -> None:
        a = await session_store.create_session()
        b = await session_store.create_session()
        assert a.id and b.id and a.id != b.id
        assert a.app == "default"
        assert await session_store.get_session(a.id) is not None

    async def test_duplicate_create_raises_and_changes_nothing(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="dup", user_ids=["u1"], state={"v": 1})
        await session_store.add_event("dup", _sev("kept"))
        with pytest.raises(InvalidInputError, match="already exists"):
            await session_store.create_session(session_id="dup", user_ids=["u2"], state={"v": 2})
        got = await session_store.get_session("dup")
        assert got is not None
        assert (got.user_ids, got.state, [e.content for e in got.events]) == (["u1"], {"v": 1}, ["kept"])
        assert await session_store.list_sessions(user_id="u2") == []
        assert len(await session_store.list_sessions()) == 1

    @pytest.mark.parametrize("bad", ["", "   ", "\t\n"])
    async def test_blank_session_id_rejected(self, session_store: SessionStore, bad: str) -> None:
        with pytest.raises(InvalidInputError, match="session_id"):
            await session_store.create_session(session_id=bad)
        with pytest.raises(InvalidInputError, match="session_id"):
            await session_store.get_or_create_session(session_id=bad)
        assert await session_store.list_sessions() == []

    async def test_user_ids_must_be_a_list(self, session_store: SessionStore) -> None:
        with pytest.raises(InvalidInputError, match="user_ids"):
            await session_store.create_session(session_id="s", user_ids="alice")
        with pytest.raises(InvalidInputError):
            await session_store.create_session(session_id="s", user_ids=["alice", ""])
        assert await session_store.list_sessions() == []

    async def test_non_json_state_rejected(self, session_store: SessionStore) -> None:
        with pytest.raises(InvalidInputError, match="JSON"):
            await session_store.create_session(session_id="s", state={"x": object()})
        assert await session_store.get_session("s") is None

    async def test_get_missing_is_none(self, session_store: SessionStore) -> None:
        assert await session_store.get_session("nope") is None

    async def test_list_sessions_newest_activity_first_without_events(self, session_store: SessionStore) -> None:
        for sid in ("s1", "s2", "s3"):
            await session_store.create_session(session_id=sid)
            await _session_tick()
        await session_store.add_event("s1", _sev())
        listed = await session_store.list_sessions()
        assert [s.id for s in listed] == ["s1", "s3", "s2"]
        assert all(s.events == [] for s in listed)
        assert listed[0].updated_at > listed[0].created_at

    async def test_list_sessions_user_filter(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="solo-a", user_ids=["alice"])
        await session_store.create_session(session_id="solo-b", user_ids=["bob"])
        await session_store.create_session(session_id="group", user_ids=["alice", "bob", "alice"])
        await session_store.create_session(session_id="nobody")
        alice = {s.id for s in await session_store.list_sessions(user_id="alice")}
        bob = {s.id for s in await session_store.list_sessions(user_id="bob")}
        assert alice == {"solo-a", "group"}
        assert bob == {"solo-b", "group"}
        assert await session_store.list_sessions(user_id="carol") == []
        assert len(await session_store.list_sessions()) == 4
        group = await session_store.get_session("group")
        assert group is not None and group.user_ids == ["alice", "bob"] and group.is_group

    async def test_delete(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s", user_ids=["u"])
        await session_store.add_event("s", _sev())
        assert await session_store.delete_session("s") is True
        assert await session_store.get_session("s") is None
        assert await session_store.get_events("s") == []
        assert await session_store.list_sessions() == []
        assert await session_store.list_sessions(user_id="u") == []
        assert await session_store.delete_session("s") is False
        # the id is free again, with no leftover events
        again = await session_store.create_session(session_id="s")
        assert again.events == []
        assert await session_store.get_events("s") == []

    async def test_get_or_create_is_idempotent(self, session_store: SessionStore) -> None:
        key = session_key("alice", "telegram")
        first = await session_store.get_or_create_session(session_id=key, user_ids=["alice"], channel="telegram")
        assert (first.id, first.user_ids, first.channel, first.events) == (key, ["alice"], "telegram", [])
        await session_store.add_event(key, _sev("hello"))
        second = await session_store.get_or_create_session(session_id=key, user_ids=["mallory"])
        assert second.id == first.id
        assert second.user_ids == ["alice"]  # an existing session is returned unchanged
        assert second.created_at == first.created_at
        assert [e.content for e in second.events] == ["hello"]
        assert len(await session_store.list_sessions()) == 1

    async def test_concurrent_get_or_create_makes_one_session(self, session_store: SessionStore) -> None:
        got = await asyncio.gather(*(session_store.get_or_create_session(session_id="race") for _ in range(10)))
        assert {s.id for s in got} == {"race"}
        assert len({s.created_at for s in got}) == 1
        assert len(await session_store.list_sessions()) == 1

    async def test_app_isolation(self, session_store: SessionStore) -> None:
        await session_store.create_session(app="a", session_id="s", user_ids=["u"])
        await session_store.add_event("s", _sev("in a"), app="a")
        assert await session_store.get_session("s", app="b") is None
        assert await session_store.get_session("s") is None  # the default app is another app
        assert await session_store.list_sessions(app="b") == []
        assert await session_store.list_sessions(app="b", user_id="u") == []
        assert await session_store.get_events("s", app="b") == []
        with pytest.raises(NotFoundError):
            await session_store.add_event("s", _sev("leak"), app="b")
        assert await session_store.delete_session("s", app="b") is False
        # the same id can live independently in app b
        await session_store.create_session(app="b", session_id="s")
        await session_store.add_event("s", _sev("in b"), app="b")
        assert await session_store.delete_session("s", app="b") is True
        a = await session_store.get_session("s", app="a")
        assert a is not None and [e.content for e in a.events] == ["in a"]
        assert [s.id for s in await session_store.list_sessions(app="a", user_id="u")] == ["s"]

    # ------------------------------------------------------------------ events
    async def test_add_event_to_missing_session_raises(self, session_store: SessionStore) -> None:
        with pytest.raises(NotFoundError, match="ghost"):
            await session_store.add_event("ghost", _sev())
        assert await session_store.get_session("ghost") is None
        assert await session_store.get_events("ghost") == []
        assert await session_store.list_sessions() == []

    async def test_add_event_touches_updated_at(self, session_store: SessionStore) -> None:
        created = await session_store.create_session(session_id="s")
        await _session_tick()
        await session_store.add_event("s", _sev())
        got = await session_store.get_session("s")
        assert got is not None
        assert got.created_at == created.created_at
        assert got.updated_at > created.updated_at

    async def test_event_order_preserved(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s")
        # timestamps deliberately out of order: the log order is insertion order
        base = datetime(2024, 1, 1, tzinfo=UTC)
        for i in range(30):
            await session_store.add_event("s", _sev(f"m{i}", timestamp=base - timedelta(minutes=i)))
        events = await session_store.get_events("s")
        assert [e.content for e in events] == [f"m{i}" for i in range(30)]
        session = await session_store.get_session("s")
        assert session is not None
        assert [e.id for e in session.events] == [e.id for e in events]

    async def test_get_events_filter_by_type(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s")
        kinds = [
            EventType.USER_MESSAGE,
            EventType.TOOL_CALL,
            EventType.TOOL_RESULT,
            EventType.AGENT_RESPONSE,
            EventType.USER_MESSAGE,
            EventType.AGENT_RESPONSE,
        ]
        for i, kind in enumerate(kinds):
            await session_store.add_event("s", _sev(f"e{i}", type=kind))

        async def contents(types: object, limit: int | None = None) -> list[object]:
            events = await session_store.get_events("s", types, limit)  # type: ignore[arg-type]
            return [e.content for e in events]

        assert await contents(["user_message"]) == ["e0", "e4"]
        assert await contents([EventType.USER_MESSAGE]) == ["e0", "e4"]
        assert await contents(["tool_call", EventType.TOOL_RESULT]) == ["e1", "e2"]
        assert await contents([EventType.AGENT_RESPONSE, "user_message"]) == ["e0", "e3", "e4", "e5"]
        assert await contents(["delegation_request"]) == []
        assert await contents([]) == []
        assert await contents(None) == [f"e{i}" for i in range(6)]
        assert await contents(["agent_response", "user_message"], 3) == ["e3", "e4", "e5"]
        with pytest.raises(InvalidInputError, match="unknown event type"):
            await contents(["user_mesage"])

    async def test_get_events_limit_keeps_newest_in_order(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s")
        for i in range(10):
            await session_store.add_event("s", _sev(i))
        assert [e.content for e in await session_store.get_events("s", limit=3)] == [7, 8, 9]
        assert [e.content for e in await session_store.get_events("s", limit=1)] == [9]
        assert len(await session_store.get_events("s", limit=100)) == 10
        assert await session_store.get_events("s", limit=0) == []
        with pytest.raises(InvalidInputError, match="limit"):
            await session_store.get_events("s", limit=-1)

    async def test_content_and_metadata_round_trip(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s")
        ts = datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)
        sent = [
            Event(content="plain text", author="user", timestamp=ts),
            Event(content='ünïcødé ✓ 日本語 "quoted" \n newline', author="Zoë"),
            Event(
                type=EventType.TOOL_CALL,
                author="search",
                content={"name": "search", "args": {"q": "x", "n": 3, "f": 1.5, "ok": True, "none": None}},
                metadata={"tool_call_id": "c1", "nested": {"list": [1, [2, {"3": 4}]]}},
            ),
            Event(type=EventType.TOOL_RESULT, content=["a", 1, None]),
            Event(type=EventType.ERROR, content=None),
            Event(type=EventType.AGENT_RESPONSE, content={"text": "dict with text"}, metadata={}),
            Event(content=42),
            Event(content=""),
        ]
        returned = [await session_store.add_event("s", e) for e in sent]
        assert [r.model_dump() for r in returned] == [e.model_dump() for e in sent]
        got = await session_store.get_events("s")
        assert [g.model_dump() for g in got] == [e.model_dump() for e in sent]
        assert got[0].timestamp == ts and got[0].timestamp.utcoffset() == timedelta(0)
        assert got[5].text == "dict with text"

    async def test_timestamps_normalised_to_utc(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s")
        plus2 = datetime(2024, 6, 1, 14, 0, 0, 500, tzinfo=timezone(timedelta(hours=2)))
        naive = datetime(2024, 6, 1, 12, 0, 0, 7)
        r1 = await session_store.add_event("s", _sev("aware", timestamp=plus2))
        r2 = await session_store.add_event("s", _sev("naive", timestamp=naive))
        got = await session_store.get_events("s")
        for event in (r1, r2, *got):
            assert event.timestamp.utcoffset() == timedelta(0)
        assert got[0].timestamp == plus2 == datetime(2024, 6, 1, 12, 0, 0, 500, tzinfo=UTC)
        assert got[1].timestamp == naive.replace(tzinfo=UTC)
        assert (r1.timestamp, r2.timestamp) == (got[0].timestamp, got[1].timestamp)

    async def test_non_json_event_rejected(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s")
        with pytest.raises(InvalidInputError, match="JSON"):
            await session_store.add_event("s", _sev({"x": {1, 2}}))
        with pytest.raises(InvalidInputError, match="JSON"):
            await session_store.add_event("s", _sev("ok", metadata={"when": datetime.now(UTC)}))
        assert await session_store.get_events("s") == []

    async def test_returned_objects_are_copies(self, session_store: SessionStore) -> None:
        created = await session_store.create_session(session_id="s", state={"a": {"b": 1}})
        created.state["a"]["b"] = 99
        created.user_ids.append("intruder")
        sent = _sev({"text": "original", "tags": ["x"]}, metadata={"m": [1]})
        returned = await session_store.add_event("s", sent)
        # mutate the event we passed in, the one we got back, and everything read back
        sent.content["tags"].append("sent-mutated")
        sent.metadata["m"].append(2)
        returned.content["text"] = "returned-mutated"
        returned.metadata["new"] = True
        first_read = await session_store.get_session("s")
        assert first_read is not None
        first_read.events[0].content["tags"].append("read-mutated")
        first_read.events.append(_sev("appended to a copy"))
        first_read.state["a"]["b"] = -1
        listed = await session_store.list_sessions()
        listed[0].state["a"] = "gone"
        got_events = await session_store.get_events("s")
        got_events[0].metadata["m"].append(3)
        got_events.clear()

        session = await session_store.get_session("s")
        assert session is not None
        assert session.state == {"a": {"b": 1}}
        assert session.user_ids == []
        assert len(session.events) == 1
        event = session.events[0]
        assert event.content == {"text": "original", "tags": ["x"]}
        assert event.metadata == {"m": [1]}
        assert event.id == sent.id

    async def test_add_event_rejects_blank_session_id(self, session_store: SessionStore) -> None:
        with pytest.raises(InvalidInputError):
            await session_store.add_event(" ", _sev())

    async def test_close_is_idempotent(self, session_store: SessionStore) -> None:
        await session_store.close()
        await session_store.close()  # the fixture closes a third time
