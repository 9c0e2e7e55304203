"""Formation lifecycle: triggers, idle timers, the startup sweep, and durable jobs.

The durable session is the buffer: nothing about a conversation lives only in memory.
A trigger (45 messages / 1500 weighted tokens after an agent response), the idle timer
(30 min), ``/reset``, session end or ``add(infer=True)`` each enqueue a job row; a worker
claims it with a lease, runs the pipeline, checkpoints each model step's output in the
job, applies the batch exactly once and marks it done. Transient failures (providers,
network, storage) are retried with backoff; deterministic ones (a bug, bad data) fail the
job at once with their reason. While a job runs, a heartbeat renews its lease every third
of ``lease_seconds``; a process killed mid-job stops renewing, its lease expires within
seconds, and the job is claimed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from memlane.errors import (
    FormationError,
    FormationTimeoutError,
    InvalidInputError,
    ProviderError,
    StorageError,
    UsageError,
)
from memlane.formation.config import FormationConfig, ReflectionScopeName
from memlane.formation.names import name_from_id, name_in_facts, person_name
from memlane.formation.pipeline import Pipeline, Target, scope_key
from memlane.formation.schemas import Decision, ExistingFact, ExtractedFact, Turn, UnreadTurn
from memlane.models import (
    TEXT_EVENT_TYPES,
    ConsolidatedMemory,
    Event,
    EventType,
    Fact,
    Job,
    Reflection,
    Session,
    agent_namespace,
    as_utc,
    utcnow,
)
from memlane.providers.llm.base import UsageMeter
from memlane.stores.base import FactChange, JobStore, SessionStore

log = logging.getLogger("memlane.formation")

#: Eden's character weights for the token trigger (the user's words carry most facts) and its
#: characters-per-token estimate.
CHAR_WEIGHTS: dict[str, float] = {"user": 1.0, "assistant": 0.2, "tool": 0.5}
CHARS_PER_TOKEN = 4.5

#: Builds a batch's session-summary change from the batch's reflections (:meth:`Pipeline.summarize`).
Summarize = Callable[[list[Reflection]], Awaitable[FactChange | None]]


class FactEvent(BaseModel):
    """One applied change: what happened to which fact, and its text before."""

    event: Literal["ADD", "UPDATE", "DELETE", "NONE"]
    fact: Fact
    previous: str | None = None


class FormationResult(BaseModel):
    """What one formation job did."""

    job_id: str
    reason: str
    turns: int = 0
    """Messages formed."""
    changes: list[FactEvent] = Field(default_factory=list)
    reflections: list[Reflection] = Field(default_factory=list)
    consolidated: list[ConsolidatedMemory] = Field(default_factory=list)
    usage: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Model calls and tokens of this job, per task."""
    skipped: str | None = None
    """Why nothing was formed (too few messages, newer activity, no session)."""
    cleared: bool = False
    """The session was deleted afterwards (idle / reset)."""
    kept: list[str] = Field(default_factory=list)
    """Ids of the ``message`` memories that keep a cleared session's user turns
    (``FormationConfig.keep_user_turns``)."""
    proposed: list[str] = Field(default_factory=list)
    """Review mode (``FormationConfig.review``): ids of the proposals the decisions were queued
    as, instead of ``changes`` (docs/review.md)."""
    summary: Fact | None = None
    """The session's ``summary`` memory as this job left it, added or updated
    (``FormationConfig.session_summaries``; not among ``changes``)."""
    unread: list[UnreadTurn] = Field(default_factory=list)
    """Turns of the batch the model could not read, with the reason (the offline model: a language
    other than English, or a first-person statement no rule understood); no text, only positions and ids."""

    @property
    def facts(self) -> list[Fact]:
        """Facts added or changed (NONE excluded)."""
        return [c.fact for c in self.changes if c.event != "NONE"]


def _unread(job: Job) -> list[UnreadTurn]:
    """The turns the extraction reported unread (checkpointed in the job with its facts)."""
    return [UnreadTurn.model_validate(u) for u in job.state.get("unread") or []]


#: Errors a retry cannot fix: the same bug or the same bad data fails the same way again.
#: (pydantic's ValidationError and json's JSONDecodeError are ValueErrors; NotFoundError is
#: a LookupError.)
_PERMANENT: tuple[type[BaseException], ...] = (
    InvalidInputError,
    UsageError,
    TypeError,
    ValueError,
    LookupError,
    AttributeError,
    AssertionError,
    ArithmeticError,
    RecursionError,
    NotImplementedError,
)


def is_permanent(exc: BaseException) -> bool:
    """True for a deterministic failure (a bug, bad data): the job fails at once instead of
    burning its retries. Provider, network and storage errors are transient (retried), and so
    is anything unrecognised."""
    if isinstance(exc, ProviderError | StorageError | OSError):  # incl. OutputParseError, timeouts
        return False
    return isinstance(exc, _PERMANENT)


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel a helper task and wait for it; a cancellation of the caller still propagates."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: the heartbeat logs its own problems


def event_weight(event: Event) -> tuple[int, float]:
    """(messages, weighted tokens) an event adds to the trigger counters (Eden's
    ``estimate_weighted_tokens``: user chars x1.0, agent x0.2, tool x0.5, / 4.5)."""
    if event.type == EventType.ERROR:
        return 0, 0.0
    if event.type in TEXT_EVENT_TYPES or event.type == EventType.DELEGATION_REQUEST:
        text = event.text.strip()
        if not text:
            return 0, 0.0
        weight = CHAR_WEIGHTS["user"] if event.role == "user" else CHAR_WEIGHTS["assistant"]
        return 1, weight * len(text) / CHARS_PER_TOKEN
    if event.content is None:
        return 0, 0.0
    return 1, CHAR_WEIGHTS["tool"] * len(str(event.content)) / CHARS_PER_TOKEN


def events_to_turns(events: Sequence[Event]) -> list[Turn]:
    """Conversational events as formation turns (tool traffic and errors are left out)."""
    turns = []
    for e in events:
        if e.type not in TEXT_EVENT_TYPES or not e.text.strip():
            continue
        role: Literal["user", "assistant"] = "user" if e.role == "user" else "assistant"
        turns.append(Turn(role=role, author=e.author, text=e.text, at=e.timestamp, event_id=e.id))
    return turns


def _speaker(turns: Sequence[Turn], role: str) -> str | None:
    names = {t.author for t in turns if t.role == role and t.author not in ("user", "assistant", "model")}
    return next(iter(names)) if len(names) == 1 else None


def _user_speaker(turns: Sequence[Turn]) -> str | None:
    """The one person's name the user turns are written by; None for account ids ("u_8f3a"),
    generic roles, or several names."""
    names = {n for t in turns if t.role == "user" and (n := person_name(t.author)) is not None}
    return next(iter(names)) if len(names) == 1 else None


def session_key_of(app: str, session_id: str) -> str:
    return f"session\x1f{app}\x1f{session_id}"


class FormationRunner:
    """Owns the job queue, the worker task and the idle timers of one engine."""

    def __init__(
        self,
        *,
        pipeline: Pipeline,
        jobs: JobStore,
        sessions: SessionStore,
        config: FormationConfig,
        meter: UsageMeter,
    ) -> None:
        self.pipeline = pipeline
        self.jobs = jobs
        self.sessions = sessions
        self.config = config
        self.meter = meter
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._who: dict[tuple[str, str], tuple[list[str], str | None]] = {}

    # ------------------------------------------------------------------ worker
    def start(self) -> None:
        """Start the background worker on the running loop (idempotent) and sweep idle sessions."""
        if self._closed or not self.config.background:
            return
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._loop is loop:
            return
        self._loop = loop
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._worker(), name="memlane-formation")

    def kick(self) -> None:
        if self._wake is not None and self._loop is not None and not self._closed:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                self._wake.set()
            else:
                self._loop.call_soon_threadsafe(self._wake.set)

    async def close(self) -> None:
        self._closed = True
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            if self._wake is not None:
                # A cancellation a driver swallows (seen with psycopg_pool on Python 3.11: a claim
                # returns normally while cancelled) must not hold close() for the 30 s idle wait.
                self._wake.set()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _worker(self) -> None:
        first = True
        while not self._closed:
            try:
                if first and self.config.auto_ingest and self.config.idle_minutes:
                    first = False
                    await self.sweep_idle()
                ran = await self.run_pending(max_jobs=1)
                if ran:
                    continue
                due = await self.jobs.next_due()
                timeout = 30.0
                if due is not None:
                    timeout = min(max((due - utcnow()).total_seconds(), 0.05), 30.0)
                assert self._wake is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the worker die; the job table keeps the work
                log.warning("memlane: formation worker error (%s); retrying shortly", exc)
                await asyncio.sleep(1.0)

    async def run_pending(self, *, max_jobs: int | None = None) -> int:
        """Run due jobs now, one at a time; returns how many ran (done or failed)."""
        n = 0
        while max_jobs is None or n < max_jobs:
            job = await self.jobs.claim(self.worker_id, lease_seconds=self.config.lease_seconds)
            if job is None:
                break
            await self._execute(job)
            n += 1
        return n

    async def execute(self, job: Job) -> FormationResult:
        """Run a job this runner claimed (``jobs.claim(self.worker_id, ...)``), as the
        background worker does: renew its lease while it runs, then complete it; a failure
        counts an attempt (retried with backoff, or failed for good) and is raised; a
        cancellation (a stopping ``memlane worker``) releases the job, attempt not counted."""
        result = await self._execute(job)
        assert result is not None
        return result

    async def _execute(self, job: Job) -> FormationResult | None:
        heartbeat = asyncio.create_task(self._heartbeat(job.id), name=f"memlane-lease-{job.id}")
        try:
            result = await self.run_job(job)
        except asyncio.CancelledError:
            await _stop(heartbeat)
            await asyncio.shield(self.jobs.release(job.id))
            raise
        except Exception as exc:
            await _stop(heartbeat)
            if is_permanent(exc):
                log.warning(
                    "memlane: formation job %s failed permanently (not retried): %s: %s",
                    job.id,
                    type(exc).__name__,
                    exc,
                )
                await self.jobs.fail(job.id, f"{type(exc).__name__}: {exc}", retry_in=None)
                raise
            delay = self._backoff(job.attempts)
            failed = await self.jobs.fail(job.id, f"{type(exc).__name__}: {exc}", retry_in=delay)
            if failed.status == "failed":
                log.warning("memlane: formation job %s failed %d times; giving up: %s", job.id, failed.attempts, exc)
            else:
                log.info("memlane: formation job %s failed (%s); retry in %.1fs", job.id, exc, delay)
            raise
        await _stop(heartbeat)
        await self.jobs.complete(job.id, result.model_dump(mode="json"))
        return result

    async def _heartbeat(self, job_id: str) -> None:
        """Renew the job's lease every third of ``lease_seconds`` while it runs, so only a dead
        (or hung) worker's job is taken over."""
        lease = self.config.lease_seconds
        while True:
            await asyncio.sleep(lease / 3)
            try:
                held = await self.jobs.renew(job_id, self.worker_id, lease_seconds=lease)
            except Exception as exc:  # a busy database: try again at the next beat
                log.warning("memlane: could not renew the lease of formation job %s: %s", job_id, exc)
                continue
            if not held:
                log.warning("memlane: formation job %s is no longer leased to this worker", job_id)
                return

    def _backoff(self, attempts: int) -> float:
        base = self.config.retry_base_seconds
        if base <= 0:
            return 0.0
        d = min(base * 2**attempts, self.config.retry_max_seconds)
        return float(d / 2 + random.uniform(0, d / 2))

    async def wait_for(self, job: Job, *, timeout: float | None = None) -> FormationResult:
        """Run ``job`` now (or wait for the worker that holds it); FormationError if it fails,
        FormationTimeoutError after ``timeout`` seconds (default ``wait_timeout_seconds``;
        the job is kept and finishes later)."""
        limit = timeout if timeout is not None else self.config.wait_timeout_seconds
        try:
            async with asyncio.timeout(limit) as deadline:
                return await self._wait(job)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            current = await self.jobs.get(job.id)
            status = current.status if current is not None else "gone"
            held = ""
            holder = current
            if current is not None and current.status == "queued":  # behind another job of the session?
                ahead = [j for j in await self.jobs.list(status="running", key=job.key) if j.id != job.id]
                holder = ahead[0] if ahead else None
                held = f", behind job {holder.id} (running)" if holder is not None else ""
            if holder is not None and holder.status == "running" and holder.worker:
                until = f" until {holder.lease_until:%H:%M:%S} UTC" if holder.lease_until else ""
                held += f", leased to worker {holder.worker}{until}"
            raise FormationTimeoutError(
                f"memory formation job {job.id} did not finish within {limit:g} s (status: {status}{held}); "
                "it is kept and finishes later: check it with get_job / `memlane jobs`, or raise "
                "FormationConfig.wait_timeout_seconds",
                job_id=job.id,
                status=status,
            ) from exc

    async def _wait(self, job: Job) -> FormationResult:
        announced = False
        while True:
            claimed = await self.jobs.claim(self.worker_id, lease_seconds=self.config.lease_seconds, job_id=job.id)
            if claimed is not None:
                try:
                    result = await self._execute(claimed)
                except (InvalidInputError, UsageError):
                    raise
                except Exception as exc:
                    if is_permanent(exc):
                        raise FormationError(
                            f"memory formation job {job.id} failed permanently ({type(exc).__name__}: {exc}); it "
                            f"is not retried automatically - the conversation is kept: fix the cause, then "
                            f"retry_job({job.id!r})"
                        ) from exc
                    raise FormationError(
                        f"memory formation failed ({type(exc).__name__}: {exc}); job {job.id} is kept and will "
                        "be retried - the conversation is not lost"
                    ) from exc
                assert result is not None
                return result
            current = await self.jobs.get(job.id)
            if current is None:
                raise FormationError(f"job {job.id} disappeared (was the user forgotten?)")
            if current.status == "done" and current.result is not None:
                return FormationResult.model_validate(current.result)
            if current.status == "failed" or (current.status == "queued" and current.attempts > 0):
                raise FormationError(
                    f"memory formation job {job.id} failed: {current.last_error}; it is kept for retry"
                )
            if not announced:
                announced = True
                log.info(
                    "memlane: waiting for formation job %s (%s) or the job ahead of it on its session",
                    job.id,
                    current.status,
                )
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ triggers
    async def on_event(
        self, app: str, session_id: str, event: Event, *, tier: int | None = None, session: Session | None = None
    ) -> Job | None:
        """Count the event toward the triggers, re-arm the idle timer, and enqueue a formation
        after an agent response once 45 messages or 1500 weighted tokens have accumulated
        (never with fewer than 4 messages)."""
        cfg = self.config
        if not cfg.enabled:
            return None
        who = self._who.get((app, session_id))
        if who is None:
            s = session or await self.sessions.get_session(session_id, app=app)
            who = (list(s.user_ids), s.agent_id) if s is not None else ([], None)
            self._who[(app, session_id)] = who
        messages, tokens = event_weight(event)
        cursor = await self.jobs.touch(
            app, session_id, user_ids=who[0], agent_id=who[1], tier=tier, messages=messages, tokens=tokens
        )
        if not cfg.auto_ingest:
            return None
        self.arm_idle(app, session_id)
        if event.type != EventType.AGENT_RESPONSE:
            return None
        due = cursor.pending_messages >= cfg.message_interval or cursor.pending_tokens >= cfg.token_interval
        if not due or cursor.pending_messages < cfg.min_messages:
            return None
        await self.jobs.reset_pending(app, session_id)
        return await self.enqueue_session(app, session_id, reason="trigger", upto=event.id)

    async def enqueue_session(
        self,
        app: str,
        session_id: str,
        *,
        reason: str,
        upto: str | None = None,
        clear: bool = False,
        final: bool = False,
        activity_at: datetime | None = None,
    ) -> Job:
        # the session's participants now, stored with the job: who may read it (GET /v1/jobs)
        # stays theirs even if the session id is later reused by someone else
        session = await self.sessions.get_session(session_id, app=app)
        cursor = None if session is not None else await self.jobs.get_cursor(app, session_id)
        users = list(session.user_ids) if session is not None else cursor.user_ids if cursor else []
        payload: dict[str, Any] = {
            "app": app,
            "session_id": session_id,
            "reason": reason,
            "upto": upto,
            "clear": clear,
            "final": final,
            "activity_at": activity_at.isoformat() if activity_at else None,
            "user_ids": users,
        }
        job = await self.jobs.enqueue(
            "form",
            session_key_of(app, session_id),
            payload,
            user_id=users[0] if len(users) == 1 else None,
            max_attempts=self.config.max_attempts,
            coalesce=reason in ("trigger", "idle"),
        )
        self.kick()
        return job

    def arm_idle(self, app: str, session_id: str) -> None:
        minutes = self.config.idle_minutes
        if minutes is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        old = self._timers.pop((app, session_id), None)
        if old is not None:
            old.cancel()
        self._timers[(app, session_id)] = loop.call_later(minutes * 60, self._fire_idle, app, session_id)

    def _fire_idle(self, app: str, session_id: str) -> None:
        self._timers.pop((app, session_id), None)
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._idle(app, session_id))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _idle(self, app: str, session_id: str) -> None:
        cursor = await self.jobs.get_cursor(app, session_id)
        if cursor is None:
            return
        await self.enqueue_session(
            app, session_id, reason="idle", clear=self.config.clear_on_idle, activity_at=cursor.last_activity_at
        )

    async def sweep_idle(self) -> list[Job]:
        """Startup sweep / cold sessions: enqueue idle formation for sessions silent longer than
        ``idle_minutes`` (e.g. while the process was down); arm timers for the others."""
        minutes = self.config.idle_minutes
        if minutes is None or not self.config.enabled:
            return []
        cutoff = utcnow() - timedelta(minutes=minutes)
        jobs = []
        for cursor in await self.jobs.idle_cursors(cutoff):
            jobs.append(
                await self.enqueue_session(
                    cursor.app,
                    cursor.session_id,
                    reason="idle",
                    clear=self.config.clear_on_idle,
                    activity_at=cursor.last_activity_at,
                )
            )
        return jobs

    def cancel_idle(self, app: str, session_id: str) -> None:
        h = self._timers.pop((app, session_id), None)
        if h is not None:
            h.cancel()

    # ------------------------------------------------------------------ jobs
    async def run_job(self, job: Job) -> FormationResult:
        before = self.meter.snapshot()
        if job.kind == "infer":
            result = await self._run_infer(job)
        elif job.kind == "consolidate":
            result = await self._run_consolidate(job)
        else:
            result = await self._run_form(job)
        after = self.meter.snapshot()
        result.usage = {
            task: {k: v - before.get(task, {}).get(k, 0) for k, v in counts.items()}
            for task, counts in after.items()
            if counts != before.get(task)
        }
        return result

    async def _user_name(self, turns: Sequence[Turn], user_id: str | None) -> str | None:
        """What facts call the user: the name their turns are written by, else the name a stored
        fact gives ("The user's name is Alice"), else a name-like user id (``sam``); None: "the user"."""
        name = _user_speaker(turns)
        if name is None and user_id:
            name = name_in_facts(await self.pipeline.user_facts(user_id, None, limit=200))
        return name or name_from_id(user_id)

    async def _checkpointed(self, job: Job, name: str, make: Any) -> Any:
        """Run a model step once per job: its output is saved in the job row and reused on replay."""
        if name in job.state:
            return job.state[name]
        value = await make()
        job.state[name] = value
        await self.jobs.checkpoint(job.id, job.state)
        return value

    async def _form_batch(
        self, job: Job, target: Target, turns: list[Turn], *, reflect: bool, summary: Summarize | None = None
    ) -> tuple[list[FactEvent], list[Reflection], list[str], Fact | None]:
        """Extract, decide, reflect and apply one batch (review mode: queue its changes as
        proposals); ``summary`` adds the session summary's change to the batch (applied with it,
        exactly once, also in review mode: it retells the reflections, which are applied) and is
        returned apart."""
        p = self.pipeline

        async def extract() -> list[dict[str, Any]]:
            unread: list[UnreadTurn] = []
            facts = [f.model_dump() for f in await p.extract(target, turns, unread=unread)]
            job.state["unread"] = [u.model_dump() for u in unread]  # checkpointed with the facts
            return facts

        facts = [ExtractedFact.model_validate(d) for d in await self._checkpointed(job, "extracted", extract)]
        vectors, candidates = await p.find_candidates(target, facts)
        saved = job.state.get("candidates")
        if saved is not None:  # a replay: decide over the candidates the model saw the first time
            candidates = [[ExistingFact.model_validate(c) for c in lst] for lst in saved]
        else:
            job.state["candidates"] = [[c.model_dump() for c in lst] for lst in candidates]

        async def decide() -> list[dict[str, Any]]:
            return [d.model_dump() for d in await p.decide(facts, candidates)]

        decisions = [Decision.model_validate(d) for d in await self._checkpointed(job, "decisions", decide)]
        changes = p.plan(target, facts, vectors, candidates, decisions, turns, job_key=job.id)
        review = self.config.reviews(target.agent_ns)
        proposed = [x.id for x in await p.propose_changes(changes, job_key=job.id)] if review else []
        if review:
            changes = []  # queued for a reviewer: nothing is applied to memory now
        await p.embed_updates(changes)
        reflections: list[Reflection] = []
        if reflect:

            async def do_reflect() -> list[dict[str, Any]]:
                return [r.model_dump(mode="json") for r in await p.reflect(target, turns, [f.content for f in facts])]

            reflections = [
                Reflection.model_validate(r) for r in await self._checkpointed(job, "reflections", do_reflect)
            ]
        summary_change = await summary(reflections) if summary is not None else None
        if summary_change is not None:
            changes.append(summary_change)
        applied = await p.apply(changes, reflections, key=f"job:{job.id}")
        summary_fact = None
        if applied and applied[-1].fact.kind == "summary":  # formation writes no other summary
            summary_fact = applied.pop().fact
        events = [FactEvent(event=a.event, fact=a.fact, previous=a.previous) for a in applied]
        return events, reflections, proposed, summary_fact

    async def _run_infer(self, job: Job) -> FormationResult:
        pl = job.payload
        turns = [Turn.model_validate(t) for t in pl["turns"]]
        target = Target(
            session_id=pl.get("session_id"),
            user_id=pl.get("user_id"),
            agent_ns=pl.get("agent_id"),
            user_name=pl.get("user_name") or await self._user_name(turns, pl.get("user_id")),
            force_scope=pl.get("scope", "user"),
            metadata=tuple(sorted((pl.get("metadata") or {}).items())),
        )
        changes, _, proposed, _ = await self._form_batch(job, target, turns, reflect=False)
        return FormationResult(
            job_id=job.id, reason="infer", turns=len(turns), changes=changes, proposed=proposed, unread=_unread(job)
        )

    async def _run_form(self, job: Job) -> FormationResult:
        pl = job.payload
        app, sid, reason = pl["app"], pl["session_id"], pl["reason"]
        result = FormationResult(job_id=job.id, reason=reason)
        session = await self.sessions.get_session(sid, app=app)
        cursor = await self.jobs.get_cursor(app, sid)
        if session is None:
            await self.jobs.delete_cursor(app, sid)
            result.skipped = "the session no longer exists"
            return result
        activity_at = pl.get("activity_at")
        if reason == "idle" and cursor is not None and activity_at:  # noqa: SIM102
            if cursor.last_activity_at > as_utc(datetime.fromisoformat(activity_at)):
                result.skipped = "the session was active again"
                return result
        events = session.events
        start = 0
        if cursor is not None and cursor.last_event_id:
            idx = next((i for i, e in enumerate(events) if e.id == cursor.last_event_id), None)
            start = idx + 1 if idx is not None else 0
        end = len(events)
        if pl.get("upto"):
            idx = next((i for i, e in enumerate(events) if e.id == pl["upto"]), None)
            if idx is not None:
                end = idx + 1
        batch = events[start:end]
        turns = events_to_turns(batch)
        forced = reason in ("reset", "end", "manual")
        target = Target(
            session_id=sid,
            user_id=session.user_id,
            agent_ns=agent_namespace(session.app, session.agent_id),
            is_group=session.is_group,
            tier=cursor.tier if cursor else 0,
            user_name=await self._user_name(turns, session.user_id) if not session.is_group else None,
            agent_name=_speaker(turns, "assistant") or session.agent_id,
        )
        if turns and (forced or len(turns) >= self.config.min_messages):
            so_far = events_to_turns(events[:end])  # the session up to this batch: what its summary covers

            async def summary(reflections: list[Reflection]) -> FactChange | None:
                return await self.pipeline.summarize(
                    target, so_far, reflections, app=app, session_created=session.created_at, job_key=job.id
                )

            changes, reflections, result.proposed, result.summary = await self._form_batch(
                job, target, turns, reflect=True, summary=summary
            )
            result.changes, result.reflections, result.turns = changes, reflections, len(turns)
            result.unread = _unread(job)
        elif not turns:
            result.skipped = "nothing new to form"
        else:
            result.skipped = f"only {len(turns)} new messages (minimum {self.config.min_messages})"
        final = bool(pl.get("final") or pl.get("clear"))
        if result.skipped is None or final:
            result.consolidated = await self.pipeline.consolidate(target, force=final)
        if batch and result.skipped is None:
            await self.jobs.advance(app, sid, last_event_id=batch[-1].id, formed=len(batch))
        if pl.get("clear") and (result.skipped is None or forced or not turns):
            latest = await self.sessions.get_session(sid, app=app)
            newer = latest is not None and latest.events and latest.events[-1].id != (batch[-1].id if batch else None)
            if newer and batch:
                log.info("memlane: session %s got new events during formation; not cleared", sid)
            else:
                if latest is not None:  # what the user said outlives the session (before it goes)
                    result.kept = [f.id for f in await self.pipeline.keep_user_turns(target, latest.events, app=app)]
                await self.sessions.delete_session(sid, app=app)
                # a cleared session starts fresh: its session-scope memory goes with it (user and
                # agent memory, and the facts, stay)
                await self.pipeline.reflections.clear_session_memory(**scope_key(target, "session"))  # type: ignore[arg-type]
                await self.jobs.delete_cursor(app, sid)
                self._who.pop((app, sid), None)
                self.cancel_idle(app, sid)
                result.cleared = True
        return result

    # ------------------------------------------------------------------ consolidation on demand
    async def enqueue_consolidate(
        self, scope: ReflectionScopeName, *, agent_id: str | None, user_id: str | None, session_id: str | None
    ) -> Job:
        """Queue the consolidation of one scope's pending reflections, however few (a queued one
        of the same scope that has not started takes this one's place)."""
        payload = {"scope": scope, "agent_id": agent_id, "user_id": user_id, "session_id": session_id}
        key = "\x1f".join(("consolidate", scope, agent_id or "", user_id or "", session_id or ""))
        job = await self.jobs.enqueue(
            "consolidate", key, payload, user_id=user_id, max_attempts=self.config.max_attempts, coalesce=True
        )
        self.kick()
        return job

    async def _run_consolidate(self, job: Job) -> FormationResult:
        pl = job.payload
        target = Target(session_id=pl.get("session_id"), user_id=pl.get("user_id"), agent_ns=pl.get("agent_id"))
        blob = await self.pipeline.consolidate_scope(target, pl["scope"], force=True)
        result = FormationResult(job_id=job.id, reason="consolidate", consolidated=[blob] if blob else [])
        if blob is None:
            result.skipped = "no reflections waiting to be consolidated"
        return result

    # ------------------------------------------------------------------ add(infer=True)
    async def enqueue_infer(
        self,
        turns: list[Turn],
        *,
        user_id: str | None,
        agent_id: str | None,
        session_id: str | None,
        scope: str,
        metadata: dict[str, Any],
    ) -> Job:
        payload = {
            "turns": [t.model_dump(mode="json") for t in turns],
            "user_id": user_id,
            "agent_id": agent_id,
            "session_id": session_id,
            "scope": scope,
            "metadata": metadata,
        }
        key = f"infer\x1f{user_id or ''}\x1f{agent_id or ''}"
        job = await self.jobs.enqueue("infer", key, payload, user_id=user_id, max_attempts=self.config.max_attempts)
        self.kick()
        return job
