"""Sentence-level text helpers: splitting, contractions, questions and hedges, normal forms, dates."""

from __future__ import annotations

import re
from datetime import datetime

from memlane.formation.offline.lexicon import _DATE_RE, _I, _MONTHS_FULL, _RELATIVE_RE, _WEEKDAYS
from memlane.formation.schemas import word_count
from memlane.retrieval.text import STOPWORDS, words

# The word tables below keep their packed layout (the formatter skips them): one word a line, as the
# formatter would have them, makes a list of 60 words 60 lines long and no easier to read.

_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"', "\u00a0": " "})
_ABBREV = re.compile(r"\b(Mr|Mrs|Ms|Dr|St|Mt|Jr|Sr|Prof|vs|etc|approx|Ave|Rd|Blvd|No)\.", re.IGNORECASE)
_SENT_SPLIT = re.compile(r"(?<=[.!?…])\s+|\n+")
_CLAUSE_SPLIT = re.compile(
    r"\s*;\s*|\s+[-–—]\s+|,?\s+(?:but|so|because|although|though|while|whereas|plus)\s+"
    r"(?=(?:I|my|if|we|you|he|she|they|it|that|this|there|maybe)\b)"
    r"|,?\s+and\s+(?=(?:if|we|you|he|she|they|it|that|this|there|maybe|I\s+(?:would|could|might|wish|think|guess))\b)",
    _I,
)
_CONTRACTION = re.compile(
    r"\b(?:i'm|im|i've|ive|i'll|i'd|can't|cant|cannot|won't|don't|dont|doesn't|doesnt|didn't|didnt|isn't|isnt|"
    r"aren't|wasn't|weren't|haven't|hasn't|hadn't|wouldn't|couldn't|shouldn't|you're|you've|you'll|you'd|"
    r"we're|we've|they're|it's|that's|he's|she's|there's|what's|gonna|wanna|i)\b",
    _I,
)
_EXPANSIONS = {
    "i'm": "I am", "im": "I am", "i've": "I have", "ive": "I have", "i'll": "I will", "i'd": "I would",
    "can't": "cannot", "cant": "cannot", "cannot": "cannot", "won't": "will not", "don't": "do not",
    "dont": "do not", "doesn't": "does not", "doesnt": "does not", "didn't": "did not", "didnt": "did not",
    "isn't": "is not", "isnt": "is not", "aren't": "are not", "wasn't": "was not", "weren't": "were not",
    "haven't": "have not", "hasn't": "has not", "hadn't": "had not", "wouldn't": "would not",
    "couldn't": "could not", "shouldn't": "should not", "you're": "you are", "you've": "you have",
    "you'll": "you will", "you'd": "you would", "we're": "we are", "we've": "we have", "they're": "they are",
    "it's": "it is", "that's": "that is", "he's": "he is", "she's": "she is", "there's": "there is",
    "what's": "what is", "gonna": "going to", "wanna": "want to", "i": "I",
}  # fmt: skip
_QUESTION_START = re.compile(
    r"^(?:(?:do|does|did|are|is|was|were|can|could|would|will|should|have|has|shall|may|might|am)\s+"
    r"(?:you|your|we|they|he|she|it|there|I|anyone|anybody|any)\b"
    r"|(?:what|who|where|when|why|how|which)\s+(?:is|are|do|does|did|was|were|can|could|would|will|should|have|has)\b)",
    _I,
)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|wish|would|could|might|maybe|perhaps|suppose|supposing|imagine|pretend|unless|whether|"
    r"hypothetically|someday|probably|possibly|should|assuming|in\s+case)\b"
    r"|\bI\s+(?:think|guess|believe|suspect|feel\s+like|am\s+not\s+sure|do\s+not\s+know|doubt)\b",
    _I,
)
_MODAL_MAY = re.compile(r"\bmay\b")
_CLAUSE_OPENERS = frozenset(
    [
        *"""and but so then because cause since as while now also actually recently just finally well oh yeah yes no
        hey hi hello haha lol wow today yesterday tonight week weekend month year summer spring fall autumn winter
        ago morning afternoon evening night honestly basically anyway plus btw tbh okay ok though luckily fortunately
        unfortunately sadly thankfully personally currently lately again too first eventually originally seriously
        ah omg hmm ugh sometimes""".split(),  # noqa: SIM905
        *_WEEKDAYS,
        *_MONTHS_FULL,
    ]
)
_LAST_WORD = re.compile(r"(\w+)\W*$")


def _opens_clause(before: str) -> bool:
    """Whether an "I ..." match starts its own clause, not a relative one ("the photo I took last week")."""
    b = before.rstrip()
    if not b or b[-1] in ",;:!-—–(\"'.":
        return True
    m = _LAST_WORD.search(b)
    return m is None or m.group(1).lower() in _CLAUSE_OPENERS or m.group(1).isdigit()


_TRAIL_PUNCT = re.compile(r"[\s,.;:!?…\"'*~)\]]+$")
_PUNCT_NORM = re.compile(r"[^\w\s@.+-]|(?<!\w)[.+-]|[.+-](?!\w)")
_SPACES = re.compile(r"\s+")


def _expand(text: str) -> str:
    return _CONTRACTION.sub(lambda m: _EXPANSIONS.get(m.group().lower(), m.group()), text)


def _normalise(text: str) -> str:
    """Case, whitespace and punctuation-insensitive form of a sentence (exact-duplicate key)."""
    return _SPACES.sub(" ", _PUNCT_NORM.sub(" ", text.translate(_QUOTES).lower())).strip()


_NUMBER_TOKENS = frozenset({"a", "an", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"})


_FILLERS = frozenset(
    """really actually just lately totally truly definitely basically honestly literally nowadays currently still
    also even super pretty quite""".split()  # noqa: SIM905
)
_THESE_DAYS = re.compile(r"\bthese\s+days\b", _I)


def _content(text: str) -> frozenset[str]:
    """Content tokens: lowercase words without stopwords, number words and fillers ("really", "these days")."""
    toks = words(_THESE_DAYS.sub(" ", text.translate(_QUOTES)))
    return frozenset(t for t in toks if t not in STOPWORDS and t not in _NUMBER_TOKENS and t not in _FILLERS)


def _contained(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
    """Whether at least ``threshold`` of ``a``'s tokens are in ``b``."""
    return bool(a) and len(a & b) >= threshold * len(a)


_TRAIL_DECOR = re.compile(r"[\s\"')\]*~.!]+$|[^\w?\s]+$")


def _is_question(sentence: str) -> bool:
    """Ends with "?" (ignoring closing quotes, emoji) or opens like one ("Do you ...", "What is ...")."""
    s = sentence.strip()
    for _ in range(2):
        s = _TRAIL_DECOR.sub("", s)
    return s.endswith("?") or bool(_QUESTION_START.match(s.lstrip(" \"'(")))


def _is_hypothetical(clause: str) -> bool:
    return bool(_HYPOTHETICAL.search(clause) or _MODAL_MAY.search(clause))


def _sentences(text: str) -> list[str]:
    text = _ABBREV.sub(r"\1", text.translate(_QUOTES))
    return [s.strip() for s in _SENT_SPLIT.split(text) if s and s.strip()]


def _date_phrase(at: datetime | None) -> str:
    return f"{at.day} {at.strftime('%B')} {at.year}" if at is not None else ""


def _has_relative_date(text: str) -> bool:
    return any(_RELATIVE_RE.search(m.group()) for m in _DATE_RE.finditer(text))


def _cap_words(text: str, limit: int) -> str:
    """At most ``limit`` words, cut at the last clause boundary (comma, semicolon) that fits, else at a word."""
    if word_count(text) <= limit:
        return text
    toks = text.split()[:limit]
    for i in range(len(toks) - 1, max(len(toks) // 2, 1) - 1, -1):
        if toks[i - 1].endswith((",", ";", ":")):
            return _TRAIL_PUNCT.sub("", " ".join(toks[:i]))
    return _TRAIL_PUNCT.sub("", " ".join(toks))


def _clauses(sentence: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_SPLIT.split(_expand(sentence)) if c and c.strip()]
