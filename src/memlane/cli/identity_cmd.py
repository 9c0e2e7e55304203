"""``memlane identity link|unlink|resolve|list``: the identity map, one person across channels.

``link CHANNEL SENDER USER_ID`` makes a sender on a channel that user (``memlane add --channel
--sender`` then stores into the user's memory); ``unlink`` removes the link; ``resolve`` prints
the user (exit 1 when none is linked); ``list USER_ID`` prints the user's links. ``--json`` on
each prints JSON.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

__all__ = ["add_parser", "cmd_identity"]


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str, ensure_ascii=False))


def cmd_identity(args: argparse.Namespace) -> int:
    with args.open_memory(args) as m:  # the CLI's Memory (settings, sessions, queue)
        if args.action == "link":
            link = m.link_identity(args.channel, args.sender, args.user_id)
            if args.json:
                _print(link.model_dump(mode="json"))
            else:
                print(f"linked {link.sender!r} on {link.channel!r} to user {link.user_id!r}")
            return 0
        if args.action == "unlink":
            removed = m.unlink_identity(args.channel, args.sender)
            if args.json:
                _print({"channel": args.channel, "sender": args.sender, "unlinked": removed})
            else:
                print(f"unlinked {args.sender!r} on {args.channel!r}" if removed else "no such link")
            return 0 if removed else 1
        if args.action == "resolve":
            user = m.resolve_identity(args.channel, args.sender)
            if args.json:
                _print({"channel": args.channel, "sender": args.sender, "user_id": user})
            elif user is None:
                print(f"no user is linked to {args.sender!r} on {args.channel!r}")
            else:
                print(user)
            return 0 if user is not None else 1
        links = m.identities(args.user_id)
        if args.json:
            _print([i.model_dump(mode="json") for i in links])
        for i in [] if args.json else links:
            print(f"{i.channel}\t{i.sender}\t(linked {i.linked_at:%Y-%m-%d %H:%M:%S})")
        if not links and not args.json:
            print(f"no links for user {args.user_id!r}")
        return 0


def add_parser(sub: Any, common: argparse.ArgumentParser, open_memory: Callable[[argparse.Namespace], Any]) -> None:
    """Register ``memlane identity`` on the CLI's subparsers; ``open_memory(args)`` opens the
    CLI's :class:`~memlane.Memory`."""
    p = sub.add_parser("identity", help="one person across channels: link a (channel, sender) to a user")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = actions.add_parser("link", parents=[common], help="link a sender on a channel to a user")
    s.add_argument("channel", help="telegram, sms, whatsapp, ...")
    s.add_argument("sender", help="the sender as the channel names them (a handle, a phone number)")
    s.add_argument("user_id", help="the user this sender is")
    s = actions.add_parser("unlink", parents=[common], help="remove a sender's link (exit 1: there was none)")
    s.add_argument("channel")
    s.add_argument("sender")
    s = actions.add_parser("resolve", parents=[common], help="print the user a sender is (exit 1: none)")
    s.add_argument("channel")
    s.add_argument("sender")
    s = actions.add_parser("list", parents=[common], help="a user's links")
    s.add_argument("user_id")
    p.set_defaults(fn=cmd_identity, open_memory=open_memory)
