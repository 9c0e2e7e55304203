"""``memlane serve``: the HTTP API (FastAPI + uvicorn, one process by default).

Without API keys (``memlane keys create``) the server listens on loopback only and says so; a
non-loopback ``--host`` without keys is refused. With keys every request needs one, and its
key picks the tenant (and the user, for a user-bound key).
"""

from __future__ import annotations

import argparse
import sys
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


def service_settings(args: argparse.Namespace) -> MemlaneSettings:
    """The settings a server command (``serve``, ``mcp``) runs with: the file and environment,
    then the command-line values (``--db``, ``--embedder``, ``--llm``, ``--tenants-dir``,
    ``--no-formation-worker``) as overrides, which the hub applies again after a hot reload of
    the file.

    Raises:
        ConfigError: settings the engine cannot use (checked before anything is served).
    """
    settings = _settings(args)
    session_backend(settings)
    overrides = dict(settings.overrides)
    for key, value in (
        ("memory.store", args.db),
        ("memory.embedder", args.embedder),
        ("memory.llm", args.llm),
        ("server.tenants_dir", args.tenants_dir),
    ):
        if value is not None and str(value) != str(settings.get(key)):
            overrides[key] = str(value)
    if getattr(args, "formation_worker", None) is False and settings.server.formation_worker:
        overrides["server.formation_worker"] = False
    return load_settings(settings.config_file, overrides=overrides) if overrides else settings


def open_keys(args: argparse.Namespace, settings: MemlaneSettings) -> Any:
    """The API key store of ``--keys`` / ``server.keys_file``, whether or not the file exists
    yet: the server looks at the file on every request, so a key created later (by another
    process) is enforced on the next request. The server never creates the file.

    Raises:
        StorageError: the file exists but is not a usable keys database (nothing is served).
    """
    from memlane.service.keys import KeyStore

    return KeyStore(str(args.keys or settings.server.keys_file), create=False)


def build(args: argparse.Namespace) -> tuple[Any, str, bool]:
    """The app ``memlane serve`` runs, the host to bind, and whether keys are configured.

    Raises:
        ConfigError: a non-loopback host without keys, or settings the engine cannot use.
    """
    from memlane.service.app import create_app
    from memlane.service.hub import MemoryHub

    settings = service_settings(args)
    keys = open_keys(args, settings)
    has_keys = keys.configured()
    host = args.host or settings.server.host
    check_host(host, keys=has_keys)
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
    print(
        f"memlane: serving the HTTP API on http://{host}:{port} (inspector: /ui/, docs: /docs, schema: /openapi.json)",
        file=sys.stderr,
        flush=True,
    )
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
        "serve",
        parents=[common],
        help="serve the HTTP API (FastAPI + uvicorn)",
        description="Serve memlane's HTTP API: /v1 REST, KAOS /memory/events and /memory/sessions, the adk-rs "
        "ingest endpoint; OpenAPI at /openapi.json. Without API keys: loopback only.",
    )
    s.add_argument("--host", help="interface to bind (default: server.host, 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default: server.port, 8000)")
    s.add_argument("--workers", type=int, default=1, help="server processes (only 1 for now)")
    s.add_argument("--keys", default=None, help="API keys file (default: server.keys_file / $MEMLANE_KEYS_FILE)")
    s.add_argument("--tenants-dir", default=None, help="where each tenant's store lives (default: server.tenants_dir)")
    s.add_argument(
        "--no-formation-worker",
        dest="formation_worker",
        action="store_false",
        default=None,
        help="only queue formation jobs, for `memlane worker` processes (replicas); default: "
        "server.formation_worker / $MEMLANE_FORMATION_WORKER",
    )
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.add_argument("--access-log", action="store_true", help="log every request")
    s.set_defaults(fn=cmd_serve)
