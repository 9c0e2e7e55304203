"""``memlane``: add, search and inspect memories from the shell.

Every command takes ``--db`` (default ``$MEMLANE_DB`` or the user data dir) and
``--embedder`` (default ``$MEMLANE_EMBEDDER`` or ``auto``), before or after the command name.
A :class:`~memlane.errors.MemlaneError` prints one ``memlane: error: ...`` line and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from memlane import __version__
from memlane.cli.bench_qa import add_qa_options, check_qa_options, cmd_locomo_qa, cmd_longmemeval_qa
from memlane.cli.config_cmd import add_parser as add_config_parser
from memlane.cli.config_cmd import config_argument
from memlane.cli.consolidate_cmd import add_parser as add_consolidate_parser
from memlane.cli.identity_cmd import add_parser as add_identity_parser
from memlane.cli.keys_cmd import add_parser as add_keys_parser
from memlane.cli.mcp_cmd import add_parser as add_mcp_parser
from memlane.cli.migrate_cmd import add_parser as add_migrate_parser
from memlane.cli.progress import Progress
from memlane.cli.review_cmd import add_parser as add_review_parser
from memlane.cli.serve_cmd import add_parser as add_serve_parser
from memlane.cli.summaries_cmd import add_parser as add_summaries_parser
from memlane.cli.worker_cmd import add_parser as add_worker_parser
from memlane.config import MemlaneSettings, formation_config, load_settings, redact_url, session_backend
from memlane.errors import CorruptDatabaseError, InvalidInputError, MemlaneError, NotFoundError, UsageError
from memlane.formation.config import FormationConfig, ReflectionScopeName
from memlane.formation.runner import FormationResult
from memlane.ingest import importers
from memlane.models import CheckReport, Fact, Job, utcnow
from memlane.registry import parse_store_url
from memlane.sync import Memory


def _fact_line(f: Fact, score: float | None = None) -> str:
    who = f" {f.author}:" if f.author and not f.content.startswith(f"{f.author}:") else ""
    when = f" ({f.occurred_at:%Y-%m-%d})" if f.occurred_at else ""
    sc = f"{score:.4f}  " if score is not None else ""
    gone = "  [deleted]" if f.invalid_at else ""
    return f"{sc}{f.id}{who} {f.content}{when}{gone}"


def _dump(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str, ensure_ascii=False))


#: Commands that read (or change) what is stored: they never create a database, a missing
#: file is an error. ``add``, ``import``, ``serve``, ``worker``, ``mcp`` and ``migrate`` create one.
NEEDS_DB = frozenset(
    {
        "search",
        "list",
        "history",
        "delete",
        "stats",
        "reflections",
        "profile",
        "proposals",
        "review",
        "summaries",
        "consolidate",
    }
)
#: These also read the session store and job queue, which may live in Redis without the file.
NEEDS_DB_UNLESS_REDIS = frozenset({"sessions", "form", "sweep", "jobs", "forget"})


def _require_db(args: argparse.Namespace, settings: MemlaneSettings) -> None:
    """A read-only command on a SQLite file that does not exist: NotFoundError (exit 2), and
    nothing is created (no file, no folders)."""
    command = getattr(args, "command", None)
    redis = settings.sessions.backend == "redis" or bool(settings.memory.queue)
    if command not in NEEDS_DB and (command not in NEEDS_DB_UNLESS_REDIS or redis):
        return
    scheme, location = parse_store_url(str(args.db))
    if scheme != "sqlite" or location == ":memory:" or Path(location).expanduser().exists():
        return
    raise NotFoundError(
        f"no database at {args.db} (memlane {command} never creates one; "
        "store something first with memlane add or memlane import, or pass --db)"
    )


def _open(args: argparse.Namespace) -> Memory:
    # Jobs run in the foreground here (a CLI process is short-lived); the idle timer and the
    # message triggers are the long-running app's business, so they are off: commands form
    # explicitly (`form`, `import --form`), pending sessions are picked up by `memlane sweep`.
    settings: MemlaneSettings = getattr(args, "settings", None) or load_settings(getattr(args, "config", None))
    _require_db(args, settings)
    formation = formation_config(settings, background=False, idle_minutes=None, auto_ingest=False)
    # Sessions: the store's own, unless the deployment keeps them in Redis (sessions.backend redis /
    # MEMORY_TYPE): then `sessions`, `form` and `forget` must see (and erase) those, as must `jobs`
    # the Redis queue (memory.queue / MEMLANE_QUEUE). In-process `local` sessions die with the CLI.
    sessions = session_backend(settings) if settings.sessions.backend == "redis" else "sqlite"
    return Memory(
        args.db,
        embedder=args.embedder,
        sessions=sessions,
        jobs=settings.memory.queue,
        llm=getattr(args, "llm", None),
        formation=formation,
        redact=settings.memory.redact,
    )


def _result_lines(res: FormationResult | Job) -> list[str]:
    if isinstance(res, Job):
        return [f"queued job {res.id}"]
    lines = [
        f"{c.event:<6} {c.fact.id}  {c.fact.content}"
        + (f"   (was: {c.previous})" if c.previous and c.previous != c.fact.content else "")
        for c in res.changes
    ]
    lines += [f"REFLECT[{r.scope}] {r.content}" for r in res.reflections]
    lines += [
        f"CONSOLIDATED[{b.scope}] version {b.version}, {len(b.consolidated_content.split())} words"
        for b in res.consolidated
    ]
    lines += [
        f"UNREAD turn {u.index}" + (f" ({u.event_id})" if u.event_id else "") + f": {u.reason}" for u in res.unread
    ]
    if res.skipped:
        lines.append(f"skipped: {res.skipped}")
    if res.cleared:
        lines.append("session cleared")
    return lines


# ---------------------------------------------------------------------------- commands
def _need_scope(args: argparse.Namespace, command: str) -> None:
    """The CLI's words for a missing -u/-a (the engine's name the Python arguments)."""
    if not args.user_id and not args.agent_id:
        raise UsageError(f"{command} needs -u USER (whose memory) and/or -a AGENT (the agent's memory)")


def cmd_add(args: argparse.Namespace) -> int:
    scope: Literal["user", "agent"] = "agent" if args.shared else "user"
    if args.shared and not args.agent_id:
        raise UsageError("add --shared needs -a AGENT (whose shared memory)")
    who = {"channel": args.channel, "sender": args.sender} if args.sender else {}
    if not args.shared and not args.user_id and not who:
        raise UsageError("add needs -u USER (whose memory it is), or --shared -a AGENT for an agent's shared memory")
    started = utcnow()
    with _open(args) as m:
        if args.infer:
            job = m.add(
                args.text,
                user_id=args.user_id,
                agent_id=args.agent_id,
                session_id=args.session_id,
                scope=scope,
                infer=True,
                wait=False,
                **who,
            )
            m.run_jobs()
            done = m.get_job(job.id)
            if done.status != "done" or done.result is None:
                print(f"formation failed: {done.last_error}; job {job.id} is kept for retry", file=sys.stderr)
                return 1
            res = FormationResult.model_validate(done.result)
            if args.json:
                _dump(res.model_dump(mode="json"))
            else:
                print("\n".join(_result_lines(res)) or "no facts (nothing durable to remember)")
            return 0
        ids = {"user_id": args.user_id, "agent_id": args.agent_id, "session_id": args.session_id, **who}
        facts = m.add(args.text, scope=scope, **ids)
        if args.json:
            _dump([f.model_dump(exclude={"embedding"}) for f in facts])
        else:
            for f in facts:  # an existing fact comes back as it was stored, before this call
                print(f"added {f.id}" if f.formed_at >= started else f"already stored {f.id} (nothing added)")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    _need_scope(args, "search")
    with _open(args) as m:
        ids = {"user_id": args.user_id, "agent_id": args.agent_id}
        res = m.search(args.query, **ids, top_k=args.top_k, debug=args.debug, as_of=args.as_of, valid_at=args.valid_at)
        if args.json:
            _dump(res.model_dump(exclude={"hits": {"__all__": {"fact": {"embedding"}}}}))
            return 0
        if not res.hits:
            print("no matches")
        for h in res.hits:
            print(_fact_line(h.fact, h.score))
        if args.debug and res.debug:
            print("timings (ms): " + ", ".join(f"{k}={v:.2f}" for k, v in res.debug["timings"].items()))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    _need_scope(args, "list")
    with _open(args) as m:
        page = m.list(
            user_id=args.user_id,
            agent_id=args.agent_id,
            limit=args.limit,
            cursor=args.cursor,
            include_invalid=args.all,
            as_of=args.as_of,
            valid_at=args.valid_at,
        )
        if args.json:
            _dump(page.model_dump(exclude={"items": {"__all__": {"embedding"}}}))
            return 0
        for f in page.items:
            print(_fact_line(f))
        print(
            f"-- {len(page.items)} of {page.total}"
            + (f"; next: --cursor {page.next_cursor}" if page.next_cursor else "")
        )
    return 0


def _owner(m: Memory, args: argparse.Namespace) -> dict[str, str | None]:
    """The scope of fact ``args.fact_id``: -u/-a when given, else the fact's own (ids are
    unique; the CLI works on the whole database, so an id alone finds the fact)."""
    if args.user_id or args.agent_id:
        return {"user_id": args.user_id, "agent_id": args.agent_id}
    row = m.run(_fact_scope(m, args.fact_id))
    if row is None:
        raise NotFoundError(f"no fact {args.fact_id!r} in {redact_url(str(args.db))}")
    return row


async def _fact_scope(m: Memory, fact_id: str) -> dict[str, str | None] | None:
    owner = await m.engine.facts.fact_owner(fact_id)
    if owner is None:
        return None
    return {"user_id": owner.user_id, "agent_id": owner.agent_id, "session_id": owner.session_id}


def cmd_history(args: argparse.Namespace) -> int:
    with _open(args) as m:
        rows = m.history(args.fact_id, **_owner(m, args))
        if args.json:
            _dump([r.model_dump() for r in rows])
            return 0
        for r in rows:
            print(f"{r.at:%Y-%m-%d %H:%M:%S}  {r.event:<6} by {r.actor}: {r.old_content!r} -> {r.new_content!r}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _open(args) as m:
        f = m.delete(args.fact_id, **_owner(m, args))
        print(f"deleted {f.id} (kept in history)")
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("refusing to forget without --yes (no terminal to confirm)")
        answer = input(f"Erase ALL memory of user {args.user_id!r}? This cannot be undone [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing erased")
            return 1
    with _open(args) as m:
        n = m.forget(args.user_id, shared="keep" if args.keep_shared else "erase")
        print(f"erased {n} rows of user {args.user_id!r}")
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    with _open(args) as m:
        if args.session_id:
            events = m.sessions.get_events(args.session_id, limit=args.limit, app=args.app)
            if not events and m.sessions.get_session(args.session_id, app=args.app) is None:
                raise NotFoundError(
                    f"no session {args.session_id!r} in app {args.app!r} (`memlane sessions` lists them)"
                )
            if args.json:
                _dump([e.model_dump() for e in events])
            for e in [] if args.json else events:
                print(f"{e.timestamp:%Y-%m-%d %H:%M:%S}  {e.type:<24} {e.author}: {e.text[:200]}")
            return 0
        sessions = m.sessions.list_sessions(app=args.app, user_id=args.user_id)
        if args.json:
            _dump([s.model_dump(exclude={"events"}) for s in sessions])
            return 0
        for s in sessions:
            print(
                f"{s.id}  users={','.join(s.user_ids) or '-'}  channel={s.channel or '-'}"
                f"  updated={s.updated_at:%Y-%m-%d %H:%M}"
            )
        if not sessions:
            print("no sessions")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    db = str(args.db)
    if "://" not in db and db != ":memory:" and not Path(db).exists():
        raise NotFoundError(f"no database at {db} (memlane check never creates one)")
    try:
        with Memory(db, embedder="none", formation=FormationConfig(background=False, idle_minutes=None)) as m:
            report = m.check()
    except CorruptDatabaseError as exc:  # too damaged to open
        report = CheckReport(ok=False, problems=[str(exc)], location=db)
    shown = redact_url(db)  # a PostgreSQL URL's password is never printed
    if args.json:
        _dump(report.model_dump() | {"location": redact_url(report.location)})
    elif report.ok:
        what = "index, vector column and job checks" if "://" in db else "integrity check and full-text index check"
        print(f"ok: {shown} is healthy ({what} passed)")
    else:
        print(f"{shown}: {len(report.problems)} problem(s) found:")
        for problem in report.problems:
            print(f"  {problem}")
        if "://" in db:  # PostgreSQL: the problems name their repair (REINDEX, ...)
            print("Repair what each problem names, or restore the database from a backup.")
        else:
            print("Stop every process using the file and restore it from a backup.")
    return 0 if report.ok else 1


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as m:
        st = m.stats(user_id=args.user_id, agent_id=args.agent_id)
        data = {k: v for k, v in vars(st).items() if k != "extra"}
        data["db"] = redact_url(m.engine.db_path)
        if args.json:
            _dump(data)
        else:
            for k, v in data.items():
                print(f"{k:>12}: {v}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.is_file():
        raise InvalidInputError(f"{path} is not a file" if path.exists() else f"no such file: {path}")
    # The importers workflow, as POST /v1/import runs it. All or nothing: parse and check every
    # line, then try every batch on a scratch database, before the first row is written; a bad
    # line names itself and changes nothing.
    plan = importers.read_plan(path, args.format, args.user_prefix)
    fmt, total = plan.format, plan.turns
    with Progress(total, f"check {path.name}", unit="turn", enabled=not args.quiet) as bar:
        importers.check_with_engine(plan.batches, bar.update)
    with _open(args) as m:
        # Bulk: ~2,048 turns per transaction, across sessions, embedded in one call per chunk
        # (--embed now) or after everything is stored, in big batches (--embed deferred).
        embed: Literal["now", "low"] = "now" if args.embed == "now" else "low"
        with Progress(total, f"import {path.name}", unit="turn", enabled=not args.quiet) as bar:
            new = m.run(importers.store_turns(m.engine, plan, embed=embed, progress=bar.update))
        where = redact_url(str(args.db))
        if new == total:
            print(f"imported {total} turns ({fmt}) into {where}")
        elif new == 0:
            print(f"nothing new: all {total} turns ({fmt}) were already in {where}")
        else:
            print(f"imported {new} new turns ({fmt}) into {where}; {total - new} were already there")
        if embed != "now" and m.engine.embedder is not None:
            _drain_embeddings(m, quiet=args.quiet)
        # kept as sessions: `memlane form SESSION` forms one later
        with Progress(len(plan.sessions), "sessions", unit="session", enabled=not args.quiet) as bar:
            added = m.run(importers.keep_sessions(m.engine, plan, bar.update))
        if args.form:
            _form_sessions(m, plan, quiet=args.quiet)
        elif added:
            names = sorted(plan.session_ids)
            print(
                f"kept {added} turns as {len(names)} session(s) ({', '.join(names[:5])}"
                f"{', ...' if len(names) > 5 else ''}): form one with memlane form SESSION_ID, "
                "or all of them with memlane import --form"
            )
    return 0


def _drain_embeddings(m: Memory, *, quiet: bool) -> None:
    """Wait for the background queue to embed what the import stored, with a progress bar.
    Interrupted, nothing is lost: rows without vectors are embedded by the next process that
    runs the queue (``memlane import --embed deferred``, ``drain_embeddings()``)."""
    with Progress(None, "embed", unit="turn", enabled=not quiet) as bar:  # a batch in flight is not "queued"
        while True:
            p = m.embedding_progress()
            bar.update(p["done"] - bar.n)
            if p["idle"] or p["queued"] == 0 or p["failed"]:
                break
            time.sleep(0.25)
        done = m.drain_embeddings()  # the rest (the store's rows left without vectors); raises if failing
        bar.update(done["done"] - bar.n)
    print(f"embedded {done['done']} turns")


def _form_sessions(m: Memory, plan: importers.ImportPlan, *, quiet: bool) -> None:
    """Form memory from each imported session (facts, reflections, blobs)."""
    ids = plan.session_ids
    with Progress(len(ids), "form memory", unit="session", enabled=not quiet) as bar:
        results = m.run(importers.form_sessions(m.engine, plan, bar.update))
    changes = sum(1 for res in results for c in res.changes if c.event != "NONE")
    reflections = sum(len(res.reflections) for res in results)
    blobs = sum(len(res.consolidated) for res in results)
    print(
        f"formed {changes} fact changes, {reflections} reflections, {blobs} consolidations "
        f"from {len(ids)} sessions (model {m.engine.pipeline.fast.name})"
    )


def cmd_form(args: argparse.Namespace) -> int:
    with _open(args) as m:
        if args.reset:
            res = m.reset_session(args.session_id, app=args.app)
        elif args.end:
            res = m.end_session(args.session_id, app=args.app)
        else:
            res = m.form(args.session_id, app=args.app)
        if args.json:
            _dump(res.model_dump(mode="json"))
        else:
            print("\n".join(_result_lines(res)) or "nothing formed")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with _open(args) as m:
        if args.retry:
            m.retry_job(args.retry)
            print(f"re-queued {args.retry}")
        if args.run:
            print(f"ran {m.run_jobs()} job(s)")
        jobs = m.list_jobs(status=args.status, limit=args.limit)
        if args.json:
            _dump([j.model_dump(mode="json") for j in jobs])
            return 0
        for j in jobs:
            what = j.payload.get("session_id") or j.payload.get("user_id") or ""
            err = f"  last error: {j.last_error[:120]}" if j.last_error and j.status != "done" else ""
            print(f"{j.id}  {j.kind:<5} {j.status:<7} attempts={j.attempts}  {j.payload.get('reason', '')} {what}{err}")
        if not jobs:
            print("no jobs")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    _require_db(args, getattr(args, "settings", None) or load_settings(getattr(args, "config", None)))
    formation = FormationConfig(background=False, idle_minutes=args.idle_minutes)
    with Memory(args.db, embedder=args.embedder, sessions="sqlite", llm=args.llm, formation=formation) as m:
        jobs = m.sweep_idle()
        ran = m.run_jobs()
        print(f"{len(jobs)} idle session(s) queued, {ran} job(s) run")
    return 0


def cmd_reflections(args: argparse.Namespace) -> int:
    with _open(args) as m:
        out: dict[str, Any] = {}
        scopes: list[ReflectionScopeName] = []
        if args.agent_id:
            scopes.append("agent")
        if args.user_id:
            scopes.append("user")
        if args.session_id:
            scopes.append("session")
        if not scopes:
            raise UsageError("give -u USER, -a AGENT and/or -s SESSION")
        for scope in scopes:
            kw = {"user_id": args.user_id, "agent_id": args.agent_id, "session_id": args.session_id}
            blob = m.consolidated(scope, **kw)
            pending = m.reflections(scope, absorbed=False, **kw)
            out[scope] = {
                "consolidated": blob.consolidated_content if blob else None,
                "pending": [r.content for r in pending],
            }
        if args.json:
            _dump(out)
            return 0
        for name, data in out.items():
            print(f"== {name} memory")
            print(data["consolidated"] or "(not consolidated yet)")
            for r in data["pending"]:
                print(f"  + {r}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    if not args.user_id:
        raise UsageError("profile needs -u USER (whose profile)")
    with _open(args) as m:
        block = m.profile(args.user_id, agent_id=args.agent_id, items=args.item or (), as_of=args.as_of)
        print(block if block is not None else "(no profile: nothing stored for this user)")
    return 0


def cmd_bench_locomo(args: argparse.Namespace) -> int:
    from memlane.evaluation.locomo import evaluate, ingest, load
    from memlane.memory import AsyncMemory
    from memlane.retrieval.hybrid import RetrievalConfig

    check_qa_options(args, limit=True)
    if args.qa:
        return cmd_locomo_qa(args)
    convs = load(args.data, args.conversations)
    if not convs:
        raise InvalidInputError(
            f"no conversations in {args.data}" + (" match --conversations" if args.conversations else "")
        )

    async def run() -> dict[str, Any]:
        db = args.bench_db or ":memory:"
        win = {"embed_windows": not args.no_embed_windows}  # read when turns are embedded
        async with AsyncMemory(db, embedder=args.embedder, sessions="null", retrieval=RetrievalConfig(**win)) as m:
            total = sum(c.turns for c in convs)
            with Progress(total, "ingest", unit="turn", enabled=not args.quiet) as bar:
                n, sec = await ingest(m, convs, bar.update)
            modes = {"hybrid": RetrievalConfig(**win), "keyword": RetrievalConfig(vector_weight=0, **win)}
            if m.embedder is not None:
                modes["vector"] = RetrievalConfig(keyword_weight=0, vector_weight=1, **win)
            else:
                modes.pop("hybrid")
            chosen = list(modes) if args.mode == "all" else [args.mode]
            reports = []
            for mode in chosen:
                if mode not in modes:
                    raise MemlaneError(f"mode {mode!r} needs an embedder (got --embedder {args.embedder})")
                m.retrieval = modes[mode]
                nq = sum(len(c.questions) for c in convs)
                with Progress(nq, f"search ({mode})", unit="q", enabled=not args.quiet) as bar:
                    reports.append((await evaluate(m, convs, mode, bar.update)).as_dict())
            return {
                "data": str(args.data),
                "conversations": [c.sample_id for c in convs],
                "turns": n,
                "embedder": m.embedder.name if m.embedder else None,
                "embed_windows": win["embed_windows"],
                "ingest_s": round(sec, 2),
                "ingest_turns_per_s": round(n / sec, 1),
                "results": reports,
            }

    out = asyncio.run(run())
    if args.json:
        _dump(out)
        return 0
    print(
        f"LoCoMo {Path(args.data).name}: {len(out['conversations'])} conversations, {out['turns']} turns, "
        f"embedder {out['embedder']}"
    )
    print(f"ingest: {out['ingest_s']} s = {out['ingest_turns_per_s']} turns/s")
    cols = ["recall@1", "recall@5", "recall@10", "hit@1", "hit@5", "hit@10", "search_p50_ms", "search_p95_ms"]
    heads = ["R@1", "R@5", "R@10", "hit@1", "hit@5", "hit@10", "p50ms", "p95ms"]
    print(f"{'mode':<8} {'n':>4} " + " ".join(f"{h:>6}" for h in heads))
    for r in out["results"]:
        print(f"{r['mode']:<8} {r['questions']:>4} " + " ".join(f"{r[c]:>6.3f}" for c in cols))
    return 0


def cmd_bench_longmemeval(args: argparse.Namespace) -> int:
    from memlane.evaluation.longmemeval import KS, load, run
    from memlane.memory import AsyncMemory
    from memlane.retrieval.hybrid import RetrievalConfig

    check_qa_options(args)
    if args.qa:
        return cmd_longmemeval_qa(args)
    questions = load(args.data, roles=args.roles, limit=args.limit)
    if not questions:
        raise InvalidInputError(f"no questions in {args.data}")

    async def bench() -> dict[str, Any]:
        win = {"embed_windows": not args.no_embed_windows}  # read when turns are embedded
        retrieval = RetrievalConfig(**win)
        async with AsyncMemory(
            args.bench_db or ":memory:", embedder=args.embedder, sessions="null", retrieval=retrieval
        ) as m:
            modes = {"hybrid": RetrievalConfig(**win), "keyword": RetrievalConfig(vector_weight=0, **win)}
            if m.embedder is not None:
                modes["vector"] = RetrievalConfig(keyword_weight=0, vector_weight=1, **win)
            else:
                modes.pop("hybrid")
            if args.mode != "all":
                if args.mode not in modes:
                    raise MemlaneError(f"mode {args.mode!r} needs an embedder (got --embedder {args.embedder})")
                modes = {args.mode: modes[args.mode]}
            with Progress(len(questions), "longmemeval", unit="q", enabled=not args.quiet) as bar:
                reports, n, sec = await run(m, questions, modes, bar.update)
            return {
                "data": str(args.data),
                "questions": len(questions),
                "roles": args.roles,
                "turns": n,
                "embedder": m.embedder.name if m.embedder else None,
                "embed_windows": win["embed_windows"],
                "ingest_s": round(sec, 2),
                "ingest_turns_per_s": round(n / sec, 1) if sec else 0.0,
                "results": [r.as_dict() for r in reports],
            }

    out = asyncio.run(bench())
    if args.json:
        _dump(out)
        return 0
    print(
        f"LongMemEval {Path(args.data).name}: {out['questions']} questions, {out['turns']} turns "
        f"({out['roles']} turns), embedder {out['embedder']}"
    )
    print(f"ingest: {out['ingest_s']} s = {out['ingest_turns_per_s']} turns/s")
    cols = [f"{m}@{k}" for m in ("recall_any", "recall_all", "ndcg") for k in KS]
    heads = ["any@5", "any@10", "all@5", "all@10", "ndcg@5", "ndcg@10"]
    for r in out["results"]:
        print(
            f"\n== {r['mode']}: search p50 {r['search_p50_ms']} ms, p95 {r['search_p95_ms']} ms"
            f" ({r['skipped']} abstention/no-answer questions skipped)"
        )
        print(f"{'question type':<26} {'n':>4} " + " ".join(f"{h:>6}" for h in heads))
        rows = [*r["by_type"].items(), ("overall", r)]
        for name, row in rows:
            if row["questions"]:
                print(f"{name:<26} {row['questions']:>4} " + " ".join(f"{row[c]:>6.3f}" for c in cols))
    return 0


# ---------------------------------------------------------------------------- parser
def _positive(kind: type[int] | type[float]) -> Any:
    """An argparse type: a finite number > 0 (``0``, ``-5``, ``nan`` are usage errors)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _global_options(
    p: argparse.ArgumentParser, settings: MemlaneSettings, *, defaults: bool, engine: bool = True
) -> None:
    """The options every command takes. They are accepted before the command (``memlane --db x
    search``) and after it; the sub-commands' copies default to SUPPRESS so they do not
    overwrite a value given before the command. ``engine=False``: without ``--db``,
    ``--embedder`` and ``--llm``, for commands that open no memory (``keys``)."""

    def d(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    def esc(text: str) -> str:
        return text.replace("%", "%%")

    p.add_argument(
        "--config",
        metavar="FILE",
        default=d(settings.config_file),
        help="YAML config file with memory:, sessions:, server: blocks (default: $MEMLANE_CONFIG; "
        "see memlane config show)",
    )
    if engine:
        _engine_options(p, settings, d, esc)
    p.add_argument("--json", action="store_true", default=d(False), help="machine-readable output")
    p.add_argument("-q", "--quiet", action="store_true", default=d(False), help="no progress bars or warnings")


def _engine_options(p: argparse.ArgumentParser, settings: MemlaneSettings, d: Any, esc: Any) -> None:
    m = settings.memory
    p.add_argument(
        "--db", default=d(m.store), help=f"database file (default: $MEMLANE_DB, memory.store or {esc(m.store)})"
    )
    p.add_argument(
        "--embedder",
        default=d(m.embedder),
        help="auto | local | local:/path | e5 (multilingual) | hash | openai:MODEL | gemini:MODEL | none "
        f"(default: {esc(m.embedder)})",
    )
    p.add_argument(
        "--llm",
        default=d(m.llm),
        help="formation model: offline | openai:MODEL | ollama:MODEL | anthropic:MODEL | gemini:MODEL "
        f"(default: $MEMLANE_LLM, memory.llm or {esc(str(m.llm))})",
    )


def build_parser(settings: MemlaneSettings | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; option defaults come from ``settings`` (default: :func:`load_settings`)."""
    settings = settings if settings is not None else load_settings()
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, settings, defaults=False)
    plain = argparse.ArgumentParser(add_help=False)  # for commands that open no memory
    _global_options(plain, settings, defaults=False, engine=False)

    scope = argparse.ArgumentParser(add_help=False)
    scope.add_argument("-u", "--user-id", help="the user whose memory this is")
    scope.add_argument("-a", "--agent-id", help="the agent / app namespace")
    as_of = argparse.ArgumentParser(add_help=False)  # point-in-time reads (docs/temporal.md)
    as_of.add_argument("--as-of", metavar="TIME", help="ISO-8601: memory as it was then (record time)")
    when = argparse.ArgumentParser(add_help=False, parents=[as_of])
    when.add_argument("--valid-at", metavar="TIME", help="ISO-8601: what was true then (world time)")

    p = argparse.ArgumentParser(
        prog="memlane",
        description="memlane: memory for LLM agents. Store, search and inspect memories.",
        epilog="Example: memlane add 'I am vegetarian' -u alice && memlane search 'what do I eat' -u alice",
    )
    p.add_argument("--version", action="version", version=f"memlane {__version__}")
    _global_options(p, settings, defaults=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("add", parents=[common, scope], help="store a memory (verbatim, or --infer facts)")
    s.add_argument("text", help="the text to remember")
    s.add_argument("-s", "--session-id", help="source session")
    s.add_argument("--infer", action="store_true", help="extract and de-duplicate facts with --llm instead")
    s.add_argument("--shared", action="store_true", help="store in the agent's shared memory (needs -a)")
    s.add_argument("--channel", help="with --sender, instead of -u: the user linked to them (memlane identity)")
    s.add_argument("--sender", help="with --channel: who wrote it, as the channel names them")
    s.set_defaults(fn=cmd_add)

    s = sub.add_parser("search", parents=[common, scope, when], help="hybrid keyword + vector search")
    s.add_argument("query", nargs="+", help="one to three queries (quote each)")
    s.add_argument("-k", "--top-k", type=int, default=10, help="results (default: %(default)s)")
    s.add_argument("--debug", action="store_true", help="show per-stage timings")
    s.set_defaults(fn=cmd_search)

    s = sub.add_parser("list", parents=[common, scope, when], help="list memories, newest first")
    s.add_argument("-n", "--limit", type=int, default=50, help="page size (default: %(default)s)")
    s.add_argument("--cursor", help="continue after a previous page")
    s.add_argument("--all", action="store_true", help="include deleted (invalidated) memories")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("history", parents=[common, scope], help="show every change to a memory")
    s.add_argument("fact_id")
    s.set_defaults(fn=cmd_history)

    s = sub.add_parser("delete", parents=[common, scope], help="soft-delete a memory (kept in history)")
    s.add_argument("fact_id")
    s.set_defaults(fn=cmd_delete)

    s = sub.add_parser("forget", parents=[common], help="erase ALL memory of a user (irreversible)")
    s.add_argument("user_id")
    s.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    s.add_argument(
        "--keep-shared",
        action="store_true",
        help="keep the agent-shared memories the user contributed (unlinked from them); default: erase them too",
    )
    s.set_defaults(fn=cmd_forget)

    s = sub.add_parser("sessions", parents=[common], help="list sessions, or show one session's events")
    s.add_argument("session_id", nargs="?", help="show this session's events")
    s.add_argument("--app", default="default", help="application namespace (default: %(default)s)")
    s.add_argument("-u", "--user-id", help="only sessions of this user")
    s.add_argument("-n", "--limit", type=_positive(int), default=None, help="newest N events")
    s.set_defaults(fn=cmd_sessions)

    s = sub.add_parser("stats", parents=[common, scope], help="counts for the database or one scope")
    s.set_defaults(fn=cmd_stats)

    s = sub.add_parser("check", parents=[common], help="check the database for damage (exit 1 when damaged)")
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("import", parents=[common], help="import a LoCoMo JSON or a JSONL of turns")
    s.add_argument(
        "path", help="LoCoMo-format .json, or .jsonl lines of {user_id, session_id, role, content, timestamp}"
    )
    s.add_argument("--format", choices=["locomo", "jsonl"], help="default: detected from the file")
    s.add_argument("--user-prefix", default="", help="prefix for LoCoMo user ids (one user per conversation)")
    s.add_argument(
        "--embed",
        choices=["now", "deferred"],
        default="now",
        help="now: embed each chunk before storing it; deferred: store everything first (keyword-searchable at "
        "once), then embed in big batches (interrupted: the next run or drain_embeddings() finishes)",
    )
    s.add_argument(
        "--form",
        action="store_true",
        help="also replay each session and form memory from it (facts, reflections, consolidation) with --llm",
    )
    s.set_defaults(fn=cmd_import)

    s = sub.add_parser("form", parents=[common], help="form a session's new messages into memory now")
    s.add_argument("session_id")
    s.add_argument("--app", default="default", help="application namespace (default: %(default)s)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--end", action="store_true", help="session end: final formation + consolidate every scope")
    g.add_argument("--reset", action="store_true", help="/reset: form, then delete the session")
    s.set_defaults(fn=cmd_form)

    s = sub.add_parser("jobs", parents=[common], help="formation jobs: status, --run pending, --retry failed")
    s.add_argument("--status", choices=["queued", "running", "done", "failed"], help="only jobs in this state")
    s.add_argument("-n", "--limit", type=int, default=20, help="newest N (default: %(default)s)")
    s.add_argument("--run", action="store_true", help="run due jobs now")
    s.add_argument("--retry", metavar="JOB_ID", help="re-queue a failed job")
    s.set_defaults(fn=cmd_jobs)

    s = sub.add_parser("sweep", parents=[common], help="form (and clear) sessions idle for --idle-minutes")
    s.add_argument(
        "--idle-minutes", type=_positive(float), default=30.0, help="silence that counts as idle (> 0; default: 30)"
    )
    s.set_defaults(fn=cmd_sweep)

    s = sub.add_parser("reflections", parents=[common, scope], help="consolidated memory + pending reflections")
    s.add_argument("-s", "--session-id", help="include this session's memory")
    s.set_defaults(fn=cmd_reflections)

    s = sub.add_parser("profile", parents=[common, scope, as_of], help="the session-start user profile (<= 20 bullets)")
    s.add_argument("--item", action="append", help="a recent task/project to fold in (repeatable)")
    s.set_defaults(fn=cmd_profile)

    add_config_parser(sub)
    add_mcp_parser(sub, common)
    add_keys_parser(sub, plain)
    add_serve_parser(sub, common)
    add_worker_parser(sub, common)
    add_migrate_parser(sub, common)
    add_identity_parser(sub, common, _open)
    add_review_parser(sub, common, _open)
    add_summaries_parser(sub, common, _open)
    add_consolidate_parser(sub, common, _open)

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="bench", metavar="BENCH", required=True)
    s = bsub.add_parser("locomo", parents=[common], help="LoCoMo retrieval: recall@1/5/10, hit@k, ingest, latency")
    s.add_argument("--data", required=True, help="path to a LoCoMo-format JSON (e.g. locomo_dev.json)")
    s.add_argument("--mode", choices=["all", "hybrid", "keyword", "vector"], default="all")
    s.add_argument("--conversations", nargs="*", help="only these sample ids (e.g. conv-26 conv-30)")
    s.add_argument("--bench-db", help="database for the run (default: in memory)")
    s.add_argument(
        "--no-embed-windows",
        action="store_true",
        help="one vector per turn (its first ~1,000 characters), as before issue 22 (RetrievalConfig.embed_windows)",
    )
    add_qa_options(s, limit=True)
    s.set_defaults(fn=cmd_bench_locomo)
    s = bsub.add_parser(
        "longmemeval", parents=[common], help="LongMemEval retrieval: session recall_any/all@5/10, ndcg@5/10 by type"
    )
    s.add_argument("--data", required=True, help="path to a LongMemEval-format JSON (e.g. longmemeval_s_cleaned.json)")
    s.add_argument("--mode", choices=["all", "hybrid", "keyword", "vector"], default="all")
    s.add_argument("--limit", type=_positive(int), help="only the first N questions")
    s.add_argument(
        "--roles",
        choices=["all", "user"],
        default="all",
        help="turns stored: every turn (default) or only the user's (what the official turn retrievers index)",
    )
    s.add_argument("--bench-db", help="database for the run (default: in memory)")
    s.add_argument(
        "--no-embed-windows",
        action="store_true",
        help="one vector per turn (its first ~1,000 characters), as before issue 22 (RetrievalConfig.embed_windows)",
    )
    add_qa_options(s, limit=False)
    s.set_defaults(fn=cmd_bench_longmemeval)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = load_settings(config_argument(argv))
    except MemlaneError as exc:  # a broken config file or variable: one line, before any parsing
        print("memlane: error: " + " ".join(str(exc).split()), file=sys.stderr)
        return 2
    parser = build_parser(settings)
    args = parser.parse_args(argv)
    args.settings = settings
    logging.basicConfig(level=logging.ERROR if getattr(args, "quiet", False) else logging.WARNING, format="%(message)s")
    try:
        code: int = args.fn(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except MemlaneError as exc:
        print("memlane: error: " + " ".join(str(exc).split()), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`memlane sessions s1 | head`): stop quietly, like other Unix
        # tools, with the status of a process killed by SIGPIPE.
        _silence_stdout()
        return 128 + 13
    except KeyboardInterrupt:  # pragma: no cover
        print("interrupted", file=sys.stderr)
        return 130
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (captured in tests)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
