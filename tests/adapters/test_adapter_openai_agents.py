"""MemlaneSession: the OpenAI Agents SDK's Session over memlane's session store, with the real
``openai-agents`` package and a scripted model (no network, tracing off)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from memlane import AsyncMemory, Memory
from memlane.adapters import openai_agents
from memlane.adapters.openai_agents import MemlaneSession, SessionClosedError, SessionItemError
from memlane.errors import InvalidInputError, ScopeError, UsageError
from memlane.formation.config import FormationConfig
from memlane.models import Event, EventType


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)
    yield


def _say(text: str, n: int = 1) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{n}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """Returns the scripted outputs in order and records every input it was given."""

    def __init__(self, outputs: list[Any]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(  # type: ignore[override]
        self, system_instructions: str | None, input: str | list[TResponseInputItem], *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input) if isinstance(input, list) else [{"role": "user", "content": input}])
        return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # pragma: no cover - not used
        raise NotImplementedError


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _strip(items: list[Any]) -> list[Any]:
    return [{k: v for k, v in i.items() if k != "id"} for i in items]


# --------------------------------------------------------------------------- a real Runner


async def test_turn_two_sees_turn_one_and_a_reopened_file_continues(db_path: Path) -> None:
    model = ScriptedModel(
        [
            _say("Hello Alice", 1),
            ResponseFunctionToolCall(
                type="function_call", name="get_weather", arguments='{"city": "Paris"}', call_id="call_1", id="fc_1"
            ),
            _say("It is sunny in Paris", 2),
        ]
    )
    agent = Agent(name="bot", instructions="Be brief.", model=model, tools=[get_weather])
    async with AsyncMemory(db_path, embedder="hash") as m:
        session = MemlaneSession("alice:chat", m, user_id="alice", agent_id="bot")
        assert isinstance(session, Session)
        assert (await Runner.run(agent, "Hi, I'm Alice", session=session)).final_output == "Hello Alice"
        await Runner.run(agent, "Weather in Paris?", session=session)
        turn1 = [
            {"role": "user", "content": "Hi, I'm Alice"},
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hello Alice", "annotations": []}],
            },
        ]
        assert model.inputs[0] == turn1[:1]
        assert model.inputs[1] == [*turn1, {"role": "user", "content": "Weather in Paris?"}]  # turn 2 got turn 1
        stored = await session.get_items()
        assert [i.get("type", "message") for i in stored] == [
            "message",
            "message",
            "message",
            "function_call",
            "function_call_output",
            "message",
        ]
        assert stored[:2] == turn1
        events = await m.sessions.get_events("alice:chat")
        assert [(e.type, e.author) for e in events] == [
            (EventType.USER_MESSAGE, "user"),
            (EventType.AGENT_RESPONSE, "bot"),
            (EventType.USER_MESSAGE, "user"),
            (EventType.TOOL_CALL, "get_weather"),
            (EventType.TOOL_RESULT, "tool"),
            (EventType.AGENT_RESPONSE, "bot"),
        ]
        assert [e.text for e in events if e.type is EventType.AGENT_RESPONSE] == ["Hello Alice", "It is sunny in Paris"]

    model2 = ScriptedModel([_say("You are Alice", 3)])
    agent2 = Agent(name="bot", instructions="Be brief.", model=model2)
    async with AsyncMemory(db_path, embedder="hash") as m:  # a new process, the same file
        session = MemlaneSession("alice:chat", m, user_id="alice", agent_id="bot")
        assert await session.get_items() == stored
        await Runner.run(agent2, "Who am I?", session=session)
        assert model2.inputs[0] == [*stored, {"role": "user", "content": "Who am I?"}]
        assert len(await session.get_items()) == 8


def test_sync_memory_works_under_asyncio_run(db_path: Path) -> None:
    with Memory(db_path, embedder="hash") as m:
        model = ScriptedModel([_say("one"), _say("two")])
        agent = Agent(name="bot", model=model)
        session = MemlaneSession("s1", m, user_id="alice")
        asyncio.run(Runner.run(agent, "first", session=session))
        asyncio.run(Runner.run(agent, "second", session=session))  # another loop: the memory's own is untouched
        assert _strip(model.inputs[1]) == _strip(
            [
                {"role": "user", "content": "first"},
                {
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "one", "annotations": []}],
                },
                {"role": "user", "content": "second"},
            ]
        )
        assert [e.type for e in m.sessions.get_events("s1")][-1] is EventType.AGENT_RESPONSE


# --------------------------------------------------------------------------- SQLiteSession semantics

ITEMS: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": 'Ünïcødé ✓ 日本語 "quoted"\nline two'},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:,", "detail": "auto"},
        ],
    },
    {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
    {"type": "function_call", "name": "lookup", "arguments": '{"q": [1, 2.5, null, true]}', "call_id": "c1"},
    {"type": "function_call_output", "call_id": "c1", "output": '{"nested": {"a": []}}'},
    {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "done", "annotations": []}],
    },
]


async def _ops(s: Any) -> list[Any]:
    out: list[Any] = [await s.get_items(), await s.pop_item()]
    await s.add_items(copy.deepcopy(ITEMS[:4]))
    await s.add_items([])
    await s.add_items(copy.deepcopy(ITEMS[4:]))
    out += [await s.get_items(), await s.get_items(limit=2), await s.get_items(limit=0), await s.get_items(limit=-1)]
    out += [await s.get_items(limit=100), await s.pop_item(), await s.pop_item(), await s.get_items()]
    await s.add_items([{"role": "user", "content": "again"}])
    out += [await s.get_items(limit=1)]
    await s.clear_session()
    out += [await s.get_items(), await s.pop_item()]
    await s.add_items([{"role": "user", "content": "after clear"}])
    out += [await s.get_items()]
    await s.clear_session()
    await s.clear_session()
    return out


async def test_same_results_as_the_sdks_sqlite_session(mem: AsyncMemory) -> None:
    reference = SQLiteSession("s")
    try:
        want = await _ops(reference)
    finally:
        reference.close()
    got = await _ops(MemlaneSession("s", mem, user_id="alice"))
    assert got == want
    assert got[2] == ITEMS  # every item round-trips exactly
    assert got[3] == ITEMS[-2:]


async def test_session_settings_limit_is_the_default(mem: AsyncMemory) -> None:
    s = MemlaneSession("s", mem, user_id="alice", session_settings=SessionSettings(limit=2))
    await s.add_items(copy.deepcopy(ITEMS))
    assert await s.get_items() == ITEMS[-2:]
    assert await s.get_items(limit=3) == ITEMS[-3:]


async def test_item_types_become_memlane_event_types(mem: AsyncMemory) -> None:
    await MemlaneSession("s", mem, user_id="alice", agent_id="bot").add_items(copy.deepcopy(ITEMS))
    events = await mem.sessions.get_events("s")
    assert [e.type for e in events] == [
        EventType.TASK_DELEGATION_RECEIVED,
        EventType.USER_MESSAGE,
        EventType.USER_MESSAGE,
        EventType.TOOL_RESULT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESPONSE,
    ]
    assert [e.text for e in events[:3]] == ["You are terse.", ITEMS[1]["content"], "look"]
    assert events[6].text == "done" and events[6].author == "bot"
    assert [e.metadata.get("user_id") for e in events[:3]] == [None, "alice", "alice"]  # for forget in groups


async def test_text_events_from_elsewhere_read_as_items(mem: AsyncMemory) -> None:
    await mem.sessions.create_session(session_id="s", user_ids=["alice"])
    await mem.add_event("s", Event(type=EventType.USER_MESSAGE, content="from the CLI"))
    await mem.add_event("s", Event(type=EventType.TOOL_CALL, content={"name": "x"}))
    await mem.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="noted"))
    s = MemlaneSession("s", mem, user_id="alice")
    assert await s.get_items() == [
        {"role": "user", "content": "from the CLI"},
        {"role": "assistant", "content": "noted"},
    ]
    assert await s.get_items(limit=1) == [{"role": "assistant", "content": "noted"}]
    assert await s.pop_item() == {"role": "assistant", "content": "noted"}
    assert await s.pop_item() == {"role": "user", "content": "from the CLI"}  # the tool event is dropped on the way
    assert await mem.sessions.get_events("s") == []


async def test_bad_items_are_refused_and_nothing_is_written(mem: AsyncMemory) -> None:
    s = MemlaneSession("s", mem, user_id="alice")
    await s.add_items([{"role": "user", "content": "kept"}])
    with pytest.raises(InvalidInputError):
        await s.add_items([{"role": "user", "content": "fine"}, cast(Any, {"role": "user", "content": {1, 2}})])
    with pytest.raises(InvalidInputError):
        await s.add_items([cast(Any, "not a dict")])
    assert await s.get_items() == [{"role": "user", "content": "kept"}]


async def test_a_non_json_item_raises_a_type_error_as_the_sdk_does(mem: AsyncMemory) -> None:
    bad = cast(TResponseInputItem, {"role": "user", "content": object()})
    reference = SQLiteSession("s")
    try:
        with pytest.raises(TypeError):
            await reference.add_items([bad])  # what an SDK user's `except TypeError` was written for
    finally:
        reference.close()
    s = MemlaneSession("new", mem, user_id="alice")
    with pytest.raises(TypeError) as raised:
        await s.add_items([{"role": "user", "content": "fine"}, bad])
    assert isinstance(raised.value, SessionItemError) and isinstance(raised.value, InvalidInputError)
    with pytest.raises(TypeError):
        await s.add_items([cast(Any, ["not", "a", "dict"])])
    # nothing of the batch was written: not even the session was created
    assert await mem.sessions.get_session("new") is None
    await s.add_items([{"role": "user", "content": "after failure"}])  # still usable
    assert await s.get_items() == [{"role": "user", "content": "after failure"}]


# --------------------------------------------------------------------------- session_settings


async def test_session_settings_default_to_the_sdks_empty_settings(mem: AsyncMemory) -> None:
    s = MemlaneSession("s", mem, user_id="alice")
    assert isinstance(s.session_settings, SessionSettings) and s.session_settings.limit is None
    await s.add_items(copy.deepcopy(ITEMS))
    assert await s.get_items() == ITEMS


async def test_a_settings_dict_is_normalised_and_its_limit_applies(mem: AsyncMemory) -> None:
    s = MemlaneSession("s", mem, user_id="alice", session_settings={"limit": 2})
    assert s.session_settings == SessionSettings(limit=2)
    await s.add_items(copy.deepcopy(ITEMS))
    assert await s.get_items() == ITEMS[-2:]
    assert await s.get_items(limit=3) == ITEMS[-3:]  # an explicit limit still wins
    zero = MemlaneSession("s", mem, user_id="alice", session_settings={"limit": 0})
    assert await zero.get_items() == []


@pytest.mark.parametrize("settings", [{"limitt": 1}, {"limit": 1, "max": 2}, SessionSettings, 5])
def test_bad_settings_raise_the_sdks_type_error_and_open_nothing(tmp_path: Path, settings: Any) -> None:
    with pytest.raises(TypeError) as want:
        SQLiteSession("s", session_settings=settings)
    path = tmp_path / "never.db"
    with pytest.raises(TypeError) as got:
        MemlaneSession("s", path, user_id="alice", session_settings=settings)
    assert str(got.value) == str(want.value)  # "Unknown session settings: limitt", ...
    assert not path.exists()  # refused before the session opened its memory


async def test_the_runners_settings_override_the_sessions(mem: AsyncMemory) -> None:
    s = MemlaneSession("s", mem, user_id="alice", session_settings={"limit": 100})
    await s.add_items([{"role": "user", "content": f"turn {i}"} for i in range(10)])
    model = ScriptedModel([_say("ok")])
    await Runner.run(
        Agent(name="bot", model=model),
        "new",
        session=s,
        run_config=RunConfig(session_settings=SessionSettings(limit=2)),
    )
    assert model.inputs[0] == [
        {"role": "user", "content": "turn 8"},
        {"role": "user", "content": "turn 9"},
        {"role": "user", "content": "new"},
    ]


# --------------------------------------------------------------------------- close


async def test_close_ends_the_session_object_and_leaves_a_given_memory_open(mem: AsyncMemory) -> None:
    s = MemlaneSession("s", mem, user_id="alice")
    await s.add_items([{"role": "user", "content": "kept"}])
    s.close()
    s.close()  # idempotent, as SQLiteSession's
    calls = [s.get_items(), s.get_items(limit=1), s.add_items([]), s.add_items([{"role": "user", "content": "x"}])]
    calls += [s.pop_item(), s.clear_session()]
    for call in calls:
        with pytest.raises(RuntimeError, match="MemlaneSession is closed") as raised:
            await call
        assert isinstance(raised.value, SessionClosedError) and isinstance(raised.value, UsageError)
    # the memory is the caller's: still open, the conversation still stored
    assert [e.text for e in await mem.sessions.get_events("s")] == ["kept"]
    assert await MemlaneSession("s", mem, user_id="alice").get_items() == [{"role": "user", "content": "kept"}]


async def test_a_session_given_a_path_opens_its_own_memory_and_close_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Memory] = []

    class Recorded(Memory):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(openai_agents, "Memory", Recorded)
    path = tmp_path / "chat.db"
    s = MemlaneSession("alice:chat", path, user_id="alice", session_settings={"limit": 1})
    await s.add_items([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    assert await s.get_items() == [{"role": "user", "content": "two"}]
    assert [m.engine for m in opened] == [s.memory] and s.memory.db_path == str(path)
    s.close()
    with pytest.raises(UsageError, match="this Memory is closed"):
        opened[0].sessions.get_session("alice:chat")  # the memory the session opened is released with it
    with pytest.raises(SessionClosedError):
        await s.get_items()
    again = MemlaneSession("alice:chat", path, user_id="alice")  # the file keeps the conversation
    try:
        assert await again.get_items() == [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    finally:
        again.close()
    throwaway = MemlaneSession("s", ":memory:", user_id="alice")
    try:
        await throwaway.add_items([{"role": "user", "content": "gone at close"}])
        assert len(await throwaway.get_items()) == 1
    finally:
        throwaway.close()


def test_memory_must_be_a_memlane_memory_or_a_path() -> None:
    with pytest.raises(InvalidInputError, match="AsyncMemory or Memory, or a database path"):
        MemlaneSession("s", cast(Any, 42), user_id="alice")


async def test_formation_turns_the_conversation_into_the_users_memory(db_path: Path) -> None:
    cfg = FormationConfig(message_interval=2, min_messages=2)  # form after every exchange
    async with AsyncMemory(db_path, embedder="hash", formation=cfg) as mem:
        s = MemlaneSession("alice:chat", mem, user_id="alice")
        await s.add_items(
            [
                {"role": "user", "content": "I am allergic to peanuts and I live in Lisbon."},
                {"role": "assistant", "content": "Noted, no peanuts."},
            ]
        )
        # form=True appends through add_event: the formation trigger queued a job for the session
        assert [j.payload["session_id"] for j in await mem.list_jobs()] == ["alice:chat"]
        await mem.form("alice:chat")
        assert "peanuts" in " ".join(h.fact.content for h in (await mem.search("peanuts", user_id="alice")).hits)
        assert (await mem.search("peanuts", user_id="bob")).hits == []

        quiet = MemlaneSession("quiet", mem, user_id="carol", form=False)
        await quiet.add_items([{"role": "user", "content": "plain"}, {"role": "assistant", "content": "ok"}])
        assert await quiet.get_items() == [{"role": "user", "content": "plain"}, {"role": "assistant", "content": "ok"}]
        assert all(j.payload["session_id"] != "quiet" for j in await mem.list_jobs())


# --------------------------------------------------------------------------- isolation


async def test_another_user_cannot_read_or_change_the_session(mem: AsyncMemory) -> None:
    alice = MemlaneSession("chat-1", mem, user_id="alice")
    await alice.add_items([{"role": "user", "content": "my PIN is 4321"}])
    bob = MemlaneSession("chat-1", mem, user_id="bob")
    with pytest.raises(ScopeError):
        await bob.get_items()
    with pytest.raises(ScopeError):
        await bob.add_items([{"role": "user", "content": "hijack"}])
    with pytest.raises(ScopeError):
        await bob.pop_item()
    with pytest.raises(ScopeError):
        await bob.clear_session()
    assert await alice.get_items() == [{"role": "user", "content": "my PIN is 4321"}]
    # bob's own sessions, and the same id in another app, are separate conversations
    bob_own = MemlaneSession("chat-2", mem, user_id="bob")
    await bob_own.add_items([{"role": "user", "content": "hello"}])
    assert await bob_own.get_items() == [{"role": "user", "content": "hello"}]
    other_app = MemlaneSession("chat-1", mem, user_id="bob", app="other")
    assert await other_app.get_items() == []
    await other_app.add_items([{"role": "user", "content": "in other app"}])
    assert await alice.get_items() == [{"role": "user", "content": "my PIN is 4321"}]
    assert [s.id for s in await mem.sessions.list_sessions(user_id="bob")] == ["chat-2"]
