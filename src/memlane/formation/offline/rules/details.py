"""Rules for "my X is Y" details: contact details, personal attributes, goals."""

from __future__ import annotations

import re

from memlane.formation.offline.drafts import _Draft, _one, _registry, _Rule, _valid_names
from memlane.formation.offline.lexicon import _EMAIL, _I, _NAME, _PHONE, _VAL, _alt
from memlane.formation.offline.lexicon import _SPEAKER as _S
from memlane.formation.offline.text import _SPACES, _TRAIL_PUNCT
from memlane.formation.schemas import word_count

# The word tables below keep their packed layout (the formatter skips them): one word a line, as the
# formatter would have them, makes a list of 60 words 60 lines long and no easier to read.

_RULES: list[_Rule] = []
_rule = _registry(_RULES)

# "is", and the ways a changed detail is announced: "is now", "has changed to", "changed to".
_IS = r"(?:is(?:\s+now)?|(?:has\s+(?:now\s+)?|is\s+now\s+)?changed\s+to)"
# "my new email", "my current address": the same single-valued detail, so the fact names it plainly
# ("Sam's email is ...") and dedup updates the old value instead of adding a second one.
_NEW = r"(?:(?:new|current|updated)\s+)?"


@_rule(
    "email",
    ("mail",),
    rf"\bmy\s+{_NEW}(?P<q>(?:work|personal|school|business)\s+)?e-?mail(?:\s+address)?\s+{_IS}\s+(?P<v>{_EMAIL})",
)
def _r_email(m: re.Match[str], _: str) -> list[_Draft]:
    q = (m["q"] or "").lower()
    return [_Draft(f"{_S}'s {q}email is {m['v'].rstrip('.')}", category="contact")]


@_rule(
    "phone",
    ("phone", "number", "cell", "mobile", "whatsapp"),
    rf"\bmy\s+{_NEW}(?P<q>(?:work|personal|home|cell|mobile)\s+)?(?:phone(?:\s+number)?|cell(?:\s+number)?|mobile"
    rf"(?:\s+number)?|telephone(?:\s+number)?|number|whatsapp)\s+{_IS}\s+(?P<v>{_PHONE})",
)
def _r_phone(m: re.Match[str], _: str) -> list[_Draft]:
    q = (m["q"] or "").lower()
    return [_Draft(f"{_S}'s {q}phone number is {m['v'].strip()}", category="contact")]


@_rule(
    "address",
    ("address",),
    rf"\bmy\s+{_NEW}(?P<q>(?:home|work|mailing|shipping|postal)\s+)?address\s+{_IS}\s+(?P<v>[^!?;\n]+)",
)
def _r_address(m: re.Match[str], _: str) -> list[_Draft]:
    v = _TRAIL_PUNCT.sub("", m["v"]).strip()
    q = (m["q"] or "").lower()
    return [_Draft(f"{_S}'s {q}address is", v, category="contact")] if v and word_count(v) <= 20 else []


_ATTRS = {
    "birthday": "age", "bday": "age", "date of birth": "age", "hometown": "location", "home town": "location",
    "job": "work", "job title": "work", "profession": "work", "occupation": "work", "major": "education",
    "nickname": "name", "username": "contact", "handle": "contact", "website": "contact", "instagram": "contact",
    "twitter": "contact", "github": "contact", "blood type": "health", "zodiac sign": "identity",
    "star sign": "identity", "middle name": "name", "last name": "name", "surname": "name", "maiden name": "name",
    "pronouns": "identity", "native language": "languages", "first language": "languages",
    "mother tongue": "languages", "religion": "identity", "diet": "health",
}  # fmt: skip


@_rule(
    "attribute",
    tuple(a.split()[0] for a in _ATTRS),
    rf"\bmy\s+{_NEW}(?P<k>{_alt(_ATTRS)})\s+(?P<be>is|are)(?:\s+now)?\s+{_VAL}",
)
def _r_attribute(m: re.Match[str], _: str) -> list[_Draft]:
    k = _SPACES.sub(" ", m["k"].lower()).replace("bday", "birthday")
    return _one(f"{_S}'s {k} {m['be'].lower()}", m["v"], _ATTRS[k if k in _ATTRS else "birthday"], max_words=12)


@_rule(
    "changed_my",
    ("changed", "updated", "switched"),
    r"\bI\s+(?:have\s+)?(?:(?:just|recently|finally|also|now|officially)\s+)?(?:changed|updated|switched)\s+my\s+"
    rf"(?:(?:(?P<eq>work|personal|school|business)\s+)?e-?mail(?:\s+address)?\s+to\s+(?P<ev>{_EMAIL})"
    rf"|(?:(?P<pq>work|personal|home|cell|mobile)\s+)?(?:phone|cell|mobile|telephone|number)(?:\s+number)?\s+to\s+"
    rf"(?P<pv>{_PHONE})"
    r"|(?:(?P<aq>home|work|mailing|shipping|postal)\s+)?address\s+to\s+(?P<av>[^!?;\n]+)"
    rf"|(?:full\s+|first\s+|legal\s+)?name\s+to\s+(?P<nv>{_NAME})"
    rf"|(?P<k>{_alt(_ATTRS)})\s+to\s+{_VAL})",
)
def _r_changed_my(m: re.Match[str], _: str) -> list[_Draft]:
    """ "I changed my email / number / address / name / job title to X": the detail's new value."""
    if m["ev"]:
        q = f"{m['eq'].lower()} " if m["eq"] else ""
        return [_Draft(f"{_S}'s {q}email is {m['ev'].rstrip('.')}", category="contact")]
    if m["pv"]:
        q = f"{m['pq'].lower()} " if m["pq"] else ""
        return [_Draft(f"{_S}'s {q}phone number is {m['pv'].strip()}", category="contact")]
    if m["av"]:
        v = _TRAIL_PUNCT.sub("", m["av"]).strip()
        q = f"{m['aq'].lower()} " if m["aq"] else ""
        return [_Draft(f"{_S}'s {q}address is", v, category="contact")] if v and word_count(v) <= 20 else []
    if m["nv"]:
        name = _valid_names(m["nv"])
        return [_Draft(f"{_S}'s name is {name}", category="name", own_label=True, learn=name)] if name else []
    k = _SPACES.sub(" ", m["k"].lower()).replace("bday", "birthday")
    return _one(f"{_S}'s {k} is", m["v"], _ATTRS[k if k in _ATTRS else "birthday"], max_words=12)


@_rule(
    "goal",
    ("goal", "dream", "plan", "aim", "ambition", "resolution", "mission"),
    r"\bmy\s+(?:big\s+|main\s+|ultimate\s+|long-term\s+|biggest\s+|new\s+|current\s+)?(?P<k>goal|dream|plan|aim|ambition|"
    r"resolution|new\s+year'?s\s+resolution|mission)\s+(?P<f>for\s+[\w\s]{1,20}?\s+)?is\s+(?P<v>to\s+[^.!?;:()]+|[^.!?;:()]+)",
)
def _r_goal(m: re.Match[str], _: str) -> list[_Draft]:
    k = m["k"].lower()
    if re.search(r"\b(?:today|tonight|tomorrow|weekend)\b", (m["f"] or "") + m["v"], _I):
        return []  # a plan for tonight is session state, not a fact
    return _one(f"{_S}'s {k}{' ' + m['f'].strip() if m['f'] else ''} is", m["v"], "plans", max_words=16)
