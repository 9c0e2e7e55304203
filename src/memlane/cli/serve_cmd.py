"""``memlane serve``: the HTTP API (FastAPI + uvicorn, one process by default).

Without API keys (``memlane keys create``) the server listens on loopback only and says so; a
non-loopback ``--host`` without keys is refused. With keys every request needs one, and its
key picks the tenant (and the user, for a user-bound key).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memlane.config import MemlaneSettings, load_settings, session_backend
from memlane.errors import UsageError
from memlane.service.keys import check_host, is_loopback

__all__ = ["LOOPBACK_NOTICE", "add_parser", "check_host", "cmd_serve", "is_loopback"]

#: Printed at start when no key is configured.
LOOPBACK_NOTICE = "no API keys configured: serving on loopback only"


def _settings(args: argparse.Namespace) -> MemlaneSettings:
    settings = getattr(args, "settings", None)
    if isinstance(settings, MemlaneSettings):
        return settings
    return load_settings(getattr(args, "config", None))


def build(args: argparse.Namespace) -> tuple[Any, str, bool]:
    """The app ``memlane serve`` runs, the host to bind, and whether keys are configured.

    Raises:
        ConfigError: a non-loopback host without keys, or settings the engine cannot use.
    """
    from memlane.service.app import create_app
    from memlane.service.hub import MemoryHub
    from memlane.service.keys import KeyStore

    settings = _settings(args)
    keys_path = str(args.keys or settings.server.keys_file)
    keys = KeyStore(keys_path) if Path(keys_path).exists() else None
    has_keys = keys is not None and keys.configured()
    host = args.host or settings.server.host
    check_host(host, keys=has_keys)
    session_backend(settings)  # a backend the engine cannot use fails here, before binding
    # Command-line values beat file and environment, also after a hot reload of the file
    # (the hub's ConfigWatcher applies settings.overrides again).
    overrides = dict(settings.overrides)
    for key, value in (("memory.store", args.db), ("memory.embedder", args.embedder), ("memory.llm", args.llm),
                       ("server.tenants_dir", args.tenants_dir)):  # fmt: skip
        if value is not None and str(value) != str(settings.get(key)):
            overrides[key] = str(value)
    if overrides:
        settings = load_settings(settings.config_file, overrides=overrides)
    hub = MemoryHub.from_settings(settings)  # watches settings.config_file once the app starts
    return create_app(settings, hub=hub, keys=keys), host, has_keys


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError as exc:
        raise UsageError("memlane serve needs the server extra: pip install 'memlane[server]'") from exc
    settings = _settings(args)
    port = args.port if args.port is not None else settings.server.port
    app, host, has_keys = build(args)
    if not has_keys:
        print(LOOPBACK_NOTICE, file=sys.stderr, flush=True)
    print(f"memlane: serving the HTTP API on http://{host}:{port} (docs: /docs, schema: /openapi.json)",
          file=sys.stderr, flush=True)  # fmt: skip
    if args.workers > 1:
        raise UsageError(
            "--workers > 1 is not supported yet: run several `memlane serve` processes on one --db behind a "
            "proxy instead"
        )
    uvicorn.run(app, host=host, port=port, log_level=args.log_level, access_log=args.access_log)
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``memlane serve`` to the CLI's sub-command parsers."""
    s = sub.add_parser(
        "serve", parents=[common], help="serve the HTTP API (FastAPI + uvicorn)",
        description="Serve memlane's HTTP API: /v1 REST, KAOS /memory/events and /memory/sessions, the adk-rs "
        "ingest endpoint; OpenAPI at /openapi.json. Without API keys: loopback only.",
    )  # fmt: skip
    s.add_argument("--host", help="interface to bind (default: server.host, 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default: server.port, 8000)")
    s.add_argument("--workers", type=int, default=1, help="server processes (only 1 for now)")
    s.add_argument("--keys", default=None, help="API keys file (default: server.keys_file / $MEMLANE_KEYS_FILE)")
    s.add_argument("--tenants-dir", default=None, help="where each tenant's store lives (default: server.tenants_dir)")
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.add_argument("--access-log", action="store_true", help="log every request")
    s.set_defaults(fn=cmd_serve)
