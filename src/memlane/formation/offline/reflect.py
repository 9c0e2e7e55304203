"""Reflections by selection: the conversation's sentences that carry agent, user and session memory."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from memlane.formation.offline.consolidate import _HEADING_RE, _VERSION_RE
from memlane.formation.offline.lexicon import _GENERIC_AUTHORS, _I
from memlane.formation.offline.text import _cap_words, _contained, _content, _expand, _is_question, _sentences
from memlane.formation.schemas import MAX_REFLECTION_WORDS, ReflectionInput, ReflectionOutput, ScopeMemory

_AGENT_CUES = re.compile(
    r"\b(?:we|the\s+team|our\s+team)\s+(?:just\s+|finally\s+|have\s+|had\s+)?(?:launched|shipped|released|deployed|"
    r"announced|finished|completed|signed|hired|raised|reached|migrated|decided)\b|\b(?:deadline|budget|milestone|"
    r"launch\s+date|release\s+date|roadmap|kickoff|go-live|sprint|phase\s+\d|version\s+\d|v\d+(?:\.\d+)+)\b",
    _I,
)
_RULE_CUES = re.compile(
    r"^(?:please\s+)?(?:always|never|do\s+not|don't|stop|avoid|keep\s+(?:it|answers|responses|replies)|be\s+(?:more\s+)?"
    r"(?:concise|brief|short|detailed|direct|formal|casual))\b|\bplease\s+(?:be|keep|use|do\s+not|don't|avoid|stop|"
    r"always|never|answer|reply|respond|write|call|send|format)\b|\b(?:no|without)\s+emojis?\b|\bI\s+(?:would\s+)?"
    r"prefer\s+(?:short|shorter|long|longer|concise|brief|detailed|bullet|bulleted|plain|simple|formal|casual|when|that|"
    r"if|answers|responses|replies|you)|\bI\s+like\s+it\s+when\s+you\b|\bcall\s+me\s+(?-i:[A-Z])|\bin\s+bullet\s+points\b|"
    r"\b(?:use|using)\s+(?:metric|imperial|celsius|fahrenheit|british|american|markdown|bullet)\b",
    _I,
)
_INTEREST_CUES = re.compile(
    r"\bI\s+am\s+(?:really\s+|very\s+|so\s+)?(?:interested\s+in|into|learning|passionate\s+about|a\s+fan\s+of|"
    r"curious\s+about)\b|\bmy\s+(?:hobby|hobbies|passion|goal|dream)\b|\bI\s+(?:enjoy|love)\s+\w+ing\b",
    _I,
)
_SESSION_CUES = re.compile(
    r"\bI\s+(?:really\s+)?(?:need|want|am\s+trying\s+to|am\s+working\s+on|am\s+looking\s+for|am\s+stuck|have\s+to|"
    r"must)\b|\bhelp\s+me\b|\b(?:can|could|would)\s+you\b|\bhow\s+(?:do|can|should)\s+I\b|\bhow\s+to\b|"
    r"\b(?:error|bug|issue|problem|crash|fails?|failing|broken|not\s+working|does\s+not\s+work)\b|\bworking\s+on\b|"
    r"\btrying\s+to\b|\bplan(?:ning)?\s+to\b|https?://\S+",
    _I,
)
_DECISION_CUES = re.compile(
    r"\b(?:decided|let\s+us|let's|we\s+will\s+go\s+with|going\s+with|agreed|settled\s+on|the\s+plan\s+is|"
    r"final\s+(?:answer|decision|choice)|we\s+chose|I\s+chose|I\s+will\s+go\s+with)\b",
    _I,
)
_SMALL_TALK = re.compile(
    r"^(?:hi|hey|hello|thanks|thank\s+you|ok|okay|sure|yes|no|yeah|yep|great|cool|nice|awesome|bye|good\s+"
    r"(?:morning|night|evening)|lol|haha|wow)\b[\s\w,!.']{0,25}$",
    _I,
)


@dataclass(slots=True)
class _Sentence:
    text: str
    speaker: str
    role: str
    position: int
    tokens: frozenset[str]
    question: bool
    plain: str
    """The text with contractions expanded, for the cue patterns."""


def _memory_lines(mem: ScopeMemory | None) -> list[str]:
    if mem is None:
        return []
    lines = [ln.strip().lstrip("-*• ").strip() for ln in mem.consolidated.splitlines()]
    return [ln for ln in lines if ln and not _VERSION_RE.match(ln) and not _HEADING_RE.match(ln)] + list(mem.recent)


class _Novelty:
    """Rejects sentences whose content is (mostly) already said by a known line."""

    def __init__(self, known: Iterable[str]) -> None:
        self.known: list[frozenset[str]] = [t for t in (_content(k) for k in known) if t]

    def is_new(self, tokens: frozenset[str]) -> bool:
        return bool(tokens) and not any(_contained(tokens, k, 0.7) or _contained(k, tokens, 0.9) for k in self.known)

    def add(self, tokens: frozenset[str]) -> None:
        self.known.append(tokens)


def _reflection(sentence: _Sentence) -> str:
    verb = "asked" if sentence.question or re.match(r"(?:please|can|could|would|help)\b", sentence.text, _I) else "said"
    return _cap_words(f"{sentence.speaker} {verb}: {sentence.text}", MAX_REFLECTION_WORDS)


def _pick(
    pool: Sequence[_Sentence], score: Callable[[_Sentence], int], limit: int, novelty: _Novelty, used: set[int]
) -> list[_Sentence]:
    scored = [(score(s), s) for s in pool if s.position not in used]
    ranked = sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], -len(x[1].tokens), x[1].position))
    chosen: list[_Sentence] = []
    for _, s in ranked:
        if len(chosen) >= limit:
            break
        if novelty.is_new(s.tokens):
            chosen.append(s)
            novelty.add(s.tokens)
            used.add(s.position)
    return sorted(chosen, key=lambda s: s.position)


def _reflect(inp: ReflectionInput) -> ReflectionOutput:
    """Up to three sentences per level (agent, user, session).

    Each is new against the batch's facts, that level's memory and the sentences the levels above took.
    """
    pool = _sentences_of(inp)
    used: set[int] = set()
    base = list(inp.new_facts)
    agent: list[_Sentence] = []
    if inp.agent is not None:
        nov = _Novelty([*base, *_memory_lines(inp.agent)])
        agent = _pick(pool, lambda s: 3 if _AGENT_CUES.search(s.plain) and not s.question else 0, 3, nov, used)
    user: list[_Sentence] = []
    if inp.user is not None:
        nov = _Novelty([*base, *_memory_lines(inp.user), *(s.text for s in agent)])
        user_pool = [s for s in pool if s.role == "user"]
        user = _pick(
            user_pool,
            lambda s: (
                3 if _RULE_CUES.search(s.plain) else 2 if _INTEREST_CUES.search(s.plain) and not s.question else 0
            ),
            3,
            nov,
            used,
        )
    nov = _Novelty([*base, *_memory_lines(inp.session), *(s.text for s in agent + user)])
    decisions = [s for s in pool if _DECISION_CUES.search(s.plain) and not s.question and s.position not in used]
    session: list[_Sentence] = []
    for s in reversed(decisions):  # the latest decision
        if nov.is_new(s.tokens):
            session.append(s)
            nov.add(s.tokens)
            used.add(s.position)
            break
    user_side = [s for s in pool if s.role == "user"]

    def session_score(s: _Sentence) -> int:
        if _SESSION_CUES.search(s.plain):
            return 3
        if s.question and len(s.tokens) >= 3:
            return 2
        return 0

    session += _pick(user_side, session_score, 3 - len(session), nov, used)
    if not session:
        fallback = [s for s in user_side if not s.question and len(s.tokens) >= 4]
        session = _pick(fallback, lambda s: 1, 1, nov, used)
    session.sort(key=lambda s: s.position)
    return ReflectionOutput(
        agent=[_reflection(s) for s in agent],
        user=[_reflection(s) for s in user],
        session=[_reflection(s) for s in session],
    )


def _sentences_of(inp: ReflectionInput) -> list[_Sentence]:
    default_user = (inp.user_name or "").strip() or "The user"
    default_agent = (inp.agent_name or "").strip() or "The assistant"
    out: list[_Sentence] = []
    for turn in inp.conversation:
        author = turn.author.strip()
        if turn.role == "user":
            speaker = default_user if author.lower() in _GENERIC_AUTHORS else author
        else:
            speaker = author if author and author.lower() not in {"assistant", "agent", "ai"} else default_agent
        for sentence in _sentences(turn.text):
            text = sentence.strip()
            if _SMALL_TALK.match(text):
                continue
            out.append(_Sentence(text, speaker, turn.role, len(out), _content(text), _is_question(text), _expand(text)))
    return out
