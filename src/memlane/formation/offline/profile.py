"""The profile by ranking: identity first, then health, dated goals, preferences; the rest last."""

from __future__ import annotations

import re

from memlane.formation.offline.claims import _Claim, _parse_claim
from memlane.formation.offline.lexicon import _DATE_RE, _DIET, _I, _REL_FORMS, _alt
from memlane.formation.offline.text import _SPACES, _content, _normalise
from memlane.formation.schemas import ProfileInput, ProfileOutput

_PROFILE_ORDER: list[tuple[int, re.Pattern[str]]] = [
    (0, re.compile(r"'s\s+name\s+is|\bis\s+named\b|\bgoes\s+by\b|\bto\s+be\s+called\b|\bnickname\b", _I)),
    (1, re.compile(r"\b\d{1,3}\s+years\s+old\b|\bturned\s+\d|\bbirthday\b|\bborn\s+on\b", _I)),
    (
        2,
        re.compile(
            r"\blives?\b|\bliving\b|\bmoved\s+(?:to|from)\b|\bis\s+from\b|\bbased\s+in\b|\bborn\s+in\b|"
            r"\bgrew\s+up\b|\bhometown\b|\breside",
            _I,
        ),
    ),
    (
        3,
        re.compile(
            r"\bworks?\b|\bjob\b|\bprofession\b|\boccupation\b|\bcareer\b|\bstudies\b|\bstudent\b|\bretired\b|"
            r"\bgraduated\b|\bdegree\b|\bis\s+an?\s+(?:[\w-]+\s+)?\w+(?:er|or|ist|ian|ant|ent|nurse|chef|coach)\b",
            _I,
        ),
    ),
    (4, re.compile(rf"\b(?:{_alt(_REL_FORMS)})\b|\bmarried\b|\bengaged\b|\bdating\b|\bfamily\b", _I)),
    (5, re.compile(r"\bemail\b|\bphone\b|\baddress\b|@", _I)),
]
_HEALTH_RE = re.compile(
    rf"\b(?:{_alt(_DIET)})\b|allerg|\bdiet|\bgluten\b|\blactose\b|\bdiabet|\basthma|\bpregnan|\bmedication\b|"
    r"\bcondition\b|\bceliac\b|\bdoes\s+not\s+(?:eat|drink|smoke)\b|\bsober\b|\bhealth\b|\bintoleran",
    _I,
)
_GOAL_RE = re.compile(
    r"\bplan|\bgoal\b|\bdream\b|\bhop(?:es|ing)\s+to\b|\bwants\s+to\b|\bgoing\s+to\b|\bwill\b|\bgetting\s+married\b|"
    r"\btraining\s+for\b|\bsaving\b|\bintends?\b|\baim|\bambition\b|\bresolution\b|\bis\s+moving\b",
    _I,
)
_PREFERENCE_RE = re.compile(
    r"\bloves?\b|\bhates?\b|\bprefers?\b|\bfavou?rite\b|\benjoys?\b|\blikes?\b|\bdislikes?\b|\bfan\s+of\b|"
    r"\bcannot\s+stand\b|\bpassionate\b|\bobsessed\b|\badores?\b",
    _I,
)


def _profile_rank(fact: str) -> tuple[int, int]:
    for sub, pat in _PROFILE_ORDER:
        if pat.search(fact):
            return (0, sub)
    if _HEALTH_RE.search(fact):
        return (1, 0)
    if _GOAL_RE.search(fact):
        return (2, 0 if _DATE_RE.search(fact) else 1)
    if _PREFERENCE_RE.search(fact):
        return (3, 0)
    return (5, 0)


def _profile(inp: ProfileInput) -> ProfileOutput:
    """Distinct facts (the newest wins a single-valued slot) ranked by :func:`_profile_rank`.

    Open work items come after the ranked facts and before the unranked rest.
    """
    if inp.limit <= 0:
        return ProfileOutput()
    facts: list[tuple[str, frozenset[str], _Claim | None]] = []
    seen: set[str] = set()
    slots: set[tuple[str, str]] = set()
    for raw in inp.facts:  # newest first: the first of a single-valued slot wins
        text = _SPACES.sub(" ", raw).strip()
        key = _normalise(text)
        if not key or key in seen:
            continue
        claim = _parse_claim(text)
        if claim is not None and claim.functional and claim.positive:
            if (claim.subject, claim.key) in slots:
                continue
            slots.add((claim.subject, claim.key))
        seen.add(key)
        facts.append((text, _content(text), claim))
    merged: list[tuple[str, frozenset[str]]] = []
    for i, (text, toks, _) in enumerate(facts):
        # A fact another (distinct) fact fully contains adds nothing: keep the fuller one.
        if toks and any(j != i and toks < other for j, (_, other, _) in enumerate(facts)):
            continue
        merged.append((text, toks))
    ranked = sorted(enumerate(merged), key=lambda x: (*_profile_rank(x[1][0]), x[0]))
    bullets = [text for _, (text, _) in ranked if _profile_rank(text)[0] < 5]
    rest = [text for _, (text, _) in ranked if _profile_rank(text)[0] >= 5]
    seen_items: set[str] = set()
    work: list[str] = []
    for item in inp.items:
        text = _SPACES.sub(" ", item).strip()
        if text and _normalise(text) not in seen_items:
            seen_items.add(_normalise(text))
            work.append(f"Working on: {text}")
    return ProfileOutput(bullets=[*bullets, *work, *rest][: inp.limit])
