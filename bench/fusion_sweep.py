"""Sweep fusion settings on LoCoMo without re-embedding: capture once, fuse many times.

``capture`` ingests the dev split once into a SQLite file (or reuses one that
``memlane bench locomo --bench-db FILE`` wrote), then records for every question its keyword
list (the engine's own ``Searcher.keyword``: BM25 + author boost, 200 deep), its query vector,
and every memory's vector. ``sweep`` then runs the real :func:`memlane.retrieval.hybrid.fuse`
(and optionally Rocchio feedback on the query vector) over those lists for each
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


def run_config(
    convs: dict[str, Conv], cfg: RetrievalConfig, names: Iterable[str], rocchio: tuple[int, float] | None = None
) -> dict[str, float]:
    """R@1/5/10 of one configuration; ``rocchio=(k, beta)`` moves each query vector towards
    the mean vector of its top ``k`` keyword hits (weight ``beta``) before the vector search."""
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
                if rocchio:
                    top = [c.mat[pos[fid]] for fid, _ in q["kw"][: rocchio[0]] if fid in pos]
                    if top:
                        qv = qv + rocchio[1] * np.mean(top, axis=0)
                        qv = qv / np.linalg.norm(qv)
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


def table_row(
    label: str, convs: dict[str, Conv], cfg: RetrievalConfig, rocchio: tuple[int, float] | None = None
) -> str:
    cells = []
    for names in (TUNE, CHECK, tuple(convs)):
        r = run_config(convs, cfg, names, rocchio)
        cells.append(" / ".join(f"{r[f'r@{k}']:.3f}" for k in KS))
    return f"| {label} | " + " | ".join(cells) + " |"


RRF: dict[str, Any] = {"fusion": "rrf", "vector_weight": 0.1, "vector_margin": None}
BLEND: dict[str, Any] = {"fusion": "blend"}
#: The levers measured for docs/retrieval.md (label -> RetrievalConfig kwargs, Rocchio or None).
LEVERS: dict[str, tuple[dict[str, Any], tuple[int, float] | None]] = {
    "keyword only": ({"vector_weight": 0}, None),
    "vectors only": ({"keyword_weight": 0}, None),
    "old default: RRF, vector weight 0.1, depth 20, hard cut-off 0.3": (RRF, None),
    "RRF, vector weight 0.3": ({**RRF, "vector_weight": 0.3}, None),
    "score fusion (kw/max + 0.2 cos), depth 50": ({"fusion": "score", "vector_weight": 0.2, "depth": 50}, None),
    "blend, keyword /max, calibrated cos, w 0.5": ({**BLEND, "keyword_norm": "max", "vector_weight": 0.5}, None),
    "blend, keyword /max, raw cos, w 0.5": (
        {**BLEND, "keyword_norm": "max", "vector_norm": "raw", "vector_weight": 0.5},
        None,
    ),
    "blend, keyword z-score, cos z-score, w 0.3": (
        {**BLEND, "keyword_norm": "zscore", "vector_norm": "zscore", "vector_weight": 0.3},
        None,
    ),
    "blend, keyword saturate(20), calibrated cos, w 0.1": (
        {**BLEND, "keyword_norm": "saturate", "vector_weight": 0.1},
        None,
    ),
    "blend, min-max, min-max cos, w 0.2": ({**BLEND, "vector_norm": "minmax", "vector_weight": 0.2}, None),
    "blend, min-max, calibrated cos, w 0.5": ({**BLEND, "vector_weight": 0.5}, None),
    "blend, min-max, calibrated cos, w 2.0": ({**BLEND, "vector_weight": 2.0}, None),
    "blend, min-max, calibrated cos, w 1.0, depth 10": ({**BLEND, "depth": 10}, None),
    "blend, min-max, calibrated cos, w 1.0, depth 30": ({**BLEND, "depth": 30}, None),
    "blend, min-max, calibrated cos (floor 0.25), w 1.0": ({**BLEND, "vector_floor": 0.25}, None),
    "blend, hard cut-off 0.3 (no soft floor)": ({**BLEND, "vector_margin": None}, None),
    "blend, no cosine floor at all": ({**BLEND, "min_vector_score": None}, None),
    "blend + Rocchio (top 3 keyword hits, beta 1.0)": (BLEND, (3, 1.0)),
    "blend + Rocchio (top 5 keyword hits, beta 0.5)": (BLEND, (5, 0.5)),
    "issue 11 default: blend, min-max, calibrated cos (floor 0.3), w 1.0, depth 20, soft floor 0.05": (
        {"vector_floor": 0.3, "vector_margin": 0.05},
        None,
    ),
    "default (issue 17): evidence only, min-max onto [0.01, 1], calibrated cos (floor 0.28), soft floor 0.02": (
        {},
        None,
    ),
}


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
    s.add_argument("--configs", help="JSON file {label: RetrievalConfig kwargs} (default: the levers table)")
    a = p.parse_args()
    if a.cmd == "capture":
        asyncio.run(capture(a.data, a.db, a.out, a.embedder))
        return
    with open(a.capture, "rb") as f:
        convs = pickle.load(f)
    levers = LEVERS
    if a.configs:
        levers = {k: (v, None) for k, v in json.loads(Path(a.configs).read_text()).items()}
    print("| configuration | tune R@1 / R@5 / R@10 | check R@1 / R@5 / R@10 | all R@1 / R@5 / R@10 |")
    print("|---|---|---|---|")
    for label, (kwargs, rocchio) in levers.items():
        print(table_row(label, convs, RetrievalConfig(**kwargs), rocchio), flush=True)


if __name__ == "__main__":
    main()
