"""LoCoMo retrieval benchmark, exactly as ``shared/bench/locomo/README.md`` defines it.

Every turn of a conversation is one memory of one user (``"Speaker: text"`` plus
``" [shares <caption>]"`` for images), in its session with the session date as the turn's
time. Every category 1-4 question with evidence is searched in that user's memories;
recall@k = mean |evidence ∩ top-k| / |evidence|, hit@k = mean 1[evidence ∩ top-k ≠ ∅].
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from memlane.errors import InvalidInputError
from memlane.evaluation._files import read_json_list
from memlane.memory import AsyncMemory

KS = (1, 5, 10)
#: The dev split's tuning conversations; settings are chosen on these only.
TUNE = ("conv-26", "conv-30", "conv-41")
#: The dev split's check conversations: reported, never tuned on.
CHECK = ("conv-42", "conv-43", "conv-44")
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)


def parse_session_date(text: str) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` -> datetime (None when it does not parse)."""
    m = _DATE.search(text or "")
    if not m:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    try:
        base = datetime.strptime(f"{day} {month[:3]} {year}", "%d %b %Y")
    except ValueError:
        return None
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return base.replace(hour=h, minute=int(minute))


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    when: datetime | None


@dataclass
class QA:
    """One category 1-4 question with its gold answer (the answer benchmark's unit)."""

    question: str
    answer: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    sessions: list[list[Turn]]
    questions: list[tuple[str, list[str], int]]  # question, evidence dia_ids, category
    speakers: tuple[str, ...] = ()
    """``speaker_a`` and ``speaker_b`` (when the file names them)."""
    qa: list[QA] = field(default_factory=list)
    """Every category 1-4 question that has an answer, evidence or not."""

    @property
    def turns(self) -> int:
        return sum(len(s) for s in self.sessions)


def load(path: str | Path, conversations: Sequence[str] | None = None) -> list[Conversation]:
    """Read a LoCoMo-format JSON file (only ``conversations`` when given).

    Raises:
        InvalidInputError: the file cannot be read, or is not LoCoMo-format JSON (the message
            says where: which item, session or turn).
    """
    p = Path(path)
    data = read_json_list(p, "conversations", _not_locomo)
    out = []
    for i, item in enumerate(data):
        where = f"item {i}"
        if not isinstance(item, dict) or not isinstance(item.get("sample_id"), str):
            raise _not_locomo(p, f"{where} is not an object with a sample_id")
        if conversations and item["sample_id"] not in conversations:
            continue
        where = f"conversation {item['sample_id']!r}"
        conv = item.get("conversation")
        if not isinstance(conv, dict):
            raise _not_locomo(p, f"{where} has no 'conversation' object")
        n = 1
        sessions: list[list[Turn]] = []
        while f"session_{n}" in conv:
            when = parse_session_date(str(conv.get(f"session_{n}_date_time") or ""))
            if not isinstance(conv[f"session_{n}"], list):
                raise _not_locomo(p, f"{where}: session_{n} is not a list of turns")
            turns = []
            for j, t in enumerate(conv[f"session_{n}"]):
                if not isinstance(t, dict) or not all(isinstance(t.get(k), str) for k in ("speaker", "text", "dia_id")):
                    raise _not_locomo(p, f"{where}: session_{n} turn {j} needs speaker, text and dia_id strings")
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [shares {t['blip_caption']}]"
                turns.append(Turn(t["dia_id"], t["speaker"], text, n, when))
            sessions.append(turns)
            n += 1
        qs = []
        answered: list[QA] = []
        qa = item.get("qa", [])
        if not isinstance(qa, list):
            raise _not_locomo(p, f"{where}: 'qa' is not a list")
        for j, q in enumerate(qa):
            if not isinstance(q, dict):
                raise _not_locomo(p, f"{where}: qa {j} is not an object")
            if q.get("category") not in (1, 2, 3, 4):
                continue
            evidence = q.get("evidence", [])
            if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
                raise _not_locomo(p, f"{where}: qa {j} evidence is not a list of dia_ids")
            ev = [e for raw in evidence for e in re.split(r"[;,\s]+", raw) if e]
            if ev:
                qs.append((str(q.get("question", "")), ev, int(q["category"])))
            if q.get("answer") is not None:
                answered.append(QA(str(q.get("question", "")), str(q["answer"]), int(q["category"]), ev))
        speakers = tuple(str(conv[k]) for k in ("speaker_a", "speaker_b") if isinstance(conv.get(k), str))
        out.append(Conversation(item["sample_id"], sessions, qs, speakers, answered))
    return out


def _not_locomo(path: Path, why: str) -> InvalidInputError:
    return InvalidInputError(
        f"{path} is not a LoCoMo-format file ({why}); expected a JSON list of "
        "{sample_id, conversation: {session_N: [{speaker, dia_id, text}], ...}, qa: [...]}"
    )


@dataclass
class Report:
    """Benchmark figures for one retrieval mode."""

    mode: str
    questions: int = 0
    recall: dict[int, float] = field(default_factory=dict)
    hit: dict[int, float] = field(default_factory=dict)
    search_ms: list[float] = field(default_factory=list)
    per_question: list[tuple[str, dict[int, float]]] = field(default_factory=list)
    """(conversation, {k: recall@k}) of every question, for per-conversation and split figures."""

    def recall_of(self, conversations: Sequence[str]) -> dict[int, float]:
        """Mean recall@k over the questions of these conversations (empty when none)."""
        rows = [r for c, r in self.per_question if c in conversations]
        return {k: sum(r[k] for r in rows) / len(rows) for k in KS} if rows else {}

    def splits(self) -> dict[str, dict[int, float]]:
        """recall@k per conversation, and for the dev split's tune / check halves when present."""
        convs = list(dict.fromkeys(c for c, _ in self.per_question))
        out = {c: self.recall_of([c]) for c in convs}
        for name, members in (("tune", TUNE), ("check", CHECK)):
            if any(c in convs for c in members):
                out[name] = self.recall_of(members)
        return out

    @property
    def p50(self) -> float:
        return float(np.percentile(self.search_ms, 50)) if self.search_ms else 0.0

    @property
    def p95(self) -> float:
        return float(np.percentile(self.search_ms, 95)) if self.search_ms else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "questions": self.questions,
            **{f"recall@{k}": round(v, 4) for k, v in self.recall.items()},
            **{f"hit@{k}": round(v, 4) for k, v in self.hit.items()},
            "search_p50_ms": round(self.p50, 2),
            "search_p95_ms": round(self.p95, 2),
            "splits": {name: {f"recall@{k}": round(v, 4) for k, v in r.items()} for name, r in self.splits().items()},
        }


async def ingest(
    memory: AsyncMemory, convs: Iterable[Conversation], progress: Callable[[int], None] | None = None
) -> tuple[int, float]:
    """Add every turn, one ``add`` call per session; returns (turns, seconds)."""
    n = 0
    t0 = time.perf_counter()
    for conv in convs:
        for turns in conv.sessions:
            if not turns:
                continue
            msgs = [
                {"role": t.speaker, "content": t.text, "timestamp": t.when, "metadata": {"dia_id": t.dia_id}}
                for t in turns
            ]
            await memory.add(msgs, user_id=conv.sample_id, session_id=f"{conv.sample_id}:s{turns[0].session}")
            n += len(turns)
            if progress:
                progress(len(turns))
    return n, time.perf_counter() - t0


#: ``search(user_id, question, k) -> ranked dia_ids``: anything that can be scored.
SearchFn = Callable[[str, str, int], Awaitable[Sequence[str | None]]]


async def evaluate(
    memory: AsyncMemory,
    convs: Iterable[Conversation],
    mode: str,
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Search every question in its conversation's memories and score the top 10."""
    memory._query_cache.clear()  # time real query embeddings, not LRU hits from an earlier mode

    async def search(user_id: str, question: str, k: int) -> list[str | None]:
        res = await memory.search(question, user_id=user_id, top_k=k)
        return [h.fact.metadata.get("dia_id") for h in res.hits]

    return await score(search, convs, mode, progress)


async def score(
    search: SearchFn,
    convs: Iterable[Conversation],
    mode: str,
    progress: Callable[[int], None] | None = None,
) -> Report:
    """The benchmark loop and metric for any retriever (memlane or a baseline)."""
    rep = Report(mode)
    sums = {k: 0.0 for k in KS}
    hits = {k: 0.0 for k in KS}
    for conv in convs:
        for question, evidence, _cat in conv.questions:
            t = time.perf_counter()
            got = await search(conv.sample_id, question, max(KS))
            rep.search_ms.append((time.perf_counter() - t) * 1000)
            ev = set(evidence)
            rec: dict[int, float] = {}
            for k in KS:
                inter = ev.intersection(got[:k])
                rec[k] = len(inter) / len(ev)
                sums[k] += rec[k]
                hits[k] += 1.0 if inter else 0.0
            rep.per_question.append((conv.sample_id, rec))
            rep.questions += 1
            if progress:
                progress(1)
    if rep.questions:
        rep.recall = {k: sums[k] / rep.questions for k in KS}
        rep.hit = {k: hits[k] / rep.questions for k in KS}
    return rep
