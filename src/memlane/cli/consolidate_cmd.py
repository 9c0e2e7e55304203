"""``memlane consolidate SCOPE``: merge a scope's pending reflections into its consolidated blob
now, even below the scope's threshold (a ``consolidate`` job, run in this process unless
``--no-wait``), and say what came of it; ``--history`` lists the blob's versions instead."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from typing import Any

from memlane.formation.runner import FormationResult
from memlane.sync import Memory

__all__ = ["add_parser", "cmd_consolidate"]


def _ids(args: argparse.Namespace) -> dict[str, str | None]:
    return {"user_id": args.user_id, "agent_id": args.agent_id, "session_id": args.session_id}


def _whose(args: argparse.Namespace) -> str:
    named = [
        f"{k} {v}" for k, v in (("user", args.user_id), ("agent", args.agent_id), ("session", args.session_id)) if v
    ]
    return f"{args.scope} memory ({', '.join(named) or 'no ids'})"


def cmd_consolidate(open_memory: Callable[[argparse.Namespace], Memory], args: argparse.Namespace) -> int:
    with open_memory(args) as m:
        if args.history:
            versions = m.consolidated_history(args.scope, limit=args.limit, **_ids(args))
            if args.json:
                print(json.dumps([v.model_dump(mode="json") for v in versions], indent=2, ensure_ascii=False))
                return 0
            if not versions:
                print(f"(no consolidated versions of the {_whose(args)})")
            for v in versions:
                when = f"{v.consolidated_at:%Y-%m-%d %H:%M:%S} UTC" if v.consolidated_at else "-"
                print(f"== version {v.version}  {when}  {v.word_count}/{v.word_limit} words")
                print(v.content)
            return 0
        pending = len(m.reflections(args.scope, absorbed=False, **_ids(args)))  # checks the ids first
        print(f"consolidating the {_whose(args)} ...", file=sys.stderr, flush=True)
        done = m.consolidate(args.scope, wait=not args.no_wait, **_ids(args))
        if not isinstance(done, FormationResult):
            if args.json:
                print(json.dumps(done.model_dump(mode="json", include={"id", "kind", "status"}), indent=2))
            else:
                print(f"queued job {done.id} (status: {done.status}); a worker runs it (memlane worker / jobs --run)")
            return 0
        if args.json:
            print(json.dumps(done.model_dump(mode="json", include={"job_id", "consolidated", "skipped"}), indent=2))
            return 0
        if not done.consolidated:
            print(f"nothing to consolidate: {done.skipped or 'no pending reflections'} (job {done.job_id})")
            return 0
        blob = done.consolidated[0]
        words = len(blob.consolidated_content.split())
        print(f"consolidated {pending} reflection(s): version {blob.version}, {words}/{blob.word_limit} words")
        print(blob.consolidated_content)
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser, open_memory: Callable[[argparse.Namespace], Memory]) -> None:
    """``memlane consolidate``; ``open_memory`` opens the command's memory (the CLI's own opener)."""
    s = sub.add_parser(
        "consolidate", parents=[common], help="merge a scope's pending reflections into its consolidated memory now"
    )
    s.add_argument("scope", choices=["user", "agent", "session"], help="which buffer")
    s.add_argument("-u", "--user-id", help="the user (user and session scope)")
    s.add_argument("-a", "--agent-id", help="the agent namespace (needed for agent scope)")
    s.add_argument("-s", "--session-id", help="the session (session scope)")
    s.add_argument("--no-wait", action="store_true", help="only queue the job (a worker runs it)")
    s.add_argument("--history", action="store_true", help="list the blob's versions, newest first, instead")
    s.add_argument("-n", "--limit", type=int, default=20, help="--history: at most this many (default: %(default)s)")
    s.set_defaults(fn=functools.partial(cmd_consolidate, open_memory))
