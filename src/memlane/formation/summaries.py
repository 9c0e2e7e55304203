"""Session summaries (elizaOS's ``ConversationSummary``): what a formed session was about.

When formation forms a one-to-one session, the user's memory gets one ``kind="summary"``
memory for it: its text says when the conversation took place, how many messages it had,
its topics and the session's reflections; its ``metadata`` holds the same as data
(``session_id``, ``app``, ``start``, ``end``, ``message_count``, ``topics``). Its
``occurred_at`` is the session's end, so the keyword index holds the end date's words
("20 November 2026 Friday") and a question naming the date finds it. A later formation of
the same session updates the same memory (version + 1, the earlier text in its history);
a session created again under the same id (after ``/reset`` or an idle clear) gets a
summary of its own.

Topics are chosen without a model, so they are the same for every formation model: the
conversation's most frequent content words (the user's count double the agent's, names
written with a capital inside a sentence count more), without stopwords, chat fillers or
the speakers' own names.

This module is pure (no I/O): :meth:`memlane.formation.pipeline.Pipeline.summarize` builds
the change from it and applies it with the formation batch, exactly once per job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from memlane.formation.schemas import Turn, word_count
from memlane.models import Fact, UtcDatetime, as_utc
from memlane.retrieval.text import STOPWORDS

__all__ = [
    "MAX_SUMMARY_WORDS",
    "MAX_TOPICS",
    "SUMMARY_KIND",
    "SessionSummary",
    "session_topics",
    "summary_metadata",
    "summary_text",
]

#: The memory kind of a session summary.
SUMMARY_KIND = "summary"
#: Topics named per summary.
MAX_TOPICS = 5
#: Words of reflections a summary keeps (the latest ones when there are more).
MAX_SUMMARY_WORDS = 150

#: Words of chat that say nothing about a topic (on top of the stopwords).
_FILLER_WORDS = """
    yes yeah yep nope okay ok sure thanks thank please hi hello hey bye great good nice cool fine
    awesome wow really just like know think thought want wanted need needs going gonna wanna get
    got getting would could should also well much many lot lots something anything everything
    nothing thing things stuff maybe actually probably definitely today tomorrow yesterday time
    let make made sounds sound help tell told said say says see seen look looks love right sorry
    kind sort bit still even ever though always never use used way back new first last next
    can't i'm don't that's i've i'll it's what's let's you're there's isn't doesn't didn't won't
    i'd we're they're here there come came take took give gave keep try tried mean means feel
    feels one two three lol haha hmm um uh oh ah noted glad happy welcome absolutely exactly
    indeed course certainly hope message messages question answer anymore already soon later ago
    live lives living went goes doing done put call called ask asked yet likes liked loves loved wants
    planning trying thinking looking
"""
_FILLERS = frozenset(_FILLER_WORDS.split())
_TOKEN = re.compile(r"[^\W\d_][\w'’-]*", re.UNICODE)
_SENTENCE_END = re.compile(r"[.!?…:]\s*$")
_DIGIT = re.compile(r"\d")  # codes and ids ("kz2621472", "v2") are no topics


def _tokens(text: str) -> Iterable[tuple[str, bool]]:
    """(word, written with a capital inside a sentence) for each word of ``text``."""
    start = True
    pos = 0
    for m in _TOKEN.finditer(text):
        between = text[pos : m.start()]
        if _SENTENCE_END.search(between) or "\n" in between:
            start = True
        word = m.group(0).replace("’", "'").strip("'-")
        if word.lower().endswith("'s"):
            word = word[:-2]
        pos = m.end()
        yield word, (not start and word[:1].isupper())
        start = False


def session_topics(turns: Sequence[Turn], *, limit: int = MAX_TOPICS) -> list[str]:
    """The conversation's ``limit`` most distinctive words: content words counted over the
    turns (a user's word 1, the agent's 0.5; x1.5 for a name written with a capital inside a
    sentence), stopwords, chat fillers, words with digits and the speakers' names left out, a plural folded into
    its singular when both occur; ties go to the word said first. Deterministic."""
    names = {w.lower() for t in turns for w in _TOKEN.findall(t.author)}
    score: dict[str, float] = {}
    first: dict[str, int] = {}
    shown: dict[str, dict[str, int]] = {}
    n = 0
    for t in turns:
        weight = 1.0 if t.role == "user" else 0.5
        for word, proper in _tokens(t.text):
            low = word.lower()
            if len(low) < 3 or low in STOPWORDS or low in _FILLERS or low in names or _DIGIT.search(low):
                continue
            score[low] = score.get(low, 0.0) + weight * (1.5 if proper else 1.0)
            first.setdefault(low, n)
            forms = shown.setdefault(low, {})
            form = word if proper else low
            forms[form] = forms.get(form, 0) + 1
            n += 1
    for low in list(score):  # "hikes" joins "hike"
        single = low[:-1]
        if low.endswith("s") and single in score:
            score[single] += score.pop(low)
            first[single] = min(first[single], first.pop(low))
    ranked = sorted(score, key=lambda w: (-score[w], first[w]))
    return [max(shown[w].items(), key=lambda kv: (kv[1], kv[0] != w))[0] for w in ranked[:limit]]


def _day(when: datetime) -> str:
    return f"{when.strftime('%A')} {when.day} {when.strftime('%B')} {when.year}"


def summary_text(
    *,
    start: datetime,
    end: datetime,
    message_count: int,
    topics: Sequence[str],
    notes: Sequence[str] = (),
    agent_name: str | None = None,
) -> str:
    """A summary's text: when, how many messages, topics, then the session's reflections
    (``notes``, oldest first; the latest ones kept within :data:`MAX_SUMMARY_WORDS`)."""
    start, end = as_utc(start), as_utc(end)
    if start.date() == end.date():
        when = f"on {_day(end)}, {start:%H:%M}-{end:%H:%M} UTC"
    else:
        when = f"from {_day(start)} {start:%H:%M} to {_day(end)} {end:%H:%M} UTC"
    who = f" with {agent_name}" if agent_name else ""
    plural = "message" if message_count == 1 else "messages"
    head = f"Conversation{who} {when} ({message_count} {plural})."
    if topics:
        head += f" Topics talked about: {', '.join(topics)}."
    kept: list[str] = []
    used = 0
    for note in reversed(list(dict.fromkeys(" ".join(n.split()) for n in notes if n.strip()))):
        n = word_count(note)
        if used + n > MAX_SUMMARY_WORDS:
            break
        kept.insert(0, note if note[-1:] in ".!?" else note + ".")
        used += n
    return " ".join([head, *kept])


def summary_metadata(
    *,
    session_id: str,
    app: str,
    session_created: datetime,
    start: datetime,
    end: datetime,
    message_count: int,
    topics: Sequence[str],
    job: str,
) -> dict[str, Any]:
    """A summary's ``metadata``: the data :class:`SessionSummary` reads back."""
    return {
        "source": "formation",
        "job": job,
        "session_id": session_id,
        "app": app,
        "session_created": as_utc(session_created).isoformat(),
        "start": as_utc(start).isoformat(),
        "end": as_utc(end).isoformat(),
        "message_count": message_count,
        "topics": list(topics),
    }


class SessionSummary(BaseModel):
    """One formed session, summarised (elizaOS's ``ConversationSummary``): a ``kind="summary"``
    memory of the user, read back as data (:meth:`memlane.AsyncMemory.summaries`)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    """The summary memory's id (``get``, ``history``, ``delete`` take it)."""
    session_id: str
    app: str
    user_id: str
    agent_id: str | None = None
    """The agent namespace the session was formed under."""
    start: UtcDatetime
    """The session's first message."""
    end: UtcDatetime
    """Its last message formed so far."""
    message_count: int
    """Conversational messages (the user's and the agent's) formed so far."""
    topics: list[str]
    text: str
    """The summary memory's text (what search reads)."""
    version: int
    """1, then + 1 at each later formation of the session."""
    updated_at: UtcDatetime

    @classmethod
    def from_fact(cls, fact: Fact) -> SessionSummary:
        """The summary a ``kind="summary"`` memory holds."""
        meta = fact.metadata
        end = meta.get("end") or fact.occurred_at or fact.updated_at
        return cls(
            id=fact.id,
            session_id=str(meta.get("session_id") or fact.session_id or ""),
            app=str(meta.get("app") or "default"),
            user_id=fact.user_id or "",
            agent_id=fact.agent_id,
            start=meta.get("start") or end,
            end=end,
            message_count=int(meta.get("message_count") or 0),
            topics=[str(t) for t in meta.get("topics") or []],
            text=fact.content,
            version=fact.version,
            updated_at=fact.updated_at,
        )
