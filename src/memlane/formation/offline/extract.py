"""Extraction: turns -> sentences -> clauses -> rule matches (drafts) -> facts naming the speaker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

from memlane.formation.names import person_name
from memlane.formation.offline.claims import _contradicts, _parse_claim, _supersedes
from memlane.formation.offline.drafts import _Draft, _Rule, _valid_names
from memlane.formation.offline.language import _language
from memlane.formation.offline.lexicon import (
    _DATE_RE,
    _DETAIL_CUES,
    _GENERIC_AUTHORS,
    _I,
    _NAMES,
    _REL,
    _SPEAKER,
    _TOKEN,
)
from memlane.formation.offline.rules import _RULES
from memlane.formation.offline.text import (
    _SPACES,
    _TRAIL_PUNCT,
    _clauses,
    _content,
    _date_phrase,
    _expand,
    _has_relative_date,
    _is_hypothetical,
    _is_question,
    _normalise,
    _opens_clause,
    _sentences,
)
from memlane.formation.schemas import (
    MAX_FACT_WORDS,
    ExtractedFact,
    ExtractionInput,
    ExtractionReport,
    Turn,
    UnreadTurn,
    word_count,
)
from memlane.retrieval.text import words

# The word tables below keep their packed layout (the formatter skips them): one word a line, as the
# formatter would have them, makes a list of 60 words 60 lines long and no easier to read.

_FIRST_PERSON = re.compile(r"\b(?:I|my|me)\b|'s\s", _I)
_ASSISTANT_MARKER = re.compile(
    r"\b(?:you(?:\s+have)?\s+(?:mentioned|said|told\s+me|noted|shared|indicated|stated)|as\s+you\s+(?:mentioned|said)|"
    r"I\s+(?:remember|recall|know|noted|understand)|(?:since|given\s+that|because)(?=\s+you(?:r)?\s))"
    r"(?:\s+(?:that|earlier|before|previously))*[,\s]+",
    _I,
)
_TO_FIRST_PERSON = re.compile(r"\b(?:you\s+are|you\s+were|you\s+have|yourself|yours|your|you)\b", _I)
_FIRST_PERSON_MAP = {"you are": "I am", "you were": "I was", "you have": "I have", "yourself": "myself",
                     "yours": "mine", "your": "my", "you": "I"}  # fmt: skip


def _rules_for(clause: str, lead: str) -> Iterator[_Rule]:
    """Rules worth running on a clause: a trigger word is present (no triggers: a date is, ``lead`` included)."""
    low = clause.lower()
    dated: bool | None = None
    for rule in _RULES:
        if rule.triggers:
            if any(t in low for t in rule.triggers):
                yield rule
        else:
            if dated is None:
                dated = _DATE_RE.search(clause) is not None or _DATE_RE.search(lead) is not None
            if dated:
                yield rule


def _drafts(clause: str, lead: str = "") -> list[_Draft]:
    """Drafts of one clause; ``lead`` is the sentence before it (a fronted "Last week, ...")."""
    if not _FIRST_PERSON.search(clause) or _is_hypothetical(clause):
        return []
    out: list[_Draft] = []
    for rule in _rules_for(clause, lead):
        for m in rule.pattern.finditer(clause):
            before = lead + clause[: m.start()]
            if m.group()[:2] in ("I ", "i ") and not _opens_clause(before):
                continue
            out.extend(rule.build(m, before))
    return out


# Instructions such as "do not extract health details" block whole categories of drafts.
_INSTRUCTION_BLOCK = re.compile(
    r"\b(?:do\s+not|don't|never|no\s+longer|avoid|stop)\s+(?:extract(?:ing)?|stor(?:e|ing)|record(?:ing)?|"
    r"remember(?:ing)?|sav(?:e|ing)|keep(?:ing)?|captur(?:e|ing)|collect(?:ing)?)\s+(?P<what>[^.;\n]*)",
    _I,
)
_INSTRUCTION_CATEGORIES = {
    "email": "contact", "emails": "contact", "phone": "contact", "phones": "contact", "contact": "contact",
    "contacts": "contact", "address": "contact", "addresses": "contact", "preference": "preferences",
    "preferences": "preferences", "likes": "preferences", "dislikes": "preferences", "tastes": "preferences",
    "health": "health", "medical": "health", "diet": "health", "dietary": "health", "allergies": "health",
    "allergy": "health", "plans": "plans", "plan": "plans", "goals": "plans", "goal": "plans", "events": "events",
    "activities": "events", "relationships": "relationships", "family": "relationships", "relatives": "relationships",
    "location": "location", "locations": "location", "job": "work", "jobs": "work", "work": "work",
    "employer": "work", "occupation": "work", "career": "work", "age": "age", "ages": "age", "birthday": "age",
    "birthdays": "age", "name": "name", "names": "name", "pets": "pets", "languages": "languages",
    "education": "education", "school": "education", "studies": "education", "religion": "identity",
    "identity": "identity",
}  # fmt: skip


def _blocked_categories(instructions: str) -> frozenset[str]:
    """Categories an instruction like "do not extract health or contact details" rules out."""
    out: set[str] = set()
    for m in _INSTRUCTION_BLOCK.finditer(instructions):
        out.update(_INSTRUCTION_CATEGORIES[w] for w in words(m["what"]) if w in _INSTRUCTION_CATEGORIES)
    return frozenset(out)


def _extract(inp: ExtractionInput) -> ExtractionReport:
    """Facts of a batch: drafts of every turn, named once the whole batch is read (a name said late still counts)."""
    if not (inp.allow_user_scope or inp.allow_agent_scope):
        return ExtractionReport()
    scope: Literal["user", "agent"] = "user" if inp.allow_user_scope else "agent"
    blocked = _blocked_categories(inp.instructions) if inp.instructions else frozenset()
    default_user = (inp.user_name or "").strip() or "The user"
    labels: dict[str, str] = {}
    learned: dict[str, str] = {}
    found: list[tuple[str, _Draft, str, int]] = []
    unread: list[UnreadTurn] = []
    last_user_key: str | None = None
    authors = {t.author.strip() for t in inp.conversation if t.role == "user"}
    solo = len(authors - {a for a in authors if a.lower() in _GENERIC_AUTHORS}) <= 1
    for index, turn in enumerate(inp.conversation):
        if turn.role == "user":
            key = _speaker_key(turn, default_user, labels, solo=solo)
            last_user_key = key
            drafts, foreign, statement = _turn_drafts(turn.text)
        else:
            key = last_user_key or "\x01user"
            labels.setdefault(key, default_user)
            drafts, foreign = _assistant_drafts(turn.text)
            statement = False
        if foreign is not None:
            unread.append(
                UnreadTurn(
                    index=index,
                    event_id=turn.event_id,
                    role=turn.role,
                    reason=f"language not supported: {foreign}",
                    language=foreign,
                )
            )
        elif statement and not drafts:
            unread.append(UnreadTurn(index=index, event_id=turn.event_id, role=turn.role, reason="no pattern matched"))
        suffix = ""
        for d in drafts:
            if d.category in blocked:
                continue
            if d.learn and labels[key] == default_user and default_user == "The user":
                learned.setdefault(key, d.learn)
            if turn.at is not None and _has_relative_date(d.value + d.tail):
                suffix = f" (said on {_date_phrase(turn.at)})"
            else:
                suffix = ""
            found.append((key, d, suffix, index))
    facts: list[ExtractedFact] = []
    seen: dict[str, int] = {}
    for key, d, suffix, index in found:
        if d.learn and d.learn.casefold() == labels[key].casefold():
            continue  # "I'm Sam" said by Sam: "Sam's name is Sam" says nothing
        text = _render(d, labels[key] if d.own_label else learned.get(key, labels[key]), suffix)
        if text is None:
            continue
        norm = _normalise(text)
        if norm in seen:  # said again: one fact, every turn that said it is a source
            sources = facts[seen[norm]].sources
            if index not in sources:
                sources.append(index)
            continue
        seen[norm] = len(facts)
        # the turns it came from: the pipeline would otherwise guess them by word overlap
        # (facts x turns on the event loop); here it is exact and off the loop
        facts.append(ExtractedFact(content=text, scope=scope, sources=[index]))
    return ExtractionReport(facts=_drop_contained(_latest_wins(facts)), unread=unread)


def _speaker_key(turn: Turn, default_user: str, labels: dict[str, str], *, solo: bool) -> str:
    """The key of a user turn's speaker; ``labels`` gets the name facts will call them.

    An author that is an account id ("u_8f3a") is no subject: with one user speaking it is the
    user (their known name, else "The user"); among several speakers it stays their label."""
    author = turn.author.strip()
    name = person_name(author)
    if author.lower() in _GENERIC_AUTHORS or (solo and name is None):
        labels.setdefault("\x01user", default_user)
        return "\x01user"
    labels.setdefault(author, name or author)
    return author


# First person plural where what "we" do or have is the speaker's too: where we live, moved or
# are moving to, our family, pets and home ("we moved to Porto", "our dog is called Rex").
_WE = re.compile(
    r"\bwe\s+(?=(?:(?:now|currently|recently|just|finally|still|also|all|both)\s+)*(?:live|lived|reside|"
    r"moved|relocated|have\s+(?:been\s+living|lived)|are\s+(?:(?:now|currently|still)\s+)?(?:living|based|located|"
    r"moving|relocating|married|engaged)|got\s+(?:married|engaged)|have|own|adopted|rescued|got)\b)",
    _I,
)
_WE_ARE = re.compile(r"\bI(\s+(?:(?:now|currently|recently|just|finally|still|also|all|both)\s+)*)are\b", _I)
_OUR = re.compile(rf"\bour\s+(?={_REL}|(?:home\s+|new\s+)?address\b)", _I)
_STATEMENT = re.compile(r"\b(?:I|my|me|mine|we|our|us|ours)\b", _I)


def _as_speaker(clause: str) -> str:
    """Read "we live in / moved to / have ..." and "our dog ..." as the speaker's own ("I ...", "my ...")."""
    if "we" not in clause.lower() and "our" not in clause.lower():
        return clause
    out, n = _WE.subn("I ", clause)
    if n:
        out = _WE_ARE.sub(lambda m: f"I{m.group(1)}am", out)
    return _OUR.sub("my ", out)


# "My wife Lena and I live in Zurich", "Me and my sister run a bakery": the speaker with a
# companion. Read as "I live in Zurich with my wife Lena", so the fact keeps who they are with.
_COMPANION = rf"(?:my\s+{_REL}(?:\s*,?\s+(?P<n>{_NAMES}))?|(?P<bare>{_NAMES}))"
_WITH_ME = re.compile(
    rf"^(?P<pre>(?:(?:so|and|well|also|now|actually|btw|oh)\s*,?\s+)?)"
    rf"(?P<me>me\s+(?:and|&)\s+)?(?P<c>{_COMPANION})(?P<andi>\s*,?\s+(?:and|&)\s+(?:I|me))?\s+(?P<rest>[a-z][^,;]*)$",
    _I,
)
_PLURAL_BE = re.compile(r"^(?P<be>are|were)\s+(?P<next>\w+)", _I)
#: After "we are" / "we were", what a companion does with the speaker ("are moving to", "were in").
_SHARED_STATE = frozenset({"in", "at", "on", "based", "located", "staying", "visiting", "back", "going"})


def _with_companion(clause: str) -> str:
    """``<companion> and I <verb> ...`` as ``I <verb> ... with <companion>`` (the companion's "my"
    stays the speaker's). A shared state that is not an activity ("my wife and I are vegetarian")
    is read as the speaker's own, without the companion."""
    m = _WITH_ME.match(clause)
    if m is None or (m["me"] is None) == (m["andi"] is None):
        return clause
    if m["bare"] is not None and _valid_names(m["bare"]) is None:
        return clause
    companion = m["c"]
    rest = m["rest"].rstrip().rstrip(".!")
    be = _PLURAL_BE.match(rest)
    if be is not None:
        verb = "am" if be["be"].lower() == "are" else "was"
        rest = f"{verb}{rest[be.end('be') :]}"
        nxt = be["next"].lower()
        if not (nxt.endswith("ing") or nxt in _SHARED_STATE):
            return f"{m['pre']}I {rest}"
    with_at = re.search(r"\swith\s", rest, _I)
    if with_at is not None:  # "... with our kids": "... with my wife and our kids"
        return f"{m['pre']}I {rest[: with_at.end()]}{companion} and {rest[with_at.end() :]}"
    return f"{m['pre']}I {rest} with {companion}"


def _turn_drafts(text: str) -> tuple[list[_Draft], str | None, bool]:
    """A user turn's drafts, the language of a sentence it could not read (or None), and whether it made
    a first-person statement about a personal detail (home, work, contact, family, health...; not a
    question, not a hedge) that a rule should have read."""
    out: list[_Draft] = []
    foreign: str | None = None
    statement = False
    for sentence in _sentences(text):
        lang = _language(sentence)
        if lang is not None and lang != "en":
            foreign = foreign or lang  # the English rules would only misread it
            continue
        if _is_question(sentence):
            continue
        lead = ""
        for clause in _clauses(sentence):
            clause = _as_speaker(_with_companion(clause))
            if not statement and _STATEMENT.search(clause):
                cue = not _DETAIL_CUES.isdisjoint(_TOKEN.findall(clause.lower()))
                statement = cue and not _is_hypothetical(clause) and len(_content(clause)) >= 2
            out.extend(_drafts(clause, lead))
            lead += clause + ", "
    return out, foreign, statement


def _assistant_drafts(text: str) -> tuple[list[_Draft], str | None]:
    """Only what the assistant reports about the user ("You mentioned you're vegetarian"), and the
    language of a sentence it could not read (or None)."""
    out: list[_Draft] = []
    foreign: str | None = None
    for sentence in _sentences(text):
        lang = _language(sentence)
        if lang is not None and lang != "en":
            foreign = foreign or lang
            continue
        if _is_question(sentence):
            continue
        expanded = _expand(sentence)
        for m in _ASSISTANT_MARKER.finditer(expanded):
            rest = expanded[m.end() :]
            if not re.match(r"you(?:r)?\b", rest, _I):
                continue
            first = _TO_FIRST_PERSON.sub(lambda x: _FIRST_PERSON_MAP[_SPACES.sub(" ", x.group().lower())], rest)
            for clause in _clauses(first):
                out.extend(_drafts(clause))
            break
    return out, foreign


def _render(d: _Draft, name: str, suffix: str) -> str | None:
    def fill(s: str, start: bool) -> str:
        if not s:
            return s
        label = name
        if start and s.startswith(_SPEAKER):
            s = label + s[1:]
        lower = label[0].lower() + label[1:] if label == "The user" else label
        return s.replace(_SPEAKER, lower)

    head, value, tail = fill(d.head, True), fill(d.value, False), fill(d.tail, False)
    text = _SPACES.sub(" ", " ".join(p for p in (head, value) if p) + tail + suffix).strip()
    if word_count(text) <= MAX_FACT_WORDS:
        return text
    fixed = word_count(head) + word_count(tail) + word_count(suffix)
    room = MAX_FACT_WORDS - fixed
    if room <= 0 or not value:
        return None
    toks = value.split()[:room]
    for i in range(len(toks), 0, -1):
        if toks[i - 1].endswith(",") or (i < len(toks) and toks[i].lower() in {"and", "with", "for", "to", "in"}):
            short = _TRAIL_PUNCT.sub("", " ".join(toks[:i]))
            if _content(short):
                return _SPACES.sub(" ", f"{head} {short}{tail}{suffix}").strip()
    return None


def _latest_wins(facts: list[ExtractedFact]) -> list[ExtractedFact]:
    """Within a batch, a later fact replaces an earlier one it contradicts or gives a new value of a
    single-valued slot ("I'm allergic to shellfish" ... "I'm not allergic to shellfish anymore";
    "my email is a@x" ... "my new email is b@x"), as dedup would across batches. "Later" is the
    fact's last mention (a fact said again is as new as its last source)."""
    claims = [_parse_claim(f.content) for f in facts]
    when = [(max(f.sources, default=-1), i) for i, f in enumerate(facts)]
    drop: set[int] = set()
    for i, old in enumerate(claims):
        if old is None:
            continue
        for j, new in enumerate(claims):
            if j != i and new is not None and when[j] > when[i] and (_contradicts(new, old) or _supersedes(new, old)):
                drop.add(i)
                break
    return [f for i, f in enumerate(facts) if i not in drop]


def _drop_contained(facts: list[ExtractedFact]) -> list[ExtractedFact]:
    """Within a batch, drop a fact another fact of the same subject and relation already covers."""
    claims = [_parse_claim(f.content) for f in facts]
    groups: dict[tuple[str, str, bool], list[int]] = {}
    for i, c in enumerate(claims):
        if c is not None:
            groups.setdefault((c.subject, c.key, c.positive), []).append(i)
    drop: set[int] = set()
    for members in groups.values():
        for i in members:
            ti = _content(facts[i].content)
            for j in members:
                if i != j and j not in drop:
                    tj = _content(facts[j].content)
                    if ti < tj:
                        drop.add(i)
                        break
    return [f for i, f in enumerate(facts) if i not in drop]
