"""Documents with windowed vectors: is a sentence deep inside a long document found? (issue 22)

    .venv/bin/python bench/documents_windows.py [--data bench/data/longmemeval_long_turns.json]

Every long turn (over 1,000 characters) of each question's haystack in the built LongMemEval-format
set is stored as a document (``add_document``: one ~1,000-token fragment each), one user per
question; the question is searched (``top_k=10``, default hybrid) and the evidence document is
looked for among the hits' ``metadata["document_id"]``. Three configurations on fresh
in-memory stores, one after the other: one vector per fragment (``embed_windows=False``, as
before issue 22), windows (the default), windows + ``window_bonus=0.15``. Prints hit@1/5/10 per
configuration (the set has 12 questions: read the figures as counts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from memlane import AsyncMemory
from memlane.retrieval.hybrid import RetrievalConfig

HERE = Path(__file__).resolve().parent
LONG = 1_000


async def run(data: list[dict[str, Any]], retrieval: RetrievalConfig) -> dict[str, float]:
    hits = {1: 0, 5: 0, 10: 0}
    async with AsyncMemory(":memory:", embedder="local", retrieval=retrieval) as m:
        for qi, q in enumerate(data):
            user = f"q{qi}"
            target = None
            for session in q["haystack_sessions"]:
                for turn in session:
                    if len(turn["content"]) <= LONG:
                        continue
                    doc = await m.add_document(turn["content"], user_id=user)
                    if turn.get("has_answer"):
                        target = doc.id
            assert target is not None, f"question {qi} has no long evidence turn"
            res = await m.search(str(q["question"]), user_id=user, top_k=10)
            ranked = [h.fact.metadata.get("document_id") for h in res.hits]
            for k in hits:
                hits[k] += target in ranked[:k]
    return {f"hit@{k}": v / len(data) for k, v in hits.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(HERE / "data" / "longmemeval_long_turns.json"))
    a = ap.parse_args()
    data = json.loads(Path(a.data).read_text())
    configs = {
        "one vector per fragment (embed_windows off)": RetrievalConfig(embed_windows=False),
        "windows (default)": RetrievalConfig(),
        "windows + window_bonus 0.15": RetrievalConfig(window_bonus=0.15),
    }
    print(f"{len(data)} questions; load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print("| configuration | hit@1 | hit@5 | hit@10 | seconds |\n|---|---:|---:|---:|---:|")
    for name, cfg in configs.items():
        t = time.perf_counter()
        r = asyncio.run(run(data, cfg))
        print(f"| {name} | {r['hit@1']:.3f} | {r['hit@5']:.3f} | {r['hit@10']:.3f} | {time.perf_counter() - t:.0f} |")


if __name__ == "__main__":
    main()
