"""memlane hybrid search vs a plain numpy brute-force baseline, side by side in one run.

Run::

    .venv/bin/python bench/baseline.py            # 6 LoCoMo dev conversations, 885 questions
    .venv/bin/python bench/baseline.py --quick    # first conversation only (< 1 min)

Data: ``/work/shared/bench/locomo/locomo_dev.json`` or ``--data PATH`` (CC BY-NC: read only,
never copied into the repository).

Both sides get the same memories (every LoCoMo turn, ``"Speaker: text"``, stored with
``memlane.evaluation.locomo.ingest``: one user per conversation) and the same queries (every
category 1-4 question with evidence, searched in its own conversation), and use the SAME
embedder instance (default: local all-MiniLM-L6-v2):

* memlane: ``AsyncMemory.search(question, user_id=conversation, top_k=10)`` (keyword +
  vector, weighted RRF), scored by ``memlane.evaluation.locomo.evaluate``.
* baseline: per conversation, every turn vector in one float32 matrix (embedded with the
  same embedder); per question ``q = embed_batch([question])``, ``scores = matrix @ q``,
  ``argsort(-scores)[:10]``.

Metric (LoCoMo, as ``shared/bench/locomo/README.md``): a result is a hit when its dia_id is in
the question's evidence list; recall@k = mean |evidence ∩ top-k| / |evidence|, hit@k = mean
1[evidence ∩ top-k not empty]. Latency p50/p95 per question includes the query embedding on
both sides. Both are warmed up first (one search per conversation, not timed). For context
memlane is also run keyword-only (``vector_weight=0``) and vector-only (``keyword_weight=0``).

Writes ``bench/results/baseline.json`` and prints a markdown table. Threads: see ``THREADS``.
"""

from __future__ import annotations

import argparse
import os

# --------------------------------------------------------------------------------- threads
#: BLAS/OpenMP threads, fixed before numpy is imported. Measured on the shared 2-core machine:
#: back-to-back on a quiet machine 2 threads were 10-25% faster here (memlane p50 15.7 vs
#: 17.6 ms, baseline 10.0 vs 13.0 ms), but with 2, every BLAS call after an idle gap pays for
#: waking the second OpenBLAS thread (9.8 ms for a 5,000 x 384 matrix-vector product after a
#: 2 ms pause, vs 0.26 ms), and while another process holds a core a single-query embedding
#: went from p50 9-16 ms (1 thread) to p50 42 ms / p95 336 ms (2 threads). The machine is
#: shared, so 1 thread: slightly slower at best, never 3-30x slower.
THREADS = 1


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="first conversation only")
    ap.add_argument("--threads", type=int, default=THREADS, help=f"BLAS threads (default {THREADS})")
    ap.add_argument("--data", default="/work/shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--embedder", default="local", help="embedder spec (default local MiniLM)")
    ap.add_argument("--no-extra", action="store_true", help="skip the keyword-only / vector-only rows")
    ap.add_argument("--workdir", default="/tmp/memlane-bench")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/baseline.json)")
    return ap.parse_args()


ARGS = _parse_args()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import asyncio  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import SharedEmbedder, log, remove_db  # noqa: E402

from memlane import AsyncMemory  # noqa: E402
from memlane.evaluation import locomo  # noqa: E402
from memlane.providers.embed.base import Embedder  # noqa: E402
from memlane.registry import make_embedder  # noqa: E402
from memlane.retrieval.hybrid import RetrievalConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent


class BruteForce:
    """One float32 matrix of turn vectors per conversation; exact top-k by ``matrix @ q``."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.mats: dict[str, np.ndarray] = {}
        self.ids: dict[str, list[str]] = {}

    async def index(self, convs: list[locomo.Conversation]) -> float:
        t = time.perf_counter()
        for c in convs:
            turns = [x for s in c.sessions for x in s]
            self.mats[c.sample_id] = np.ascontiguousarray(
                await self.embedder.embed_batch([x.text for x in turns]), dtype=np.float32
            )
            self.ids[c.sample_id] = [x.dia_id for x in turns]
        return time.perf_counter() - t

    async def search(self, conv: str, question: str, k: int) -> list[str]:
        q = (await self.embedder.embed_batch([question]))[0]
        scores = self.mats[conv] @ q
        top = np.argsort(-scores)[:k]
        ids = self.ids[conv]
        return [ids[i] for i in top]


async def main() -> None:
    a = ARGS
    data = Path(a.data)
    if not data.exists():
        raise SystemExit(f"no LoCoMo data at {data}; pass --data PATH")
    convs = locomo.load(data)
    if a.quick:
        convs = convs[:1]
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out_path = Path(a.out) if a.out else ROOT / "results" / "baseline.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    started = time.perf_counter()
    n_q = sum(len(c.questions) for c in convs)

    embedder = make_embedder(a.embedder)
    if embedder is None:
        raise SystemExit("the baseline needs an embedder")
    await embedder.embed_batch(["warm up"])
    log(f"embedder {embedder.name}; BLAS threads {a.threads}; {len(convs)} conversations, {n_q} questions")

    db = work / "baseline.db"
    remove_db(db)
    mem = AsyncMemory(db, embedder=SharedEmbedder(embedder), sessions="null")
    n_turns, ingest_s = await locomo.ingest(mem, convs)
    log(f"memlane ingest: {n_turns} turns in {ingest_s:.1f} s")
    bf = BruteForce(embedder)
    index_s = await bf.index(convs)
    log(f"baseline index: {index_s:.1f} s")

    # warm-up: the first search per conversation loads memlane's vector cache
    for c in convs:
        if c.questions:
            await mem.search(c.questions[0][0], user_id=c.sample_id)
            await bf.search(c.sample_id, c.questions[0][0], 10)

    reports: list[locomo.Report] = []
    log("baseline: searching")
    base = await locomo.score(bf.search, convs, "numpy brute force")
    log("memlane hybrid: searching")
    mem._query_cache.clear()  # both sides embed every question for real
    hyb = await locomo.evaluate(mem, convs, "memlane hybrid")
    reports += [hyb, base]
    if not a.no_extra:
        cfg = mem.retrieval
        mem.retrieval = RetrievalConfig(**{**cfg.model_dump(), "vector_weight": 0.0})
        log("memlane keyword-only: searching")
        reports.append(await locomo.evaluate(mem, convs, "memlane keyword-only (vector_weight=0)"))
        mem.retrieval = RetrievalConfig(**{**cfg.model_dump(), "keyword_weight": 0.0})
        mem._query_cache.clear()
        log("memlane vector-only: searching")
        reports.append(await locomo.evaluate(mem, convs, "memlane vector-only (keyword_weight=0)"))
        mem.retrieval = cfg
    await mem.close()
    await embedder.aclose()
    remove_db(db)

    ratio = {
        "latency_p50_memlane_over_baseline": round(hyb.p50 / base.p50, 3) if base.p50 else None,
        "latency_p95_memlane_over_baseline": round(hyb.p95 / base.p95, 3) if base.p95 else None,
        "recall@10_memlane_over_baseline": round(hyb.recall[10] / base.recall[10], 3) if base.recall.get(10) else None,
        "recall@10_difference": round(hyb.recall[10] - base.recall[10], 4),
    }
    report = {
        "benchmark": "baseline",
        "mode": "quick" if a.quick else "full",
        "when": datetime.now().isoformat(timespec="seconds"),
        "data": {"conversations": [c.sample_id for c in convs], "turns": n_turns, "questions": n_q},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
        },
        "threads": {
            "OPENBLAS_NUM_THREADS": os.environ["OPENBLAS_NUM_THREADS"],
            "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"],
            "embedder_threads": getattr(embedder, "threads", None),
        },
        "embedder": embedder.name,
        "memlane_ingest_s": round(ingest_s, 2),
        "baseline_index_s": round(index_s, 2),
        "retrieval_config": mem.retrieval.model_dump(),
        "reports": [r.as_dict() for r in reports],
        "ratio": ratio,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    out_path.write_text(json.dumps(report, indent=2))
    print_table(report)
    log(f"wrote {out_path}")


def print_table(r: dict[str, Any]) -> None:
    d = r["data"]
    print(
        f"## memlane vs numpy brute force ({r['mode']}): LoCoMo dev, {len(d['conversations'])} conversations, "
        f"{d['turns']:,} turns, {d['questions']} questions; embedder `{r['embedder']}` (one shared instance)\n"
    )
    print(
        f"- threads: OPENBLAS_NUM_THREADS=OMP_NUM_THREADS={r['threads']['OPENBLAS_NUM_THREADS']} (fixed in the "
        f"script before numpy is imported); {r['machine']['cpus']} CPUs, load avg at start "
        f"{r['machine']['loadavg_start'][0]:.2f}"
    )
    print(
        "- latency per question includes the query embedding on both sides; after one warm-up search per conversation\n"
    )
    print("| mode | recall@1 | recall@5 | recall@10 | hit@1 | hit@5 | hit@10 | p50 ms | p95 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x in r["reports"]:
        print(
            f"| {x['mode']} | {x['recall@1']:.3f} | {x['recall@5']:.3f} | **{x['recall@10']:.3f}** | "
            f"{x['hit@1']:.3f} | {x['hit@5']:.3f} | {x['hit@10']:.3f} | {x['search_p50_ms']:.2f} | "
            f"{x['search_p95_ms']:.2f} |"
        )
    ra = r["ratio"]
    print(
        f"\nmemlane hybrid / baseline: latency p50 x{ra['latency_p50_memlane_over_baseline']}, p95 "
        f"x{ra['latency_p95_memlane_over_baseline']}; recall@10 x{ra['recall@10_memlane_over_baseline']} "
        f"({ra['recall@10_difference']:+.4f})."
    )


if __name__ == "__main__":
    asyncio.run(main())
