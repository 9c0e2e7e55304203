"""Keyword side of retrieval: tokenising, stopwords, FTS5 query strings, date words.

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from memlane.models import KeywordQuery

#: English stopwords removed from keyword queries (NLTK's list, 179 words). Documents keep
#: them: removing them from documents measured worse on LoCoMo.
STOPWORDS: frozenset[str] = frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "you're",
        "you've",
        "you'll",
        "you'd",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "she's",
        "her",
        "hers",
        "herself",
        "it",
        "it's",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "that'll",
        "these",
        "those",
        "am",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "a",
        "an",
        "the",
        "and",
        "but",
        "if",
        "or",
        "because",
        "as",
        "until",
        "while",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "s",
        "t",
        "can",
        "will",
        "just",
        "don",
        "don't",
        "should",
        "should've",
        "now",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "ain",
        "aren",
        "aren't",
        "couldn",
        "couldn't",
        "didn",
        "didn't",
        "doesn",
        "doesn't",
        "hadn",
        "hadn't",
        "hasn",
        "hasn't",
        "haven",
        "haven't",
        "isn",
        "isn't",
        "ma",
        "mightn",
        "mightn't",
        "mustn",
        "mustn't",
        "needn",
        "needn't",
        "shan",
        "shan't",
        "shouldn",
        "shouldn't",
        "wasn",
        "wasn't",
        "weren",
        "weren't",
        "won",
        "won't",
        "wouldn",
        "wouldn't",
    ]
)

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    """Lowercase word tokens (unicode ``\\w+``), as FTS5's unicode61 tokenizer splits them."""
    return _WORD.findall(text.lower())


def query_terms(text: str) -> list[str]:
    """Distinct query words, stopwords removed, in order of appearance.

    If every word is a stopword, the words are kept (a query of "who am I" still searches).
    """
    toks = words(text)
    kept = [t for t in toks if t not in STOPWORDS and t.replace("_", "")]
    chosen = kept or toks
    seen: dict[str, None] = {}
    for t in chosen:
        seen.setdefault(t, None)
    return list(seen)


def parse_query(text: str, authors: Iterable[str] = (), *, author_boost: float = 2.0) -> KeywordQuery:
    """Build a :class:`KeywordQuery`: terms plus authors the query names (boosted)."""
    terms = query_terms(text)
    qwords = set(words(text))
    named = tuple(a for a in authors if a and set(words(a)) and set(words(a)) <= qwords)
    # A boost only discriminates when the query names some authors, not all of them.
    if len(named) == len(set(authors)):
        named = ()
    return KeywordQuery(terms=tuple(terms), boost_authors=named, author_boost=author_boost)


def date_words(when: datetime | None) -> str:
    """A date as words for the keyword index: ``"8 May 2023 Monday"``."""
    if when is None:
        return ""
    return f"{when.day} {when.strftime('%B')} {when.year} {when.strftime('%A')}"
