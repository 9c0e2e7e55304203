"""The engine's status reports, typed: consolidation status, memory stats, embedding progress.

They were plain dicts; they are pydantic models now, and still read like the dicts they were
(``status["user"]["buffer_size"]``, ``progress["queued"]``, ``dict(progress)``, ``.get()``),
so code written against the dicts keeps working. ``model_dump()`` gives the same JSON the
dicts did (Eden's keys, in the same order), which is what the HTTP API and the CLI print.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from memlane import inputs
from memlane._env import redact_url
from memlane.engine.base import EngineState, opening
from memlane.errors import ScopeError
from memlane.formation.config import FormationConfig, ReflectionScopeName
from memlane.formation.pipeline import Target, scope_key
from memlane.models import CheckReport
from memlane.stores.base import Checkable, ReflectionStore, StoreStats, UserExportable

__all__ = [
    "ConsolidationStatus",
    "EmbeddingProgress",
    "MemoryStats",
    "ScopeStats",
    "Status",
    "StatusMethods",
    "consolidation_status",
    "scope_stats",
    "status_scopes",
]


class Status(BaseModel):
    """A report that also reads as the dict it used to be: ``report["key"]``, ``.get``,
    ``.keys()``, ``.items()``, ``dict(report)``, ``"key" in report``."""

    model_config = ConfigDict(frozen=True)

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in type(self).model_fields else default

    def keys(self) -> list[str]:
        return list(type(self).model_fields)

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in type(self).model_fields]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in type(self).model_fields]

    def __contains__(self, key: object) -> bool:
        return key in type(self).model_fields

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # iterate keys, as the dict did
        return iter(type(self).model_fields)

    def __len__(self) -> int:
        return len(type(self).model_fields)


class ConsolidationStatus(Status):
    """One scope's consolidation status (Eden's ``get_consolidation_status`` keys, plus version
    and time)."""

    buffer_size: int
    """Reflections waiting to be consolidated."""
    threshold: int
    """Buffer size at which the scope is consolidated."""
    needs_consolidation: bool
    """The buffer has reached the threshold."""
    word_limit: int
    """Largest consolidated blob, in words."""
    current_word_count: int
    """Words in the current blob (0 before the first consolidation)."""
    version: int
    """The blob's version (0 before the first consolidation)."""
    last_consolidated_at: datetime | None
    """When the blob was last written."""


class ScopeStats(Status):
    """One scope's memory stats (Eden's ``get_memory_stats``)."""

    consolidated_words: int
    version: int
    reflections: int
    unabsorbed: int
    last_reflection_at: datetime | None
    last_consolidated_at: datetime | None


class MemoryStats(Status):
    """Eden's ``get_memory_stats``: per scope, plus fact counts, job counts and model usage."""

    scopes: dict[str, ScopeStats]
    facts: int
    valid_facts: int
    jobs: dict[str, int]
    """Formation jobs per status."""
    usage: dict[str, dict[str, int]]
    """Model calls and tokens so far, per task."""


class EmbeddingProgress(Status):
    """The background embedding queue's counts (``add(embed="high"|"normal"|"low")``)."""

    high: int = 0
    normal: int = 0
    low: int = 0
    queued: int = 0
    """Facts waiting, all priorities."""
    done: int = 0
    """Facts embedded by the queue since the memory was opened."""
    failed: int = 0
    """Facts of batches that failed (they stay queued and are retried)."""
    last_error: str | None = None
    idle: bool = True
    """Nothing queued and nothing left without a vector in the store."""


def status_scopes(user_id: str | None, agent_id: str | None, session_id: str | None) -> list[ReflectionScopeName]:
    """The reflection scopes the given ids name (agent, user, session)."""
    scopes: list[ReflectionScopeName] = []
    if agent_id:
        scopes.append("agent")
    if user_id:
        scopes.append("user")
    if session_id:
        scopes.append("session")
    if not scopes:
        raise ScopeError("give user_id, agent_id and/or session_id")
    return scopes


async def consolidation_status(
    reflections: ReflectionStore,
    config: FormationConfig,
    *,
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
) -> dict[str, ConsolidationStatus]:
    """Per scope named by the (checked) ids: the buffer, its threshold and the blob's size."""
    out: dict[str, ConsolidationStatus] = {}
    target = Target(session_id=session_id, user_id=user_id, agent_ns=agent_id)
    for scope in status_scopes(user_id, agent_id, session_id):
        key = scope_key(target, scope)
        pending = await reflections.list_reflections(scope=scope, absorbed=False, **key)
        blob = await reflections.get_consolidated(scope=scope, **key)
        out[scope] = ConsolidationStatus(
            buffer_size=len(pending),
            threshold=config.consolidation_threshold[scope],
            needs_consolidation=len(pending) >= config.consolidation_threshold[scope],
            word_limit=config.word_limit[scope],
            current_word_count=len(blob.consolidated_content.split()) if blob else 0,
            version=blob.version if blob else 0,
            last_consolidated_at=blob.last_consolidated_at if blob else None,
        )
    return out


async def scope_stats(
    reflections: ReflectionStore, *, user_id: str | None, agent_id: str | None, session_id: str | None
) -> dict[str, ScopeStats]:
    """Per scope named by the (checked) ids: blob words and version, reflection counts, times."""
    out: dict[str, ScopeStats] = {}
    target = Target(session_id=session_id, user_id=user_id, agent_ns=agent_id)
    for scope in status_scopes(user_id, agent_id, session_id):
        key = scope_key(target, scope)
        refl = await reflections.list_reflections(scope=scope, absorbed=None, **key)
        blob = await reflections.get_consolidated(scope=scope, **key)
        out[scope] = ScopeStats(
            consolidated_words=len(blob.consolidated_content.split()) if blob else 0,
            version=blob.version if blob else 0,
            reflections=len(refl),
            unabsorbed=sum(1 for r in refl if not r.absorbed),
            last_reflection_at=refl[-1].formed_at if refl else None,
            last_consolidated_at=blob.last_consolidated_at if blob else None,
        )
    return out


class StatusMethods(EngineState):
    """The engine's methods for the status reports: ``get_consolidation_status``,
    ``get_memory_stats``, ``check`` and ``stats``."""

    @opening
    async def get_consolidation_status(
        self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> dict[str, ConsolidationStatus]:
        """Eden's ``get_consolidation_status``: per scope, the buffer size, threshold, word limit
        and whether consolidation is due."""
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return await consolidation_status(self.reflection_store, self.formation_config, **ids)

    @opening
    async def get_memory_stats(
        self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> MemoryStats:
        """Eden's ``get_memory_stats``: per scope, word counts of the blob, reflection counts and
        timestamps; plus fact counts, job counts and model usage so far."""
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        scopes = await scope_stats(self.reflection_store, **ids)
        facts = await self.facts.stats(self._scope(user_id, agent_id) if (user_id or agent_id) else None)
        return MemoryStats(
            scopes=scopes,
            facts=facts.facts,
            valid_facts=facts.valid_facts,
            jobs=await self.jobs.counts(),
            usage=self.meter.snapshot(),
        )

    async def check(self) -> CheckReport:
        """Check the storage for damage: SQLite's integrity check (every page and index) and
        the full-text index's consistency. Reads only; takes a while on a large database.
        ``memlane check`` runs it from the shell. When it reports problems, stop the processes
        using the file and restore it from a backup."""
        problems: list[str] = []
        seen: set[int] = set()
        for store in (self.jobs, self.facts, self.reflection_store, self.sessions):
            if not isinstance(store, Checkable) or id(store) in seen:
                continue
            seen.add(id(store))
            problems += [p for p in await store.check() if p not in problems]  # stores may share one file
        return CheckReport(ok=not problems, problems=problems, location=redact_url(self.db_path))

    @opening
    async def stats(self, *, user_id: str | None = None, agent_id: str | None = None) -> StoreStats:
        """Counts for one scope, or for the whole database when no id is given."""
        user_id, agent_id, _ = inputs.scope_ids(user_id, agent_id)
        scope = self._scope(user_id, agent_id) if (user_id or agent_id) else None
        st = await self.facts.stats(scope)
        if scope is None:  # operators' view: the session store counts its own tables
            st.sessions, st.events = await self.sessions.counts()
        elif user_id is not None and isinstance(self.sessions, UserExportable):
            # The user's sessions (every app) and the events in them: in a group session the
            # user's own, as export_user shows them.
            sessions = (await self.sessions.export_user(user_id)).get("sessions", [])
            st.sessions, st.events = len(sessions), sum(len(s.get("events", [])) for s in sessions)
        return st
