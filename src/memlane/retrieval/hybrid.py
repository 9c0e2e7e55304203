"""Hybrid retrieval settings and the pure fusion step (keyword + vector lists -> hits)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from memlane.models import Candidate
from memlane.retrieval.fusion import RRF_K, Fused, rrf

#: ``RetrievalConfig.feedback_docs`` when keyword feedback is on (``memory.keyword_feedback``).
FEEDBACK_DOCS = 20
#: At most this many queries run per search (Eden's ``search_facts`` takes up to 3).
MAX_QUERIES = 3
#: ``keyword_norm="minmax"`` (and ``vector_norm="minmax"``) maps a list to
#: ``[MINMAX_LIFT, 1]`` (0.01), not ``[0, 1]``: the weakest keyword match of a list is still a match
#: (its score must not read 0.0, which means "no evidence"), and counts a little more than a
#: memory with no keyword match at all.
MINMAX_LIFT = 0.01


class RetrievalConfig(BaseModel):
    """How search fuses keyword and vector candidates.

    The defaults are the ones measured best on the LoCoMo dev split (tuned on conv-26/30/41,
    checked on conv-42/43/44; docs/retrieval.md): normalised score fusion (``blend``) of the top
    ``depth`` of each list, the keyword list min-max scaled, the cosine calibrated so that
    ``vector_floor`` counts as nothing, with equal weights; vector candidates under cosine 0.3
    are dropped unless they are within ``vector_margin`` of that floor and of the query's best
    cosine (a soft floor). :meth:`strict` gives hard cut-offs with RRF (Eden's production
    thresholds; ``eden()`` is its seed-compatible alias, :mod:`memlane.compat`).

    No match, no hit (issue 17): a memory is returned only with *evidence*, a keyword match
    (a positive BM25 score, through its own text, its date words or its neighbouring turns)
    or a vector candidate kept by the floor whose cosine is above the level that counts as
    nothing (``vector_floor`` under ``blend`` with the calibrated cosine, else 0). Under
    ``blend`` with the default normalisations every hit's score is then positive, and 0 never
    appears: see docs/retrieval.md, "What a score means".
    """

    model_config = ConfigDict(extra="forbid")

    fusion: Literal["rrf", "score", "blend"] = "blend"
    """``blend``: ``keyword_weight * norm(bm25) + vector_weight * norm(cosine)`` with the
    normalisations ``keyword_norm`` and ``vector_norm``. ``rrf``: weighted Reciprocal Rank
    Fusion (the default before issue 11). ``score``: keyword score divided by the best keyword
    score, plus ``vector_weight`` times the raw cosine. In ``blend`` and ``score`` a keyword
    candidate missing from the vector list gets that list's lowest cosine."""
    rrf_k: int = RRF_K
    """The RRF constant k."""
    keyword_weight: float = 1.0
    """Weight of keyword lists (0 leaves them out of fusion)."""
    vector_weight: float = 1.0
    """Weight of vector lists (0 disables vector search). With ``rrf``, 0.1 was measured best."""
    depth: int = 20
    """How many candidates of each list take part in fusion (at least ``top_k``)."""
    min_vector_score: float | None = 0.3
    """Drop vector candidates below this cosine similarity (but see ``vector_margin``). 0.3
    keeps unrelated memories out of results when few keywords match (MiniLM cosines of
    unrelated sentences sit around 0.0-0.25); it cost nothing on LoCoMo. Eden's 0.65 suits
    larger OpenAI embeddings. None: keep every vector candidate."""
    vector_margin: float | None = 0.02
    """Soft floor: a vector candidate under ``min_vector_score`` is still kept when its cosine
    is at least ``min_vector_score - vector_margin`` and within ``vector_margin`` of the query's
    best cosine, so a query's best semantic match is not lost at 0.2999 ("pets" -> "Alice's
    cat is called Miso"). None: a hard cut-off at ``min_vector_score``. 0.02, not the 0.05 of
    issue 11: "marathon" for a user who never ran one found "The Alfa Pendular train gets you
    to Porto" at cosine 0.27 (issue 17)."""
    embed_windows: bool = True
    """Embed a memory longer than the encoder reads in windows (issue 22, docs/retrieval.md,
    "Long memories"): one vector per window, the memory scored by its best window. Off: one
    vector per memory, of the part the encoder reads (its first ~1,000 characters with MiniLM).
    Read when memories are embedded (``add``, ``update``, backfill), not at search time."""
    embed_window_size: int | None = Field(None, ge=16)
    """Window length in the embedder's unit (MiniLM: tokens; remote embedders: characters);
    None: what the encoder reads (254 tokens for MiniLM)."""
    embed_window_overlap: float = Field(0.25, ge=0, lt=1)
    """Share of a window repeated at the start of the next (a sentence of up to this share of a
    window lies whole in one window)."""
    window_bonus: float = Field(0.0, ge=0.0, le=1.0)
    """Added to the cosine of a vector candidate whose memory is longer than the encoder reads
    (embedded in windows, scored by its best window: ``embed_windows``) before the floors and
    fusion, so a long memory is held to a floor this much lower (issue 22, docs/retrieval.md,
    "Long memories"). A sentence diluted in a 254-token window scores a cosine of about
    0.05-0.3 against a paraphrase, mostly under ``min_vector_score``; short memories are not
    affected. The hit's ``vector_score`` includes the bonus. 0 (the default): off. On: one read
    of the vector candidates' rows per search (their texts say which are long)."""
    min_keyword_score: float | None = None
    """Drop keyword candidates below this (negated BM25) score."""
    min_rrf_score: float | None = None
    """Drop fused results below this fused score (an RRF score with ``fusion="rrf"``)."""
    author_boost: float = 2.0
    """Keyword score multiplier for memories by an author the query names."""
    keyword_norm: Literal["minmax", "max", "zscore", "saturate"] = "minmax"
    """``blend``: how one list's BM25 scores become values. ``minmax``: ``MINMAX_LIFT`` (0.01)
    + 0.99 (score - lowest) / (best - lowest) over the top ``depth`` (1.0 when all are equal),
    so the weakest keyword match of the list counts for almost nothing (a good semantic match
    can outrank it) yet never reads 0.0; ``max``:
    score / best; ``zscore``: standard scores within the list; ``saturate``: score / (score +
    ``keyword_saturation``), one scale for every query."""
    keyword_saturation: float = 20.0
    """``keyword_norm="saturate"``: the BM25 score that maps to 0.5."""
    vector_norm: Literal["calibrated", "raw", "minmax", "zscore"] = "calibrated"
    """``blend``: how cosines become values. ``calibrated``: (cos - ``vector_floor``) /
    (1 - ``vector_floor``), 0 at or under the floor; ``raw``: the cosine; ``minmax`` and
    ``zscore`` within the list, as for keywords."""
    vector_floor: float = 0.28
    """``vector_norm="calibrated"``: the cosine that counts as no similarity, the lowest one the
    soft floor can keep (``min_vector_score - vector_margin``), so every vector candidate kept
    scores above 0 and a candidate under it is no evidence. (Issue 11 had 0.3, which gave the
    soft floor's "pets" -> "Alice's cat is called Miso" at 0.29999 a score of 0.0.) A lower
    ``min_vector_score - vector_margin`` lowers it too (:func:`calibration_floor`)."""

    feedback_docs: int = Field(default=0, ge=0)
    """Pseudo-relevance feedback (RM3, :mod:`memlane.retrieval.feedback`): the keyword hits
    (at most this many of the first search's ``depth``) whose terms expand each keyword query;
    the first search's candidates are then re-scored with the expanded query's scores. 0 (the
    default): off, one keyword search per query. :data:`FEEDBACK_DOCS` (20) with the defaults
    below is what ``memory.keyword_feedback`` turns on: on the LoCoMo dev split it lifted
    recall@10 on both halves (tune 0.825 -> 0.839, check 0.756 -> 0.761) but lowered recall@1
    on all six conversations (0.417 -> 0.412) and costs a second keyword search (issue 22,
    docs/benchmarks.md), so it is not the default."""
    feedback_terms: int = Field(default=10, ge=0)
    """RM3: how many expansion terms are added to the query (0: feedback off)."""
    feedback_weight: float = Field(default=0.1, ge=0.0, le=1.0)
    """RM3: the expanded query's share of a candidate's keyword score, ``(1 - w) * bm25 + w *
    bm25_expanded * best / best_expanded`` (still in the query's BM25 units). 0: feedback off.
    20 documents, 10 terms and 0.1 measured best on the tune half without lowering its
    recall@1."""

    @property
    def feedback(self) -> bool:
        """Whether keyword queries are expanded (RM3)."""
        return self.feedback_docs > 0 and self.feedback_terms > 0 and self.feedback_weight > 0

    @classmethod
    def strict(cls) -> RetrievalConfig:
        """Strict thresholds, fewer and surer hits: hard cut-offs at cosine 0.65 (no soft
        floor), keyword score 1.5 and fused score 0.015, with weighted RRF, whose scores that
        last threshold is for. These are Eden memory v2's production thresholds, suited to
        larger embedders (OpenAI's) than the default MiniLM."""
        return cls(
            fusion="rrf",
            vector_weight=0.1,
            min_vector_score=0.65,
            vector_margin=None,
            min_keyword_score=1.5,
            min_rrf_score=0.015,
        )

    #: Eden memory v2's name for :meth:`strict` (the same method; :mod:`memlane.compat`).
    eden: ClassVar[Callable[[], RetrievalConfig]] = strict  # type: ignore[assignment]


def fuse(
    keyword_lists: Sequence[list[Candidate]],
    vector_lists: Sequence[list[Candidate]],
    config: RetrievalConfig,
    top_k: int,
) -> list[Fused]:
    """Apply thresholds, keep the candidates with evidence (:func:`evidence_floor`), then fuse
    every query's keyword and vector list. Every fused result has evidence: a positive keyword
    score or a kept cosine above the evidence floor."""
    depth = max(config.depth, top_k)
    lists: dict[str, list[tuple[str, float]]] = {}
    weights: dict[str, float] = {}
    for i, kw in enumerate(keyword_lists):
        kept = [
            (c.fact_id, c.score)
            for c in kw
            if c.score > 0 and (config.min_keyword_score is None or c.score >= config.min_keyword_score)
        ]
        lists[f"keyword{i}"] = kept
        weights[f"keyword{i}"] = config.keyword_weight
    floor = evidence_floor(config)
    for i, vec in enumerate(vector_lists):
        kept_vec = keep_vectors([(c.fact_id, c.score) for c in vec], config)
        lists[f"vector{i}"] = [(k, s) for k, s in kept_vec if s > floor]
        weights[f"vector{i}"] = config.vector_weight
    if config.fusion == "score":
        fused = score_fusion(lists, weights, depth=depth)
    elif config.fusion == "blend":
        raw = {f"vector{i}": [(c.fact_id, c.score) for c in vec] for i, vec in enumerate(vector_lists)}
        fused = blend_fusion(lists, weights, config, depth=depth, cosines=raw)
    else:
        fused = rrf(lists, weights=weights, k=config.rrf_k, depth=depth)
    if config.min_rrf_score is not None:
        fused = [f for f in fused if f.score >= config.min_rrf_score]
    return fused[:top_k]


def evidence_floor(config: RetrievalConfig) -> float:
    """The cosine a vector candidate must exceed to count as evidence: :func:`calibration_floor`
    when ``blend`` calibrates cosines (at or under it a cosine is worth 0), else 0 (no
    similarity)."""
    if config.fusion == "blend" and config.vector_norm == "calibrated":
        return calibration_floor(config)
    return 0.0


def calibration_floor(config: RetrievalConfig) -> float:
    """The cosine worth nothing under ``vector_norm="calibrated"``: ``vector_floor``, or just
    under the lowest cosine the floor keeps (``min_vector_score - vector_margin``) when that is
    lower, so lowering ``min_vector_score`` (or a call's ``match_threshold``) lets those
    cosines in with a positive score instead of keeping them at 0."""
    floor = config.vector_floor
    if config.min_vector_score is not None:
        floor = min(floor, config.min_vector_score - (config.vector_margin or 0.0) - 1e-9)
    return floor


def keep_vectors(vec: list[tuple[str, float]], config: RetrievalConfig) -> list[tuple[str, float]]:
    """The vector candidates at or above ``min_vector_score``, plus the near-threshold ones the
    soft floor keeps (within ``vector_margin`` under it and of the best cosine)."""
    floor = config.min_vector_score
    if floor is None or not vec:
        return vec
    soft = floor
    if config.vector_margin is not None:
        soft = max(floor - config.vector_margin, max(s for _, s in vec) - config.vector_margin)
    return [(k, s) for k, s in vec if s >= min(floor, soft)]


def _normalise(
    values: list[float], how: str, *, saturation: float = 1.0, floor: float = 0.0, lift: float = MINMAX_LIFT
) -> list[float]:
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
        return [lift + (1.0 - lift) * (v - lo) / (hi - lo) if hi > lo else 1.0 for v in values]
    if how == "zscore":
        n = len(values)
        mean = sum(values) / n
        sd = (sum((v - mean) ** 2 for v in values) / n) ** 0.5
        return [(v - mean) / sd if sd > 0 else 0.0 for v in values]
    return list(values)  # raw


def blend_fusion(
    lists: dict[str, list[tuple[str, float]]],
    weights: dict[str, float],
    config: RetrievalConfig,
    *,
    depth: int,
    cosines: dict[str, list[tuple[str, float]]] | None = None,
) -> list[Fused]:
    """Normalised score fusion: per query, ``keyword_weight * norm(bm25) + vector_weight *
    norm(cosine)`` (``keyword_norm``, ``vector_norm``); queries combine by max.

    The candidates are the top ``depth`` of each (thresholded) list with a positive weight. A
    keyword candidate's cosine comes from the unfiltered vector list (``cosines``) when it is
    there at all, else it gets that list's lowest value; a vector candidate missing from the
    keyword list gets the keyword list's lowest value (0 for ``minmax``).
    """
    best: dict[str, Fused] = {}
    queries = {name.removeprefix("keyword").removeprefix("vector") for name in lists}
    for q in queries:
        wk = weights.get(f"keyword{q}", 0.0)
        wv = weights.get(f"vector{q}", 0.0)
        kw = lists.get(f"keyword{q}", [])[:depth] if wk > 0 else []
        vec = lists.get(f"vector{q}", [])[:depth] if wv > 0 else []
        allcos = ((cosines or {}).get(f"vector{q}") or vec) if wv > 0 else []
        kwn = dict(
            zip(
                [k for k, _ in kw],
                _normalise([s for _, s in kw], config.keyword_norm, saturation=config.keyword_saturation),
                strict=True,
            )
        )
        vn = dict(
            zip(
                [k for k, _ in allcos],
                _normalise([s for _, s in allcos], config.vector_norm, floor=calibration_floor(config)),
                strict=True,
            )
        )
        kmiss = min(0.0, *kwn.values()) if kwn else 0.0
        vmiss = min(vn.values()) if vn else 0.0
        krank = {k: r for r, (k, _) in enumerate(kw, start=1)}
        vrank = {k: r for r, (k, _) in enumerate(vec, start=1)}
        kraw, vraw = dict(kw), dict(allcos)
        for key in krank.keys() | vrank.keys():
            f = Fused(key, wk * kwn.get(key, kmiss) + wv * vn.get(key, vmiss))
            if key in krank:
                f.raw["keyword"], f.ranks["keyword"] = kraw[key], krank[key]
            if key in vraw:
                f.raw["vector"] = vraw[key]
            if key in vrank:
                f.ranks["vector"] = vrank[key]
            if key not in best or f.score > best[key].score:
                best[key] = f
    return sorted(best.values(), key=lambda f: (-f.score, min(f.ranks.values()), f.key))


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
