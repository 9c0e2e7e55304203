"""``memlane summaries USER``: what a user talked about, one summary per formed session, the
latest first (``--since`` / ``--until`` narrow it to a period; docs/summaries.md)."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

from memlane.formation.summaries import SessionSummary
from memlane.sync import Memory

__all__ = ["add_parser", "cmd_summaries", "summary_lines"]


def summary_lines(s: SessionSummary) -> list[str]:
    """One summary as text: the period, session and count, the topics, the text."""
    start, end = s.start, s.end
    period = (
        f"{start:%Y-%m-%d %H:%M}-{end:%H:%M}"
        if start.date() == end.date()
        else f"{start:%Y-%m-%d %H:%M} - {end:%Y-%m-%d %H:%M}"
    )
    return [
        f"{period} UTC  session {s.session_id} ({s.message_count} messages, version {s.version})  {s.id}",
        f"  topics: {', '.join(s.topics) or '-'}",
        f"  {s.text}",
    ]


def cmd_summaries(open_memory: Callable[[argparse.Namespace], Memory], args: argparse.Namespace) -> int:
    with open_memory(args) as m:
        found = m.summaries(args.user_id, agent_id=args.agent_id, since=args.since, until=args.until, limit=args.limit)
    if args.json:
        print(json.dumps([s.model_dump(mode="json") for s in found], indent=2, ensure_ascii=False))
        return 0
    if not found:
        print(f"(no session summaries for {args.user_id})")
    for s in found:
        print("\n".join(summary_lines(s)))
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser, open_memory: Callable[[argparse.Namespace], Memory]) -> None:
    """``memlane summaries``; ``open_memory`` opens the command's memory (the CLI's own opener)."""
    s = sub.add_parser("summaries", parents=[common], help="what a user talked about: one summary per formed session")
    s.add_argument("user_id", help="whose sessions")
    s.add_argument("-a", "--agent-id", help="only sessions formed under this agent")
    s.add_argument("--since", help="only sessions still going at or after this time (ISO-8601, e.g. 2026-11-16)")
    s.add_argument("--until", help="only sessions begun at or before this time (ISO-8601)")
    s.add_argument("-n", "--limit", type=int, default=20, help="at most this many (default: %(default)s)")
    s.set_defaults(fn=functools.partial(cmd_summaries, open_memory))
