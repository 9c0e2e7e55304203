"""Rules for plans, dated events and habits the speaker gave up."""

from __future__ import annotations

import re

from memlane.formation.offline.drafts import (
    _CUT,
    _Draft,
    _fronted_date,
    _lower_relative,
    _one,
    _registry,
    _rel_name,
    _Rule,
    _valid_names,
)
from memlane.formation.offline.lexicon import _DATE_RE, _I, _NAME, _REL, _VAL, _alt
from memlane.formation.offline.lexicon import _SPEAKER as _S
from memlane.formation.offline.text import _SPACES, _content

# The word tables below keep their packed layout (the formatter skips them): one word a line, as the
# formatter would have them, makes a list of 60 words 60 lines long and no easier to read.

_RULES: list[_Rule] = []
_rule = _registry(_RULES)


_SHORT_TERM = re.compile(r"today|tonight|this\s+(?:morning|afternoon|evening)", _I)
_PLAN_NO_DATE = {"planning", "plan", "intend", "aim", "aiming", "training", "saving", "decided"}
_PLAN_VERB = (
    r"(?P<aux>am\s+|have\s+|will\s+)?(?:(?:really|also|definitely|finally|still|now|just|currently|actually|seriously)"
    r"\s+)*(?P<verb>planning(?:\s+on|\s+to)?|plan(?:\s+on|\s+to)|hoping\s+to|hope\s+to|aiming\s+to|aim\s+to|intend\s+to|"
    r"want\s+to|going\s+to|about\s+to|getting|training\s+for|saving(?:\s+up)?\s+for|thinking\s+(?:of|about)|considering|"
    r"looking\s+forward\s+to|moving|starting|heading|flying|traveling|travelling|visiting|attending|running|taking|"
    r"having|launching|opening|applying|participating|competing|decided\s+to|be)"
)


@_rule(
    "plan",
    ("plan", "hop", "aim", "intend", "want", "going", "about to", "getting", "training", "saving", "thinking",
     "considering", "forward", "moving", "starting", "heading", "flying", "travel", "visiting", "attending",
     "running", "taking", "having", "launching", "opening", "applying", "participating", "competing", "decided",
     "will be"),
    rf"\bI\s+{_PLAN_VERB}\s+{_VAL}",
)  # fmt: skip
def _r_plan(m: re.Match[str], _: str) -> list[_Draft]:
    aux = (m["aux"] or "").strip().lower()
    verb = _SPACES.sub(" ", m["verb"].lower())
    first = verb.split()[0]
    gerund = first.endswith("ing") or first in {"going", "about", "looking"}
    if gerund != (aux == "am") and not (aux == "will" and verb == "be") and not (aux == "have" and first == "decided"):
        return []
    if aux == "" and first == "be":
        return []
    v = m["v"]
    dated = any(not _SHORT_TERM.fullmatch(d.group()) for d in _DATE_RE.finditer(v))
    strong = first in _PLAN_NO_DATE or (
        first in {"getting", "having", "moving"}
        and re.match(r"\s*(?:married|engaged|divorced|a\s+baby|to\s+(?-i:[A-Z]))", v, _I)
    )
    if not (dated or strong):
        return []
    if (
        first in {"going", "about"}
        and verb.endswith("to")
        and re.match(r"\s*(?:bed|sleep|be\s+(?:ok|fine|honest))", v, _I)
    ):
        return []
    if aux == "am":
        head = f"{_S} is {verb}"
    elif aux == "will":
        head = f"{_S} will be"
    elif first == "decided":
        head = f"{_S} decided to"
    else:
        head = f"{_S} {first}s{verb[len(first) :]}"
    return _one(head, v, "plans", max_words=16)


_EVENT_VERBS = [
    "went", "attended", "visited", "started", "joined", "finished", "completed", "graduated", "adopted", "bought",
    "got", "ran", "won", "took", "signed up for", "volunteered", "traveled", "travelled", "flew", "quit", "left",
    "married", "retired", "launched", "published", "released", "painted", "wrote", "received", "passed", "lost",
    "met", "celebrated", "organized", "organised", "hosted", "performed", "participated", "competed", "began",
    "learned", "learnt", "read", "watched", "created", "built", "opened", "climbed", "hiked", "drove", "became",
    "earned", "raised", "donated", "gave", "baked", "played", "camped", "applied", "enrolled", "registered", "spoke",
    "presented", "moved", "got married", "got engaged", "signed", "made", "tried", "taught", "bought", "sold",
]  # fmt: skip


_COMPLETE_EVENTS = frozenset({"got married", "got engaged", "retired", "graduated"})
"""Events that need no object: "I got married in 2019" is whole with its date."""


@_rule(
    "event",
    (),
    rf"(?:\bmy\s+{_REL}(?:\s*,?\s+(?P<n>{_NAME})\s*,?)?\s+and\s+)?\bI\s+(?:(?:just|recently|finally|also|actually|even|"
    rf"already|once|first)\s+)?(?P<verb>{_alt(_EVENT_VERBS)})\s+{_VAL}",
)
def _r_event(m: re.Match[str], lead: str) -> list[_Draft]:
    v = m["v"]
    in_value = _DATE_RE.search(v)
    before = _fronted_date(lead)
    if not in_value and not before:
        return []
    verb = _SPACES.sub(" ", m["verb"].lower())
    subj = _S
    if m["r"]:
        rel = _rel_name(m["r"])
        names = _valid_names(m["n"]) if m["n"] else None
        subj = f"{_S} and their {rel}" + (f" {names}" if names else "")
    tail = f" {_lower_relative(before.group())}" if before and not in_value else ""
    if in_value:
        # Keep the value up to (and including) its date even when a conjunction sits before it.
        cut = _CUT.search(v)
        if cut and cut.start() < in_value.start():
            v = v[: cut.start()]
            tail = "" if _DATE_RE.search(v) else f" {in_value.group()}"
    if not _content(_DATE_RE.sub(" ", v)) and verb not in _COMPLETE_EVENTS:
        return []  # "I took last summer": the object is elsewhere
    return _one(f"{subj} {verb}", v, "events", tail=tail, max_words=16)


@_rule(
    "abstain",
    ("not eat", "not drink", "not smoke", "never", "no longer"),
    r"\bI\s+(?P<neg>do\s+not|never|no\s+longer)\s+(?P<verb>eat|drink|smoke|drive)\b(?P<v>[^.!?;:()]*)",
)
def _r_abstain(m: re.Match[str], _: str) -> list[_Draft]:
    neg = _SPACES.sub(" ", m["neg"].lower())
    verb = m["verb"].lower()
    head = f"{_S} does not {verb}" if neg == "do not" else f"{_S} {neg} {verb}s"
    if not m["v"].strip():
        return [_Draft(head, category="health")]
    return _one(head, m["v"], "health", max_words=10)
