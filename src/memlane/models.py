"""memlane's domain model: events and sessions (short-term), facts (long-term),
reflections and consolidated blobs (always-in-context), scopes and search hits.

All models are pydantic v2 models; timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import quote

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from memlane.errors import ScopeError


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime; a naive datetime is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # a ValueError, so pydantic reports it as a validation error
        raise ValueError(f"{value.isoformat()} is outside the datetimes UTC can express") from None


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]
"""A datetime field normalised on validation: naive values are taken as UTC, aware ones
converted to UTC, so timestamps from different callers always compare."""


def new_id() -> str:
    """A new random identifier (hex UUID4: 122 random bits from ``os.urandom``, the version
    and variant bits set as :func:`uuid.uuid4` sets them, at a third of its cost: bulk
    ingest makes two per row)."""
    b = bytearray(os.urandom(16))
    b[6] = b[6] & 0x0F | 0x40
    b[8] = b[8] & 0x3F | 0x80
    return b.hex()


def content_hash(text: str) -> str:
    """MD5 of the whitespace-normalised text (Eden's fact ``hash``), for idempotent writes."""
    return hashlib.md5(" ".join(text.split()).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- short-term


class EventType(StrEnum):
    """The kinds of event a session records (KAOS event types)."""

    USER_MESSAGE = "user_message"
    TASK_DELEGATION_RECEIVED = "task_delegation_received"
    AGENT_RESPONSE = "agent_response"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    DELEGATION_REQUEST = "delegation_request"
    DELEGATION_RESPONSE = "delegation_response"
    ERROR = "error"


#: Event types whose text counts as a conversational turn.
TEXT_EVENT_TYPES = frozenset(
    {
        EventType.USER_MESSAGE,
        EventType.AGENT_RESPONSE,
        EventType.TASK_DELEGATION_RECEIVED,
        EventType.DELEGATION_RESPONSE,
    }
)


ChatRole = Literal["user", "assistant", "tool"]

#: Event type -> chat role: the one mapping (KAOS / Gaia) every part of memlane uses.
EVENT_ROLES: dict[EventType, ChatRole] = {
    EventType.USER_MESSAGE: "user",
    EventType.TASK_DELEGATION_RECEIVED: "user",
    EventType.AGENT_RESPONSE: "assistant",
    EventType.DELEGATION_REQUEST: "assistant",
    EventType.TOOL_CALL: "tool",
    EventType.TOOL_RESULT: "tool",
    EventType.DELEGATION_RESPONSE: "tool",
    EventType.ERROR: "tool",
}

#: Roles in chat-message dicts (``{"role": ...}``) that mean the agent spoke.
ASSISTANT_ROLES = frozenset({"assistant", "agent", "model", "ai", "bot"})


def message_role(role: object) -> Literal["user", "assistant"]:
    """A chat message's ``role`` as a conversational side: the agent's own, or the user's."""
    return "assistant" if str(role or "").strip().lower() in ASSISTANT_ROLES else "user"


class Event(BaseModel):
    """One entry of a session's ordered event log."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    """Unique event id."""
    type: EventType = EventType.USER_MESSAGE
    """What happened (user message, agent response, tool call, ...)."""
    timestamp: UtcDatetime = Field(default_factory=utcnow)
    """When it happened (UTC)."""
    author: str = "user"
    """Who produced it: ``"user"``, an agent name, a tool name, or a speaker's name."""
    content: Any = None
    """The payload: text for messages, a dict for tool calls/results."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form extra data (source channel, tool call id, ...)."""

    @property
    def text(self) -> str:
        """The event's text, or "" when its content is not text."""
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, dict):
            value = self.content.get("text")
            return value if isinstance(value, str) else ""
        return ""

    @property
    def role(self) -> str:
        """``"user"`` for incoming events, ``"assistant"`` for the agent's own, else ``"tool"``
        (see :data:`EVENT_ROLES`)."""
        return EVENT_ROLES[self.type]


class Session(BaseModel):
    """A conversation: identity plus its ordered events."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    """Session id; Gaia's stable key is ``"{user_id}:{channel}"`` (see :func:`session_key`)."""
    app: str = "default"
    """The application / agent namespace the session belongs to."""
    user_ids: list[str] = Field(default_factory=list)
    """Participants; more than one means a group session (user-scoped memory is then off)."""
    agent_id: str | None = None
    """The agent taking part, if any."""
    channel: str | None = None
    """Where the conversation happens (``"cli"``, ``"telegram"``, ...)."""
    state: dict[str, Any] = Field(default_factory=dict)
    """Free-form session state."""
    events: list[Event] = Field(default_factory=list)
    """The event log, oldest first (may be a window; see ``SessionStore.get_events``)."""
    created_at: UtcDatetime = Field(default_factory=utcnow)
    """When the session was created."""
    updated_at: UtcDatetime = Field(default_factory=utcnow)
    """When an event was last added."""

    @property
    def user_id(self) -> str | None:
        """The single user of a one-to-one session, else None."""
        return self.user_ids[0] if len(self.user_ids) == 1 else None

    @property
    def is_group(self) -> bool:
        """True when more than one user takes part."""
        return len(self.user_ids) > 1


def agent_namespace(app: str | None, agent_id: str | None = None) -> str | None:
    """The agent namespace memories of a session (or an ADK app) form under: the session's
    ``agent_id`` when set, else its app name, where ``"default"`` (and empty) means none."""
    if agent_id:
        return agent_id
    return None if app in (None, "", "default") else app


def session_key(user_id: str, channel: str) -> str:
    """Gaia's stable session id for a user on a channel: a restart resumes it."""
    return f"{user_id}:{channel}"


# --------------------------------------------------------------------------- scopes

FactScope = Literal["user", "agent", "room"]
FactKind = Literal["message", "fact", "document", "fragment", "description", "custom", "summary"]
#: Scope names ``add`` accepts: memlane's, and elizaOS's ``private`` / ``shared`` (see :data:`SCOPE_ALIASES`).
ScopeName = Literal["user", "agent", "room", "private", "shared"]
#: ``add(embed=...)``: ``now`` embeds before returning; ``high`` / ``normal`` / ``low`` queue.
EmbedPriority = Literal["now", "high", "normal", "low"]
#: elizaOS's memory scopes, as memlane's: ``private`` is the user's own, ``shared`` the agent's.
SCOPE_ALIASES: dict[str, FactScope] = {"private": "user", "shared": "agent"}
#: Every :data:`FactKind`, for validation.
FACT_KINDS: tuple[str, ...] = ("message", "fact", "document", "fragment", "description", "custom", "summary")
ReflectionScope = Literal["session", "user", "agent"]


@dataclass(frozen=True)
class PartitionFilter:
    """Which storage partitions a read may touch: exact keys, plus every partition whose key
    starts with one of ``prefixes`` (a user's partitions across all agents)."""

    exact: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()

    def matches(self, partition: str) -> bool:
        """True when ``partition`` is readable through this filter."""
        return partition in self.exact or any(partition.startswith(p) for p in self.prefixes)


@dataclass(frozen=True)
class Scope:
    """Who a memory belongs to. Every store query is filtered by a scope.

    The memory model, in one table:

    ========================  ===============================================================
    scope                     reads
    ========================  ===============================================================
    ``user_id`` only          all of that user's own memories, under every agent
    ``user_id`` + ``agent_id``  the user's memories under that agent, plus the agent's shared ones
    ``agent_id`` only         the agent's shared memories (``scope="agent"``)
    + ``session_id``          narrows to that session, and adds the room's memories
                              (``scope="room"``: the agent's memory of that room, seen only
                              by reads naming the room; needs ``agent_id``)
    ========================  ===============================================================

    A scope with neither id is rejected (:class:`ScopeError`): there is no "everything" query.
    """

    user_id: str | None = None
    """The user whose memory this is."""
    agent_id: str | None = None
    """The agent / app namespace."""
    session_id: str | None = None
    """Narrows to one session when set (filter only; facts are not session-scoped)."""

    def __post_init__(self) -> None:
        for name in ("user_id", "agent_id", "session_id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ScopeError(f"{name} must be a non-empty string, got {value!r}")
        if self.user_id is None and self.agent_id is None:
            raise ScopeError("a scope needs user_id or agent_id: pass user_id=... (there is no global query)")

    def partition_filter(self, only: FactScope | None = None) -> PartitionFilter:
        """The storage partitions this scope reads (see the class docstring); ``only`` keeps
        just its user partitions or just the agent's shared one."""
        user = self.user_id if only in (None, "user") else None
        agent = self.agent_id if only in (None, "agent") else None
        if user is not None and self.agent_id is None:
            return PartitionFilter(prefixes=(user_partition_prefix(user),))
        exact = []
        if user is not None:
            exact.append(user_partition(user, self.agent_id))
        if agent is not None:
            exact.append(agent_partition(agent))
        if only in (None, "room") and self.agent_id is not None and self.session_id is not None:
            exact.append(room_partition(self.agent_id, self.session_id))
        return PartitionFilter(exact=tuple(exact))

    def write_partition(self, scope: FactScope = "user") -> str:
        """The partition a ``scope`` fact written through this scope lands in."""
        if scope == "agent":
            if self.agent_id is None:
                raise ScopeError("an agent-scoped memory needs agent_id")
            return agent_partition(self.agent_id)
        if scope == "room":
            if self.agent_id is None or self.session_id is None:
                raise ScopeError("a room memory needs agent_id and session_id (the room)")
            return room_partition(self.agent_id, self.session_id)
        if self.user_id is None:
            raise ScopeError("a user-scoped memory needs user_id")
        return user_partition(self.user_id, self.agent_id)


def _enc(part: str) -> str:
    """Percent-encode one id for a partition key: the result never contains ``|``, so keys
    of different (user, agent) pairs can never collide, whatever characters ids hold."""
    return quote(part, safe="")


def user_partition(user_id: str, agent_id: str | None) -> str:
    """Storage partition key of a user's facts within an agent namespace (``u|user|agent``)."""
    return f"{user_partition_prefix(user_id)}{_enc(agent_id or '')}"


def user_partition_prefix(user_id: str) -> str:
    """The key prefix shared by all of a user's partitions (one per agent)."""
    return f"u|{_enc(user_id)}|"


def agent_partition(agent_id: str) -> str:
    """Storage partition key of an agent's shared facts (``a|agent``)."""
    return f"a|{_enc(agent_id)}"


def room_partition(agent_id: str, room_id: str) -> str:
    """Storage partition key of an agent's memories of one room (``r|agent|room``; the room
    is a ``session_id``)."""
    return f"r|{_enc(agent_id)}|{_enc(room_id)}"


def metadata_path(key: str) -> tuple[str, ...]:
    """A filter key as a path into nested metadata: ``"sender.id"`` -> ``("sender", "id")``."""
    return tuple(key.split("."))


_MISSING = object()


def metadata_value(metadata: dict[str, Any], key: str) -> Any:
    """The value at a (dotted) filter key, or a private sentinel when absent."""
    value: Any = metadata
    for part in metadata_path(key):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


# --------------------------------------------------------------------------- search plumbing
# Shared by the engine, retrieval (pure) and every store backend.


@dataclass(frozen=True)
class FactFilter:
    """Exact-match filters pushed down into a store's queries (all must hold).

    ``metadata`` compares metadata keys to JSON scalars (str, int, float, bool, None); a key
    with dots is a path into nested objects (``"sender.id"`` is ``metadata["sender"]["id"]``).
    A number matches a number of equal value, a bool only a bool, ``None`` only a JSON null.
    """

    kind: str | None = None
    author: str | None = None
    session_id: str | None = None
    metadata: tuple[tuple[str, Any], ...] = ()

    @property
    def empty(self) -> bool:
        """True when nothing is filtered."""
        return self.kind is None and self.author is None and self.session_id is None and not self.metadata

    def in_session(self, session_id: str | None) -> FactFilter | None:
        """This filter narrowed to ``session_id`` (a scope's session); None when it already
        names another session, so nothing can match."""
        if session_id is None or self.session_id == session_id:
            return self
        if self.session_id is not None:
            return None
        return FactFilter(kind=self.kind, author=self.author, session_id=session_id, metadata=self.metadata)

    def matches(self, fact: Fact) -> bool:
        """The reference semantics every backend implements in its queries."""
        if self.kind is not None and fact.kind != self.kind:
            return False
        if self.author is not None and fact.author != self.author:
            return False
        if self.session_id is not None and fact.session_id != self.session_id:
            return False
        return all(_same_json(metadata_value(fact.metadata, k), v) for k, v in self.metadata)


def _same_json(have: Any, want: Any) -> bool:
    if have is _MISSING:
        return False
    if want is None or isinstance(want, bool):
        return have is want
    if isinstance(want, int | float):
        return isinstance(have, int | float) and not isinstance(have, bool) and have == want
    return isinstance(have, str) and have == want


@dataclass(frozen=True)
class KeywordQuery:
    """A parsed keyword query (see ``memlane.retrieval.text``)."""

    terms: tuple[str, ...]
    """Query words with stopwords removed, lowercase."""
    boost_authors: tuple[str, ...] = ()
    """Authors named in the query: the engine multiplies their memories' keyword scores by ``author_boost``."""
    author_boost: float = 2.0


@dataclass
class Candidate:
    """A store's candidate for one search list: fact id and a raw score (higher is better)."""

    fact_id: str
    score: float
    author: str | None = None
    """The memory's author (lower-case), so the engine can apply the author boost."""
    fact: Fact | None = field(default=None, compare=False, repr=False)
    """The fact itself, when the store read it with the candidate (PostgreSQL: the engine then
    does not read the hits again); None otherwise."""


# --------------------------------------------------------------------------- long-term


class Fact(BaseModel):
    """An atomic memory (Eden's fact schema) with provenance and validity.

    Everything ``add`` stores is a Fact: a plain text is ``kind="fact"`` (a statement to
    remember, as given), each chat message ``kind="message"`` (a verbatim turn), long content
    a ``document`` with its ``fragment`` rows; formation extracts ``kind="fact"`` rows.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    """Unique fact id."""
    content: str
    """The fact text; stands alone without context."""
    hash: str = ""
    """MD5 of the normalised content; writes are idempotent by hash within a scope."""
    embedding: list[float] | None = Field(default=None, repr=False)
    """The content's embedding (None when no embedder is configured)."""
    scope: FactScope = "user"
    """``user``: one user's; ``agent``: shared by all users of the agent; ``room``: the
    agent's memory of one room (``session_id``), read only by calls naming that room."""
    agent_id: str | None = None
    """The agent / app namespace."""
    user_id: str | None = None
    """Owner when ``scope == "user"``; on an agent fact, the user whose words it holds (for
    ``forget``; None when formed from a group session)."""
    session_id: str | None = None
    """Source session."""
    kind: FactKind = "fact"
    """``message``: a verbatim turn; ``fact``: an extracted or remembered statement;
    ``document``: long content kept whole (not itself searched); ``fragment``: one searchable
    piece of a document (``metadata["document_id"]``, ``["fragment"]``, ``["headings"]``);
    ``description``: a description of an entity (a profile, an agent, a relationship);
    ``custom``: an application-defined memory (name its type in ``metadata``); ``summary``: a
    formed session's summary (its time range, message count and topics in ``metadata``; see
    :class:`memlane.formation.summaries.SessionSummary`)."""
    author: str | None = None
    """Who said it (role or speaker name) for verbatim memories."""
    seq: int | None = None
    """Position within the source session (orders neighbouring turns)."""
    occurred_at: UtcDatetime | None = None
    """When the underlying event happened (a message's timestamp, a session date)."""
    formed_at: UtcDatetime = Field(default_factory=utcnow)
    """When the fact was stored."""
    updated_at: UtcDatetime = Field(default_factory=utcnow)
    """Last content change."""
    access_count: int = 0
    """How often retrieval returned it."""
    version: int = 1
    """Incremented on each UPDATE."""
    source_event_ids: list[str] = Field(default_factory=list)
    """Provenance: ids of the events it came from."""
    valid_from: UtcDatetime = Field(default_factory=lambda data: data.get("occurred_at") or utcnow())
    """From when the fact holds in the world (world time): the statement's own time
    (``occurred_at``) when it has one, else when it was stored."""
    invalid_at: UtcDatetime | None = None
    """Set when superseded or deleted; invalid facts are kept for history, not returned by
    search. World time: a formation contradiction sets it to the contradicting statement's
    time, a ``delete`` to the moment of the delete (docs/temporal.md)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form extra data."""

    @property
    def partition(self) -> str:
        """The storage partition the fact lives in."""
        if self.scope == "agent":
            if not self.agent_id:
                raise ScopeError("an agent-scoped fact needs agent_id")
            return agent_partition(self.agent_id)
        if self.scope == "room":
            if not self.agent_id or not self.session_id:
                raise ScopeError("a room memory needs agent_id and session_id (the room)")
            return room_partition(self.agent_id, self.session_id)
        if not self.user_id:
            raise ScopeError("a user-scoped fact needs user_id")
        return user_partition(self.user_id, self.agent_id)

    @property
    def is_valid(self) -> bool:
        """False once the fact was deleted or superseded."""
        return self.invalid_at is None


#: Every field of :class:`Fact`, in declaration order (:func:`checked_fact` fills them all).
FACT_FIELDS = tuple(Fact.model_fields)
_set_attr = object.__setattr__


def checked_fact(values: dict[str, Any], given: frozenset[str]) -> Fact:
    """A :class:`Fact` from ``values`` that are already what validation would make of them
    (every field of :data:`FACT_FIELDS`, in that order, each of its type: a checked text,
    UTC-aware datetimes, fresh lists and dicts), without running pydantic's validation. Bulk
    ingest builds one per turn from input :mod:`memlane.inputs` has checked (issue 22): the
    result equals ``Fact(**{k: values[k] for k in given})`` with the defaults as in
    ``values``, ``model_fields_set`` included (``given``: the fields a validated call would
    have been passed; tests/test_checked_fact.py compares both ways)."""
    fact = Fact.__new__(Fact)
    _set_attr(fact, "__dict__", values)
    _set_attr(fact, "__pydantic_fields_set__", set(given))
    _set_attr(fact, "__pydantic_extra__", None)
    _set_attr(fact, "__pydantic_private__", None)
    return fact


def fact_copy(fact: Fact, update: dict[str, Any]) -> Fact:
    """``fact.model_copy(update=update)`` (a shallow copy, ``update`` not validated, its keys
    added to the fields set) at a fraction of pydantic's cost: the SQL core copies every
    row it inserts."""
    new = Fact.__new__(Fact)
    _set_attr(new, "__dict__", {**fact.__dict__, **update})
    _set_attr(new, "__pydantic_fields_set__", fact.__pydantic_fields_set__ | update.keys())
    _set_attr(new, "__pydantic_extra__", None)
    _set_attr(new, "__pydantic_private__", None)
    return new


class HistoryEntry(BaseModel):
    """One change to a fact (ADD, UPDATE, DELETE, ...)."""

    id: str = Field(default_factory=new_id)
    fact_id: str
    """The fact changed."""
    event: Literal["ADD", "UPDATE", "DELETE", "NONE", "ACCESS"]
    """What happened."""
    old_content: str | None = None
    """Content before the change."""
    new_content: str | None = None
    """Content after the change."""
    actor: str = "api"
    """Who made it: ``api``, ``cli``, ``formation``, ..."""
    at: UtcDatetime = Field(default_factory=utcnow)
    """When."""


class TimelineEvent(BaseModel):
    """One change to one of a user's memories, for their timeline (a history row with what its
    memory is)."""

    id: str
    at: UtcDatetime
    """When the change was recorded."""
    effective_at: UtcDatetime | None = None
    """The world time it took effect (None on rows recorded before bi-temporal memory)."""
    fact_id: str
    event: Literal["ADD", "UPDATE", "DELETE", "NONE", "ACCESS"]
    old_content: str | None = None
    new_content: str | None = None
    actor: str
    kind: FactKind
    """The memory's kind (``fact``, ``message``, ``document``, ...)."""
    scope: FactScope


class Timeline(BaseModel):
    """A page of a user's timeline, newest first; pass ``next_before`` as ``before`` for the
    next (older) page (None: no more)."""

    events: list[TimelineEvent]
    next_before: UtcDatetime | None = None


class GrowthPoint(BaseModel):
    """One bucket of a user's memory growth."""

    start: date
    """The bucket's first day (a day, a Monday, or the first of a month; UTC)."""
    added: int
    """Memories recorded in the bucket (their ``formed_at``)."""
    invalidated: int
    """Memories that stopped holding in the bucket (their ``invalid_at``)."""
    valid: int
    """Memories valid at the bucket's end: all added up to then minus all invalidated."""


class Growth(BaseModel):
    """A user's memory growth, oldest bucket first, through the bucket holding today."""

    bucket: Literal["day", "week", "month"]
    points: list[GrowthPoint]


class Identity(BaseModel):
    """One sender on one channel, linked to the user it is (Gaia's dispatcher: ``("telegram",
    "sam")`` and ``("sms", "+15550100")`` both resolve to user ``sam``, one memory)."""

    model_config = ConfigDict(extra="forbid")

    channel: str
    """Where the message came from (``"telegram"``, ``"sms"``, ``"whatsapp"``, ...)."""
    sender: str
    """Who sent it, as the channel names them (a handle, a phone number)."""
    user_id: str
    """The canonical user the sender is."""
    linked_at: UtcDatetime = Field(default_factory=utcnow)
    """When the link was made."""


class Reflection(BaseModel):
    """An interpreted memory waiting to be consolidated (Eden's schema)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    content: str
    """The reflection (at most 35 words when formed by an LLM)."""
    scope: ReflectionScope
    """session / user / agent."""
    agent_id: str | None = None
    user_id: str | None = None
    """Set when ``scope == "user"``."""
    session_id: str | None = None
    """Source session (always populated by formation)."""
    absorbed: bool = False
    """True once merged into a consolidated blob."""
    formed_at: UtcDatetime = Field(default_factory=utcnow)
    source_user_ids: list[str] = Field(default_factory=list, repr=False)
    """Users whose conversation it was formed from (set by formation, written by the store so
    ``forget`` can erase agent-scope reflections). Write-only: reads return it empty, so the
    users of an agent do not learn each other's ids."""


class ConsolidatedMemory(BaseModel):
    """A versioned blob merging a scope's reflections (Eden's schema)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    scope: ReflectionScope
    agent_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    consolidated_content: str = ""
    """The merged blob, starting with ``VERSION: n``."""
    word_limit: int
    """Max words for this blob (agent 1200, user 300, session 200)."""
    version: int = 0
    """Incremented on every consolidation."""
    unabsorbed_ids: list[str] = Field(default_factory=list)
    """Pending reflection ids."""
    last_consolidated_at: UtcDatetime | None = None


class ConsolidatedVersion(BaseModel):
    """One version of a scope's consolidated blob, as it was written."""

    version: int
    content: str
    """The blob's text at that version (starting ``VERSION: n``)."""
    word_limit: int
    consolidated_at: UtcDatetime | None = None
    """When that version was written (None only for a blob stored without the time)."""

    @property
    def word_count(self) -> int:
        """Words in ``content``."""
        return len(self.content.split())


# --------------------------------------------------------------------------- formation jobs

JobStatus = Literal["queued", "running", "done", "failed"]


class Job(BaseModel):
    """A durable memory-formation job (``form``: a session's new turns; ``infer``:
    ``add(infer=True)``; ``consolidate``: one scope's reflection buffer merged into its blob now)."""

    id: str = Field(default_factory=new_id)
    kind: Literal["form", "infer", "consolidate"]
    key: str
    """Jobs with the same key (one session) never run at the same time."""
    user_id: str | None = None
    """Owner, for ``forget``."""
    status: JobStatus = "queued"
    """``queued`` (waiting or retrying), ``running``, ``done``, ``failed`` (retries used up; ``retry_job``)."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """What to form (session, messages, options)."""
    state: dict[str, Any] = Field(default_factory=dict)
    """Checkpointed step outputs: a replay reuses them instead of calling the model again."""
    result: dict[str, Any] | None = None
    """Summary once done: changes, reflections, consolidations, usage."""
    attempts: int = 0
    max_attempts: int = 8
    last_error: str | None = None
    next_run_at: UtcDatetime = Field(default_factory=utcnow)
    created_at: UtcDatetime = Field(default_factory=utcnow)
    updated_at: UtcDatetime = Field(default_factory=utcnow)
    worker: str | None = None
    """The worker holding (or last holding) the job's lease."""
    lease_until: UtcDatetime | None = None
    """While ``running``: when the lease expires unless the worker renews it."""


class FormationCursor(BaseModel):
    """Per-session formation bookkeeping: what was formed, what is pending, last activity."""

    app: str
    session_id: str
    user_ids: list[str] = Field(default_factory=list)
    agent_id: str | None = None
    tier: int = 0
    last_event_id: str | None = None
    """Last event already formed (formation resumes after it)."""
    formed_events: int = 0
    pending_messages: int = 0
    """Messages since the last formation was triggered."""
    pending_tokens: float = 0.0
    """Weighted tokens since the last formation was triggered."""
    last_activity_at: UtcDatetime = Field(default_factory=utcnow)
    last_formed_at: UtcDatetime | None = None


# --------------------------------------------------------------------------- search results


class Hit(BaseModel):
    """One search result."""

    fact: Fact
    """The matching fact."""
    score: float
    """Relevance within this search, higher is better, above 0 for every hit (a hit needs a
    keyword match or a cosine above the floor). Under the default ``blend`` fusion: a keyword
    part (0.01 for the query's weakest keyword match .. 1.0 for its best) plus a vector part
    ((cosine - 0.28) / 0.72), so about 0 .. 2; with ``fusion="rrf"`` an RRF score (about 0 ..
    0.033); 1.0 for ``mode="substring"``. See docs/retrieval.md, "What a score means"."""
    keyword_rank: int | None = None
    """1-based rank in the keyword list, None when absent from it."""
    vector_rank: int | None = None
    """1-based rank in the vector list, None when absent from it."""
    keyword_score: float | None = None
    """Keyword relevance (negated BM25: higher is better)."""
    vector_score: float | None = None
    """Cosine similarity (-1 .. 1)."""


class SearchResult(BaseModel):
    """What ``search`` returns: hits plus, with ``debug=True``, per-stage timings."""

    hits: list[Hit] = Field(default_factory=list)
    """Ranked results, best first."""
    debug: dict[str, Any] | None = None
    """Per-stage timings (ms) and candidate lists when ``debug=True``."""

    def __len__(self) -> int:
        return len(self.hits)

    @property
    def facts(self) -> list[Fact]:
        """The facts of the hits, best first."""
        return [h.fact for h in self.hits]


class CheckReport(BaseModel):
    """What :meth:`~memlane.AsyncMemory.check` found: ``ok`` when the storage is healthy,
    else one line per problem (damaged pages, broken indexes, an inconsistent full-text index)."""

    ok: bool
    problems: list[str] = Field(default_factory=list)
    location: str = ""
    """The database checked."""


class Page(BaseModel):
    """A page of a listing; pass ``next_cursor`` back as ``cursor`` for the next.

    A page is a sequence of its items: ``for f in page``, ``len(page)`` (this page's items,
    not ``total``) and ``page[0]`` work on :attr:`items`."""

    items: list[Fact]
    next_cursor: str | None = None
    total: int

    def __iter__(self) -> Iterator[Fact]:  # type: ignore[override]  # items, not pydantic's (field, value) pairs
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Fact:
        return self.items[index]


# --------------------------------------------------------------------------- directory


class UserActivity(BaseModel):
    """One user of a store, as the directory lists it (``AsyncMemory.users``): counts only,
    no content. A store reports the counts it holds (a fact store its facts, a session store
    its sessions); the engine adds them up."""

    user_id: str
    facts: int = 0
    """The user's own memories (user scope), valid or not."""
    valid_facts: int = 0
    """Of which not invalidated."""
    sessions: int = 0
    """Sessions the user takes part in (every app)."""
    last_activity: UtcDatetime | None = None
    """The latest change of the user's memories or sessions (None: no time known)."""


class UserPage(BaseModel):
    """A page of :class:`UserActivity` sorted by ``user_id``; pass ``next_cursor`` back as
    ``cursor`` for the next page (None: this is the last)."""

    users: list[UserActivity]
    next_cursor: str | None = None


class AgentCount(BaseModel):
    """An agent namespace and how many memories it holds (its users' and its shared ones)."""

    agent_id: str
    facts: int = 0


class AppCount(BaseModel):
    """An app (session namespace) and how many sessions it holds."""

    app: str
    sessions: int = 0


class Directory(BaseModel):
    """The agents and apps a store knows (``AsyncMemory.directory``), sorted by name."""

    agents: list[AgentCount] = Field(default_factory=list)
    apps: list[AppCount] = Field(default_factory=list)


# --------------------------------------------------------------------------- review queue

ProposalAction = Literal["add", "update", "delete"]
ProposalStatus = Literal["pending", "approved", "rejected", "stale"]
PROPOSAL_ACTIONS: tuple[ProposalAction, ...] = ("add", "update", "delete")
PROPOSAL_STATUSES: tuple[ProposalStatus, ...] = ("pending", "approved", "rejected", "stale")


class Proposal(BaseModel):
    """A change to long-term memory waiting for a human (``AsyncMemory.propose``, or formation
    in review mode): applied through formation's write path only once a reviewer approves it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_id)
    action: ProposalAction
    """``add`` a fact; ``update`` the target's text; ``delete`` the target (with ``text``: the
    statement that replaces it, stored as a new fact)."""
    text: str | None = None
    """The fact to store (``add``, a ``delete``'s replacement) or the target's new text
    (``update``); after an edited approval, the text applied."""
    target_id: str | None = None
    """The fact an ``update`` / ``delete`` changes."""
    target_version: int | None = None
    """The target's version when proposed: a target changed since makes the proposal ``stale``."""
    reason: str | None = None
    """Why (the caller's words, or formation's decision)."""
    provenance: dict[str, Any] = Field(default_factory=dict)
    """Where it came from: ``origin`` (``api``, ``formation``, ``tool``), ``source_event_ids``,
    formation's ``job``, ``occurred_at``."""
    scope: FactScope = "user"
    """The scope the fact is (or would be) stored in: a target's own scope."""
    user_id: str | None = None
    """The user it is about (on an agent fact: the contributor)."""
    agent_id: str | None = None
    session_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Stored on the fact an approval adds."""
    status: ProposalStatus = "pending"
    """``pending``, ``approved`` (applied), ``rejected``, ``stale`` (its target changed or went
    before the review: not applied)."""
    created_at: UtcDatetime = Field(default_factory=utcnow)
    reviewed_at: UtcDatetime | None = None
    reviewer: str | None = None
    """Who reviewed it: the actor of the history rows an approval writes."""
    result_id: str | None = None
    """The fact an approval stored or changed."""
    result_event: Literal["ADD", "UPDATE", "DELETE", "NONE"] | None = None
    """What the approval did once core policy resolved it (``NONE``: the text was stored already)."""
    edited_from: str | None = None
    """The proposed text, when the reviewer approved an edited one."""
