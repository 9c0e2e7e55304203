"""Hybrid retrieval settings and the pure fusion step (keyword + vector lists -> hits)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from memlane.retrieval.fusion import Fused, rrf
from memlane.stores.base import Candidate

#: At most this many queries run per search (Eden's ``search_facts`` takes up to 3).
MAX_QUERIES = 3


class RetrievalConfig(BaseModel):
    """How search fuses keyword and vector candidates.

    The defaults are the ones measured best on the LoCoMo dev split (docs/benchmarks.md):
    keyword lists dominate, vectors add a down-weighted vote, fusion looks at the top
    ``depth`` of each list. Score thresholds are off by default because they cost recall
    there; :meth:`eden` gives Eden's production thresholds.
    """

    model_config = ConfigDict(extra="forbid")

    rrf_k: int = 60
    """The RRF constant k."""
    keyword_weight: float = 1.0
    """Weight of keyword lists in RRF."""
    vector_weight: float = 0.3
    """Weight of vector lists in RRF (0 disables vector search)."""
    depth: int = 20
    """How many candidates of each list take part in fusion (at least ``top_k``)."""
    min_vector_score: float | None = None
    """Drop vector candidates below this cosine similarity."""
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
    """Apply thresholds and weighted RRF over every query's keyword and vector list."""
    depth = max(config.depth, top_k)
    lists: dict[str, list[tuple[str, float]]] = {}
    weights: dict[str, float] = {}
    for i, kw in enumerate(keyword_lists):
        kept = [
            (c.fact_id, c.score)
            for c in kw
            if config.min_keyword_score is None or c.score >= config.min_keyword_score
        ]
        lists[f"keyword{i}"] = kept
        weights[f"keyword{i}"] = config.keyword_weight
    for i, vec in enumerate(vector_lists):
        kept = [
            (c.fact_id, c.score)
            for c in vec
            if config.min_vector_score is None or c.score >= config.min_vector_score
        ]
        lists[f"vector{i}"] = kept
        weights[f"vector{i}"] = config.vector_weight
    fused = rrf(lists, weights=weights, k=config.rrf_k, depth=depth)
    if config.min_rrf_score is not None:
        fused = [f for f in fused if f.score >= config.min_rrf_score]
    return fused[:top_k]
