"""Storage protocols. Stores return candidates; ranking, fusion and policy live in core.

Two small contracts:

* :class:`SessionStore` — short-term memory: sessions as ordered, bounded event logs
  (KAOS / ADK API). Implementations: ``LocalSessionStore`` (in-process), ``SqliteSessionStore``
  (durable), ``NullSessionStore`` (memory disabled); KAOS's names in :mod:`memlane.compat`.
* :class:`FactStore` — long-term memory: facts with keyword and vector candidate search
  and history. Implementation: ``SqliteFactStore``.
* :class:`ReflectionStore` — always-in-context memory: reflections and consolidated blobs.
  Implementation: ``SqliteFactStore`` (the same file and class).
* :class:`JobStore` — durable formation jobs (leased, retried) and per-session formation
  cursors. Implementation: ``SqliteJobStore``.
* :class:`IdentityStore` — the identity map, ``(channel, sender) -> user_id``. Implementation:
  the SQL fact stores (``SqlFactStore``: the same database as the user's memory).

Every read takes a scope (app / user / agent) and returns nothing outside it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from memlane.models import (
    Candidate,
    ConsolidatedMemory,
    ConsolidatedVersion,
    Directory,
    Event,
    EventType,
    Fact,
    FactFilter,
    FactScope,
    FormationCursor,
    Growth,
    HistoryEntry,
    Identity,
    Job,
    KeywordQuery,
    Page,
    PartitionFilter,
    Proposal,
    Reflection,
    Scope,
    Session,
    Timeline,
    UserActivity,
)

__all__ = [
    "TENANT_META_KEY",
    "ActivityReadable",
    "AppliedChange",
    "Candidate",
    "Checkable",
    "EventCounts",
    "FactChange",
    "FactFilter",
    "FactStore",
    "IdentityStore",
    "JobStore",
    "KeywordQuery",
    "MetaStore",
    "PartitionFilter",
    "ProposalStore",
    "ReflectionStore",
    "SearchPrograms",
    "SessionStore",
    "StoreStats",
    "SyncSearchReads",
    "TemporalReadable",
    "UserDirectory",
    "UserExportable",
    "Vector",
    "VersionedBlobs",
]

Vector = npt.NDArray[np.float32]
T = TypeVar("T")


@runtime_checkable
class SessionStore(Protocol):
    """Short-term memory: sessions and their events.

    Sessions belong to an ``app``; a session id is unique within its app and a read with
    another app's name finds nothing. ``add_event`` on a full session drops the oldest
    events only where the implementation documents a bound (``LocalSessionStore``).
    """

    async def create_session(
        self,
        *,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
        session_id: str | None = None,
        state: dict[str, object] | None = None,
    ) -> Session:
        """Create a session; raises InvalidInputError if ``session_id`` exists in ``app``."""
        ...

    async def get_or_create_session(
        self,
        *,
        session_id: str,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session:
        """Return the session (with its events) or create it: idempotent."""
        ...

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        """The session with all its stored events, or None."""
        ...

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        """Sessions of ``app`` (optionally of one user), newest activity first, without events."""
        ...

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        """Every session named ``session_id``, in every app (ordered by app), without events:
        the same id may exist in several apps. Room checks read it (a room memory is keyed by
        agent and session id, not by app)."""
        ...

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        """Delete a session and its events; True if it existed."""
        ...

    async def counts(self) -> tuple[int, int]:
        """(sessions, events) in the whole store, for operators' stats."""
        ...

    async def delete_user_sessions(self, user_id: str) -> int:
        """For ``forget``: delete, in every app, the sessions whose only participant is
        ``user_id``; in group sessions, delete the user's own events (``author`` or
        ``metadata["user_id"]`` is the user) and remove the user from the participants; the
        others' events stay. Returns how many sessions and events were deleted."""
        ...

    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        """Append an event; raises NotFoundError when the session does not exist."""
        ...

    async def get_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
        *,
        app: str = "default",
    ) -> list[Event]:
        """Events oldest first, optionally filtered by type; ``limit`` keeps the newest N."""
        ...

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        """Remove and return the session's newest event atomically (an OpenAI Agents
        ``Session.pop_item``); None when the session has no events or does not exist."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...


@dataclass
class FactChange:
    """One planned change of a formation batch (see :meth:`FactStore.apply_changes`).

    ``ADD``: store ``fact``. ``UPDATE``: set ``target_id``'s text to ``text`` (``vector`` is its
    embedding). ``DELETE``: invalidate ``target_id`` and store ``fact``. ``NONE``: nothing but a
    history row on ``target_id``. Targets outside ``partition`` or already invalid are ignored
    (the change falls back to ADD), and a ``fact`` whose text is already stored valid in the
    partition is never stored twice: NONE, or, when the change replaces another valid fact
    (a DELETE, or an UPDATE to that same text), that other fact is invalidated and the result
    is a DELETE whose ``fact`` is the identical one (:func:`memlane.policy.resolve_change`).
    ``metadata``, on an UPDATE that changes the text: the target's metadata is replaced by it
    (a session summary's time range, message count and topics move with its text).
    """

    event: Literal["ADD", "UPDATE", "DELETE", "NONE"]
    partition: str
    fact: Fact | None = None
    target_id: str | None = None
    text: str | None = None
    vector: Vector | None = None
    metadata: dict[str, Any] | None = None
    windows: Vector | None = None
    """The further windows' vectors of a text longer than the encoder reads (``(k, dim)``,
    with ``vector``; :mod:`memlane.providers.embed.windows`)."""


@dataclass
class AppliedChange:
    """What a :class:`FactChange` did: the event really applied, the fact after it, the text before."""

    event: Literal["ADD", "UPDATE", "DELETE", "NONE"]
    fact: Fact
    previous: str | None = None


@dataclass
class StoreStats:
    """Counts per store, for ``memlane stats``."""

    facts: int = 0
    valid_facts: int = 0
    partitions: int = 0
    reflections: int = 0
    consolidated: int = 0
    sessions: int = 0
    events: int = 0
    embedder: str | None = None
    dim: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class FactStore(Protocol):
    """Long-term memory: facts, their keyword and vector candidates, and history.

    A backend implements storage primitives only; ranking, fusion, the author boost, the
    ADD/UPDATE/DELETE/NONE rules (:mod:`memlane.policy`) and neighbour-turn context
    (:mod:`memlane.retrieval.context`) are core policy that backends call, never re-implement.

    Contract (``memlane.testing.FactStoreContract`` checks it):
      * Writes are idempotent by content hash within a partition: putting a valid fact whose
        hash already exists returns the existing fact (``created=False``) and changes nothing.
      * Deletion is soft (``invalid_at`` set, kept in history); ``purge_user`` is the hard delete
        and leaves none of the user's text behind.
      * ``keyword_search`` scores are negated BM25 (higher is better); ``vector_search`` scores
        are cosine similarity in -1..1 (higher is better).
      * Every read names its partitions (a :class:`PartitionFilter` or a :class:`Scope`);
        there is no unscoped read. ``FactFilter`` conditions are applied inside the query,
        before ``limit``.
    """

    dim: int | None
    """Dimension of the stored vectors, None until an embedder is bound."""
    embedder_name: str | None
    """Name of the embedder the stored vectors came from."""

    async def bind_embedder(self, name: str, dim: int) -> None:
        """Record the embedder on first use; raise ``DimensionMismatchError`` /
        ``ConfigError`` when the store already holds vectors of another embedder."""
        ...

    async def put_facts(
        self,
        facts: Sequence[Fact],
        vectors: Vector | None,
        *,
        actor: str = "api",
        windows: Sequence[Vector | None] | None = None,
    ) -> list[tuple[Fact, bool]]:
        """Store facts atomically (all or none); returns (stored fact, created) per input.
        ``windows``: per fact, the vectors of its further windows when its text is longer than
        the encoder reads (``(k, dim)`` or None), stored with it; vector search scores a fact
        by its best window (:mod:`memlane.providers.embed.windows`). The engine passes it only
        when some text has windows."""
        ...

    async def get_fact(self, fact_id: str, scope: Scope) -> Fact | None:
        """One fact if it is visible from ``scope`` (valid or not), else None."""
        ...

    async def get_facts(self, fact_ids: Sequence[str], scope: Scope, *, settle: bool = True) -> dict[str, Fact]:
        """Facts by id, only those visible from ``scope``; with ``settle=False`` (a search reading
        its hits) access counts not yet written may be missing from them."""
        ...

    async def list_facts(
        self,
        scope: Scope,
        *,
        limit: int = 50,
        cursor: str | None = None,
        include_invalid: bool = False,
        filter: FactFilter | None = None,
        only: FactScope | None = None,
    ) -> Page:
        """Facts newest first, paginated by an opaque cursor (``filter`` applied in the query;
        ``only``: just the scope's partitions of that kind, as ``scope.partition_filter(only)``)."""
        ...

    async def update_fact(
        self,
        fact_id: str,
        scope: Scope,
        content: str,
        vector: Vector | None,
        *,
        actor: str = "api",
        windows: Vector | None = None,
    ) -> Fact:
        """Change a fact's content (version + 1, history row); its old window vectors go,
        ``windows`` (the new text's, as for :meth:`put_facts`) come."""
        ...

    async def invalidate_fact(self, fact_id: str, scope: Scope, *, actor: str = "api") -> Fact:
        """Soft delete: set ``invalid_at``, drop from search, keep in history."""
        ...

    async def invalidate_facts(self, fact_ids: Sequence[str], scope: Scope, *, actor: str = "api") -> list[Fact]:
        """Soft delete several facts in one transaction (a document and its fragments): all
        or none; ``NotFoundError`` when any is not visible from ``scope``."""
        ...

    async def history(self, fact_id: str, scope: Scope) -> list[HistoryEntry]:
        """All changes to a fact, oldest first."""
        ...

    async def fact_owner(self, fact_id: str) -> Scope | None:
        """The scope a fact lives in, looked up by its id alone (None: no such fact): an
        operator's lookup, for the CLI given a fact id without ``-u`` / ``-a``. The engine's
        reads and writes never use it; they name a scope first."""
        ...

    async def purge_user(self, user_id: str, *, shared: str = "erase") -> int:
        """Hard delete all of ``user_id``'s facts, history and applied batches, leaving none of
        their text in storage; returns rows removed. ``shared="erase"`` also deletes agent-scope
        facts holding the user's words; ``"keep"`` keeps them, unlinked from the user."""
        ...

    async def keyword_search(
        self,
        partitions: PartitionFilter,
        terms: Sequence[str],
        *,
        limit: int,
        filter: FactFilter | None = None,
    ) -> list[Candidate]:
        """Valid facts matching any term, best first, with their authors (for the boost)."""
        ...

    async def vector_search(
        self,
        partitions: PartitionFilter,
        vector: Vector,
        *,
        limit: int,
        filter: FactFilter | None = None,
    ) -> list[Candidate]:
        """Valid facts with embeddings, by cosine similarity, best first."""
        ...

    async def missing_embeddings(
        self, *, limit: int = 256, fact_ids: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """Valid facts without a vector, ``[(fact_id, text to embed)]``, oldest first (for
        backfill and the embedding queue); only among ``fact_ids`` when given. A document's
        text is its opening (its fragments are what search scores)."""
        ...

    async def set_embeddings(
        self, fact_ids: Sequence[str], vectors: Vector, *, windows: Sequence[Vector | None] | None = None
    ) -> None:
        """Attach vectors (and, ``windows``, the further windows' vectors as for
        :meth:`put_facts`) to existing facts."""
        ...

    async def record_access(self, fact_ids: Sequence[str]) -> None:
        """Increment ``access_count`` of retrieved facts (the SQL stores write it in the
        background: :mod:`memlane.stores.sql.access`; reads returning it see it)."""
        ...

    async def authors(self, partitions: PartitionFilter) -> list[str]:
        """Distinct authors of verbatim memories in these partitions."""
        ...

    async def apply_changes(
        self,
        changes: Sequence[FactChange],
        reflections: Sequence[Reflection] = (),
        *,
        key: str,
        actor: str = "formation",
    ) -> list[AppliedChange]:
        """Apply a formation batch atomically (all or nothing), exactly once per ``key``:
        a replay with the same key changes nothing and returns the first result. Each change
        is resolved by :func:`memlane.policy.resolve_change` against the state read inside the
        transaction. Every change writes history rows (event, old, new, actor, time)."""
        ...

    async def stats(self, scope: Scope | None = None) -> StoreStats:
        """Fact counts (whole store when ``scope`` is None: for operators, returns no content)."""
        ...

    async def memory_stamp(self, partitions: PartitionFilter) -> str:
        """An opaque token that changes whenever a fact in these partitions is added, changed
        or removed (by any process), and after a purge. Cheap: it reads counters, not facts.
        Caches of what is built from the facts (the memory context) compare it."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...


@runtime_checkable
class ReflectionStore(Protocol):
    """Always-in-context memory: reflection buffers and consolidated blobs per scope."""

    async def put_reflection(self, reflection: Reflection) -> Reflection:
        """Store a reflection in its scope's buffer."""
        ...

    async def list_reflections(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        absorbed: bool | None = None,
    ) -> list[Reflection]:
        """Reflections of one scope, oldest first."""
        ...

    async def get_consolidated(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> ConsolidatedMemory | None:
        """The scope's consolidated blob, if any."""
        ...

    async def put_consolidated(
        self, blob: ConsolidatedMemory, absorbed_ids: Sequence[str] = (), *, expected_version: int | None = None
    ) -> ConsolidatedMemory:
        """Upsert the blob and mark ``absorbed_ids`` reflections absorbed, atomically. With
        ``expected_version``, raise :class:`~memlane.errors.ConflictError` unless the stored
        blob still has that version (0 = none yet): a concurrent consolidation won."""
        ...

    async def clear_session_memory(self, *, agent_id: str | None, user_id: str | None, session_id: str) -> int:
        """Delete one session's reflections and blob (the session was cleared); returns rows removed."""
        ...

    async def reflection_stamp(self, keys: Sequence[ReflectionKey]) -> str:
        """An opaque token that changes whenever one of these scopes gains, loses or absorbs a
        reflection or gets a new consolidated blob (see :meth:`FactStore.memory_stamp`)."""
        ...

    async def purge_user(self, user_id: str, *, shared: str = "erase") -> int:
        """Hard delete the user's reflections and blobs; returns rows removed. ``shared="erase"``
        also deletes agent-scope reflections formed from the user's conversations (their
        ``source_user_ids``) and drops the blobs that absorbed them, marking the remaining
        reflections unabsorbed so the blob is rebuilt; ``"keep"`` keeps them."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...


@dataclass(frozen=True, slots=True)
class ReflectionKey:
    """One reflection scope's key, as :func:`memlane.formation.pipeline.scope_key` builds it."""

    scope: str
    agent_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class CachedContext:
    """An assembled memory context as the cache keeps it."""

    key: str
    stamp: str
    text: str
    built_at: datetime
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None


@runtime_checkable
class ContextCache(Protocol):
    """Persisted cache of assembled memory contexts (Eden: 5-minute TTL, kept with the
    session). Entries carry the memory stamps they were built from; the caller decides
    whether an entry is still good. Entries hold memory text, so erasure drops them."""

    async def get_context(self, key: str) -> CachedContext | None:
        """The entry stored under ``key``, or None."""
        ...

    async def put_context(self, entry: CachedContext) -> None:
        """Store (replace) an entry."""
        ...

    async def drop_contexts(self, *, user_id: str | None = None, session_id: str | None = None) -> int:
        """Delete the entries of a user, of a session, or (neither given) all; returns how many."""
        ...


@runtime_checkable
class TemporalReadable(Protocol):
    """An optional capability of a fact store: point-in-time reads (docs/temporal.md), the
    scope as memory held it at a record time (``as_of``) and what was true at a world time
    (``valid_at``). The SQL stores have it (:mod:`memlane.stores.sql.temporal`)."""

    async def snapshot(
        self,
        scope: Scope,
        *,
        as_of: datetime | None,
        valid_at: datetime | None,
        filter: FactFilter | None = None,
        only: FactScope | None = None,
        include_invalid: bool = False,
        vectors: bool = False,
    ) -> list[tuple[Fact, Vector | None]]:
        """The scope's facts newest first, each as it was at ``as_of`` (now when None), without
        ``embedding``; with ``vectors``, paired with its stored vector where its text then is
        its text now (else None). With ``valid_at``: the versions true in the world then, else
        those valid as of ``as_of`` (all with ``include_invalid``)."""
        ...

    async def fact_as_of(
        self, fact_id: str, scope: Scope, as_of: datetime | None, valid_at: datetime | None = None
    ) -> Fact | None:
        """One fact as it was at ``as_of`` and, with ``valid_at``, its version true then (None
        if not recorded yet or none held then); NotFoundError when ``scope`` does not see it."""
        ...


class SyncSearchReads(Protocol):
    """A fact store's search reads, blocking, inside one :meth:`SearchPrograms.run_search`
    call (on the store's own thread): the same results as the async methods of the same names."""

    def authors(self, partitions: PartitionFilter) -> list[str]:
        """:meth:`FactStore.authors`."""
        ...

    def keyword_search(
        self, partitions: PartitionFilter, terms: Sequence[str], *, limit: int, filter: FactFilter | None = None
    ) -> list[Candidate]:
        """:meth:`FactStore.keyword_search`."""
        ...

    def vector_scorer(
        self, partitions: PartitionFilter, *, limit: int, filter: FactFilter | None = None
    ) -> Callable[[Vector], list[Candidate]] | None:
        """The partitions' vectors, loaded: a function giving :meth:`FactStore.vector_search`'s
        candidates for a query vector; None when the scope is too large to score here (the
        caller then uses :meth:`FactStore.vector_search`)."""
        ...

    def get_facts(self, fact_ids: Sequence[str], scope: Scope) -> dict[str, Fact]:
        """:meth:`FactStore.get_facts` with ``settle=False``."""
        ...


@runtime_checkable
class SearchPrograms(Protocol):
    """An optional capability of a fact store: a whole small-scope search (keyword, vector
    scoring, fusion, the hits' rows) run as one blocking program on the store's thread, one
    thread hand-off instead of one per stage (issue 22). SQLite has it."""

    async def run_search(self, program: Callable[[SyncSearchReads], T]) -> T:
        """``program(reads)`` on the store's thread; its result."""
        ...


@runtime_checkable
class VersionedBlobs(Protocol):
    """An optional capability of a reflection store: every version of each consolidated blob,
    written with the blob in one transaction by :meth:`ReflectionStore.put_consolidated` and
    erased with it (``forget``, a cleared session). The SQL stores have it."""

    async def consolidated_history(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> list[ConsolidatedVersion]:
        """The scope's blob versions, newest first, at most ``limit``."""
        ...


@runtime_checkable
class ActivityReadable(Protocol):
    """An optional capability of a fact store: a user's memory over time, for the inspector's
    timeline and growth chart. Both read the user partitions of ``scope`` (the user's own
    memories, under ``scope.agent_id`` if given). The SQL stores have it
    (:mod:`memlane.stores.sql.activity`)."""

    async def timeline(self, scope: Scope, *, limit: int, before: datetime | None = None) -> Timeline:
        """Every history row of those memories recorded before ``before``, newest first, at
        least ``limit`` (1..10,000) of them when there are; ``next_before`` pages on."""
        ...

    async def growth(self, scope: Scope, *, bucket: Literal["day", "week", "month"]) -> Growth:
        """Memories added (``formed_at``) and invalidated (``invalid_at``) per UTC day, week
        (from Monday) or month, oldest first, through the bucket holding today; ``valid`` is
        the running count at each bucket's end."""
        ...


@runtime_checkable
class Checkable(Protocol):
    """An optional capability of any store: a health check of its storage (``memlane check``).
    Stores sharing one file may all implement it; the engine runs each distinct one once."""

    async def check(self) -> list[str]:
        """Integrity problems found (empty when healthy). Reads only."""
        ...


@runtime_checkable
class GroupWritable(Protocol):
    """An optional capability of a fact store: ``put_facts`` of several groups in one
    transaction (``AsyncMemory.add_many``), storing what one ``put_facts`` per group would.
    The engine calls ``put_facts`` per group on a store without it."""

    async def put_fact_groups(
        self,
        groups: Sequence[Sequence[Fact]],
        vectors: Vector | None,
        *,
        actor: str = "api",
        windows: Sequence[Vector | None] | None = None,
    ) -> list[list[tuple[Fact, bool]]]:
        """(stored fact, created) per fact, per group; ``vectors`` (and ``windows``, as for
        :meth:`FactStore.put_facts`): one row per fact of all groups."""
        ...


#: The :class:`MetaStore` key under which a service tenant's store keeps its tenant's name (the
#: hub records it on shared servers, where a place's name does not give the tenant back).
TENANT_META_KEY = "tenant"


@runtime_checkable
class MetaStore(Protocol):
    """An optional capability of a fact store: small settings kept with the data (the
    ``meta`` table), such as hash-mode redaction's key. The engine keeps such a value in
    process only on a store without it."""

    async def meta_setdefault(self, key: str, value: str) -> str:
        """``key``'s stored value; ``value`` is stored first when the key has none (atomic:
        concurrent callers all get the first value stored)."""
        ...


@runtime_checkable
class UserDirectory(Protocol):
    """An optional capability of a fact store or a session store: which users, agents and apps
    it holds data of, with counts (ids and numbers, never content), for ``AsyncMemory.users``
    and ``AsyncMemory.directory``. Each store reports what it holds (a fact store: memories,
    agents; a session store: sessions, apps); the engine adds them up. A store without it
    contributes nothing to the listings."""

    async def directory_users(
        self, *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
    ) -> builtins.list[UserActivity]:
        """The first ``limit`` users whose id sorts after ``after`` (None: from the first), by
        user id in code-point order (byte order of UTF-8). ``agent_id``: only data under this
        agent namespace (a session's agent); ``user_id``: only this user. Users of the user
        scope only (an agent's shared memories and a room's have no user)."""
        ...

    async def directory(self, *, user_id: str | None) -> Directory:
        """The agents (with their memories, shared ones included) and apps (with their
        sessions) the store holds, any order; ``user_id``: only those holding that user's data
        (counting that user's memories and sessions only)."""
        ...


@runtime_checkable
class EventCounts(Protocol):
    """An optional capability of a session store: how many events each of some sessions holds,
    in one read (the web inspector's session list; ``GET /v1/sessions`` answers
    ``event_count``). A store without it leaves the counts out."""

    async def event_counts(self, session_ids: Sequence[str], *, app: str = "default") -> dict[str, int]:
        """Each named session's number of events; sessions that do not exist are left out."""
        ...


@runtime_checkable
class UserExportable(Protocol):
    """An optional capability of any store: what it holds about one user, as JSON data, for
    ``AsyncMemory.export_user`` (sections such as ``{"facts": [...]}``; stores sharing one file
    each export their own). The engine reports a store without it as not exported."""

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The store's sections of the user's export."""
        ...


@runtime_checkable
class IdentityStore(Protocol):
    """The identity map: which user a sender on a channel is (Gaia's dispatcher). Kept in the
    long-term store, beside the user's memory; ``forget`` erases them (:meth:`purge_identities`)
    and ``export_user`` reads them (:meth:`identities`)."""

    async def link_identity(self, channel: str, sender: str, user_id: str) -> Identity:
        """Link ``(channel, sender)`` to ``user_id`` (again: nothing changes, the first link is
        returned); ``ConflictError`` when it is linked to another user."""
        ...

    async def unlink_identity(self, channel: str, sender: str, *, user_id: str | None = None) -> bool:
        """Remove the link (only when it is ``user_id``'s, if given); True when one went."""
        ...

    async def resolve_identity(self, channel: str, sender: str) -> Identity | None:
        """The link of ``(channel, sender)``, or None."""
        ...

    async def identities(self, user_id: str) -> list[Identity]:
        """The user's links, by channel then sender."""
        ...

    async def purge_identities(self, user_id: str) -> int:
        """For ``forget``: delete the user's links; how many."""
        ...


@runtime_checkable
class ProposalStore(Protocol):
    """An optional capability of a fact store: the review queue (docs/review.md). Proposed
    changes wait in the store until a reviewer approves (applied as :meth:`FactStore.apply_changes`
    applies a formation batch, history naming the reviewer) or rejects them. ``forget`` erases a
    user's proposals with their facts (``purge_user``); ``export_user`` includes them."""

    async def put_proposals(self, proposals: Sequence[Proposal], *, missing: str = "raise") -> list[Proposal]:
        """Queue proposals (a known id changes nothing), recording each target's current version;
        a target that is not a valid fact in the proposal's scope raises ``NotFoundError``
        (``missing="add"``: the proposal becomes an ``add`` of its text)."""
        ...

    async def get_proposal(self, proposal_id: str) -> Proposal | None:
        """One proposal by id (the caller checks whose it is), or None."""
        ...

    async def list_proposals(
        self, *, user_id: str | None = None, agent_id: str | None = None, status: str | None = None, limit: int = 50
    ) -> builtins.list[Proposal]:
        """Proposals of a user, of an agent, or of a user under an agent (at least one is
        named), newest first."""
        ...

    async def review_proposal(
        self,
        proposal_id: str,
        *,
        approve: bool,
        reviewer: str,
        edit: str | None = None,
        vector: Vector | None = None,
    ) -> Proposal:
        """Approve (apply, in one transaction, unless the target changed since: then ``stale``)
        or reject a pending proposal. ``ConflictError`` when it was decided already."""
        ...


@runtime_checkable
class JobStore(Protocol):
    """Durable formation jobs and per-session formation cursors.

    Contract: ``claim`` is atomic and leased (a job whose lease expired is claimable again, so
    a killed worker's job is redone); two jobs with the same ``key`` never run at once;
    ``fail`` counts an attempt and schedules the retry or marks the job ``failed``.
    """

    async def enqueue(
        self,
        kind: str,
        key: str,
        payload: dict[str, Any],
        *,
        user_id: str | None = None,
        max_attempts: int = 8,
        coalesce: bool = False,
    ) -> Job:
        """Queue a job; with ``coalesce``, merge into a not-yet-started queued job of the same key."""
        ...

    async def claim(self, worker: str, *, lease_seconds: float, job_id: str | None = None) -> Job | None:
        """Take the oldest due job (or ``job_id``) and lease it to ``worker``."""
        ...

    async def renew(self, job_id: str, worker: str, *, lease_seconds: float) -> bool:
        """Heartbeat: extend ``worker``'s lease to now + ``lease_seconds``; False when the job
        is no longer running under ``worker`` (finished, released, or taken over)."""
        ...

    async def checkpoint(self, job_id: str, state: dict[str, Any]) -> None:
        """Save step outputs so a replay does not call the model again."""
        ...

    async def complete(self, job_id: str, result: dict[str, Any]) -> None: ...

    async def fail(self, job_id: str, error: str, *, retry_in: float | None) -> Job: ...

    async def release(self, job_id: str) -> None:
        """Give a running job back without counting an attempt."""
        ...

    async def retry(self, job_id: str) -> Job: ...

    async def get(self, job_id: str) -> Job | None: ...

    async def list(
        self, *, status: str | None = None, key: str | None = None, limit: int = 50
    ) -> builtins.list[Job]: ...

    async def next_due(self) -> datetime | None: ...

    async def counts(self) -> dict[str, int]: ...

    async def touch(
        self,
        app: str,
        session_id: str,
        *,
        user_ids: Sequence[str],
        agent_id: str | None,
        tier: int | None,
        messages: int,
        tokens: float,
    ) -> FormationCursor:
        """Record activity on a session (trigger counters grow, last activity = now)."""
        ...

    async def get_cursor(self, app: str, session_id: str) -> FormationCursor | None: ...

    async def reset_pending(self, app: str, session_id: str) -> None: ...

    async def advance(self, app: str, session_id: str, *, last_event_id: str, formed: int) -> None: ...

    async def delete_cursor(self, app: str, session_id: str) -> None: ...

    async def idle_cursors(self, before: datetime, *, limit: int = 1000) -> builtins.list[FormationCursor]: ...

    async def purge_user(self, user_id: str, *, cursors: bool = True) -> int:
        """For ``forget``: delete the user's jobs and, with ``cursors``, the formation cursors of
        the sessions they took part in alone (``False`` when their sessions are kept)."""
        ...

    async def close(self) -> None: ...
