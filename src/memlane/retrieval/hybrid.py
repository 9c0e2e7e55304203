"""Hybrid retrieval settings and the pure fusion step (keyword + vector lists -> hits)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from memlane.models import Candidate
from memlane.providers.embed.base import Matrix
from memlane.retrieval.fusion import RRF_K, Fused, rrf

#: At most this many queries run per search (Eden's ``search_facts`` takes up to 3).
MAX_QUERIES = 3


class RetrievalConfig(BaseModel):
    """How search fuses keyword and vector candidates.

    The defaults are the ones measured best on the LoCoMo dev split (docs/benchmarks.md):
    keyword lists dominate, vectors add a down-weighted vote, fusion looks at the top
    ``depth`` of each list; vector candidates under cosine 0.3 are dropped. :meth:`eden`
    gives Eden's production thresholds.
    """

    model_config = ConfigDict(extra="forbid")

    fusion: Literal["rrf", "score", "blend"] = "rrf"
    """``rrf``: weighted Reciprocal Rank Fusion. ``score``: keyword score divided by the best
    keyword score, plus ``vector_weight`` times the cosine (a keyword candidate missing from
    the vector list gets that list's lowest cosine)."""
    rrf_k: int = RRF_K
    """The RRF constant k."""
    keyword_weight: float = 1.0
    """Weight of keyword lists in RRF."""
    vector_weight: float = 0.1
    """Weight of vector lists (0 disables vector search)."""
    depth: int = 20
    """How many candidates of each list take part in fusion (at least ``top_k``)."""
    min_vector_score: float | None = 0.3
    """Drop vector candidates below this cosine similarity. 0.3 keeps unrelated memories out
    of results when few keywords match (MiniLM cosines of unrelated sentences sit around
    0.0-0.25); it cost nothing on LoCoMo. Eden's 0.65 suits larger OpenAI embeddings."""
    min_keyword_score: float | None = None
    """Drop keyword candidates below this (negated BM25) score."""
    min_rrf_score: float | None = None
    """Drop fused results below this RRF score."""
    author_boost: float = 2.0
    """Keyword score multiplier for memories by an author the query names."""
    keyword_norm: Literal["max", "minmax", "zscore", "saturate"] = "max"
    """``fusion="blend"``: how a keyword list's BM25 scores become 0-1 values. ``max``: score /
    best score; ``minmax``: (score - worst) / (best - worst); ``zscore``: standard scores of the
    list; ``saturate``: score / (score + ``keyword_saturation``), the same scale for every query,
    so a list whose best match is weak stays weak."""
    keyword_saturation: float = 5.0
    """``keyword_norm="saturate"``: the BM25 score that maps to 0.5."""
    vector_norm: Literal["raw", "calibrated", "minmax", "zscore"] = "calibrated"
    """``fusion="blend"``: how cosines become values. ``calibrated``: (cos - ``vector_floor``) /
    (1 - ``vector_floor``), 0 at or under the floor; ``raw``: the cosine; ``minmax`` and
    ``zscore`` as for keywords."""
    vector_floor: float = 0.2
    """``vector_norm="calibrated"``: the cosine that counts as no similarity."""
    vector_margin: float | None = None
    """Soft floor: a vector candidate under ``min_vector_score`` is kept when its cosine is within
    this margin of the query's best cosine (and above ``vector_floor``). None: hard cut-off."""
    feedback_depth: int = 0
    """Rocchio feedback: the query vector moves towards the mean vector of this many top keyword
    hits before vector search (0: off)."""
    feedback_weight: float = 0.0
    """Rocchio feedback: weight of that mean against the query vector (1.0)."""

    @classmethod
    def eden(cls) -> RetrievalConfig:
        """Eden memory v2's production thresholds (semantic 0.65, RRF 0.015)."""
        return cls(min_vector_score=0.65, min_keyword_score=1.5, min_rrf_score=0.015)


def fuse(
    keyword_lists: Sequence[list[Candidate]],
    vector_lists: Sequence[list[Candidate]],
    config: RetrievalConfig,
    top_k: int,
) -> list[Fused]:
    """Apply thresholds, then fuse every query's keyword and vector list."""
    depth = max(config.depth, top_k)
    lists: dict[str, list[tuple[str, float]]] = {}
    weights: dict[str, float] = {}
    for i, kw in enumerate(keyword_lists):
        kept = [
            (c.fact_id, c.score) for c in kw if config.min_keyword_score is None or c.score >= config.min_keyword_score
        ]
        lists[f"keyword{i}"] = kept
        weights[f"keyword{i}"] = config.keyword_weight
    for i, vec in enumerate(vector_lists):
        lists[f"vector{i}"] = keep_vectors([(c.fact_id, c.score) for c in vec], config)
        weights[f"vector{i}"] = config.vector_weight
    if config.fusion == "score":
        fused = score_fusion(lists, weights, depth=depth)
    elif config.fusion == "blend":
        fused = blend_fusion(lists, weights, config, depth=depth)
    else:
        fused = rrf(lists, weights=weights, k=config.rrf_k, depth=depth)
    if config.min_rrf_score is not None:
        fused = [f for f in fused if f.score >= config.min_rrf_score]
    return fused[:top_k]


def keep_vectors(vec: list[tuple[str, float]], config: RetrievalConfig) -> list[tuple[str, float]]:
    """The vector candidates that pass ``min_vector_score``, or the soft floor: within
    ``vector_margin`` of the best cosine and above ``vector_floor``."""
    floor = config.min_vector_score
    if floor is None or not vec:
        return vec
    soft = float("inf")
    if config.vector_margin is not None:
        soft = max(max(s for _, s in vec) - config.vector_margin, config.vector_floor)
    return [(k, s) for k, s in vec if s >= floor or s >= soft]


def _normalise(values: list[float], how: str, *, saturation: float = 1.0, floor: float = 0.0) -> list[float]:
    if not values:
        return []
    if how == "max":
        top = max(values)
        return [v / top if top > 0 else 0.0 for v in values]
    if how == "saturate":
        return [max(v, 0.0) / (max(v, 0.0) + saturation) for v in values]
    if how == "calibrated":
        return [max(v - floor, 0.0) / (1.0 - floor) for v in values]
    if how == "minmax":
        lo, hi = min(values), max(values)
        return [(v - lo) / (hi - lo) if hi > lo else 1.0 for v in values]
    if how == "zscore":
        n = len(values)
        mean = sum(values) / n
        sd = (sum((v - mean) ** 2 for v in values) / n) ** 0.5
        return [(v - mean) / sd if sd > 0 else 0.0 for v in values]
    return list(values)  # raw


def blend_fusion(
    lists: dict[str, list[tuple[str, float]]], weights: dict[str, float], config: RetrievalConfig, *, depth: int
) -> list[Fused]:
    """Normalised score fusion: per query, ``keyword_weight * norm(bm25) + vector_weight *
    norm(cosine)`` (``keyword_norm``, ``vector_norm``); a candidate missing from the vector list
    gets that list's lowest value, one missing from the keyword list gets 0; queries combine by max."""
    best: dict[str, Fused] = {}
    queries = {name.removeprefix("keyword").removeprefix("vector") for name in lists}
    for q in queries:
        kw = lists.get(f"keyword{q}", [])[:depth]
        vec = lists.get(f"vector{q}", [])[:depth]
        kwn = dict(zip([k for k, _ in kw], _normalise([s for _, s in kw], config.keyword_norm,
                                                      saturation=config.keyword_saturation), strict=True))  # fmt: skip
        vn = dict(zip([k for k, _ in vec], _normalise([s for _, s in vec], config.vector_norm,
                                                      floor=config.vector_floor), strict=True))  # fmt: skip
        kmiss = min(0.0, *kwn.values()) if kwn else 0.0
        vmiss = min(vn.values()) if vn else 0.0
        wk = weights.get(f"keyword{q}", 0.0)
        wv = weights.get(f"vector{q}", 0.0)
        krank = {k: r for r, (k, _) in enumerate(kw, start=1)}
        vrank = {k: r for r, (k, _) in enumerate(vec, start=1)}
        kraw, vraw = dict(kw), dict(vec)
        for key in krank.keys() | vrank.keys():
            f = Fused(key, wk * kwn.get(key, kmiss) + wv * vn.get(key, vmiss))
            if key in krank:
                f.raw["keyword"], f.ranks["keyword"] = kraw[key], krank[key]
            if key in vrank:
                f.raw["vector"], f.ranks["vector"] = vraw[key], vrank[key]
            if key not in best or f.score > best[key].score:
                best[key] = f
    return sorted(best.values(), key=lambda f: (-f.score, min(f.ranks.values()), f.key))


def rocchio(query: Matrix, top: Matrix, weight: float) -> Matrix:
    """Rocchio pseudo-relevance feedback: ``query + weight * mean(top)``, unit length."""
    if len(top) == 0 or weight <= 0:
        return query
    v = np.asarray(query, dtype=np.float32) + weight * np.asarray(top, dtype=np.float32).mean(axis=0)
    n = float(np.linalg.norm(v))
    return (v / n).astype(np.float32) if n > 0 else query


def score_fusion(lists: dict[str, list[tuple[str, float]]], weights: dict[str, float], *, depth: int) -> list[Fused]:
    """Score-level fusion: per query, ``kw / max(kw) + w * cosine``; queries combine by max."""
    best: dict[str, Fused] = {}
    queries = {name.removeprefix("keyword").removeprefix("vector") for name in lists}
    for q in queries:
        kw = lists.get(f"keyword{q}", [])[:depth]
        vec = lists.get(f"vector{q}", [])[:depth]
        top = kw[0][1] if kw and kw[0][1] > 0 else 1.0
        floor = vec[-1][1] if vec else 0.0
        cos = dict(vec)
        w = weights.get(f"vector{q}", 0.0)
        for key in {k for k, _ in kw} | set(cos):
            f = Fused(key, 0.0)
            ks = dict(kw).get(key)
            if ks is not None:
                f.raw["keyword"], f.ranks["keyword"] = ks, 1 + [k for k, _ in kw].index(key)
            if key in cos:
                f.raw["vector"], f.ranks["vector"] = cos[key], 1 + [k for k, _ in vec].index(key)
            f.score = (ks or 0.0) / top + w * cos.get(key, floor)
            if key not in best or f.score > best[key].score:
                best[key] = f
    return sorted(best.values(), key=lambda f: (-f.score, f.key))
