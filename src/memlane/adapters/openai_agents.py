"""OpenAI Agents SDK conversation history over memlane: :class:`MemlaneSession`, an
``agents`` ``Session``.

``Runner.run(agent, text, session=MemlaneSession("alice:chat", memory, user_id="alice"))``
keeps the conversation in memlane's session store (the SQLite file by default), so a restart
resumes it, and, with ``form=True`` (the default), memlane forms it into long-term memory
like any memlane session::

    from agents import Agent, Runner
    from memlane import AsyncMemory
    from memlane.adapters.openai_agents import MemlaneSession

    async with AsyncMemory("memory.db") as memory:
        session = MemlaneSession("alice:chat", memory, user_id="alice")
        result = await Runner.run(agent, "Hi, I'm Alice", session=session)

How items map onto memlane (see docs/adapters.md):

* Each item is one memlane :class:`~memlane.models.Event` that keeps the item's JSON whole in
  ``metadata["openai_item"]``, so ``get_items`` returns exactly what ``add_items`` was given.
  The event type follows the item: a user message is ``user_message``, an assistant message
  ``agent_response``, a system or developer message ``task_delegation_received`` (instructions
  given to the agent); a tool call (``function_call`` and every other ``*_call``, MCP
  requests) is ``tool_call`` and its output (``*_output``, MCP responses) ``tool_result``;
  anything else (reasoning, item references, compaction) is kept as ``tool_result`` with the
  item as its content. Message events carry their text as content, so memlane's formation,
  context and search read them like any conversation; a user message's event also records
  ``metadata["user_id"]``, so ``forget`` finds it in a group session.
* Events a memlane session got from elsewhere (memlane's own chat loop, another adapter) are
  read back as ``{"role": "user" | "assistant", "content": text}`` items when they are text
  turns; other foreign events are left out.
* The session belongs to ``user_id`` in ``app``: it is created with that user as its only
  participant, and a session id that already belongs to another user is refused with
  :class:`~memlane.errors.ScopeError`, so one user can never read or change another's
  conversation. Session ids are unique per app: use per-user ids (``session_key(user, "chat")``).
* ``pop_item`` removes the newest event in one transaction; ``clear_session`` deletes the
  session and its events (nothing is formed: call ``memory.form`` or ``memory.reset_session``
  first to keep what was said).
* ``form=True`` appends through :meth:`~memlane.AsyncMemory.add_event`, so the formation
  triggers and the idle timer apply; by default an idle session (30 min) is formed and then
  cleared (``FormationConfig(clear_on_idle=False)`` keeps it). ``form=False`` writes to the
  session store only.
* As with ``SQLiteSession``: ``session_settings`` defaults to ``SessionSettings()`` and a dict
  is normalised into one (unknown keys raise ``TypeError``); an item that is not a dict of JSON
  data raises :class:`SessionItemError` (also a ``TypeError``) and nothing of its batch is
  written; after :meth:`MemlaneSession.close` every call raises :class:`SessionClosedError`
  (also a ``RuntimeError``). ``close`` closes the memory only when the session opened it
  itself (``memory`` given as a database path); a memory you passed in stays open.
"""

from __future__ import annotations

import json
import os
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar, cast

from memlane import inputs
from memlane._binding import Binding
from memlane.adapters import missing_extra
from memlane.errors import InvalidInputError, ScopeError, UsageError
from memlane.memory import AsyncMemory
from memlane.models import Event, EventType, Session
from memlane.sync import Memory

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:
    raise missing_extra("openai_agents", "the OpenAI Agents SDK (openai-agents >= 0.24)", "openai-agents", exc) from exc

__all__ = ["ITEM_KEY", "MemlaneSession", "SessionClosedError", "SessionItemError", "event_type_of", "item_to_event"]

T = TypeVar("T")

#: Event metadata key holding the item's JSON.
ITEM_KEY = "openai_item"

_CALL_TYPES = frozenset({"mcp_approval_request", "mcp_list_tools"})
_RESULT_TYPES = frozenset({"mcp_approval_response"})


class SessionItemError(InvalidInputError, TypeError):
    """An item ``add_items`` cannot store: not a dict, or not JSON data (an ``object()``, a
    ``set``). Also a ``TypeError``, what the SDK's ``SQLiteSession`` raises for such an item;
    nothing of the batch was written."""


class SessionClosedError(UsageError, RuntimeError):
    """A call on a session after its ``close()``. Also a ``RuntimeError``, what the SDK's
    ``SQLiteSession`` raises after its ``close()``: make a new session to go on."""


def event_type_of(item: Mapping[str, Any]) -> EventType:
    """The memlane event type an Agents SDK item is stored as (see the module docstring)."""
    kind = item.get("type")
    role = item.get("role")
    if kind in (None, "message") and role is not None:
        if role == "user":
            return EventType.USER_MESSAGE
        if role == "assistant":
            return EventType.AGENT_RESPONSE
        return EventType.TASK_DELEGATION_RECEIVED  # system / developer: instructions to the agent
    if isinstance(kind, str):
        if kind.endswith("_output") or kind in _RESULT_TYPES:
            return EventType.TOOL_RESULT
        if kind.endswith("_call") or kind in _CALL_TYPES:
            return EventType.TOOL_CALL
    return EventType.TOOL_RESULT


def _message_text(content: Any) -> str:
    """The text of a message's content: a string, or the text / refusal of its parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, Mapping):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                texts.append(text)
    return "\n".join(texts)


def item_to_event(item: Mapping[str, Any], *, user_id: str | None = None, agent_name: str | None = None) -> Event:
    """An Agents SDK item as a memlane event keeping the item's JSON (``metadata["openai_item"]``);
    a user message also records ``metadata["user_id"]`` (so ``forget`` finds it in a group session)."""
    if not isinstance(item, Mapping):
        raise SessionItemError(f"a session item must be a dict, got {inputs.show(item)}")
    try:
        data = json.loads(json.dumps(item, ensure_ascii=False))  # plain JSON, as SQLiteSession stores it
    except (TypeError, ValueError) as exc:
        raise SessionItemError(f"a session item must be JSON data: {exc}") from None
    etype = event_type_of(data)
    content: Any
    if etype is EventType.USER_MESSAGE:
        author, content = "user", _message_text(data.get("content"))
    elif etype is EventType.AGENT_RESPONSE:
        author, content = agent_name or "assistant", _message_text(data.get("content"))
    elif etype is EventType.TASK_DELEGATION_RECEIVED:
        author, content = str(data.get("role")), _message_text(data.get("content"))
    else:
        name = data.get("name")
        author = name if isinstance(name, str) and name else "tool"
        content = {k: data[k] for k in ("type", "name", "call_id") if isinstance(data.get(k), str)}
    metadata: dict[str, Any] = {ITEM_KEY: data}
    if etype is EventType.USER_MESSAGE and user_id is not None:
        metadata["user_id"] = user_id
    return Event(type=etype, author=author, content=content, metadata=metadata)


def _event_to_item(event: Event) -> TResponseInputItem | None:
    item = event.metadata.get(ITEM_KEY)
    if isinstance(item, dict):
        return cast(TResponseInputItem, item)
    if event.type is EventType.USER_MESSAGE and event.text:
        return cast(TResponseInputItem, {"role": "user", "content": event.text})
    if event.type is EventType.AGENT_RESPONSE and event.text:
        return cast(TResponseInputItem, {"role": "assistant", "content": event.text})
    return None


class MemlaneSession:
    """An OpenAI Agents SDK ``Session`` over a memlane session (see the module docstring).

    Args:
        session_id: the conversation's id (the memlane session id in ``app``).
        memory: an :class:`memlane.AsyncMemory` or a sync :class:`memlane.Memory`, or a
            database path (as ``SQLiteSession``'s ``db_path``; ``":memory:"`` for a throwaway
            one): the session then opens a :class:`memlane.Memory` on it with memlane's
            defaults and closes it in :meth:`close`.
        user_id: the user the conversation belongs to.
        app: the memlane app the session lives in.
        agent_id: the agent taking part (memlane's agent namespace for formed memories; also
            the author of the assistant's messages).
        form: append through ``memory.add_event`` (formation triggers, idle timer); False
            writes to the session store only.
        session_settings: the Agents SDK's settings (``limit``: default history size), a
            ``SessionSettings`` or a dict of its fields (normalised as ``SQLiteSession`` does:
            an unknown key raises ``TypeError``); None: ``SessionSettings()``.
    """

    session_settings: SessionSettings

    def __init__(
        self,
        session_id: str,
        memory: AsyncMemory | Memory | str | os.PathLike[str],
        *,
        user_id: str,
        app: str = "default",
        agent_id: str | None = None,
        form: bool = True,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = inputs.identifier(session_id, "session_id")
        self.user_id = inputs.identifier(user_id, "user_id")
        self.app = inputs.identifier(app, "app")
        self.agent_id = inputs.optional_id(agent_id, "agent_id")
        self.form = inputs.flag(form, "form")
        self.session_settings = (
            SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
        )
        self._closed = False
        if not isinstance(memory, AsyncMemory | Memory | str | os.PathLike):
            raise InvalidInputError(
                f"memory must be a memlane AsyncMemory or Memory, or a database path, got {inputs.show(memory)}"
            )
        # Opened last, once every argument is known good: nothing is left open by a bad call.
        self._owned: Memory | None = None if isinstance(memory, AsyncMemory | Memory) else Memory(memory)
        self._binding = Binding(self._owned or cast(AsyncMemory | Memory, memory))
        self._engine: AsyncMemory = self._binding.require("MemlaneSession")

    @property
    def memory(self) -> AsyncMemory:
        """The memlane engine the conversation lives in (the one the session opened itself
        when ``memory`` was a path)."""
        return self._engine

    # ------------------------------------------------------------------ Session protocol
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation, oldest first; ``limit`` keeps the newest N items (default
        ``session_settings.limit``; None: all)."""
        self._check_open()
        return await self._run(self._get_items(resolve_session_limit(limit, self.session_settings)))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items, in order.

        Raises:
            SessionItemError: an item is not a dict of JSON data (also a ``TypeError``);
                nothing of the batch was written.
        """
        self._check_open()
        events = [
            item_to_event(cast(Mapping[str, Any], i), user_id=self.user_id, agent_name=self.agent_id) for i in items
        ]
        if events:
            await self._run(self._add_events(events))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (None when the session is empty)."""
        self._check_open()
        return await self._run(self._pop_item())

    async def clear_session(self) -> None:
        """Delete every item (the session itself is deleted; the next item starts it again)."""
        self._check_open()
        await self._run(self._clear())

    def close(self) -> None:
        """End this session object: later calls raise :class:`SessionClosedError` (also a
        ``RuntimeError``, as ``SQLiteSession``'s do). The conversation stays stored. A memory
        the session opened itself (``memory`` given as a path) is closed; a memory passed in
        stays open for its other users. Idempotent."""
        self._closed = True
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(
                f"{type(self).__name__} is closed (session {self.session_id!r}): make a new session to go on"
            )

    # ------------------------------------------------------------------ on the engine's loop
    async def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return await self._binding.run(coro)

    async def _session(self, *, create: bool) -> Session | None:
        """The session with its events, checked to be this user's (created when asked)."""
        await self._engine.open()
        store = self._engine.sessions
        session: Session | None
        if create:
            session = await store.get_or_create_session(
                session_id=self.session_id, app=self.app, user_ids=[self.user_id], agent_id=self.agent_id
            )
        else:
            session = await store.get_session(self.session_id, app=self.app)
        if session is not None and self.user_id not in session.user_ids:
            raise ScopeError(f"session {self.session_id!r} in app {self.app!r} belongs to another user")
        return session

    async def _get_items(self, limit: int | None) -> list[TResponseInputItem]:
        session = await self._session(create=False)
        if session is None or limit == 0:
            return []
        items = [i for i in map(_event_to_item, session.events) if i is not None]
        # SQLiteSession: a negative limit means no limit; foreign events that are not items do not count
        return items if limit is None or limit < 0 else items[-limit:]

    async def _add_events(self, events: list[Event]) -> None:
        await self._session(create=True)
        for event in events:
            if self.form:
                await self._engine.add_event(self.session_id, event, app=self.app)
            else:
                await self._engine.sessions.add_event(self.session_id, event, app=self.app)

    async def _pop_item(self) -> TResponseInputItem | None:
        if await self._session(create=False) is None:
            return None
        while True:
            event = await self._engine.sessions.pop_event(self.session_id, app=self.app)
            if event is None:
                return None
            item = _event_to_item(event)
            if item is not None:  # a foreign non-item event is dropped, as SQLiteSession drops bad rows
                return item

    async def _clear(self) -> None:
        if await self._session(create=False) is not None:
            await self._engine.sessions.delete_session(self.session_id, app=self.app)
