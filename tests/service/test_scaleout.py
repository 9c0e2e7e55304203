"""The scale-out proof (issue 10): two ``memlane serve`` replicas and two ``memlane worker``
processes (plus a ``memlane mcp --transport http`` process) on ONE PostgreSQL and ONE Redis.

Every process is a real subprocess configured by the environment only: the store is
PostgreSQL (a schema of the test's own; each tenant a schema under it), sessions and the
formation job queue are Redis (a key prefix of the test's own; each tenant a prefix under
it), the hash embedder, and ``openai:`` formation against a local OpenAI-compatible server
the test scripts (it can hold a formation step until the test lets it go). The replicas run
with the formation worker off (one by ``--no-formation-worker``, one by
``MEMLANE_FORMATION_WORKER=false``): only the workers form.

* a write through replica A (a memory, a session, session events, a delete) is read through
  replica B, and the other way round;
* a worker SIGKILLed while it holds a formation job (its facts already applied, the job
  held in the consolidation step) loses nothing and applies nothing twice: the other worker
  takes the job over once the lease (2 s) expires, replays the saved extraction and
  reflection steps (the model is not asked again), applies nothing again and completes the
  job; each formed fact and reflection exists once, with one ADD in its history;
* the isolation property of tests/service/test_service_isolation.py (isolation_property.py) holds
  on this deployment: written through A, read through B and over MCP, with the Redis session
  store capped at :data:`MAX_SESSIONS` (eviction pressure) and the reported attacks first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")
pytest.importorskip("psycopg")
pytest.importorskip("redis")

import httpx
from hypothesis import HealthCheck, Phase, given, settings

from isolation_property import (
    LONG,
    OPS,
    TENANTS,
    USERS,
    World,
    Write,
    attacks,
    examples,
    report,
    run_example,
    writes_strategy,
)
from loopback import JsonHandler, Reply
from loopback import serve as serve_loopback
from services import delete_prefix, drop_schema, with_params

#: The Redis session store's cap (KAOS: 1,000): small, so the isolation property's floods evict.
MAX_SESSIONS = 60
#: The workers' job lease: a killed worker's job is taken over this long after its last renewal.
LEASE_SECONDS = 2.0
#: Readiness / completion waits (never asserted as timings).
READY_SECONDS = 60.0
KZ = re.compile(r"kz\d+")
#: What the scripted model extracts: "<what> code (is|changed to) kz..." -> "Sam's <what> code is kz...".
CODE = re.compile(r"(locker|bike lock) code (?:is|changed to) (kz\d+)")
DEDUP_ITEM = re.compile(r"\[(\d+)\] NEW: ([^\n]*)((?:\n    [^\n]*)*)")
CANDIDATE = re.compile(r"- id=(\S+) \([^)]*\): ([^\n]*)")
ZQ = re.compile(r"zq\d+t\d+")


# --------------------------------------------------------------------------- the model server
@dataclass
class Llm:
    """A scripted OpenAI-compatible model: answers each formation step, counts the calls, and
    holds ``consolidate`` calls while :attr:`hold` is set (until :attr:`release`)."""

    url: str = ""
    calls: Counter[str] = field(default_factory=Counter)
    hold: bool = False
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    marker: str = field(default_factory=lambda: f"rx{uuid.uuid4().hex[:8]}")
    lock: threading.Lock = field(default_factory=threading.Lock)


TASKS = (
    ("You extract FACTS", "extract"),
    ("You keep", "dedup"),
    ("You form REFLECTIONS", "reflect"),
    ("You consolidate", "consolidate"),
    ("You distil", "profile"),
)


def _answer(state: Llm, task: str, said: str) -> dict[str, Any]:
    if task == "extract":
        found = dict.fromkeys(f"Sam's {what} code is {code}" for what, code in CODE.findall(said))
        return {"facts": [{"content": fact, "scope": "user"} for fact in found]}
    if task == "dedup":  # a new locker code replaces the stored one; the rest is new
        decisions = []
        for index, new, block in DEDUP_ITEM.findall(said):
            old = [fid for fid, content in CANDIDATE.findall(block) if "locker" in content]
            if "locker" in new and old:
                decisions.append({"index": int(index), "event": "UPDATE", "fact_id": old[0], "text": new.strip()})
        return {"decisions": decisions}
    if task == "reflect":
        return {
            "user": [f"Sam collects code words ({state.marker})"],
            "session": [f"Code words shared ({state.marker})"],
        }
    if task == "consolidate":
        return {"content": f"VERSION: 1\n[FACTS]\n- Sam collects code words ({state.marker})"}
    # profile: what the model was shown (the isolation property checks no other user's token is)
    return {"bullets": [f"knows {t}" for t in sorted(set(ZQ.findall(said)) | set(KZ.findall(said)))] or ["nothing"]}


class LlmHandler(JsonHandler):
    def do_POST(self) -> None:
        state: Llm = self.server.state
        body = self.read_json()
        messages = body.get("messages") or []
        system = " ".join(str(m.get("content")) for m in messages if m.get("role") == "system")
        said = " ".join(str(m.get("content")) for m in messages if m.get("role") != "system")
        task = next((t for prefix, t in TASKS if prefix in system or prefix in said), "unknown")
        with state.lock:
            state.calls[task] += 1
        if task == "consolidate" and state.hold:
            state.held.set()
            state.release.wait(READY_SECONDS)  # the worker holding it is killed meanwhile
        reply = {
            "choices": [
                {
                    "message": {"role": "assistant", "content": json.dumps(_answer(state, task, said))},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        with contextlib.suppress(OSError):  # the caller was killed
            self._send(Reply(200, reply))


# --------------------------------------------------------------------------- processes
@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str | None = None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def new_client(self, **kwargs: Any) -> httpx.Client:
        assert self.url is not None
        return httpx.Client(base_url=self.url, timeout=30.0, **kwargs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(name: str, args: list[str], env: dict[str, str], tmp: Path, url: str | None = None) -> Proc:
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "memlane.cli.main", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Proc(name, popen, log, url)


def _wait_ready(proc: Proc, path: str) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while True:
        if proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited {proc.popen.returncode}:\n{proc.text()}")
        try:
            r = httpx.get(f"{proc.url}{path}", timeout=2.0)
            if r.status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{proc.name} did not start:\n{proc.text()}")
        time.sleep(0.1)


def _stop(procs: list[Proc]) -> None:
    for p in procs:
        if p.popen.poll() is None:
            p.popen.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.popen.wait(20)
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()


@dataclass
class Deployment:
    a: Proc
    b: Proc
    workers: list[Proc]
    mcp: Proc
    llm: Llm
    queue_url: str  # the default tenant's job queue
    bound: dict[tuple[str, str], str]
    wide: dict[str, str]  # tenant -> tenant-wide key (also "default")

    def client(self, replica: Proc, tenant: str = "default") -> httpx.Client:
        return replica.new_client(headers={"Authorization": f"Bearer {self.wide[tenant]}"})


@pytest.fixture(scope="module")
def deployment(pg_server: str, redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    from memlane.service.keys import KeyStore
    from memlane.stores.postgres.tenants import tenant_schema

    tmp = tmp_path_factory.mktemp("scaleout")
    run = uuid.uuid4().hex[:12]
    schema = f"scaleout_{run}"
    prefix = f"memlane-test:{run}:"
    store = with_params(pg_server, schema=schema)
    sessions_url = with_params(redis_server, prefix=f"{prefix}s:")
    queue_url = with_params(redis_server, prefix=f"{prefix}q:")
    procs: list[Proc] = []
    llm = Llm()
    with KeyStore(tmp / "keys.db") as keys, serve_loopback(LlmHandler, llm) as llm_url:
        llm.url = llm_url
        bound = {(t, u): keys.create(t, user_id=u).secret for t in TENANTS for u in USERS}
        wide = {t: keys.create(t).secret for t in (*TENANTS, "default")}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "MEMORY_", "OPENAI_"))}
        env |= {
            "MEMLANE_DB": store,
            "MEMORY_TYPE": "redis",
            "MEMORY_REDIS_URL": sessions_url,
            "MEMORY_MAX_SESSIONS": str(MAX_SESSIONS),  # small: the isolation property's eviction pressure
            "MEMLANE_QUEUE": queue_url,
            "MEMLANE_EMBEDDER": "hash",
            "MEMLANE_LLM": "openai:scripted",
            "OPENAI_BASE_URL": f"{llm_url}/v1",
            "MEMLANE_KEYS_FILE": str(tmp / "keys.db"),
            "MEMLANE_RATE_LIMIT": "0",
            "MEMLANE_RELOAD_INTERVAL": "0",
            "XDG_DATA_HOME": str(tmp / "xdg"),
        }
        replica_env = env | {"MEMLANE_FORMATION_WORKER": "false"}
        try:
            ports = [_free_port() for _ in range(3)]
            a = _spawn(
                "serve-a",
                ["serve", "--port", str(ports[0]), "--no-formation-worker", "--log-level", "warning"],
                env,
                tmp,
                f"http://127.0.0.1:{ports[0]}",
            )
            b = _spawn(
                "serve-b",
                ["serve", "--port", str(ports[1]), "--log-level", "warning"],
                replica_env,
                tmp,
                f"http://127.0.0.1:{ports[1]}",
            )
            mcp = _spawn(
                "mcp",
                ["mcp", "--transport", "http", "--port", str(ports[2])],
                replica_env,
                tmp,
                f"http://127.0.0.1:{ports[2]}",
            )
            procs += [a, b, mcp]
            workers = [
                _spawn(
                    f"worker-{i}",
                    ["worker", "--lease-seconds", str(LEASE_SECONDS), "--poll", "0.2", "--sweep-every", "0"],
                    env,
                    tmp,
                )
                for i in range(2)
            ]
            procs += workers
            _wait_ready(a, "/health")
            _wait_ready(b, "/health")
            _wait_ready(mcp, "/mcp")
            yield Deployment(a, b, workers, mcp, llm, queue_url, bound, wide)
            report("test_scaleout (PostgreSQL + Redis, two replicas)")
        finally:
            llm.release.set()
            _stop(procs)
            for s in (schema, *(tenant_schema(schema, t) for t in TENANTS)):
                drop_schema(pg_server, s)
            delete_prefix(redis_server, prefix)


# --------------------------------------------------------------------------- (a) one state
def test_a_write_through_one_replica_is_read_through_the_other(deployment: Deployment) -> None:
    d = deployment
    word = f"rp{uuid.uuid4().hex[:8]}"
    with d.client(d.a) as a, d.client(d.b) as b:
        r = a.post("/v1/memories", json={"text": f"Rita's replication word is {word}", "user_id": "rita"})
        assert r.status_code == 201, r.text
        mid = r.json()["memories"][0]["id"]
        r = b.get(f"/v1/memories/{mid}", params={"user_id": "rita"})
        assert r.status_code == 200 and word in r.json()["content"], r.text
        assert word in b.get("/v1/memories", params={"user_id": "rita"}).text
        hits = b.post("/v1/search", json={"query": f"replication word {word}", "user_id": "rita"}).json()["hits"]
        assert [h["fact"]["id"] for h in hits][:1] == [mid], hits
        # a session made on B, events written on A and B, read back on the other
        sid = f"rs-{word}"
        assert b.post("/v1/sessions", json={"session_id": sid, "user_ids": ["rita"]}).status_code == 201
        for n, (writer, reader) in enumerate(((a, b), (b, a))):
            r = writer.post(f"/v1/sessions/{sid}/events", json={"content": f"event {n} of {word}"})
            assert r.status_code == 201, r.text
            events = reader.get(f"/v1/sessions/{sid}/events").json()["events"]
            assert [e["content"] for e in events] == [f"event {i} of {word}" for i in range(n + 1)], events
        kaos = a.get("/memory/events", params={"session_id": sid})
        assert kaos.status_code == 200 and f"event 1 of {word}" in kaos.text, kaos.text
        # a (soft) delete through B is gone from A's list and search
        assert b.delete(f"/v1/memories/{mid}", params={"user_id": "rita"}).status_code == 200
        assert a.get(f"/v1/memories/{mid}", params={"user_id": "rita"}).json()["invalid_at"] is not None
        assert word not in a.get("/v1/memories", params={"user_id": "rita"}).text
        assert word not in a.post("/v1/search", json={"query": word, "user_id": "rita"}).text


def test_each_tenant_has_its_own_job_queue_across_replicas(deployment: Deployment) -> None:
    """Jobs queued through A for two tenants (no worker serves them: they stay queued) are
    listed and fetched through B by their own tenant only."""
    d = deployment
    ids: dict[str, str] = {}
    for tenant in TENANTS:
        with d.client(d.a, tenant) as a:
            r = a.post("/v1/memories", json={"text": f"{tenant} note: kz999 tea", "user_id": "alice", "infer": True})
            assert r.status_code == 202, r.text
            ids[tenant] = r.json()["job_id"]
    for tenant in TENANTS:
        other = next(t for t in TENANTS if t != tenant)
        with d.client(d.b, tenant) as b:
            listed = {j["id"] for j in b.get("/v1/jobs", params={"limit": 100}).json()["jobs"]}
            assert ids[tenant] in listed and ids[other] not in listed, (tenant, listed)
            assert b.get(f"/v1/jobs/{ids[tenant]}").json()["status"] == "queued"
            assert b.get(f"/v1/jobs/{ids[other]}").status_code == 404


# --------------------------------------------------------------------------- (b) a worker dies
def _stored_job(queue_url: str, job_id: str) -> Any:
    from memlane.stores.redis.jobs import RedisJobStore

    async def get() -> Any:
        store = await RedisJobStore.open(queue_url)
        try:
            return await store.get(job_id)
        finally:
            await store.close()

    return asyncio.run(get())


def _pid_of(worker_id: str | None) -> int:
    assert worker_id, "the job names no worker"
    return int(worker_id.split(":")[1])  # FormationRunner.worker_id: host:pid:object


def test_killing_a_worker_mid_job_loses_nothing_and_applies_nothing_twice(deployment: Deployment) -> None:
    """The job updates a stored fact and adds one: a second application would show as a
    third version / a second UPDATE in the history, or a second fact."""
    d, llm = deployment, deployment.llm
    old, new, bike = (f"kz{n}{uuid.uuid4().int % 10**6:06d}" for n in (1, 2, 3))
    sid = f"ks-{new}"
    llm.held.clear()
    llm.release.clear()
    before = Counter(llm.calls)
    with d.client(d.a) as a, d.client(d.b) as b:
        r = a.post("/v1/memories", json={"text": f"Sam's locker code is {old}", "user_id": "sam"})
        assert r.status_code == 201, r.text
        locker_id = r.json()["memories"][0]["id"]
        llm.hold = True
        assert a.post("/v1/sessions", json={"session_id": sid, "user_ids": ["sam"]}).status_code == 201
        turns = [
            ("user_message", f"My locker code changed to {new}."),
            ("agent_response", "Noted."),
            ("user_message", f"And my bike lock code is {bike}."),
            ("agent_response", "Got it."),
        ]
        for n, (kind, text) in enumerate(turns):
            writer = a if n % 2 == 0 else b
            author = "sam" if kind == "user_message" else "agent"
            r = writer.post(f"/v1/sessions/{sid}/events", json={"type": kind, "content": text, "author": author})
            assert r.status_code == 201, r.text
        r = b.post(f"/v1/sessions/{sid}/end")
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]

        # a worker has extracted, decided, reflected and applied, and waits in consolidation
        assert llm.held.wait(READY_SECONDS), "no worker reached the consolidation step"
        job = _stored_job(d.queue_url, job_id)
        assert job.status == "running"
        holders = [w for w in d.workers if w.popen.pid == _pid_of(job.worker)]
        assert holders, f"job {job_id} is held by {job.worker}, not by a memlane worker (a replica formed it?)"
        holder = holders[0]
        survivor = next(w for w in d.workers if w is not holder)
        locker = a.get(f"/v1/memories/{locker_id}", params={"user_id": "sam"}).json()
        assert (locker["content"], locker["version"]) == (f"Sam's locker code is {new}", 2), locker  # applied
        holder.popen.send_signal(signal.SIGKILL)
        holder.popen.wait(10)
        llm.hold = False
        llm.release.set()

        # the survivor takes the job over once the lease expires and completes it
        deadline = time.monotonic() + READY_SECONDS
        while (status := a.get(f"/v1/jobs/{job_id}").json())["status"] != "done":
            assert status["status"] in ("queued", "running"), status
            assert survivor.popen.poll() is None, survivor.text()
            assert time.monotonic() < deadline, (status, survivor.text())
            time.sleep(0.1)
        assert status["attempts"] == 0 and status["last_error"] is None, status  # a lost worker is no failed attempt
        assert _pid_of(_stored_job(d.queue_url, job_id).worker) == survivor.popen.pid
        assert f"job {job_id} form(end) done" in survivor.text(), survivor.text()

        calls = llm.calls - before
        # extraction, dedup and reflection ran once: the survivor replayed the saved steps
        assert (calls["extract"], calls["dedup"], calls["reflect"]) == (1, 1, 1), calls
        assert calls["consolidate"] > 1, calls  # the held call(s), then the survivor's

        export = b.get("/v1/users/sam/export").json()
        facts = {f["content"]: f for f in export["facts"] if KZ.search(f["content"]) and f["kind"] != "summary"}
        assert len([f for f in export["facts"] if f["kind"] == "summary"]) == 1  # the session's, written once
        assert sorted(facts) == sorted([f"Sam's bike lock code is {bike}", f"Sam's locker code is {new}"]), facts
        locker = facts[f"Sam's locker code is {new}"]
        assert locker["id"] == locker_id and locker["version"] == 2, locker  # updated once, not twice
        assert [h["event"] for h in locker["history"]] == ["ADD", "UPDATE"], locker["history"]
        assert [h["event"] for h in facts[f"Sam's bike lock code is {bike}"]["history"]] == ["ADD"]
        mine = [r["content"] for r in export["reflections"] if llm.marker in r["content"]]
        assert mine and len(mine) == len(set(mine)), mine  # each reflection once
        listed = a.get("/v1/memories", params={"user_id": "sam", "limit": 100}).json()["memories"]
        assert sorted(m["content"] for m in listed if KZ.search(m["content"])) == sorted(facts), listed


# --------------------------------------------------------------------------- (c) isolation
@settings(
    max_examples=examples(30 if LONG else 2),
    deadline=None,
    phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else []),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writes=writes_strategy)
@attacks
def test_isolation_property_holds_across_replicas(deployment: Deployment, writes: list[Write]) -> None:
    world = _world(deployment)
    run_example(world, writes)


_WORLDS: dict[int, World] = {}


def _world(d: Deployment) -> World:
    """One :class:`World` per deployment (its example counter runs across examples): writes
    through replica A, reads through replica B and the MCP process."""
    world = _WORLDS.get(id(d))
    if world is None:
        OPS.clear()  # count this deployment's isolation requests only
        world = _WORLDS[id(d)] = World(
            http=d.a, mcp_url=f"{d.mcp.url}/mcp", bound=d.bound, wide=d.wide, reader=d.b, capped=True, forms=False
        )
    return world
