"""Hybrid retrieval settings and the pure fusion step (keyword + vector lists -> hits)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from memlane.models import Candidate
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

    fusion: Literal["rrf", "score"] = "rrf"
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
        kept = [
            (c.fact_id, c.score) for c in vec if config.min_vector_score is None or c.score >= config.min_vector_score
        ]
        lists[f"vector{i}"] = kept
        weights[f"vector{i}"] = config.vector_weight
    if config.fusion == "score":
        fused = score_fusion(lists, weights, depth=depth)
    else:
        fused = rrf(lists, weights=weights, k=config.rrf_k, depth=depth)
    if config.min_rrf_score is not None:
        fused = [f for f in fused if f.score >= config.min_rrf_score]
    return fused[:top_k]


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
