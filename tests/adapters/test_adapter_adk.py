"""memlane as Google ADK's memory and session services, tested with the real ``google-adk``:
a ``Runner`` whose ``LlmAgent`` runs on a scripted ``BaseLlm`` (no network) recalls across
sessions through ADK's own ``load_memory`` and ``preload_memory`` tools, with sessions in a
real SQLite file reopened between sessions; every service method, bad input and isolation."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.events.event_actions import EventActions
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session as AdkSession
from google.adk.tools import load_memory, preload_memory
from google.genai import types

from adk_helpers import APP, ScriptedModel, request_text, run_turn, runner_for, text
from memlane import AsyncMemory, Event, EventType, InvalidInputError, Memory, NotFoundError, ScopeError, Session
from memlane.adapters.adk import (
    ADK_EVENT_KEY,
    AdkSessionExistsError,
    AdkSessionNotFoundError,
    MemlaneMemoryService,
    MemlaneSessionService,
    from_adk_event,
    memlane_session_key,
    to_adk_event,
)

FACT = "My favourite drink is oolong tea"


# --------------------------------------------------------------------------- helpers


def call(name: str, **args: Any) -> types.Content:
    return types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args))])


def open_memory(path: Path) -> AsyncMemory:
    return AsyncMemory(path, embedder="hash:64")


def tool_responses(events: list[AdkEvent], name: str) -> list[dict[str, Any]]:
    """The responses of tool ``name`` in ``events``, as the JSON an ADK event serialises to."""
    out = []
    for e in events:
        for part in json.loads(e.model_dump_json(exclude_none=True)).get("content", {}).get("parts", []):
            response = part.get("function_response")
            if response and response["name"] == name:
                out.append(response["response"])
    return out


async def remember_session(path: Path, user_id: str, session_id: str, message: str, app: str = APP) -> None:
    """One conversation through a Runner, then ingested with add_session_to_memory; memlane closed."""
    async with open_memory(path) as memory:
        runner = runner_for(memory, ScriptedModel(replies=[text("Noted.", role="model")]), [], app=app)
        await runner.session_service.create_session(app_name=app, user_id=user_id, session_id=session_id)
        await run_turn(runner, user_id, session_id, message)
        session = await runner.session_service.get_session(app_name=app, user_id=user_id, session_id=session_id)
        assert session is not None and [e.author for e in session.events] == ["user", "concierge"]
        assert runner.memory_service is not None
        await runner.memory_service.add_session_to_memory(session)


async def recall_with_load_memory(path: Path, user_id: str, session_id: str, app: str = APP) -> dict[str, Any]:
    """A new session whose scripted model calls ADK's load_memory; returns the tool's response."""
    async with open_memory(path) as memory:
        model = ScriptedModel(replies=[call("load_memory", query="favourite drink"), text("Oolong.", role="model")])
        runner = runner_for(memory, model, [load_memory], app=app)
        await runner.session_service.create_session(app_name=app, user_id=user_id, session_id=session_id)
        events = await run_turn(runner, user_id, session_id, "What do I like to drink?")
        [response] = tool_responses(events, "load_memory")
        # The model saw the same response on its second call.
        assert len(model.requests) == 2
        seen = [AdkEvent(author="x", content=c) for c in model.requests[1].contents]
        assert tool_responses(seen, "load_memory") == [response]
        result: dict[str, Any] = response["result"]  # ADK wraps a tool's non-dict return value
        return result


@pytest.fixture
async def memory(db_path: Path) -> AsyncIterator[AsyncMemory]:
    async with open_memory(db_path) as m:
        yield m


@pytest.fixture
def memories(memory: AsyncMemory) -> MemlaneMemoryService:
    return MemlaneMemoryService(memory)


@pytest.fixture
def sessions(memory: AsyncMemory) -> MemlaneSessionService:
    return MemlaneSessionService(memory)


def adk_event(author: str, body: str, role: str | None = None, ts: float | None = None, **kw: Any) -> AdkEvent:
    role = role or ("user" if author == "user" else "model")
    extra: dict[str, Any] = {"timestamp": ts} if ts is not None else {}
    return AdkEvent(author=author, invocation_id="inv", content=text(body, role=role), **extra, **kw)


def texts(response: SearchMemoryResponse) -> list[str]:
    return [p.text or "" for m in response.memories for p in m.content.parts or []]


# --------------------------------------------------------------------------- Runner end to end


async def test_runner_recalls_across_sessions_with_load_memory(db_path: Path) -> None:
    await remember_session(db_path, "alice", "s1", FACT)
    response = await recall_with_load_memory(db_path, "alice", "s2")
    contents = [m["content"]["parts"][0]["text"] for m in response["memories"]]
    assert FACT in contents
    [entry] = [m for m in response["memories"] if m["content"]["parts"][0]["text"] == FACT]
    assert entry["author"] == "user" and entry["timestamp"].endswith("+00:00") and entry["id"]
    # Both sessions are durable in the SQLite file: a fresh memlane sees them whole.
    async with open_memory(db_path) as memory:
        svc = MemlaneSessionService(memory)
        s1 = await svc.get_session(app_name=APP, user_id="alice", session_id="s1")
        s2 = await svc.get_session(app_name=APP, user_id="alice", session_id="s2")
        assert s1 is not None and s2 is not None
        assert [e.author for e in s1.events] == ["user", "concierge"]
        assert s1.events[0].content == text(FACT)
        # s2: user message, the load_memory call, its response, the final answer
        kinds = [e.type for e in await memory.sessions.get_events(memlane_session_key("alice", "s2"), app=APP)]
        assert kinds == [EventType.USER_MESSAGE, EventType.TOOL_CALL, EventType.TOOL_RESULT, EventType.AGENT_RESPONSE]


async def test_runner_preload_memory_puts_the_fact_in_the_model_request(db_path: Path) -> None:
    await remember_session(db_path, "alice", "s1", FACT)
    async with open_memory(db_path) as memory:
        model = ScriptedModel(replies=[text("Oolong tea, as usual?", role="model")])
        runner = runner_for(memory, model, [preload_memory])
        await runner.session_service.create_session(app_name=APP, user_id="alice", session_id="s2")
        await run_turn(runner, "alice", "s2", "Which drink should I order tonight?")
        [request] = model.requests
        assert "preload_memory" not in (request.tools_dict or {})  # passive: never offered to the model
        seen = request_text(request)
        assert "<PAST_CONVERSATIONS>" in seen and f"user: {FACT}" in seen


async def test_runner_load_memory_never_crosses_users_or_apps(db_path: Path) -> None:
    await remember_session(db_path, "alice", "a1", FACT)
    await remember_session(db_path, "bob", "b1", "My favourite drink is black coffee")
    await remember_session(db_path, "alice", "x1", "My favourite drink in the other app is lemonade", app="other")
    bob = await recall_with_load_memory(db_path, "bob", "b2")
    bob_texts = [m["content"]["parts"][0]["text"] for m in bob["memories"]]
    assert "My favourite drink is black coffee" in bob_texts
    assert not any("oolong" in t or "lemonade" in t for t in bob_texts)
    alice_other = await recall_with_load_memory(db_path, "alice", "x2", app="other")
    other_texts = [m["content"]["parts"][0]["text"] for m in alice_other["memories"]]
    assert "My favourite drink in the other app is lemonade" in other_texts
    assert not any("oolong" in t or "coffee" in t for t in other_texts)
    carol = await recall_with_load_memory(db_path, "carol", "c1")
    assert carol["memories"] == []


async def test_runner_state_deltas_persist_across_reopen(db_path: Path) -> None:
    async with open_memory(db_path) as memory:
        svc = MemlaneSessionService(memory)
        agent = LlmAgent(name="concierge", model=ScriptedModel(replies=[text("Hi!", role="model")]), output_key="last")
        runner = Runner(app_name=APP, agent=agent, session_service=svc)
        await svc.create_session(app_name=APP, user_id="alice", session_id="s1")
        events = [
            e
            async for e in runner.run_async(
                user_id="alice",
                session_id="s1",
                new_message=text("hello"),
                state_delta={"user:lang": "fr", "app:motd": "welcome", "temp:scratch": 1, "topic": "tea"},
            )
        ]
        assert events
    async with open_memory(db_path) as memory:
        session = await MemlaneSessionService(memory).get_session(app_name=APP, user_id="alice", session_id="s1")
        assert session is not None
        assert session.state == {"topic": "tea", "last": "Hi!", "user:lang": "fr", "app:motd": "welcome"}


# --------------------------------------------------------------------------- memory service


async def test_add_session_to_memory_keeps_author_and_timestamp(
    memories: MemlaneMemoryService, memory: AsyncMemory
) -> None:
    session = AdkSession(
        id="trip-1",
        app_name="hotel",
        user_id="alice",
        events=[
            adk_event("user", "I prefer rooms on high floors", ts=1_709_283_600.5),
            AdkEvent(author="booker", content=call("book", room=12)),
            AdkEvent(
                author="concierge", content=types.Content(role="model", parts=[types.Part(text="hmm", thought=True)])
            ),
            adk_event("concierge", "Noted: high floors."),
        ],
    )
    await memories.add_session_to_memory(session)
    await memories.add_session_to_memory(session)  # again: nothing stored twice
    page = await memory.list(user_id="alice", agent_id="hotel")
    assert sorted(f.content for f in page.items) == ["I prefer rooms on high floors", "Noted: high floors."]
    resp = await memories.search_memory(app_name="hotel", user_id="alice", query="which floor does she like")
    top = resp.memories[0]
    assert texts(resp)[0] == "I prefer rooms on high floors"
    assert top.author == "user" and top.content.role == "user"
    assert top.timestamp == "2024-03-01T09:00:00.500000+00:00"
    agent_entry = next(m for m in resp.memories if m.author == "concierge")
    assert agent_entry.content.role == "model"
    assert (await memories.search_memory(app_name="other-app", user_id="alice", query="floors")).memories == []
    assert (await memories.search_memory(app_name="hotel", user_id="bob", query="floors")).memories == []
    assert (await memories.search_memory(app_name="default", user_id="alice", query="floors")).memories == []


async def test_add_session_to_memory_accepts_memlane_sessions(
    memories: MemlaneMemoryService, memory: AsyncMemory
) -> None:
    one = Session(id="m1", app="hotel", user_ids=["alice"], events=[Event(content="Alice likes quiet rooms")])
    await memories.add_session_to_memory(one)
    assert texts(await memories.search_memory(app_name="hotel", user_id="alice", query="quiet rooms")) == [
        "Alice likes quiet rooms"
    ]
    group = Session(id="g", app="club", user_ids=["a", "b"], events=[Event(content="Meeting moved to Friday")])
    await memories.add_session_to_memory(group)
    assert (await memory.search("meeting", user_id="a")).hits == []  # not in a's own memory
    for user in ("a", "b", "c"):  # the app's shared memory: every user of the app reads it
        assert texts(await memories.search_memory(app_name="club", user_id=user, query="meeting")) == [
            "Meeting moved to Friday"
        ]
    with pytest.raises(ScopeError, match="app name"):
        await memories.add_session_to_memory(Session(id="g2", user_ids=["a", "b"], events=[Event(content="x y")]))


async def test_add_events_to_memory_stores_the_delta_with_metadata(
    memories: MemlaneMemoryService, memory: AsyncMemory
) -> None:
    events = [
        adk_event("user", "Book the Lisbon trip for May"),
        adk_event("concierge", "partial text", partial=True),
        AdkEvent(author="booker", content=call("book", city="Lisbon")),
    ]
    await memories.add_events_to_memory(
        app_name="travel", user_id="alice", events=events, session_id="t1", custom_metadata={"source": "web"}
    )
    [fact] = (await memory.list(user_id="alice", agent_id="travel")).items
    assert fact.content == "Book the Lisbon trip for May" and fact.session_id == "t1"
    assert fact.metadata["source"] == "web" and fact.source_event_ids == [events[0].id]
    [entry] = (await memories.search_memory(app_name="travel", user_id="alice", query="Lisbon")).memories
    assert entry.custom_metadata == {"source": "web"} and entry.id == fact.id


async def test_add_memory_writes_verbatim_and_checks_every_entry_first(
    memories: MemlaneMemoryService, memory: AsyncMemory
) -> None:
    good = MemoryEntry(
        content=text("Alice's passport expires in 2031"), author="alice", timestamp="2024-05-01T09:30:00Z"
    )
    bad = MemoryEntry(content=types.Content(role="user", parts=[]))
    with pytest.raises(InvalidInputError, match=r"memories\[1\]"):
        await memories.add_memory(app_name="travel", user_id="alice", memories=[good, bad])
    assert (await memory.list(user_id="alice")).total == 0  # nothing written
    await memories.add_memory(app_name="travel", user_id="alice", memories=[good], custom_metadata={"via": "tool"})
    [entry] = (await memories.search_memory(app_name="travel", user_id="alice", query="passport")).memories
    assert texts(SearchMemoryResponse(memories=[entry])) == ["Alice's passport expires in 2031"]
    assert entry.author == "alice" and entry.timestamp == "2024-05-01T09:30:00+00:00"
    assert entry.custom_metadata == {"via": "tool"}
    [fact] = (await memory.list(user_id="alice", agent_id="travel")).items
    assert fact.kind == "fact"


async def test_delete_memory_only_the_users_own(memories: MemlaneMemoryService, memory: AsyncMemory) -> None:
    await memories.add_events_to_memory(
        app_name="hotel", user_id="alice", events=[adk_event("user", "Alice owns a red kayak")]
    )
    await memories.add_session_to_memory(
        Session(id="g", app="hotel", user_ids=["alice", "bob"], events=[Event(content="The pool closes at nine")])
    )
    [mine] = (await memories.search_memory(app_name="hotel", user_id="alice", query="kayak")).memories
    [shared] = (await memories.search_memory(app_name="hotel", user_id="alice", query="pool")).memories
    assert mine.id and shared.id
    with pytest.raises(NotFoundError):  # bob cannot delete alice's memory
        await memories.delete_memory(app_name="hotel", user_id="bob", memory_id=mine.id)
    with pytest.raises(NotFoundError):  # nor can alice from another app
        await memories.delete_memory(app_name="other", user_id="alice", memory_id=mine.id)
    with pytest.raises(NotFoundError):  # nor the app's shared memory
        await memories.delete_memory(app_name="hotel", user_id="alice", memory_id=shared.id)
    with pytest.raises(InvalidInputError, match="memory_id"):
        await memories.delete_memory(app_name="hotel", user_id="alice")
    assert len((await memories.search_memory(app_name="hotel", user_id="alice", query="kayak")).memories) == 1
    assert len((await memories.search_memory(app_name="hotel", user_id="bob", query="pool")).memories) == 1
    await memories.delete_memory(app_name="hotel", user_id="alice", memory_id=mine.id)
    assert (await memories.search_memory(app_name="hotel", user_id="alice", query="kayak")).memories == []


async def test_memory_service_bad_input_is_rejected(memories: MemlaneMemoryService, memory: AsyncMemory) -> None:
    cases: list[tuple[Any, str]] = [
        (memories.search_memory(app_name="", user_id="alice", query="x"), "app_name"),
        (memories.search_memory(app_name="hotel", user_id=" ", query="x"), "user_id"),
        (memories.search_memory(app_name="hotel", user_id="alice", query=42), "query"),  # type: ignore[arg-type]
        (memories.search_memory(app_name="hotel", user_id="alice", query="x" * 200_000), "characters"),
        (memories.add_session_to_memory({"id": "s"}), "Session"),  # type: ignore[arg-type]
        (memories.add_events_to_memory(app_name="a", user_id="u", events="hello"), "events"),  # type: ignore[arg-type]
        (memories.add_events_to_memory(app_name="a", user_id="u", events=[{"text": "x"}]), r"events\[0\]"),  # type: ignore[list-item]
        (
            memories.add_events_to_memory(
                app_name="a", user_id="u", events=[adk_event("user", "x y")], custom_metadata={"f": object()}
            ),
            "custom_metadata",
        ),
        (memories.add_memory(app_name="a", user_id="u", memories=["text"]), r"memories\[0\]"),  # type: ignore[list-item]
        (
            memories.add_memory(app_name="a", user_id="u", memories=[MemoryEntry(content=text("x"), timestamp="soon")]),
            "timestamp",
        ),
        (memories.delete_memory(app_name="a", user_id="u", memory_id=""), "memory_id"),
    ]
    for coro, match in cases:
        with pytest.raises(InvalidInputError, match=match):
            await coro
    assert (await memory.stats()).facts == 0
    assert (await memories.search_memory(app_name="hotel", user_id="alice", query="   ")).memories == []
    with pytest.raises(InvalidInputError, match="AsyncMemory or Memory"):
        MemlaneMemoryService("agent.db")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="top_k"):
        MemlaneMemoryService(memory, top_k=0)


async def test_top_k_caps_results(memory: AsyncMemory) -> None:
    svc = MemlaneMemoryService(memory, top_k=2)
    events = [adk_event("user", f"Tea note number {i}") for i in range(5)]
    await svc.add_events_to_memory(app_name="default", user_id="alice", events=events)
    assert len((await svc.search_memory(app_name="default", user_id="alice", query="tea note")).memories) == 2


async def test_top_k_defaults_to_the_engines_recall_limit(memory: AsyncMemory) -> None:
    """Gaia's ``memory.recall_limit`` (5) bounds what ADK's ``load_memory`` gets through
    ``search_memory``; the engine's RecallConfig (the settings) changes it, read on each search."""
    from memlane import RecallConfig

    svc = MemlaneMemoryService(memory)
    events = [adk_event("user", f"Tea note number {i}") for i in range(8)]
    await svc.add_events_to_memory(app_name="default", user_id="alice", events=events)

    async def found() -> int:
        return len((await svc.search_memory(app_name="default", user_id="alice", query="tea note")).memories)

    assert svc.top_k == 5 and await found() == 5
    default = memory.recall_config
    memory.recall_config = RecallConfig(recall_limit=2)  # what MEMLANE_RECALL_LIMIT=2 builds
    try:
        assert svc.top_k == 2 and await found() == 2
    finally:
        memory.recall_config = default
    assert MemlaneMemoryService(memory, top_k=7).top_k == 7


async def test_sync_memory_drives_the_services_from_another_loop(tmp_path: Path) -> None:
    with Memory(tmp_path / "sync.db", embedder="hash:64") as m:
        memories, sessions = MemlaneMemoryService(m), MemlaneSessionService(m)
        assert memories.memory is m.engine and sessions.memory is m.engine
        await sessions.create_session(app_name=APP, user_id="alice", session_id="s")
        session = await sessions.get_session(app_name=APP, user_id="alice", session_id="s")
        assert session is not None
        await sessions.append_event(session, adk_event("user", FACT))
        await memories.add_session_to_memory(session)
        threads: list[str] = []
        search = m.engine.search

        async def spy(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return await search(*args, **kwargs)

        m.engine.search = spy  # type: ignore[method-assign]
        assert texts(await memories.search_memory(app_name=APP, user_id="alice", query="drink")) == [FACT]
        assert threads == ["memlane-loop"]  # the engine ran on its own loop thread, not on this test's loop
        assert m.search("drink", user_id="alice", agent_id=APP).hits[0].fact.content == FACT


WORDS = ["red", "green", "blue", "apple", "pear", "train", "boat", "cat"]
USERS = ["alice", "bob", "a|b", "a%7Cb"]
APPS = ["default", "hotel", "x|y", "x%7Cy"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(USERS), st.sampled_from(APPS), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(APPS), st.sampled_from(WORDS)), min_size=1, max_size=6),
)
def test_search_memory_never_crosses_user_or_app(
    writes: list[tuple[str, str, list[str]]], reads: list[tuple[str, str, str]]
) -> None:
    async def scenario(path: Path) -> None:
        async with AsyncMemory(path, embedder="hash:64", sessions="local") as m:
            svc = MemlaneMemoryService(m, top_k=100)
            owner: dict[str, tuple[str, str]] = {}
            for i, (user, app, words) in enumerate(writes):
                event = adk_event("user", " ".join(words), ts=1_700_000_000.0 + i)
                await svc.add_events_to_memory(app_name=app, user_id=user, events=[event], session_id=f"s{i}")
                for f in (await m.list(user_id=user, limit=1000)).items:
                    owner.setdefault(f.id, (user, app))
            for user, app, q in reads:
                found = await svc.search_memory(app_name=app, user_id=user, query=q)
                assert all(owner[e.id or ""] == (user, app) for e in found.memories)
                expected = {(u, a) for u, a, ws in writes if q in ws}
                assert bool(found.memories) == ((user, app) in expected)

    with tempfile.TemporaryDirectory() as d:
        asyncio.run(scenario(Path(d) / "iso.db"))


# --------------------------------------------------------------------------- session service


async def test_create_session_splits_state_and_rejects_duplicates(
    sessions: MemlaneSessionService, memory: AsyncMemory
) -> None:
    created = await sessions.create_session(
        app_name=APP,
        user_id="alice",
        session_id="s1",
        state={"topic": "tea", "user:lang": "fr", "app:motd": "hi", "temp:x": 1},
    )
    assert created.id == "s1" and created.app_name == APP and created.user_id == "alice" and created.events == []
    assert created.state == {"topic": "tea", "user:lang": "fr", "app:motd": "hi"}
    assert await sessions.memlane_session_id(app_name=APP, user_id="alice", session_id="s1") == "alice/s1"
    stored = await memory.sessions.get_session("alice/s1", app=APP)
    assert stored is not None and stored.user_ids == ["alice"] and stored.state == {"topic": "tea"}
    # The id is taken for this user in this app: both errors at once, nothing changed.
    with pytest.raises(AdkSessionExistsError, match="already exists") as err:
        await sessions.create_session(app_name=APP, user_id="alice", session_id="s1", state={"user:lang": "de"})
    assert isinstance(err.value, AlreadyExistsError) and isinstance(err.value, InvalidInputError)
    assert await sessions.get_user_state(app_name=APP, user_id="alice") == {"lang": "fr"}
    # Another user of the app may use the same id (ADK keys sessions by app, user and id).
    assert (await sessions.create_session(app_name=APP, user_id="bob", session_id="s1")).id == "s1"
    # Another app is another namespace; a blank id is generated (ADK).
    assert (await sessions.create_session(app_name="other", user_id="bob", session_id="s1")).id == "s1"
    generated = await sessions.create_session(app_name=APP, user_id="bob", session_id="  ")
    assert generated.id.strip() and generated.id != "s1"
    # app: state is the app's, shared by its users; user: state is not.
    bob = await sessions.get_session(app_name=APP, user_id="bob", session_id=generated.id)
    assert bob is not None and bob.state == {"app:motd": "hi"}


async def test_session_service_bad_input_changes_nothing(sessions: MemlaneSessionService, memory: AsyncMemory) -> None:
    cases: list[tuple[Any, str]] = [
        (sessions.create_session(app_name="", user_id="u"), "app_name"),
        (sessions.create_session(app_name=APP, user_id=None), "user_id"),  # type: ignore[arg-type]
        (sessions.create_session(app_name=APP, user_id="u", session_id="memlane-adk:app-state"), "reserved"),
        (sessions.create_session(app_name=APP, user_id="u", state=["a"]), "state"),  # type: ignore[arg-type]
        (sessions.create_session(app_name=APP, user_id="u", session_id="s", state={"k": object()}), "session state"),
        (sessions.create_session(app_name=APP, user_id="u", session_id="s", state={"user:k": {1, 2}}), "user state"),
        (sessions.create_session(app_name=APP, user_id="u", session_id="s", state={1: "x"}), "keys"),  # type: ignore[dict-item]
        (sessions.get_session(app_name=APP, user_id="u", session_id=""), "session_id"),
        (sessions.get_session(app_name=APP, user_id="u", session_id="s", config={"n": 1}), "GetSessionConfig"),  # type: ignore[arg-type]
        (sessions.list_sessions(app_name=" "), "app_name"),
        (sessions.delete_session(app_name=APP, user_id="", session_id="s"), "user_id"),
        (sessions.get_user_state(app_name=APP, user_id=3), "user_id"),  # type: ignore[arg-type]
    ]
    for coro, match in cases:
        with pytest.raises(InvalidInputError, match=match):
            await coro
    assert await memory.sessions.list_sessions(app=APP) == []
    with pytest.raises(InvalidInputError, match="AsyncMemory or Memory"):
        MemlaneSessionService(None)  # type: ignore[arg-type]


async def test_get_session_config_and_ownership(sessions: MemlaneSessionService) -> None:
    session = await sessions.create_session(app_name=APP, user_id="alice", session_id="s")
    for i in range(5):
        await sessions.append_event(session, adk_event("user", f"message {i}", ts=1000.0 + i))
    full = await sessions.get_session(app_name=APP, user_id="alice", session_id="s")
    assert full is not None and [e.timestamp for e in full.events] == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]
    assert full.events == session.events

    async def window(**kw: Any) -> list[float]:
        got = await sessions.get_session(app_name=APP, user_id="alice", session_id="s", config=GetSessionConfig(**kw))
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await window(num_recent_events=2) == [1003.0, 1004.0]
    assert await window(num_recent_events=0) == []
    assert await window(after_timestamp=1002.0) == [1002.0, 1003.0, 1004.0]
    assert await window(after_timestamp=1001.5, num_recent_events=1) == [1004.0]
    assert await sessions.get_session(app_name=APP, user_id="bob", session_id="s") is None
    assert await sessions.get_session(app_name="other", user_id="alice", session_id="s") is None
    assert await sessions.get_session(app_name=APP, user_id="alice", session_id="nope") is None


async def test_list_sessions_per_user_oldest_first(sessions: MemlaneSessionService, memory: AsyncMemory) -> None:
    a1 = await sessions.create_session(app_name=APP, user_id="alice", session_id="a1", state={"n": 1})
    await sessions.create_session(app_name=APP, user_id="bob", session_id="b1", state={"user:name": "Bob"})
    await sessions.create_session(app_name=APP, user_id="alice", session_id="a2")
    await sessions.append_event(
        a1, AdkEvent(author="agent", invocation_id="i", actions=EventActions(state_delta={"n": 2}))
    )
    # A memlane group session in the same app is not an ADK session.
    await memory.sessions.create_session(app=APP, user_ids=["alice", "bob"], session_id="group")
    listed = (await sessions.list_sessions(app_name=APP, user_id="alice")).sessions
    assert [s.id for s in listed] == ["a2", "a1"]  # a1 was active last
    assert all(s.events == [] for s in listed) and listed[1].state == {"n": 2}
    everyone = (await sessions.list_sessions(app_name=APP)).sessions
    assert sorted(s.id for s in everyone) == ["a1", "a2", "b1"]
    assert next(s for s in everyone if s.id == "b1").state == {"user:name": "Bob"}
    assert (await sessions.list_sessions(app_name=APP, user_id="carol")).sessions == []


async def test_delete_session_only_by_its_owner(sessions: MemlaneSessionService, memory: AsyncMemory) -> None:
    await sessions.create_session(app_name=APP, user_id="alice", session_id="s", state={"user:lang": "fr"})
    await sessions.delete_session(app_name=APP, user_id="bob", session_id="s")
    await sessions.delete_session(app_name="other", user_id="alice", session_id="s")
    assert await sessions.get_session(app_name=APP, user_id="alice", session_id="s") is not None
    await sessions.delete_session(app_name=APP, user_id="alice", session_id="s")
    assert await sessions.get_session(app_name=APP, user_id="alice", session_id="s") is None
    assert await memory.sessions.get_session("s", app=APP) is None
    await sessions.delete_session(app_name=APP, user_id="alice", session_id="s")  # gone: nothing to do
    assert await sessions.get_user_state(app_name=APP, user_id="alice") == {"lang": "fr"}  # user state stays


async def test_append_event_persists_types_and_round_trips(db_path: Path) -> None:
    blob = bytes(range(256))
    events = [
        adk_event("user", "Find me a hotel in Porto"),
        AdkEvent(
            author="concierge",
            invocation_id="inv",
            content=types.Content(
                role="model",
                parts=[
                    types.Part(function_call=types.FunctionCall(id="c1", name="find", args={"city": "Porto"})),
                    types.Part(function_call=types.FunctionCall(id="c2", name="price", args={"max": 90})),
                ],
            ),
        ),
        AdkEvent(
            author="concierge",
            invocation_id="inv",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(id="c1", name="find", response={"hotels": ["Ribeira"]})
                    )
                ],
            ),
        ),
        AdkEvent(
            author="concierge",
            invocation_id="inv",
            content=types.Content(
                role="model",
                parts=[
                    types.Part(text="Ribeira it is."),
                    types.Part(inline_data=types.Blob(mime_type="x/y", data=blob)),
                ],
            ),
            actions=EventActions(state_delta={"hotel": "Ribeira", "user:city": "Porto", "app:count": 1, "temp:t": 9}),
        ),
        AdkEvent(author="concierge", invocation_id="inv", error_code="MAX_TOKENS", error_message="cut"),
    ]
    async with open_memory(db_path) as memory:
        svc = MemlaneSessionService(memory)
        session = await svc.create_session(app_name=APP, user_id="alice", session_id="s")
        for e in events:
            assert await svc.append_event(session, e) is e
        assert session.state["temp:t"] == 9 and session.state["hotel"] == "Ribeira"
        assert "temp:t" not in events[3].actions.state_delta  # trimmed before storing (ADK semantics)
        stored = await memory.sessions.get_events(memlane_session_key("alice", "s"), app=APP)
        assert [e.type for e in stored] == [
            EventType.USER_MESSAGE,
            EventType.TOOL_CALL,
            EventType.TOOL_RESULT,
            EventType.AGENT_RESPONSE,
            EventType.ERROR,
        ]
        assert stored[0].content == "Find me a hotel in Porto" and stored[0].author == "user"
        assert stored[1].content == {
            "calls": [
                {"id": "c1", "name": "find", "args": {"city": "Porto"}},
                {"id": "c2", "name": "price", "args": {"max": 90}},
            ]
        }
        assert stored[2].content == {"name": "find", "response": {"hotels": ["Ribeira"]}}
        assert stored[2].metadata["tool_call_id"] == "c1"
        assert stored[3].content == "Ribeira it is." and stored[3].author == "concierge"
        assert stored[4].content == {"code": "MAX_TOKENS", "message": "cut"}
        assert stored[0].timestamp.timestamp() == pytest.approx(events[0].timestamp, abs=1e-6)
    async with open_memory(db_path) as memory:
        svc = MemlaneSessionService(memory)
        again = await svc.get_session(app_name=APP, user_id="alice", session_id="s")
        assert again is not None
        assert again.events == events  # exact round trip, bytes included
        assert again.events[3].content is not None and again.events[3].content.parts[1].inline_data.data == blob  # type: ignore[index, union-attr]
        assert again.state == {"hotel": "Ribeira", "user:city": "Porto", "app:count": 1}
        assert await svc.get_user_state(app_name=APP, user_id="alice") == {"city": "Porto"}
        bob = await svc.create_session(app_name=APP, user_id="bob", session_id="b")
        assert bob.state == {"app:count": 1}  # app state is shared by the app's users; user state is not


async def test_append_event_to_missing_or_foreign_session_changes_nothing(
    sessions: MemlaneSessionService, memory: AsyncMemory
) -> None:
    await sessions.create_session(app_name=APP, user_id="alice", session_id="s")
    for app, user, sid in ((APP, "bob", "s"), (APP, "alice", "missing"), ("other", "alice", "s")):
        foreign = AdkSession(id=sid, app_name=app, user_id=user)
        event = AdkEvent(
            author="user", invocation_id="i", content=text("hi"), actions=EventActions(state_delta={"user:k": 1})
        )
        with pytest.raises(AdkSessionNotFoundError) as err:
            await sessions.append_event(foreign, event)
        assert isinstance(err.value, SessionNotFoundError) and isinstance(err.value, NotFoundError)
        assert foreign.events == [] and foreign.state == {}
    assert await memory.sessions.get_events("s", app=APP) == []
    assert await sessions.get_user_state(app_name=APP, user_id="bob") == {}
    session = await sessions.get_session(app_name=APP, user_id="alice", session_id="s")
    assert session is not None
    with pytest.raises(InvalidInputError, match="user state"):
        await sessions.append_event(
            session, AdkEvent(author="a", invocation_id="i", actions=EventActions(state_delta={"user:k": {1}}))
        )
    with pytest.raises(InvalidInputError, match="Event"):
        await sessions.append_event(session, {"author": "user"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="Session"):
        await sessions.append_event("s", adk_event("user", "hi"))  # type: ignore[arg-type]
    assert session.events == [] and await memory.sessions.get_events("s", app=APP) == []


async def test_append_event_skips_partial_and_repeated_events(
    sessions: MemlaneSessionService, memory: AsyncMemory
) -> None:
    session = await sessions.create_session(app_name=APP, user_id="alice", session_id="s")
    partial = adk_event("concierge", "Hel", partial=True)
    assert await sessions.append_event(session, partial) is partial
    event = adk_event("user", "hello")
    await sessions.append_event(session, event)
    await sessions.append_event(session, event)  # a retried delivery
    assert len(session.events) == 1 and len(await memory.sessions.get_events("alice/s", app=APP)) == 1


async def test_forget_erases_adk_sessions_and_user_state(sessions: MemlaneSessionService, memory: AsyncMemory) -> None:
    s = await sessions.create_session(app_name=APP, user_id="alice", session_id="s", state={"user:k": "v", "app:a": 1})
    await sessions.append_event(s, adk_event("user", "secret plans"))
    await sessions.create_session(app_name=APP, user_id="bob", session_id="b", state={"user:k": "bob"})
    await memory.forget("alice")
    assert await sessions.get_session(app_name=APP, user_id="alice", session_id="s") is None
    assert await sessions.get_user_state(app_name=APP, user_id="alice") == {}
    assert await sessions.get_user_state(app_name=APP, user_id="bob") == {"k": "bob"}
    bob = await sessions.get_session(app_name=APP, user_id="bob", session_id="b")
    assert bob is not None and bob.state == {"user:k": "bob", "app:a": 1}


def test_event_mapping_reads_memlane_events_not_written_by_adk() -> None:
    plain = [
        Event(type=EventType.USER_MESSAGE, author="user", content="hi there"),
        Event(type=EventType.AGENT_RESPONSE, author="bot", content={"text": "hello"}),
        Event(
            type=EventType.TOOL_CALL,
            author="bot",
            content={"name": "f", "args": {"a": 1}},
            metadata={"tool_call_id": "c"},
        ),
        Event(
            type=EventType.TOOL_RESULT, author="f", content={"name": "f", "response": 3}, metadata={"tool_call_id": "c"}
        ),
        Event(type=EventType.ERROR, content=None),
    ]
    adk = [to_adk_event(e) for e in plain]
    assert adk[0].content == text("hi there") and adk[0].author == "user" and adk[0].id == plain[0].id
    assert adk[1].content == text("hello", role="model")
    assert adk[2].get_function_calls()[0].model_dump(exclude_none=True) == {"id": "c", "name": "f", "args": {"a": 1}}
    assert adk[3].get_function_responses()[0].response == {"result": 3}
    assert adk[4].content is None
    assert [e.timestamp for e in adk] == [e.timestamp.timestamp() for e in plain]
    # and an ADK event survives the trip through a memlane Event exactly
    original = adk_event("user", "round trip", ts=12.25)
    mapped = from_adk_event(original)
    assert set(mapped.metadata) == {ADK_EVENT_KEY} and to_adk_event(mapped) == original
    with pytest.raises(InvalidInputError):
        from_adk_event("hello")  # type: ignore[arg-type]
    broken = mapped.model_copy(update={"metadata": {ADK_EVENT_KEY: {"timestamp": "not a float"}}})
    assert to_adk_event(broken).content == text("round trip")  # falls back to the memlane fields


def test_adk_event_json_in_metadata_is_plain_json() -> None:
    event = AdkEvent(
        author="a",
        invocation_id="i",
        content=types.Content(role="model", parts=[types.Part(inline_data=types.Blob(data=b"\xff"))]),
    )
    stored = from_adk_event(event)
    json.dumps(stored.metadata)  # storable as is
    assert stored.type == EventType.AGENT_RESPONSE and stored.content is None


@pytest.mark.needs_model
def test_docs_adk_snippet_runs_twice(tmp_path: Path) -> None:
    """docs/adapters.md's Google ADK snippet runs as written (offline), twice on one database
    (durable session), and prints what its ``# ->`` comment shows."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "adapters.md").read_text(encoding="utf-8")
    section = doc.split("## Google ADK", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    expected = [m.group(1) for m in re.finditer(r"#\s*->\s?(.*)$", code.group(1), re.M)]
    script = tmp_path / "snippet.py"
    script.write_text(code.group(1), encoding="utf-8")
    env = {**os.environ, "HOME": str(tmp_path)}
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-W", "error", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == expected


async def test_session_service_form_true_runs_memlane_formation(db_path: Path) -> None:
    async with AsyncMemory(db_path, embedder="hash:64", llm="offline") as memory:
        for form in (False, True):
            sid = f"s-{form}"
            agent = LlmAgent(name="concierge", model=ScriptedModel(replies=[text("Noted.", role="model")]))
            runner = Runner(
                app_name=APP,
                agent=agent,
                session_service=MemlaneSessionService(memory, form=form),
                memory_service=MemlaneMemoryService(memory),
            )
            await runner.session_service.create_session(app_name=APP, user_id="alice", session_id=sid)
            await run_turn(runner, "alice", sid, "My sister Maya lives in Porto and I work as a nurse.")
        # Only the form=True session's events went through the engine's triggers: its formation
        # cursor counts them, the other session has none.
        key = await runner.session_service.memlane_session_id(app_name=APP, user_id="alice", session_id="s-True")
        assert key == "alice/s-True"
        assert await memory.jobs.get_cursor(APP, key) is not None
        assert await memory.jobs.get_cursor(APP, "alice/s-False") is None
        await memory.form(key, app=APP)
        hits = await MemlaneMemoryService(memory).search_memory(app_name=APP, user_id="bob", query="Maya Porto")
        assert hits.memories == []  # formed into alice's memory only
        found = await MemlaneMemoryService(memory).search_memory(app_name=APP, user_id="alice", query="Maya Porto")
        assert any("Porto" in (m.content.parts or [])[0].text for m in found.memories)  # type: ignore[operator]
        with pytest.raises(InvalidInputError):
            MemlaneSessionService(memory, form="yes")  # type: ignore[arg-type]
