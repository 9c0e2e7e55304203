"""Rules for what the speaker has (family, pets, possessions) and what they like."""

from __future__ import annotations

import re

from memlane.formation.offline.drafts import (
    _clean_value,
    _Draft,
    _fronted_date,
    _lower_relative,
    _one,
    _registry,
    _Rule,
    _valid_names,
)
from memlane.formation.offline.lexicon import (
    _DATE_RE,
    _HAVE_NOUN,
    _I,
    _NAMES,
    _NUMBER_WORDS,
    _PETS,
    _REL_FORMS,
    _VAL,
    _alt,
)
from memlane.formation.offline.lexicon import _SPEAKER as _S
from memlane.formation.offline.text import _SPACES

# The word tables below keep their packed layout (the formatter skips them): one word a line, as the
# formatter would have them, makes a list of 60 words 60 lines long and no easier to read.

_RULES: list[_Rule] = []
_rule = _registry(_RULES)


@_rule(
    "have",
    ("have", "got"),
    r"\bI\s+(?:also\s+|now\s+|still\s+|already\s+)?(?P<neg>do\s+not\s+)?(?:have\s+got|have|own)\s+"
    rf"(?P<v>(?:a|an|\d+|{_alt(_NUMBER_WORDS)}|no)\s+[^.!?;:()]+|(?:kids|children|pets|grandkids|grandchildren|twins)\b[^.!?;:()]*)",
)
def _r_have(m: re.Match[str], _: str) -> list[_Draft]:
    raw = m["v"]
    named = re.search(rf"\b(?:named|called)\s+(?P<n>{_NAMES})", raw)
    head_words = " ".join(raw.split()[:5])
    if not named and not re.search(_HAVE_NOUN, head_words, _I):
        return []
    if named:
        names = _valid_names(named["n"])
        if not names:
            return []
        raw = raw[: named.start()] + named.group().split()[0] + " " + names
        v = _clean_value(raw, cut=False, max_words=14)
    else:
        v = _clean_value(raw, max_words=14)
    if not v or re.match(r"(?:a|an)\s+(?:lot|bit|little|ton|great|good|blast|feeling|question|idea)\b", v, _I):
        return []
    cat = "relationships" if re.search(rf"\b(?:{_alt(_REL_FORMS)})\b", v, _I) else "other"
    return [_Draft(f"{_S} {'does not have' if m['neg'] else 'has'}", v, category=cat)]


@_rule(
    "adopted",
    ("adopt", "got", "rescued", "bought"),
    rf"\bI\s+(?:just\s+|recently\s+|finally\s+)?(?P<verb>adopted|got|rescued|bought)\s+"
    rf"(?P<v>(?:a|an|\d+|{_alt(_NUMBER_WORDS)})\s+(?:new\s+|little\s+|baby\s+|rescue\s+)?(?:[\w-]+\s+)?"
    rf"(?:{_alt([*_PETS, 'dogs', 'cats', 'puppies', 'kittens'])})\b[^.!?;:()]*)",
)
def _r_adopted(m: re.Match[str], before: str) -> list[_Draft]:
    v = _clean_value(m["v"], max_words=14)
    if not v:
        return []
    when = _fronted_date(before) if not _DATE_RE.search(v) else None
    return [_Draft(f"{_S} {m['verb'].lower()}", v, f" {_lower_relative(when.group())}" if when else "", "pets")]


_LOVE_VERBS = {
    "love": "loves", "adore": "adores", "hate": "hates", "despise": "despises", "detest": "detests",
    "loathe": "loathes", "cannot stand": "cannot stand", "can not stand": "cannot stand", "prefer": "prefers",
    "like": "dislikes", "am obsessed with": "is obsessed with", "am passionate about": "is passionate about",
    "am really into": "is into", "am so into": "is into", "am into": "is into",
}  # fmt: skip
_LOVE_SKIP = re.compile(
    r"^(?:the\s+(?:photo|pic|picture|pics|photos|pictures|sound|look|vibe|name|energy|story|message|colou?rs?|"
    r"feeling|painting|one|way|idea|thought|support|advice|pic|shot|view|sight)|to\s+(?:hear|see|know|help|chat|talk)"
    r"|not\b|being\s+a\s+part|it\b|hearing|seeing|reading\s+about)",
    _I,
)


@_rule(
    "love",
    (
        "love",
        "adore",
        "hate",
        "despise",
        "detest",
        "loathe",
        "stand",
        "prefer",
        "like",
        "obsessed",
        "passionate",
        "into",
    ),
    r"\bI\s+(?:(?:really|absolutely|truly|just|totally|so|also|genuinely|honestly|seriously|still|definitely)\s+)*"
    rf"(?P<neg>do\s+not\s+)?(?P<verb>{_alt(_LOVE_VERBS)})\s+{_VAL}",
)
def _r_love(m: re.Match[str], _: str) -> list[_Draft]:
    verb = _SPACES.sub(" ", m["verb"].lower())
    if (verb == "like") != bool(m["neg"]):
        return []  # plain "I like X" is too weak; "I don't love X" is not a stance
    if _LOVE_SKIP.match(m["v"].strip()) or (verb != "prefer" and re.match(r"the\b", m["v"].strip(), _I)):
        # "I love the colours!" reacts to something shown; a standing preference names its object.
        return []
    return _one(f"{_S} {_LOVE_VERBS[verb]}", m["v"], "preferences", max_words=12)


@_rule(
    "favorite",
    ("favorite", "favourite", "fave", "fav"),
    r"\bmy\s+(?:all[- ]time\s+|absolute\s+|new\s+)?(?:favou?rite|fave|fav)\s+(?P<k>[a-z][\w' -]{0,30}?)\s+"
    r"(?P<be>is|are)\s+" + _VAL,
)
def _r_favorite(m: re.Match[str], _: str) -> list[_Draft]:
    k = m["k"].strip().lower()
    if k in {"part", "thing about it", "moment", "bit", "one"}:
        return []
    return _one(f"{_S}'s favorite {k} {m['be'].lower()}", m["v"], "preferences", max_words=12)
