"""Answer benchmark: retrieve with memlane, answer with an LLM, grade with an LLM judge ("J").

The protocol is the one mem0 published for LoCoMo (github.com/mem0ai/mem0, ``evaluation/``,
Apache-2.0) and Zep reused: for every question, the retrieved memories go into
``ANSWER_PROMPT`` (``evaluation/prompts.py``, sent as the system message, temperature 0);
the answer is graded by ``ACCURACY_PROMPT`` (``evaluation/metrics/llm_judge.py``, generous
grading, JSON ``{"label": "CORRECT" | "WRONG"}``); J is the share of CORRECT labels, per
question category and overall. The full-context baseline is mem0's ``src/rag.py`` with
``chunk_size=-1`` (the whole conversation, ``timestamp | speaker: text`` lines, in one prompt),
cut here to the model's context (``context_tokens``) with a note when it does not fit.

LoCoMo: categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, as the
dataset's README numbers them); category 5 (adversarial, no gold answer) is excluded, as
mem0's judge script does. LongMemEval: the same prompts (its questions are one user's, so the
memories go into mem0's one-block variant, ``ANSWER_PROMPT_ZEP``); the judge is mem0's, not
LongMemEval's own per-type judge prompts, so its J is not LongMemEval's published QA accuracy;
abstention questions (``_abs``) are skipped.

Tokens are what the provider reports (estimated when it reports none), recorded in a
:class:`~memlane.providers.llm.base.UsageMeter` under the tasks ``answer`` and ``judge``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memlane.errors import InvalidInputError, LLMError
from memlane.evaluation import locomo, longmemeval
from memlane.memory import AsyncMemory
from memlane.providers.llm.base import LLM, ChatMessage, Usage, UsageMeter
from memlane.providers.llm.parsing import extract_json

#: LoCoMo's category numbers, as the dataset's README names them (5, adversarial, is excluded).
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
#: Memories retrieved per question (mem0's run_experiments default top_k).
TOP_K = 30
#: The model's context window assumed for the full-context baseline (gpt-4o-mini's 128k).
CONTEXT_TOKENS = 128_000
#: Output caps: an answer ("less than 5-6 words", after the prompt's step-by-step work) and a label.
ANSWER_MAX_TOKENS = 256
JUDGE_MAX_TOKENS = 128
#: Characters per token assumed when cutting the full context (below the usual ~4: a margin).
_CHARS_PER_TOKEN = 3

# --------------------------------------------------------------------------- prompts
# Copied from mem0ai/mem0 evaluation/prompts.py (ANSWER_PROMPT, ANSWER_PROMPT_ZEP), Jinja's
# {{name}} written {name} for str.format; trailing spaces at line ends dropped, nothing else.
ANSWER_PROMPT = """
    You are an intelligent memory assistant tasked with retrieving accurate information from conversation memories.

    # CONTEXT:
    You have access to memories from two speakers in a conversation. These memories contain
    timestamped information that may be relevant to answering the question.

    # INSTRUCTIONS:
    1. Carefully analyze all provided memories from both speakers
    2. Pay special attention to the timestamps to determine the answer
    3. If the question asks about a specific event or fact, look for direct evidence in the memories
    4. If the memories contain contradictory information, prioritize the most recent memory
    5. If there is a question about time references (like "last year", "two months ago", etc.),
       calculate the actual date based on the memory timestamp. For example, if a memory from
       4 May 2022 mentions "went to India last year," then the trip occurred in 2021.
    6. Always convert relative time references to specific dates, months, or years. For example,
       convert "last year" to "2022" or "two months ago" to "March 2023" based on the memory
       timestamp. Ignore the reference while answering the question.
    7. Focus only on the content of the memories from both speakers. Do not confuse character
       names mentioned in memories with the actual users who created those memories.
    8. The answer should be less than 5-6 words.

    # APPROACH (Think step by step):
    1. First, examine all memories that contain information related to the question
    2. Examine the timestamps and content of these memories carefully
    3. Look for explicit mentions of dates, times, locations, or events that answer the question
    4. If the answer requires calculation (e.g., converting relative time references), show your work
    5. Formulate a precise, concise answer based solely on the evidence in the memories
    6. Double-check that your answer directly addresses the question asked
    7. Ensure your final answer is specific and avoids vague time references

    Memories for user {speaker_1_user_id}:

    {speaker_1_memories}

    Memories for user {speaker_2_user_id}:

    {speaker_2_memories}

    Question: {question}

    Answer:
    """

ANSWER_PROMPT_ONE_BLOCK = """
    You are an intelligent memory assistant tasked with retrieving accurate information from conversation memories.

    # CONTEXT:
    You have access to memories from a conversation. These memories contain
    timestamped information that may be relevant to answering the question.

    # INSTRUCTIONS:
    1. Carefully analyze all provided memories
    2. Pay special attention to the timestamps to determine the answer
    3. If the question asks about a specific event or fact, look for direct evidence in the memories
    4. If the memories contain contradictory information, prioritize the most recent memory
    5. If there is a question about time references (like "last year", "two months ago", etc.),
       calculate the actual date based on the memory timestamp. For example, if a memory from
       4 May 2022 mentions "went to India last year," then the trip occurred in 2021.
    6. Always convert relative time references to specific dates, months, or years. For example,
       convert "last year" to "2022" or "two months ago" to "March 2023" based on the memory
       timestamp. Ignore the reference while answering the question.
    7. Focus only on the content of the memories. Do not confuse character
       names mentioned in memories with the actual users who created those memories.
    8. The answer should be less than 5-6 words.

    # APPROACH (Think step by step):
    1. First, examine all memories that contain information related to the question
    2. Examine the timestamps and content of these memories carefully
    3. Look for explicit mentions of dates, times, locations, or events that answer the question
    4. If the answer requires calculation (e.g., converting relative time references), show your work
    5. Formulate a precise, concise answer based solely on the evidence in the memories
    6. Double-check that your answer directly addresses the question asked
    7. Ensure your final answer is specific and avoids vague time references

    Memories:

    {memories}

    Question: {question}
    Answer:
    """

# Copied from mem0ai/mem0 evaluation/metrics/llm_judge.py (ACCURACY_PROMPT; trailing spaces dropped).
ACCURACY_PROMPT = """
Your task is to label an answer to a question as ’CORRECT’ or ’WRONG’. You will be given the following data:
    (1) a question (posed by one user to another user),
    (2) a ’gold’ (ground truth) answer,
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG.
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""  # noqa: E501

# Copied from mem0ai/mem0 evaluation/src/rag.py (the system message and PROMPT; chunk_size=-1 is full context).
FULL_CONTEXT_SYSTEM = (
    "You are a helpful assistant that can answer "
    "questions based on the provided context."
    "If the question involves timing, use the conversation date for reference."
    "Provide the shortest possible answer."
    "Use words directly from the conversation when possible."
    "Avoid using subjects in your answer."
)
FULL_CONTEXT_PROMPT = """
# Question:
{question}

# Context:
{context}

# Short answer:
"""

#: The judge's output, asked for with the provider's structured output (mem0 asks for JSON mode).
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["CORRECT", "WRONG"]}},
    "required": ["label"],
}


# --------------------------------------------------------------------------- rows and report
@dataclass(frozen=True)
class Line:
    """One remembered turn (or conversation turn): when, who, what."""

    when: datetime | None
    speaker: str | None
    text: str


@dataclass(frozen=True)
class Case:
    """One question to answer: its id, category name, text and gold answer."""

    qid: str
    category: str
    question: str
    gold: str


@dataclass
class Row:
    """What happened to one question in one mode."""

    case: Case
    answer: str
    correct: bool
    label_parsed: bool
    retrieve_s: float
    answer_s: float
    judge_s: float
    answer_usage: Usage
    judge_usage: Usage
    dropped_turns: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.case.qid,
            "category": self.case.category,
            "question": self.case.question,
            "gold": self.case.gold,
            "answer": self.answer,
            "label": "CORRECT" if self.correct else "WRONG",
            "label_parsed": self.label_parsed,
            "dropped_turns": self.dropped_turns,
        }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass
class Report:
    """J, tokens and seconds of one mode (``memlane`` or ``full-context``)."""

    mode: str
    rows: list[Row] = field(default_factory=list)
    meter: UsageMeter = field(default_factory=UsageMeter)

    @property
    def j(self) -> float:
        """Share of questions the judge labelled CORRECT."""
        return _mean([1.0 if r.correct else 0.0 for r in self.rows])

    def by_category(self) -> dict[str, dict[str, float | int]]:
        cats = list(dict.fromkeys(r.case.category for r in self.rows))
        out: dict[str, dict[str, float | int]] = {}
        for cat in sorted(cats):
            rows = [r for r in self.rows if r.case.category == cat]
            out[cat] = {"questions": len(rows), "J": round(_mean([1.0 if r.correct else 0.0 for r in rows]), 4)}
        return out

    def as_dict(self, *, per_question: bool = True) -> dict[str, Any]:
        n = len(self.rows)
        tasks = self.meter.snapshot()

        def per_q(task: str, key: str) -> float:
            return round(tasks.get(task, {}).get(key, 0) / n, 1) if n else 0.0

        out: dict[str, Any] = {
            "mode": self.mode,
            "questions": n,
            "J": round(self.j, 4),
            "by_category": self.by_category(),
            "tokens_per_question": {
                task: {"prompt": per_q(task, "prompt_tokens"), "completion": per_q(task, "completion_tokens")}
                for task in ("answer", "judge")
            },
            "seconds_per_question": {
                "retrieve": round(_mean([r.retrieve_s for r in self.rows]), 3),
                "answer": round(_mean([r.answer_s for r in self.rows]), 3),
                "judge": round(_mean([r.judge_s for r in self.rows]), 3),
            },
            "labels_unparsed": sum(1 for r in self.rows if not r.label_parsed),
            "truncated": sum(1 for r in self.rows if r.dropped_turns),
        }
        if per_question:
            out["per_question"] = [r.as_dict() for r in self.rows]
        return out


# --------------------------------------------------------------------------- prompts filled in
def stamp(when: datetime | None) -> str:
    """A LoCoMo-style time: ``"1:56 pm on 8 May, 2023"`` (empty when unknown)."""
    if when is None:
        return ""
    hour = when.hour % 12 or 12
    return f"{hour}:{when.minute:02d} {'pm' if when.hour >= 12 else 'am'} on {when.day} {when:%B}, {when.year}"


def _memories(lines: Sequence[Line]) -> str:
    # mem0: json.dumps([f"{timestamp}: {memory}" ...], indent=4)
    return json.dumps([f"{stamp(x.when)}: {x.text}" if x.when else x.text for x in lines], indent=4)


def two_speaker_messages(question: str, speakers: Sequence[str], lines: Sequence[Line]) -> list[ChatMessage]:
    """mem0's ``ANSWER_PROMPT``: the first speaker's memories, then everyone else's."""
    first = speakers[0] if speakers else "speaker_1"
    second = speakers[1] if len(speakers) > 1 else "speaker_2"
    mine = [x for x in lines if x.speaker == first]
    theirs = [x for x in lines if x.speaker != first]
    prompt = ANSWER_PROMPT.format(
        speaker_1_user_id=first,
        speaker_2_user_id=second,
        speaker_1_memories=_memories(mine),
        speaker_2_memories=_memories(theirs),
        question=question,
    )
    return [ChatMessage(role="system", content=prompt)]


def one_block_messages(question: str, lines: Sequence[Line]) -> list[ChatMessage]:
    """mem0's one-block variant (``ANSWER_PROMPT_ZEP``), for one user's memories."""
    return [
        ChatMessage(role="system", content=ANSWER_PROMPT_ONE_BLOCK.format(memories=_memories(lines), question=question))
    ]


def full_context_messages(
    question: str, lines: Sequence[Line], context_tokens: int = CONTEXT_TOKENS
) -> tuple[list[ChatMessage], int]:
    """mem0's full-context prompt over every line, the oldest left out when the conversation
    does not fit ``context_tokens`` (with a note in the context saying so).

    Returns:
        (the messages, how many turns were left out).
    """
    rendered = [
        f"{stamp(x.when)} | {x.speaker}: {x.text}" if x.speaker else f"{stamp(x.when)} | {x.text}" for x in lines
    ]
    fixed = len(FULL_CONTEXT_SYSTEM) + len(FULL_CONTEXT_PROMPT) + len(question) + 200  # 200: the note
    budget = (context_tokens - ANSWER_MAX_TOKENS) * _CHARS_PER_TOKEN - fixed
    kept: list[str] = []
    used = 0
    for text in reversed(rendered):
        if used + len(text) + 1 > budget:
            break
        kept.append(text)
        used += len(text) + 1
    kept.reverse()
    dropped = len(rendered) - len(kept)
    context = "\n".join(kept) + "\n"
    if dropped:
        context = (
            f"[the {dropped} earliest of {len(rendered)} turns are left out: the conversation does not fit "
            f"a {context_tokens}-token context]\n" + context
        )
    messages = [
        ChatMessage(role="system", content=FULL_CONTEXT_SYSTEM),
        ChatMessage(role="user", content=FULL_CONTEXT_PROMPT.format(question=question, context=context)),
    ]
    return messages, dropped


def judge_messages(question: str, gold: str, answer: str) -> list[ChatMessage]:
    """mem0's ``ACCURACY_PROMPT``, as the user message."""
    return [
        ChatMessage(
            role="user", content=ACCURACY_PROMPT.format(question=question, gold_answer=gold, generated_answer=answer)
        )
    ]


_LABEL = re.compile(r"\b(CORRECT|WRONG)\b")


def parse_label(text: str) -> bool | None:
    """The judge's verdict: True for CORRECT, False for WRONG, None when it gave neither.

    The JSON ``{"label": ...}`` first (mem0 reads that); a reply that is not JSON counts when
    exactly one of the two words appears in it (in capitals, as the prompt asks)."""
    try:
        data = extract_json(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("label"), str):
        label: str = data["label"].strip().upper()
        if label in ("CORRECT", "WRONG"):
            return label == "CORRECT"
    found = set(_LABEL.findall(text or ""))
    if len(found) == 1:
        return found == {"CORRECT"}
    return None


_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


def clean_answer(text: str) -> str:
    """The model's answer without reasoning blocks (``<think>...</think>``), stripped."""
    return _THINK.sub("", text or "").strip()


# --------------------------------------------------------------------------- the loop
#: Builds one question's answer messages: returns (messages, turns left out).
Build = Callable[[], Awaitable[tuple[list[ChatMessage], int]]]


class Grader:
    """Answers and judges questions, one report per mode."""

    def __init__(self, answer_llm: LLM, judge_llm: LLM, modes: Sequence[str]) -> None:
        self.answer_llm = answer_llm
        self.judge_llm = judge_llm
        self.reports = {mode: Report(mode) for mode in modes}

    async def grade(self, mode: str, case: Case, build: Build) -> Row:
        """Build the prompt (retrieval is timed here), answer, judge; the row is kept in ``mode``'s report."""
        report = self.reports[mode]
        t0 = time.perf_counter()
        messages, dropped = await build()
        t1 = time.perf_counter()
        done = await self.answer_llm.complete(messages, temperature=0.0, max_tokens=ANSWER_MAX_TOKENS)
        report.meter.record(self.answer_llm.name, "answer", _one_call(done.usage))
        answer = clean_answer(done.text)
        t2 = time.perf_counter()
        verdict = await self.judge_llm.complete(
            judge_messages(case.question, case.gold, answer),
            schema=JUDGE_SCHEMA,
            schema_name="label",
            temperature=0.0,
            max_tokens=JUDGE_MAX_TOKENS,
        )
        report.meter.record(self.judge_llm.name, "judge", _one_call(verdict.usage))
        t3 = time.perf_counter()
        label = parse_label(verdict.text)
        row = Row(
            case=case,
            answer=answer,
            correct=bool(label),
            label_parsed=label is not None,
            retrieve_s=t1 - t0,
            answer_s=t2 - t1,
            judge_s=t3 - t2,
            answer_usage=done.usage,
            judge_usage=verdict.usage,
            dropped_turns=dropped,
        )
        report.rows.append(row)
        return row


def _one_call(usage: Usage) -> Usage:
    return Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0, max(1, usage.calls))


def _hit_lines(hits: Sequence[Any]) -> list[Line]:
    return [Line(h.fact.occurred_at, h.fact.author, h.fact.content) for h in hits]


def _modes(full_context: bool) -> list[str]:
    return ["memlane", "full-context"] if full_context else ["memlane"]


@dataclass
class Run:
    """What a benchmark run returns: reports in mode order, turns ingested, ingest seconds, skipped questions."""

    reports: list[Report]
    turns: int
    ingest_s: float
    skipped: int = 0
    error: str | None = None
    """Why the run stopped early (a model call failed after the client's retries); the
    reports hold the questions graded before it."""


def _check(top_k: int, context_tokens: int) -> None:
    if top_k < 1:
        raise InvalidInputError(f"top_k must be at least 1, got {top_k}")
    if context_tokens <= ANSWER_MAX_TOKENS:
        raise InvalidInputError(f"context_tokens must be more than {ANSWER_MAX_TOKENS}, got {context_tokens}")


async def run_locomo(
    memory: AsyncMemory,
    convs: Sequence[locomo.Conversation],
    answer_llm: LLM,
    judge_llm: LLM | None = None,
    *,
    top_k: int = TOP_K,
    full_context: bool = False,
    context_tokens: int = CONTEXT_TOKENS,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Run:
    """LoCoMo J: the first ``limit`` category 1-4 questions (all when None), in file order.

    Only the conversations those questions belong to are stored (every turn one memory, as
    the retrieval benchmark stores them); each question is searched in its conversation's
    memories (``top_k``), answered by ``answer_llm`` and judged by ``judge_llm`` (default: the
    answer model). ``full_context`` adds mem0's full-context baseline as a second mode.
    """
    _check(top_k, context_tokens)
    chosen: list[tuple[locomo.Conversation, list[locomo.QA]]] = []
    left = limit if limit is not None else sum(len(c.qa) for c in convs)
    for conv in convs:
        if left <= 0:
            break
        if conv.qa:
            chosen.append((conv, conv.qa[:left]))
            left -= len(chosen[-1][1])
    turns, ingest_s = await locomo.ingest(memory, [c for c, _ in chosen])
    grader = Grader(answer_llm, judge_llm or answer_llm, _modes(full_context))
    try:
        await _grade_locomo(memory, grader, chosen, top_k, full_context, context_tokens, progress)
    except LLMError as exc:
        return Run(list(grader.reports.values()), turns, ingest_s, error=_stopped(grader, exc))
    return Run(list(grader.reports.values()), turns, ingest_s)


def _stopped(grader: Grader, exc: LLMError) -> str:
    done = max((len(r.rows) for r in grader.reports.values()), default=0)
    return f"stopped after {done} questions: {exc}"


async def _grade_locomo(
    memory: AsyncMemory,
    grader: Grader,
    chosen: Sequence[tuple[locomo.Conversation, list[locomo.QA]]],
    top_k: int,
    full_context: bool,
    context_tokens: int,
    progress: Callable[[int], None] | None,
) -> None:
    for conv, items in chosen:
        everything = [Line(t.when, None, t.text) for s in conv.sessions for t in s]
        for i, qa in enumerate(items):
            case = Case(f"{conv.sample_id}:{i}", LOCOMO_CATEGORIES[qa.category], qa.question, qa.answer)

            async def retrieved(conv: locomo.Conversation = conv, qa: locomo.QA = qa) -> tuple[list[ChatMessage], int]:
                res = await memory.search(qa.question, user_id=conv.sample_id, top_k=top_k)
                return two_speaker_messages(qa.question, conv.speakers, _hit_lines(res.hits)), 0

            await grader.grade("memlane", case, retrieved)
            if full_context:

                async def whole(lines: list[Line] = everything, q: str = qa.question) -> tuple[list[ChatMessage], int]:
                    return full_context_messages(q, lines, context_tokens)

                await grader.grade("full-context", case, whole)
            if progress:
                progress(1)


def _question_text(q: longmemeval.Question) -> str:
    """The question with the day it is asked (LongMemEval's temporal questions count from it)."""
    return f"{q.question} (asked on {stamp(q.question_date)})" if q.question_date else q.question


async def run_longmemeval(
    memory: AsyncMemory,
    questions: Sequence[longmemeval.Question],
    answer_llm: LLM,
    judge_llm: LLM | None = None,
    *,
    top_k: int = TOP_K,
    full_context: bool = False,
    context_tokens: int = CONTEXT_TOKENS,
    progress: Callable[[int], None] | None = None,
) -> Run:
    """LongMemEval J: per question, its haystack is stored in a fresh user (as the retrieval
    benchmark does), the question searched there (``top_k``), answered and judged; then the
    user is forgotten. Abstention questions are skipped (counted in ``Run.skipped``)."""
    _check(top_k, context_tokens)
    grader = Grader(answer_llm, judge_llm or answer_llm, _modes(full_context))
    run = Run(list(grader.reports.values()), 0, 0.0)
    try:
        await _grade_longmemeval(memory, grader, questions, run, top_k, full_context, context_tokens, progress)
    except LLMError as exc:
        run.error = _stopped(grader, exc)
    return run


async def _grade_longmemeval(
    memory: AsyncMemory,
    grader: Grader,
    questions: Sequence[longmemeval.Question],
    run: Run,
    top_k: int,
    full_context: bool,
    context_tokens: int,
    progress: Callable[[int], None] | None,
) -> None:
    for q in questions:
        if q.abstention:
            run.skipped += 1
            if progress:
                progress(1)
            continue
        user = f"lme-qa:{q.question_id}"
        t0 = time.perf_counter()
        run.turns += await longmemeval.ingest(memory, q, user)
        run.ingest_s += time.perf_counter() - t0
        question = _question_text(q)
        case = Case(q.question_id, q.question_type, question, q.answer)

        async def retrieved(question: str = question, user: str = user) -> tuple[list[ChatMessage], int]:
            res = await memory.search(question, user_id=user, top_k=top_k)
            lines = [
                Line(x.when, None, f"{x.speaker}: {x.text}" if x.speaker else x.text) for x in _hit_lines(res.hits)
            ]
            return one_block_messages(question, lines), 0

        everything = [Line(s.when, role, text) for s in q.sessions for role, text in s.turns]

        async def whole(lines: list[Line] = everything, question: str = question) -> tuple[list[ChatMessage], int]:
            return full_context_messages(question, lines, context_tokens)

        try:
            await grader.grade("memlane", case, retrieved)
            if full_context:
                await grader.grade("full-context", case, whole)
        finally:
            await memory.forget(user)
        if progress:
            progress(1)


__all__ = [
    "ACCURACY_PROMPT",
    "ANSWER_PROMPT",
    "CONTEXT_TOKENS",
    "LOCOMO_CATEGORIES",
    "TOP_K",
    "Case",
    "Grader",
    "Line",
    "Report",
    "Row",
    "Run",
    "full_context_messages",
    "judge_messages",
    "one_block_messages",
    "parse_label",
    "run_locomo",
    "run_longmemeval",
    "two_speaker_messages",
]
