"""Consolidation by merging: newest lines first, duplicates and replaced single-valued facts dropped."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memlane.formation.offline.claims import _Claim, _parse_claim
from memlane.formation.offline.lexicon import _I
from memlane.formation.offline.text import _contained, _content, _normalise
from memlane.formation.schemas import ConsolidationInput, word_count
from memlane.retrieval.text import words

_VERSION_RE = re.compile(r"^\s*VERSION:\s*\d+\s*$", _I)
_HEADING_RE = re.compile(r"^\s*\[[^\[\]\n]{1,60}\]\s*$")
_GENERIC_HEADING_WORDS = frozenset(
    {"current", "recent", "other", "notes", "misc", "general", "key", "and", "the", "info"}
)
_BULLET_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(slots=True)
class _Item:
    line: str
    section: int
    age: int
    tokens: frozenset[str]
    claim: _Claim | None


def _section_for(text: str, headings: list[str]) -> int | None:
    toks = {t[:6] for t in _content(text)}
    for i, h in enumerate(headings):
        hw = {w[:6] for w in words(h) if w not in _GENERIC_HEADING_WORDS and len(w) > 2}
        if hw & toks:
            return i
    return None


def _consolidate(inp: ConsolidationInput) -> str:
    """The current blob plus the reflections, newest kept first, within ``word_limit`` and under their headings."""
    header = f"VERSION: {inp.version}"
    lines = inp.current.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines and _VERSION_RE.match(lines[0]):
        lines = lines[1:]
    headings: list[str] = []
    items: list[_Item] = []
    current_section = -1
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if _HEADING_RE.match(line):
            headings.append(line)
            current_section = len(headings) - 1
            continue
        items.append(_Item(line, current_section, len(items), _content(line), _parse_claim(_BULLET_RE.sub("", line))))
    has_sections = bool(headings)
    recent: int | None = None
    for refl in inp.reflections:
        for raw in refl.splitlines():
            text = raw.strip()
            if not text or _VERSION_RE.match(text) or _HEADING_RE.match(text):
                continue
            line = text if _BULLET_RE.match(text) else f"- {text}"
            section = -1
            if has_sections:
                match = _section_for(text, headings)
                if match is None:
                    if recent is None:
                        existing = [i for i, h in enumerate(headings) if h.strip().upper() == "[RECENT]"]
                        if existing:
                            recent = existing[0]
                        else:
                            headings.append("[RECENT]")
                            recent = len(headings) - 1
                    match = recent
                section = match
            items.append(_Item(line, section, len(items), _content(line), _parse_claim(_BULLET_RE.sub("", text))))
    # Newest first: drop older duplicates, then keep what fits.
    kept: list[_Item] = []
    seen_keys: set[str] = set()
    slots: set[tuple[str, str]] = set()
    for it in sorted(items, key=lambda x: -x.age):
        key = _normalise(_BULLET_RE.sub("", it.line))
        if not key or key in seen_keys:
            continue
        if any(_contained(it.tokens, k.tokens, 0.9) for k in kept):
            continue
        if it.claim is not None and it.claim.functional and (it.claim.subject, it.claim.key) in slots:
            continue
        seen_keys.add(key)
        if it.claim is not None and it.claim.functional:
            slots.add((it.claim.subject, it.claim.key))
        kept.append(it)
    budget = inp.word_limit - word_count(header)
    chosen: list[_Item] = []
    opened: set[int] = set()
    for it in kept:  # newest first, greedily
        cost = word_count(it.line)
        if it.section >= 0 and it.section not in opened:
            cost += word_count(headings[it.section])
        if cost <= budget:
            budget -= cost
            chosen.append(it)
            if it.section >= 0:
                opened.add(it.section)
    out = [header]
    for section in [-1, *range(len(headings))]:
        members = sorted((it for it in chosen if it.section == section), key=lambda x: x.age)
        if not members:
            continue
        if section >= 0:
            out.append(headings[section])
        out.extend(it.line for it in members)
    return "\n".join(out)
