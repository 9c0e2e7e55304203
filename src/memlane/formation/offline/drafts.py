"""What an extraction rule produces (``_Draft``), how rules are declared (``_Rule``), and value cleaning.

A rule module declares its rules with a decorator from :func:`_registry`; the rules run in the
order :mod:`memlane.formation.offline.rules` lists them, which decides the order of the facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memlane.formation.offline.lexicon import _DATE_RE, _I, _NOT_NAMES, _REL_FORMS, _REL_NORMAL, _SPEAKER
from memlane.formation.offline.text import _CLAUSE_OPENERS, _SPACES, _TRAIL_PUNCT, _content
from memlane.formation.schemas import word_count
from memlane.retrieval.text import words

# The word tables below keep their packed layout (the formatter skips them): one word a line, as the
# formatter would have them, makes a list of 60 words 60 lines long and no easier to read.


@dataclass(frozen=True, slots=True)
class _Draft:
    """A fact before the speaker is named: ``head`` + ``value`` + ``tail``; ``_SPEAKER`` marks the speaker."""

    head: str
    value: str = ""
    tail: str = ""
    category: str = "other"
    own_label: bool = False
    """Render the speaker with its default label even once a name is learned ("The user's name is Sam")."""
    learn: str | None = None
    """A name the speaker gave for themselves."""


_CLAUSE_WORDS = (
    "I|we|you|he|she|they|it|my|our|that|this|then|also|so|now|still|really|just|even|have|has|had|am|is|are|was|"
    "were|be|been|love|loved|like|liked|enjoy|enjoyed|get|got|go|went|do|did|can|will|made|make|feel|felt|want|"
    "wanted|need|needed|think|thought|hope|see|saw|learn|learned|take|took|there|started|found|know|knew|let|said|"
    "tried|try|plan|planning|getting|going|looking|trying|hoping|working|spent|keep|kept|helped|help|met|came|come|"
    "left|decided|ended|became|look|looked|not|never|always|sometimes|hopefully|hope|would|could"
)
_CUT = re.compile(
    rf"\s*,?\s+(?:and|&)\s+(?=(?:{_CLAUSE_WORDS})\b)"
    r"|\s*,?\s+(?:but|so|because|since(?!\s+(?:\d|the\s+\d|(?-i:[A-Z])))|which|who|whom|whose|where|when|"
    r"while|though|although|whereas|until|unless|plus|except|if|as\s+well\s+as|lol|haha|hehe)\b"
    r"|\s*,\s*(?:I|and|but|or|so)\b"
    rf"|\s*,\s+(?=(?:{_CLAUSE_WORDS}|the|a|an|its|his|her|their|which|who|where|when|what|how|especially|like|such|"
    r"including|though|too|lol|haha|thanks|right)\b)"
    r"|\s+that\s+|(?-i:\s+I\b)|\s*[-–—]\s+|\s*\.\.\.",
    _I,
)
_DEICTIC = re.compile(r"\b(?:it|its|them|they|he|she|him|her|hers|his|this|these|those|that|their|theirs)\b", _I)
_ENDS_WITH_PREPOSITION = re.compile(r"\b(?:to|of|in|on|at|for|with|about|from|by|into|onto|the|a|an|and|or)$", _I)
_TRAIL_FILLER = re.compile(
    r"(?:\s+(?:too|as\s+well|also|though|now|anymore|lol|haha|hehe|either|right\s+now|at\s+the\s+moment|btw|tbh|"
    r"honestly|really|so\s+much|a\s+lot|very\s+much|by\s+the\s+way|these\s+days|nowadays))+$",
    _I,
)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|yourselves|u|ur)\b", _I)
_VAGUE_START = re.compile(
    r"^(?:it|that|this|these|those|them|him|her|his|she|he|they|there|here|something|anything|everything|nothing|"
    r"stuff|things|one|some|more|much|so|very|how|what|when|where|why|who|which|well|good|great|fine|ok|okay|sure|"
    r"right|too|not|a\s+ton|tons|to\s+(?:hear|see|know|read|chat|talk|say)|the\s+way|the\s+idea|the\s+thought|seeing|hearing|"
    r"being\s+(?:able|there)|having\s+(?:you|this|that)|reading\s+(?:about|your)|talking|chatting|doing\s+(?:this|"
    r"that|it|well|good|great|fine|ok|okay)|a\s+(?:bit|little|lot|tad)|lots|the\s+same|all|both)\b",
    _I,
)
_PRONOUN_IN_VALUE = re.compile(r"\b(?:my|me|mine|myself|I|our|ours|us|we|ourselves)\b", _I)
_PRONOUN_MAP = {"my": "their", "me": "them", "mine": "theirs", "myself": "themselves", "i": _SPEAKER,
                "our": "their", "ours": "theirs", "us": "them", "we": "they", "ourselves": "themselves"}  # fmt: skip


def _clean_value(raw: str, *, cut: bool = True, max_words: int = 18) -> str | None:
    """Trim a captured value to its clause, rewrite first-person pronouns, reject vague values."""
    v = raw.strip()
    if cut:
        m = _CUT.search(v)
        if m:
            v = v[: m.start()]
    for _ in range(3):
        v = _TRAIL_FILLER.sub("", _TRAIL_PUNCT.sub("", v)).strip()
    v = re.sub(r"^,\s*", "", v)
    if not v or _SECOND_PERSON.search(v) or _VAGUE_START.match(v) or _DEICTIC.search(v):
        return None
    if _ENDS_WITH_PREPOSITION.search(v):
        return None  # the object was cut away ("escaping to [that world]")
    if not _content(v):
        return None
    if word_count(v) > max_words:
        head = " ".join(v.split()[:max_words])
        if "," not in head:
            return None
        v = _TRAIL_PUNCT.sub("", head[: head.rindex(",")])
    v = _PRONOUN_IN_VALUE.sub(lambda m: _PRONOUN_MAP[m.group().lower()], v)
    return _SPACES.sub(" ", v)


def _valid_names(raw: str) -> str | None:
    """Drop trailing non-name words from a captured capitalised span; None if it is no name."""
    parts = re.split(r"(\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*)", raw.strip())
    names: list[str] = []
    for i in range(0, len(parts), 2):
        toks = parts[i].split()
        while toks and toks[-1].lower() in _NOT_NAMES:
            toks.pop()
        if not toks or toks[0].lower() in _NOT_NAMES or len(toks[0]) < 2:
            break
        names.append(" ".join(toks))
    if not names:
        return None
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _rel_name(raw: str) -> str:
    toks = raw.lower().split()
    head = " ".join(toks[-2:]) if len(toks) > 1 and " ".join(toks[-2:]) in _REL_FORMS else toks[-1]
    mods = toks[: len(toks) - len(head.split())]
    return " ".join([*mods, _REL_NORMAL.get(head, head)])


def _is_plural_rel(rel: str) -> bool:
    head = rel.split()[-1]
    return (head in _REL_FORMS and _REL_FORMS[head] != head) or rel.split()[0] in {"two", "three", "four"}


_Builder = Callable[[re.Match[str], str], list[_Draft]]
"""Turns a match into drafts; the string is the sentence's text before the match (for fronted dates)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    triggers: tuple[str, ...]
    """Lowercase substrings; the rule's regex runs only on clauses holding one of them (none: a date)."""
    pattern: re.Pattern[str]
    build: _Builder


def _registry(rules: list[_Rule]) -> Callable[[str, tuple[str, ...], str], Callable[[_Builder], _Builder]]:
    """A ``@rule(name, triggers, pattern)`` decorator appending to ``rules`` in declaration order."""

    def rule(name: str, triggers: tuple[str, ...], pattern: str) -> Callable[[_Builder], _Builder]:
        compiled = re.compile(pattern, _I)

        def register(fn: _Builder) -> _Builder:
            rules.append(_Rule(name, triggers, compiled, fn))
            return fn

        return register

    return rule


def _one(head: str, raw: str | None, category: str, *, tail: str = "", cut: bool = True, **kw: int) -> list[_Draft]:
    if raw is None:
        return []
    v = _clean_value(raw, cut=cut, **kw)
    return [_Draft(head, v, tail, category)] if v else []


def _fronted_date(lead: str) -> re.Match[str] | None:
    """A date opening the sentence before the subject ("Last Friday, I ..."), not one inside another clause."""
    for d in _DATE_RE.finditer(lead):
        around = words(lead[: d.start()]) + words(lead[d.end() :])
        if all(w in _CLAUSE_OPENERS or w in {"guess", "what", "so", "hey"} for w in around):
            return d
    return None


def _lower_relative(date: str) -> str:
    """A fronted "Last week" moved after the value reads "last week"."""
    return (
        date[0].lower() + date[1:]
        if date.split()[0].lower()
        in {"last", "next", "this", "yesterday", "today", "tomorrow", "tonight", "coming", "past", "on"}
        else date
    )
