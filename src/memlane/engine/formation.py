"""Formation through the engine: session events and their triggers, forming a session now
(``form``, ``end_session``, ``reset_session``), the idle sweep, formation jobs, the profile,
reflections and consolidated memory. The work itself is :mod:`memlane.formation` (the runner
and the pipeline); these are the engine's checked entry points to it.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Sequence
from datetime import datetime

from memlane import inputs
from memlane.engine.base import MAX_TIER, EngineState, opening
from memlane.engine.identity import event_for
from memlane.errors import ConfigError, InvalidInputError, NotFoundError
from memlane.formation.config import ReflectionScopeName
from memlane.formation.pipeline import Target, scope_key
from memlane.formation.runner import FormationResult
from memlane.ingest.messages import MAX_BATCH
from memlane.models import ConsolidatedMemory, ConsolidatedVersion, Event, Job, Reflection
from memlane.stores.base import VersionedBlobs

__all__ = ["FormationMethods"]

log = logging.getLogger("memlane")


class FormationMethods(EngineState):
    """The engine's methods for formation: session events and their triggers, forming now,
    jobs, the profile, reflections and consolidated memory."""

    @opening
    async def add_event(
        self,
        session_id: str,
        event: Event,
        *,
        app: str = "default",
        tier: int | None = None,
        channel: str | None = None,
        sender: str | None = None,
    ) -> Event:
        """Append an event to a session and run the formation triggers: after an agent
        response, once 45 messages or 1500 weighted tokens have accumulated since the last
        formation (never fewer than 4 messages), a formation job is queued; every event
        re-arms the session's idle timer (30 min: form, then clear).

        Args:
            tier: the user's tier (``>= formation.premium_tier`` selects the strong model);
                remembered for the session.
            channel, sender: who sent it (:meth:`link_identity`): the linked user is recorded as
                the event's ``metadata["user_id"]`` (``UnknownIdentityError`` when none is linked).
        """
        session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
        tier = inputs.optional_integer(tier, "tier", 0, MAX_TIER)
        if not isinstance(event, Event):
            raise InvalidInputError(f"event must be an Event, got {inputs.show(event)}")
        event = await event_for(self.facts, event, channel, sender)
        stored = await self.sessions.add_event(session_id, event, app=app)
        self.formation.start()
        await self.formation.on_event(app, session_id, stored, tier=tier)
        return stored

    async def _form_session(
        self, session_id: str, app: str, reason: str, *, clear: bool, final: bool, wait: bool
    ) -> FormationResult | Job:
        session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
        wait = inputs.flag(wait, "wait")
        if await self.sessions.get_session(session_id, app=app) is None:
            raise NotFoundError(f"no session {session_id!r} in app {app!r}")
        job = await self.formation.enqueue_session(app, session_id, reason=reason, clear=clear, final=final)
        if not wait:
            self.formation.start()
            return job
        return await self.formation.wait_for(job)

    @opening
    async def form(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """Form the session's not-yet-formed messages into memory now (extraction, dedup,
        reflections, consolidation when a buffer reaches its threshold)."""
        return await self._form_session(session_id, app, "manual", clear=False, final=False, wait=wait)

    @opening
    async def end_session(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """Session end (Eden ``on_session_end``): a final formation, then every scope with
        pending reflections is consolidated. The session is kept."""
        return await self._form_session(session_id, app, "end", clear=False, final=True, wait=wait)

    @opening
    async def reset_session(self, session_id: str, *, app: str = "default", wait: bool = True) -> FormationResult | Job:
        """``/reset`` (Gaia): form the conversation into memory, then delete the session."""
        return await self._form_session(session_id, app, "reset", clear=True, final=True, wait=wait)

    @opening
    async def sweep_idle(self) -> builtins.list[Job]:
        """Queue idle formation for sessions silent longer than ``idle_minutes`` (the startup
        sweep; also a cold-session job to run from cron). Returns the queued jobs."""
        jobs = await self.formation.sweep_idle()
        if jobs:
            self.formation.start()
        return jobs

    @opening
    async def run_jobs(self, *, max_jobs: int | None = None) -> int:
        """Run due formation jobs now, in this task (tests, cron, or ``background=False``).
        A failing job is rescheduled with backoff, not raised. Returns how many ran."""
        max_jobs = inputs.optional_integer(max_jobs, "max_jobs", 0, inputs.MAX_INT)
        n = 0
        while max_jobs is None or n < max_jobs:
            try:
                ran = await self.formation.run_pending(max_jobs=1)
            except Exception as exc:  # recorded on the job; keep draining
                log.info("memlane: a formation job failed and was rescheduled: %s", exc)
                ran = 1
            if not ran:
                break
            n += ran
        return n

    @opening
    async def get_job(self, job_id: str) -> Job:
        """A formation job's status, attempts, last error and result."""
        job_id = inputs.identifier(job_id, "job_id", error=InvalidInputError)
        job = await self.jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no formation job {job_id!r}")
        return job

    @opening
    async def list_jobs(self, *, status: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """Formation jobs, newest first (``status``: queued, running, done, failed)."""
        inputs.optional_choice(status, "status", ("queued", "running", "done", "failed"))
        limit = inputs.integer(limit, "limit", 1, 10_000)
        return await self.jobs.list(status=status, limit=limit)

    @opening
    async def retry_job(self, job_id: str) -> Job:
        """Queue a failed job again with a fresh set of attempts."""
        job_id = inputs.identifier(job_id, "job_id", error=InvalidInputError)
        job = await self.jobs.retry(job_id)
        self.formation.kick()
        return job

    @opening
    async def profile(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        items: Sequence[str] = (),
        tier: int = 0,
        as_of: datetime | str | None = None,
    ) -> str | None:
        """Gaia's session-start profile: the user's facts (plus recent ``items`` such as tasks
        or projects) distilled by one model call into <= ``preload_limit`` importance-ranked
        bullets. None when memory is off or the user has nothing; the raw fact list if the
        call fails. ``as_of``: from the facts as memory held them then (docs/temporal.md)."""
        user_id = inputs.identifier(user_id, "user_id")
        agent_id = inputs.optional_id(agent_id, "agent_id")
        items, tier = inputs.texts(items, "items", MAX_BATCH), inputs.integer(tier, "tier", 0, MAX_TIER)
        scope = self._scope(user_id, agent_id)
        assert scope.user_id is not None
        when = inputs.timestamp(as_of, "as_of")
        return await self.pipeline.profile(scope.user_id, agent_id, items=list(items), tier=tier, as_of=when)

    def _reflection_target(self, user_id: str | None, agent_id: str | None, session_id: str | None) -> Target:
        return Target(session_id=session_id, user_id=user_id, agent_ns=agent_id)

    @opening
    async def reflections(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        absorbed: bool | None = None,
    ) -> builtins.list[Reflection]:
        """A scope's reflections, oldest first (``absorbed=False``: the pending buffer)."""
        inputs.reflection_scope(scope, user_id, agent_id, session_id)
        absorbed = inputs.optional_flag(absorbed, "absorbed")
        key = scope_key(self._reflection_target(user_id, agent_id, session_id), scope)
        return await self.reflection_store.list_reflections(scope=scope, absorbed=absorbed, **key)

    @opening
    async def consolidated(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> ConsolidatedMemory | None:
        """A scope's consolidated blob (``VERSION: n`` ...), or None before its first consolidation."""
        inputs.reflection_scope(scope, user_id, agent_id, session_id)
        key = scope_key(self._reflection_target(user_id, agent_id, session_id), scope)
        return await self.reflection_store.get_consolidated(scope=scope, **key)

    @opening
    async def consolidated_history(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> builtins.list[ConsolidatedVersion]:
        """Every version of a scope's consolidated blob, newest first (at most ``limit``, 1 to
        10,000): what each consolidation wrote and when. ``forget`` erases a user's versions
        with their blobs (and those of an agent blob their words went into).

        Raises:
            ConfigError: the reflection store keeps no versions (the SQL stores do).
        """
        inputs.reflection_scope(scope, user_id, agent_id, session_id)
        limit = inputs.integer(limit, "limit", 1, 10_000)
        store = self.reflection_store
        if not isinstance(store, VersionedBlobs):
            raise ConfigError(f"{type(store).__name__} keeps no blob versions (a SQLite or PostgreSQL store does)")
        key = scope_key(self._reflection_target(user_id, agent_id, session_id), scope)
        return await store.consolidated_history(scope=scope, limit=limit, **key)

    @opening
    async def consolidate(
        self,
        scope: ReflectionScopeName,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        wait: bool = True,
    ) -> FormationResult | Job:
        """Consolidate a scope's pending reflections into its blob now, even below the scope's
        threshold, as a durable ``consolidate`` job (version + 1, a new row in
        :meth:`consolidated_history`). ``wait=True`` runs it and returns its result
        (``consolidated``: the new blob, or empty and ``skipped`` when no reflection was
        pending); ``wait=False`` returns the queued job (``get_job`` follows it).

        Raises:
            ScopeError: a bad scope, or the id it is keyed by missing.
            FormationError: the job failed (it is kept and retried).
        """
        inputs.reflection_scope(scope, user_id, agent_id, session_id)
        wait = inputs.flag(wait, "wait")
        key = scope_key(self._reflection_target(user_id, agent_id, session_id), scope)
        job = await self.formation.enqueue_consolidate(scope, **key)
        if not wait:
            self.formation.start()
            return job
        return await self.formation.wait_for(job)
