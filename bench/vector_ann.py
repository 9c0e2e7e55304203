"""The vector stage alone at 100k vectors in one scope: exact numpy vs sign-bit + rescoring vs
the usearch HNSW graph (all with exact rescoring), recall@10 against exact, and the first search
after opening the scope with and without the persisted sidecar.

Vectors: real MiniLM vectors of the LoCoMo dev turns (3,435), each row a turn plus a random
fraction of another turn plus noise (cosine ~0.85 to its source), normalised; queries: the real
MiniLM vectors of the LoCoMo dev questions. Cached as .npy under --workdir (embedding the turns
takes minutes with the numpy encoder).

    .venv/bin/python bench/vector_ann.py --rows 100000 --queries 500

One process, 1 BLAS thread, the modes measured side by side on the same index (the machine is
shared: compare ratios, not absolute figures). Cold: fresh processes open the store and time
their first ``vector_search`` (the OS page cache is warm: the file was just written).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from memlane.models import Fact, Scope, user_partition
from memlane.stores.sqlite.facts import SqliteFactStore

USER = "bench-user"
PART = user_partition(USER, None)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p)) if xs else float("nan")


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50": round(pct(xs, 50), 4), "p95": round(pct(xs, 95), 4), "n": len(xs)}


async def embed_locomo(workdir: Path, data: Path) -> tuple[np.ndarray, np.ndarray]:
    turns_f, qs_f = workdir / "locomo_turns.npy", workdir / "locomo_questions.npy"
    if turns_f.exists() and qs_f.exists():
        return np.load(turns_f), np.load(qs_f)
    from memlane.providers.embed.local import LocalEmbedder

    d = json.loads(data.read_text())
    texts = [
        t["text"]
        for conv in d
        for k, v in conv["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
        if t.get("text")
    ]
    qs = [q["question"] for conv in d for q in conv["qa"]]
    e = LocalEmbedder()
    log(f"embedding {len(texts)} turns and {len(qs)} questions ...")
    tv = np.concatenate([await e.embed_batch(texts[i : i + 256]) for i in range(0, len(texts), 256)])
    qv = await e.embed_batch(qs)
    np.save(turns_f, tv.astype(np.float32))
    np.save(qs_f, qv.astype(np.float32))
    return tv.astype(np.float32), qv.astype(np.float32)


def make_rows(turns: np.ndarray, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    j = rng.integers(0, len(turns), n)
    k = rng.integers(0, len(turns), n)
    r = rng.uniform(0.0, 0.6, (n, 1)).astype(np.float32)
    x = turns[j] + r * turns[k] + 0.03 * rng.standard_normal((n, turns.shape[1])).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


async def build_db(path: Path, rows: np.ndarray) -> None:
    store = await SqliteFactStore.open(path, sidecar_min=None)
    await store.bind_embedder("local:minilm-bench", rows.shape[1])
    step = 2000
    t = time.perf_counter()
    for i in range(0, len(rows), step):
        facts = [
            Fact(content=f"row {i + j}", user_id=USER, session_id=f"s{(i + j) // 20}", kind="message")
            for j in range(min(step, len(rows) - i))
        ]
        await store.put_facts(facts, rows[i : i + step])
    log(f"loaded {len(rows)} rows in {time.perf_counter() - t:.1f} s")
    await store.close()


COLD = """
import asyncio, sys, time
import numpy as np
from memlane.models import Scope
from memlane.stores.sqlite.facts import SqliteFactStore
async def main():
    q = np.load(sys.argv[2])[0]
    t = time.perf_counter()
    s = await SqliteFactStore.open(sys.argv[1], sidecar_min=int(sys.argv[3]) or None)
    t_open = time.perf_counter() - t
    t = time.perf_counter()
    await s.vector_search(Scope(user_id=__USER__).partition_filter(), q, limit=20)
    t_first = time.perf_counter() - t
    t = time.perf_counter()
    await s.vector_search(Scope(user_id=__USER__).partition_filter(), q, limit=20)
    t_second = time.perf_counter() - t
    ix = s._cache[__PART__].index
    print(t_open * 1e3, t_first * 1e3, t_second * 1e3, s.vector_blob_rows, ix.ann is not None)
    s.vector_caches.close(0)
    s.vector_caches._closed = True
    await s.close()
asyncio.run(main())
""".replace("__USER__", repr(USER)).replace("__PART__", repr(PART))


def cold_runs(db: Path, qfile: Path, sidecar_min: int, runs: int) -> list[list[float]]:
    out = []
    for _ in range(runs):
        p = subprocess.run(
            [sys.executable, "-c", COLD, str(db), str(qfile), str(sidecar_min)],
            capture_output=True,
            text=True,
            check=True,
        )
        out.append([float(x) if x not in ("True", "False") else float(x == "True") for x in p.stdout.split()])
    return out


def recall_at(approx: np.ndarray, scores: np.ndarray, k: int) -> float:
    """Tie-aware recall@k: rows scoring at least the exact k-th score count as hits."""
    kth = np.partition(-scores, k - 1)[k - 1]
    return float(np.sum(scores[approx[:k]] >= -kth - 1e-6)) / k


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--workdir", default="/tmp/memlane-bench/vector_ann")
    ap.add_argument("--data", default="../shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--cold-runs", type=int, default=5)
    ap.add_argument(
        "--pool",
        help="rows from this .npy instead (e.g. bench/search_latency.py's cached MiniLM pool of 100,000 "
        "generated texts: /tmp/memlane-bench/pool-local_all_MiniLM_L6_v2-1234-100000.npy)",
    )
    ap.add_argument("--out", default="bench/results/vector_ann.json")
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    turns, questions = await embed_locomo(work, Path(a.data))
    if a.pool:
        rows = np.load(a.pool).astype(np.float32)[: a.rows]
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        a.rows = len(rows)
    else:
        rows = make_rows(turns, a.rows, seed=0)
    qs = questions[: a.queries]
    np.save(work / "q.npy", qs)
    db = work / f"vec{a.rows}{'-' + Path(a.pool).stem if a.pool else ''}.db"
    if not db.exists():
        await build_db(db, rows)
    for p in sorted(Path(str(db) + ".vectors").glob("*")) if Path(str(db) + ".vectors").exists() else []:
        p.unlink()
    res: dict[str, Any] = {"rows": a.rows, "queries": len(qs), "dim": int(rows.shape[1]), "pool": a.pool}

    log("cold first search, no sidecar (BLOBs) ...")
    res["cold_no_sidecar"] = cold_runs(db, work / "q.npy", 0, a.cold_runs)

    store = await SqliteFactStore.open(db)
    parts = Scope(user_id=USER).partition_filter()
    t = time.perf_counter()
    await store.vector_search(parts, qs[0], limit=20)
    res["first_search_blobs_ms"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    store.vector_caches.wait_idle()
    res["graph_build_and_sidecar_s"] = round(time.perf_counter() - t, 1)
    log(f"graph + sidecar in {res['graph_build_and_sidecar_s']} s")
    index = store._cache[PART].index
    assert index.ann is not None, "usearch not installed?"
    mat = index.matrix
    exact_scores = [mat @ q for q in qs]

    def timed(fn: Any) -> tuple[list[float], list[np.ndarray]]:
        ts, outs = [], []
        for q in qs:
            t = time.perf_counter()
            r, _ = fn(q)
            ts.append((time.perf_counter() - t) * 1e3)
            outs.append(r)
        return ts, outs

    ann, ann_n = index.ann, index.ann_n
    modes: dict[str, Any] = {}
    for name in ("exact", "signbit", "hnsw", "exact", "signbit", "hnsw"):  # twice, interleaved
        if name == "exact":
            index.exact_max = 10**9
        else:
            index.exact_max = 20_000
        index.ann, index.ann_n = (ann, ann_n) if name == "hnsw" else (None, 0)
        ts, outs = timed(lambda q: index.search(q, 10))
        rec = [recall_at(o, s, 10) for o, s in zip(outs, exact_scores, strict=True)]
        modes.setdefault(name, {"ms": [], "recall@10": float(np.mean(rec)), "min_recall@10": float(np.min(rec))})
        modes[name]["ms"] += ts
    index.exact_max, index.ann, index.ann_n = 20_000, ann, ann_n
    for m in modes.values():
        m["ms"] = summary(m["ms"])
        m["recall@10"] = round(m["recall@10"], 4)
    res["index_search"] = modes
    # filtered (exact filters): one session (20 rows) and a broad kind filter (every row)
    from memlane.stores.base import FactFilter

    for label, flt in (("session", FactFilter(session_id="s7")), ("kind", FactFilter(kind="message"))):
        ts = []
        for q in qs[:200]:
            t = time.perf_counter()
            await store.vector_search(parts, q, limit=10, filter=flt)
            ts.append((time.perf_counter() - t) * 1e3)
        res[f"vector_search_filter_{label}_ms"] = summary(ts)
    # the store call (counter check + worker-thread hop + graph search)
    ts = []
    for q in qs:
        t = time.perf_counter()
        await store.vector_search(parts, q, limit=20)
        ts.append((time.perf_counter() - t) * 1e3)
    res["vector_search_store_ms"] = summary(ts)
    sidecar = sorted(Path(str(db) + ".vectors").glob("*"))
    res["sidecar_files_mb"] = {p.suffix: round(p.stat().st_size / 1e6, 1) for p in sidecar}
    await store.close()

    log("cold first search with the sidecar ...")
    res["cold_sidecar"] = cold_runs(db, work / "q.npy", 20_000, a.cold_runs)
    for key in ("cold_no_sidecar", "cold_sidecar"):
        runs = np.asarray(res[key])
        res[key] = {
            "open_ms": summary(list(runs[:, 0])),
            "first_search_ms": summary(list(runs[:, 1])),
            "second_search_ms": summary(list(runs[:, 2])),
            "blob_rows": int(runs[0, 3]),
            "graph": bool(runs[0, 4]),
        }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    print(f"\n| mode ({a.rows:,} rows, {len(qs)} queries) | p50 ms | p95 ms | recall@10 vs exact |\n|---|---|---|---|")
    for name, m in modes.items():
        print(f"| {name} | {m['ms']['p50']:.3f} | {m['ms']['p95']:.3f} | {m['recall@10']:.4f} |")
    for key in ("cold_no_sidecar", "cold_sidecar"):
        c = res[key]
        print(
            f"| cold {key}: open {c['open_ms']['p50']:.0f} ms, first search p50 {c['first_search_ms']['p50']:.0f} / "
            f"p95 {c['first_search_ms']['p95']:.0f} ms, BLOB rows {c['blob_rows']}, graph {c['graph']} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
