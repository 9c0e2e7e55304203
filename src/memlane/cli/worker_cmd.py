"""``memlane worker``: a long-running process that runs formation jobs from the job queue.

Where the jobs live comes from the same settings as ``memlane serve`` (``--config`` file,
environment such as ``MEMLANE_DB`` / ``MEMLANE_QUEUE`` / ``MEMORY_TYPE`` / ``MEMORY_REDIS_URL``,
then ``--db`` / ``--queue`` / ``--embedder`` / ``--llm``), and so do the embedder and the
formation model. Any number of workers (and ``memlane serve`` replicas) may share one queue:
a job is leased to one worker at a time (``claim``), its lease is renewed while it runs
(heartbeat), a worker that dies stops renewing and the job is claimed again once the lease
expires, and the formed batch is applied exactly once per job (``apply_changes`` keyed by the
job: a replay finds its key and applies nothing again). A failed job is retried with backoff.

The worker also runs the idle sweep: sessions silent for ``sessions.idle_consolidate_minutes``
get an idle formation job (formed, then cleared). SIGTERM / SIGINT stop it gracefully: no new
claims, the running jobs are released (queued again, the attempt not counted), exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from memlane.cli.serve_cmd import service_settings
from memlane.config import MemlaneSettings, load_settings
from memlane.errors import ConfigError, UsageError
from memlane.models import Job, utcnow

if TYPE_CHECKING:
    from memlane.formation.runner import FormationResult
    from memlane.memory import AsyncMemory
    from memlane.service.hub import MemoryHub

__all__ = ["Worker", "WorkerStats", "add_parser", "cmd_worker", "worker_settings"]


@dataclass
class WorkerStats:
    """What a worker did, per outcome."""

    done: int = 0
    failed: int = 0
    """Attempts that failed (the job is retried later unless it failed for good)."""
    released: int = 0
    """Jobs given back on stop (queued again; another worker finishes them)."""
    swept: int = 0
    """Idle-formation jobs the sweep queued."""
    by_tenant: dict[str, int] = field(default_factory=dict)


def _stamp() -> str:
    return utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")


def _describe(result: FormationResult) -> str:
    counts: dict[str, int] = {}
    for c in result.changes:
        counts[c.event] = counts.get(c.event, 0) + 1
    done = {"ADD": "added", "UPDATE": "updated", "DELETE": "deleted"}
    parts = [f"{n} {done[event]}" for event, n in sorted(counts.items()) if event in done]
    if result.reflections:
        parts.append(f"{len(result.reflections)} reflections")
    if result.consolidated:
        parts.append(f"{len(result.consolidated)} consolidated")
    if result.unread:
        parts.append(f"{len(result.unread)} turns not read")
    if result.skipped:
        parts.append(f"skipped: {result.skipped}")
    if result.cleared:
        parts.append("session cleared")
    return ", ".join(parts) or "no changes"


class Worker:
    """Claims and runs formation jobs of one or more tenants until stopped (or, with
    ``once``, until no job is due).

    Args:
        hub: opens each tenant's engine (the service's tenant locations).
        tenants: the tenants whose queues this worker serves.
        concurrency: jobs run in parallel in this process.
        once: drain the due jobs, then return (cron, tests).
        poll: seconds between claims when the queue is empty.
        sweep_every: seconds between idle sweeps (0: no sweep; with ``once``: one sweep first).
        lease_seconds: the lease of a claimed job (renewed every third of it while it runs);
            None: the formation settings' (30 s).
        out: where the one-line-per-job log goes.
        as_json: log JSON objects instead of text lines.
    """

    def __init__(
        self,
        hub: MemoryHub,
        tenants: list[str],
        *,
        concurrency: int = 1,
        once: bool = False,
        poll: float = 1.0,
        sweep_every: float = 60.0,
        lease_seconds: float | None = None,
        out: TextIO | None = None,
        as_json: bool = False,
    ) -> None:
        if concurrency < 1:
            raise UsageError(f"--concurrency must be at least 1, got {concurrency}")
        self.hub = hub
        self.tenants = list(dict.fromkeys(tenants))
        self.concurrency = concurrency
        self.once = once
        self.poll = poll
        self.sweep_every = sweep_every
        self.lease_seconds = lease_seconds
        self.out = out if out is not None else sys.stdout
        self.as_json = as_json
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._running: set[asyncio.Task[FormationResult]] = set()
        self._engines: dict[str, AsyncMemory] = {}

    # ------------------------------------------------------------------ control
    def stop(self) -> None:
        """Stop claiming and release the running jobs (a signal handler calls this)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        for task in list(self._running):
            task.cancel()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> WorkerStats:
        """Open every tenant's engine, sweep, then run jobs until :meth:`stop` (or, with
        ``once``, until none is due). Returns the counts."""
        for tenant in self.tenants:
            engine = await self.hub.get(tenant)
            runner = engine.formation
            # this loop runs the jobs: never the engine's own background task as well
            update: dict[str, Any] = {"background": False}
            if self.lease_seconds is not None:
                update["lease_seconds"] = self.lease_seconds
            runner.config = runner.config.model_copy(update=update)
            self._engines[tenant] = engine
        await self._sweep()
        sweeper = None
        if not self.once and self.sweep_every > 0:
            sweeper = asyncio.create_task(self._sweeper(), name="memlane-worker-sweep")
        slots = [asyncio.create_task(self._slot(i), name=f"memlane-worker-{i}") for i in range(self.concurrency)]
        try:
            await asyncio.gather(*slots)
        finally:
            for t in slots:
                t.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            if sweeper is not None:
                sweeper.cancel()
                await asyncio.gather(sweeper, return_exceptions=True)
        return self.stats

    # ------------------------------------------------------------------ sweep
    async def _sweep(self) -> None:
        for tenant, engine in self._engines.items():
            cfg = engine.formation.config
            if self.stopping or not (cfg.enabled and cfg.auto_ingest and cfg.idle_minutes) or self.sweep_every <= 0:
                continue
            try:
                jobs = await engine.formation.sweep_idle()
            except Exception as exc:  # a busy store: the next sweep tries again
                self._line(tenant, None, "sweep-error", error=f"{type(exc).__name__}: {exc}")
                continue
            if jobs:
                self.stats.swept += len(jobs)
                self._line(tenant, None, "swept", detail=f"queued idle formation for {len(jobs)} session(s)")

    async def _sweeper(self) -> None:
        while not self.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.sweep_every)
            if not self.stopping:
                await self._sweep()

    # ------------------------------------------------------------------ jobs
    async def _claim(self, start: int) -> tuple[str, AsyncMemory, Job] | None:
        """The next due job of any tenant (round robin from ``start``), leased to this worker."""
        n = len(self.tenants)
        for k in range(n):
            tenant = self.tenants[(start + k) % n]
            engine = self._engines[tenant]
            runner = engine.formation
            job = await runner.jobs.claim(runner.worker_id, lease_seconds=runner.config.lease_seconds)
            if job is not None:
                return tenant, engine, job
        return None

    async def _slot(self, index: int) -> None:
        turn = index
        while not self.stopping:
            try:
                claimed = await self._claim(turn)
            except Exception as exc:  # the queue is unreachable for now: wait, then try again
                self._line("-", None, "claim-error", error=f"{type(exc).__name__}: {exc}")
                claimed = None
                if self.once:
                    raise
            turn += 1
            if claimed is None:
                if self.once:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.poll)
                continue
            tenant, engine, job = claimed
            if self.stopping:  # stopped while claiming: give it straight back
                await engine.formation.jobs.release(job.id)
                self.stats.released += 1
                self._line(tenant, job, "released", detail="worker stopping")
                return
            await self._run_one(tenant, engine, job)

    async def _run_one(self, tenant: str, engine: AsyncMemory, job: Job) -> None:
        began = time.monotonic()
        task = asyncio.create_task(engine.formation.execute(job), name=f"memlane-job-{job.id}")
        self._running.add(task)
        try:
            await asyncio.wait([task])
        finally:
            self._running.discard(task)
        took = time.monotonic() - began
        if task.cancelled():
            self.stats.released += 1
            self._line(tenant, job, "released", seconds=took, detail="worker stopping; queued again")
            return
        exc = task.exception()
        if exc is None:
            self.stats.done += 1
            self.stats.by_tenant[tenant] = self.stats.by_tenant.get(tenant, 0) + 1
            self._line(tenant, job, "done", seconds=took, detail=_describe(task.result()))
            return
        self.stats.failed += 1
        after = await engine.formation.jobs.get(job.id)
        if after is not None and after.status == "queued":
            retry = f"attempt {after.attempts} of {after.max_attempts}; retry at {after.next_run_at:%H:%M:%S}Z"
            self._line(tenant, job, "retry", seconds=took, detail=retry, error=f"{type(exc).__name__}: {exc}")
        else:
            tries = f"attempt {after.attempts} of {after.max_attempts}; " if after is not None else ""
            self._line(
                tenant,
                job,
                "failed",
                seconds=took,
                detail=f"{tries}not retried (memlane jobs --retry ID)",
                error=f"{type(exc).__name__}: {exc}",
            )

    # ------------------------------------------------------------------ log
    def _line(
        self,
        tenant: str,
        job: Job | None,
        outcome: str,
        *,
        seconds: float | None = None,
        detail: str = "",
        error: str | None = None,
    ) -> None:
        reason = job.payload.get("reason") if job is not None and job.kind == "form" else None
        if self.as_json:
            record: dict[str, Any] = {"at": _stamp(), "tenant": tenant, "outcome": outcome}
            if job is not None:
                record.update(job=job.id, kind=job.kind, reason=reason, attempts=job.attempts)
            if seconds is not None:
                record["seconds"] = round(seconds, 3)
            if detail:
                record["detail"] = detail
            if error:
                record["error"] = error
            text = json.dumps(record, ensure_ascii=False)
        else:
            what = f"job {job.id} {job.kind}{f'({reason})' if reason else ''}" if job is not None else "worker"
            took = f" in {seconds:.2f}s" if seconds is not None else ""
            tail = ": " + "; ".join(p for p in (detail, error) if p) if (detail or error) else ""
            text = f"{_stamp()} [{tenant}] {what} {outcome}{took}{tail}"
        print(" ".join(text.splitlines()), file=self.out, flush=True)


# ---------------------------------------------------------------------------- command
def worker_settings(args: argparse.Namespace) -> MemlaneSettings:
    """The settings ``memlane serve`` would use, plus ``--queue`` as ``memory.queue``.

    Raises:
        ConfigError: settings a worker cannot use (in-process ``local`` sessions, which a
            separate process cannot see).
    """
    settings = service_settings(args)
    if args.queue is not None:
        overrides = {**settings.overrides, "memory.queue": args.queue}
        settings = load_settings(settings.config_file, overrides=overrides)
    if settings.sessions.backend == "local":
        raise ConfigError(
            "memlane worker runs in its own process and cannot see in-process 'local' sessions: use "
            "sessions.backend sqlite (MEMORY_TYPE=sqlite), postgresql or redis for servers that leave "
            "formation to workers"
        )
    return settings


def _install_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """Route SIGTERM and SIGINT to ``stop``; returns the undo."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows / not the main thread
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop))

    def undo() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return undo


def cmd_worker(args: argparse.Namespace) -> int:
    from memlane.service.hub import DEFAULT_TENANT, MemoryHub

    settings = worker_settings(args)
    tenants = args.tenants or [DEFAULT_TENANT]
    hub = MemoryHub.from_settings(settings, watch=False)

    async def main() -> WorkerStats:
        worker = Worker(
            hub,
            tenants,
            concurrency=args.concurrency,
            once=args.once,
            poll=args.poll,
            sweep_every=args.sweep_every,
            lease_seconds=args.lease_seconds,
            as_json=args.json,
        )
        undo = _install_signals(worker.stop)
        try:
            if not args.quiet:
                mode = "draining due jobs" if args.once else "waiting for jobs (SIGTERM / Ctrl-C to stop)"
                print(
                    f"memlane worker: tenants {', '.join(worker.tenants)}, concurrency {args.concurrency}: {mode}",
                    file=sys.stderr,
                    flush=True,
                )
            return await worker.run()
        finally:
            undo()
            await hub.aclose()

    stats = asyncio.run(main())
    if not args.quiet:
        print(
            f"memlane worker: stopped: {stats.done} done, {stats.failed} failed attempts, {stats.released} released, "
            f"{stats.swept} idle sessions queued",
            file=sys.stderr,
            flush=True,
        )
    return 0


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def _seconds_or_zero(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else _positive_float(text)


def _concurrency(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``memlane worker`` to the CLI's sub-command parsers."""
    s = sub.add_parser(
        "worker",
        parents=[common],
        help="run formation jobs from the queue (long-running; any number of them)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run memory-formation jobs from the configured store / queue until stopped. Same\n"
        "settings as `memlane serve` (--config, MEMLANE_DB, MEMLANE_QUEUE, MEMORY_TYPE, MEMORY_REDIS_URL,\n"
        "--db, --queue), same embedder and --llm.\n\n"
        "Any number of workers may run at once, on one or many hosts: each job is leased to one worker\n"
        "and its lease renewed while it runs; a dead worker's job is taken over when the lease expires\n"
        "and applied once. Failed jobs are retried with backoff. The worker also queues idle formation\n"
        "for sessions silent for sessions.idle_consolidate_minutes. SIGTERM / Ctrl-C: stop claiming,\n"
        "release the running jobs (queued again, attempt not counted), exit 0.\n\n"
        "Logs one line per job on stdout: time, tenant, job id, kind, then done (what changed),\n"
        "retry, failed or released (--json: one JSON object per line).",
        epilog="Examples:\n  memlane worker --db postgresql://memlane@db/memlane --queue redis://cache:6379/0\n"
        "  memlane worker --concurrency 4 --tenant default --tenant acme\n"
        "  memlane worker --once          # drain due jobs, then exit (cron)",
    )
    s.add_argument(
        "--queue",
        default=None,
        metavar="URL",
        help="job queue, e.g. redis://127.0.0.1:6379/0 (default: memory.queue / $MEMLANE_QUEUE; "
        "none: the store's own job table)",
    )
    s.add_argument(
        "--concurrency",
        type=_concurrency,
        default=1,
        metavar="N",
        help="jobs run in parallel in this process (default: %(default)s)",
    )
    s.add_argument("--once", action="store_true", help="run the due jobs (and one idle sweep), then exit")
    s.add_argument(
        "--tenant",
        dest="tenants",
        action="append",
        metavar="NAME",
        help="serve this tenant's queue (repeatable; default: the default tenant only)",
    )
    s.add_argument("--tenants-dir", default=None, help="where other tenants' stores live (default: server.tenants_dir)")
    s.add_argument(
        "--poll",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="wait between claims when no job is due (default: %(default)s)",
    )
    s.add_argument(
        "--sweep-every",
        type=_seconds_or_zero,
        default=60.0,
        metavar="SECONDS",
        help="seconds between idle sweeps; 0: no sweep (default: %(default)s)",
    )
    s.add_argument(
        "--lease-seconds",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="lease of a running job, renewed every third of it; a dead worker's job is taken over "
        "after this (default: 30)",
    )
    s.set_defaults(fn=cmd_worker)
