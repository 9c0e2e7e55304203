"""pydantic-ai bridge (KAOS): memlane session events <-> pydantic-ai message history.

``pip install 'memlane[pydantic-ai]'``. Memory events become ``message_history`` for an
``Agent`` run, and the run's new messages become events again, so a conversation continues
across processes from memlane's session store::

    events --events_to_messages()--> message_history --Agent.run()--> result.new_messages()
       ^                                                                      |
       +------------------------------ messages_to_events() <----------------+

==============================  ===========================================================
memlane event                   pydantic-ai part
==============================  ===========================================================
``user_message``                ``UserPromptPart`` in a ``ModelRequest``
``task_delegation_received``    ``UserPromptPart`` in a ``ModelRequest``
``agent_response``              ``TextPart`` in a ``ModelResponse``
``tool_call``                   ``ToolCallPart`` in a ``ModelResponse``
``tool_result``                 ``ToolReturnPart`` in a ``ModelRequest``
==============================  ===========================================================

**Departure from KAOS.** KAOS maps both ``tool_call`` and ``tool_result`` to a
``ToolReturnPart`` in a ``ModelRequest``. pydantic-ai (like every provider API) needs a tool
call to be the model's own ``ToolCallPart`` in a ``ModelResponse``, answered by a
``ToolReturnPart`` with the same ``tool_call_id`` in the next request; a return without its
call is dropped before the model sees it. So a ``tool_call`` becomes a ``ToolCallPart``. The
pairing is kept in event metadata: ``tool_name`` and ``tool_call_id`` on both events (and
``outcome`` on a result that was not a success, e.g. ``"retried"``). A ``tool_call`` event's
content is the call's arguments (a dict or a JSON string), a ``tool_result``'s the returned
value (JSON).

Consecutive events of the same side (request or response) form one message, as pydantic-ai
builds them (a response with text and two tool calls, a request with both returns). Event
types pydantic-ai has no part for (``delegation_request``, ``delegation_response``,
``error``) are skipped, as KAOS does; so are message parts memlane does not store (system
prompts, thinking, provider-native tool parts, files, retry feedback without a tool call).
System prompts are not part of the replayed history: give the agent ``instructions=``
(re-sent on every request) rather than ``system_prompt=`` (only sent when the history is empty).

:func:`run_with_memory` does a whole turn: loads the session's last ``context_limit`` events
(KAOS ``memory_context_limit``: the engine's ``recall_config.context_limit`` when set, else KAOS's 6),
made provider-valid with pydantic-ai's ``repair_messages`` (a window can cut a call from its
return), runs the agent, and appends
the run's new messages to the session through :meth:`AsyncMemory.add_event` (so memory
formation sees them).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic_core

from memlane import inputs
from memlane.adapters import missing_extra
from memlane.agent.config import CONFIGURED, ConfiguredInt
from memlane.agent.config import CONTEXT_LIMIT as DEFAULT_CONTEXT_LIMIT
from memlane.errors import InvalidInputError, ScopeError
from memlane.models import Event, EventType, Session
from memlane.sessions import window_events

try:
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
        repair_messages,
    )
except ImportError as exc:
    raise missing_extra("pydantic_ai", "pydantic-ai (pydantic-ai-slim >= 2.0)", "pydantic-ai", exc) from exc

if TYPE_CHECKING:
    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.run import AgentRunResult

    from memlane.memory import AsyncMemory
    from memlane.sync import Memory

__all__ = [
    "CONTEXT_LIMIT",
    "events_to_messages",
    "load_history",
    "messages_to_events",
    "run_with_memory",
    "run_with_memory_sync",
    "save_messages",
]

OutputT = TypeVar("OutputT")

#: KAOS ``MEMORY_CONTEXT_LIMIT``: events of the session replayed to the model when the engine
#: says nothing else (its ``recall_config.context_limit``, the settings' ``sessions.context_limit``).
CONTEXT_LIMIT = DEFAULT_CONTEXT_LIMIT

_REQUEST_TYPES = frozenset({EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED, EventType.TOOL_RESULT})
_RESPONSE_TYPES = frozenset({EventType.AGENT_RESPONSE, EventType.TOOL_CALL})
_OUTCOMES = ("success", "failed", "denied", "interrupted", "retried")


# --------------------------------------------------------------------------- events -> messages


def events_to_messages(events: Iterable[Event]) -> list[ModelMessage]:
    """memlane events as pydantic-ai message history (see the module docstring's table).

    A ``tool_call`` / ``tool_result`` without a ``tool_call_id`` in its metadata (events
    written by other code) gets one: a result is paired with the latest unanswered call of
    the same tool. Pass the result through ``pydantic_ai.messages.repair_messages`` (as
    :func:`load_history` does) when the events are a window that may cut a call from its
    return.
    """
    messages: list[ModelMessage] = []
    open_calls: dict[str, list[str]] = {}  # tool name -> unanswered call ids, for events without ids
    for is_request, group in itertools.groupby(
        (e for e in _checked(events) if e.type in _REQUEST_TYPES | _RESPONSE_TYPES),
        key=lambda e: e.type in _REQUEST_TYPES,
    ):
        batch = list(group)
        if is_request:
            request_parts = [p for p in (_request_part(e, open_calls) for e in batch) if p is not None]
            if request_parts:
                messages.append(ModelRequest(parts=request_parts, timestamp=batch[0].timestamp))
        else:
            response_parts = [p for p in (_response_part(e, open_calls) for e in batch) if p is not None]
            if response_parts:
                messages.append(ModelResponse(parts=response_parts, timestamp=batch[0].timestamp))
    return messages


def _checked(events: Iterable[Event]) -> Iterable[Event]:
    if isinstance(events, Event | str) or not isinstance(events, Iterable):
        raise InvalidInputError(f"events must be a list of Event, got {inputs.show(events)}")
    for event in events:
        if not isinstance(event, Event):
            raise InvalidInputError(f"events must be Event objects, got {inputs.show(event)}")
        yield event


def _request_part(event: Event, open_calls: dict[str, list[str]]) -> ModelRequestPart | None:
    if event.type is EventType.TOOL_RESULT:
        name = _tool_name(event)
        call_id = event.metadata.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            pending = open_calls.get(name)
            call_id = pending.pop() if pending else f"memlane-{event.id}"
        else:
            pending = open_calls.get(name, [])
            if call_id in pending:
                pending.remove(call_id)
        outcome = event.metadata.get("outcome", "success")
        return ToolReturnPart(
            tool_name=name,
            content=event.content,
            tool_call_id=call_id,
            timestamp=event.timestamp,
            outcome=outcome if outcome in _OUTCOMES else "success",
        )
    text = event.text
    if not text.strip():
        return None
    return UserPromptPart(content=text, timestamp=event.timestamp)


def _response_part(event: Event, open_calls: dict[str, list[str]]) -> ModelResponsePart | None:
    if event.type is EventType.TOOL_CALL:
        name = _tool_name(event)
        call_id = event.metadata.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"memlane-{event.id}"
        open_calls.setdefault(name, []).append(call_id)
        args = event.content
        if args is not None and not isinstance(args, str | dict):
            args = json.dumps(args)
        return ToolCallPart(tool_name=name, args=args, tool_call_id=call_id)
    text = event.text
    return TextPart(content=text) if text.strip() else None


def _tool_name(event: Event) -> str:
    name = event.metadata.get("tool_name")
    if isinstance(name, str) and name:
        return name
    return event.author or "tool"


# --------------------------------------------------------------------------- messages -> events


def messages_to_events(
    messages: Sequence[ModelMessage], *, user_id: str | None = None, agent_name: str = "assistant"
) -> list[Event]:
    """pydantic-ai messages (typically ``result.new_messages()``) as memlane events, one per
    part that memlane keeps (see the module docstring), in order.

    Args:
        messages: the messages to convert.
        user_id: recorded as ``metadata["user_id"]`` on user messages (so ``forget`` finds
            the user's words in a group session).
        agent_name: the ``author`` of agent responses and tool calls; a tool result's author
            is its tool's name.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of pydantic-ai messages, got {inputs.show(messages)}")
    user_id = inputs.optional_id(user_id, "user_id")
    agent_name = inputs.identifier(agent_name, "agent_name", error=InvalidInputError)
    events: list[Event] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                event = _request_event(part, user_id, message)
                if event is not None:
                    events.append(event)
        elif isinstance(message, ModelResponse):
            for response_part in message.parts:
                event = _response_event(response_part, agent_name, message)
                if event is not None:
                    events.append(event)
        else:
            raise InvalidInputError(f"expected ModelRequest or ModelResponse, got {inputs.show(message)}")
    return events


def _request_event(part: object, user_id: str | None, message: ModelRequest) -> Event | None:
    if isinstance(part, UserPromptPart):
        text = _prompt_text(part.content)
        if not text.strip():
            return None
        meta: dict[str, Any] = {"source": "pydantic-ai"}
        if user_id is not None:
            meta["user_id"] = user_id
        return Event(type=EventType.USER_MESSAGE, author="user", content=text, timestamp=part.timestamp, metadata=meta)
    if isinstance(part, ToolReturnPart):
        meta = {"source": "pydantic-ai", "tool_name": part.tool_name, "tool_call_id": part.tool_call_id}
        if part.outcome != "success":
            meta["outcome"] = part.outcome
        return Event(
            type=EventType.TOOL_RESULT,
            author=part.tool_name,
            content=_jsonable(part),
            timestamp=part.timestamp,
            metadata=meta,
        )
    return None


def _response_event(part: object, agent_name: str, message: ModelResponse) -> Event | None:
    if isinstance(part, TextPart):
        if not part.content.strip():
            return None
        meta: dict[str, Any] = {"source": "pydantic-ai"}
        if message.model_name:
            meta["model_name"] = message.model_name
        return Event(
            type=EventType.AGENT_RESPONSE,
            author=agent_name,
            content=part.content,
            timestamp=message.timestamp,
            metadata=meta,
        )
    if isinstance(part, ToolCallPart):
        args: Any = part.args
        if isinstance(args, dict):
            try:
                json.dumps(args)
            except (TypeError, ValueError):
                args = part.args_as_json_str()
        return Event(
            type=EventType.TOOL_CALL,
            author=agent_name,
            content=args,
            timestamp=message.timestamp,
            metadata={"source": "pydantic-ai", "tool_name": part.tool_name, "tool_call_id": part.tool_call_id},
        )
    return None


def _prompt_text(content: object) -> str:
    """A user prompt's text: the string, or the text items of a multi-part prompt (files and
    images are not stored)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(item for item in content if isinstance(item, str))
    return ""


def _jsonable(part: ToolReturnPart) -> Any:
    """A tool's return value as JSON data (what the session store keeps); values JSON cannot
    hold become the text pydantic-ai sends the model."""
    try:
        value = pydantic_core.to_jsonable_python(part.content)
        json.dumps(value)
        return value
    except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
        return part.model_response_str(wrap_if_error=False)


# --------------------------------------------------------------------------- a turn with memory


async def _session(
    memory: AsyncMemory, session_id: str, app: str, user_id: str | None, agent_id: str | None, *, create: bool
) -> Session | None:
    """The session (created when ``create``), checked to be ``user_id``'s.

    Raises:
        ScopeError: the session has participants and ``user_id`` is not one of them.
    """
    await memory.open()
    session: Session | None
    if create:
        session = await memory.sessions.get_or_create_session(
            session_id=session_id, app=app, user_ids=[user_id] if user_id else [], agent_id=agent_id
        )
    else:
        session = await memory.sessions.get_session(session_id, app=app)
    if session is not None and session.user_ids and user_id not in session.user_ids:
        who = f"user {user_id!r}" if user_id else "a caller without user_id"
        raise ScopeError(f"session {session_id!r} in app {app!r} is not a conversation of {who}")
    return session


async def load_history(
    memory: AsyncMemory,
    session_id: str,
    *,
    app: str = "default",
    user_id: str | None = None,
    context_limit: ConfiguredInt = CONFIGURED,
) -> list[ModelMessage]:
    """The last ``context_limit`` events of a session (None: all; by default the engine's
    ``recall_config.context_limit``, KAOS ``MEMORY_CONTEXT_LIMIT``, 6) as provider-valid
    pydantic-ai history (``repair_messages``: orphaned returns dropped, unanswered calls
    closed). An unknown session gives ``[]``.

    Raises:
        ScopeError: the session is another user's.
    """
    session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
    user_id = inputs.optional_id(user_id, "user_id")
    context_limit = _limit(memory, context_limit)
    session = await _session(memory, session_id, app, user_id, None, create=False)
    if session is None:
        return []
    return _history(session, context_limit)


def _limit(memory: AsyncMemory, context_limit: ConfiguredInt) -> int | None:
    if context_limit is CONFIGURED:
        configured = memory.recall_config.context_limit
        return CONTEXT_LIMIT if configured is None else configured
    return inputs.optional_integer(context_limit, "context_limit", 0, inputs.MAX_INT)


def _history(session: Session, context_limit: int | None) -> list[ModelMessage]:
    kept = [e for e in session.events if e.type in _REQUEST_TYPES | _RESPONSE_TYPES]
    messages = events_to_messages(window_events(kept, last_n=context_limit))
    return repair_messages(messages) if messages else []


async def save_messages(
    memory: AsyncMemory,
    session_id: str,
    messages: Sequence[ModelMessage],
    *,
    app: str = "default",
    user_id: str | None = None,
    agent_id: str | None = None,
    agent_name: str = "assistant",
) -> list[Event]:
    """Append ``messages`` (a run's ``new_messages()``) to the session as events, creating
    the session for ``user_id`` when needed. Returns the stored events.

    Raises:
        ScopeError: the session is another user's.
    """
    session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
    user_id, agent_id, _ = inputs.scope_ids(user_id, agent_id)
    events = messages_to_events(messages, user_id=user_id, agent_name=agent_name)
    await _session(memory, session_id, app, user_id, agent_id, create=True)
    return [await memory.add_event(session_id, event, app=app) for event in events]


async def run_with_memory(
    agent: AbstractAgent[Any, OutputT],
    prompt: str,
    memory: AsyncMemory,
    session_id: str,
    *,
    app: str = "default",
    user_id: str | None = None,
    agent_id: str | None = None,
    context_limit: ConfiguredInt = CONFIGURED,
    **run_kwargs: Any,
) -> AgentRunResult[OutputT]:
    """One turn of ``agent`` with memlane as its conversation memory.

    Loads the session's windowed history (:func:`load_history`, KAOS ``context_limit``: the
    engine's, 6 by default),
    runs ``agent.run(prompt, message_history=..., **run_kwargs)``, then appends the run's
    new messages to the session (:func:`save_messages`; ``agent.name`` is the responses'
    author). Nothing is stored when the run raises.

    Args:
        agent: a pydantic-ai ``Agent``.
        prompt: the user's message.
        memory: the memlane engine holding the session.
        session_id: the conversation (created for ``user_id`` on first use).
        app: the session store's app name.
        user_id: the user talking; a session with other participants is refused.
        agent_id: recorded on a newly created session.
        context_limit: events replayed (None: the whole session; default: the engine's
            ``recall_config.context_limit``).
        run_kwargs: passed to ``agent.run`` (``deps``, ``model``, ``usage_limits``, ...).

    Raises:
        ScopeError: the session is another user's.
    """
    prompt = inputs.clean_text(prompt, "prompt")
    if "message_history" in run_kwargs:
        raise InvalidInputError("run_with_memory loads message_history from memlane; do not pass it")
    session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
    user_id, agent_id, _ = inputs.scope_ids(user_id, agent_id)
    context_limit = _limit(memory, context_limit)
    session = await _session(memory, session_id, app, user_id, agent_id, create=True)
    assert session is not None
    history = _history(session, context_limit)
    result: AgentRunResult[OutputT] = await agent.run(prompt, message_history=history or None, **run_kwargs)
    await save_messages(
        memory,
        session_id,
        result.new_messages(),
        app=app,
        user_id=user_id,
        agent_id=agent_id,
        agent_name=agent.name or "assistant",
    )
    return result


def run_with_memory_sync(
    agent: AbstractAgent[Any, OutputT],
    prompt: str,
    memory: Memory,
    session_id: str,
    *,
    app: str = "default",
    user_id: str | None = None,
    agent_id: str | None = None,
    context_limit: ConfiguredInt = CONFIGURED,
    **run_kwargs: Any,
) -> AgentRunResult[OutputT]:
    """Blocking :func:`run_with_memory` for the sync :class:`memlane.Memory`: the turn (the
    agent's model calls included) runs on the memory's own loop thread.

    Raises:
        InvalidInputError: ``memory`` is not a ``memlane.Memory`` (async code: use
            :func:`run_with_memory` with an ``AsyncMemory``).
    """
    from memlane.sync import Memory

    if not isinstance(memory, Memory):
        raise InvalidInputError(
            f"memory must be a memlane.Memory, got {inputs.show(memory)} (async code: use run_with_memory)"
        )
    return memory.run(
        run_with_memory(
            agent,
            prompt,
            memory.engine,
            session_id,
            app=app,
            user_id=user_id,
            agent_id=agent_id,
            context_limit=context_limit,
            **run_kwargs,
        )
    )
