"""Rules for who the speaker is: name, age, identity adjectives, occupation nouns, health."""

from __future__ import annotations

import re

from memlane.formation.offline.drafts import _clean_value, _Draft, _lower_relative, _one, _registry, _Rule, _valid_names
from memlane.formation.offline.lexicon import (
    _ADJ_CLASS,
    _ADJECTIVES,
    _ADV,
    _CONDITIONS,
    _DATE_RE,
    _DEGREE_WORDS,
    _HEALTH_ADJ,
    _I,
    _NAME,
    _NATIONALITY,
    _NOT_NAMES,
    _VAL,
    _alt,
)
from memlane.formation.offline.lexicon import _SPEAKER as _S
from memlane.formation.offline.text import _SPACES

_RULES: list[_Rule] = []
_rule = _registry(_RULES)


@_rule("name", ("name",), rf"\bmy\s+(?:full\s+|real\s+|first\s+)?name\s+is\s+(?:now\s+)?(?P<v>{_NAME})")
def _r_name(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    return [_Draft(f"{_S}'s name is {name}", category="name", own_label=True, learn=name)] if name else []


@_rule("introduce", ("i am",), rf"^(?:(?:hi|hello|hey)\b[\s,!]*)?I\s+am\s+(?P<v>{_NAME})\s*[.!]?$")
def _r_introduce(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    if not name or name.lower() in _NOT_NAMES:
        return []
    return [_Draft(f"{_S}'s name is {name}", category="name", own_label=True, learn=name)]


@_rule("call_me", ("call me",), rf"\b(?:please\s+|you\s+can\s+|just\s+)?call\s+me\s+(?P<v>{_NAME})")
def _r_call_me(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    return [_Draft(f"{_S} prefers to be called {name}", category="name")] if name else []


@_rule(
    "age",
    ("i am",),
    r"\bI\s+am\s+(?:now\s+|just\s+)?(?P<v>\d{1,3})(?:\s*(?:years?\s+old|yrs?\s+old|y/?o))?(?=\s*(?:$|[,.!]|and\b|but\b|so\b|now\b))",
)
def _r_age(m: re.Match[str], _: str) -> list[_Draft]:
    return [_Draft(f"{_S} is {int(m['v'])} years old", category="age")] if 0 < int(m["v"]) <= 120 else []


@_rule("turned", ("turned",), r"\bI\s+(?:just\s+|recently\s+)?turned\s+(?P<v>\d{1,3})\b(?P<t>[^.!?;]*)")
def _r_turned(m: re.Match[str], _: str) -> list[_Draft]:
    when = _DATE_RE.search(m["t"])
    return [_Draft(f"{_S} turned {m['v']}", tail=f" {_lower_relative(when.group())}" if when else "", category="age")]


@_rule(
    "is_adjective",
    ("i am",),
    rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+|no\s+longer\s+)?{_ADV}(?:(?:a|an)\s+)?"
    rf"(?P<v>{_alt(_ADJECTIVES)}|{_NATIONALITY})\b(?!-)(?=\s*(?:$|[,.!;]|(?:and|but|so|now|too|since|for|because|as|"
    r"though|lol|haha|myself|anymore|any\s+more|these\s+days)\b))",
)
def _r_is_adjective(m: re.Match[str], _: str) -> list[_Draft]:
    v = m["v"] if m["v"][0].isupper() and m["v"] != "I" else m["v"].lower()
    neg = " not" if m["neg"] else ""
    cls = _ADJ_CLASS.get(v.lower(), "")
    cat = "health" if cls == "diet" or v.lower() in _HEALTH_ADJ else "relationships" if cls == "marital" else "identity"
    return [_Draft(f"{_S} is{neg} {v}", category=cat)]


@_rule(
    "married_to",
    ("married", "engaged", "dating"),
    rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+)?(?P<r>married\s+to|engaged\s+to|dating)\s+(?P<v>{_NAME})",
)
def _r_married_to(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    neg = " not" if m["neg"] else ""
    return [_Draft(f"{_S} is{neg} {m['r'].lower()} {name}", category="relationships")] if name else []


@_rule("is_a", ("i am a",), rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+)?(?P<v>(?:a|an)\s+(?!{_DEGREE_WORDS}\b)[^.!?;:()]+)")
def _r_is_a(m: re.Match[str], _: str) -> list[_Draft]:
    neg = " not" if m["neg"] else ""
    v = _clean_value(m["v"], max_words=12)
    if not v:
        return []
    if re.search(r"\b(?:fan|lover|enthusiast|addict|fanatic|believer|supporter)$", v, _I):
        return []  # "I'm a huge fan." of what was said before
    cat = "preferences" if re.search(r"\b(?:fan|lover|enthusiast|addict|fanatic)\b", v, _I) else "work"
    return [_Draft(f"{_S} is{neg}", v, category=cat)]


@_rule(
    "allergic",
    ("allerg",),
    rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+)?(?:(?:severely|very|highly|deathly|super|mildly|slightly|so)\s+)?allergic\s+to\s+{_VAL}",
)
def _r_allergic(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} is{' not' if m['neg'] else ''} allergic to", m["v"], "health")


@_rule("allergy_to", ("allergy",), rf"\bI\s+have\s+(?:a|an)\s+(?:severe\s+|mild\s+)?allergy\s+to\s+{_VAL}")
def _r_allergy_to(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} is allergic to", m["v"], "health")


@_rule(
    "condition", ("i have", "i also have", "i still have"), rf"\bI\s+(?:also\s+|still\s+)?have\s+(?P<v>{_CONDITIONS})\b"
)
def _r_condition(m: re.Match[str], _: str) -> list[_Draft]:
    return [_Draft(f"{_S} has {_SPACES.sub(' ', m['v'])}", category="health")]
