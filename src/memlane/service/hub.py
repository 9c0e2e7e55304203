"""One memlane engine per tenant, for the service (HTTP API, MCP).

A tenant (the app an API key is bound to) is a unit of hard isolation: each tenant has its
own store. The ``default`` tenant uses the configured store; another tenant ``t`` uses
``<tenants_dir>/<t>.db`` (the tenant name percent-encoded into a file name), so no query of
one tenant can ever reach another's rows, and purging a tenant's user is the engine's own
``forget``.

Skeleton (issue 9): building engines from the settings model and hot reload land with the
configuration work; the interface the routes use is :meth:`MemoryHub.get`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from memlane import inputs
from memlane.memory import AsyncMemory

__all__ = ["DEFAULT_TENANT", "MemoryHub", "tenant_store"]

#: The tenant of a server without API keys (loopback only).
DEFAULT_TENANT = "default"


def tenant_store(default_store: str, tenants_dir: str | Path, tenant: str) -> str:
    """The store location of ``tenant``: the default store for :data:`DEFAULT_TENANT`, else a
    file of its own in ``tenants_dir`` whose name is the percent-encoded tenant name."""
    tenant = inputs.identifier(tenant, "tenant")
    if tenant == DEFAULT_TENANT:
        return default_store
    return str(Path(tenants_dir) / f"{quote(tenant, safe='')}.db")


class MemoryHub:
    """Opens (lazily) and keeps one :class:`AsyncMemory` per tenant.

    Args:
        factory: builds the (unopened) engine for a store location.
        default_store: the default tenant's store.
        tenants_dir: where other tenants' stores live.
    """

    def __init__(self, factory: Callable[[str], AsyncMemory], default_store: str, tenants_dir: str | Path) -> None:
        self._factory = factory
        self.default_store = default_store
        self.tenants_dir = Path(tenants_dir)
        self._engines: dict[str, AsyncMemory] = {}
        self._lock = asyncio.Lock()

    async def get(self, tenant: str) -> AsyncMemory:
        """The open engine of ``tenant`` (opened on first use)."""
        tenant = inputs.identifier(tenant, "tenant")
        engine = self._engines.get(tenant)
        if engine is not None:
            return engine
        async with self._lock:
            engine = self._engines.get(tenant)
            if engine is None:
                location = tenant_store(self.default_store, self.tenants_dir, tenant)
                if tenant != DEFAULT_TENANT:
                    self.tenants_dir.mkdir(parents=True, exist_ok=True)
                engine = await self._factory(location).open()
                self._engines[tenant] = engine
        return engine

    async def aclose(self) -> None:
        """Close every engine."""
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.close()
