"""Concurrent writers on one database file (threads and processes) never corrupt it or lose
an acknowledged write."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

from memlane import Memory

N_WRITES = 40


def _writer(path: str, worker: int, n: int) -> list[str]:
    ids = []
    with Memory(path, embedder="hash:64", sessions="sqlite") as m:
        for i in range(n):
            [f] = m.add(
                [{"role": "user", "content": f"worker {worker} note {i} about parrots"}],
                user_id=f"user{worker % 3}",
                session_id=f"s{worker}",
            )
            ids.append(f.id)
    return ids


def _process_writer(path: str, worker: int, n: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(_writer(path, worker, n))


def _check(path: Path, expected_ids: set[str], workers: int) -> None:
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = {r[0] for r in con.execute("SELECT id FROM facts")}
        assert ids == expected_ids
        fts = con.execute("SELECT COUNT(*) FROM facts_fts").fetchone()[0]
        assert fts == len(expected_ids)
        for w in range(workers):  # per-session order: seq 0..n-1 without gaps
            seqs = [r[0] for r in con.execute("SELECT seq FROM facts WHERE session_id=? ORDER BY seq", (f"s{w}",))]
            assert seqs == list(range(N_WRITES))
    finally:
        con.close()


def test_threads_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    results: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            results[w] = _writer(str(path), w, N_WRITES)
        except BaseException as exc:  # reported below with its message
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, [repr(e) for e in errors]
    expected = {i for ids in results.values() for i in ids}
    assert len(expected) == 6 * N_WRITES
    _check(path, expected, 6)
    with Memory(path, embedder="hash:64", sessions="null") as m:
        assert len(m.search("parrots", user_id="user0", top_k=100).hits) == 2 * N_WRITES


def test_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with Memory(path, embedder="hash:64", sessions="sqlite"):
        pass  # create the file once, so workers race on writes, not on creation
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_process_writer, args=(str(path), w, N_WRITES, q)) for w in range(3)]
    for p in procs:
        p.start()
    got = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    q.close()
    q.join_thread()
    expected = {i for ids in got for i in ids}
    assert len(expected) == 3 * N_WRITES
    _check(path, expected, 3)
