"""Where keyword-only bulk ingest's CPU goes, stage by stage (issue 22).

Run::

    .venv/bin/python bench/ingest_stages.py --rounds 6

One ``add_many`` of the LoCoMo dev turns after the first session (as ``bench/ingest_ab.py``),
``embedder=None``, a fresh file in ``--workdir`` each round. Thread CPU time per turn of: the
event-loop thread (checking the input, building the rows' facts), the SQL thread (all of it),
inside it the SQL core's program (``run``), the statements it runs (each ``execute`` /
``executemany``: the facts rows, their FTS5 rows, history, the rest), the program's Python
(``run`` minus its statements) and the transaction around it (``BEGIN`` / ``COMMIT``: FTS5
flushes its segment at the commit). Minimum and median over the rounds.

Deterministic counts on a loaded machine (valgrind; instructions do not move with the load)::

    valgrind --tool=cachegrind --cache-sim=no python bench/ingest_stages.py --rounds 1 --quiet
    valgrind --tool=cachegrind --cache-sim=no python bench/ingest_stages.py --rounds 3 --quiet

``(I refs of 3 rounds - I refs of 1 round) / 2 / turns`` is the instructions per turn of one
``add_many`` (Python, SQLite and the collector included). ``--python-only``: no database, the
rows' facts built (``to_facts``, per session) and the SQL core's insert program driven with
canned answers (a new file's: nothing stored yet), in chunks of ``CHUNK_ROWS`` as ``add_many``
does (collector on); ``--facts-only``: only the facts. Their instruction counts, the same way,
split the Python cost between the two threads' work.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from memlane import AddBatch, AsyncMemory
from memlane.evaluation import locomo
from memlane.ingest.bulk import CHUNK_ROWS
from memlane.ingest.messages import to_facts
from memlane.stores.sql import facts as core
from memlane.stores.sql.stmt import ALL, COUNT, MANY, ONE, Program, Stmt, drive
from memlane.stores.sqlite import db as dbm
from memlane.stores.sqlite import dialect as sd
from memlane.stores.sqlite import facts as sf

T = TypeVar("T")
acc: Counter[str] = Counter()
on = [False]


def _stage(sql: str) -> str:
    if sql.startswith("INSERT INTO facts_fts"):
        return "fts"
    if sql.startswith("INSERT INTO facts "):
        return "facts"
    if sql.startswith("INSERT INTO history"):
        return "history"
    return "other sql"


def _run(c: sqlite3.Connection, program: Program[T]) -> T:
    def execute(stmt: Stmt) -> Any:
        t = time.thread_time()
        try:
            if stmt.fetch == MANY:
                c.executemany(stmt.sql, stmt.args)
                return None
            return sd._FETCH[stmt.fetch](c.execute(stmt.sql, stmt.args))
        finally:
            if on[0]:
                acc[_stage(stmt.sql)] += time.thread_time() - t

    t0 = time.thread_time()
    try:
        return drive(program, execute)
    finally:
        if on[0]:
            acc["run"] += time.thread_time() - t0


_call = dbm.Database._call


def _timed_call(self: dbm.Database, fn: Callable[[sqlite3.Connection], T]) -> T:
    t = time.thread_time()
    try:
        return _call(self, fn)
    finally:
        if on[0]:
            acc["sql thread"] += time.thread_time() - t


def _canned(stmt: Stmt) -> Any:
    """What a new, empty file answers: no stored hash, no stored turn, no row yet."""
    return {ONE: (0,), ALL: [], COUNT: 0}.get(stmt.fetch)


def python_only(batches: list[AddBatch], rounds: int, facts_only: bool) -> None:
    for _ in range(rounds):
        groups = [
            to_facts(
                b.messages,
                scope="user",
                user_id=b.user_id,
                agent_id=None,
                session_id=b.session_id,
                metadata={},
                timestamp=None,
            )
            for b in batches
        ]
        if facts_only:
            continue
        start = 0
        while start < len(groups):
            end, rows = start, 0
            while end < len(groups) and (rows == 0 or rows + len(groups[end]) <= CHUNK_ROWS):
                rows += len(groups[end])
                end += 1
            flat = [f for g in groups[start:end] for f in g]
            drive(core.put_facts(sd.DIALECT, flat, None, "api", [len(g) for g in groups[start:end]]), _canned)
            start = end


KEYS = ("wall", "cpu", "loop", "sql thread", "run", "statements", "program python", "transaction")
KEYS += ("fts", "facts", "history", "other sql")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/work/shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--workdir", default="/tmp/memlane-bench/ingest-stages")
    ap.add_argument("--quiet", action="store_true", help="print nothing (instruction counts)")
    ap.add_argument("--python-only", action="store_true", help="no database: facts + the core's program")
    ap.add_argument("--facts-only", action="store_true", help="no database: only the facts")
    args = ap.parse_args()
    sf._run = _run  # type: ignore[assignment]
    dbm.Database._call = _timed_call  # type: ignore[method-assign]
    convs = locomo.load(args.data)
    batches = [
        AddBatch(
            [
                {"role": "user", "name": t.speaker, "content": f"{t.speaker}: {t.text}", "timestamp": t.when}
                for t in turns
            ],
            user_id=c.sample_id,
            session_id=f"{c.sample_id}:{i}",
        )
        for c in convs
        for i, turns in enumerate(c.sessions)
    ]
    n = sum(len(b.messages) for b in batches[1:])
    if args.python_only or args.facts_only:
        return python_only(batches, args.rounds, args.facts_only)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    path = os.path.join(args.workdir, f"stages-{os.getpid()}.db")
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        for s in ("", "-wal", "-shm"):
            if os.path.exists(path + s):
                os.unlink(path + s)
        async with AsyncMemory(path, embedder=None, sessions="null") as m:
            await m.add_many(batches[:1])  # opens the file, warms the statements
            acc.clear()
            on[0] = True
            tl, tp, w = time.thread_time(), time.process_time(), time.perf_counter()
            await m.add_many(batches[1:])
            acc["loop"], acc["cpu"] = time.thread_time() - tl, time.process_time() - tp
            acc["wall"] = time.perf_counter() - w
            on[0] = False
        got = {k: v / n * 1e6 for k, v in acc.items()}
        got["statements"] = sum(got.get(k, 0.0) for k in ("fts", "facts", "history", "other sql"))
        got["program python"] = got["run"] - got["statements"]
        got["transaction"] = got["sql thread"] - got["run"]
        rounds.append(got)
    for s in ("", "-wal", "-shm"):
        if os.path.exists(path + s):
            os.unlink(path + s)
    if args.quiet:
        return
    print(f"{n} turns per add_many, {len(rounds)} rounds; us of thread CPU per turn (wall, cpu: the process)")
    print("| stage | min | median |\n|---|---:|---:|")
    for k in KEYS:
        vals = [r.get(k, 0.0) for r in rounds]
        print(f"| {k} | {min(vals):.1f} | {statistics.median(vals):.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
