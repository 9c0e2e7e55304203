"""Server throughput: 1 vs 2 ``memlane serve`` replicas on one PostgreSQL and one Redis.

Run::

    .venv/bin/python bench/replicas.py --json bench/results/replicas.json    # the run in docs/benchmarks.md
    .venv/bin/python bench/replicas.py --quick                               # smoke run

The load, its generator and its figures are ``bench/service_load.py``'s (the same fixed,
seeded mix of 6,000 requests after 200 warm-up ones: add 30%, search 25%, list 15%, context
10%, session event append 10%, KAOS ``GET /memory/events`` 10%; 3 tenants x 4 users, 16
concurrent requests; the generator is a second process that sends request n to server
n mod #servers; errors and lost writes are counted). What changes is the deployment:

* the store: ``--db postgresql://...?schema=<case schema>``: each tenant gets a schema of
  its own derived from it (``memlane.service.hub.tenant_location``);
* sessions: ``MEMORY_TYPE=redis``, ``MEMORY_REDIS_URL=redis://...?prefix=<case prefix>``
  (each tenant its own key prefix under it);
* formation jobs: in the store's job table (PostgreSQL), run by the replicas themselves
  (default), or with ``--workers N`` queued only (``--no-formation-worker``) and run by N
  ``memlane worker`` processes; ``--queue redis`` puts the jobs in Redis instead.

Cases, side by side in one run (each on a fresh schema and a fresh Redis prefix): ``pg-1``
(one replica), ``pg-2`` (two replicas), and, with ``--sqlite`` (default on), ``sqlite-1``:
the one-process SQLite figure of ``bench/service_load.py`` for reference. PostgreSQL is
started with :func:`memlane.devserver.start_postgres` in ``<workdir>/pg`` unless ``--pg URL``;
Redis is :func:`memlane.devserver.find_or_start_redis` unless ``--redis URL``. The generator,
the servers, PostgreSQL and Redis all share this machine's cores: the figures are the whole
loopback stack, not a server alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import service_load as sl

HERE = Path(__file__).resolve().parent


@dataclass
class PgRedisDeployment(sl.Deployment):
    """``memlane serve`` replicas on one PostgreSQL (``store``) and one Redis (``sessions``)."""

    store: str = ""
    sessions: str = ""
    queue: str | None = None
    workers: int = 0
    worker_procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = super().env
        env.update({"MEMORY_TYPE": "redis", "MEMORY_REDIS_URL": self.sessions})
        if self.queue:
            env["MEMLANE_QUEUE"] = self.queue
        return env

    def serve_args(self, port: int) -> list[str]:
        args = [
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--db",
            self.store,
            "--embedder",
            "hash",
            "--keys",
            str(self.workdir / "keys.db"),
            "--tenants-dir",
            str(self.workdir / "tenants"),
            "--log-level",
            "warning",
        ]
        if self.workers:
            args.append("--no-formation-worker")
        return args

    def start(self, count: int) -> None:
        super().start(count)
        for i in range(self.workers):
            log = self.workdir / f"worker{i}.log"
            cmd = [
                *sl.memlane_cmd(),
                "worker",
                "--db",
                self.store,
                "--embedder",
                "hash",
                "--tenants-dir",
                str(self.workdir / "tenants"),
            ]
            cmd += [a for c in self.callers for a in ("--tenant", c.tenant)]
            with log.open("wb") as out:
                self.worker_procs.append(subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        super().stop()
        for proc in self.worker_procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self.worker_procs = []


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (gone ones count 0)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def children(ppid: int) -> list[int]:
    """Processes whose parent is ``ppid`` (a postmaster's backends and workers)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == ppid:
                    out.append(int(d.name))
    return out


class CpuMeter:
    """CPU seconds the servers and the PostgreSQL server spend during the timed run: wraps
    ``service_load.run_generator`` and samples around the call with the run's own seed (the
    warm-up uses seed + 1)."""

    def __init__(self, postmaster: int | None, seed: int) -> None:
        self.postmaster, self.seed = postmaster, seed
        self.deployment: sl.Deployment | None = None
        self.result: dict[str, float] = {}
        self._inner = sl.run_generator

    def __call__(self, urls: list[str], callers: Any, workdir: Path, requests: int, *rest: Any) -> dict[str, Any]:
        timed = rest[-1] == self.seed
        if not timed:
            return self._inner(urls, callers, workdir, requests, *rest)
        pg_before = {p: cpu_seconds([p]) for p in children(self.postmaster)} if self.postmaster else {}
        servers = [sv.proc.pid for sv in self.deployment.servers] if self.deployment else []
        srv_before = cpu_seconds(servers)
        out = self._inner(urls, callers, workdir, requests, *rest)
        srv = cpu_seconds(servers) - srv_before
        pg = 0.0
        if self.postmaster:
            for p in children(self.postmaster):
                pg += cpu_seconds([p]) - pg_before.get(p, 0.0)
        n = max(1, int(out["requests_sent"]))
        self.result = {
            "servers_cpu_s": round(srv, 2),
            "postgres_cpu_s": round(pg, 2),
            "servers_cpu_ms_per_request": round(srv * 1000 / n, 2),
            "postgres_cpu_ms_per_request": round(pg * 1000 / n, 2),
        }
        return out


def with_query(url: str, **params: str) -> str:
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in params.items())


def count_schemas(pg_url: str, prefix: str) -> int:
    """Schemas the case created (its own and one per tenant): evidence the stores were PostgreSQL."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        pattern = prefix.replace("_", r"\_") + "%"
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s", (pattern,)).fetchone()
        return int(row[0]) if row else 0


def count_redis_keys(redis_url: str, prefix: str) -> int:
    """Keys under the case's Redis prefix: evidence the sessions were in Redis."""
    import redis

    client = redis.Redis.from_url(redis_url.partition("?")[0])
    try:
        return sum(1 for _ in client.scan_iter(match=prefix + "*", count=1000))
    finally:
        client.close()


def drop_schemas(pg_url: str, prefix: str) -> None:
    """Drop the case's schemas (its own and its tenants')."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix.replace("_", r"\_") + "%",)
            ).fetchall()
        ]
        for name in names:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def drop_redis_prefix(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url.partition("?")[0])
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--duration", type=float, default=180.0, help="duration cap per case, s")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tenants", type=int, default=3)
    ap.add_argument("--users", type=int, default=4, help="users per tenant")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cases", default="sqlite-1,pg-1,pg-2", help="comma list of sqlite-1, pg-1, pg-2, pg-3 ...")
    ap.add_argument("--workers", type=int, default=0, help="memlane worker processes (replicas only queue jobs)")
    ap.add_argument("--queue", choices=("store", "redis"), default="store", help="where formation jobs live")
    ap.add_argument("--pg", default=None, help="PostgreSQL base URL (default: start one in <workdir>/pg)")
    ap.add_argument("--redis", default=None, help="Redis URL (default: find or start one)")
    ap.add_argument("--workdir", default="/tmp/memlane-bench")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--quick", action="store_true", help="300 requests, 30 s cap, 50 warm-up")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.duration, args.warmup = 300, 30.0, 50
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from memlane.devserver import find_or_start_redis, start_postgres

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    pg_server = redis_server = None
    pg_url = args.pg
    if pg_url is None:
        pg_server = start_postgres(work / "pg")
        pg_url = pg_server.url
    redis_url = args.redis
    if redis_url is None:
        redis_server = find_or_start_redis()
        redis_url = redis_server.url
    postmaster = None
    if pg_server is not None:
        with contextlib.suppress(OSError, ValueError):
            postmaster = int((pg_server.data_dir / "data" / "postmaster.pid").read_text().split()[0])
    meter = CpuMeter(postmaster, args.seed)
    sl.run_generator = meter  # type: ignore[assignment]
    run_id = secrets.token_hex(3)
    print(f"# PostgreSQL {pg_url}, Redis {redis_url}, run {run_id}", file=sys.stderr, flush=True)
    results: list[dict[str, Any]] = []
    try:
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            backend, _, n = case.partition("-")
            servers = int(n or "1")
            common = {
                "servers": servers,
                "tenants": args.tenants,
                "users": args.users,
                "requests": args.requests,
                "duration": args.duration,
                "concurrency": args.concurrency,
                "warmup": args.warmup,
                "seed": args.seed,
            }
            with sl.workdir_for(str(work / f"replicas-{run_id}-{case}")) as workdir:
                t = time.perf_counter()
                meter.result = {}
                if backend == "sqlite":
                    meter.deployment = sl.Deployment(workdir, args.tenants, args.users)
                    result = sl.run_case(workdir, deployment=meter.deployment, **common)  # type: ignore[arg-type]
                else:
                    schema = f"bench_rep_{run_id}_{servers}"
                    prefix = f"memlane-bench:{run_id}:{servers}:"
                    deployment = PgRedisDeployment(
                        workdir,
                        args.tenants,
                        args.users,
                        store=with_query(pg_url, schema=schema),
                        sessions=with_query(redis_url, prefix=prefix),
                        queue=with_query(redis_url, prefix=prefix + "jobs:") if args.queue == "redis" else None,
                        workers=args.workers,
                    )
                    meter.deployment = deployment
                    try:
                        result = sl.run_case(workdir, deployment=deployment, **common)  # type: ignore[arg-type]
                        result["pg_schemas"] = count_schemas(pg_url, schema)
                        result["redis_keys"] = count_redis_keys(redis_url, prefix)
                    finally:
                        with contextlib.suppress(Exception):
                            drop_schemas(pg_url, schema)
                        with contextlib.suppress(Exception):
                            drop_redis_prefix(redis_url, prefix)
                    result.update(store="postgresql", sessions="redis", workers=args.workers, queue=args.queue)
                result.update(meter.result)
                result["case"] = case
                result["case_s"] = round(time.perf_counter() - t, 1)
                result["loadavg_1min_end"] = round(os.getloadavg()[0], 2)
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        if redis_server is not None:
            redis_server.stop()
    print_table(results)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if any(r["errors"] or r["lost_writes"] for r in results) else 0


def print_table(results: list[dict[str, Any]]) -> None:
    print("\n| case | requests | errors | lost | elapsed s | req/s | p50 ms | p99 ms | RSS MiB | CPU ms/req srv, pg |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in results:
        print(
            f"| {r['case']} | {r['requests_sent']:,} | {r['errors']} | {r['lost_writes']} | {r['elapsed_s']} "
            f"| **{r['throughput_rps']}** | {r['p50_ms']} | {r['p99_ms']} | {', '.join(map(str, r['rss_mib_after']))} "
            f"| {r.get('servers_cpu_ms_per_request', '-')}, {r.get('postgres_cpu_ms_per_request', '-')} |"
        )
    ops = list(results[0]["per_op"]) if results else []
    print("\nPer operation p50 / p99 ms:\n")
    print("| case | " + " | ".join(ops) + " |")
    print("|---|" + "---:|" * len(ops))
    for r in results:
        cells = [f"{r['per_op'][o]['p50_ms']} / {r['per_op'][o]['p99_ms']}" for o in ops]
        print(f"| {r['case']} | " + " | ".join(cells) + " |")
    for r in results:
        if "pg_schemas" in r:
            print(f"\n{r['case']}: {r['pg_schemas']} PostgreSQL schemas, {r['redis_keys']} Redis keys at the end")
    for r in results:
        if r["first_errors"]:
            print(f"\n{r['case']} first errors: {json.dumps(r['first_errors'])[:1500]}")


if __name__ == "__main__":
    raise SystemExit(main())
