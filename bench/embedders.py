"""The local MiniLM embedder's backends side by side in one run: numpy fp32, onnx fp32, onnx int8.

Run::

    .venv/bin/python bench/embedders.py            # 200 query latencies, 3,435 turns, 883 questions
    .venv/bin/python bench/embedders.py --quick    # 50 queries, first conversation only

Data: ``/work/shared/bench/locomo/locomo_dev.json`` or ``--data PATH`` (CC BY-NC: read only).

For each backend (``LocalEmbedder(backend=..., precision=...)``, same weights, same tokeniser):

* query latency: ``embed_sync([question])`` for the first ``--queries`` LoCoMo questions, one
  thread (``threads=1``, ``blas_threads=1``); the backends take turns question by question,
  so load changes on the shared machine hit all of them alike. p50 / p95 in ms.
* batch throughput: all LoCoMo dev turns (``"Speaker: text"``) in ONE ``embed_sync`` call
  (length-sorted batches of 64), with ``threads=1`` and ``threads=2`` (two worker threads,
  one BLAS / onnxruntime thread each); sentences/s.
* dense recall: per conversation, the turn vectors of the 1-thread batch pass in one matrix;
  every category 1-4 question embedded on its own (as a search does), exact top-10 by dot
  product, scored by ``memlane.evaluation.locomo.score`` (recall@k as ``memlane bench
  locomo``); this is the vector-only recall of bench/baseline.py's brute-force side.
* cosine of every turn vector against the numpy fp32 one (mean, min).

The ONNX graphs are built into the cache ($MEMLANE_CACHE_DIR or ~/.cache/memlane/onnx) when
missing; the build / load time of the first embed is reported too. Writes
``bench/results/embedders.json`` and prints a markdown table. The machine is shared: compare
the backends' ratios within one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import asyncio  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import log  # noqa: E402

from memlane.evaluation import locomo  # noqa: E402
from memlane.providers.embed import onnx_build  # noqa: E402
from memlane.providers.embed.local import LocalEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parent
BACKENDS = (("numpy", "fp32"), ("onnx", "fp32"), ("onnx", "int8"))


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/work/shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--queries", type=int, default=200, help="questions timed one by one (default 200)")
    ap.add_argument("--quick", action="store_true", help="first conversation, 50 queries")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/embedders.json)")
    return ap.parse_args()


def label(backend: str, precision: str) -> str:
    return f"{backend} {precision}"


async def main() -> None:
    a = _parse_args()
    data = Path(a.data)
    if not data.exists():
        raise SystemExit(f"no LoCoMo data at {data}; pass --data PATH")
    convs = locomo.load(data)
    n_queries = a.queries
    if a.quick:
        convs, n_queries = convs[:1], min(n_queries, 50)
    turns = [t for c in convs for s in c.sessions for t in s]
    texts = [t.text for t in turns]
    questions = [q for c in convs for q, _, _ in c.questions]
    out_path = Path(a.out) if a.out else ROOT / "results" / "embedders.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    log(f"{len(convs)} conversations, {len(texts)} turns, {len(questions)} questions; load {load0}")

    rows: dict[str, dict[str, Any]] = {}
    single: dict[str, LocalEmbedder] = {}
    for backend, precision in BACKENDS:
        name = label(backend, precision)
        t = time.perf_counter()
        emb = LocalEmbedder(backend=backend, precision=precision, threads=1, blas_threads=1)
        construct_s = time.perf_counter() - t
        builds = onnx_build.build_count
        t = time.perf_counter()
        emb.embed_sync(["warm up"])
        first_s = time.perf_counter() - t
        single[name] = emb
        rows[name] = {
            "backend": backend,
            "precision": precision,
            "construct_s": round(construct_s, 3),
            "first_embed_s": round(first_s, 3),
            "built_onnx": onnx_build.build_count - builds,
        }
        log(f"{name}: constructed in {construct_s:.2f} s, first embed {first_s:.2f} s")

    # -- query latency: backends take turns question by question
    lat: dict[str, list[float]] = {n: [] for n in single}
    qvecs: dict[str, list[np.ndarray]] = {n: [] for n in single}
    for i, question in enumerate(questions):
        for name, emb in single.items():
            t = time.perf_counter()
            v = emb.embed_sync([question])
            if i < n_queries:
                lat[name].append((time.perf_counter() - t) * 1000)
            qvecs[name].append(v[0])
    for name in single:
        rows[name]["query_p50_ms"] = round(float(np.percentile(lat[name], 50)), 2)
        rows[name]["query_p95_ms"] = round(float(np.percentile(lat[name], 95)), 2)
        log(f"{name}: query p50 {rows[name]['query_p50_ms']} ms, p95 {rows[name]['query_p95_ms']} ms")

    # -- batch throughput (one call over every turn), 1 and 2 worker threads
    doc_vecs: dict[str, np.ndarray] = {}
    for threads in (1, 2):
        order = list(single) if threads == 1 else list(reversed(single))
        for name in order:
            backend, precision = rows[name]["backend"], rows[name]["precision"]
            emb = LocalEmbedder(backend=backend, precision=precision, threads=threads, blas_threads=1)
            emb.embed_sync(["warm up"])
            t = time.perf_counter()
            vecs = emb.embed_sync(texts)
            secs = time.perf_counter() - t
            emb.close()
            rows[name][f"batch_per_s_{threads}t"] = round(len(texts) / secs, 1)
            log(f"{name}: {len(texts)} turns in {secs:.1f} s with {threads} thread(s): {len(texts) / secs:.0f}/s")
            if threads == 1:
                doc_vecs[name] = vecs
    ref = doc_vecs[label("numpy", "fp32")]
    for name, vecs in doc_vecs.items():
        c = (vecs * ref).sum(axis=1)
        rows[name]["cos_vs_numpy_mean"] = round(float(c.mean()), 6)
        rows[name]["cos_vs_numpy_min"] = round(float(c.min()), 6)

    # -- dense recall per backend
    for name in single:
        offset = 0
        mats: dict[str, tuple[np.ndarray, list[str]]] = {}
        for c in convs:
            n = c.turns
            mats[c.sample_id] = (doc_vecs[name][offset : offset + n], [t.dia_id for s in c.sessions for t in s])
            offset += n
        q_iter = iter(qvecs[name])

        async def search(conv: str, question: str, k: int, q_iter: Any = q_iter, mats: Any = mats) -> list[str]:
            q = next(q_iter)  # questions come in the same order as they were embedded
            mat, ids = mats[conv]
            top = np.argsort(-(mat @ q))[:k]
            return [ids[i] for i in top]

        rep = await locomo.score(search, convs, f"dense {name}")
        for k, v in rep.recall.items():
            rows[name][f"dense_recall@{k}"] = round(v, 4)
        log(f"{name}: dense recall@10 {rep.recall.get(10, 0):.4f}")
    for emb in single.values():
        emb.close()

    result = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "load_before": [round(x, 2) for x in load0],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "turns": len(texts),
        "questions": len(questions),
        "queries_timed": n_queries,
        "command": "python bench/embedders.py" + (" --quick" if a.quick else ""),
        "backends": list(rows.values()),
    }
    out_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    log(f"wrote {out_path}")
    print_table(result)


def print_table(r: dict[str, Any]) -> None:
    print(
        f"\n{r['turns']} LoCoMo turns, {r['questions']} questions ({r['queries_timed']} timed one by one); "
        f"load {r['load_before']} -> {r['load_after']}\n"
    )
    print(
        "| backend | query p50 ms | query p95 ms | batch/s 1 thread | batch/s 2 threads "
        "| dense R@1 | dense R@5 | dense R@10 | cosine vs numpy (mean / min) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for b in r["backends"]:
        print(
            f"| {b['backend']} {b['precision']} | {b['query_p50_ms']} | {b['query_p95_ms']} "
            f"| {b['batch_per_s_1t']} | {b['batch_per_s_2t']} | {b['dense_recall@1']} | {b['dense_recall@5']} "
            f"| {b['dense_recall@10']} | {b['cos_vs_numpy_mean']:.4f} / {b['cos_vs_numpy_min']:.4f} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
