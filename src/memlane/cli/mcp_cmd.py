"""``memlane mcp``: serve memlane's memory tools to MCP clients (stdio or streamable HTTP).

stdio (what desktop MCP clients start): one process per user, ``memlane mcp --user alice``.
Streamable HTTP: ``memlane mcp --transport http [--host H] [--port N]``; with API keys
(``memlane keys create``) each request's bearer key picks the tenant and the user; without
keys the server binds loopback only and acts for ``--user``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from memlane.cli.serve_cmd import open_keys, service_settings
from memlane.errors import UsageError

__all__ = ["DEFAULT_PORT", "add_parser", "cmd_mcp"]

#: Default port of the streamable-HTTP transport (``memlane serve`` has its own).
DEFAULT_PORT = 8765


def cmd_mcp(args: argparse.Namespace) -> int:
    from memlane.service import mcp
    from memlane.service.hub import MemoryHub

    settings = service_settings(args)
    hub = MemoryHub.from_settings(settings)
    if args.transport == "stdio":
        if not args.user_id:
            raise UsageError("memlane mcp --transport stdio acts for one user: give --user USER")
        asyncio.run(mcp.run_stdio(hub, mcp.fixed_caller(args.user_id, args.agent_id)))
        return 0

    keys = open_keys(args, settings)  # looked at on every request: keys created later are enforced
    keyless = None
    if keys.configured():
        if args.user_id:
            raise UsageError(
                "--user is for a server without API keys; with keys configured each request acts for its key's user"
            )
    else:
        if not args.user_id:
            raise UsageError(
                "no API keys are configured, so every request acts for one user: give --user USER "
                "(or create user-bound keys with memlane keys create)"
            )
        keyless = mcp.fixed_caller(args.user_id, args.agent_id)
    caller, verifier = mcp.key_caller(args.agent_id), mcp.KeyVerifier(keys)
    host = args.host or settings.server.host
    logging.getLogger("memlane.mcp").setLevel(logging.WARNING)
    asyncio.run(
        mcp.serve_http(
            hub,
            caller,
            verifier=verifier,
            keyless=keyless,
            host=host,
            port=args.port,
            path=args.path,
            body_timeout=settings.server.body_timeout,
        )
    )
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``memlane mcp`` to the CLI's sub-command parsers."""
    s = sub.add_parser(
        "mcp",
        parents=[common],
        help="serve memory tools to MCP clients (stdio or streamable HTTP)",
        description="Serve memlane's memory tools (search, remember, list, delete, context, profile) over MCP. "
        "stdio acts for --user; streamable HTTP acts for each request's API key (or for --user on a loopback "
        "server without keys).",
    )
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default: %(default)s")
    s.add_argument("-u", "--user", "--user-id", dest="user_id", help="the user whose memory the tools use")
    s.add_argument("-a", "--agent", "--agent-id", dest="agent_id", help="the agent namespace (optional)")
    s.add_argument("--host", help="HTTP: interface to bind (default: server.host, 127.0.0.1)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP: port (default: %(default)s)")
    s.add_argument("--path", default="/mcp", help="HTTP: endpoint path (default: %(default)s)")
    s.add_argument(
        "--keys",
        "--keys-file",
        dest="keys",
        metavar="FILE",
        help="HTTP: API keys file (default: server.keys_file, $MEMLANE_KEYS_FILE)",
    )
    s.add_argument(
        "--tenants-dir", default=None, help="HTTP: where each tenant's store lives (default: server.tenants_dir)"
    )
    s.set_defaults(fn=cmd_mcp)
