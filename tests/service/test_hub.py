"""MemoryHub built from settings, and hot reload: new requests get engines built from the new
settings, a request in flight finishes on the old engine, live sessions continue, a broken
edit keeps the old configuration (real SQLite files, real YAML files, real watcher task)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from memlane.config import MemlaneSettings, load_settings
from memlane.errors import ConfigError, MemlaneError, UsageError
from memlane.models import Event
from memlane.service.hub import ConfigWatcher, MemoryHub
from memlane.stores.local import LocalMemory


def write_config(path: Path, body: str) -> Path:
    """Write the YAML and move its mtime forward, so every edit is a visible change."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(body, encoding="utf-8")
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))
    return path


def base_yaml(tmp_path: Path, extra: str = "", backend: str = "sqlite") -> str:
    return (
        f"memory:\n  store: {tmp_path / 'default.db'}\n  embedder: hash\n{extra}"
        f"sessions:\n  backend: {backend}\n"
        f"server:\n  tenants_dir: {tmp_path / 'tenants'}\n"
    )


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path / "memlane.yaml", base_yaml(tmp_path, "  preload_limit: 10\n"))


def settings_of(path: Path) -> MemlaneSettings:
    return load_settings(path, env={})


async def test_from_settings_one_store_per_tenant(tmp_path: Path, cfg: Path) -> None:
    hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=0)
    try:
        a = await hub.get("default")
        b = await hub.get("acme")
        assert a is await hub.get("default")
        assert a.db_path == str(tmp_path / "default.db")
        assert b.db_path == str(tmp_path / "tenants" / "acme.db")
        assert a.formation_config.preload_limit == 10
        await a.add("the default tenant's secret", user_id="alice")
        assert (await b.search("secret", user_id="alice")).hits == []
        assert (await b.list(user_id="alice")).items == []
    finally:
        await hub.aclose()


def test_from_settings_refuses_unusable_settings() -> None:
    s = load_settings(env={"MEMORY_TYPE": "redis"})
    with pytest.raises(ConfigError, match=r"sessions\.backend redis needs a URL"):
        MemoryHub.from_settings(s)


async def test_reload_new_requests_use_new_settings(tmp_path: Path, cfg: Path) -> None:
    hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=0)
    try:
        old = await hub.get("default")
        await old.add("I live in Lisbon", user_id="alice")
        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 3\n  extraction_instructions: Only cities.\n"))
        await hub.reload(settings_of(cfg))
        new = await hub.get("default")
        assert new is not old
        assert hub.generation == 1
        assert new.formation_config.preload_limit == 3
        assert new.formation_config.extraction_instructions == "Only cities."
        assert hub.settings is not None and hub.settings.memory.preload_limit == 3
        # long-term memory is in the store: the new engine sees it, isolation still holds
        assert [h.fact.content for h in (await new.search("Lisbon", user_id="alice")).hits] == ["I live in Lisbon"]
        assert (await new.search("Lisbon", user_id="bob")).hits == []
        await hub.drained()
        with pytest.raises(MemlaneError, match="closed"):
            await old.search("Lisbon", user_id="alice")
    finally:
        await hub.aclose()


async def test_an_in_flight_request_finishes_on_the_old_engine(tmp_path: Path, cfg: Path) -> None:
    hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=0)
    try:
        started, release = asyncio.Event(), asyncio.Event()
        seen: list[int] = []

        async def request() -> str:
            async with hub.lease("default") as m:
                started.set()
                await release.wait()  # the reload happens while this request runs
                seen.append(m.formation_config.preload_limit)
                facts = await m.add("I drink green tea", user_id="alice")
                return facts[0].id

        task = asyncio.create_task(request())
        await started.wait()
        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 4\n"))
        await hub.reload(settings_of(cfg))
        fresh = await hub.get("default")
        assert fresh.formation_config.preload_limit == 4
        release.set()
        fact_id = await task
        assert seen == [10]  # the old engine, still open while leased
        await hub.drained()
        assert (await fresh.get(fact_id, user_id="alice")).content == "I drink green tea"
    finally:
        await hub.aclose()


async def test_replaced_engines_stay_open_for_the_grace_period(cfg: Path) -> None:
    hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=3600)
    try:
        old = await hub.get("default")
        await hub.reload(settings_of(cfg))
        for _ in range(5):
            await asyncio.sleep(0)
        await old.add("still usable after the reload", user_id="alice")  # a get() caller mid-request
    finally:
        await hub.aclose()  # closes the retiring generation at once
    with pytest.raises(MemlaneError, match="closed"):
        await old.list(user_id="alice")


async def test_live_sessions_continue_across_a_reload(tmp_path: Path) -> None:
    for backend in ("sqlite", "local"):
        cfg = write_config(tmp_path / f"{backend}.yaml", base_yaml(tmp_path / backend, backend=backend))
        hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=0)
        try:
            m = await hub.get("default")
            await m.sessions.create_session(session_id="s1", user_ids=["alice"])
            await m.add_event("s1", Event(content="hello before the reload"))
            write_config(cfg, base_yaml(tmp_path / backend, "  preload_limit: 2\n", backend=backend))
            await hub.reload(settings_of(cfg))
            m2 = await hub.get("default")
            assert m2 is not m
            await m2.add_event("s1", Event(content="and after"))
            got = await m2.sessions.get_session("s1")
            assert got is not None
            assert [e.content for e in got.events] == ["hello before the reload", "and after"], backend
            if backend == "local":
                assert isinstance(m2.sessions, LocalMemory) and m2.sessions is m.sessions
        finally:
            await hub.aclose()


async def test_a_failed_reload_keeps_the_old_configuration(tmp_path: Path, cfg: Path) -> None:
    hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=0)
    try:
        m = await hub.get("default")
        with pytest.raises(ConfigError, match="redis"):
            await hub.reload(load_settings(cfg, env={"MEMORY_TYPE": "redis"}))
        with pytest.raises(ConfigError):  # fails while opening the tenant's new engine
            await hub.reload(load_settings(cfg, env={"MEMLANE_EMBEDDER": "local:/no/such/model"}))
        assert await hub.get("default") is m
        assert hub.generation == 0
        await m.add("still served", user_id="alice")
    finally:
        await hub.aclose()


async def test_the_watcher_reloads_on_edit_and_keeps_the_old_config_on_a_bad_edit(
    tmp_path: Path, cfg: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=0, watch=False)
    watcher = ConfigWatcher(hub, cfg, env={})
    try:
        first = await hub.get("default")
        assert await watcher.check() is False  # nothing changed

        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 6\n"))
        assert await watcher.check() is True
        second = await hub.get("default")
        assert second is not first and second.formation_config.preload_limit == 6

        for broken in (
            base_yaml(tmp_path, "  preload_limit: [oops\n"),  # not YAML
            base_yaml(tmp_path, "  preload_limit: 7\n  api_key: sk-live-123\n"),  # a secret
            base_yaml(tmp_path, "  preload_limit: 7\n  colour: blue\n"),  # an unknown key
            base_yaml(tmp_path, "  preload_limit: 7\n", backend="redis"),  # cannot build
        ):
            with caplog.at_level(logging.ERROR, logger="memlane.service"):
                write_config(cfg, broken)
                assert await watcher.check() is False
            assert await hub.get("default") is second
            assert "keeping the current configuration" in caplog.text
            assert "sk-live-123" not in caplog.text
            caplog.clear()
        assert watcher.failures == 4 and watcher.last_error is not None and "redis" in watcher.last_error

        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 8\n"))  # fixed
        assert await watcher.check() is True
        assert (await hub.get("default")).formation_config.preload_limit == 8
        assert (watcher.reloads, watcher.last_error) == (2, None)
    finally:
        await hub.aclose()


async def test_the_environment_still_wins_after_a_reload(tmp_path: Path, cfg: Path) -> None:
    env = {"MEMLANE_PRELOAD_LIMIT": "15"}
    hub = MemoryHub.from_settings(load_settings(cfg, env=env), drain_seconds=0, watch=False)
    watcher = ConfigWatcher(hub, cfg, env=env)
    try:
        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 2\n  extraction_instructions: Only pets.\n"))
        assert await watcher.check() is True
        m = await hub.get("default")
        assert m.formation_config.preload_limit == 15
        assert m.formation_config.extraction_instructions == "Only pets."
    finally:
        await hub.aclose()


async def test_the_watcher_task_polls_the_file(tmp_path: Path, cfg: Path) -> None:
    write_config(cfg, base_yaml(tmp_path, "  preload_limit: 10\n") + "  reload_interval: 0.05\n")
    hub = MemoryHub.from_settings(settings_of(cfg), drain_seconds=0)  # watch=True: started by open()
    assert hub.watcher is not None and hub.watcher.interval == 0.05
    await hub.open()
    try:
        await hub.get("default")
        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 9\n") + "  reload_interval: 0.05\n")
        async with asyncio.timeout(30):
            while hub.generation == 0:
                await asyncio.sleep(0.02)
        assert (await hub.get("default")).formation_config.preload_limit == 9
    finally:
        await hub.aclose()
    assert hub.watcher._task is None


async def test_no_watcher_without_a_file_or_with_interval_zero(tmp_path: Path, cfg: Path) -> None:
    assert MemoryHub.from_settings(load_settings(env={})).watcher is None
    write_config(cfg, base_yaml(tmp_path) + "  reload_interval: 0\n")
    assert MemoryHub.from_settings(settings_of(cfg)).watcher is None
    with pytest.raises(ConfigError, match="interval"):
        ConfigWatcher(MemoryHub.from_settings(settings_of(cfg)), cfg, interval=0)


async def test_a_factory_built_hub_still_works(tmp_path: Path) -> None:
    from memlane.memory import AsyncMemory

    hub = MemoryHub(lambda loc: AsyncMemory(loc, embedder="hash"), str(tmp_path / "d.db"), tmp_path / "t")
    try:
        assert (await hub.get("default")).db_path == str(tmp_path / "d.db")
        assert hub.settings is None and hub.default_store == str(tmp_path / "d.db")
    finally:
        await hub.aclose()
    with pytest.raises(UsageError, match="closed"):
        await hub.get("default")


async def test_command_line_overrides_survive_a_reload(tmp_path: Path, cfg: Path) -> None:
    flag_db = str(tmp_path / "from-flag.db")
    s = load_settings(cfg, env={"MEMLANE_DB": str(tmp_path / "env.db")}, overrides={"memory.store": flag_db})
    assert (s.memory.store, s.source("memory.store")) == (flag_db, "cli")
    hub = MemoryHub.from_settings(s, drain_seconds=0)
    assert hub.watcher is not None
    try:
        assert (await hub.get("default")).db_path == flag_db
        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 3\n"))
        assert await hub.watcher.check() is True
        m = await hub.get("default")
        assert (m.db_path, m.formation_config.preload_limit) == (flag_db, 3)
    finally:
        await hub.aclose()


async def test_memlane_serve_builds_a_watching_hub_that_keeps_its_flags(tmp_path: Path, cfg: Path) -> None:
    pytest.importorskip("fastapi")
    from memlane.cli.main import build_parser
    from memlane.cli.serve_cmd import build

    flag_db = str(tmp_path / "flag.db")
    settings = load_settings(cfg, env={})
    args = build_parser(settings).parse_args(["serve", "--config", str(cfg), "--db", flag_db])
    args.settings = settings
    app, host, _ = build(args)
    hub: MemoryHub = app.state.hub
    assert host == "127.0.0.1" and hub.watcher is not None and hub.watcher.path == cfg
    try:
        assert (await hub.get("default")).db_path == flag_db
        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 2\n"))
        assert await hub.watcher.check() is True
        m = await hub.get("default")
        assert (m.db_path, m.formation_config.preload_limit) == (flag_db, 2)
    finally:
        await hub.aclose()
