"""Recovery at server start: the formation jobs a crash left behind (queued, or ``running`` with
an expired lease) are run by the server's formation worker as soon as it starts, for every
known tenant, with no request at all; ``--no-formation-worker`` leaves them to ``memlane
worker`` processes. Real ``memlane serve`` subprocesses over real SQLite files."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from memlane import AsyncMemory, Event, EventType
from memlane.formation.config import FormationConfig
from memlane.models import Job
from memlane.service.hub import DEFAULT_TENANT, MemoryHub, tenant_store
from memlane.service.keys import KeyStore

pytest.importorskip("fastapi")

#: How long a test waits for the server to start and for its worker to finish the jobs (a
#: generous bound for a loaded machine, not a measurement).
PATIENCE = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _leave_crashed_jobs(store: str) -> tuple[str, str]:
    """Jobs as a SIGKILLed process leaves them in ``store``: one ``queued``, one ``running``
    under a lease that has expired. Returns (queued id, running id)."""
    config = FormationConfig(background=False, idle_minutes=None, lease_seconds=0.05)
    m = await AsyncMemory(store, embedder="hash", sessions="sqlite", formation=config).open()
    async with m:
        for sid in ("s-queued", "s-running"):
            await m.sessions.create_session(user_ids=["sam"], session_id=sid)
            for text in ("I moved to Lisbon last spring", "My sister is called Ana"):
                await m.add_event(sid, Event(type=EventType.USER_MESSAGE, author="sam", content=text))
                await m.add_event(sid, Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))
        running = await m.end_session("s-running", wait=False)
        assert isinstance(running, Job)
        claimed = await m.jobs.claim("dead-host:1:0", lease_seconds=0.05, job_id=running.id)
        assert claimed is not None and claimed.status == "running"
        queued = await m.end_session("s-queued", wait=False)
        assert isinstance(queued, Job)
        await asyncio.sleep(0.1)  # the dead worker's lease runs out
        statuses = {j.id: j.status for j in await m.jobs.list()}
        assert statuses == {queued.id: "queued", running.id: "running"}
        return queued.id, running.id


async def _statuses(store: str, ids: tuple[str, ...]) -> dict[str, str]:
    m = await AsyncMemory(store, embedder="hash", sessions="sqlite", formation=FormationConfig(background=False)).open()
    try:  # opened, not started: this process runs no job
        return {i: (j.status if (j := await m.jobs.get(i)) is not None else "gone") for i in ids}
    finally:
        await m.close()


@contextmanager
def _serve(tmp_path: Path, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "MEMORY_", "OPENAI_"))}
    env |= {"MEMLANE_RELOAD_INTERVAL": "0", "MEMLANE_LLM": "offline", "XDG_DATA_HOME": str(tmp_path / "xdg")}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memlane.cli.main",
                "serve",
                "--port",
                str(port),
                "--db",
                str(tmp_path / "memlane.db"),
                "--tenants-dir",
                str(tmp_path / "tenants"),
                "--keys",
                str(tmp_path / "keys.db"),
                "--embedder",
                "hash",
                "--log-level",
                "warning",
                *flags,
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + PATIENCE
        while True:  # /health only: it touches no tenant's store
            assert proc.poll() is None, f"memlane serve exited {proc.returncode}:\n{log.read_text(errors='replace')}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"memlane serve did not start:\n{log.read_text(errors='replace')}"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_the_server_runs_the_jobs_a_crash_left_for_every_known_tenant_without_a_request(tmp_path: Path) -> None:
    tenants = {
        DEFAULT_TENANT: tenant_store(str(tmp_path / "memlane.db"), tmp_path / "tenants", DEFAULT_TENANT),
        "acme": tenant_store(str(tmp_path / "memlane.db"), tmp_path / "tenants", "acme"),  # known from its key
        "globex": tenant_store(str(tmp_path / "memlane.db"), tmp_path / "tenants", "globex"),  # from its file
    }
    (tmp_path / "tenants").mkdir()
    jobs = {t: asyncio.run(_leave_crashed_jobs(store)) for t, store in tenants.items()}
    with KeyStore(tmp_path / "keys.db") as keys:
        keys.create("acme")
        keys.create(DEFAULT_TENANT)
    with _serve(tmp_path):
        deadline = time.monotonic() + PATIENCE
        while True:
            seen = {t: asyncio.run(_statuses(store, jobs[t])) for t, store in tenants.items()}
            if all(s == "done" for per in seen.values() for s in per.values()):
                break
            assert time.monotonic() < deadline, f"the crashed jobs were not run: {seen}"
            time.sleep(0.2)


async def test_no_formation_worker_opens_the_tenants_but_starts_no_worker(tmp_path: Path) -> None:
    """``--no-formation-worker`` (``server.formation_worker: false``): replicas leave the jobs
    to ``memlane worker`` processes, also the ones a crash left."""
    from memlane.config import load_settings

    store = str(tmp_path / "memlane.db")
    await _leave_crashed_jobs(store)
    overrides = {"memory.store": store, "memory.embedder": "hash", "server.tenants_dir": str(tmp_path / "t")}
    for worker, started in ((False, False), (True, True)):
        settings = load_settings(env={}, overrides=overrides | {"server.formation_worker": worker})
        hub = MemoryHub.from_settings(settings, watch=False)
        try:
            await hub.open()
            assert hub.recovery is not None and await hub.recovery == [DEFAULT_TENANT]
            engine = await hub.get(DEFAULT_TENANT)
            assert (engine.formation._task is not None) is started
            if not started:
                assert engine.formation_config.background is False
        finally:
            await hub.aclose()


async def test_the_hub_opens_known_tenants_at_start_and_starts_their_workers_only_when_serving(tmp_path: Path) -> None:
    def factory(location: str) -> AsyncMemory:
        return AsyncMemory(location, embedder="hash", sessions="sqlite")

    (tmp_path / "tenants").mkdir()
    (tmp_path / "memlane.db").touch()
    (tmp_path / "tenants" / "from%3Afile.db").touch()
    hub = MemoryHub(factory, str(tmp_path / "memlane.db"), tmp_path / "tenants")
    try:
        idle = await hub.get("early")  # a hub that does not serve (memlane worker's) starts no worker
        assert idle.formation._task is None
        await hub.open(["keyed"])
        assert hub.recovery is not None
        opened = await hub.recovery
        # "keyed" has no store file yet: nothing to recover, it opens on its first request
        assert opened == [DEFAULT_TENANT, "early", "from:file"]
        assert "keyed" not in hub._gen.engines
        for tenant in (DEFAULT_TENANT, "from:file", "early"):
            task = (await hub.get(tenant)).formation._task
            assert task is not None and not task.done(), tenant
        later = await hub.get("later")  # opened on a request: started as it opens
        assert later.formation._task is not None and not later.formation._task.done()
    finally:
        await hub.aclose()


async def test_the_engine_serves_every_call_once_restarted_postgres_and_redis_are_back(tmp_path: Path) -> None:
    """The whole engine (PostgreSQL store, Redis sessions and job queue) across a restart of
    both servers (this test's own, not the shared ones): every call made once they are back
    succeeds (docs/reliability.md)."""
    import shutil

    from memlane.devserver import _redis_up, free_port, start_postgres

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    try:
        pg = start_postgres(tmp_path / "pg")
    except Exception as exc:
        if os.environ.get("CI", "").lower() == "true":
            raise
        pytest.skip(f"PostgreSQL with pgvector unavailable: {exc}")
    port = free_port()

    def start_redis() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not _redis_up("127.0.0.1", port):
            assert proc.poll() is None, "redis-server exited"
            time.sleep(0.05)
        return proc

    redis = start_redis()
    redis_url = f"redis://127.0.0.1:{port}/0"
    config = FormationConfig(background=False, idle_minutes=None)
    m = AsyncMemory(pg.url + "?pool_timeout=30", sessions=redis_url, jobs=redis_url, embedder="hash", formation=config)
    try:
        await m.open()
        first = await m.add("I live in Lisbon", user_id="sam")
        await asyncio.gather(*(m.search("Lisbon", user_id="sam") for _ in range(6)))

        def restart() -> subprocess.Popen[bytes]:
            nonlocal pg
            redis.terminate()
            redis.wait(30)
            pg.stop()
            pg = start_postgres(tmp_path / "pg", port=pg.port)
            return start_redis()

        redis = await asyncio.to_thread(restart)
        calls = [
            *(m.search("Lisbon", user_id="sam") for _ in range(5)),
            *(m.list(user_id="sam") for _ in range(5)),
            *(m.get(first[0].id, user_id="sam") for _ in range(5)),
            *(m.add(f"My cat number {i} is called Tom", user_id="sam") for i in range(5)),
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        await m.sessions.create_session(user_ids=["sam"], session_id="s")  # Redis kept nothing
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="sam", content="hello"))
        assert len(await m.sessions.get_events("s")) == 1
    finally:
        await m.close()
        redis.terminate()
        redis.wait(30)
        pg.stop()
