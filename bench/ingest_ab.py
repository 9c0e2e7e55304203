"""Keyword-only bulk ingest (``add_many`` with ``embedder=None``), two code trees side by side
in one run (issue 22).

Run::

    .venv/bin/python bench/ingest_ab.py --before /path/to/old/src --rounds 6

Data: the LoCoMo dev conversations (``--data``; read, never copied), every session one
``AddBatch`` (one ``add_many`` of all 3,435 turns, each conversation its own user), as
``bench/ingest.py`` stores them. Each round runs one fresh process per tree
(``PYTHONPATH=<src>``), alternating which goes first; each process stores the turns into a new
file ``--repeats`` times (a fresh file each time, the first call warms the imports) and reports,
per turn, the wall time and the CPU time of the process (all threads), of the event-loop thread
and of the SQLite threads. The table gives the MINIMUM over all runs of each tree (the run the
machine's other load disturbed least) and the median, and the before/after ratios.

``--postgres``: the same on PostgreSQL (a local pgvector server started from the ``pgserver``
wheel under ``--workdir``, a fresh schema per store); the CPU columns are then the client
process's (PostgreSQL's store runs on the event loop: there is no SQL thread), the server's
work shows in the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import asyncio, json, os, sys, time
from memlane import AddBatch, AsyncMemory
from memlane.evaluation import locomo
from memlane.stores.sqlite import db as dbm

data, work, repeats, pg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
convs = locomo.load(data)
batches = [
    AddBatch(
        [{"role": "user", "name": t.speaker, "content": f"{t.speaker}: {t.text}", "timestamp": t.when} for t in turns],
        user_id=c.sample_id,
        session_id=f"{c.sample_id}:{i}",
    )
    for c in convs
    for i, turns in enumerate(c.sessions)
]
n = sum(len(b.messages) for b in batches)
sql = [0.0]
call = dbm.Database._call


def timed(self, fn):
    t = time.thread_time()
    try:
        return call(self, fn)
    finally:
        sql[0] += time.thread_time() - t


dbm.Database._call = timed


async def once(path):
    if pg:
        import uuid
        path = f"{pg}?schema=b_{uuid.uuid4().hex[:12]}"
    for s in ("", "-wal", "-shm"):
        if os.path.exists(path + s):
            os.unlink(path + s)
    async with AsyncMemory(path, embedder=None, sessions="null") as m:
        await m.add_many(batches[:1])  # opens the file, warms the statements
        sql[0] = 0.0
        t, tl, tp = time.perf_counter(), time.thread_time(), time.process_time()
        await m.add_many(batches[1:])
        k = n - len(batches[0].messages)
        return {
            "turns": k,
            "wall_us": (time.perf_counter() - t) / k * 1e6,
            "cpu_us": (time.process_time() - tp) / k * 1e6,
            "loop_us": (time.thread_time() - tl) / k * 1e6,
            "sql_us": sql[0] / k * 1e6,
        }, path


async def main():
    out = []
    for r in range(repeats + 1):
        got, path = await once(os.path.join(work, f"ingest-{os.getpid()}.db"))
        if r:
            out.append(got)
        if pg:
            import psycopg

            with psycopg.connect(pg, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {path.rsplit('=', 1)[1]} CASCADE")
    for s in ("", "-wal", "-shm"):
        p = os.path.join(work, f"ingest-{os.getpid()}.db{s}")
        if os.path.exists(p):
            os.unlink(p)
    print(json.dumps(out))


asyncio.run(main())
"""

KEYS = ("wall_us", "cpu_us", "loop_us", "sql_us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the other tree's src/ folder")
    ap.add_argument("--data", default="/work/shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2, help="stores per process")
    ap.add_argument("--workdir", default="/tmp/memlane-bench/ingest-ab")
    ap.add_argument("--postgres", action="store_true", help="store into a local PostgreSQL (pgserver) instead")
    args = ap.parse_args()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    server = None
    if args.postgres:
        from memlane.devserver import start_postgres

        server = start_postgres(Path(args.workdir) / "pg")
    try:
        run(args, server.url if server is not None else "")
    finally:
        if server is not None:
            server.stop()


def run(args: argparse.Namespace, pg: str) -> None:
    trees = {"before": args.before, "after": str(Path(__file__).resolve().parents[1] / "src")}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        for name in list(trees) if r % 2 == 0 else list(reversed(trees)):
            env = {**os.environ, "PYTHONPATH": trees[name], "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
            cmd = [sys.executable, "-c", CHILD, args.data, args.workdir, str(args.repeats), pg]
            runs[name] += json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    load1 = os.getloadavg()[0]
    turns = int(runs["after"][0]["turns"])
    where = "PostgreSQL" if pg else "SQLite"
    print(
        f"{where}: {turns} turns per add_many, {len(runs['after'])} runs per tree;"
        f" load average {load0:.1f} -> {load1:.1f}"
    )
    print("| tree | turns/s (best run) | wall us/turn min / median | CPU us/turn min / median", end="")
    print(" | loop thread | SQL threads |")
    print("|---|---:|---:|---:|---:|---:|")
    best: dict[str, dict[str, float]] = {}
    for name, rows in runs.items():
        best[name] = {k: min(r[k] for r in rows) for k in KEYS}
        med = {k: statistics.median(r[k] for r in rows) for k in KEYS}
        print(
            f"| {name} | {1e6 / best[name]['wall_us']:,.0f} | {best[name]['wall_us']:.1f} / {med['wall_us']:.1f}"
            f" | {best[name]['cpu_us']:.1f} / {med['cpu_us']:.1f} | {best[name]['loop_us']:.1f} / {med['loop_us']:.1f}"
            f" | {best[name]['sql_us']:.1f} / {med['sql_us']:.1f} |"
        )
    ratios = ", ".join(f"{k} {best['before'][k] / best['after'][k]:.2f}x" for k in KEYS if best["after"][k] > 0)
    print(f"before/after (min over runs): {ratios}")


if __name__ == "__main__":
    main()
