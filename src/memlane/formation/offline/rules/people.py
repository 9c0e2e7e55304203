"""Rules for the people around the speaker: relatives and friends by name, others' details."""

from __future__ import annotations

import re

from memlane.formation.offline.drafts import _Draft, _is_plural_rel, _one, _registry, _rel_name, _Rule, _valid_names
from memlane.formation.offline.lexicon import (
    _ADJECTIVES,
    _DEGREE_WORDS,
    _EMAIL,
    _I,
    _NAME,
    _NAMES,
    _NATIONALITIES,
    _NATIONALITY,
    _REL,
    _VAL,
    _alt,
)
from memlane.formation.offline.lexicon import _SPEAKER as _S
from memlane.formation.offline.text import _SPACES

_RULES: list[_Rule] = []
_rule = _registry(_RULES)


_REL_VERB_TAIL = re.compile(
    rf"""^(?:
      (?:'s\s+name\s+is|(?:'s|\s+is|\s+are)\s+(?:called|named))\s+(?P<name>{_NAMES})
    | 's\s+(?P<k>birthday|e-?mail(?:\s+address)?|phone(?:\s+number)?|number|address)\s+is\s+(?P<kv>[^!?;]+)
    | \s+(?:is|are)\s+(?P<bare>{_NAMES})\s*(?=$|[,.!])
    | \s+(?:is|are)\s+(?P<neg>not\s+)?(?P<attr>(?:a|an)\s+(?!{_DEGREE_WORDS}\b)[^.!?;:()]+|(?:{_alt(_ADJECTIVES)})\b
        |{_NATIONALITY}|\d{{1,3}}(?:\s+years?\s+old)?)(?=\s*(?:$|[,.!]|and\b|but\b|so\b|too\b|now\b))
      | \s+(?:is|are)\s+(?P<neg2>not\s+)?(?P<allergy>allergic\s+to\s+[^.!?;:()]+)
    | \s+(?P<verb>lives\s+(?:in|at|near)|works\s+(?:at|for|as|in)|moved\s+(?:to|from)|was\s+born\s+(?:in|on)
        |is\s+from|speaks|just\s+turned|turned)\s+(?P<vv>[^.!?;:()]+)
    )""",
    _I | re.VERBOSE,
)


@_rule(
    "my_relative",
    ("my",),
    rf"\bmy\s+{_REL}(?:\s*,?\s+(?P<n>{_NAMES})\s*,?)?(?P<rest>(?:'s|\s+(?:is|are|lives|works|moved|was|speaks|just|turned))\b[^.!?;]*)",
)
def _r_my_relative(m: re.Match[str], _: str) -> list[_Draft]:
    rel = _rel_name(m["r"])
    t = _REL_VERB_TAIL.match(m["rest"])
    if not t:
        return []
    subj = f"{_S}'s {rel}"
    out: list[_Draft] = []
    if t["name"] or t["bare"]:
        raw = t["name"] or t["bare"]
        if t["bare"] and raw in _NATIONALITIES:
            return [_Draft(f"{subj} is {raw}", category="relationships")]
        names = _valid_names(raw)
        if names:
            out.append(
                _Draft(f"{subj} {'are' if _is_plural_rel(rel) else 'is'} named {names}", category="relationships")
            )
    elif t["k"]:
        k = re.sub(r"e-?mail(?:\s+address)?", "email", t["k"].lower())
        k = "phone number" if k in {"phone", "number"} else k
        out += _one(f"{subj}'s {k} is", t["kv"], "contact" if k != "birthday" else "relationships", cut=k != "address")
    elif t["attr"] or t["allergy"]:
        a = (t["attr"] or t["allergy"]).strip()
        if re.fullmatch(r"\d{1,3}", a):
            a += " years old"
        neg = " not" if t["neg"] or t["neg2"] else ""
        out += _one(f"{subj} {'are' if _is_plural_rel(rel) else 'is'}{neg}", a, "relationships", max_words=12)
    elif t["verb"]:
        verb = _SPACES.sub(" ", t["verb"].lower())
        if verb in {"is from", "speaks"} and not re.match(r"\s*(?-i:[A-Z])", t["vv"]):
            return []
        out += _one(f"{subj} {verb}", t["vv"], "relationships", max_words=12)
    if m["n"] and out:
        names = _valid_names(m["n"])
        if names:
            out = [_Draft(d.head.replace(subj, f"{subj} {names}", 1), d.value, d.tail, d.category) for d in out]
    return out


@_rule("my_relative_named", ("my",), rf"\bmy\s+{_REL}\s*,?\s+(?P<n>{_NAMES})\b(?!')(?!,?\s+and\s+I\b)")
def _r_my_relative_named(m: re.Match[str], _: str) -> list[_Draft]:
    names = _valid_names(m["n"])
    if not names:
        return []
    rel = _rel_name(m["r"])
    plural = " and " in names or _is_plural_rel(rel)
    return [_Draft(f"{names} {'are' if plural else 'is'} {_S}'s {rel}", category="relationships")]


@_rule("named_is_my", (" my ",), rf"(?<![\w'])(?P<n>{_NAMES})\s+(?:is|are)\s+my\s+{_REL}")
def _r_named_is_my(m: re.Match[str], _: str) -> list[_Draft]:
    names = _valid_names(m["n"])
    if not names:
        return []
    rel = _rel_name(m["r"])
    return [_Draft(f"{names} {'are' if ' and ' in names else 'is'} {_S}'s {rel}", category="relationships")]


@_rule("i_am_names_rel", ("'s",), rf"\bI\s+am\s+(?P<n>{_NAME})'s\s+{_REL}")
def _r_i_am_names_rel(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["n"])
    return [_Draft(f"{_S} is {name}'s {_rel_name(m['r'])}", category="relationships")] if name else []


@_rule(
    "third_party",
    ("'s",),
    rf"(?<![\w'])(?P<n>{_NAME})'s\s+(?P<k>birthday|bday|e-?mail(?:\s+address)?|phone(?:\s+number)?|address|full\s+name|"
    r"last\s+name|surname|nickname|favou?rite\s+[a-z][\w -]{0,20}?)\s+is\s+" + _VAL,
)
def _r_third_party(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["n"])
    if not name or name != m["n"]:
        return []
    k = _SPACES.sub(" ", m["k"].lower()).replace("bday", "birthday").replace("favourite", "favorite")
    cat = "contact" if re.search("mail|phone|address", k) else "preferences" if "favorite" in k else "relationships"
    raw = m["v"]
    if "mail" in k:
        em = re.match(rf"\s*({_EMAIL})", raw)
        return [_Draft(f"{name}'s email is {em.group(1)}", category=cat)] if em else []
    return _one(f"{name}'s {k} is", raw, cat, cut="address" not in k, max_words=14)
