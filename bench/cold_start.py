"""Cold start: ``import memlane`` to the first search result, in fresh processes.

Run::

    .venv/bin/python bench/cold_start.py                       # a 1k-memory file it builds
    .venv/bin/python bench/cold_start.py --db /tmp/memlane-bench/search-100k-....db --user <id>

Each trial is a new Python process (nothing cached in memory; the OS page cache stays warm,
as on a machine that has used the file before) that times, with ``time.perf_counter`` from the
first line of the child:

* ``import``: ``import memlane``;
* ``open``: ``Memory(db)`` plus opening the stores and loading the embedder (the first call
  opens them, so the child calls ``memory.stats()`` to separate this stage);
* ``first search``: the first ``search`` of the scope (loads its vector cache or index, embeds
  the query);
* ``second search``: a different query, warm.

Target (issue 11): import to first result <= 1 s; first search after opening a 100k scope
<= 200 ms. Threads: 1 BLAS thread (``OPENBLAS_NUM_THREADS=1``), as the other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import time, json, sys
t0 = time.perf_counter()
import memlane
t1 = time.perf_counter()
m = memlane.Memory(sys.argv[1], embedder=sys.argv[2], sessions="null")
m.stats(user_id=sys.argv[3])
t2 = time.perf_counter()
r = m.search(sys.argv[4], user_id=sys.argv[3])
t3 = time.perf_counter()
m.search(sys.argv[5], user_id=sys.argv[3])
t4 = time.perf_counter()
m.close()
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "first_search": t3 - t2, "second_search": t4 - t3,
                  "total": t3 - t0, "hits": len(r.hits)}))
"""


def build_small(path: Path, n: int, embedder: str) -> str:
    from memlane import Memory

    user = "cold-user"
    with Memory(path, embedder=embedder, sessions="null") as m:
        words = ["camera", "garden", "hiking", "piano", "recipe", "travel", "museum", "coffee", "bicycle", "novel"]
        for s in range(n // 20):
            turns = [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"Turn {i} of session {s}: I talked about the {words[(s + i) % 10]} and the "
                    f"{words[(s * 3 + i) % 10]} again, number {s * 20 + i}.",
                }
                for i in range(20)
            ]
            m.add(turns, user_id=user, session_id=f"s{s}")
    return user


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", help="an existing database (default: build a small one in a temp dir)")
    ap.add_argument("--user", default=None, help="the scope's user id in --db")
    ap.add_argument("--size", type=int, default=1000, help="memories in the built database")
    ap.add_argument("--embedder", default="auto")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--query", default="what did I say about the piano and hiking?")
    ap.add_argument("--query2", default="which museum did we visit with coffee?")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/cold_start.json)")
    a = ap.parse_args()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    tmp = None
    if a.db:
        db, user = Path(a.db), a.user
        if user is None:
            import sqlite3

            row = sqlite3.connect(db).execute("SELECT user_id FROM facts WHERE user_id IS NOT NULL LIMIT 1").fetchone()
            user = row[0]
    else:
        tmp = tempfile.TemporaryDirectory()
        db = Path(tmp.name) / "cold.db"
        user = build_small(db, a.size, a.embedder)
    runs = []
    for i in range(a.trials):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(db), a.embedder, user, f"{a.query} ({i})", a.query2],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"trial {i}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in runs[-1].items() if k != "hits"))
    med = {k: round(statistics.median(r[k] for r in runs) * 1000, 1) for k in runs[0] if k != "hits"}
    print()
    print("| database | import | open (stores + embedder) | first search | second search | import -> first result |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| {db.name} | {med['import']} ms | {med['open']} ms | {med['first_search']} ms |"
        f" {med['second_search']} ms | **{med['total']} ms** |"
    )
    out_path = Path(a.out) if a.out else Path(__file__).resolve().parent / "results" / "cold_start.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(
        json.dumps(
            {
                "db": str(db),
                "embedder": a.embedder,
                "trials": runs,
                "median_ms": med,
                "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
            },
            indent=2,
        )
    )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
