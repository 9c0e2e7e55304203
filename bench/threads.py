"""Single ``add`` latency on a busy machine: memlane's own BLAS thread limit vs none.

Run::

    .venv/bin/python bench/threads.py            # about 2 minutes
    .venv/bin/python bench/threads.py --quick    # smoke test (< 1 min)

Every setting runs in a fresh interpreter whose environment has ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``MEMLANE_BLAS_THREADS`` removed (then the
setting's own variables added), while one extra "load" process keeps one core busy
(``--load spin``: a pure-Python busy loop, the default; ``--load numpy``: a loop of float32
matrix products with numpy's default BLAS threads, like a second numpy program; ``--load none``).

Settings:

* ``default``: no variable set. memlane limits BLAS to one thread for each embed itself.
* ``blas=all``: ``MEMLANE_BLAS_THREADS=<CPUs>``: BLAS keeps one thread per core during
  embeds, which is what every embed did before memlane limited the threads itself.
* ``OPENBLAS_NUM_THREADS=1``: what scripts/test.sh and the other bench scripts export.

Workloads, on ``Memory(db, embedder="local")`` (MiniLM), one user, after 5 warm-up calls:

* ``short``: ``add("I went hiking ... day N", user_id=...)``, one ~20-token message;
* ``chat``: ``add([user, assistant])``, two messages of ~60 words each.

Prints a markdown table of p50 / p95 wall time per ``add`` in ms and writes
``bench/results/threads.json``. Scratch databases go to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MEMLANE_BLAS_THREADS")

SHORT = "I went hiking near the lake with my dog on day {i}, it was lovely"
LONG = (
    "Yesterday I went hiking near the lake with my dog Rex and my sister Anna; we walked for about "
    "three hours, had a picnic with sandwiches and lemonade, watched the herons, and talked about her "
    "new job at the hospital and my plans to learn the piano this winter. Day {i}."
)

LOADS = {
    "spin": "while True:\n    pass\n",
    "numpy": (
        "import numpy as np\n"
        "a = np.random.rand(64, 384).astype(np.float32)\n"
        "b = np.random.rand(384, 1536).astype(np.float32)\n"
        "while True:\n    a @ b\n"
    ),
}


def child(workload: str, n: int, db: str) -> None:
    """Time ``n`` adds in this process; print one JSON line."""
    from memlane import Memory

    def one(i: int) -> None:
        if workload == "short":
            m.add(SHORT.format(i=i), user_id="u")
        else:
            text = LONG.format(i=i)
            m.add(
                [{"role": "user", "content": text}, {"role": "assistant", "content": "That sounds lovely! " + text}],
                user_id="u",
            )

    with Memory(db, embedder="local") as m:
        for i in range(5):
            one(-1 - i)
        times = []
        for i in range(n):
            start = time.perf_counter()
            one(i)
            times.append((time.perf_counter() - start) * 1000)
    times.sort()
    print(json.dumps({"p50": statistics.median(times), "p95": times[max(0, round(0.95 * n) - 1)], "n": n}))


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer adds per setting")
    ap.add_argument("--adds", type=int, default=None, help="timed adds per setting and workload (default 40)")
    ap.add_argument("--load", choices=("spin", "numpy", "none"), default="spin")
    ap.add_argument("--rounds", type=int, default=2, help="repeat the settings this often, interleaved")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "threads.json"))
    ap.add_argument("--child", nargs=3, metavar=("WORKLOAD", "N", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return

    n = args.adds or (10 if args.quick else 40)
    rounds = 1 if args.quick else args.rounds
    base_env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    settings = {
        "default": {},
        "blas=all": {"MEMLANE_BLAS_THREADS": str(cpus())},
        "OPENBLAS_NUM_THREADS=1": {"OPENBLAS_NUM_THREADS": "1"},
    }
    results: dict[str, dict[str, list[dict[str, float]]]] = {s: {"short": [], "chat": []} for s in settings}
    load = None
    if args.load != "none":
        load = subprocess.Popen([sys.executable, "-c", LOADS[args.load]], env=base_env)
    try:
        with tempfile.TemporaryDirectory(prefix="memlane-threads-") as tmp:
            for r in range(rounds):
                for workload in ("short", "chat"):
                    for name, extra in settings.items():
                        db = str(Path(tmp) / f"{r}-{workload}-{len(results[name][workload])}-{abs(hash(name))}.db")
                        proc = subprocess.run(
                            [sys.executable, __file__, "--child", workload, str(n), db],
                            env={**base_env, **extra},
                            capture_output=True,
                            text=True,
                            check=False,
                        )
                        if proc.returncode != 0:
                            raise SystemExit(f"{name} / {workload} failed:\n{proc.stderr[-2000:]}")
                        got = json.loads(proc.stdout.strip().splitlines()[-1])
                        results[name][workload].append(got)
                        print(
                            f"round {r + 1} {workload:5s} {name:24s} p50 {got['p50']:7.1f} p95 {got['p95']:7.1f} ms",
                            file=sys.stderr,
                            flush=True,
                        )
    finally:
        if load is not None:
            load.kill()
            load.wait()

    print(
        f"\n{cpus()} CPUs, load: {args.load}, {n} adds x {rounds} round(s) per cell (median of the rounds' p50 / p95)\n"
    )
    print("| setting | short add p50 | short p95 | chat add p50 | chat p95 |")
    print("|---|---:|---:|---:|---:|")
    summary: dict[str, Any] = {}
    for name in settings:
        row = {}
        for workload in ("short", "chat"):
            runs = results[name][workload]
            row[workload] = {
                "p50": statistics.median(x["p50"] for x in runs),
                "p95": statistics.median(x["p95"] for x in runs),
            }
        summary[name] = row
        print(
            f"| {name} | {row['short']['p50']:.1f} | {row['short']['p95']:.1f} | "
            f"{row['chat']['p50']:.1f} | {row['chat']['p95']:.1f} |"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "cpus": cpus(),
                "load": args.load,
                "adds": n,
                "rounds": rounds,
                "python": platform.python_version(),
                "summary": summary,
                "runs": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
