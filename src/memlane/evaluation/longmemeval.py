"""LongMemEval retrieval benchmark (session level), as the official repository scores it.

LongMemEval (Wu et al., ICLR 2025; data: the ``longmemeval_s`` / ``longmemeval_m`` /
``longmemeval_oracle`` JSON files of the ``xiaowu0162/longmemeval-cleaned`` dataset) is a JSON
list of questions, each with its own chat history (the "haystack")::

    {"question_id", "question_type", "question", "answer", "question_date",
     "haystack_session_ids": [...], "haystack_dates": ["2023/05/20 (Sat) 02:21", ...],
     "haystack_sessions": [[{"role", "content", "has_answer"?}, ...], ...],
     "answer_session_ids": [...]}

Every question gets a fresh scope (one user): each turn of its haystack is one memory, in its
session (``session_id`` = the haystack session id), with the session's date as its time. The
question is searched in that user's memories; the ranked turns are mapped to their sessions
(first occurrence wins: a deduplicated session ranking) and scored against the answer
sessions that are in the haystack, with the official definitions
(``src/retrieval/eval_utils.py``: ``evaluate_retrieval``):

- ``recall_any@k`` = 1 when any answer session is among the top k sessions;
- ``recall_all@k`` = 1 when every answer session is among the top k sessions;
- ``ndcg@k`` (the official ``ndcg_any@k``): DCG of the top k with binary relevance and the
  official discount (``rel_1 + sum_{i>=2} rel_i / log2(i)``), over the DCG of the ideal
  ranking (every answer session first).

Abstention questions (``_abs`` in the id) are skipped, as the official scripts do.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from memlane.errors import InvalidInputError
from memlane.evaluation._files import read_json_list
from memlane.inputs import MAX_TEXT_CHARS
from memlane.memory import AsyncMemory

KS = (5, 10)
METRICS = ("recall_any", "recall_all", "ndcg")
#: Turns asked for first; when they cover fewer than ``max(KS)`` sessions, searched again at the maximum.
TOP_K = 50
TOP_K_MAX = 100
_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(?:(\d{1,2}):(\d{2}))?")


def parse_date(text: str) -> datetime | None:
    """``"2023/05/20 (Sat) 02:21"`` -> datetime (None when it does not parse)."""
    m = _DATE.search(text or "")
    if not m:
        return None
    year, month, day, hour, minute = m.groups()
    try:
        return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0))
    except ValueError:
        return None


@dataclass
class Session:
    session_id: str
    when: datetime | None
    turns: list[tuple[str, str]]  # (role, content)


@dataclass
class Question:
    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: datetime | None
    sessions: list[Session]
    answer_session_ids: list[str]

    @property
    def abstention(self) -> bool:
        return "_abs" in self.question_id

    @property
    def turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    @property
    def answers(self) -> list[str]:
        """The answer sessions that are in the haystack (the official corpus-derived set)."""
        present = {s.session_id for s in self.sessions}
        return [a for a in dict.fromkeys(self.answer_session_ids) if a in present]


def load(path: str | Path, *, roles: Literal["all", "user"] = "all", limit: int | None = None) -> list[Question]:
    """Read a LongMemEval-format JSON file (the first ``limit`` questions when given).

    ``roles="user"`` keeps only the user turns (what the official turn-level retrievers index).
    Empty turns are skipped; a turn longer than memlane's text limit is cut to it.

    Raises:
        InvalidInputError: the file cannot be read, or is not LongMemEval-format JSON (the
            message says which question, session or turn).
    """
    p = Path(path)
    data = read_json_list(p, "questions", _not_lme)
    out: list[Question] = []
    for i, item in enumerate(data):
        if limit is not None and len(out) >= limit:
            break
        if not isinstance(item, dict) or not isinstance(item.get("question_id"), str):
            raise _not_lme(p, f"item {i} is not an object with a question_id")
        where = f"question {item['question_id']!r}"
        ids, dates, sessions = (item.get(k) for k in ("haystack_session_ids", "haystack_dates", "haystack_sessions"))
        if not (isinstance(ids, list) and isinstance(dates, list) and isinstance(sessions, list)):
            raise _not_lme(p, f"{where} needs haystack_session_ids, haystack_dates and haystack_sessions lists")
        if not len(ids) == len(dates) == len(sessions):
            raise _not_lme(
                p, f"{where}: {len(ids)} session ids, {len(dates)} dates and {len(sessions)} sessions differ in number"
            )
        answers = item.get("answer_session_ids", [])
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise _not_lme(p, f"{where}: answer_session_ids is not a list of session ids")
        qs: list[Session] = []
        for sid, date, turns in zip(ids, dates, sessions, strict=True):
            if not isinstance(sid, str) or not isinstance(turns, list):
                raise _not_lme(p, f"{where}: session {sid!r} is not a list of turns with a string id")
            kept = []
            for j, t in enumerate(turns):
                if not isinstance(t, dict) or not all(isinstance(t.get(k), str) for k in ("role", "content")):
                    raise _not_lme(p, f"{where}: session {sid!r} turn {j} needs role and content strings")
                if (roles == "user" and t["role"] != "user") or not t["content"].strip():
                    continue
                kept.append((t["role"], t["content"][:MAX_TEXT_CHARS]))
            qs.append(Session(sid, parse_date(str(date)), kept))
        out.append(
            Question(
                question_id=item["question_id"],
                question_type=str(item.get("question_type", "unknown")),
                question=str(item.get("question", "")),
                answer=str(item.get("answer", "")),
                question_date=parse_date(str(item.get("question_date") or "")),
                sessions=qs,
                answer_session_ids=list(answers),
            )
        )
    return out


def _not_lme(path: Path, why: str) -> InvalidInputError:
    return InvalidInputError(
        f"{path} is not a LongMemEval-format file ({why}); expected a JSON list of {{question_id, "
        "question_type, question, haystack_session_ids, haystack_dates, haystack_sessions: "
        "[[{role, content}]], answer_session_ids}"
    )


# ----------------------------------------------------------------------------- metrics
def session_ranking(turn_sessions: Iterable[str | None]) -> list[str]:
    """Ranked turns' session ids -> ranked sessions (first occurrence kept, order preserved)."""
    return list(dict.fromkeys(s for s in turn_sessions if s is not None))


def dcg(relevances: Sequence[float], k: int) -> float:
    """The official DCG: ``rel_1 + sum_{i=2..k} rel_i / log2(i)``."""
    rel = list(relevances)[:k]
    if not rel:
        return 0.0
    return float(rel[0] + sum(r / math.log2(i) for i, r in enumerate(rel[1:], start=2)))


def scores(ranked: Sequence[str], answers: Sequence[str], k: int) -> dict[str, float]:
    """``recall_any@k``, ``recall_all@k`` and ``ndcg@k`` of one session ranking."""
    top = set(ranked[:k])
    gold = set(answers)
    ideal = dcg([1.0] * len(gold), k)
    actual = dcg([1.0 if s in gold else 0.0 for s in ranked[:k]], k)
    return {
        f"recall_any@{k}": float(any(a in top for a in gold)),
        f"recall_all@{k}": float(bool(gold) and gold <= top),
        f"ndcg@{k}": actual / ideal if ideal else 0.0,
    }


# ----------------------------------------------------------------------------- report
@dataclass
class Report:
    """Benchmark figures for one retrieval mode: overall and per question type."""

    mode: str
    per_question: list[tuple[str, dict[str, float]]] = field(default_factory=list)  # (type, scores)
    search_ms: list[float] = field(default_factory=list)
    skipped: int = 0  # abstention questions, or no answer session in the haystack

    @staticmethod
    def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
        keys = [f"{m}@{k}" for k in KS for m in METRICS]
        return {key: round(float(np.mean([r[key] for r in rows])), 4) for key in keys} if rows else {}

    def as_dict(self) -> dict[str, Any]:
        types = sorted({t for t, _ in self.per_question})
        ms = self.search_ms
        return {
            "mode": self.mode,
            "questions": len(self.per_question),
            "skipped": self.skipped,
            **self._mean([s for _, s in self.per_question]),
            "search_p50_ms": round(float(np.percentile(ms, 50)), 2) if ms else 0.0,
            "search_p95_ms": round(float(np.percentile(ms, 95)), 2) if ms else 0.0,
            "by_type": {
                t: {
                    "questions": sum(1 for x, _ in self.per_question if x == t),
                    **self._mean([s for x, s in self.per_question if x == t]),
                }
                for t in types
            },
        }


async def ingest(memory: AsyncMemory, question: Question, user_id: str) -> int:
    """Store the question's haystack in ``user_id``'s memories: one ``add_many`` call (every
    session's turns embedded across sessions in large batches) where the memory has it, else
    one ``add`` per session; both store the same rows."""
    sessions = [
        (s.session_id, [{"role": role, "content": text, "timestamp": s.when} for role, text in s.turns])
        for s in question.sessions
        if s.turns
    ]
    add_many = getattr(memory, "add_many", None)
    if add_many is not None:
        await add_many([{"messages": msgs, "user_id": user_id, "session_id": sid} for sid, msgs in sessions])
    else:  # pragma: no cover - memlane before add_many
        for sid, msgs in sessions:
            await memory.add(msgs, user_id=user_id, session_id=sid)
    return sum(len(msgs) for _, msgs in sessions)


async def rank_sessions(memory: AsyncMemory, question: str, user_id: str, want: int = max(KS)) -> list[str]:
    """Search the question; the session ranking of the hits (searched again at ``TOP_K_MAX``
    turns when ``TOP_K`` turns cover fewer than ``want`` sessions)."""
    res = await memory.search(question, user_id=user_id, top_k=TOP_K)
    ranked = session_ranking(h.fact.session_id for h in res.hits)
    if len(ranked) < want and len(res.hits) == TOP_K:
        res = await memory.search(question, user_id=user_id, top_k=TOP_K_MAX)
        ranked = session_ranking(h.fact.session_id for h in res.hits)
    return ranked


async def run(
    memory: AsyncMemory,
    questions: Sequence[Question],
    modes: dict[str, Any],
    progress: Callable[[int], None] | None = None,
) -> tuple[list[Report], int, float]:
    """Per question: ingest its haystack in a fresh user, search it in every retrieval mode
    (``modes``: name -> RetrievalConfig), score, then forget the user.

    Returns:
        (reports in ``modes`` order, turns ingested, ingest seconds).
    """
    reports = {name: Report(name) for name in modes}
    turns, ingest_s = 0, 0.0
    for q in questions:
        if q.abstention or not q.answers:
            for rep in reports.values():
                rep.skipped += 1
            if progress:
                progress(1)
            continue
        user = f"lme:{q.question_id}"
        t0 = time.perf_counter()
        turns += await ingest(memory, q, user)
        ingest_s += time.perf_counter() - t0
        for name, config in modes.items():
            memory.retrieval = config
            memory._query_cache.clear()  # time the real query embedding, not an LRU hit
            t = time.perf_counter()
            ranked = await rank_sessions(memory, q.question, user)
            reports[name].search_ms.append((time.perf_counter() - t) * 1000)
            row: dict[str, float] = {}
            for k in KS:
                row.update(scores(ranked, q.answers, k))
            reports[name].per_question.append((q.question_type, row))
        await memory.forget(user)
        if progress:
            progress(1)
    return list(reports.values()), turns, ingest_s
