"""The memlane HTTP API: :func:`create_app` builds the FastAPI application.

Run it with ``memlane serve`` (uvicorn, one process), or mount it yourself::

    from memlane.service.app import create_app
    app = create_app()          # settings from the environment / defaults

The app keeps one engine per tenant (:class:`~memlane.service.hub.MemoryHub`): the known
tenants' engines open when the app starts (lifespan), so their formation workers run the jobs a
crash left behind; any other tenant's opens on its first request; all close when the app shuts
down. Routes live in
:mod:`memlane.service.routes`; each module exposes ``router`` and is listed in :data:`ROUTERS`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI

from memlane import __version__
from memlane.config import MemlaneSettings, build_memory, load_settings
from memlane.memory import AsyncMemory
from memlane.service.auth import install_auth
from memlane.service.errors import ERROR_RESPONSES, install_error_handlers
from memlane.service.hub import MemoryHub
from memlane.service.keys import KeyStore
from memlane.service.limits import Limits

__all__ = ["ROUTERS", "create_app", "memory_enabled"]

log = logging.getLogger("memlane.service")

#: Route modules under :mod:`memlane.service.routes`, included in this order (each exposes
#: ``router``). To add an area: create ``routes/<name>.py`` with ``router = APIRouter(...)``
#: and append ``"<name>"`` here (one line).
ROUTERS: list[str] = [
    "health",
    "session_log",
    "adk",
    "sessions",
    "jobs",
    "memories",
    "search",
    "documents",
    "context",
    "tools",
    "users",
    "imports",
    "identities",
    "proposals",
    "summaries",
    "ui",
    "directory",
    "reflections",
    "activity",
]


def memory_enabled(settings: Any) -> bool:
    """False when the settings turn memory off (``memory.enabled: false`` / ``MEMORY_ENABLED=false``)."""
    block = getattr(settings, "memory", None)
    return bool(getattr(block, "enabled", True))


def _default_hub(settings: MemlaneSettings) -> MemoryHub:
    from_settings = getattr(MemoryHub, "from_settings", None)
    if from_settings is not None:
        hub: MemoryHub = from_settings(settings)
        return hub

    def factory(location: str) -> AsyncMemory:
        return build_memory(settings, location)

    return MemoryHub(factory, settings.memory.store, settings.server.tenants_dir)


def _key_tenants(keys: KeyStore | None) -> list[str]:
    """The tenants of the live API keys (their engines recover their formation jobs at start)."""
    if keys is None:
        return []
    try:
        return list(dict.fromkeys(k.tenant for k in keys.list(include_revoked=False)))
    except Exception as exc:  # an unreadable keys file: every request says so; the tenants open on use
        log.warning("memlane: could not list the API keys' tenants at start: %s", exc)
        return []


def create_app(
    settings: MemlaneSettings | None = None, *, hub: MemoryHub | None = None, keys: KeyStore | None = None
) -> FastAPI:
    """The memlane HTTP API.

    Args:
        settings: the service settings (None: :func:`memlane.config.load_settings`, i.e. the
            environment and ``$MEMLANE_CONFIG``).
        hub: the tenants' engines (default: built from ``settings``). The app closes it on
            shutdown.
        keys: the API key store (:class:`~memlane.service.keys.KeyStore`; a store without
            keys: every request is the ``default`` tenant and ``memlane serve`` listens on
            loopback only). None: the settings' ``server.keys_file``, looked at on every
            request like ``memlane serve`` does, so a key created there (by any process, before
            or after the app starts) is enforced: an app never ignores the configured keys
            file. Limits (body size, page size, rate, body timeout) come from
            ``settings.server``.
    """
    owned_keys: KeyStore | None = None
    if settings is None:
        settings = load_settings()
    if keys is None:  # fail closed: never ignore the configured keys file
        keys = owned_keys = KeyStore(settings.server.keys_file, create=False)
    the_hub = hub if hub is not None else _default_hub(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opener = getattr(the_hub, "open", None)  # a stand-in hub (tests) may have none
        if opener is not None:
            await opener(_key_tenants(keys))  # each known tenant's formation worker and startup sweep
        try:
            yield
        finally:
            await the_hub.aclose()
            if owned_keys is not None:
                owned_keys.close()

    app = FastAPI(
        title="memlane",
        version=__version__,
        description="memlane's HTTP API: sessions and events, long-term memory, search, context, "
        "formation jobs; KAOS memory endpoints and the adk-rs ingest endpoint.",
        lifespan=lifespan,
        # no 307 to the path without its trailing slash: `/v1/memories/%2F` (an id "/") or a stray
        # slash is a 404 in the JSON error shape, not an empty-bodied redirect to the listing
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.hub = the_hub
    install_error_handlers(app)
    install_auth(app, keys=keys, limits=Limits.from_settings(settings))  # keys, rate limit, body size
    for name in ROUTERS:
        module = importlib.import_module(f"memlane.service.routes.{name}")
        router: APIRouter = module.router
        app.include_router(router, responses=ERROR_RESPONSES)
    return app
