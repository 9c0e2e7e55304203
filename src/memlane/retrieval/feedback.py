"""Pseudo-relevance feedback (RM3) for the keyword side: pure functions, no I/O.

A question's words often miss the evidence turn while the turns they do find talk about the
same thing in other words ("What exercises has John done?" finds John's turns about exercise;
one of them names "kickboxing"). RM3 (Lavrenko & Croft's relevance model, interpolated with
the query, Abdul-Jaleel et al. 2004): weigh the terms of the first keyword search's top hits by
how well each hit scored, add the heaviest ones to the query, search again, and mix the two
rankings. Issue 22 measured it on the LoCoMo dev split (docs/benchmarks.md, "Issue 22").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from memlane.models import Candidate
from memlane.retrieval.text import function_words, keyword_text, words


def expansion_terms(query_terms: Iterable[str], docs: Sequence[tuple[str, float]], *, terms: int) -> list[str]:
    """The ``terms`` heaviest terms of the feedback documents ``docs`` (text, keyword score),
    best first: each document weighs ``softmax(score)`` (so the best hits dominate: BM25
    differences of a few points are large), each term its share of the document's terms.
    Query terms, function words (the document's languages, as queries drop them) and ASCII
    words of one or two letters are left out."""
    if not docs or terms <= 0:
        return []
    top = max(s for _, s in docs)
    weights = [math.exp(s - top) for _, s in docs]
    total = sum(weights)
    skip = {t.lower() for t in query_terms}
    weight: dict[str, float] = {}
    for (text, _), w in zip(docs, weights, strict=True):
        toks = words(keyword_text(text))
        drop = function_words(toks)
        kept = [t for t in toks if t not in drop and t not in skip and (len(t) > 2 or not t.isascii())]
        if not kept:
            continue
        tf = Counter(kept)
        for t, n in tf.items():
            weight[t] = weight.get(t, 0.0) + (w / total) * n / len(kept)
    # a stable sort keeps first-seen order among equal weights: deterministic for the same input
    return sorted(weight, key=lambda t: -weight[t])[:terms]


def mix(first: Sequence[Candidate], second: Sequence[Candidate], *, weight: float) -> list[Candidate]:
    """RM3's interpolation over the first search's candidates: ``(1 - weight) * s1 + weight *
    s2 * max1 / max2`` per memory, ``s2`` its score for the expanded query (0 when that search
    did not return it), so a score still reads in the query's BM25 units and thresholds on it
    keep their meaning. Memories that only the expansion terms match are not added: every
    candidate still matches the query itself ("no match, no hit"; adding them measured the same
    recall on LoCoMo, issue 22). Best first; ties keep the first search's order."""
    if not first:
        return []
    top1 = max(c.score for c in first)
    top2 = max((c.score for c in second), default=0.0)
    if top1 <= 0 or top2 <= 0:
        return list(first)
    again = {c.fact_id: c.score for c in second}
    out = [
        Candidate(
            c.fact_id, (1 - weight) * c.score + weight * again.get(c.fact_id, 0.0) * top1 / top2, c.author, c.fact
        )
        for c in first
    ]
    out.sort(key=lambda c: -c.score)
    return out
