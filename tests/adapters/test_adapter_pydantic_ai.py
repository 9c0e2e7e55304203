"""pydantic-ai bridge (KAOS) with the real pydantic-ai package: TestModel / FunctionModel runs whose
history comes from, and goes back to, memlane sessions in a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from memlane import AsyncMemory
from memlane.adapters.pydantic_ai import (
    CONTEXT_LIMIT,
    events_to_messages,
    load_history,
    messages_to_events,
    run_with_memory,
    save_messages,
)
from memlane.errors import InvalidInputError, ScopeError
from memlane.models import Event, EventType


def parts(messages: list[ModelMessage]) -> list[tuple[str, str, str]]:
    """(message kind, part kind, text or tool name) for every part, system/instructions aside."""
    out = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, SystemPromptPart):
                continue
            if isinstance(p, UserPromptPart | TextPart):
                label = p.content if isinstance(p.content, str) else repr(p.content)
            elif isinstance(p, ToolCallPart | ToolReturnPart):
                label = f"{p.tool_name}#{p.tool_call_id}"
            else:
                label = type(p).__name__
            out.append((m.kind, p.part_kind, label))
    return out


class Recorder:
    """A FunctionModel function that records the history it is given and replies ``reply``."""

    def __init__(self, reply: str = "ok") -> None:
        self.reply = reply
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        return ModelResponse(parts=[TextPart(self.reply)])


def weather_agent() -> Agent[None, str]:
    agent = Agent(TestModel(), name="forecaster", instructions="You forecast.")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    return agent


# --------------------------------------------------------------------------- mapping


def test_events_to_messages_and_back_preserve_types_text_and_tools() -> None:
    events = [
        Event(type=EventType.USER_MESSAGE, content="weather in Oslo?"),
        Event(type=EventType.AGENT_RESPONSE, author="bot", content="Let me check."),
        Event(
            type=EventType.TOOL_CALL,
            author="bot",
            content={"city": "Oslo"},
            metadata={"tool_name": "get_weather", "tool_call_id": "c1"},
        ),
        Event(
            type=EventType.TOOL_CALL,
            author="bot",
            content='{"city": "Bergen"}',
            metadata={"tool_name": "get_weather", "tool_call_id": "c2"},
        ),
        Event(
            type=EventType.TOOL_RESULT,
            author="get_weather",
            content="rain",
            metadata={"tool_name": "get_weather", "tool_call_id": "c1"},
        ),
        Event(
            type=EventType.TOOL_RESULT,
            author="get_weather",
            content={"temp": 3, "sky": "snow"},
            metadata={"tool_name": "get_weather", "tool_call_id": "c2", "outcome": "failed"},
        ),
        Event(type=EventType.AGENT_RESPONSE, author="bot", content="Rain in Oslo, snow in Bergen."),
        Event(type=EventType.ERROR, content="ignored"),
        Event(type=EventType.TASK_DELEGATION_RECEIVED, author="planner", content="and tomorrow?"),
    ]
    messages = events_to_messages(events)
    assert parts(messages) == [
        ("request", "user-prompt", "weather in Oslo?"),
        ("response", "text", "Let me check."),
        ("response", "tool-call", "get_weather#c1"),
        ("response", "tool-call", "get_weather#c2"),
        ("request", "tool-return", "get_weather#c1"),
        ("request", "tool-return", "get_weather#c2"),
        ("response", "text", "Rain in Oslo, snow in Bergen."),
        ("request", "user-prompt", "and tomorrow?"),
    ]
    assert [(m.kind, len(m.parts)) for m in messages] == [
        ("request", 1),
        ("response", 3),
        ("request", 2),
        ("response", 1),
        ("request", 1),
    ]
    call = messages[1].parts[1]
    assert isinstance(call, ToolCallPart) and call.args == {"city": "Oslo"}
    ret = messages[2].parts[1]
    assert isinstance(ret, ToolReturnPart) and ret.content == {"temp": 3, "sky": "snow"} and ret.outcome == "failed"
    assert messages[0].timestamp == events[0].timestamp

    back = messages_to_events(messages, user_id="alice", agent_name="bot")
    kept = [e for e in events if e.type is not EventType.ERROR]
    assert [e.type for e in back] == [e.type for e in kept[:-1]] + [EventType.USER_MESSAGE]  # delegation: a prompt
    assert [e.content for e in back] == [e.content for e in kept]
    assert [(e.metadata.get("tool_name"), e.metadata.get("tool_call_id")) for e in back] == [
        (e.metadata.get("tool_name"), e.metadata.get("tool_call_id")) for e in kept
    ]
    assert back[5].metadata["outcome"] == "failed" and "outcome" not in back[4].metadata
    assert [e.author for e in back] == ["user", "bot", "bot", "bot", "get_weather", "get_weather", "bot", "user"]
    assert back[0].metadata["user_id"] == "alice"
    assert back[0].timestamp == events[0].timestamp


async def test_a_real_runs_messages_round_trip_through_events() -> None:
    result = await weather_agent().run("weather in Paris?")
    original = result.new_messages()
    events = messages_to_events(original, agent_name="forecaster")
    assert [e.type for e in events] == [
        EventType.USER_MESSAGE,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESPONSE,
    ]
    assert events[1].metadata["tool_call_id"] == events[2].metadata["tool_call_id"]
    assert events[2].content == "sunny in a" and events[3].text == result.output
    assert parts(events_to_messages(events)) == parts(original)


def test_events_without_call_ids_pair_by_tool_name() -> None:
    events = [
        Event(type=EventType.USER_MESSAGE, content="go"),
        Event(type=EventType.TOOL_CALL, author="agent", content={"q": 1}, metadata={"tool_name": "lookup"}),
        Event(type=EventType.TOOL_RESULT, author="lookup", content="found"),
    ]
    messages = events_to_messages(events)
    call, ret = messages[1].parts[0], messages[2].parts[0]
    assert isinstance(call, ToolCallPart) and isinstance(ret, ToolReturnPart)
    assert call.tool_call_id == ret.tool_call_id == f"memlane-{events[1].id}"
    assert call.tool_name == ret.tool_name == "lookup"


def test_bad_input_is_rejected() -> None:
    with pytest.raises(InvalidInputError):
        events_to_messages("hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        events_to_messages([{"type": "user_message"}])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError):
        messages_to_events([Event(content="x")])  # type: ignore[list-item]
    with pytest.raises(ScopeError):
        messages_to_events([], user_id="")


# --------------------------------------------------------------------------- runs with memory


async def test_second_run_sees_the_first_from_a_reopened_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    first = Recorder("Nice to meet you, Ada.")
    async with AsyncMemory(db, embedder="hash") as m:
        r1 = await run_with_memory(Agent(FunctionModel(first)), "Hi, I am Ada.", m, "s1", user_id="ada")
        assert r1.output == "Nice to meet you, Ada."
    assert len(first.seen) == 1 and parts(first.seen[0]) == [("request", "user-prompt", "Hi, I am Ada.")]

    second = Recorder("You are Ada.")
    async with AsyncMemory(db, embedder="hash") as m:
        stored = await m.sessions.get_events("s1")
        assert [(e.type, e.text) for e in stored] == [
            (EventType.USER_MESSAGE, "Hi, I am Ada."),
            (EventType.AGENT_RESPONSE, "Nice to meet you, Ada."),
        ]
        await run_with_memory(Agent(FunctionModel(second)), "Who am I?", m, "s1", user_id="ada")
        assert parts(second.seen[0]) == [
            ("request", "user-prompt", "Hi, I am Ada."),
            ("response", "text", "Nice to meet you, Ada."),
            ("request", "user-prompt", "Who am I?"),
        ]
        assert len(await m.sessions.get_events("s1")) == 4
        session = await m.sessions.get_session("s1")
        assert session is not None and session.user_ids == ["ada"]


async def test_tool_calls_are_persisted_and_replayed_validly(mem: AsyncMemory) -> None:
    await run_with_memory(weather_agent(), "weather in Rome?", mem, "s", user_id="u")
    events = await mem.sessions.get_events("s")
    assert [e.type for e in events] == [
        EventType.USER_MESSAGE,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESPONSE,
    ]
    call, result = events[1], events[2]
    assert call.metadata["tool_name"] == result.metadata["tool_name"] == "get_weather"
    assert call.metadata["tool_call_id"] == result.metadata["tool_call_id"]
    assert call.author == "forecaster" and result.author == "get_weather"
    assert call.content == {"city": "a"} and result.content == "sunny in a"

    replay = Recorder("done")
    await run_with_memory(Agent(FunctionModel(replay)), "thanks", mem, "s", user_id="u")
    seen = parts(replay.seen[0])
    call_id = call.metadata["tool_call_id"]
    assert seen == [
        ("request", "user-prompt", "weather in Rome?"),
        ("response", "tool-call", f"get_weather#{call_id}"),
        ("request", "tool-return", f"get_weather#{call_id}"),
        ("response", "text", events[3].text),
        ("request", "user-prompt", "thanks"),
    ]


async def test_a_window_that_cuts_a_call_from_its_return_is_repaired(mem: AsyncMemory) -> None:
    await run_with_memory(weather_agent(), "weather in Rome?", mem, "s", user_id="u")
    # the last 2 events are the tool result and the answer: the result's call is outside the window
    history = await load_history(mem, "s", user_id="u", context_limit=2)
    assert [k for k, _, _ in parts(history)] == ["response"]
    # and a window ending on an unanswered call gets a synthesized return, so a new prompt is accepted
    await save_messages(
        mem,
        "dangling",
        [ModelRequest(parts=[UserPromptPart("go")]), ModelResponse(parts=[ToolCallPart("get_weather", {}, "c9")])],
        user_id="u",
    )
    replay = Recorder()
    await run_with_memory(Agent(FunctionModel(replay)), "hello?", mem, "dangling", user_id="u")
    assert [(k, p) for k, p, _ in parts(replay.seen[0])] == [
        ("request", "user-prompt"),
        ("response", "tool-call"),
        ("request", "tool-return"),  # synthesized by repair_messages ("interrupted")
        ("request", "user-prompt"),
    ]
    assert parts(replay.seen[0])[-1][2] == "hello?"


async def test_history_is_windowed_to_the_kaos_context_limit(mem: AsyncMemory) -> None:
    assert CONTEXT_LIMIT == 6
    for i in range(5):
        await run_with_memory(Agent(FunctionModel(Recorder(f"answer {i}"))), f"question {i}", mem, "s", user_id="u")
    rec = Recorder()
    await run_with_memory(Agent(FunctionModel(rec)), "last", mem, "s", user_id="u")
    texts = [t for _, _, t in parts(rec.seen[0])]
    assert texts == ["question 2", "answer 2", "question 3", "answer 3", "question 4", "answer 4", "last"]
    everything = await load_history(mem, "s", user_id="u", context_limit=None)
    assert len(parts(everything)) == 12


async def test_sessions_and_users_are_isolated(mem: AsyncMemory) -> None:
    await run_with_memory(Agent(FunctionModel(Recorder("noted"))), "my PIN is 4321", mem, "alice-1", user_id="alice")
    other = Recorder()
    await run_with_memory(Agent(FunctionModel(other)), "what is my PIN?", mem, "alice-2", user_id="alice")
    assert [t for _, _, t in parts(other.seen[0])] == ["what is my PIN?"]

    prying = Recorder()
    for kwargs in ({"user_id": "bob"}, {}):
        with pytest.raises(ScopeError):
            await run_with_memory(Agent(FunctionModel(prying)), "what is the PIN?", mem, "alice-1", **kwargs)
        with pytest.raises(ScopeError):
            await load_history(mem, "alice-1", **kwargs)
        with pytest.raises(ScopeError):
            await save_messages(mem, "alice-1", [ModelRequest(parts=[UserPromptPart("hi")])], **kwargs)
    assert prying.seen == []  # the agent never ran with alice's history
    assert len(await mem.sessions.get_events("alice-1")) == 2  # nothing written into her session
    bob = Recorder()
    await run_with_memory(Agent(FunctionModel(bob)), "hi", mem, "bob-1", user_id="bob")
    assert [t for _, _, t in parts(bob.seen[0])] == ["hi"]
    assert await load_history(mem, "nobody-here", user_id="bob") == []


async def test_run_with_memory_input_checks(mem: AsyncMemory) -> None:
    agent: Agent[None, str] = Agent(FunctionModel(Recorder()))
    bad: list[dict[str, Any]] = [
        {"prompt": ""},
        {"session_id": ""},
        {"context_limit": -1},
        {"message_history": []},
        {"app": " "},
    ]
    for override in bad:
        kwargs: dict[str, Any] = {"prompt": "hi", "session_id": "s", "user_id": "u", **override}
        prompt, session_id = kwargs.pop("prompt"), kwargs.pop("session_id")
        with pytest.raises(InvalidInputError):
            await run_with_memory(agent, prompt, mem, session_id, **kwargs)
    assert await mem.sessions.get_session("s") is None


async def test_a_failed_run_stores_nothing(mem: AsyncMemory) -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        await run_with_memory(Agent(FunctionModel(broken)), "hello", mem, "s", user_id="u")
    assert await mem.sessions.get_events("s") == []


def test_run_with_memory_sync_over_the_sync_facade(tmp_path: Path) -> None:
    from memlane import Memory
    from memlane.adapters.pydantic_ai import run_with_memory_sync

    second = Recorder("You are Ada.")
    with Memory(tmp_path / "sync.db", embedder="hash") as m:
        first = run_with_memory_sync(Agent(FunctionModel(Recorder("Hi Ada."))), "I am Ada.", m, "s", user_id="ada")
        assert first.output == "Hi Ada."
        run_with_memory_sync(Agent(FunctionModel(second)), "Who am I?", m, "s", user_id="ada")
        assert parts(second.seen[0])[:2] == [("request", "user-prompt", "I am Ada."), ("response", "text", "Hi Ada.")]
        assert len(m.sessions.get_events("s")) == 4
        with pytest.raises(ScopeError):
            run_with_memory_sync(Agent(FunctionModel(Recorder())), "hi", m, "s", user_id="bob")
    with pytest.raises(InvalidInputError):
        run_with_memory_sync(Agent(FunctionModel(Recorder())), "hi", object(), "s")  # type: ignore[arg-type]
