"""Small-scope search latency through the sync ``Memory`` facade (issue 22), two code trees
side by side in one run.

Run::

    .venv/bin/python bench/small_scope.py --before /path/to/old/src            # this tree vs another
    .venv/bin/python bench/small_scope.py --before /path/to/old/src --rounds 20 --conversations 3
    .venv/bin/python bench/small_scope.py --before /path/to/old/src --db 'postgresql://...?schema=small_scope'

Data: the first ``--conversations`` LoCoMo dev conversations (``--data``; read, never copied)
stored in ONE user scope with the default embedder (3 conversations: 1,451 turns, "a typical
user"); the database is built once in ``--workdir`` and copied for each tree. Queries: the
conversations' questions. Each tree runs in its own process (``PYTHONPATH=<src>``) with its own
copy of the file; the parent alternates rounds of ``--per-round`` queries between them, so both
see the same machine load. Every query is timed end to end around ``Memory.search`` (query
embedding included: each round's queries are new to the process, so the query-embedding cache
does not answer them, except in the "same queries again" rounds), the process CPU time per
search (all threads) is measured per round, and ``debug=True`` stage timings are collected.
Prints p50 / p95 per tree and mode, the ratio, and the load average. ``--db URL`` (PostgreSQL):
the scope is stored there once (when the schema holds no memories yet) and both trees search
the same database (the CPU time is the client process's; the server's is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHILD = r"""
import json, os, sys, time
from memlane import Memory
db, qfile = sys.argv[1], sys.argv[2]
qs = json.load(open(qfile))
m = Memory(db)
for q in qs[:20]:
    m.search(q, user_id="u")  # warm-up (vector cache, pages); these queries are not timed
pos = 20
print("ready", flush=True)
for line in sys.stdin:
    n, mode, repeat = line.split()
    out = []
    c0 = time.process_time()
    for _ in range(int(n)):
        if repeat == "1":
            q = qs[pos % 20]
        else:
            q = qs[pos % len(qs)]
            pos += 1
        t = time.perf_counter()
        r = m.search(q, user_id="u", mode=mode, debug=True)
        out.append([(time.perf_counter() - t) * 1000, r.debug["timings"]])
    print(json.dumps({"rows": out, "cpu_ms": (time.process_time() - c0) * 1000 / int(n)}), flush=True)
m.close()
"""


def build(db: Path | str, data: str, conversations: int) -> list[str]:
    from memlane import AddBatch, Memory
    from memlane.evaluation import locomo

    convs = locomo.load(data)[:conversations]
    if isinstance(db, str):  # a store URL: filled once
        with Memory(db) as m:
            empty = not m.list(user_id="u", limit=1).items
    else:
        empty = not db.exists()
    if empty:
        with Memory(str(db)) as m:
            batches = [
                AddBatch(
                    [{"role": "user", "name": t.speaker, "content": f"{t.speaker}: {t.text}"} for t in turns],
                    user_id="u",
                    session_id=f"{c.sample_id}:{i}",
                )
                for c in convs
                for i, turns in enumerate(c.sessions)
            ]
            m.add_many(batches)
    return [q[0] for c in convs for q in c.questions]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the other tree's src/ folder")
    ap.add_argument("--data", default="/work/shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--conversations", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--workdir", default="/tmp/memlane-bench/small-scope")
    ap.add_argument("--db", default=None, help="a PostgreSQL URL both trees search (default: SQLite copies)")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    db: Path | str = args.db or work / f"locomo{args.conversations}.db"
    queries = build(db, args.data, args.conversations)
    qfile = work / "queries.json"
    qfile.write_text(json.dumps(queries))
    here = str(Path(__file__).resolve().parents[1] / "src")
    trees = {"before": args.before, "after": here}
    procs = {}
    for name, src in trees.items():
        copy: Path | str = db
        if isinstance(db, Path):
            copy = work / f"{name}.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{copy}{suffix}").unlink(missing_ok=True)
            shutil.copy(db, copy)
        env = {**os.environ, "PYTHONPATH": src, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        p = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(copy), str(qfile)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        procs[name] = p
    cases = [("hybrid", "0"), ("keyword", "0"), ("hybrid", "1")]
    results: dict[tuple[str, str, str], list[list[Any]]] = {}
    cpu: dict[tuple[str, str, str], list[float]] = {}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        for mode, repeat in cases:
            order = list(procs) if r % 2 == 0 else list(reversed(procs))
            for name in order:
                p = procs[name]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(f"{args.per_round} {mode} {repeat}\n")
                p.stdin.flush()
                got = json.loads(p.stdout.readline())
                results.setdefault((name, mode, repeat), []).extend(got["rows"])
                cpu.setdefault((name, mode, repeat), []).append(got["cpu_ms"])
    load1 = os.getloadavg()[0]
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    name = db.name if isinstance(db, Path) else db.split("@")[-1]
    print(f"{name}: {len(queries)} queries; load average {load0:.1f} -> {load1:.1f}")
    print("| case | tree | p50 ms | p95 ms | CPU ms per search (all threads) | stage p50s (ms) |")
    print("|---|---|---:|---:|---:|---|")
    p50s: dict[tuple[str, str, str], float] = {}
    for (name, mode, repeat), rows in results.items():
        ts = sorted(r[0] for r in rows)
        p50, p95 = ts[len(ts) // 2], ts[int(len(ts) * 0.95)]
        p50s[(name, mode, repeat)] = p50
        keys = sorted({k for r in rows for k in r[1]})
        stages = ", ".join(f"{k} {statistics.median(r[1].get(k, 0.0) for r in rows):.2f}" for k in keys)
        label = f"{mode}{' (same queries again)' if repeat == '1' else ''}"
        c = statistics.median(cpu[(name, mode, repeat)])
        print(f"| {label} | {name} | {p50:.2f} | {p95:.2f} | {c:.2f} | {stages} |")
    for mode, repeat in cases:
        ratio = p50s[("before", mode, repeat)] / p50s[("after", mode, repeat)]
        key_b, key_a = ("before", mode, repeat), ("after", mode, repeat)
        cratio = statistics.median(cpu[key_b]) / statistics.median(cpu[key_a])
        label = f"{mode}{' again' if repeat == '1' else ''}"
        print(f"{label}: before/after p50 = {ratio:.2f}x, CPU per search = {cratio:.2f}x")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"({time.time() - t0:.0f} s)")
