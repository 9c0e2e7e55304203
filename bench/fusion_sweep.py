"""Sweep fusion settings on LoCoMo without re-embedding: capture once, fuse many times.

``capture`` ingests the dev split once into a SQLite file (or reuses one that
``memlane bench locomo --bench-db FILE`` wrote), then records for every question its keyword
list (the engine's own ``Searcher.keyword``: BM25 + author boost, 200 deep), its query vector,
and every memory's vector. ``sweep`` then runs the real :func:`memlane.retrieval.hybrid.fuse`
(plus the vector-side Rocchio feedback of ``RetrievalConfig``) over those lists for each
configuration and prints R@1/5/10 on the tune split (conv-26/30/41), the check split
(conv-42/43/44) and all six. The final figures in docs/retrieval.md come from the real engine
(``memlane bench locomo``); this script is for ranking candidates quickly.

    OMP_NUM_THREADS=1 python bench/fusion_sweep.py capture --data ../shared/bench/locomo/locomo_dev.json \
        --db /tmp/locomo.db --out /tmp/locomo_capture.pkl [--embedder local]
    python bench/fusion_sweep.py sweep --capture /tmp/locomo_capture.pkl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import sqlite3
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memlane.evaluation.locomo import CHECK, KS, TUNE, ingest, load
from memlane.memory import AsyncMemory
from memlane.models import Candidate
from memlane.retrieval import hybrid
from memlane.retrieval.hybrid import RetrievalConfig, fuse

DEEP = 200


@dataclass
class Conv:
    ids: list[str]
    dia: list[str]
    mat: np.ndarray
    questions: list[dict[str, Any]] = field(default_factory=list)


async def capture(data: str, db: str, out: str, embedder: str) -> None:
    convs = load(data)
    fresh = not Path(db).exists()
    async with AsyncMemory(db, embedder=embedder, sessions="null") as m:
        if fresh:
            n, sec = await ingest(m, convs)
            print(f"ingested {n} turns in {sec:.1f} s", file=sys.stderr)
        m.retrieval = RetrievalConfig(depth=DEEP, vector_weight=1.0, min_vector_score=None)
        res: dict[str, Conv] = {}
        con = sqlite3.connect(db)
        for conv in convs:
            rows = con.execute(
                "SELECT id, metadata, embedding FROM facts WHERE user_id=? AND invalid_at IS NULL ORDER BY rowid",
                (conv.sample_id,),
            ).fetchall()
            dim = len(rows[0][2]) // 4
            mat = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), dim)
            c = Conv([r[0] for r in rows], [json.loads(r[1]).get("dia_id") for r in rows], mat.copy())
            for question, evidence, cat in conv.questions:
                r = await m.search(question, user_id=conv.sample_id, top_k=10, debug=True)
                assert r.debug is not None
                c.questions.append(
                    {
                        "q": question,
                        "ev": evidence,
                        "cat": cat,
                        "kw": r.debug["keyword"][0],
                        "qvec": np.asarray(m._query_cache[question], dtype=np.float32),
                    }
                )
            res[conv.sample_id] = c
            print(f"{conv.sample_id}: {len(rows)} memories, {len(c.questions)} questions", file=sys.stderr)
    with open(out, "wb") as f:
        pickle.dump(res, f)


def run_config(convs: dict[str, Conv], cfg: RetrievalConfig, names: Iterable[str]) -> dict[str, float]:
    sums = {k: 0.0 for k in KS}
    n = 0
    for name in names:
        c = convs[name]
        pos = {fid: i for i, fid in enumerate(c.ids)}
        for q in c.questions:
            depth = max(cfg.depth, 10)
            kw = [Candidate(fid, s) for fid, s in q["kw"][:depth]]
            vecs: list[list[Candidate]] = []
            if cfg.vector_weight > 0:
                qv = q["qvec"]
                if cfg.feedback_depth > 0 and cfg.feedback_weight > 0:
                    top = [c.mat[pos[fid]] for fid, _ in q["kw"][: cfg.feedback_depth] if fid in pos]
                    qv = hybrid.rocchio(qv, np.asarray(top), cfg.feedback_weight)
                cos = c.mat @ qv
                order = np.argsort(-cos)[:depth]
                vecs = [[Candidate(c.ids[i], float(cos[i])) for i in order]]
            fused = fuse([kw], vecs, cfg, top_k=10)
            got = [c.dia[pos[f.key]] for f in fused]
            ev = set(q["ev"])
            for k in KS:
                sums[k] += len(ev.intersection(got[:k])) / len(ev)
            n += 1
    return {f"r@{k}": sums[k] / n for k in KS}


def table_row(label: str, convs: dict[str, Conv], cfg: RetrievalConfig) -> str:
    cells = []
    for names in (TUNE, CHECK, tuple(convs)):
        r = run_config(convs, cfg, names)
        cells.append(" / ".join(f"{r[f'r@{k}']:.3f}" for k in KS))
    return f"| {label} | " + " | ".join(cells) + " |"


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--data", required=True)
    c.add_argument("--db", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--embedder", default="local")
    s = sub.add_parser("sweep")
    s.add_argument("--capture", required=True)
    s.add_argument("--configs", help="JSON file: {label: RetrievalConfig kwargs}")
    a = p.parse_args()
    if a.cmd == "capture":
        asyncio.run(capture(a.data, a.db, a.out, a.embedder))
        return
    with open(a.capture, "rb") as f:
        convs = pickle.load(f)
    configs: dict[str, dict[str, Any]] = (
        json.loads(Path(a.configs).read_text()) if a.configs else {"keyword only": {"vector_weight": 0}, "default": {}}
    )
    print("| configuration | tune R@1 / R@5 / R@10 | check R@1 / R@5 / R@10 | all R@1 / R@5 / R@10 |")
    print("|---|---|---|---|")
    for label, kwargs in configs.items():
        print(table_row(label, convs, RetrievalConfig(**kwargs)), flush=True)


if __name__ == "__main__":
    main()
