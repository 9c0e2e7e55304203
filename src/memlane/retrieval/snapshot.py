"""Keyword scoring of a point-in-time snapshot (``search(as_of=...)``, docs/temporal.md).

The stores' keyword indexes hold only what memory holds now; a snapshot (the facts as they
were at a record time, or the versions true at a world time) is scored here instead, in
memory: BM25 (``k1`` 1.2, ``b`` 0.75, FTS5's idf) over each text's words
(:func:`memlane.retrieval.text.keyword_text`, as the indexes split them) plus its date in
words, with a light suffix stemmer standing in for the indexes' Porter stemmer. Pure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from memlane.retrieval.text import keyword_text, words

__all__ = ["bm25_scores", "stem", "terms"]

K1 = 1.2
B = 0.75


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light English suffix stemmer (plurals, ``-ed``, ``-ing``, a final ``e``): ``lives``,
    ``lived``, ``living`` and ``live`` all give ``liv``."""
    w = word
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif (len(w) > 4 and w.endswith("ed")) or w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def terms(text: str) -> list[str]:
    """A text's stemmed index words."""
    return [stem(w) for w in words(keyword_text(text))]


def bm25_scores(query: Sequence[str], texts: Sequence[str]) -> list[float]:
    """BM25 of each text for the query terms (stemmed here). Only texts holding a query term's
    stem as a substring are split into words; the others count by their whitespace words (for
    the average length) and score 0, so a large snapshot costs one pass of substring tests."""
    if not texts:
        return []
    q = list(dict.fromkeys(stem(t) for t in query if t))
    lowered = [t.lower() for t in texts]
    lengths = [len(t.split()) for t in lowered]
    n = len(texts)
    avg = sum(lengths) / n or 1.0
    counts: dict[int, Counter[str]] = {}
    for i, text in enumerate(lowered):
        if any(t in text for t in q):
            c = Counter(terms(text))
            lengths[i] = sum(c.values())
            counts[i] = c
    df = {t: sum(1 for c in counts.values() if t in c) for t in q}
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in q}
    out = [0.0] * n
    for i, c in counts.items():
        norm = K1 * (1 - B + B * lengths[i] / avg)
        out[i] = sum(idf[t] * c[t] * (K1 + 1) / (c[t] + norm) for t in q if c[t])
    return out
