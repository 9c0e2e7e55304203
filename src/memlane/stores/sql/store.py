"""The fact and reflection store every SQL backend shares: :class:`SqlFactStore` implements
the long-term memory protocols (:class:`~memlane.stores.base.FactStore` minus search and
embeddings, :class:`~memlane.stores.base.ReflectionStore`) once, by running the core's
programs through two methods a backend supplies: :meth:`SqlFactStore._query` (a read) and
:meth:`SqlFactStore._transact` (a write transaction, holding the locks the program takes).
Search, the embedder binding, vectors, ``export_user``, the clean-up after ``forget`` and
``close`` stay the backend's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from memlane.errors import InvalidInputError, NotFoundError, ScopeError
from memlane.models import (
    ConsolidatedMemory,
    ConsolidatedVersion,
    Directory,
    Fact,
    FactFilter,
    FactScope,
    Growth,
    HistoryEntry,
    Identity,
    Page,
    PartitionFilter,
    Proposal,
    Reflection,
    Scope,
    Timeline,
    UserActivity,
    utcnow,
)
from memlane.stores.base import AppliedChange, FactChange, ReflectionKey, StoreStats, Vector
from memlane.stores.embedding import check_vectors, check_windows
from memlane.stores.sql import activity, directory, erasure, meta, reads, temporal
from memlane.stores.sql import facts as core
from memlane.stores.sql import identities as idmap
from memlane.stores.sql import proposals as props
from memlane.stores.sql import reflections as refl
from memlane.stores.sql.access import AccessCounts
from memlane.stores.sql.activity import Bucket
from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.stmt import Program, run_all

__all__ = ["SqlFactStore", "SqlReflectionStore"]

T = TypeVar("T")


def _get_fact(d: Dialect, fact_id: str, scope: Scope) -> Program[Fact | None]:
    try:
        row = yield from core.visible_row(d, fact_id, scope)
    except NotFoundError:
        return None
    return d.fact(row, with_embedding=True)


class SqlReflectionStore(ABC):
    """Reflection buffers and consolidated blobs over one SQL dialect."""

    # ------------------------------------------------------------------ what a backend supplies
    @property
    @abstractmethod
    def _d(self) -> Dialect:
        """The backend's dialect."""

    @abstractmethod
    async def _query(self, program: Program[T]) -> T:
        """Run a read-only program (storage errors become memlane's typed errors)."""

    @abstractmethod
    async def _transact(self, program: Program[T]) -> T:
        """Run a program in one write transaction: committed when it returns, rolled back when
        it raises (storage errors become memlane's typed errors)."""

    # ------------------------------------------------------------------ reflections
    async def reflection_stamp(self, keys: Sequence[ReflectionKey]) -> str:
        """A token over the scopes' reflection counts, absorption, newest reflection, text size
        and blob version (and the database's purge generation): moves on every write."""
        return await self._query(refl.reflection_stamp(self._d, keys))

    async def put_reflection(self, reflection: Reflection) -> Reflection:
        """Store a reflection in its scope's buffer (a known id changes nothing)."""
        await self._transact(run_all(core.insert_reflection(self._d, reflection)))
        return reflection

    async def list_reflections(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        absorbed: bool | None = None,
    ) -> list[Reflection]:
        """Reflections of one scope, oldest first (user/agent buffers: of every session)."""
        return await self._query(
            refl.list_reflections(
                self._d, scope=scope, agent_id=agent_id, user_id=user_id, session_id=session_id, absorbed=absorbed
            )
        )

    async def get_consolidated(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> ConsolidatedMemory | None:
        """The scope's consolidated blob, if any."""
        return await self._query(
            refl.get_consolidated(self._d, scope=scope, agent_id=agent_id, user_id=user_id, session_id=session_id)
        )

    async def put_consolidated(
        self, blob: ConsolidatedMemory, absorbed_ids: Sequence[str] = (), *, expected_version: int | None = None
    ) -> ConsolidatedMemory:
        """Upsert the blob and mark ``absorbed_ids`` absorbed, in one transaction.

        Raises:
            ConflictError: ``expected_version`` is given and the stored blob's version (0 when
                there is none) differs: another consolidation (maybe on another replica) won.
        """
        return await self._transact(
            refl.put_consolidated(self._d, blob, absorbed_ids, expected_version=expected_version)
        )

    async def consolidated_history(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> list[ConsolidatedVersion]:
        """:class:`~memlane.stores.base.VersionedBlobs`: the scope's blob versions, newest first."""
        return await self._query(
            refl.consolidated_history(
                self._d, scope=scope, agent_id=agent_id, user_id=user_id, session_id=session_id, limit=limit
            )
        )

    async def clear_session_memory(self, *, agent_id: str | None, user_id: str | None, session_id: str) -> int:
        """Delete one session's reflections and blob (with its versions); returns rows removed."""
        return await self._transact(
            refl.clear_session_memory(self._d, agent_id=agent_id, user_id=user_id, session_id=session_id)
        )


class SqlFactStore(AccessCounts, SqlReflectionStore):
    """Facts, history, reflections and consolidated blobs over one SQL dialect. Access counts
    are written off the search path (:mod:`memlane.stores.sql.access`): the reads returning
    them settle the pending increments first."""

    dim: int | None
    embedder_name: str | None

    # ------------------------------------------------------------------ what a backend supplies
    @abstractmethod
    async def _ready(self) -> None:
        """Load what the store needs before a write that checks vectors (the bound dimension)."""

    @abstractmethod
    async def _after_purge(self, partitions: list[str], any_fact: bool) -> None:
        """Take a purged user's words out of the files and caches (after the commit)."""

    def _check_vectors(self, vectors: Vector | None, n: int) -> None:
        check_vectors(vectors, n, self.dim)

    def _check_windows(self, windows: Sequence[Vector | None] | None, n: int) -> None:
        check_windows(windows, n, self.dim)

    async def _scoped_query(self, pf: PartitionFilter, read: Callable[[list[str]], Program[T]]) -> T:
        """Run ``read`` (a read-only program given the partitions ``pf`` names) on them. Here
        the partitions are resolved in the same program, one statement more; a backend that
        remembers a user's partitions overrides this (PostgreSQL: each of ``read``'s
        statements also reads them afresh, and the read runs again when they changed)."""

        def program() -> Program[T]:
            parts = yield from core.partitions(self._d, pf)
            return (yield from read(parts))

        return await self._query(program())

    # ------------------------------------------------------------------ writes
    async def put_facts(
        self,
        facts: Sequence[Fact],
        vectors: Vector | None,
        *,
        actor: str = "api",
        windows: Sequence[Vector | None] | None = None,
    ) -> list[tuple[Fact, bool]]:
        """Store facts atomically (all or none); returns (stored fact, created) per input.
        ``windows``: per fact, its further windows' vectors (a text longer than the encoder
        reads), written in the same transaction."""
        return (await self._put_groups([facts], vectors, actor, windows))[0]

    async def put_fact_groups(
        self,
        groups: Sequence[Sequence[Fact]],
        vectors: Vector | None,
        *,
        actor: str = "api",
        windows: Sequence[Vector | None] | None = None,
    ) -> list[list[tuple[Fact, bool]]]:
        """``put_facts`` of several groups (``add_many``: one per session) in one transaction;
        the stored rows, seqs, context, history and counters are those of one ``put_facts``
        call per group. ``vectors`` (and ``windows``): one row per fact of all groups, in order."""
        return await self._put_groups(groups, vectors, actor, windows)

    async def _put_groups(
        self,
        groups: Sequence[Sequence[Fact]],
        vectors: Vector | None,
        actor: str,
        windows: Sequence[Vector | None] | None = None,
    ) -> list[list[tuple[Fact, bool]]]:
        flat = [f for g in groups for f in g]
        await self._ready()
        self._check_vectors(vectors, len(flat))
        self._check_windows(windows, len(flat))
        parts = core.partition_keys(flat)  # validates scope fields before anything is written
        sizes = [len(g) for g in groups]
        program = core.put_facts(self._d, flat, vectors, actor, sizes, windows, parts)
        pairs = await self._transact(program) if flat else []
        out, start = [], 0
        for size in sizes:
            out.append(pairs[start : start + size])
            start += size
        return out

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
        """Change a fact's content (version + 1, history row); the old text's window vectors
        go, ``windows`` (the new text's further windows) come."""
        if vector is not None:
            self._check_vectors(vector.reshape(1, -1), 1)
        self._check_windows(None if windows is None else [windows], 1)
        return await self._transact(core.update_fact(self._d, fact_id, scope, content, vector, actor, windows))

    async def invalidate_fact(self, fact_id: str, scope: Scope, *, actor: str = "api") -> Fact:
        """Soft delete: set ``invalid_at``, drop from search, keep in history."""
        return (await self.invalidate_facts([fact_id], scope, actor=actor))[0]

    async def invalidate_facts(self, fact_ids: Sequence[str], scope: Scope, *, actor: str = "api") -> list[Fact]:
        """Soft delete several facts in one transaction: all visible, or nothing changes."""
        return await self._transact(core.invalidate_facts(self._d, fact_ids, scope, actor))

    async def apply_changes(
        self,
        changes: Sequence[FactChange],
        reflections: Sequence[Reflection] = (),
        *,
        key: str,
        actor: str = "formation",
    ) -> list[AppliedChange]:
        """Apply a formation batch atomically, exactly once per ``key``
        (:func:`memlane.stores.sql.facts.apply_changes`)."""
        await self._ready()
        for ch in changes:
            if ch.fact is not None:
                _ = ch.fact.partition  # validates scope fields before anything is written
            if ch.vector is not None:
                self._check_vectors(ch.vector.reshape(1, -1), 1)
            self._check_windows(None if ch.windows is None else [ch.windows], 1)
        return await self._transact(core.apply_changes(self._d, changes, reflections, key=key, actor=actor))

    async def purge_user(self, user_id: str, *, shared: str = "erase") -> int:
        """Hard delete everything of ``user_id`` (:mod:`memlane.stores.sql.erasure`), then take
        their words out of the files (the backend's :meth:`_after_purge`)."""
        if not isinstance(user_id, str) or not user_id.strip():
            raise ScopeError("purge_user needs a non-empty user_id")
        if shared not in ("erase", "keep"):
            raise InvalidInputError(f"shared must be 'erase' or 'keep', got {shared!r}")
        removed, parts, any_fact = await self._transact(erasure.purge_user(self._d, user_id, erase=shared == "erase"))
        await self._after_purge(parts, any_fact)
        return removed

    # ------------------------------------------------------------------ reads
    async def get_fact(self, fact_id: str, scope: Scope) -> Fact | None:
        """One fact if it is visible from ``scope`` (valid or not), with its vector, else None."""
        await self.settle_access([fact_id])
        return await self._query(_get_fact(self._d, fact_id, scope))

    async def get_facts(self, fact_ids: Sequence[str], scope: Scope, *, settle: bool = True) -> dict[str, Fact]:
        """Facts by id, only those visible from ``scope``. ``settle=False`` (a search reading its
        hits) reads the access counts as stored, without writing pending increments first."""
        if not fact_ids:
            return {}
        if settle:
            await self.settle_access(fact_ids)
        return await self._scoped_query(
            scope.partition_filter(), lambda parts: reads.get_facts_in(self._d, fact_ids, parts)
        )

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
        """Facts newest first, paginated by an opaque cursor; ``filter`` applied in the query."""
        await self.settle_access()
        return await self._query(
            reads.list_facts(
                self._d, scope, limit=limit, cursor=cursor, include_invalid=include_invalid, filter=filter, only=only
            )
        )

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
        """The scope at a record time and/or a world time (:mod:`memlane.stores.sql.temporal`);
        pending access counts settled first, as ``list_facts`` does."""
        await self.settle_access()
        return await self._scoped_query(
            scope.partition_filter(only),
            lambda parts: temporal.snapshot_in(
                self._d,
                parts,
                as_of=as_of,
                valid_at=valid_at,
                filter=filter,
                include_invalid=include_invalid,
                vectors=vectors,
            ),
        )

    async def fact_as_of(
        self, fact_id: str, scope: Scope, as_of: datetime | None, valid_at: datetime | None = None
    ) -> Fact | None:
        """One fact as memory held it at ``as_of`` (:func:`memlane.stores.sql.temporal.fact_as_of`)."""
        await self.settle_access([fact_id])
        return await self._query(temporal.fact_as_of(self._d, fact_id, scope, as_of, valid_at))

    async def timeline(self, scope: Scope, *, limit: int, before: datetime | None = None) -> Timeline:
        """:class:`~memlane.stores.base.ActivityReadable`: the history of the scope's user
        memories, newest first (:func:`memlane.stores.sql.activity.timeline`)."""
        return await self._scoped_query(
            scope.partition_filter("user"), lambda parts: activity.timeline(self._d, parts, limit=limit, before=before)
        )

    async def growth(self, scope: Scope, *, bucket: Bucket) -> Growth:
        """:class:`~memlane.stores.base.ActivityReadable`: the scope's user memories added and
        invalidated per bucket (:func:`memlane.stores.sql.activity.growth`)."""
        return await self._scoped_query(
            scope.partition_filter("user"), lambda parts: activity.growth(self._d, parts, bucket=bucket)
        )

    async def fact_owner(self, fact_id: str) -> Scope | None:
        """The scope a fact lives in, by its id alone (an operator's lookup)."""
        return await self._query(reads.fact_owner(self._d, fact_id))

    async def history(self, fact_id: str, scope: Scope) -> list[HistoryEntry]:
        """All changes to a fact visible from ``scope``, oldest first."""
        return await self._query(reads.history(self._d, fact_id, scope))

    authors_cached: bool = False
    """Whether :meth:`authors` answers from a cache the backend's keyword search refreshes
    (PostgreSQL): the engine then asks again after its keyword search (no statement) and
    searches again if they changed."""

    def _cached_authors(self, pf: PartitionFilter) -> list[str] | None:
        """The backend's cached authors of ``pf`` (no I/O), or None to read them."""
        return None

    def _remember_authors(self, pf: PartitionFilter, authors: list[str]) -> None:
        """Offer the authors just read to the backend's cache."""

    async def authors(self, partitions: PartitionFilter) -> list[str]:
        """Distinct authors of verbatim memories in these partitions."""
        known = self._cached_authors(partitions)
        if known is not None:
            return known
        found = await self._scoped_query(partitions, lambda parts: reads.authors_in(self._d, parts))
        self._remember_authors(partitions, found)
        return found

    async def memory_stamp(self, partitions: PartitionFilter) -> str:
        """A token that changes whenever a fact in these partitions is added, changed or
        removed (by any writer), and after a purge; reads counters only."""
        return await self._query(reads.memory_stamp(self._d, partitions))

    async def stats(self, scope: Scope | None = None) -> StoreStats:
        """Fact counts (the whole store when ``scope`` is None: for operators, no content)."""
        await self._ready()
        return await self._query(reads.stats(self._d, scope, embedder=self.embedder_name, dim=self.dim))

    async def directory_users(
        self, *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
    ) -> list[UserActivity]:
        """The users of the user scope's memories, by user id (:class:`~memlane.stores.base.UserDirectory`)."""
        return await self._query(
            directory.fact_users(self._d, agent_id=agent_id, user_id=user_id, after=after, limit=limit)
        )

    async def directory(self, *, user_id: str | None) -> Directory:
        """The agents and their memories (:class:`~memlane.stores.base.UserDirectory`)."""
        return await self._query(directory.fact_directory(self._d, user_id=user_id))

    async def meta_setdefault(self, key: str, value: str) -> str:
        """:class:`~memlane.stores.base.MetaStore`: ``key``'s stored value, ``value`` stored first if none."""
        return await self._transact(meta.meta_setdefault(self._d, key, value))

    # ------------------------------------------------------------------ the identity map
    async def link_identity(self, channel: str, sender: str, user_id: str) -> Identity:
        """Link ``(channel, sender)`` to ``user_id`` (:func:`memlane.stores.sql.identities.link`)."""
        return await self._transact(idmap.link(self._d, channel, sender, user_id, utcnow()))

    async def unlink_identity(self, channel: str, sender: str, *, user_id: str | None = None) -> bool:
        """Remove the link (only when it is ``user_id``'s, if given); True when one went."""
        return await self._transact(idmap.unlink(self._d, channel, sender, user_id))

    async def resolve_identity(self, channel: str, sender: str) -> Identity | None:
        """The link of ``(channel, sender)``, or None."""
        return await self._query(idmap.resolve(self._d, channel, sender))

    async def identities(self, user_id: str) -> list[Identity]:
        """The user's links, by channel then sender."""
        return await self._query(idmap.identities_of(self._d, user_id))

    async def purge_identities(self, user_id: str) -> int:
        """For ``forget``: delete the user's links (before the fact purge, whose clean-up then
        takes their text out of the files); how many."""
        return await self._transact(idmap.purge_identities(self._d, user_id))

    # ------------------------------------------------------------------ the review queue
    async def put_proposals(self, proposals: Sequence[Proposal], *, missing: str = "raise") -> list[Proposal]:
        """Queue proposals (:func:`memlane.stores.sql.proposals.insert_proposals`)."""
        if not proposals:
            return []
        return await self._transact(props.insert_proposals(self._d, proposals, missing=missing))

    async def get_proposal(self, proposal_id: str) -> Proposal | None:
        """One proposal by id, or None."""
        return await self._query(props.get_proposal(self._d, proposal_id))

    async def list_proposals(
        self, *, user_id: str | None = None, agent_id: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[Proposal]:
        """Proposals of a user, of an agent, or of a user under an agent, newest first."""
        if user_id is None and agent_id is None:
            raise ScopeError("listing proposals needs a user_id or an agent_id")
        return await self._query(
            props.list_proposals(self._d, user_id=user_id, agent_id=agent_id, status=status, limit=limit)
        )

    async def review_proposal(
        self,
        proposal_id: str,
        *,
        approve: bool,
        reviewer: str,
        edit: str | None = None,
        vector: Vector | None = None,
    ) -> Proposal:
        """Approve or reject a pending proposal (:func:`memlane.stores.sql.proposals.review_proposal`)."""
        await self._ready()
        if vector is not None:
            self._check_vectors(vector.reshape(1, -1), 1)
        return await self._transact(
            props.review_proposal(self._d, proposal_id, approve=approve, reviewer=reviewer, edit=edit, vector=vector)
        )
