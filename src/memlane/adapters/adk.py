"""Google ADK adapter: memlane as an ADK ``BaseMemoryService`` and ``BaseSessionService``.

Needs the ``adk`` extra (``pip install 'memlane[adk]'``). Both services wrap one memlane
memory, an :class:`~memlane.memory.AsyncMemory` or a sync :class:`~memlane.sync.Memory`
(whose engine then keeps running on its own loop thread; the services await it from the ADK
loop without blocking it)::

    memory = AsyncMemory("agent.db")
    runner = Runner(
        app_name="concierge", agent=agent,
        session_service=MemlaneSessionService(memory),
        memory_service=MemlaneMemoryService(memory),
    )

Mapping (see docs/adapters.md):

* ``app_name`` is memlane's agent namespace (:func:`memlane.models.agent_namespace`:
  ``"default"`` means none), ``user_id`` is memlane's ``user_id``. Memories of one
  ``(app_name, user_id)`` are never visible under another user or another app.
* Each ADK event with text becomes one verbatim memory (``kind="message"``) keeping its author
  and timestamp; a session with several users, or none, goes to the app's shared memory.
* ADK sessions are memlane sessions (``app=app_name``, ``user_ids=[user_id]``), keyed by
  ``(app_name, user_id, session_id)`` as in ADK: the memlane id is :func:`memlane_session_key`
  (``"USER/ID"``, the user id percent-encoded); every ADK event
  is stored as a memlane :class:`~memlane.models.Event` of the matching type (user text ->
  ``user_message``, model text -> ``agent_response``, function call -> ``tool_call``, function
  response -> ``tool_result``) carrying the full ADK event JSON in ``metadata["adk_event"]``,
  so it reads back exactly.
* State: session state is the state given at creation plus every stored event's
  ``state_delta``; ``user:`` and ``app:`` state live in one hidden memlane session per user
  (``memlane-adk:user-state:USER``) and per app (``memlane-adk:app-state``) as an
  append-only log of deltas; ``temp:`` state is never stored (ADK semantics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

from memlane import inputs
from memlane._binding import Binding
from memlane.adapters import missing_extra
from memlane.agent.config import CONFIGURED, Configured
from memlane.agent.context import escape_memory_text
from memlane.errors import InvalidInputError, NotFoundError, ScopeError
from memlane.memory import AsyncMemory
from memlane.models import Event, EventType, Fact, Hit, agent_namespace, new_id
from memlane.models import Session as MemlaneSession
from memlane.sessions import check_json
from memlane.stores.base import SessionStore
from memlane.sync import Memory

try:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event as AdkEvent
    from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
    from google.adk.sessions.session import Session as AdkSession
    from google.adk.sessions.state import State
    from google.genai import types
except ImportError as exc:
    raise missing_extra("adk", "Google ADK (google-adk >= 2.13)", "adk", exc) from exc

__all__ = [
    "ADK_EVENT_KEY",
    "AdkSessionExistsError",
    "AdkSessionNotFoundError",
    "MemlaneMemoryService",
    "MemlaneSessionService",
    "from_adk_event",
    "memlane_session_key",
    "to_adk_event",
]

log = logging.getLogger("memlane")

T = TypeVar("T")

#: Key of :attr:`memlane.models.Event.metadata` holding the full ADK event (JSON).
ADK_EVENT_KEY = "adk_event"
#: Session ids starting with this are the adapter's own state logs, not ADK sessions.
RESERVED_PREFIX = "memlane-adk:"
_APP_STATE_ID = f"{RESERVED_PREFIX}app-state"
_STATE_DELTA_KEY = "adk_state_delta"
_STATE_AUTHOR = "memlane-adk"
#: ``Session.channel`` of the memlane sessions holding ADK sessions under
#: :func:`memlane_session_key` (sessions of earlier versions have none and their plain id).
ADK_CHANNEL = "adk"
#: Most memories one search returns by default: the engine's ``recall_config.recall_limit``
#: (Gaia's ``memory.recall_limit``, 5: ADK's ``load_memory`` routes to ``search_memory``).
DEFAULT_TOP_K = CONFIGURED
#: Candidates read when the app has no namespace (app ``"default"``), before keeping the app's own.
_WIDE_TOP_K = 100


class AdkSessionExistsError(InvalidInputError, AlreadyExistsError):
    """``create_session`` with an id already used in the app. Both memlane's
    :class:`~memlane.errors.InvalidInputError` and ADK's ``AlreadyExistsError`` (``adk web``
    answers 409)."""

    def __init__(self, message: str) -> None:
        InvalidInputError.__init__(self, message)
        self.message = message


class AdkSessionNotFoundError(NotFoundError, SessionNotFoundError):
    """``append_event`` to a session that does not exist for this app and user. Both
    memlane's :class:`~memlane.errors.NotFoundError` and ADK's ``SessionNotFoundError``."""


# --------------------------------------------------------------------------- engine access


class _Engine(Binding):
    """One memlane engine, awaited on its own loop (a sync ``Memory``'s thread) or directly."""

    def __init__(self, memory: AsyncMemory | Memory, who: str) -> None:
        super().__init__(memory, who=f"{who}(memory)")
        self.engine: AsyncMemory = self.require(who)

    async def sessions(self) -> SessionStore:
        await self.run(self.engine.open())
        return self.engine.sessions


def _name(value: object, what: str) -> str:
    """A required ADK id (``app_name``, ``user_id``, ``session_id``)."""
    return inputs.identifier(value, what)


def _session_id(value: object) -> str:
    sid = _name(value, "session_id")
    if sid.startswith(RESERVED_PREFIX):
        raise InvalidInputError(f"session ids starting with {RESERVED_PREFIX!r} are reserved for memlane's ADK state")
    return sid


def _user_state_id(user_id: str) -> str:
    return f"{RESERVED_PREFIX}user-state:{user_id}"


def memlane_session_key(user_id: str, session_id: str) -> str:
    """The memlane session id this adapter stores the ADK session ``(user_id, session_id)``
    under: ``"<user_id>/<session_id>"``, the user id percent-encoded (``quote(user_id,
    safe="")``: ``/``, ``:``, ``%`` and other reserved characters as ``%XX``), so two users'
    ``"main"`` are two memlane sessions and no pair of ids maps to another pair's key.
    Sessions created before this scheme keep their plain id (see
    :meth:`MemlaneSessionService.memlane_session_id`)."""
    return f"{quote(user_id, safe='')}/{session_id}"


# --------------------------------------------------------------------------- event mapping


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _text(content: types.Content | None) -> str:
    """The visible text of a content: its text parts (model thoughts left out)."""
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text and not p.thought)


def from_adk_event(event: AdkEvent) -> Event:
    """An ADK event as a memlane :class:`Event`: user text -> ``user_message``, model text ->
    ``agent_response``, function calls -> ``tool_call`` (``{"name", "args"}``, or
    ``{"calls": [...]}`` for several), function responses -> ``tool_result``
    (``{"name", "response"}`` / ``{"results": [...]}``), an error without text -> ``error``. The
    whole ADK event is kept as JSON in ``metadata["adk_event"]`` (see :func:`to_adk_event`)."""
    if not isinstance(event, AdkEvent):
        raise InvalidInputError(f"expected a google.adk Event, got {inputs.show(event)}")
    dumped: dict[str, Any] = json.loads(event.model_dump_json(exclude_none=True))
    parts: list[dict[str, Any]] = (dumped.get("content") or {}).get("parts") or []
    calls = [p["function_call"] for p in parts if "function_call" in p]
    results = [p["function_response"] for p in parts if "function_response" in p]
    text = _text(event.content)
    meta: dict[str, Any] = {ADK_EVENT_KEY: dumped}
    content: Any
    if calls:
        etype = EventType.TOOL_CALL
        if len(calls) == 1:
            content = {"name": calls[0].get("name"), "args": calls[0].get("args") or {}}
            if calls[0].get("id"):
                meta["tool_call_id"] = calls[0]["id"]
        else:
            content = {
                "calls": [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args") or {}} for c in calls]
            }
    elif results:
        etype = EventType.TOOL_RESULT
        if len(results) == 1:
            content = {"name": results[0].get("name"), "response": results[0].get("response")}
            if results[0].get("id"):
                meta["tool_call_id"] = results[0]["id"]
        else:
            content = {
                "results": [{"id": r.get("id"), "name": r.get("name"), "response": r.get("response")} for r in results]
            }
    elif not text and (event.error_code or event.error_message):
        etype = EventType.ERROR
        content = {"code": event.error_code, "message": event.error_message}
    else:
        role = event.content.role if event.content is not None else None
        is_user = role == "user" or (role is None and event.author == "user")
        etype = EventType.USER_MESSAGE if is_user else EventType.AGENT_RESPONSE
        content = text or None
    return Event(
        id=event.id or AdkEvent.new_id(),
        type=etype,
        timestamp=_utc(event.timestamp),
        author=event.author or ("user" if etype == EventType.USER_MESSAGE else "agent"),
        content=content,
        metadata=meta,
    )


def to_adk_event(event: Event) -> AdkEvent:
    """A stored memlane event as an ADK event: the exact ADK event when this adapter wrote it,
    else one built from its type, author, time and text (tool calls and results included)."""
    raw = event.metadata.get(ADK_EVENT_KEY)
    if isinstance(raw, dict):
        try:
            return AdkEvent.model_validate_json(json.dumps(raw))
        except ValueError as exc:  # written by another ADK version: fall back to the memlane fields
            log.warning("memlane: stored ADK event %s did not validate (%s); rebuilt from its fields", event.id, exc)
    parts: list[types.Part] = []
    payload = event.content if isinstance(event.content, dict) else {}
    call_id = event.metadata.get("tool_call_id")
    if event.type == EventType.TOOL_CALL and isinstance(payload.get("name"), str):
        args = payload.get("args")
        parts.append(
            types.Part(
                function_call=types.FunctionCall(
                    name=payload["name"], args=args if isinstance(args, dict) else {}, id=call_id
                )
            )
        )
    elif event.type == EventType.TOOL_RESULT and isinstance(payload.get("name"), str):
        response = payload.get("response")
        parts.append(
            types.Part(
                function_response=types.FunctionResponse(
                    name=payload["name"],
                    response=response if isinstance(response, dict) else {"result": response},
                    id=call_id,
                )
            )
        )
    elif event.text:
        parts.append(types.Part(text=event.text))
    role = "user" if event.role == "user" or event.type == EventType.TOOL_RESULT else "model"
    return AdkEvent(
        id=event.id,
        invocation_id="",
        author=event.author,
        timestamp=event.timestamp.timestamp(),
        content=types.Content(role=role, parts=parts) if parts else None,
    )


def _split_state(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state or state delta, prefixes removed; ``temp:`` dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise InvalidInputError(f"state keys must be strings, got {inputs.show(key)}")
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _json_state(value: dict[str, Any], what: str) -> dict[str, Any]:
    """``value`` as the JSON data a later read returns (InvalidInputError when not JSON)."""
    out: dict[str, Any] = json.loads(check_json(what, value))
    return out


def _merge(session: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    merged = dict(session)
    merged.update({State.APP_PREFIX + k: v for k, v in app.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return merged


def _event_delta(event: AdkEvent) -> dict[str, Any]:
    return dict(event.actions.state_delta) if event.actions and event.actions.state_delta else {}


# --------------------------------------------------------------------------- memory service


class MemlaneMemoryService(BaseMemoryService):
    """ADK's ``BaseMemoryService`` over memlane long-term memory (hybrid keyword + vector search).

    Args:
        memory: the memlane memory (:class:`AsyncMemory`, or a sync :class:`Memory`).
        top_k: most memories one ``search_memory`` returns (1..100); by default the engine's
            ``recall_config.recall_limit`` (Gaia's ``memory.recall_limit``, 5; the settings'
            ``memory.recall_limit`` / ``MEMLANE_RECALL_LIMIT``), read on each search.
        escape: return each memory's text and author as one line of prompt-safe text, escaped
            as in memlane's ``<MemoryContext>`` block (``&``, ``<``, ``>`` and look-alikes as
            entities, line breaks as spaces, invisible controls removed). ADK's
            ``preload_memory`` pastes them as ``author: text`` lines between
            ``<PAST_CONVERSATIONS>`` tags, so a stored memory could otherwise close that tag or
            start a line posing as a turn. ``False`` returns the text as stored.

    Scoping: ``(app_name, user_id)`` reads the user's memories under the app's namespace plus
    the app's shared memories (from group sessions); app ``"default"`` is memlane's un-namespaced
    user memory, and never shows what the user stored under another app.
    """

    def __init__(
        self, memory: AsyncMemory | Memory, *, top_k: int | Configured = DEFAULT_TOP_K, escape: bool = True
    ) -> None:
        self._engine = _Engine(memory, "MemlaneMemoryService")
        self._top_k = top_k if top_k is CONFIGURED else inputs.integer(top_k, "top_k", 1, 100)
        self.escape = inputs.flag(escape, "escape")

    @property
    def memory(self) -> AsyncMemory:
        """The memlane engine this service writes to and reads from."""
        return self._engine.engine

    @property
    def top_k(self) -> int:
        """Most memories one ``search_memory`` returns (the engine's ``recall_limit`` unless
        given)."""
        return self.memory.recall_config.recall_limit if self._top_k is CONFIGURED else self._top_k

    # ---- writes
    async def add_session_to_memory(self, session: AdkSession | MemlaneSession) -> None:
        """Store each event with text as one verbatim memory (author and timestamp kept;
        re-adding a session stores nothing twice). Accepts an ADK ``Session`` or a memlane
        :class:`~memlane.models.Session`; a session with several users, or none, goes to the
        app's shared memory, never into one user's."""
        if isinstance(session, MemlaneSession):
            await self._add_memlane_session(session)
            return
        if not isinstance(session, AdkSession):
            raise InvalidInputError(
                f"session must be a google.adk Session (or a memlane Session), got {inputs.show(session)}"
            )
        app_name = _name(session.app_name, "session.app_name")
        user_id = session.user_id if isinstance(session.user_id, str) and session.user_id.strip() else None
        await self._add_adk_events(app_name, user_id, session.events, _name(session.id, "session.id"), {})

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[AdkEvent],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store these events (a delta, e.g. the latest turn) like :meth:`add_session_to_memory`;
        ``custom_metadata`` is kept on every memory (JSON)."""
        app_name, user_id = _name(app_name, "app_name"), _name(user_id, "user_id")
        session_id = inputs.optional_id(session_id, "session_id")
        meta = inputs.metadata(custom_metadata, "custom_metadata")
        if not isinstance(events, Sequence) or isinstance(events, str | bytes):
            raise InvalidInputError(f"events must be a list of google.adk Events, got {inputs.show(events)}")
        await self._add_adk_events(app_name, user_id, events, session_id, meta)

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store explicit memories verbatim (``kind="fact"``, memlane's ``remember``): each
        entry's text, with its author and timestamp (ISO 8601) and ``custom_metadata`` merged
        over the entry's own. Every entry is checked before anything is written."""
        app_name, user_id = _name(app_name, "app_name"), _name(user_id, "user_id")
        meta = inputs.metadata(custom_metadata, "custom_metadata")
        if not isinstance(memories, Sequence) or isinstance(memories, str | bytes):
            raise InvalidInputError(f"memories must be a list of google.adk MemoryEntry, got {inputs.show(memories)}")
        rows: list[tuple[str, datetime | None, dict[str, Any]]] = []
        for i, entry in enumerate(memories):
            if not isinstance(entry, MemoryEntry):
                raise InvalidInputError(f"memories[{i}] must be a google.adk MemoryEntry, got {inputs.show(entry)}")
            text = inputs.clean_text(_text(entry.content), f"memories[{i}] text")
            when = inputs.timestamp(entry.timestamp, f"memories[{i}] timestamp")
            extra = inputs.metadata(entry.custom_metadata, f"memories[{i}] custom_metadata")
            if entry.author:
                extra["author"] = entry.author
            rows.append((text, when, inputs.metadata({**extra, **meta}, f"memories[{i}] metadata")))
        ns = agent_namespace(app_name)
        for text, when, row_meta in rows:
            await self._engine.run(
                self.memory.add(text, user_id=user_id, agent_id=ns, metadata=row_meta, timestamp=when)
            )

    async def _add_memlane_session(self, session: MemlaneSession) -> None:
        events = [e for e in session.events if inputs.has_visible(e.text)]
        if not events:
            return
        ns = agent_namespace(session.app, session.agent_id)
        if session.is_group or session.user_id is None:
            if ns is None:
                raise ScopeError("a group session needs an app name to be stored as the app's shared memory")
            await self._engine.run(self.memory.add(events, agent_id=ns, session_id=session.id, scope="agent"))
            return
        await self._engine.run(self.memory.add(events, user_id=session.user_id, agent_id=ns, session_id=session.id))

    async def _add_adk_events(
        self,
        app_name: str,
        user_id: str | None,
        events: Sequence[AdkEvent],
        session_id: str | None,
        metadata: dict[str, Any],
    ) -> None:
        messages: list[dict[str, Any]] = []
        for i, event in enumerate(events):
            if not isinstance(event, AdkEvent):
                raise InvalidInputError(f"events[{i}] must be a google.adk Event, got {inputs.show(event)}")
            if event.partial:
                continue
            text = _text(event.content)
            if not inputs.has_visible(text):
                continue
            role = (event.content.role if event.content is not None else None) or (
                "user" if event.author == "user" else "model"
            )
            messages.append(
                {
                    "role": "user" if role == "user" else "assistant",
                    "name": event.author or role,
                    "content": text,
                    "timestamp": _utc(event.timestamp),
                    "id": event.id or None,
                    "metadata": {"adk_role": role},
                }
            )
        ns = agent_namespace(app_name)
        if user_id is not None and messages:
            deleted = await self._deleted_event_ids(user_id, ns, session_id)
            messages = [m for m in messages if m["id"] is None or m["id"] not in deleted]
        if not messages:
            return
        if user_id is None:
            if ns is None:
                raise ScopeError("a session without a user needs an app name to be stored as the app's shared memory")
            coro = self.memory.add(messages, agent_id=ns, session_id=session_id, metadata=metadata, scope="agent")
        else:
            coro = self.memory.add(messages, user_id=user_id, agent_id=ns, session_id=session_id, metadata=metadata)
        await self._engine.run(coro)

    async def _deleted_event_ids(self, user_id: str, ns: str | None, session_id: str | None) -> set[str]:
        """Ids of the ADK events whose memories the user deleted (in this session when given):
        adding them again stores nothing, as ADK's in-memory service never re-ingests a
        deleted memory. Reads the user's message memories of the session, deleted ones
        included."""
        filters = {"session_id": session_id} if session_id is not None else None
        ids: set[str] = set()
        cursor: str | None = None
        while True:
            page = await self._engine.run(
                self.memory.list(
                    user_id=user_id,
                    agent_id=ns,
                    kind="message",
                    filters=filters,
                    include_invalid=True,
                    limit=1000,
                    cursor=cursor,
                )
            )
            for fact in page.items:
                if fact.invalid_at is not None and fact.scope == "user" and fact.agent_id == ns:
                    ids.update(fact.source_event_ids)
            cursor = page.next_cursor
            if cursor is None:
                return ids

    # ---- reads
    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The ``(app_name, user_id)`` memories matching ``query``, best first (at most
        ``top_k``), as ADK ``MemoryEntry`` objects: text content, author, ISO-8601 UTC
        timestamp, the memlane fact id as ``id``. A blank query finds nothing.

        Ranked by memlane's relevance (keyword + meaning), not by the number of query words
        matched as ADK's in-memory service; equal scores keep the order the memories were
        added in. A memory can match through its neighbouring turns (memlane indexes each
        message with its neighbours), so the turn beside the one holding the words is found
        too, ranked below it."""
        app_name, user_id = _name(app_name, "app_name"), _name(user_id, "user_id")
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {inputs.show(query)}")
        if not inputs.has_visible(query):
            return SearchMemoryResponse()
        ns = agent_namespace(app_name)
        limit = self.top_k
        top_k = limit if ns is not None else _WIDE_TOP_K
        result = await self._engine.run(self.memory.search(query, user_id=user_id, agent_id=ns, top_k=top_k))
        hits = result.hits if ns is not None else [h for h in result.hits if h.fact.agent_id is None]
        # Equal scores (to 6 decimals: cosines are float32, so one similarity can differ in
        # its 7th digit between two texts): the memory added first comes first, as ADK's
        # in-memory service keeps equal matches in insertion order (fusion breaks such ties
        # by list rank, arbitrary among equal cosines, then by random fact id).
        hits = sorted(hits, key=lambda h: (-round(h.score, 6), h.fact.formed_at, h.fact.seq or 0))
        return SearchMemoryResponse(memories=[_entry(h, self.escape) for h in hits[:limit]])

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Delete one of the user's own memories under this app by the ``MemoryEntry.id``
        :meth:`search_memory` returned (soft delete: it leaves search, history keeps it).
        Adding the same ADK event again (``add_session_to_memory`` of the whole session after
        the next turn) does not bring it back, as in ADK's in-memory service.

        Raises:
            InvalidInputError: no ``memory_id``.
            NotFoundError: no such memory of this user in this app (the app's shared memories
                are not the user's to delete); nothing changed.
        """
        app_name, user_id = _name(app_name, "app_name"), _name(user_id, "user_id")
        if memory_id is None:
            raise InvalidInputError("delete_memory needs memory_id: the MemoryEntry.id that search_memory returned")
        memory_id = inputs.identifier(memory_id, "memory_id", error=InvalidInputError)
        ns = agent_namespace(app_name)
        try:
            fact = await self._engine.run(self.memory.get(memory_id, user_id=user_id, agent_id=ns))
        except NotFoundError:
            fact = None
        if fact is None or fact.scope != "user" or fact.user_id != user_id or fact.agent_id != ns:
            raise NotFoundError(f"no memory {memory_id!r} of user {user_id!r} in app {app_name!r}")
        await self._engine.run(self.memory.delete(memory_id, user_id=user_id, agent_id=ns))


def _entry(hit: Hit, escape: bool) -> MemoryEntry:
    fact: Fact = hit.fact
    meta = dict(fact.metadata)
    role = meta.pop("adk_role", None)
    if role not in ("user", "model"):
        role = "user" if fact.author in (None, "user") else "model"
    author = fact.author or meta.pop("author", None)
    author = author if isinstance(author, str) else None
    content = fact.content
    if escape:
        content = escape_memory_text(content, one_line=True)
        if author is not None:
            author = escape_memory_text(author, one_line=True) or None
    when = fact.occurred_at or fact.formed_at
    return MemoryEntry(
        id=fact.id,
        content=types.Content(role=role, parts=[types.Part(text=content)]),
        author=author,
        timestamp=when.isoformat(),
        custom_metadata=meta,
    )


# --------------------------------------------------------------------------- session service


class MemlaneSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` over memlane's session store (``memory.sessions``): with the
    default ``sqlite`` store, ADK sessions are durable in memlane's database file.

    By default (``form=False``) events are written to the store directly, so memlane's own
    formation triggers and idle timer do not run on ADK sessions: ingest with the memory
    service's ``add_session_to_memory`` (ADK's explicit model), or call ``memory.form(await
    service.memlane_session_id(...), app=app_name)`` yourself. With ``form=True`` events go
    through ``memory.add_event``: after an agent reply, 45 messages or 1500 weighted tokens
    queue a formation job, and a session silent for 30 minutes is formed (then cleared, unless
    ``FormationConfig(clear_on_idle=False)``). Formed facts land in the user's memory under the
    app (``agent_namespace(app_name)``), where :class:`MemlaneMemoryService` searches.

    Sessions are keyed by ``(app_name, user_id, session_id)`` as in ADK: two users of one app
    may each have a session ``"main"``. Each is the memlane session
    :func:`memlane_session_key` ``(user_id, session_id)`` (``"alice/main"``, channel ``"adk"``)
    of app ``app_name``; a session stored by an earlier version under its plain id is still
    found under that id. Another user's ``get_session`` of the same id never finds it and
    their ``delete_session`` deletes nothing.
    """

    def __init__(self, memory: AsyncMemory | Memory, *, form: bool = False) -> None:
        self._engine = _Engine(memory, "MemlaneSessionService")
        self.form = inputs.flag(form, "form")

    @property
    def memory(self) -> AsyncMemory:
        """The memlane engine whose session store holds the sessions."""
        return self._engine.engine

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return await self._engine.run(coro)

    async def _owned(self, store: SessionStore, app_name: str, user_id: str, session_id: str) -> MemlaneSession | None:
        """The memlane session holding ``(app_name, user_id, session_id)``: the one under
        :func:`memlane_session_key`, else (stored by an earlier version) the user's own
        session under the plain id."""
        key = memlane_session_key(user_id, session_id)
        if len(key) <= inputs.MAX_ID_CHARS:
            found = await self._call(store.get_session(key, app=app_name))
            if found is not None and found.user_ids == [user_id] and found.channel == ADK_CHANNEL:
                return found
        found = await self._call(store.get_session(session_id, app=app_name))
        if found is None or found.user_ids != [user_id] or found.channel == ADK_CHANNEL:
            return None
        return found

    async def memlane_session_id(self, *, app_name: str, user_id: str, session_id: str) -> str | None:
        """The memlane session id holding this ADK session (for ``memory.form(id,
        app=app_name)``, memlane's HTTP API or CLI), None when ``(app_name, user_id)`` has no
        such session: :func:`memlane_session_key` for sessions this version created, the
        plain ``session_id`` for sessions of earlier versions."""
        app_name, user_id, session_id = _name(app_name, "app_name"), _name(user_id, "user_id"), _session_id(session_id)
        found = await self._owned(await self._engine.sessions(), app_name, user_id, session_id)
        return None if found is None else found.id

    @staticmethod
    def _adk_id(found: MemlaneSession, user_id: str) -> str:
        """The ADK session id of a memlane session owned by ``user_id``."""
        prefix = memlane_session_key(user_id, "")
        if found.channel == ADK_CHANNEL and found.id.startswith(prefix):
            return found.id.removeprefix(prefix)
        return found.id

    # ---- state logs
    async def _state_log(self, store: SessionStore, app_name: str, log_id: str) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for event in await self._call(store.get_events(log_id, app=app_name)):
            delta = event.metadata.get(_STATE_DELTA_KEY)
            if isinstance(delta, dict):
                state.update(delta)
        return state

    async def _app_user_state(
        self, store: SessionStore, app_name: str, user_id: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        return (
            await self._state_log(store, app_name, _APP_STATE_ID),
            await self._state_log(store, app_name, _user_state_id(user_id)),
        )

    async def _write_state(
        self, store: SessionStore, app_name: str, user_id: str, app: dict[str, Any], user: dict[str, Any]
    ) -> None:
        for log_id, users, delta in ((_APP_STATE_ID, [], app), (_user_state_id(user_id), [user_id], user)):
            if not delta:
                continue
            await self._call(store.get_or_create_session(session_id=log_id, app=app_name, user_ids=users))
            entry = Event(type=EventType.TOOL_RESULT, author=_STATE_AUTHOR, metadata={_STATE_DELTA_KEY: delta})
            await self._call(store.add_event(log_id, entry, app=app_name))

    def _to_adk(
        self,
        found: MemlaneSession,
        app_name: str,
        user_id: str,
        app: dict[str, Any],
        user: dict[str, Any],
        config: GetSessionConfig | None = None,
    ) -> AdkSession:
        events = [to_adk_event(e) for e in found.events]
        state = dict(found.state)
        for event in events:
            state.update(_split_state(_event_delta(event))[2])
        # ADK's services: the last appended event's timestamp (exact: read from the stored ADK
        # event), else the creation time; never the time the store wrote the row.
        last = events[-1].timestamp if events else found.created_at.timestamp()
        if config is not None:
            if config.after_timestamp is not None:
                events = [e for e in events if e.timestamp >= config.after_timestamp]
            if config.num_recent_events is not None:
                events = events[-config.num_recent_events :] if config.num_recent_events else []
        return AdkSession(
            id=self._adk_id(found, user_id),
            app_name=app_name,
            user_id=user_id,
            state=_merge(state, app, user),
            events=events,
            last_update_time=last,
        )

    # ---- BaseSessionService
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """Create a session for ``(app_name, user_id)``; ``app:`` / ``user:`` keys of ``state``
        update the app / user state, ``temp:`` keys are dropped. Another user of the app may
        hold the same id (ADK's semantics).

        Raises:
            AdkSessionExistsError: this user already has that id in this app (also ADK's
                ``AlreadyExistsError``).
            InvalidInputError: blank ids, a reserved id, state that is not a JSON dict, or a
                ``session_id`` too long for memlane's key with this ``user_id``
                (:func:`memlane_session_key` at most 256 characters).
        """
        app_name, user_id = _name(app_name, "app_name"), _name(user_id, "user_id")
        if isinstance(session_id, str):
            session_id = session_id.strip() or None  # ADK: a blank id means "generate one"
        session_id = new_id() if session_id is None else _session_id(session_id)
        key = memlane_session_key(user_id, session_id)
        if len(key) > inputs.MAX_ID_CHARS:
            raise InvalidInputError(
                f"session_id is too long for user {user_id!r}: memlane stores it as {key[:40]!r}..., "
                f"{len(key)} characters, and the limit is {inputs.MAX_ID_CHARS}"
            )
        if state is not None and not isinstance(state, dict):
            raise InvalidInputError(f"state must be a dict, got {inputs.show(state)}")
        app, user, own = _split_state(state or {})
        app, user = _json_state(app, "app state"), _json_state(user, "user state")
        own = _json_state(own, "session state")
        store = await self._engine.sessions()
        exists = AdkSessionExistsError(
            f"session {session_id!r} of user {user_id!r} already exists in app {app_name!r}; get_session resumes it"
        )
        if await self._owned(store, app_name, user_id, session_id) is not None:
            raise exists
        try:
            created = await self._call(
                store.create_session(app=app_name, user_ids=[user_id], session_id=key, state=own, channel=ADK_CHANNEL)
            )
        except InvalidInputError:
            if await self._call(store.get_session(key, app=app_name)) is not None:
                raise exists from None  # created meanwhile, or a memlane session of that id
            raise
        await self._write_state(store, app_name, user_id, app, user)
        app_state, user_state = await self._app_user_state(store, app_name, user_id)
        return self._to_adk(created, app_name, user_id, app_state, user_state)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        """The session with its events (``config``: ``num_recent_events`` keeps the newest N,
        ``after_timestamp`` those at or after a time) and its state merged with the app's and
        the user's; None when ``(app_name, user_id)`` has no such session. ``last_update_time``
        is the last appended event's timestamp (else the creation time), as in ADK."""
        app_name, user_id, session_id = _name(app_name, "app_name"), _name(user_id, "user_id"), _session_id(session_id)
        if config is not None and not isinstance(config, GetSessionConfig):
            raise InvalidInputError(f"config must be a google.adk GetSessionConfig, got {inputs.show(config)}")
        store = await self._engine.sessions()
        found = await self._owned(store, app_name, user_id, session_id)
        if found is None:
            return None
        app_state, user_state = await self._app_user_state(store, app_name, user_id)
        return self._to_adk(found, app_name, user_id, app_state, user_state, config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The app's sessions (of one user when ``user_id`` is given), oldest
        ``last_update_time`` first (then user, then id, as ADK's in-memory service), without
        events, each with its merged state. Memlane group sessions (several users) are not ADK
        sessions and are left out. Reads every listed session's events (its state is built
        from them)."""
        app_name = _name(app_name, "app_name")
        if user_id is not None:
            user_id = _name(user_id, "user_id")
        store = await self._engine.sessions()
        app_state = await self._state_log(store, app_name, _APP_STATE_ID)
        user_states: dict[str, dict[str, Any]] = {}
        out: list[AdkSession] = []
        for listed in await self._call(store.list_sessions(app=app_name, user_id=user_id)):
            if listed.id.startswith(RESERVED_PREFIX) or len(listed.user_ids) != 1:
                continue
            owner = listed.user_ids[0]
            if user_id is not None and owner != user_id:
                continue
            found = await self._call(store.get_session(listed.id, app=app_name))
            if found is None:  # deleted meanwhile
                continue
            if owner not in user_states:
                user_states[owner] = await self._state_log(store, app_name, _user_state_id(owner))
            session = self._to_adk(found, app_name, owner, app_state, user_states[owner])
            session.events = []
            out.append(session)
        out.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=out)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events if ``(app_name, user_id)`` owns it (else nothing
        happens, as in ADK). User and app state stay."""
        app_name, user_id, session_id = _name(app_name, "app_name"), _name(user_id, "user_id"), _session_id(session_id)
        store = await self._engine.sessions()
        found = await self._owned(store, app_name, user_id, session_id)
        if found is not None:
            await self._call(store.delete_session(found.id, app=app_name))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` state in this app, keys without the prefix."""
        app_name, user_id = _name(app_name, "app_name"), _name(user_id, "user_id")
        store = await self._engine.sessions()
        return await self._state_log(store, app_name, _user_state_id(user_id))

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        """Persist ``event`` and apply it to ``session`` (ADK's semantics: partial events are
        not stored, ``temp:`` state lives in the in-memory session only, ``app:`` / ``user:``
        deltas update the app / user state, ``session.last_update_time`` becomes the event's
        timestamp, which ``get_session`` then returns too). An event already appended (same
        id, equal) is not stored twice.

        Raises:
            AdkSessionNotFoundError: ``session`` does not exist for its app and user; nothing
                changed (also ADK's ``SessionNotFoundError``).
            InvalidInputError: not an ADK session / event, or state that is not JSON.
        """
        if not isinstance(session, AdkSession):
            raise InvalidInputError(f"session must be a google.adk Session, got {inputs.show(session)}")
        if not isinstance(event, AdkEvent):
            raise InvalidInputError(f"event must be a google.adk Event, got {inputs.show(event)}")
        if event.partial:
            return event
        app_name, user_id = _name(session.app_name, "session.app_name"), _name(session.user_id, "session.user_id")
        session_id = _session_id(session.id)
        if any(e is event or (e.id == event.id and e == event) for e in session.events):
            return event
        store = await self._engine.sessions()
        found = await self._owned(store, app_name, user_id, session_id)
        if found is None:
            raise AdkSessionNotFoundError(
                f"no session {session_id!r} of user {user_id!r} in app {app_name!r}; create_session first"
            )
        # Check everything that could fail before anything changes (the caller's session included).
        trimmed = event.model_copy(deep=True)
        trimmed = self._trim_temp_delta_state(trimmed)
        app, user, _own = _split_state(_event_delta(trimmed))
        app, user = _json_state(app, "app state delta"), _json_state(user, "user state delta")
        stored = from_adk_event(trimmed)
        if self.form:  # through the engine: formation triggers and the idle timer run
            await self._call(self.memory.add_event(found.id, stored, app=app_name))
        else:
            await self._call(store.add_event(found.id, stored, app=app_name))
        await self._write_state(store, app_name, user_id, app, user)
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)
