"""Weighted Reciprocal Rank Fusion (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: The RRF constant k (60, as in the original paper); ``RetrievalConfig.rrf_k`` defaults to it.
RRF_K = 60


@dataclass
class Fused:
    """One fused result with its provenance in each input list."""

    key: str
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    """1-based rank in each named input list it appeared in."""
    raw: dict[str, float] = field(default_factory=dict)
    """The list's own score for this key."""


def rrf(
    lists: Mapping[str, Sequence[tuple[str, float]]],
    *,
    weights: dict[str, float] | None = None,
    k: int = RRF_K,
    depth: int | None = None,
) -> list[Fused]:
    """Fuse ranked lists: ``score(d) = sum_l w_l / (k + rank_l(d))``.

    Args:
        lists: name -> ``[(key, raw_score), ...]`` best first.
        weights: per-list weight (default 1.0).
        k: the RRF constant (60, as in the original paper).
        depth: only the top ``depth`` of each list take part (None: all).

    Returns:
        Fused results, best first; ties broken by best single rank, then key.
    """
    weights = weights or {}
    out: dict[str, Fused] = {}
    for name, items in lists.items():
        w = weights.get(name, 1.0)
        if w <= 0:
            continue
        for rank, (key, raw) in enumerate(items[:depth] if depth else items, start=1):
            f = out.get(key)
            if f is None:
                f = out[key] = Fused(key, 0.0)
            if name in f.ranks:  # duplicate key within one list: keep the best rank
                continue
            f.score += w / (k + rank)
            f.ranks[name] = rank
            f.raw[name] = raw
    return sorted(out.values(), key=lambda f: (-f.score, min(f.ranks.values()), f.key))
