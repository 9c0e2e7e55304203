"""The pydantic-ai bridge's round-trip property (issue 18: pydantic-ai has no built-in store to
run its own suite against, so the bridge is held to this invariant instead).

For any well-formed pydantic-ai history (requests and responses alternating; user prompts,
text, tool calls with JSON arguments, and tool returns answering earlier calls), saving it to
a memlane session and loading it back gives the same parts, in the same order, with the same
text, tool names, call ids, arguments and return values; the pure mapping
(``messages_to_events`` then ``events_to_messages``) does the same without a store.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from memlane import AsyncMemory
from memlane.adapters.pydantic_ai import events_to_messages, load_history, messages_to_events, save_messages

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40).filter(
    lambda s: s.strip() != ""
)
NAME = st.sampled_from(["get_weather", "lookup", "search_docs"])
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
ARGS = st.dictionaries(st.sampled_from(["city", "q", "n", "when"]), JSON_VALUE, max_size=3)


@st.composite
def histories(draw: st.DrawFn) -> list[ModelMessage]:
    """An alternating request/response history whose tool returns answer earlier calls."""
    ids = (f"call-{i}" for i in itertools.count())
    open_calls: list[tuple[str, str]] = []
    messages: list[ModelMessage] = []
    for _turn in range(draw(st.integers(1, 5))):
        request: list[ModelRequestPart] = []
        while open_calls and draw(st.booleans()):
            name, call_id = open_calls.pop(0)
            request.append(ToolReturnPart(tool_name=name, content=draw(JSON_VALUE), tool_call_id=call_id))
        if not request or draw(st.booleans()):
            request.append(UserPromptPart(content=draw(TEXT)))
        messages.append(ModelRequest(parts=request))
        response: list[ModelResponsePart] = []
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                response.append(TextPart(content=draw(TEXT)))
            else:
                call = (draw(NAME), next(ids))
                open_calls.append(call)
                response.append(ToolCallPart(tool_name=call[0], args=draw(ARGS), tool_call_id=call[1]))
        messages.append(ModelResponse(parts=response))
    # Close every call, so the history is one a provider accepts (load_history repairs the rest).
    if open_calls:
        messages.append(
            ModelRequest(parts=[ToolReturnPart(tool_name=n, content="done", tool_call_id=c) for n, c in open_calls])
        )
        messages.append(ModelResponse(parts=[TextPart(content="finished")]))
    return messages


def shape(messages: list[ModelMessage]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Each message's kind and its parts' observable content."""
    out: list[tuple[str, list[tuple[Any, ...]]]] = []
    for message in messages:
        parts: list[tuple[Any, ...]] = []
        for p in message.parts:
            if isinstance(p, UserPromptPart | TextPart):
                parts.append((p.part_kind, p.content))
            elif isinstance(p, ToolCallPart):
                parts.append((p.part_kind, p.tool_name, p.tool_call_id, p.args_as_dict()))
            elif isinstance(p, ToolReturnPart):
                parts.append((p.part_kind, p.tool_name, p.tool_call_id, p.content))
        out.append((message.kind, parts))
    return out


@settings(max_examples=200, deadline=None)
@given(history=histories())
def test_the_mapping_round_trips_every_history(history: list[ModelMessage]) -> None:
    events = messages_to_events(history, user_id="alice", agent_name="bot")
    assert shape(events_to_messages(events)) == shape(history)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_a_session_round_trips_every_history(history: list[ModelMessage], tmp_path: Path) -> None:
    async def run() -> list[ModelMessage]:
        async with AsyncMemory(tmp_path / "pyd.db", embedder="hash") as memory:
            session_id = f"s-{next(_sessions)}"
            await save_messages(memory, session_id, history, user_id="alice", agent_name="bot")
            return await load_history(memory, session_id, user_id="alice", context_limit=None)

    assert shape(asyncio.run(run())) == shape(history)


_sessions = itertools.count()
