"""One memlane engine per tenant, for the service (HTTP API, MCP), rebuilt on a config reload.

A tenant (the app an API key is bound to) is a unit of hard isolation: each tenant has its
own store. The ``default`` tenant uses the configured store; another tenant ``t`` uses
``<tenants_dir>/<t>.db`` (the tenant name percent-encoded into a file name), so no query of
one tenant can ever reach another's rows, and purging a tenant's user is the engine's own
``forget``. On shared servers (:func:`tenant_location`, asking the backend's row in
:data:`memlane.registry.BACKENDS`) a tenant gets a PostgreSQL schema of its own (``?schema=``)
and a Redis key prefix of its own (``?prefix=``) for its sessions and its formation job
queue; the ``default`` tenant keeps the URLs as configured.

Hot reload (Gaia #60): :meth:`MemoryHub.reload` builds a new *generation* of engines (new
providers, new formation settings) that serves every request from then on, while requests
already running finish on the old engines. The old generation is closed once its leases
(:meth:`MemoryHub.lease`) are all returned and ``drain_seconds`` have passed since the reload
(the grace period covers callers of :meth:`MemoryHub.get`, which takes no lease). Live
sessions continue: they live in the store (``sqlite``), or, for the in-process ``local``
backend, in one session store per tenant that the hub hands from generation to generation.
:class:`ConfigWatcher` polls the YAML file and reloads when it changes; a bad edit is logged
and the old configuration stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from memlane import inputs
from memlane.memory import AsyncMemory
from memlane.registry import BACKENDS, backend_of, parse_store_url
from memlane.stores.base import TENANT_META_KEY, MetaStore

if TYPE_CHECKING:
    from memlane.config import MemlaneSettings
    from memlane.stores.local import LocalMemory

__all__ = ["DEFAULT_TENANT", "ConfigWatcher", "MemoryHub", "tenant_location", "tenant_store"]

log = logging.getLogger("memlane.service")

#: The tenant of a server without API keys (loopback only).
DEFAULT_TENANT = "default"

#: Seconds an engine replaced by a reload stays open for callers of :meth:`MemoryHub.get`.
DRAIN_SECONDS = 30.0


def tenant_location(location: str, tenant: str) -> str:
    """A shared-server URL (store, session store or job queue) as ``tenant`` uses it, by the
    ``tenant_location`` entry of the URL's backend in :data:`memlane.registry.BACKENDS`:

    * ``postgresql://...``: the same database, schema
      :func:`memlane.stores.postgres.tenants.tenant_schema` (the ``schema=`` parameter added or
      replaced);
    * ``redis://...`` / ``rediss://...`` / ``unix://...``: the same server, key prefix
      ``<prefix>tenant:<percent-encoded tenant>:`` under the configured ``prefix=`` (or the
      stores' default ``memlane:``), :func:`memlane.stores.redis.url.tenant_url`: the encoding
      keeps ``:`` out of the tenant part, so no tenant's keys share a prefix with another's
      nor with the default tenant's.

    The :data:`DEFAULT_TENANT` keeps ``location`` unchanged.

    Raises:
        ConfigError: ``location`` is not such a URL (files are per tenant through
            :func:`tenant_store`).
    """
    tenant = inputs.identifier(tenant, "tenant")
    if tenant == DEFAULT_TENANT:
        return location
    row = backend_of(location)
    if row is not None and row.tenant_location is not None:
        place: str = row.load(row.tenant_location)(location, tenant)
        return place
    from memlane.config import redact_url
    from memlane.errors import ConfigError

    shown = redact_url(location.partition("?")[0])
    shared = " or ".join(b.title for b in BACKENDS if b.shared)
    raise ConfigError(f"no per-tenant location for {shown!r}: use a {shared} URL")


def _is_shared_server(location: str) -> bool:
    row = backend_of(location)
    return row is not None and row.shared


def tenant_store(default_store: str, tenants_dir: str | Path, tenant: str) -> str:
    """The store location of ``tenant``: the default store for :data:`DEFAULT_TENANT`; on a
    shared server (a PostgreSQL one) its place there (:func:`tenant_location`); else a file of
    its own in ``tenants_dir`` whose name is the percent-encoded tenant name."""
    tenant = inputs.identifier(tenant, "tenant")
    if tenant == DEFAULT_TENANT:
        return default_store
    if _is_shared_server(default_store):
        return tenant_location(default_store, tenant)
    return str(Path(tenants_dir) / f"{quote(tenant, safe='')}.db")


async def _record_tenant(engine: AsyncMemory, tenant: str) -> None:
    """Keep ``tenant``'s name in its store on a shared server (:data:`TENANT_META_KEY`), where
    the place's name (a PostgreSQL schema) does not give the name back: the backend's tenant
    listing reads it (``GET /v1/tenants``). A store that cannot keep it is logged, not fatal."""
    facts = getattr(engine, "facts", None)
    if not isinstance(facts, MetaStore):
        return
    try:
        await facts.meta_setdefault(TENANT_META_KEY, tenant)
    except Exception as exc:  # the tenant still serves; it is listed once a key names it
        log.warning("memlane: could not record tenant %r in its store: %s", tenant, exc)


class _Retired(Exception):
    """The generation was closed while a caller was waiting for it; use the current one."""


#: Builds the (unopened) engine of ``(tenant, store location)``.
TenantFactory = Callable[[str, str], AsyncMemory]


class _Generation:
    """The engines built from one configuration."""

    def __init__(
        self,
        factory: TenantFactory,
        default_store: str,
        tenants_dir: str | Path,
        settings: MemlaneSettings | None,
        number: int,
    ) -> None:
        self.factory = factory
        self.default_store = default_store
        self.tenants_dir = Path(tenants_dir)
        self.settings = settings
        self.number = number
        self.engines: dict[str, AsyncMemory] = {}
        self.lock = asyncio.Lock()
        self.leases = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.closed = False
        self.retired_at: float | None = None
        self.serving = False
        """Start each engine's background formation (worker, startup sweep) as it opens: set
        by :meth:`MemoryHub.open` (a server); off for ``memlane worker``, which runs the jobs."""

    async def get(self, tenant: str) -> AsyncMemory:
        engine = self.engines.get(tenant)
        if engine is not None:
            return engine
        async with self.lock:
            if self.closed:
                raise _Retired
            engine = self.engines.get(tenant)
            if engine is None:
                location = tenant_store(self.default_store, self.tenants_dir, tenant)
                if tenant != DEFAULT_TENANT and not _is_shared_server(location):
                    self.tenants_dir.mkdir(parents=True, exist_ok=True)
                engine = await self.factory(tenant, location).open()
                if tenant != DEFAULT_TENANT and _is_shared_server(location):
                    await _record_tenant(engine, tenant)
                self.engines[tenant] = engine
                if self.serving:
                    await engine.start()
        return engine

    async def start_all(self) -> None:
        """Serve: start the background formation of every engine open now, and of each one
        opened from now on."""
        self.serving = True
        for engine in list(self.engines.values()):
            await engine.start()

    async def close(self) -> None:
        async with self.lock:
            self.closed = True
            engines, self.engines = list(self.engines.values()), {}
        for engine in engines:
            try:
                await engine.close()
            except Exception:  # one engine failing to close must not keep the others open
                log.exception("memlane: closing an engine of configuration #%d failed", self.number)


class MemoryHub:
    """Opens (lazily) and keeps one :class:`AsyncMemory` per tenant; :meth:`reload` swaps in
    engines built from new settings.

    Args:
        factory: builds the (unopened) engine for a store location (the tenant's own,
            :func:`tenant_store`).
        default_store: the default tenant's store.
        tenants_dir: where other tenants' file stores live.
        settings: the settings the factory was built from (:attr:`settings`), if any.
        drain_seconds: after a reload, how long replaced engines stay open at least (for
            callers of :meth:`get`); leased engines stay open until their leases end.
        tenant_factory: builds the engine of ``(tenant, store location)`` instead of
            ``factory`` (:meth:`from_settings` passes one: a tenant's session store and job
            queue are its own too).
    """

    def __init__(
        self,
        factory: Callable[[str], AsyncMemory] | None,
        default_store: str,
        tenants_dir: str | Path,
        *,
        settings: MemlaneSettings | None = None,
        drain_seconds: float = DRAIN_SECONDS,
        tenant_factory: TenantFactory | None = None,
    ) -> None:
        if tenant_factory is None:
            if factory is None:
                from memlane.errors import UsageError

                raise UsageError("MemoryHub needs a factory or a tenant_factory")
            tenant_factory = _by_location(factory)
        self._gen = _Generation(tenant_factory, default_store, tenants_dir, settings, 0)
        self.drain_seconds = drain_seconds
        self._retiring: dict[_Generation, asyncio.Task[None]] = {}
        self._reload_lock = asyncio.Lock()
        self._local_sessions: dict[str, LocalMemory] = {}
        self.watcher: ConfigWatcher | None = None
        self._recovery: asyncio.Task[list[str]] | None = None

    # ------------------------------------------------------------------ settings
    @classmethod
    def from_settings(
        cls,
        settings: MemlaneSettings,
        *,
        watch: bool = True,
        drain_seconds: float = DRAIN_SECONDS,
        env: Mapping[str, str] | None = None,
    ) -> MemoryHub:
        """A hub whose engines :func:`memlane.config.build_memory` builds from ``settings``.

        Args:
            watch: also watch ``settings.config_file`` (every ``server.reload_interval``
                seconds, from :meth:`open`) and reload when it changes.
            env: the environment the watcher reads with the file (default ``os.environ``).

        Raises:
            ConfigError: a setting no engine can be built from (e.g. ``redis`` sessions).
        """
        local_sessions: dict[str, LocalMemory] = {}
        factory = _settings_factory(settings, local_sessions)
        factory(DEFAULT_TENANT, settings.memory.store)  # no I/O: refuses unusable settings now
        hub = cls(
            None,
            settings.memory.store,
            settings.server.tenants_dir,
            settings=settings,
            drain_seconds=drain_seconds,
            tenant_factory=factory,
        )
        hub._local_sessions = local_sessions
        if watch and settings.config_file and settings.server.reload_interval > 0:
            environ = env if env is not None else getattr(settings, "_env", None)
            hub.watcher = ConfigWatcher(
                hub,
                settings.config_file,
                interval=settings.server.reload_interval,
                env=environ,
                overrides=settings.overrides,
            )
        return hub

    @property
    def settings(self) -> MemlaneSettings | None:
        """The settings new requests are served with (None: a hub built from a factory)."""
        return self._gen.settings

    @property
    def default_store(self) -> str:
        return self._gen.default_store

    @property
    def tenants_dir(self) -> Path:
        return self._gen.tenants_dir

    @property
    def generation(self) -> int:
        """How many reloads have taken effect (0: the first configuration)."""
        return self._gen.number

    # ------------------------------------------------------------------ engines
    async def open(self, tenants: Iterable[str] = ()) -> None:
        """Serve (the app's lifespan calls this): start the config watcher, if any, and
        background formation: each engine starts its formation worker and its startup sweep as
        it opens (unless ``server.formation_worker`` is off), and the engines of the tenants
        known now are opened at once, so the jobs a crash left (queued, or ``running`` with an
        expired lease) and the sessions that went idle meanwhile are formed without waiting
        for a request. Known tenants: :data:`DEFAULT_TENANT`, ``tenants`` (those of the API
        keys) and the tenants with a store file in the tenants dir; a tenant whose SQLite store
        file does not exist yet has nothing to recover and is opened on its first request.
        The engines open in a background task (:attr:`recovery`); one that fails to open is
        logged and opened again on its tenant's next request."""
        if self.watcher is not None:
            self.watcher.start()
        await self._gen.start_all()
        if self._recovery is None:
            names = list(dict.fromkeys([DEFAULT_TENANT, *tenants, *self._tenant_files()]))
            self._recovery = asyncio.create_task(self._open_known(names), name="memlane-recovery")

    @property
    def recovery(self) -> asyncio.Task[list[str]] | None:
        """The task opening the known tenants' engines at :meth:`open` (its result: the
        tenants opened), or None before :meth:`open`."""
        return self._recovery

    def _tenant_files(self) -> list[str]:
        """The tenants with a store file in the tenants dir (file stores only)."""
        if _is_shared_server(self.default_store):
            return []
        try:
            names = sorted(p.name for p in self.tenants_dir.glob("*.db") if p.is_file())
        except OSError:
            return []
        return [unquote(name[: -len(".db")]) for name in names]

    async def tenants(self, known: Iterable[str] = ()) -> list[str]:
        """The tenants this hub knows, sorted: :data:`DEFAULT_TENANT`, ``known`` (the live API
        keys' tenants), the tenants with an engine open now, and those with a store: a store
        file in the tenants dir, or on a shared server the places its backend's row lists
        (:attr:`memlane.registry.Backend.tenants`: PostgreSQL's tenant schemas)."""
        names = {DEFAULT_TENANT, *known, *self._gen.engines}
        row = backend_of(self.default_store)
        if row is not None and row.shared:
            if row.tenants is not None:
                names.update(await row.load(row.tenants)(self.default_store))
        else:
            names.update(await asyncio.to_thread(self._tenant_files))
        return sorted(names)

    def _has_store(self, tenant: str) -> bool:
        """False for a tenant whose store file does not exist (nothing to recover)."""
        try:
            location = tenant_store(self.default_store, self.tenants_dir, tenant)
            _, path = parse_store_url(location)
        except Exception:  # a bad name or location: opening it says why, on a request
            return False
        return _is_shared_server(location) or path == ":memory:" or Path(path).exists()

    async def _open_known(self, tenants: list[str]) -> list[str]:
        opened: list[str] = []
        for tenant in tenants:
            try:
                if not await asyncio.to_thread(self._has_store, tenant):
                    continue
                await self.get(tenant)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server still starts; the tenant's next request opens it
                log.warning(
                    "memlane: could not open tenant %r at start (%s); it is opened on its next request",
                    tenant,
                    " ".join(str(exc).split()) or type(exc).__name__,
                )
                continue
            opened.append(tenant)
        return opened

    async def get(self, tenant: str) -> AsyncMemory:
        """The open engine of ``tenant`` in the current configuration (opened on first use)."""
        tenant = inputs.identifier(tenant, "tenant")
        while True:
            gen = self._gen
            try:
                return await gen.get(tenant)
            except _Retired:
                if gen is self._gen:  # the hub itself is closed
                    from memlane.errors import UsageError

                    raise UsageError("the memory hub is closed") from None

    @contextlib.asynccontextmanager
    async def lease(self, tenant: str) -> AsyncIterator[AsyncMemory]:
        """``async with hub.lease(tenant) as memory``: the tenant's current engine, kept open
        until the block ends even when a reload replaces it meanwhile (one request's work)."""
        tenant = inputs.identifier(tenant, "tenant")
        while True:
            gen = self._gen
            gen.leases += 1
            gen.idle.clear()
            try:
                engine = await gen.get(tenant)
            except _Retired:
                self._release(gen)
                if gen is self._gen:
                    from memlane.errors import UsageError

                    raise UsageError("the memory hub is closed") from None
                continue
            except BaseException:
                self._release(gen)
                raise
            break
        try:
            yield engine
        finally:
            self._release(gen)

    @staticmethod
    def _release(gen: _Generation) -> None:
        gen.leases -= 1
        if gen.leases == 0:
            gen.idle.set()

    async def reload(self, settings: MemlaneSettings) -> None:
        """Serve new requests with engines built from ``settings`` (new providers, formation
        settings, tenants dir); requests in flight finish on the old engines, which are closed
        once drained. The tenants open now are opened on the new settings first: if that fails
        (a bad provider name, a missing extra), nothing changes and the error is raised.

        Raises:
            ConfigError: the new settings cannot build an engine; the old ones stay.
        """
        async with self._reload_lock:
            old = self._gen
            new = _Generation(
                _settings_factory(settings, self._local_sessions),
                settings.memory.store,
                settings.server.tenants_dir,
                settings,
                old.number + 1,
            )
            new.serving = old.serving
            try:
                new.factory(DEFAULT_TENANT, settings.memory.store)  # no I/O: refuses unusable settings
                for tenant in list(old.engines):
                    await new.get(tenant)
            except BaseException:
                await new.close()
                raise
            if old.settings is not None:
                before, after = old.settings.server, settings.server
                if (before.host, before.port) != (after.host, after.port):
                    log.warning("memlane: server.host / server.port changes take effect when the server restarts")
            self._gen = new
            old.retired_at = time.monotonic()
            self._retiring[old] = asyncio.create_task(self._retire(old))
        log.info("memlane: configuration #%d in use for new requests", new.number)

    async def _retire(self, gen: _Generation) -> None:
        try:
            await gen.idle.wait()
            assert gen.retired_at is not None
            left = self.drain_seconds - (time.monotonic() - gen.retired_at)
            if left > 0:
                await asyncio.sleep(left)
            await gen.idle.wait()  # a lease taken just before the reload may still be running
            await gen.close()
        finally:
            self._retiring.pop(gen, None)

    async def drained(self) -> None:
        """Wait until every engine replaced by a reload is closed."""
        while self._retiring:
            await asyncio.gather(*self._retiring.values(), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the watcher and close every engine, replaced ones included (at once)."""
        if self.watcher is not None:
            await self.watcher.stop()
        if self._recovery is not None and not self._recovery.done():
            self._recovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._recovery
        retiring = list(self._retiring.items())
        for _gen, task in retiring:
            task.cancel()
        for gen, task in retiring:
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await gen.close()
        self._retiring.clear()
        await self._gen.close()


def _by_location(factory: Callable[[str], AsyncMemory]) -> TenantFactory:
    def by_tenant(tenant: str, location: str) -> AsyncMemory:
        return factory(location)

    return by_tenant


def _settings_factory(settings: MemlaneSettings, local_sessions: dict[str, LocalMemory]) -> TenantFactory:
    """Engines for ``settings``: each tenant on its own store location, its own Redis session
    prefix (``sessions.backend: redis``) and its own job queue (``memory.queue``:
    :func:`tenant_location`); with the in-process ``local`` session backend, one session store
    per store location, shared by every generation (sessions outlive a reload). With
    ``server.formation_worker`` off the engines run no background formation: jobs are queued
    for ``memlane worker`` processes (a waiting ``form`` still runs its own job)."""
    from memlane.config import build_memory, formation_config, session_backend
    from memlane.stores.local import LocalMemory

    s = settings.sessions
    queue: str | None = getattr(settings.memory, "queue", None)
    formation = None if settings.server.formation_worker else formation_config(settings, background=False)

    def factory(tenant: str, location: str) -> AsyncMemory:
        jobs = tenant_location(queue, tenant) if queue else None
        if s.backend == "redis":
            url = session_backend(settings)  # the configured URL, or ConfigError
            assert isinstance(url, str)
            return build_memory(
                settings, location, sessions=tenant_location(url, tenant), jobs=jobs, formation=formation
            )
        if s.backend != "local":
            return build_memory(settings, location, jobs=jobs, formation=formation)
        store = local_sessions.get(location)
        if store is None:
            store = local_sessions[location] = LocalMemory(s.max_sessions, s.max_session_events)
        else:  # new limits apply from now on (existing sessions keep their event bound)
            store.max_sessions, store.max_session_events = s.max_sessions, s.max_session_events
        return build_memory(settings, location, sessions=store, jobs=jobs, formation=formation)

    return factory


class ConfigWatcher:
    """Polls a YAML config file and reloads ``hub`` when it changes.

    The file is checked every ``interval`` seconds (its mtime, size and inode); a change is
    read with :func:`memlane.config.load_settings` (the environment and ``overrides``, the
    command line's values, still win) and handed to
    :meth:`MemoryHub.reload`. A bad edit (YAML error, unknown key, a secret, a provider that
    cannot be built) is logged, counted in :attr:`failures`, kept in :attr:`last_error`, and
    the configuration in use stays; the next edit is tried again.
    """

    def __init__(
        self,
        hub: MemoryHub,
        path: str | os.PathLike[str],
        *,
        interval: float = 1.0,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        if not interval > 0:
            from memlane.errors import ConfigError

            raise ConfigError(f"the config watcher's interval must be > 0 seconds, got {interval!r}")
        self.hub = hub
        self.path = Path(path)
        self.interval = interval
        self.env = env
        self.overrides = dict(overrides or {})
        self.reloads = 0
        self.failures = 0
        self.last_error: str | None = None
        self._stamp = self._stat()
        self._task: asyncio.Task[None] | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    async def check(self) -> bool:
        """Look at the file once; reload when it changed. True when a reload took effect."""
        stamp = await asyncio.to_thread(self._stat)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        if stamp is None:
            self._failed(f"config file {self.path} is gone")
            return False
        from memlane.config import load_settings

        try:
            settings = await asyncio.to_thread(load_settings, self.path, env=self.env, overrides=self.overrides)
            await self.hub.reload(settings)
        except Exception as exc:  # any bad edit: keep serving with what works
            self._failed(" ".join(str(exc).split()) or type(exc).__name__)
            return False
        self.reloads += 1
        self.last_error = None
        log.info("memlane: reloaded the configuration from %s", self.path)
        return True

    def _failed(self, why: str) -> None:
        self.failures += 1
        self.last_error = why
        log.error("memlane: config reload failed, keeping the current configuration: %s", why)

    async def run(self) -> None:
        """Check every :attr:`interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    def start(self) -> None:
        """Run :meth:`run` on a task of the running loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name="memlane-config-watcher")

    async def stop(self) -> None:
        """Stop watching (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def __repr__(self) -> str:
        return f"ConfigWatcher({str(self.path)!r}, interval={self.interval})"

    @property
    def state(self) -> dict[str, Any]:
        """``{"path", "reloads", "failures", "last_error"}`` (for a status route)."""
        return {
            "path": str(self.path),
            "reloads": self.reloads,
            "failures": self.failures,
            "last_error": self.last_error,
        }
