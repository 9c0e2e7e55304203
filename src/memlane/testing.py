"""Test support shipped with memlane: contract suites every backend must pass.

Only tests import this module (it imports pytest).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from memlane.errors import (
    ConfigError,
    ConflictError,
    DimensionMismatchError,
    EmbedderError,
    InvalidInputError,
    NotFoundError,
    ScopeError,
)
from memlane.models import (
    ConsolidatedMemory,
    Event,
    EventType,
    Fact,
    FactFilter,
    PartitionFilter,
    Reflection,
    Scope,
    content_hash,
    session_key,
    user_partition,
    utcnow,
)
from memlane.providers.embed.base import Matrix
from memlane.providers.embed.hashing import HashEmbedder
from memlane.providers.llm.base import ChatMessage, Completion, Usage, estimate_tokens
from memlane.retrieval.text import parse_query
from memlane.stores.base import (
    CachedContext,
    ContextCache,
    EventCounts,
    FactChange,
    FactStore,
    JobStore,
    ReflectionKey,
    ReflectionStore,
    SessionStore,
)

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

    async def test_event_counts_of_some_sessions(self, session_store: SessionStore) -> None:
        """The optional :class:`~memlane.stores.base.EventCounts`: each named session of the app,
        with its number of events; another app's and unknown sessions are left out."""
        if not isinstance(session_store, EventCounts):
            pytest.skip("this store does not count events per session")
        await session_store.create_session(app="a", user_ids=["u"], session_id="s1")
        await session_store.create_session(app="a", user_ids=["u"], session_id="s2")
        await session_store.create_session(app="b", user_ids=["u"], session_id="s1")
        for text in ("one", "two"):
            await session_store.add_event("s1", _sev(text), app="a")
        await session_store.add_event("s1", _sev("other app"), app="b")
        assert await session_store.event_counts(["s1", "s2", "nope", "s1"], app="a") == {"s1": 2, "s2": 0}
        assert await session_store.event_counts(["s1", "s2"], app="b") == {"s1": 1}
        assert await session_store.event_counts([], app="a") == {}
        await session_store.pop_event("s1", app="a")
        assert await session_store.event_counts(["s1"], app="a") == {"s1": 1}

    async def test_delete_user_sessions_spares_groups_and_others(self, session_store: SessionStore) -> None:
        await session_store.create_session(app="a", user_ids=["u"], session_id="u1")
        await session_store.create_session(app="b", user_ids=["u"], session_id="u2")
        await session_store.create_session(app="a", user_ids=["u", "v"], session_id="group")
        await session_store.create_session(app="a", user_ids=["v"], session_id="v1")
        await session_store.add_event("u1", _sev("private"), app="a")
        assert await session_store.delete_user_sessions("u") == 2
        assert await session_store.get_session("u1", app="a") is None
        assert await session_store.get_session("u2", app="b") is None
        assert await session_store.get_events("u1", app="a") == []
        assert await session_store.get_session("group", app="a") is not None
        assert await session_store.get_session("v1", app="a") is not None

    async def test_delete_user_sessions_removes_the_users_words_from_groups(self, session_store: SessionStore) -> None:
        await session_store.create_session(app="a", user_ids=["u", "v"], session_id="group")
        await session_store.add_event("group", _sev("from u by author", author="u"), app="a")
        await session_store.add_event(
            "group", _sev("from u by metadata", author="Uma", metadata={"user_id": "u"}), app="a"
        )
        await session_store.add_event("group", _sev("from v", author="v"), app="a")
        await session_store.add_event(
            "group", _sev("agent reply", type=EventType.AGENT_RESPONSE, author="bot"), app="a"
        )
        assert await session_store.delete_user_sessions("u") == 2
        group = await session_store.get_session("group", app="a")
        assert group is not None and group.user_ids == ["v"]
        assert [e.content for e in group.events] == ["from v", "agent reply"]
        assert [s.id for s in await session_store.list_sessions(app="a", user_id="u")] == []
        with pytest.raises(InvalidInputError):
            await session_store.delete_user_sessions("  ")

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

    async def test_sessions_with_id_spans_apps(self, session_store: SessionStore) -> None:
        await session_store.create_session(app="hotel", session_id="r:1", user_ids=["bob"])
        await session_store.create_session(app="other", session_id="r:1", user_ids=["alice"])
        await session_store.create_session(app="hotel", session_id="r:10", user_ids=["carol"])
        found = await session_store.sessions_with_id("r:1")
        assert [(s.app, s.id, s.user_ids) for s in found] == [("hotel", "r:1", ["bob"]), ("other", "r:1", ["alice"])]
        assert await session_store.sessions_with_id("nope") == []

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

    async def test_pop_event_removes_the_newest_only_in_its_session(self, session_store: SessionStore) -> None:
        await session_store.create_session(session_id="s", app="a")
        await session_store.create_session(session_id="s", app="b")
        for i in range(3):
            await session_store.add_event("s", _sev(f"a{i}", metadata={"i": i}), app="a")
        await session_store.add_event("s", _sev("b0"), app="b")
        popped = await session_store.pop_event("s", app="a")
        assert popped is not None and (popped.content, popped.metadata) == ("a2", {"i": 2})
        assert [e.content for e in await session_store.get_events("s", app="a")] == ["a0", "a1"]
        assert [e.content for e in await session_store.get_events("s", app="b")] == ["b0"]
        await session_store.add_event("s", _sev("a3"), app="a")  # order continues after a pop
        assert [e.content for e in await session_store.get_events("s", app="a")] == ["a0", "a1", "a3"]
        popped_all = [await session_store.pop_event("s", app="a") for _ in range(3)]
        assert [e.content for e in popped_all if e is not None] == ["a3", "a1", "a0"]
        assert await session_store.pop_event("s", app="a") is None
        assert await session_store.pop_event("missing", app="a") is None
        assert await session_store.get_session("s", app="a") is not None  # the session itself stays

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


# --------------------------------------------------------------------------- test doubles


class FlakyEmbedder:
    """Wraps an embedder; fails (``EmbedderError(retryable=True)``) while ``failing`` is True
    and counts calls. For tests of "an embedder failure never loses data"."""

    def __init__(self, inner: HashEmbedder | None = None) -> None:
        self.inner = inner or HashEmbedder(64)
        self.name = self.inner.name
        self.dim = self.inner.dim
        self.failing = False
        self.calls = 0

    async def embed_batch(self, texts: list[str]) -> Matrix:
        self.calls += 1
        if self.failing:
            raise EmbedderError("scripted embedder outage", status_code=503, retryable=True)
        return await self.inner.embed_batch(texts)

    async def aclose(self) -> None:
        await self.inner.aclose()


# --------------------------------------------------------------------------- fact store contract
#
#     class TestMyFactStore(FactStoreContract, ReflectionStoreContract):
#         @pytest.fixture
#         async def fact_store(self, tmp_path):
#             store = await MyFactStore.open(...); await store.bind_embedder("hash:64", 64)   # dim 64
#             yield store
#             await store.close()
#
#         @pytest.fixture
#         def reflection_store(self, fact_store):   # or a store of its own
#             return fact_store

_EMB = HashEmbedder(64)


def _fact(text: str, user: str | None = "u1", **kw: Any) -> Fact:
    return Fact(content=text, user_id=user, hash=content_hash(text), **kw)


def _vecs(*texts: str) -> Matrix:
    return _EMB.embed_sync(list(texts))


def _pf(user: str | None = "u1", agent: str | None = None) -> PartitionFilter:
    return Scope(user_id=user, agent_id=agent).partition_filter()


def _terms(text: str) -> tuple[str, ...]:
    return parse_query(text).terms


class FactStoreContract:
    """Behaviour every long-term fact store must show (fixture ``fact_store``, dim 64)."""

    async def test_put_is_idempotent_by_hash_within_partition(self, fact_store: FactStore) -> None:
        a = await fact_store.put_facts([_fact("Ann likes tea")], _vecs("Ann likes tea"))
        b = await fact_store.put_facts([_fact("Ann likes tea")], _vecs("Ann likes tea"))
        assert a[0][1] is True and b[0][1] is False and a[0][0].id == b[0][0].id
        c = await fact_store.put_facts([_fact("Ann likes tea", user="u2")], _vecs("Ann likes tea"))
        assert c[0][1] is True and c[0][0].id != a[0][0].id

    async def test_fact_owner_finds_a_fact_by_id_alone(self, fact_store: FactStore) -> None:
        stored = await fact_store.put_facts(
            [
                _fact("Ann likes tea", agent_id="bot"),
                _fact("The bot speaks French", user=None, agent_id="bot", scope="agent"),
                _fact("The room meets on Fridays", user=None, agent_id="bot", session_id="r1", scope="room"),
            ],
            None,
        )
        mine, shared, room = (fact.id for fact, _ in stored)
        assert await fact_store.fact_owner(mine) == Scope(user_id="u1", agent_id="bot")
        assert await fact_store.fact_owner(shared) == Scope(agent_id="bot")
        assert await fact_store.fact_owner(room) == Scope(agent_id="bot", session_id="r1")
        assert await fact_store.fact_owner("no-such-fact") is None

    async def test_batch_is_atomic(self, fact_store: FactStore) -> None:
        bad = Fact(content="no owner", user_id=None, hash="h")
        with pytest.raises(ScopeError):
            await fact_store.put_facts([_fact("fine"), bad], None)
        assert (await fact_store.list_facts(Scope(user_id="u1"))).total == 0

    async def test_wrong_dimension_is_rejected_and_writes_nothing(self, fact_store: FactStore) -> None:
        with pytest.raises(DimensionMismatchError):
            await fact_store.put_facts([_fact("x")], np.ones((1, 65), dtype=np.float32))
        with pytest.raises(DimensionMismatchError):
            await fact_store.put_facts([_fact("x"), _fact("y")], _vecs("x"))
        with pytest.raises(DimensionMismatchError):
            await fact_store.vector_search(_pf(), np.ones(3, dtype=np.float32), limit=3)
        assert (await fact_store.list_facts(Scope(user_id="u1"))).total == 0

    async def test_rebinding_another_embedder_is_refused(self, fact_store: FactStore) -> None:
        await fact_store.bind_embedder("hash:64", 64)  # the fixture's own: fine
        with pytest.raises(DimensionMismatchError):
            await fact_store.bind_embedder("hash:128", 128)
        with pytest.raises(ConfigError):
            await fact_store.bind_embedder("other:64", 64)

    async def test_keyword_and_vector_search_stay_in_partition(self, fact_store: FactStore) -> None:
        await fact_store.put_facts(
            [_fact("alpha bravo", user="u1"), _fact("alpha charlie", user="u2")], _vecs("alpha bravo", "alpha charlie")
        )
        kw = await fact_store.keyword_search(_pf(), _terms("alpha"), limit=10)
        vec = await fact_store.vector_search(_pf(), _vecs("alpha")[0], limit=10)
        got = await fact_store.get_facts([c.fact_id for c in kw + vec], Scope(user_id="u1"))
        assert {f.content for f in got.values()} == {"alpha bravo"}
        assert len(kw) == 1 and len(vec) == 1
        assert -1.0 <= vec[0].score <= 1.0

    async def test_user_scope_reads_every_agent_agent_scope_narrows(self, fact_store: FactStore) -> None:
        await fact_store.put_facts(
            [
                _fact("quebec plain"),
                _fact("quebec in x", agent_id="x"),
                _fact("quebec in y", agent_id="y"),
                _fact("quebec shared", user=None, agent_id="x", scope="agent"),
            ],
            None,
        )

        async def texts(user: str | None, agent: str | None) -> set[str]:
            found = await fact_store.keyword_search(_pf(user, agent), _terms("quebec"), limit=10)
            got = await fact_store.get_facts([c.fact_id for c in found], Scope(user_id=user, agent_id=agent))
            assert len(got) == len(found)
            return {f.content for f in got.values()}

        assert await texts("u1", None) == {"quebec plain", "quebec in x", "quebec in y"}
        assert await texts("u1", "x") == {"quebec in x", "quebec shared"}
        assert await texts(None, "x") == {"quebec shared"}
        assert (await fact_store.list_facts(Scope(user_id="u1"))).total == 3
        assert (await fact_store.list_facts(Scope(user_id="u1", agent_id="y"))).total == 1

    @pytest.mark.parametrize(
        ("a", "b"),
        [
            (("y\x1fz", "x"), ("z", "x\x1fy")),  # the old bare-separator collision
            (("a|b", "c"), ("a", "b|c")),
            (("u%7C", None), ("u|", None)),
            (("é" * 300, "\x00"), ("é" * 300, "\x01")),
            (("a", "b"), ("a%7Cb", None)),
        ],
    )
    async def test_adversarial_ids_never_collide(
        self, fact_store: FactStore, a: tuple[str, str | None], b: tuple[str, str | None]
    ) -> None:
        (ua, aa), (ub, ab) = a, b
        await fact_store.put_facts([_fact("victim secret zebra", user=ua, agent_id=aa)], _vecs("victim secret zebra"))
        assert await fact_store.keyword_search(_pf(ub, ab), _terms("zebra"), limit=5) == []
        assert await fact_store.vector_search(_pf(ub, ab), _vecs("victim secret zebra")[0], limit=5) == []
        assert (await fact_store.list_facts(Scope(user_id=ub, agent_id=ab))).total == 0
        assert len(await fact_store.keyword_search(_pf(ua, aa), _terms("zebra"), limit=5)) == 1

    async def test_kind_filter_keeps_turns_from_crowding_out_facts(self, fact_store: FactStore) -> None:
        turns = [_fact(f"lima turn {i}", kind="message") for i in range(30)]
        await fact_store.put_facts(turns, _vecs(*(t.content for t in turns)))
        await fact_store.put_facts([_fact("lima fact")], _vecs("lima fact"))
        facts_only = FactFilter(kind="fact")
        for cands in (
            await fact_store.keyword_search(_pf(), _terms("lima"), limit=3, filter=facts_only),
            await fact_store.vector_search(_pf(), _vecs("lima turn 1")[0], limit=3, filter=facts_only),
        ):
            got = await fact_store.get_facts([c.fact_id for c in cands], Scope(user_id="u1"))
            assert [f.content for f in got.values()] == ["lima fact"]
        msgs = await fact_store.vector_search(_pf(), _vecs("lima fact")[0], limit=40, filter=FactFilter(kind="message"))
        assert len(msgs) == 30
        page = await fact_store.list_facts(Scope(user_id="u1"), limit=5, filter=facts_only)
        assert page.total == 1 and [f.content for f in page.items] == ["lima fact"]

    async def test_metadata_and_author_filters_apply_before_limit(self, fact_store: FactStore) -> None:
        notes = [_fact(f"note number {i} about email", metadata={"source": "chat"}) for i in range(100)]
        await fact_store.put_facts(notes, _vecs(*(n.content for n in notes)))
        mail = _fact("the email from Bo", metadata={"source": "email", "n": 1, "ok": True}, author="Bo", kind="message")
        await fact_store.put_facts([mail], _vecs(mail.content))
        for flt in (
            FactFilter(metadata=(("source", "email"),)),
            FactFilter(metadata=(("n", 1), ("ok", True))),
            FactFilter(author="Bo"),
        ):
            kw = await fact_store.keyword_search(_pf(), _terms("email"), limit=3, filter=flt)
            vec = await fact_store.vector_search(_pf(), _vecs("note number 7 about email")[0], limit=3, filter=flt)
            assert [c.fact_id for c in kw] == [c.fact_id for c in vec] == [(await self._id_of(fact_store, mail))]
            page = await fact_store.list_facts(Scope(user_id="u1"), filter=flt)
            assert page.total == 1
        none = FactFilter(metadata=(("ok", 1),))  # JSON true is not the number 1
        assert await fact_store.keyword_search(_pf(), _terms("email"), limit=3, filter=none) == []

    @staticmethod
    async def _id_of(fact_store: FactStore, fact: Fact) -> str:
        page = await fact_store.list_facts(Scope(user_id=fact.user_id), limit=1000)
        return next(f.id for f in page.items if f.content == fact.content)

    async def test_candidates_carry_authors_and_authors_lists_them(self, fact_store: FactStore) -> None:
        await fact_store.put_facts(
            [
                _fact("romeo one", kind="message", author="Ann"),
                _fact("romeo two", kind="message", author="Bob"),
                _fact("romeo other", user="u2", kind="message", author="Eve"),
            ],
            None,
        )
        kw = await fact_store.keyword_search(_pf(), _terms("romeo"), limit=5)
        assert sorted((c.author or "").lower() for c in kw) == ["ann", "bob"]
        assert sorted(await fact_store.authors(_pf())) == ["Ann", "Bob"]

    async def test_scores_are_higher_is_better(self, fact_store: FactStore) -> None:
        texts = ["zulu zulu zulu", "zulu yankee", "xray yankee"]
        await fact_store.put_facts([_fact(t) for t in texts], _vecs(*texts))
        kw = await fact_store.keyword_search(_pf(), _terms("zulu"), limit=10)
        assert [c.score for c in kw] == sorted((c.score for c in kw), reverse=True)
        vec = await fact_store.vector_search(_pf(), _vecs("zulu zulu zulu")[0], limit=10)
        assert vec[0].score == pytest.approx(1.0, abs=1e-5)
        assert [c.score for c in vec] == sorted((c.score for c in vec), reverse=True)

    async def test_invalidate_hides_from_search_keeps_history(self, fact_store: FactStore) -> None:
        [(f, _)] = await fact_store.put_facts([_fact("delta echo")], _vecs("delta echo"))
        scope = Scope(user_id="u1")
        await fact_store.invalidate_fact(f.id, scope)
        assert await fact_store.keyword_search(_pf(), _terms("delta"), limit=5) == []
        assert await fact_store.vector_search(_pf(), _vecs("delta echo")[0], limit=5) == []
        got = await fact_store.get_fact(f.id, scope)
        assert got is not None and got.invalid_at is not None
        assert [h.event for h in await fact_store.history(f.id, scope)] == ["ADD", "DELETE"]

    async def test_update_changes_search_and_version(self, fact_store: FactStore) -> None:
        [(f, _)] = await fact_store.put_facts([_fact("foxtrot golf")], _vecs("foxtrot golf"))
        scope = Scope(user_id="u1")
        up = await fact_store.update_fact(f.id, scope, "hotel india", _vecs("hotel india")[0])
        assert up.version == 2
        assert await fact_store.keyword_search(_pf(), _terms("foxtrot"), limit=5) == []
        assert len(await fact_store.keyword_search(_pf(), _terms("india"), limit=5)) == 1
        vec = await fact_store.vector_search(_pf(), _vecs("hotel india")[0], limit=1)
        assert vec[0].fact_id == f.id and vec[0].score == pytest.approx(1.0, abs=1e-5)

    async def test_other_scope_cannot_touch(self, fact_store: FactStore) -> None:
        [(f, _)] = await fact_store.put_facts([_fact("juliet")], None)
        other = Scope(user_id="u2")
        assert await fact_store.get_fact(f.id, other) is None
        assert await fact_store.get_facts([f.id], other) == {}
        with pytest.raises(NotFoundError):
            await fact_store.update_fact(f.id, other, "x", None)
        with pytest.raises(NotFoundError):
            await fact_store.invalidate_fact(f.id, other)
        with pytest.raises(NotFoundError):
            await fact_store.history(f.id, other)

    async def test_purge_user_removes_only_that_user(self, fact_store: FactStore) -> None:
        await fact_store.put_facts(
            [
                _fact("kilo canaryword", kind="message", author="K", session_id="s"),
                _fact("kilo two", agent_id="x"),
                _fact("lima", user="u2"),
            ],
            _vecs("kilo canaryword", "kilo two", "lima"),
        )
        await fact_store.apply_changes(
            [FactChange("ADD", user_partition("u1", None), fact=_fact("kilo formed"))], key="batch-u1"
        )
        assert await fact_store.purge_user("u1") >= 4
        assert (await fact_store.list_facts(Scope(user_id="u1"), include_invalid=True)).total == 0
        assert await fact_store.keyword_search(_pf(), _terms("kilo canaryword"), limit=5) == []
        assert await fact_store.vector_search(_pf(), _vecs("kilo two")[0], limit=5) == []
        assert await fact_store.authors(_pf()) == []
        assert (await fact_store.stats(Scope(user_id="u1"))).facts == 0
        assert (await fact_store.list_facts(Scope(user_id="u2"))).total == 1
        # the applied-batch record went too: the same key applies again after a purge
        again = await fact_store.apply_changes(
            [FactChange("ADD", user_partition("u1", None), fact=_fact("kilo formed"))], key="batch-u1"
        )
        assert again[0].event == "ADD"

    @pytest.mark.parametrize("shared", ["erase", "keep"])
    async def test_purge_user_and_the_agent_memory_they_contributed(self, fact_store: FactStore, shared: str) -> None:
        contributed = _fact("tango club rule", user="u1", agent_id="club", scope="agent")
        await fact_store.put_facts([contributed, _fact("tango own", user="u1", agent_id="club")], None)
        await fact_store.purge_user("u1", shared=shared)
        club = Scope(agent_id="club")
        found = await fact_store.keyword_search(club.partition_filter(), _terms("tango"), limit=5)
        if shared == "erase":
            assert found == []
        else:
            [kept] = (await fact_store.get_facts([c.fact_id for c in found], club)).values()
            assert kept.content == "tango club rule" and kept.user_id is None  # unlinked from the user
        assert (await fact_store.list_facts(Scope(user_id="u1"), include_invalid=True)).total == 0

    async def test_missing_embeddings_and_backfill(self, fact_store: FactStore) -> None:
        await fact_store.put_facts([_fact("mike november")], None)
        missing = await fact_store.missing_embeddings(limit=10)
        assert [t for _, t in missing] == ["mike november"]
        await fact_store.set_embeddings([missing[0][0]], _vecs("mike november"))
        assert await fact_store.missing_embeddings(limit=10) == []
        vec = await fact_store.vector_search(_pf(), _vecs("mike november")[0], limit=1)
        assert vec and vec[0].score == pytest.approx(1.0, abs=1e-5)

    async def test_list_pages_and_rejects_bad_cursor(self, fact_store: FactStore) -> None:
        await fact_store.put_facts([_fact(f"oscar {i}") for i in range(5)], None)
        page = await fact_store.list_facts(Scope(user_id="u1"), limit=2)
        assert page.total == 5 and len(page.items) == 2 and page.next_cursor
        rest = await fact_store.list_facts(Scope(user_id="u1"), limit=10, cursor=page.next_cursor)
        assert len(rest.items) == 3 and {f.id for f in rest.items}.isdisjoint(f.id for f in page.items)
        for bad in ("not-a-cursor", "9" * 23, "-1"):
            with pytest.raises(InvalidInputError):
                await fact_store.list_facts(Scope(user_id="u1"), cursor=bad)

    async def test_list_only_one_kind_of_partition(self, fact_store: FactStore) -> None:
        """``only`` lists just the scope's user, agent or room partitions (``search``'s scope filter)."""
        await fact_store.put_facts(
            [
                _fact("quebec mine", agent_id="x"),
                _fact("quebec shared", user=None, agent_id="x", scope="agent"),
                _fact("quebec room", user=None, agent_id="x", session_id="r1", scope="room"),
                _fact("quebec other room", user=None, agent_id="x", session_id="r2", scope="room"),
                _fact("quebec theirs", user="u2", agent_id="x"),
            ],
            None,
        )
        scope = Scope(user_id="u1", agent_id="x", session_id="r1")

        async def listed(only: Any) -> list[str]:
            return sorted(f.content for f in (await fact_store.list_facts(scope, only=only)).items)

        assert await listed(None) == ["quebec room"]  # session_id narrows the user and agent facts to r1
        wide = Scope(user_id="u1", agent_id="x")
        assert sorted(f.content for f in (await fact_store.list_facts(wide, only="user")).items) == ["quebec mine"]
        assert sorted(f.content for f in (await fact_store.list_facts(wide, only="agent")).items) == ["quebec shared"]
        assert await listed("room") == ["quebec room"]
        assert await listed("agent") == [] and await listed("user") == []
        assert (await fact_store.list_facts(wide, only="room")).total == 0  # no room named: no room partition

    async def test_record_access_and_stats(self, fact_store: FactStore) -> None:
        [(f, _), (g, _)] = await fact_store.put_facts([_fact("papa"), _fact("papa two", user="u2")], None)
        await fact_store.record_access([f.id, f.id])
        got = await fact_store.get_fact(f.id, Scope(user_id="u1"))
        assert got is not None and got.access_count == 1
        await fact_store.invalidate_fact(g.id, Scope(user_id="u2"))
        whole = await fact_store.stats()
        assert (whole.facts, whole.valid_facts, whole.dim) == (2, 1, 64)
        mine = await fact_store.stats(Scope(user_id="u1"))
        assert (mine.facts, mine.valid_facts) == (1, 1)

    # ---- formation batches: core policy (memlane.policy) applied in one transaction
    async def test_apply_changes_is_exactly_once_per_key(self, fact_store: FactStore) -> None:
        part = user_partition("u1", None)
        batch = [FactChange("ADD", part, fact=_fact("sierra tango")), FactChange("ADD", part, fact=_fact("uniform"))]
        first = await fact_store.apply_changes(batch, key="k1")
        again = await fact_store.apply_changes(batch, key="k1")
        assert [a.fact.id for a in first] == [a.fact.id for a in again]
        assert (await fact_store.list_facts(Scope(user_id="u1"))).total == 2
        bad = [FactChange("ADD", part, fact=_fact("victor")), FactChange("DELETE", part, target_id="nope")]
        with pytest.raises(InvalidInputError):
            await fact_store.apply_changes(bad, key="k2")
        assert (await fact_store.list_facts(Scope(user_id="u1"))).total == 2  # all or nothing

    async def test_apply_changes_rules(self, fact_store: FactStore) -> None:
        part = user_partition("u1", None)
        [(old, _), (other, _)] = await fact_store.put_facts([_fact("lives in Lisbon"), _fact("x", user="u2")], None)
        res = await fact_store.apply_changes(
            [
                FactChange("UPDATE", part, fact=_fact("lives in Porto"), target_id=old.id, text="lives in Porto"),
                FactChange("DELETE", part, fact=_fact("lives in Porto"), target_id=old.id),  # same text: NONE
                FactChange("DELETE", part, fact=_fact("brand new"), target_id=other.id),  # other user's: ADD
                FactChange("UPDATE", part, fact=_fact("invented"), target_id="made-up"),  # invented id: ADD
                FactChange("NONE", part, fact=_fact("ignored"), target_id=old.id),
            ],
            key="rules",
        )
        assert [a.event for a in res] == ["UPDATE", "NONE", "ADD", "ADD", "NONE"]
        assert res[0].previous == "lives in Lisbon" and res[0].fact.version == 2
        hist = [h.event for h in await fact_store.history(old.id, Scope(user_id="u1"))]
        assert hist == ["ADD", "UPDATE", "NONE", "NONE"]
        kept = await fact_store.get_fact(other.id, Scope(user_id="u2"))
        assert kept is not None and kept.is_valid
        [(f, _)] = await fact_store.put_facts([_fact("whiskey")], None)
        dele = await fact_store.apply_changes(
            [FactChange("DELETE", part, fact=_fact("xray"), target_id=f.id)], key="del"
        )
        assert dele[0].event == "DELETE" and dele[0].previous == "whiskey"
        gone = await fact_store.get_fact(f.id, Scope(user_id="u1"))
        assert gone is not None and not gone.is_valid

    async def test_memory_stamp_changes_on_every_write_and_purge(self, fact_store: FactStore) -> None:
        async def stamp(user: str | None = "u1", agent: str | None = None) -> str:
            return await fact_store.memory_stamp(_pf(user, agent))

        empty = await stamp()
        [(f, _)] = await fact_store.put_facts([_fact("stamp one")], _vecs("stamp one"))
        seen = [empty, await stamp()]
        await fact_store.update_fact(f.id, Scope(user_id="u1"), "stamp two", _vecs("stamp two")[0])
        seen.append(await stamp())
        await fact_store.invalidate_facts([f.id], Scope(user_id="u1"))
        seen.append(await stamp())
        assert len(set(seen)) == len(seen)
        assert await stamp() == seen[-1]  # reading changes nothing
        other = await stamp("u2")
        await fact_store.put_facts([_fact("u1 again")], None)
        assert await stamp("u2") == other  # another user's write leaves u2's stamp alone
        shared = await stamp(None, "x")
        await fact_store.put_facts([_fact("x shared", user=None, agent_id="x", scope="agent")], None)
        assert await stamp(None, "x") != shared and await stamp("u1", "x") != seen[-1]
        before = await stamp()
        await fact_store.purge_user("u1")
        assert await stamp() != before


class ReflectionStoreContract:
    """Behaviour every reflection store must show (fixture ``reflection_store``)."""

    async def test_reflection_stamp_changes_on_every_write(self, reflection_store: ReflectionStore) -> None:
        rs = reflection_store
        keys = [ReflectionKey("user", None, "u1"), ReflectionKey("session", None, "u1", "s1")]
        seen = [await rs.reflection_stamp(keys)]
        r = await rs.put_reflection(Reflection(content="likes tea", scope="user", user_id="u1"))
        seen.append(await rs.reflection_stamp(keys))
        blob = ConsolidatedMemory(
            scope="user", user_id="u1", consolidated_content="VERSION: 1", word_limit=300, version=1
        )
        await rs.put_consolidated(blob, [r.id], expected_version=0)
        seen.append(await rs.reflection_stamp(keys))
        await rs.put_reflection(Reflection(content="goal", scope="session", user_id="u1", session_id="s1"))
        seen.append(await rs.reflection_stamp(keys))
        await rs.clear_session_memory(agent_id=None, user_id="u1", session_id="s1")
        seen.append(await rs.reflection_stamp(keys))
        # Each write moves the stamp (a stamp may come back when the memory does: clearing the
        # session restores the state, and so the stamp, it had before the session reflection).
        assert all(a != b for a, b in itertools.pairwise(seen)) and len(set(seen[:4])) == 4
        await rs.put_reflection(Reflection(content="other", scope="user", user_id="u2"))
        await rs.put_reflection(Reflection(content="other s", scope="session", user_id="u1", session_id="s2"))
        assert await rs.reflection_stamp(keys) == seen[-1]  # other scopes' writes leave it alone

    async def test_reflections_and_consolidated_roundtrip(self, reflection_store: ReflectionStore) -> None:
        rs = reflection_store
        r1 = await rs.put_reflection(Reflection(content="goal: fix login", scope="session", session_id="s"))
        await rs.put_reflection(Reflection(content="other session", scope="session", session_id="t"))
        assert [r.id for r in await rs.list_reflections(scope="session", session_id="s")] == [r1.id]
        blob = ConsolidatedMemory(
            scope="session", session_id="s", consolidated_content="VERSION: 1", word_limit=200, version=1
        )
        await rs.put_consolidated(blob, [r1.id])
        got = await rs.get_consolidated(scope="session", session_id="s")
        assert got is not None and got.version == 1 and got.consolidated_content == "VERSION: 1"
        assert await rs.list_reflections(scope="session", session_id="s", absorbed=False) == []
        await rs.put_consolidated(blob.model_copy(update={"version": 2, "consolidated_content": "VERSION: 2"}))
        again = await rs.get_consolidated(scope="session", session_id="s")
        assert again is not None and again.version == 2

    async def test_user_buffer_gathers_every_session(self, reflection_store: ReflectionStore) -> None:
        rs = reflection_store
        for sid in ("s1", "s2"):
            await rs.put_reflection(Reflection(content=f"from {sid}", scope="user", user_id="u1", session_id=sid))
        await rs.put_reflection(Reflection(content="other", scope="user", user_id="u2", session_id="s1"))
        got = await rs.list_reflections(scope="user", user_id="u1")
        assert [r.content for r in got] == ["from s1", "from s2"]

    async def test_consolidation_conflict(self, reflection_store: ReflectionStore) -> None:
        rs = reflection_store
        r = await rs.put_reflection(Reflection(content="likes tea", scope="user", user_id="u1"))
        blob = ConsolidatedMemory(
            scope="user", user_id="u1", consolidated_content="VERSION: 1", word_limit=300, version=1
        )
        await rs.put_consolidated(blob, [r.id], expected_version=0)
        with pytest.raises(ConflictError):  # a second writer that also read version 0 loses
            await rs.put_consolidated(
                blob.model_copy(update={"consolidated_content": "VERSION: 1 b"}), expected_version=0
            )
        got = await rs.get_consolidated(scope="user", user_id="u1")
        assert got is not None and got.consolidated_content == "VERSION: 1"
        await rs.put_consolidated(blob.model_copy(update={"version": 2}), expected_version=1)

    async def test_clear_session_memory(self, reflection_store: ReflectionStore) -> None:
        rs = reflection_store
        await rs.put_reflection(Reflection(content="s", scope="session", user_id="u1", session_id="s1"))
        await rs.put_reflection(Reflection(content="kept", scope="session", user_id="u1", session_id="s2"))
        await rs.put_reflection(Reflection(content="user level", scope="user", user_id="u1", session_id="s1"))
        await rs.put_consolidated(
            ConsolidatedMemory(
                scope="session",
                user_id="u1",
                session_id="s1",
                word_limit=200,
                consolidated_content="VERSION: 1",
                version=1,
            )
        )
        assert await rs.clear_session_memory(agent_id=None, user_id="u1", session_id="s1") == 2
        assert await rs.get_consolidated(scope="session", user_id="u1", session_id="s1") is None
        assert [r.content for r in await rs.list_reflections(scope="session", user_id="u1", session_id="s2")] == [
            "kept"
        ]
        assert len(await rs.list_reflections(scope="user", user_id="u1")) == 1

    async def test_purge_user(self, reflection_store: ReflectionStore) -> None:
        rs = reflection_store
        await rs.put_reflection(Reflection(content="r", scope="user", user_id="u1"))
        await rs.put_reflection(Reflection(content="r2", scope="user", user_id="u2"))
        await rs.put_consolidated(
            ConsolidatedMemory(scope="user", user_id="u1", word_limit=300, consolidated_content="VERSION: 1", version=1)
        )
        assert await rs.purge_user("u1") >= 2
        assert await rs.list_reflections(scope="user", user_id="u1") == []
        assert await rs.get_consolidated(scope="user", user_id="u1") is None
        assert len(await rs.list_reflections(scope="user", user_id="u2")) == 1


# --------------------------------------------------------------------------- scripted LLM

#: One scripted answer: the text, an exception to raise, or a function of the messages.
ScriptedResponse = str | BaseException | Callable[[list[ChatMessage]], str]


class ScriptedLLM:
    """An :class:`~memlane.providers.llm.base.LLM` that answers from a script, for tests.

    Each :meth:`complete` pops the next queued response: a string is returned as the
    completion text, an exception instance is raised, a callable is called with the
    messages and its string returned. When the queue is empty, ``default`` is returned if
    set, else the call fails with ``AssertionError``. Every call (also failing ones) is
    recorded in :attr:`calls` as ``{"messages", "schema", "schema_name", "temperature",
    "max_tokens"}``; usage is estimated with
    :func:`~memlane.providers.llm.base.estimate_tokens`.

    ::

        llm = ScriptedLLM(['{"facts": []}', LLMError("down", retryable=True)])
        llm.push(lambda msgs: '{"bullets": ["%d messages"]}' % len(msgs))
    """

    def __init__(
        self,
        responses: Iterable[ScriptedResponse] = (),
        *,
        name: str = "scripted:test",
        default: str | None = None,
    ) -> None:
        self.name = name
        self.default = default
        self.calls: list[dict[str, Any]] = []
        self.closed = False
        self._queue: deque[ScriptedResponse] = deque(responses)

    def push(self, *responses: ScriptedResponse) -> None:
        """Queue more responses (after those already queued)."""
        self._queue.extend(responses)

    @property
    def pending(self) -> int:
        """How many queued responses are left."""
        return len(self._queue)

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "output",
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
    ) -> Completion:
        sent = [ChatMessage(role=m["role"], content=m["content"]) for m in messages]
        self.calls.append(
            {
                "messages": sent,
                "schema": schema,
                "schema_name": schema_name,
                "temperature": temperature,
                "max_tokens": max_tokens,
            }
        )
        if self._queue:
            response = self._queue.popleft()
        elif self.default is not None:
            response = self.default
        else:
            raise AssertionError("ScriptedLLM: no response queued")
        if isinstance(response, BaseException):
            raise response
        text = response(sent) if callable(response) else response
        usage = Usage(
            prompt_tokens=sum(estimate_tokens(m["content"]) for m in sent),
            completion_tokens=estimate_tokens(text),
            calls=1,
        )
        return Completion(text=text, model=self.name, usage=usage, finish_reason="stop")

    def reset(self) -> None:
        """Forget the queued responses and the recorded calls."""
        self._queue.clear()
        self.calls.clear()

    async def aclose(self) -> None:
        self.closed = True


# --------------------------------------------------------------------------- job store contract
#
# Usage, in a test module:
#
#     class TestMyJobStore(JobStoreContract):
#         @pytest.fixture
#         async def job_store(self, tmp_path):
#             store = MyJobStore(...)
#             yield store
#             await store.close()
#
# Leases here are short (fractions of a second) so the suite stays fast; a store must honour
# sub-second leases.

#: A lease short enough to wait out in a test.
_LEASE = 0.3


async def _until_lease_expires(job_store: JobStore, job_id: str) -> None:
    """Sleep until ``job_id``'s lease is over (a little slack for clock granularity)."""
    job = await job_store.get(job_id)
    assert job is not None
    if job.lease_until is not None:
        left = (job.lease_until - datetime.now(UTC)).total_seconds()
        await asyncio.sleep(max(left, 0.0) + 0.1)
    else:  # a store that does not report the lease: wait a whole one
        await asyncio.sleep(_LEASE + 0.1)


async def _lease_left(job_store: JobStore, job_id: str) -> float:
    """Seconds left on ``job_id``'s lease (a "still leased" assertion is only made with a
    margin, so a slow machine cannot turn it into a false failure)."""
    job = await job_store.get(job_id)
    if job is None or job.lease_until is None:
        return 0.0
    return (job.lease_until - datetime.now(UTC)).total_seconds()


class JobStoreContract:
    """Behaviour every :class:`~memlane.stores.base.JobStore` must have: leased claims, one
    running job per key, retries and attempts, ``failed`` after the last attempt, manual
    retry, lease expiry with resume from checkpoints, heartbeat renewal, coalescing and the
    per-session formation cursors.

    Subclass it in a test module and provide a ``job_store`` fixture yielding a fresh,
    empty store (and closing it afterwards).
    """

    async def test_is_a_job_store(self, job_store: JobStore) -> None:
        assert isinstance(job_store, JobStore)

    # ---- enqueue / get / list
    async def test_enqueue_round_trip(self, job_store: JobStore) -> None:
        before = datetime.now(UTC)
        job = await job_store.enqueue("form", "k", {"a": [1, "x"], "b": None}, user_id="sam", max_attempts=3)
        got = await job_store.get(job.id)
        assert got is not None and got.id == job.id
        assert (got.kind, got.key, got.user_id, got.status) == ("form", "k", "sam", "queued")
        assert got.payload == {"a": [1, "x"], "b": None} and got.state == {} and got.result is None
        assert (got.attempts, got.max_attempts, got.last_error) == (0, 3, None)
        for when in (got.created_at, got.updated_at, got.next_run_at):
            assert when.tzinfo is not None and when.utcoffset() == timedelta(0)
            assert before - timedelta(seconds=5) <= when <= datetime.now(UTC) + timedelta(seconds=5)
        assert await job_store.get("no-such-job") is None

    async def test_list_and_counts(self, job_store: JobStore) -> None:
        a = await job_store.enqueue("form", "k1", {})
        b = await job_store.enqueue("infer", "k2", {})
        claimed = await job_store.claim("w", lease_seconds=30, job_id=b.id)
        assert claimed is not None
        assert {j.id for j in await job_store.list()} == {a.id, b.id}
        assert [j.id for j in await job_store.list(status="queued")] == [a.id]
        assert [j.id for j in await job_store.list(status="running", key="k2")] == [b.id]
        assert await job_store.list(status="running", key="k1") == []
        assert len(await job_store.list(limit=1)) == 1
        assert await job_store.counts() == {"queued": 1, "running": 1}

    # ---- leases
    async def test_claimed_job_is_leased_to_one_worker(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {"n": 1})
        got = await job_store.claim("w1", lease_seconds=30)
        assert got is not None and got.id == job.id and got.status == "running" and got.payload == {"n": 1}
        stored = await job_store.get(job.id)
        assert stored is not None and stored.status == "running" and stored.worker == "w1"
        assert stored.lease_until is not None and stored.lease_until > datetime.now(UTC)
        assert await job_store.claim("w2", lease_seconds=30) is None
        assert await job_store.claim("w2", lease_seconds=30, job_id=job.id) is None

    async def test_concurrent_claims_hand_a_job_to_exactly_one_worker(self, job_store: JobStore) -> None:
        await job_store.enqueue("form", "k", {})
        got = await asyncio.gather(*(job_store.claim(f"w{i}", lease_seconds=30) for i in range(8)))
        assert sum(1 for j in got if j is not None) == 1

    async def test_expired_lease_is_claimable_again_and_resumes_from_checkpoint(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {"turns": 4})
        first = await job_store.claim("w1", lease_seconds=_LEASE)
        assert first is not None
        await job_store.checkpoint(job.id, {"extracted": [{"content": "Sam is vegetarian"}]})
        if await _lease_left(job_store, job.id) > 0.1:
            assert await job_store.claim("w2", lease_seconds=30) is None  # still leased
        await _until_lease_expires(job_store, job.id)  # w1 died: nobody renewed
        second = await job_store.claim("w2", lease_seconds=30)
        assert second is not None and second.id == job.id and second.status == "running"
        assert second.state == {"extracted": [{"content": "Sam is vegetarian"}]}  # resume, not restart
        assert second.attempts == 0  # a lost worker is not a failed attempt
        stored = await job_store.get(job.id)
        assert stored is not None and stored.worker == "w2"
        assert await job_store.claim("w3", lease_seconds=30) is None

    async def test_claim_by_id_takes_an_expired_lease(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {})
        assert await job_store.claim("w1", lease_seconds=_LEASE) is not None
        await _until_lease_expires(job_store, job.id)
        again = await job_store.claim("w2", lease_seconds=30, job_id=job.id)
        assert again is not None and again.id == job.id

    async def test_heartbeat_renewal_keeps_the_lease(self, job_store: JobStore) -> None:
        lease = 1.0
        job = await job_store.enqueue("form", "k", {})
        assert await job_store.claim("w1", lease_seconds=lease) is not None
        for _ in range(5):  # 5 x lease/3 > one whole lease, renewed every third of one
            await asyncio.sleep(lease / 3)
            assert await job_store.renew(job.id, "w1", lease_seconds=lease) is True
            assert await job_store.claim("w2", lease_seconds=30) is None
        stored = await job_store.get(job.id)
        assert stored is not None and stored.status == "running" and stored.worker == "w1"
        assert await job_store.renew(job.id, "w2", lease_seconds=30) is False  # not w2's lease

    async def test_renew_fails_once_the_lease_was_taken_over(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {})
        assert await job_store.claim("w1", lease_seconds=_LEASE) is not None
        await _until_lease_expires(job_store, job.id)
        assert await job_store.claim("w2", lease_seconds=30) is not None
        assert await job_store.renew(job.id, "w1", lease_seconds=30) is False
        assert await job_store.renew(job.id, "w2", lease_seconds=30) is True

    async def test_renew_fails_after_complete_release_or_fail(self, job_store: JobStore) -> None:
        for end in ("complete", "release", "fail"):
            job = await job_store.enqueue("form", f"k-{end}", {})
            assert await job_store.claim("w", lease_seconds=30, job_id=job.id) is not None
            if end == "complete":
                await job_store.complete(job.id, {"ok": True})
            elif end == "release":
                await job_store.release(job.id)
            else:
                await job_store.fail(job.id, "boom", retry_in=60)
            assert await job_store.renew(job.id, "w", lease_seconds=30) is False, end
            assert await job_store.renew("no-such-job", "w", lease_seconds=30) is False

    # ---- one running job per key
    async def test_same_key_jobs_never_run_at_once(self, job_store: JobStore) -> None:
        a = await job_store.enqueue("form", "session-1", {"n": 1})
        b = await job_store.enqueue("form", "session-1", {"n": 2})
        other = await job_store.enqueue("form", "session-2", {"n": 3})
        first = await job_store.claim("w1", lease_seconds=30)
        assert first is not None and first.id == a.id
        second = await job_store.claim("w2", lease_seconds=30)
        assert second is not None and second.id == other.id  # b waits behind a
        assert await job_store.claim("w3", lease_seconds=30) is None
        assert await job_store.claim("w3", lease_seconds=30, job_id=b.id) is None
        await job_store.complete(a.id, {})
        third = await job_store.claim("w3", lease_seconds=30)
        assert third is not None and third.id == b.id

    async def test_same_key_job_runs_once_the_holder_lease_expires(self, job_store: JobStore) -> None:
        a = await job_store.enqueue("form", "k", {})
        b = await job_store.enqueue("form", "k", {})
        assert (await job_store.claim("w1", lease_seconds=_LEASE, job_id=a.id)) is not None
        if await _lease_left(job_store, a.id) > 0.1:
            assert await job_store.claim("w2", lease_seconds=30, job_id=b.id) is None
        await _until_lease_expires(job_store, a.id)
        got = await job_store.claim("w2", lease_seconds=30, job_id=b.id)
        assert got is not None and got.id == b.id
        assert await job_store.claim("w3", lease_seconds=30, job_id=a.id) is None  # b now holds the key

    # ---- completion, failures, retries
    async def test_complete_stores_the_result(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {})
        assert await job_store.claim("w", lease_seconds=30) is not None
        await job_store.complete(job.id, {"facts": ["Sam is vegetarian"]})
        done = await job_store.get(job.id)
        assert done is not None and done.status == "done" and done.result == {"facts": ["Sam is vegetarian"]}
        assert await job_store.claim("w", lease_seconds=30) is None

    async def test_fail_with_retry_in_schedules_a_retry(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {}, max_attempts=5)
        assert await job_store.claim("w", lease_seconds=30) is not None
        failed = await job_store.fail(job.id, "LLMError: 503", retry_in=_LEASE)
        assert failed.status == "queued" and failed.attempts == 1 and failed.last_error == "LLMError: 503"
        assert failed.next_run_at > datetime.now(UTC) - timedelta(seconds=0.1)
        if (failed.next_run_at - datetime.now(UTC)).total_seconds() > 0.1:
            assert await job_store.claim("w", lease_seconds=30) is None  # not due yet
        due = await job_store.next_due()
        assert due is not None and abs((due - failed.next_run_at).total_seconds()) < 0.01
        await asyncio.sleep(_LEASE + 0.1)
        again = await job_store.claim("w", lease_seconds=30)
        assert again is not None and again.id == job.id and again.attempts == 1
        failed = await job_store.fail(job.id, "LLMError: 503", retry_in=0)
        assert failed.attempts == 2 and failed.status == "queued"

    async def test_max_attempts_marks_the_job_failed(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {}, max_attempts=2)
        for attempt in (1, 2):
            assert await job_store.claim("w", lease_seconds=30) is not None
            failed = await job_store.fail(job.id, f"boom {attempt}", retry_in=0)
            assert failed.attempts == attempt
        assert failed.status == "failed" and failed.last_error == "boom 2"
        assert await job_store.claim("w", lease_seconds=30) is None
        assert await job_store.claim("w", lease_seconds=30, job_id=job.id) is None

    async def test_fail_without_retry_is_permanent(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {}, max_attempts=8)
        assert await job_store.claim("w", lease_seconds=30) is not None
        failed = await job_store.fail(job.id, "TypeError: bug", retry_in=None)
        assert failed.status == "failed" and failed.attempts == 1
        assert await job_store.claim("w", lease_seconds=30) is None

    async def test_retry_of_a_failed_job(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {"keep": "me"}, max_attempts=1)
        assert await job_store.claim("w", lease_seconds=30) is not None
        await job_store.checkpoint(job.id, {"extracted": []})
        assert (await job_store.fail(job.id, "boom", retry_in=0)).status == "failed"
        retried = await job_store.retry(job.id)
        assert retried.status == "queued" and retried.attempts == 0 and retried.payload == {"keep": "me"}
        got = await job_store.claim("w", lease_seconds=30)
        assert got is not None and got.id == job.id and got.state == {"extracted": []}

    async def test_release_gives_the_job_back_without_an_attempt(self, job_store: JobStore) -> None:
        job = await job_store.enqueue("form", "k", {})
        assert await job_store.claim("w1", lease_seconds=30) is not None
        await job_store.release(job.id)
        released = await job_store.get(job.id)
        assert released is not None and released.status == "queued" and released.attempts == 0
        again = await job_store.claim("w2", lease_seconds=30)
        assert again is not None and again.id == job.id

    async def test_unknown_job_raises_not_found(self, job_store: JobStore) -> None:
        with pytest.raises(NotFoundError):
            await job_store.fail("no-such-job", "x", retry_in=0)
        with pytest.raises(NotFoundError):
            await job_store.retry("no-such-job")

    async def test_next_due(self, job_store: JobStore) -> None:
        assert await job_store.next_due() is None
        job = await job_store.enqueue("form", "k", {})
        due = await job_store.next_due()
        assert due is not None and due <= datetime.now(UTC)
        assert await job_store.claim("w", lease_seconds=30) is not None
        due = await job_store.next_due()  # a running job is due again when its lease runs out
        assert due is not None and due > datetime.now(UTC) + timedelta(seconds=20)
        await job_store.complete(job.id, {})
        assert await job_store.next_due() is None

    # ---- coalescing
    async def test_coalesce_merges_into_a_waiting_job(self, job_store: JobStore) -> None:
        a = await job_store.enqueue("form", "k", {"reason": "trigger", "upto": "e1"}, coalesce=True)
        b = await job_store.enqueue("form", "k", {"upto": "e2"}, coalesce=True)
        assert b.id == a.id and b.payload == {"reason": "trigger", "upto": "e2"}
        assert len(await job_store.list(key="k")) == 1
        other_kind = await job_store.enqueue("infer", "k", {}, coalesce=True)
        assert other_kind.id != a.id
        plain = await job_store.enqueue("form", "k", {"reason": "manual"})
        assert plain.id != a.id  # without coalesce every call is its own job

    async def test_coalesce_never_merges_into_a_started_job(self, job_store: JobStore) -> None:
        a = await job_store.enqueue("form", "k", {"upto": "e1"}, coalesce=True)
        assert await job_store.claim("w", lease_seconds=30) is not None
        b = await job_store.enqueue("form", "k", {"upto": "e2"}, coalesce=True)
        assert b.id != a.id
        await job_store.checkpoint(b.id, {"extracted": []})  # b has begun (replay state)
        c = await job_store.enqueue("form", "k", {"upto": "e3"}, coalesce=True)
        assert c.id not in (a.id, b.id)
        running = await job_store.get(a.id)
        assert running is not None and running.payload == {"upto": "e1"}

    # ---- formation cursors
    async def test_cursor_counters_and_activity(self, job_store: JobStore) -> None:
        assert await job_store.get_cursor("app", "s") is None
        c = await job_store.touch("app", "s", user_ids=["sam"], agent_id="bot", tier=1, messages=1, tokens=2.5)
        assert (c.pending_messages, c.pending_tokens, c.tier, c.agent_id, c.user_ids) == (1, 2.5, 1, "bot", ["sam"])
        c = await job_store.touch("app", "s", user_ids=["sam"], agent_id=None, tier=None, messages=2, tokens=1.0)
        assert (c.pending_messages, c.pending_tokens, c.tier, c.agent_id) == (3, 3.5, 1, "bot")
        assert c.last_activity_at.tzinfo is not None
        await job_store.reset_pending("app", "s")
        await job_store.advance("app", "s", last_event_id="e9", formed=3)
        got = await job_store.get_cursor("app", "s")
        assert got is not None and (got.pending_messages, got.pending_tokens) == (0, 0)
        assert got.last_event_id == "e9" and got.formed_events == 3 and got.last_formed_at is not None
        assert await job_store.get_cursor("other-app", "s") is None
        await job_store.delete_cursor("app", "s")
        assert await job_store.get_cursor("app", "s") is None

    async def test_advance_without_activity_creates_the_cursor(self, job_store: JobStore) -> None:
        """Events written straight to a session store never touched the cursor: forming them
        must still record how far formation got."""
        await job_store.advance("app", "raw", last_event_id="e5", formed=5)
        got = await job_store.get_cursor("app", "raw")
        assert got is not None and got.last_event_id == "e5" and got.formed_events == 5
        await job_store.advance("app", "raw", last_event_id="e7", formed=2)
        again = await job_store.get_cursor("app", "raw")
        assert again is not None and (again.last_event_id, again.formed_events) == ("e7", 7)

    async def test_idle_cursors(self, job_store: JobStore) -> None:
        await job_store.touch("app", "old", user_ids=["a"], agent_id=None, tier=None, messages=1, tokens=1)
        await asyncio.sleep(0.05)
        cut = datetime.now(UTC)
        await asyncio.sleep(0.05)
        await job_store.touch("app", "new", user_ids=["b"], agent_id=None, tier=None, messages=1, tokens=1)
        assert [c.session_id for c in await job_store.idle_cursors(cut)] == ["old"]
        assert {c.session_id for c in await job_store.idle_cursors(datetime.now(UTC) + timedelta(seconds=1))} == {
            "old",
            "new",
        }

    async def test_purge_user(self, job_store: JobStore) -> None:
        mine = await job_store.enqueue("infer", "k1", {}, user_id="sam")
        theirs = await job_store.enqueue("infer", "k2", {}, user_id="ann")
        await job_store.touch("app", "solo", user_ids=["sam"], agent_id=None, tier=None, messages=1, tokens=1)
        await job_store.touch("app", "group", user_ids=["sam", "ann"], agent_id=None, tier=None, messages=1, tokens=1)
        assert await job_store.purge_user("sam") >= 2
        assert await job_store.get(mine.id) is None and await job_store.get(theirs.id) is not None
        assert await job_store.get_cursor("app", "solo") is None
        assert await job_store.get_cursor("app", "group") is not None

    async def test_purge_user_keeping_cursors(self, job_store: JobStore) -> None:
        """``cursors=False`` (``forget(sessions=False)``: the user's sessions stay): the user's jobs go,
        the formation cursors of their sessions stay as they were, so turns already formed are not
        formed again."""
        mine = await job_store.enqueue("infer", "k1", {}, user_id="sam")
        theirs = await job_store.enqueue("infer", "k2", {}, user_id="ann")
        await job_store.touch("app", "solo", user_ids=["sam"], agent_id=None, tier=None, messages=5, tokens=4)
        await job_store.advance("app", "solo", last_event_id="e3", formed=3)
        await job_store.touch("app", "group", user_ids=["sam", "ann"], agent_id=None, tier=None, messages=1, tokens=1)
        assert await job_store.purge_user("sam", cursors=False) >= 1
        assert await job_store.get(mine.id) is None and await job_store.get(theirs.id) is not None
        solo = await job_store.get_cursor("app", "solo")
        assert solo is not None and (solo.last_event_id, solo.formed_events) == ("e3", 3)
        assert solo.user_ids == ["sam"]
        assert await job_store.get_cursor("app", "group") is not None
        await job_store.purge_user("sam")  # the default still removes them
        assert await job_store.get_cursor("app", "solo") is None


# --------------------------------------------------------------------------- context cache contract


class ContextCacheContract:
    """Behaviour every :class:`~memlane.stores.base.ContextCache` must show (fixture ``context_cache``)."""

    async def test_roundtrip_replace_and_drop(self, context_cache: ContextCache) -> None:
        cc = context_cache
        now = utcnow()
        assert await cc.get_context("k1") is None
        a = CachedContext("k1", "s1", "<MemoryContext>a</MemoryContext>", now, user_id="u1", session_id="s")
        await cc.put_context(a)
        assert await cc.get_context("k1") == a
        b = CachedContext("k1", "s2", "b", now, user_id="u1", session_id="s")
        await cc.put_context(b)
        assert await cc.get_context("k1") == b
        await cc.put_context(CachedContext("k2", "s", "u2 text", now, user_id="u2", session_id="s"))
        await cc.put_context(CachedContext("k3", "s", "u1 other", now, user_id="u1", session_id="t"))
        await cc.put_context(CachedContext("k4", "s", "agent", now, agent_id="x"))
        assert await cc.drop_contexts(user_id="u1", session_id="s") == 1
        assert await cc.get_context("k1") is None and await cc.get_context("k3") is not None
        assert await cc.drop_contexts(user_id="u2") == 1
        assert await cc.drop_contexts() == 2
        assert await cc.get_context("k4") is None
