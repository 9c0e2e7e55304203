"""``memlane``: add, search and inspect memories from the shell.

Every command takes ``--db`` (default ``$MEMLANE_DB`` or the user data dir) and
``--embedder`` (default ``$MEMLANE_EMBEDDER`` or ``auto``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memlane import __version__
from memlane.cli import importers
from memlane.cli.progress import Progress
from memlane.config import Settings
from memlane.errors import MemlaneError
from memlane.models import Fact
from memlane.sync import Memory


def _fact_line(f: Fact, score: float | None = None) -> str:
    who = f" {f.author}:" if f.author and not f.content.startswith(f"{f.author}:") else ""
    when = f" ({f.occurred_at:%Y-%m-%d})" if f.occurred_at else ""
    sc = f"{score:.4f}  " if score is not None else ""
    gone = "  [deleted]" if f.invalid_at else ""
    return f"{sc}{f.id}{who} {f.content}{when}{gone}"


def _dump(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str, ensure_ascii=False))


def _open(args: argparse.Namespace) -> Memory:
    return Memory(args.db, embedder=args.embedder, sessions="sqlite")


# ---------------------------------------------------------------------------- commands
def cmd_add(args: argparse.Namespace) -> int:
    with _open(args) as m:
        facts = m.add(
            args.text, user_id=args.user_id, agent_id=args.agent_id, session_id=args.session_id,
            scope="agent" if args.shared else "user",
        )  # fmt: skip
        if args.json:
            _dump([f.model_dump(exclude={"embedding"}) for f in facts])
        else:
            for f in facts:
                print(f"added {f.id}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with _open(args) as m:
        res = m.search(args.query, user_id=args.user_id, agent_id=args.agent_id, top_k=args.top_k, debug=args.debug)
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
    with _open(args) as m:
        page = m.list(
            user_id=args.user_id, agent_id=args.agent_id, limit=args.limit, cursor=args.cursor,
            include_invalid=args.all,
        )  # fmt: skip
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


def cmd_history(args: argparse.Namespace) -> int:
    with _open(args) as m:
        rows = m.history(args.fact_id, user_id=args.user_id, agent_id=args.agent_id)
        if args.json:
            _dump([r.model_dump() for r in rows])
            return 0
        for r in rows:
            print(f"{r.at:%Y-%m-%d %H:%M:%S}  {r.event:<6} by {r.actor}: {r.old_content!r} -> {r.new_content!r}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _open(args) as m:
        f = m.delete(args.fact_id, user_id=args.user_id, agent_id=args.agent_id)
        print(f"deleted {f.id} (kept in history)")
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            print("refusing to forget without --yes (no terminal to confirm)", file=sys.stderr)
            return 2
        answer = input(f"Erase ALL memory of user {args.user_id!r}? This cannot be undone [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing erased")
            return 1
    with _open(args) as m:
        n = m.forget(args.user_id)
        print(f"erased {n} rows of user {args.user_id!r}")
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    with _open(args) as m:
        if args.session_id:
            events = m.sessions.get_events(args.session_id, limit=args.limit, app=args.app)
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


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as m:
        st = m.stats(user_id=args.user_id, agent_id=args.agent_id)
        data = {k: v for k, v in vars(st).items() if k != "extra"}
        data["db"] = m.engine.db_path
        if args.json:
            _dump(data)
        else:
            for k, v in data.items():
                print(f"{k:>12}: {v}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.is_file():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    fmt = args.format or importers.detect(path)
    # Read and validate everything first: a bad line aborts before anything is written.
    batches = list(importers.read_locomo(path, args.user_prefix) if fmt == "locomo" else importers.read_jsonl(path))
    total = sum(len(b.messages) for b in batches)
    with _open(args) as m, Progress(total, f"import {path.name}", unit="turn", enabled=not args.quiet) as bar:
        for b in batches:
            m.add(b.messages, user_id=b.user_id, session_id=b.session_id)
            bar.update(len(b.messages))
    print(f"imported {total} turns ({fmt}) into {args.db}")
    return 0


def cmd_bench_locomo(args: argparse.Namespace) -> int:
    from memlane.evaluation.locomo import evaluate, ingest, load
    from memlane.memory import AsyncMemory
    from memlane.retrieval.hybrid import RetrievalConfig

    convs = load(args.data, args.conversations)
    if not convs:
        print(f"no conversations in {args.data}", file=sys.stderr)
        return 2

    async def run() -> dict[str, Any]:
        db = args.bench_db or ":memory:"
        async with AsyncMemory(db, embedder=args.embedder, sessions="null") as m:
            total = sum(c.turns for c in convs)
            with Progress(total, "ingest", unit="turn", enabled=not args.quiet) as bar:
                n, sec = await ingest(m, convs, bar.update)
            modes = {"hybrid": RetrievalConfig(), "keyword": RetrievalConfig(vector_weight=0)}
            if m.embedder is not None:
                modes["vector"] = RetrievalConfig(keyword_weight=0, vector_weight=1)
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
                "data": str(args.data), "conversations": [c.sample_id for c in convs], "turns": n,
                "embedder": m.embedder.name if m.embedder else None,
                "ingest_s": round(sec, 2), "ingest_turns_per_s": round(n / sec, 1), "results": reports,
            }  # fmt: skip

    out = asyncio.run(run())
    if args.json:
        _dump(out)
        return 0
    print(f"LoCoMo {Path(args.data).name}: {len(out['conversations'])} conversations, {out['turns']} turns, "
          f"embedder {out['embedder']}")  # fmt: skip
    print(f"ingest: {out['ingest_s']} s = {out['ingest_turns_per_s']} turns/s")
    cols = ["recall@1", "recall@5", "recall@10", "hit@1", "hit@5", "hit@10", "search_p50_ms", "search_p95_ms"]
    heads = ["R@1", "R@5", "R@10", "hit@1", "hit@5", "hit@10", "p50ms", "p95ms"]
    print(f"{'mode':<8} {'n':>4} " + " ".join(f"{h:>6}" for h in heads))
    for r in out["results"]:
        print(f"{r['mode']:<8} {r['questions']:>4} " + " ".join(f"{r[c]:>6.3f}" for c in cols))
    return 0


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    settings = Settings()
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=settings.db, help="database file (default: $MEMLANE_DB or %(default)s)")
    common.add_argument(
        "--embedder", default=settings.embedder,
        help="auto | local | local:/path | hash | openai:MODEL | gemini:MODEL | none (default: %(default)s)",
    )  # fmt: skip
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress bars or warnings")

    scope = argparse.ArgumentParser(add_help=False)
    scope.add_argument("-u", "--user-id", help="the user whose memory this is")
    scope.add_argument("-a", "--agent-id", help="the agent / app namespace")

    p = argparse.ArgumentParser(
        prog="memlane",
        description="memlane: memory for LLM agents. Store, search and inspect memories.",
        epilog="Example: memlane add 'I am vegetarian' -u alice && memlane search 'what do I eat' -u alice",
    )
    p.add_argument("--version", action="version", version=f"memlane {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("add", parents=[common, scope], help="store a memory verbatim")
    s.add_argument("text", help="the text to remember")
    s.add_argument("-s", "--session-id", help="source session")
    s.add_argument("--shared", action="store_true", help="store in the agent's shared memory (needs -a)")
    s.set_defaults(fn=cmd_add)

    s = sub.add_parser("search", parents=[common, scope], help="hybrid keyword + vector search")
    s.add_argument("query", nargs="+", help="one to three queries (quote each)")
    s.add_argument("-k", "--top-k", type=int, default=10, help="results (default: %(default)s)")
    s.add_argument("--debug", action="store_true", help="show per-stage timings")
    s.set_defaults(fn=cmd_search)

    s = sub.add_parser("list", parents=[common, scope], help="list memories, newest first")
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
    s.set_defaults(fn=cmd_forget)

    s = sub.add_parser("sessions", parents=[common], help="list sessions, or show one session's events")
    s.add_argument("session_id", nargs="?", help="show this session's events")
    s.add_argument("--app", default="default", help="application namespace (default: %(default)s)")
    s.add_argument("-u", "--user-id", help="only sessions of this user")
    s.add_argument("-n", "--limit", type=int, default=None, help="newest N events")
    s.set_defaults(fn=cmd_sessions)

    s = sub.add_parser("stats", parents=[common, scope], help="counts for the database or one scope")
    s.set_defaults(fn=cmd_stats)

    s = sub.add_parser("import", parents=[common], help="import a LoCoMo JSON or a JSONL of turns")
    s.add_argument(
        "path", help="LoCoMo-format .json, or .jsonl lines of {user_id, session_id, role, content, timestamp}"
    )
    s.add_argument("--format", choices=["locomo", "jsonl"], help="default: detected from the file")
    s.add_argument("--user-prefix", default="", help="prefix for LoCoMo user ids (one user per conversation)")
    s.set_defaults(fn=cmd_import)

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="bench", metavar="BENCH", required=True)
    s = bsub.add_parser("locomo", parents=[common], help="LoCoMo retrieval: recall@1/5/10, hit@k, ingest, latency")
    s.add_argument("--data", required=True, help="path to a LoCoMo-format JSON (e.g. locomo_dev.json)")
    s.add_argument("--mode", choices=["all", "hybrid", "keyword", "vector"], default="all")
    s.add_argument("--conversations", nargs="*", help="only these sample ids (e.g. conv-26 conv-30)")
    s.add_argument("--bench-db", help="database for the run (default: in memory)")
    s.set_defaults(fn=cmd_bench_locomo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR if getattr(args, "quiet", False) else logging.WARNING,
                        format="%(message)s")  # fmt: skip
    try:
        code: int = args.fn(args)
    except MemlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
