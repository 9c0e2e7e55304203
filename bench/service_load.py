"""Bounded loopback load on the memlane HTTP service (issue 9 proof).

Run::

    .venv/bin/python bench/service_load.py                  # the full run recorded in docs/benchmarks.md
    .venv/bin/python bench/service_load.py --quick          # a smoke run (seconds)
    .venv/bin/python bench/service_load.py --servers 1      # only the one-process case

What it does, per case (one server process, then two server processes on ONE SQLite file):

1. Creates API keys for several tenants (``memlane keys create``) in a fresh work directory.
2. Starts the server process(es) with ``memlane serve`` on free loopback ports (hash embedder, the
   per-key rate limit off: ``MEMLANE_RATE_LIMIT=0``); with two, both
   processes open the same store files (each tenant's SQLite file is shared by both).
3. Warms up (a few requests of every kind), reads each server's RSS (``/proc/<pid>/status``).
4. Runs the load generator in a SECOND PROCESS: this same file with the ``generate``
   sub-command (``python bench/service_load.py generate ...``): an asyncio + httpx client that
   sends a FIXED number of requests with a fixed concurrency, stopping early only at the
   duration cap (it then reports how many it sent), spread round-robin over the server URLs.
   The mix (seeded, so every run sends the same sequence): add, search, list, context,
   session event append, KAOS ``GET /memory/events``, from every tenant's key and several
   users per tenant.
5. Reads the RSS again and prints one JSON line per case: requests, errors (any status other
   than the expected one, or a transport error), p50/p99 latency overall and per operation,
   throughput, RSS before/after per server process.

The generator and the servers share the machine's cores, so the figures are the loopback
cost of the whole stack, not of the server alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: The operations of the mix and their weights (out of 100).
MIX: dict[str, int] = {"add": 30, "search": 25, "list": 15, "context": 10, "event": 10, "events": 10}
WORDS = [
    "coffee",
    "tea",
    "hiking",
    "paris",
    "berlin",
    "cat",
    "dog",
    "piano",
    "guitar",
    "sushi",
    "pizza",
    "running",
    "chess",
    "garden",
    "python",
    "rust",
    "novel",
    "movie",
    "train",
    "boat",
    "winter",
    "summer",
    "mountain",
    "river",
    "friend",
    "sister",
]


# --------------------------------------------------------------------------- requests of the mix


@dataclass(frozen=True)
class Caller:
    """One API key (a tenant) and the users it acts for."""

    tenant: str
    key: str | None
    users: tuple[str, ...]


def build_request(op: str, caller: Caller, rng: random.Random, n: int) -> tuple[str, str, dict[str, Any], int]:
    """(method, path, httpx keyword arguments, expected status) of one request of the mix."""
    user = rng.choice(caller.users)
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))
    session = session_id(user, rng.randrange(SESSIONS_PER_USER))
    if op == "add":
        return "POST", "/v1/memories", {"json": {"text": f"{user} likes {words} #{n}", "user_id": user}}, 201
    if op == "search":
        return "POST", "/v1/search", {"json": {"query": rng.choice(WORDS), "user_id": user, "top_k": 5}}, 200
    if op == "list":
        return "GET", "/v1/memories", {"params": {"user_id": user, "limit": 20}}, 200
    if op == "context":
        return "GET", "/v1/context", {"params": {"user_id": user, "session_id": session}}, 200
    if op == "event":
        event = {"author": "user", "content": f"{words} #{n}"}
        return "POST", f"/v1/sessions/{session}/events", {"json": event}, 201
    if op == "events":
        return "GET", "/memory/events", {"params": {"session_id": session, "limit": 50}}, 200
    raise ValueError(op)


#: Sessions each user appends events to (created by the generator before it starts timing).
SESSIONS_PER_USER = 3


def session_id(user: str, i: int) -> str:
    return f"{user}-s{i}"


async def create_sessions(client: Any, callers: list[Caller]) -> list[str]:
    """The sessions of the mix (created unless the warm-up run already did); returns the
    failures (each counts as an error of the run)."""
    failures = []
    for caller in callers:
        headers = {"Authorization": f"Bearer {caller.key}"} if caller.key else {}
        for user in caller.users:
            for i in range(SESSIONS_PER_USER):
                sid = session_id(user, i)
                if (await client.get(f"/v1/sessions/{sid}", headers=headers)).status_code == 200:
                    continue
                r = await client.post("/v1/sessions", json={"session_id": sid, "user_ids": [user]}, headers=headers)
                if r.status_code != 201:
                    failures.append(f"creating session {sid}: {r.status_code} {r.text[:300]}")
    return failures


#: The route of each operation, as the OpenAPI schema names it (an operation whose route the
#: server does not have is left out of the mix and reported as skipped).
ROUTES: dict[str, tuple[str, str]] = {
    "add": ("post", "/v1/memories"),
    "search": ("post", "/v1/search"),
    "list": ("get", "/v1/memories"),
    "context": ("get", "/v1/context"),
    "event": ("post", "/v1/sessions/{session_id}/events"),
    "events": ("get", "/memory/events"),
}


def served_ops(openapi: dict[str, Any]) -> list[str]:
    """The operations of :data:`MIX` the server's schema has."""
    paths = openapi.get("paths", {})
    return [op for op, (method, path) in ROUTES.items() if method in paths.get(path, {})]


def plan(callers: list[Caller], count: int, seed: int, served: list[str]) -> list[tuple[str, int, int]]:
    """The fixed request sequence: (operation, caller index, sequence number)."""
    rng = random.Random(seed)
    ops = [op for op, weight in MIX.items() if op in served for _ in range(weight)]
    return [(rng.choice(ops), rng.randrange(len(callers)), n) for n in range(count)]


# --------------------------------------------------------------------------- the generator process


@dataclass
class Sample:
    op: str
    status: int
    ms: float
    ok: bool
    error: str = ""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def generate(
    urls: list[str], callers: list[Caller], count: int, duration: float, concurrency: int, seed: int
) -> dict[str, Any]:
    """Send ``count`` requests (or as many as fit in ``duration`` seconds) with ``concurrency``
    workers, round-robin over ``urls``; return the summary."""
    import httpx

    samples: list[Sample] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    clients = [httpx.AsyncClient(base_url=u, limits=limits, timeout=30.0) for u in urls]
    served = served_ops((await clients[0].get("/openapi.json")).json())
    sequence = plan(callers, count, seed, served)
    setup_failures = await create_sessions(clients[0], callers)
    added: dict[str, dict[str, int]] = {c.tenant: {} for c in callers}
    position = 0
    started = time.perf_counter()
    deadline = started + duration

    async def worker(wid: int) -> None:
        nonlocal position
        rng = random.Random(seed * 1000 + wid)
        while position < len(sequence) and time.perf_counter() < deadline:
            op, who, n = sequence[position]
            position += 1
            caller = callers[who]
            method, path, kwargs, expected = build_request(op, caller, rng, n)
            headers = {"Authorization": f"Bearer {caller.key}"} if caller.key else {}
            client = clients[n % len(clients)]
            t0 = time.perf_counter()
            try:
                response = await client.request(method, path, headers=headers, **kwargs)
            except httpx.HTTPError as exc:
                samples.append(Sample(op, 0, (time.perf_counter() - t0) * 1000, False, f"{type(exc).__name__}: {exc}"))
                continue
            ms = (time.perf_counter() - t0) * 1000
            ok = response.status_code == expected
            samples.append(Sample(op, response.status_code, ms, ok, "" if ok else response.text[:300]))
            if ok and op == "add":
                user = kwargs["json"]["user_id"]
                added[caller.tenant][user] = added[caller.tenant].get(user, 0) + 1

    try:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    finally:
        for client in clients:
            await client.aclose()
    elapsed = time.perf_counter() - started
    lat = [s.ms for s in samples]
    per_op = {}
    for op in served:
        mine = [s.ms for s in samples if s.op == op]
        per_op[op] = {
            "n": len(mine),
            "errors": sum(1 for s in samples if s.op == op and not s.ok),
            "p50_ms": round(percentile(mine, 50), 2),
            "p99_ms": round(percentile(mine, 99), 2),
        }
    errors = [s for s in samples if not s.ok]
    return {
        "ops": served,
        "skipped_ops": [op for op in MIX if op not in served],
        "requests_planned": count,
        "requests_sent": len(samples),
        "errors": len(errors) + len(setup_failures),
        "first_errors": setup_failures[:3] + [{"op": s.op, "status": s.status, "detail": s.error} for s in errors[:5]],
        "elapsed_s": round(elapsed, 2),
        "throughput_rps": round(len(samples) / elapsed, 1) if elapsed else 0.0,
        "p50_ms": round(percentile(lat, 50), 2),
        "p99_ms": round(percentile(lat, 99), 2),
        "mean_ms": round(statistics.fmean(lat), 2) if lat else float("nan"),
        "per_op": per_op,
        "added": added,
    }


def generate_main(args: argparse.Namespace) -> int:
    spec = json.loads(Path(args.callers).read_text())
    callers = [Caller(c["tenant"], c["key"], tuple(c["users"])) for c in spec]
    summary = asyncio.run(
        generate(args.urls.split(","), callers, args.requests, args.duration, args.concurrency, args.seed)
    )
    summary["generator_pid"] = os.getpid()
    Path(args.out).write_text(json.dumps(summary))
    return 0


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    """Resident set size of a process (VmRSS), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def memlane_cmd() -> list[str]:
    return [sys.executable, "-m", "memlane.cli.main"]


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@dataclass
class Deployment:
    """A work directory with a config, the keys of ``tenants`` tenants and server processes."""

    workdir: Path
    tenants: int
    users_per_tenant: int
    servers: list[Server] = field(default_factory=list)
    callers: list[Caller] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env = {k: v for k, v in env.items() if not k.startswith(("MEMLANE_", "MEMORY_"))}
        # The per-key rate limit (default 600/min) would turn the load into 429s: off here.
        env.update({"OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "MEMLANE_RATE_LIMIT": "0"})
        return env

    def setup(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for t in range(self.tenants):
            tenant = f"tenant{t}"
            key = create_key(self.workdir, self.env, tenant)
            users = tuple(f"{tenant}-user{u}" for u in range(self.users_per_tenant))
            self.callers.append(Caller(tenant, key, users))

    def serve_args(self, port: int) -> list[str]:
        """The ``memlane serve`` arguments of one server process (subclasses change the store)."""
        return serve_args(self.workdir, port)

    def start(self, count: int) -> None:
        for i in range(count):
            port = free_port()
            log = self.workdir / f"server{i}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [*memlane_cmd(), *self.serve_args(port)],
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.servers.append(Server(proc, f"http://127.0.0.1:{port}", log))
        for server in self.servers:
            wait_ready(server)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers = []


def create_key(workdir: Path, env: dict[str, str], tenant: str) -> str:
    """A full-access key of ``tenant`` (``memlane keys create``); returns the secret."""
    out = subprocess.run(
        [*memlane_cmd(), "keys", "create", "--keys-file", str(workdir / "keys.db"), "--tenant", tenant, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return str(json.loads(out)["key"])


def serve_args(workdir: Path, port: int) -> list[str]:
    """``memlane serve`` on the embedded SQLite default in ``workdir`` with the hashing embedder
    (no model load: the load is on the service, not on MiniLM); every server process of a case
    gets the same files."""
    return [
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--db",
        str(workdir / "memlane.db"),
        "--embedder",
        "hash",
        "--keys",
        str(workdir / "keys.db"),
        "--tenants-dir",
        str(workdir / "tenants"),
        "--log-level",
        "warning",
    ]


def wait_ready(server: Server, timeout: float = 60.0) -> None:
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited ({server.proc.returncode}):\n{server.log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + "/health", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"server at {server.url} not ready in {timeout} s:\n{server.log.read_text()[-2000:]}")


def lost_writes(urls: list[str], callers: list[Caller], runs: list[dict[str, dict[str, int]]]) -> int:
    """Memories the generator was told were stored (201) but that a list through each server
    does not count: every add must be readable from every server process afterwards."""
    import httpx

    lost = 0
    for url in urls:
        for caller in callers:
            headers = {"Authorization": f"Bearer {caller.key}"} if caller.key else {}
            for user in caller.users:
                stored = sum(run.get(caller.tenant, {}).get(user, 0) for run in runs)
                r = httpx.get(f"{url}/v1/memories", params={"user_id": user, "limit": 1}, headers=headers, timeout=30)
                r.raise_for_status()
                lost += max(0, stored - int(r.json()["total"]))
    return lost


# --------------------------------------------------------------------------- one case


def run_generator(
    urls: list[str], callers: list[Caller], workdir: Path, requests: int, duration: float, concurrency: int, seed: int
) -> dict[str, Any]:
    """Run the generator in a second process and return its summary."""
    spec = workdir / "callers.json"
    spec.write_text(json.dumps([{"tenant": c.tenant, "key": c.key, "users": list(c.users)} for c in callers]))
    out = workdir / f"summary-{seed}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "generate",
        "--urls",
        ",".join(urls),
        "--callers",
        str(spec),
        "--requests",
        str(requests),
        "--duration",
        str(duration),
        "--concurrency",
        str(concurrency),
        "--seed",
        str(seed),
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, timeout=duration + 120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    return dict(json.loads(out.read_text()))


def run_case(
    workdir: Path,
    *,
    servers: int,
    tenants: int,
    users: int,
    requests: int,
    duration: float,
    concurrency: int,
    warmup: int,
    seed: int,
    deployment: Deployment | None = None,
) -> dict[str, Any]:
    """One case: ``servers`` server processes of ``deployment`` (default: the SQLite files of
    :class:`Deployment` in ``workdir``; ``bench/replicas.py`` passes its PostgreSQL + Redis one)."""
    deployment = deployment or Deployment(workdir, tenants, users)
    deployment.setup()
    try:
        deployment.start(servers)
        urls = [s.url for s in deployment.servers]
        warm = run_generator(urls, deployment.callers, workdir, warmup, duration, concurrency, seed + 1)
        before = [round(rss_mib(s.proc.pid), 1) for s in deployment.servers]
        summary = run_generator(urls, deployment.callers, workdir, requests, duration, concurrency, seed)
        after = [round(rss_mib(s.proc.pid), 1) for s in deployment.servers]
        server_pids = [s.proc.pid for s in deployment.servers]
        summary["lost_writes"] = lost_writes(urls, deployment.callers, [warm["added"], summary["added"]])
    finally:
        deployment.stop()
    summary.update(
        {
            "servers": servers,
            "server_pids": server_pids,
            "tenants": tenants,
            "users_per_tenant": users,
            "concurrency": concurrency,
            "duration_cap_s": duration,
            "warmup_requests": warmup,
            "rss_mib_before": before,
            "rss_mib_after": after,
            "rss_growth_mib": [round(a - b, 1) for a, b in zip(after, before, strict=True)],
        }
    )
    return summary


@contextlib.contextmanager
def workdir_for(path: str | None) -> Iterator[Path]:
    if path:
        p = Path(path)
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir(parents=True)
        yield p
    else:
        with tempfile.TemporaryDirectory(prefix="memlane-load-") as d:
            yield Path(d)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("generate", help="the load generator (run as the second process)")
    gen.add_argument("--urls", required=True)
    gen.add_argument("--callers", required=True, help="JSON file: [{tenant, key, users}]")
    gen.add_argument("--requests", type=int, required=True)
    gen.add_argument("--duration", type=float, required=True)
    gen.add_argument("--concurrency", type=int, required=True)
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--out", required=True)
    parser.add_argument("--requests", type=int, default=6000, help="fixed request count per case (default 6000)")
    parser.add_argument("--duration", type=float, default=180.0, help="duration cap per case, s (default 180)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tenants", type=int, default=3)
    parser.add_argument("--users", type=int, default=4, help="users per tenant")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--servers", choices=("1", "2", "both"), default="both")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", default=None, help="kept after the run (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--quick", action="store_true", help="300 requests, 30 s cap, 50 warm-up")
    args = parser.parse_args(argv)
    if args.command == "generate":
        return generate_main(args)
    if args.quick:
        args.requests, args.duration, args.warmup = 300, 30.0, 50
    cases = {"1": [1], "2": [2], "both": [1, 2]}[args.servers]
    results = []
    for servers in cases:
        with workdir_for(f"{args.workdir}/{servers}" if args.workdir else None) as workdir:
            result = run_case(
                workdir,
                servers=servers,
                tenants=args.tenants,
                users=args.users,
                requests=args.requests,
                duration=args.duration,
                concurrency=args.concurrency,
                warmup=args.warmup,
                seed=args.seed,
            )
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if any(r["errors"] or r["lost_writes"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
