"""``memlane proposals`` and ``memlane review``: the review queue from the shell (docs/review.md).

``memlane proposals -u alice`` lists a user's pending proposals (``-a AGENT``: an agent's queue,
``--status all`` every decision); ``memlane review ID`` approves one (``--edit TEXT``: approve
that text instead), ``memlane review ID --reject`` rejects it. The reviewer recorded as the
history's actor is ``--reviewer`` (default: ``cli``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from memlane.errors import UsageError
from memlane.models import Proposal
from memlane.sync import Memory

__all__ = ["add_parser", "cmd_proposals", "cmd_review", "proposal_line"]


def proposal_line(p: Proposal) -> str:
    """One proposal as the CLI prints it."""
    target = f" {p.target_id}" if p.target_id else ""
    text = f"  {p.text}" if p.text else ""
    why = f"  (reason: {p.reason})" if p.reason else ""
    who = p.user_id or f"agent {p.agent_id}"
    done = f"  -> {p.result_event} {p.result_id}" if p.result_id else ""
    by = f" by {p.reviewer}" if p.reviewer else ""
    return f"{p.id}  {p.status:<8} {p.action:<6}{target} [{who}]{text}{why}{by}{done}"


def cmd_proposals(args: argparse.Namespace) -> int:
    if not args.user_id and not args.agent_id:
        raise UsageError("proposals needs -u USER (whose proposals) and/or -a AGENT (the agent's queue)")
    with args.opener(args) as m:
        found = m.proposals(
            user_id=args.user_id,
            agent_id=args.agent_id,
            status=None if args.status == "all" else args.status,
            limit=args.limit,
        )
    if args.json:
        print(json.dumps([p.model_dump(mode="json") for p in found], indent=2, ensure_ascii=False))
        return 0
    for p in found:
        print(proposal_line(p))
    if not found:
        print("no proposals")
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    if args.reject and args.edit is not None:
        raise UsageError("--edit is the text to approve: it cannot go with --reject")
    with args.opener(args) as m:
        done = m.review(args.proposal_id, approve=not args.reject, edit=args.edit, reviewer=args.reviewer)
    print(proposal_line(done))
    return 1 if done.status == "stale" else 0


def add_parser(sub: Any, common: argparse.ArgumentParser, opener: Callable[[argparse.Namespace], Memory]) -> None:
    """Register ``proposals`` and ``review`` on the CLI's subcommands; ``opener(args)`` opens the
    memory the command works on (the CLI's own, with its settings)."""
    s = sub.add_parser("proposals", parents=[common], help="the review queue: proposed memory changes")
    s.add_argument("-u", "--user-id", help="whose proposals")
    s.add_argument("-a", "--agent-id", help="the agent's queue (every user's)")
    s.add_argument(
        "--status",
        choices=["pending", "approved", "rejected", "stale", "all"],
        default="pending",
        help="which (default: pending)",
    )
    s.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    s.set_defaults(fn=cmd_proposals, opener=opener)

    s = sub.add_parser("review", parents=[common], help="approve (or --reject) a proposal; exit 1 when it went stale")
    s.add_argument("proposal_id", help="the proposal's id (memlane proposals)")
    s.add_argument("--reject", action="store_true", help="reject it (default: approve)")
    s.add_argument("--edit", help="approve this text instead of the proposed one")
    s.add_argument("--reviewer", default="cli", help="who decides, recorded in history (default: cli)")
    s.set_defaults(fn=cmd_review, opener=opener)
