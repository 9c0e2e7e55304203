"""Facts read back as ``SUBJECT RELATION VALUE`` claims, and the dedup decision built on them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memlane.formation.offline.lexicon import _ADJ_CLASS, _I, _MULTI_HEADS
from memlane.formation.offline.text import _QUOTES, _content, _normalise
from memlane.formation.schemas import Decision, DedupItem, word_count

_CLAIM_RELATIONS: list[tuple[str, str, bool]] = [
    (r"is\s+no\s+longer\s+from|is\s+not\s+from", "origin", False),
    (r"is\s+from|comes\s+from", "origin", True),
    (r"is\s+not\s+allergic\s+to", "allergic", False),
    (r"is\s+allergic\s+to", "allergic", True),
    (r"is\s+not\s+married\s+to", "spouse", False),
    (r"is\s+married\s+to", "spouse", True),
    (r"is\s+dating", "dating", True),
    (r"are\s+named|is\s+named|is\s+called|goes\s+by|prefers\s+to\s+be\s+called", "named", True),
    (r"does\s+not\s+live\s+(?:in|at|on|near)", "residence", False),
    (
        r"lives\s+(?:in|at|on|near)|is\s+living\s+in|is\s+based\s+in|resides\s+in|moved\s+to|has\s+lived\s+in|"
        r"is\s+moving\s+to",
        "residence",
        True,
    ),
    (r"was\s+born\s+(?:in|at)", "birthplace", True),
    (r"was\s+born\s+on", "birthdate", True),
    (r"grew\s+up\s+(?:in|on|near|around)", "grew_up", True),
    (r"does\s+not\s+work\s+(?:at|for)", "employer", False),
    (r"works\s+(?:at|for)|got\s+a\s+job\s+(?:at|for)|is\s+employed\s+(?:at|by)", "employer", True),
    (r"works\s+as|got\s+a\s+job\s+as", "job", True),
    (r"works\s+in", "field", True),
    (
        r"does\s+not\s+(?:like|love|enjoy)|dislikes|hates|despises|detests|loathes|cannot\s+stand|can\s+not\s+stand",
        "likes",
        False,
    ),
    (
        r"loves|adores|likes|enjoys|is\s+obsessed\s+with|is\s+passionate\s+about|is\s+into|"
        r"is\s+an?\s+(?:big\s+|huge\s+)?fan\s+of",
        "likes",
        True,
    ),
    (r"prefers", "prefers", True),
    (r"does\s+not\s+have|has\s+no", "has", False),
    (r"has", "has", True),
    (r"does\s+not\s+speak", "speaks", False),
    (r"speaks", "speaks", True),
    (r"does\s+not\s+eat|never\s+eats|no\s+longer\s+eats", "eats", False),
    (r"eats", "eats", True),
    (r"does\s+not\s+drink|never\s+drinks|no\s+longer\s+drinks", "drinks", False),
    (r"drinks", "drinks", True),
    (r"does\s+not\s+smoke|never\s+smokes|no\s+longer\s+smokes", "smokes", False),
    (r"smokes", "smokes", True),
    (r"studies|is\s+studying|is\s+majoring\s+in", "studies", True),
    (r"is\s+no\s+longer|is\s+not|are\s+not", "is", False),
    (r"is|are", "is", True),
]
_CLAIM_RE = re.compile(
    r"\s(?:" + "|".join(f"(?P<r{i}>{p})" for i, (p, _, _) in enumerate(_CLAIM_RELATIONS)) + r")\s+(?P<value>.+)$", _I
)
_FUNCTIONAL_KEYS = frozenset(
    {"residence", "origin", "birthplace", "birthdate", "grew_up", "employer", "job", "spouse", "dating", "named", "age"}
)
_SUBJECT_SYNONYMS = [
    (re.compile(r"\be-?mail(?:\s+address)?\b"), "email"),
    (re.compile(r"\b(?:phone|cell|mobile|telephone)(?:\s+number)?\b"), "phone"),
    (re.compile(r"\bfavourite\b"), "favorite"),
    (re.compile(r"\bbday\b"), "birthday"),
    (re.compile(r"^the\s+"), ""),
    (re.compile(r"'s\s+(?:new|current|updated)\s+"), "'s "),  # "Sam's new email" is Sam's email
]
_ARTICLES = re.compile(r"^(?:a|an|the)\s+", _I)
_NEGATION = re.compile(r"\b(?:not|no|never|cannot|dislikes?|hates?)\b|n't\b|\bno\s+longer\b", _I)


@dataclass(frozen=True, slots=True)
class _Claim:
    subject: str
    key: str
    positive: bool
    value: str
    functional: bool

    @property
    def value_tokens(self) -> frozenset[str]:
        return _content(self.value)


def _parse_claim(text: str) -> _Claim | None:
    """Read ``SUBJECT RELATION VALUE`` back from a fact (the grammar extraction writes)."""
    m = _CLAIM_RE.search(text.translate(_QUOTES).strip().rstrip("."))
    if not m or m.lastgroup is None:
        return None
    idx = next(i for i in range(len(_CLAIM_RELATIONS)) if m[f"r{i}"] is not None)
    _, key, positive = _CLAIM_RELATIONS[idx]
    subject = text[: m.start()].strip().lower()
    if not subject or word_count(subject) > 6:
        return None
    for pat, rep in _SUBJECT_SYNONYMS:
        subject = pat.sub(rep, subject)
    value = _normalise(_ARTICLES.sub("", m["value"].strip()))
    functional = key in _FUNCTIONAL_KEYS
    if key == "named" and "'s " in subject and subject.rsplit("'s ", 1)[1].split()[-1] in _MULTI_HEADS:
        functional = False  # one may have two sisters, named differently
    if key == "is":
        head = value.split()[0] if value else ""
        if re.fullmatch(r"\d{1,3} years old", value):
            key, functional = "age", True
        elif head in _ADJ_CLASS or value in _ADJ_CLASS:
            key, functional = "is:" + _ADJ_CLASS.get(value, _ADJ_CLASS.get(head, "")), True
        elif "'s " in subject:
            attr = subject.rsplit("'s ", 1)[1]
            functional = attr.split()[-1] not in _MULTI_HEADS
            key = "attribute"
    return _Claim(subject, key, positive, value, functional)


def _same_slot(a: _Claim, b: _Claim) -> bool:
    return a.subject == b.subject and a.key == b.key


def _contradicts(new: _Claim, old: _Claim) -> bool:
    """Opposite polarity about the same thing: "loves pizza" / "hates pizza", "is vegetarian" / "is not"."""
    if not _same_slot(new, old) or new.positive == old.positive:
        return False
    neg, pos = (new, old) if not new.positive else (old, new)
    return neg.value == pos.value or (bool(neg.value_tokens) and neg.value_tokens <= pos.value_tokens)


def _supersedes(new: _Claim, old: _Claim) -> bool:
    """Same single-valued slot, new value: "lives in Lisbon" -> "lives in Berlin"."""
    return (
        _same_slot(new, old)
        and new.functional
        and new.positive == old.positive
        and new.value != old.value
        and not (new.value_tokens and new.value_tokens <= old.value_tokens)
    )


def _has_negation(text: str) -> bool:
    return bool(_NEGATION.search(text))


def _decide_one(item: DedupItem) -> Decision:
    """Opposite polarity: DELETE; new value of a single-valued slot: UPDATE; exact duplicate or
    covered: NONE.

    A contradiction wins over an exact duplicate: "Sam's email is b@x" said again while an older
    value "Sam's email is a@x" is also stored (added back by hand after it was superseded) is a
    DELETE of the old value; the store keeps the identical fact and stores nothing twice."""
    new = item.content
    key = _normalise(new)
    cands = item.candidates
    duplicate = next((c for c in cands if _normalise(c.content) == key), None)
    claim = _parse_claim(new)
    parsed = [(c, _parse_claim(c.content)) for c in cands if c is not duplicate]
    if claim is not None:
        for c, old in parsed:
            if old is not None and _contradicts(claim, old):
                return Decision(index=item.index, event="DELETE", fact_id=c.id)
        for c, old in parsed:
            if old is not None and _supersedes(claim, old):
                if duplicate is not None:
                    return Decision(index=item.index, event="DELETE", fact_id=c.id)
                return Decision(index=item.index, event="UPDATE", fact_id=c.id, text=new)
    if duplicate is not None:
        return Decision(index=item.index, event="NONE", fact_id=duplicate.id)
    tokens = _content(new)
    negated = _has_negation(new)
    for c in cands:
        if _has_negation(c.content) != negated:
            continue
        if (tokens and tokens <= _content(c.content)) or c.similarity >= 0.95:
            return Decision(index=item.index, event="NONE", fact_id=c.id)
    return Decision(index=item.index, event="ADD")
