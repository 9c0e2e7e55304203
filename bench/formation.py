"""Memory formation on LoCoMo dev: model calls and tokens per batch, retrieval with extracted facts, throughput.

Run::

    .venv/bin/python bench/formation.py                            # 6 dev conversations, ~3-5 min
    .venv/bin/python bench/formation.py --limit-conversations 1    # smoke run (< 1 min)

Data: ``/work/shared/bench/locomo/locomo_dev.json`` or ``--data PATH`` (LoCoMo format, CC BY-NC:
read in place, never copied into the repository).

**Replay.** Each LoCoMo session becomes one memlane session (``user_ids=[conversation id]``);
both speakers are ``USER_MESSAGE`` events with ``author`` = the speaker's name, their text
without the ``"Speaker: "`` prefix (image captions kept as ``[shares ...]``), and the session
date as timestamp (+1 s per turn, to keep the order). After each session the session is
formed with ``await m.end_session(sid)`` (``--trigger form``: ``m.form(sid)``): one formation
job, i.e. one *batch*. Every run uses a fresh temporary database and
``FormationConfig(background=False, idle_minutes=None)``; with no ``AGENT_RESPONSE`` events the
45-message / 1,500-token triggers never fire, so each batch is exactly one LoCoMo session.

1. **Calls and tokens per batch**, from each job's ``result["usage"]`` (``get_job``), for
   (a) the rule-based ``offline`` model and (b) ``PromptedModel`` over a ``ScriptedLLM`` whose
   answers are plausible JSON built from the prompt it receives (see :func:`scripted_answer`):
   its prompt sizes are those a real model would receive (tokens estimated at ~4 chars/token,
   as ``ScriptedLLM`` and the offline model both do; the offline model's "prompt" is its input
   JSON, no instructions). Target: exactly 1 extract, at most 1 dedup and 1 reflect call per
   batch, whatever the number of facts. The scripted replay runs once per embedder of
   ``--scripted-embedders`` (dedup candidates depend on it), and once more with the raw turns
   stored first in the same scope (``--no-crowding-check`` skips it): verbatim memories
   share the partition that dedup candidates are searched in.
2. **Retrieval with the offline model** (recall@1/5/10 and hit@k, the LoCoMo metric of
   ``memlane.evaluation.locomo.score``): (i) raw turns alone (the verbatim ingest of
   ``locomo.ingest``), (ii) raw turns + extracted facts in the same user scope, (iii) extracted
   facts alone. A fact hit is expanded to the turns it came from (its ``source_event_ids``,
   mapped back to dia_ids through the replayed events); the hit list is walked in order,
   expanded, de-duplicated and cut at k. All three modes use the same search call
   (``top_k=20``, the default fusion depth) and the same embedder (``--embedder``).
3. **Formation throughput** (turns/s) with the offline model: wall time of the ``end_session``
   calls alone (appending the events and raw-turn ingest are timed separately), per embedder
   in ``--throughput-embedders``.

Writes ``bench/results/formation.json`` (``--out``) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import os

#: BLAS/OpenMP threads, fixed before numpy is imported (see bench/baseline.py for the measurements).
THREADS = 1
DEFAULT_DATA = "/work/shared/bench/locomo/locomo_dev.json"


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help=f"LoCoMo JSON (default {DEFAULT_DATA})")
    ap.add_argument("--limit-conversations", type=int, default=None, help="only the first N conversations")
    ap.add_argument("--embedder", default="hash", help="embedder for the retrieval part: hash (default) or local")
    ap.add_argument(
        "--throughput-embedders",
        default="hash,local",
        help="embedders for the offline throughput replay (comma list; local is skipped when not installed)",
    )
    ap.add_argument(
        "--scripted-embedders",
        default="hash,local",
        help="embedders for the ScriptedLLM replay (dedup candidates depend on them; local skipped if absent)",
    )
    ap.add_argument(
        "--no-crowding-check",
        action="store_true",
        help="skip the extra ScriptedLLM replay with the raw turns stored first in the same scope",
    )
    ap.add_argument("--trigger", choices=("end", "form"), default="end", help="end_session (default) or form")
    ap.add_argument("--skip-scripted", action="store_true", help="skip the ScriptedLLM (prompted model) replay")
    ap.add_argument("--threads", type=int, default=THREADS, help=f"BLAS threads (default {THREADS})")
    ap.add_argument("--workdir", default="/tmp/memlane-bench", help="where the temporary databases go")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/formation.json)")
    return ap.parse_args()


ARGS = _parse_args()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import asyncio  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import SharedEmbedder, log, remove_db  # noqa: E402

from memlane import AsyncMemory, Event, EventType, FormationConfig  # noqa: E402
from memlane.evaluation import locomo  # noqa: E402
from memlane.formation.runner import FormationResult  # noqa: E402
from memlane.providers.embed.base import Embedder  # noqa: E402
from memlane.providers.llm.base import ChatMessage  # noqa: E402
from memlane.registry import make_embedder  # noqa: E402
from memlane.testing import ScriptedLLM  # noqa: E402

ROOT = Path(__file__).resolve().parent
TASKS = ("extract", "dedup", "reflect", "consolidate")
#: Facts-per-batch buckets of the calls-vs-facts table (inclusive bounds).
BUCKETS: tuple[tuple[int, int], ...] = ((0, 0), (1, 2), (3, 5), (6, 10), (11, 20), (21, 10_000))
#: Hits fetched per question before fact expansion (the default fusion depth, so ranks are unchanged).
FETCH = 20


# =========================================================================== scripted model


_LINE = re.compile(r"^(?:\[[^\]]*\]\s+)?(?P<author>[^()\n]+?) \((?P<role>user|assistant)\): (?P<text>.*)$")
_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|[Mm]y|[Mm]e|[Mm]ine)\b")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PRONOUNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bI'm\b"), "{a} is"),
    (re.compile(r"\bI've\b"), "{a} has"),
    (re.compile(r"\bI'd\b"), "{a} would"),
    (re.compile(r"\bI'll\b"), "{a} will"),
    (re.compile(r"\bI am\b"), "{a} is"),
    (re.compile(r"\bI\b"), "{a}"),
    (re.compile(r"\b[Mm]y\b"), "{a}'s"),
    (re.compile(r"\b[Mm]ine\b"), "{a}'s"),
    (re.compile(r"\b[Mm]e\b"), "{a}"),
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
#: Scripted fact text -> the message it was written from (to check the pipeline's source attribution).
SCRIPTED_SOURCES: dict[str, str] = {}


def _between(text: str, start: str, end: str) -> str:
    i = text.find(start)
    if i < 0:
        return ""
    j = text.find(end, i + len(start))
    return text[i + len(start) : j if j >= 0 else len(text)]


def _conversation(prompt: str) -> list[tuple[str, str]]:
    """(author, text) of each message line of a rendered ``<conversation>`` block."""
    out: list[tuple[str, str]] = []
    for line in _between(prompt, "<conversation>\n", "\n</conversation>").splitlines():
        m = _LINE.match(line)
        if m:
            out.append((m["author"], m["text"]))
        elif out and line.startswith("    "):
            out[-1] = (out[-1][0], out[-1][1] + " " + line.strip())
    return out


def _third_person(author: str, sentence: str) -> str:
    for pat, repl in _PRONOUNS:
        sentence = pat.sub(repl.format(a=author), sentence)
    return " ".join(sentence.split()[:25]).rstrip(",;:")


def _bullet_list(text: str) -> list[str]:
    return [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]


def scripted_answer(messages: list[ChatMessage]) -> str:
    """A plausible answer to each formation prompt, built from the prompt itself.

    * extraction: one fact per message whose text has a first-person statement (the first
      such sentence that is not a question, rewritten in the third person, <= 25 words);
    * dedup: per item, NONE for a candidate at similarity >= 0.95, UPDATE at >= 0.85, else ADD;
    * reflection: one session note (the speakers and the conversation's frequent words) and
      up to two user notes (the first new facts);
    * consolidation: the current bullets plus the new reflections, oldest dropped first to
      fit the word limit (a real model compresses instead; the size is what matters here).
    """
    system, user = messages[0]["content"], messages[-1]["content"]
    if system.startswith("You extract FACTS"):
        facts = []
        for i, (author, text) in enumerate(_conversation(user)):
            for sentence in _SENTENCE.split(text):
                if _FIRST_PERSON.search(sentence) and not sentence.rstrip().endswith("?"):
                    content = _third_person(author, sentence)
                    SCRIPTED_SOURCES[content] = " ".join(text.split())
                    facts.append({"content": content, "scope": "user", "sources": [i]})
                    break
        return json.dumps({"facts": facts})
    if system.startswith("You keep"):
        decisions: list[dict[str, Any]] = []
        for block in user.split("\n\n"):
            head = re.match(r"\[(\d+)\] NEW: (.*)", block.strip())
            if not head:
                continue
            idx, content = int(head[1]), head[2]
            best = re.search(r"- id=(\S+) \(similarity ([0-9.]+)\)", block)
            sim = float(best[2]) if best else 0.0
            if best and sim >= 0.95:
                decisions.append({"index": idx, "event": "NONE", "fact_id": best[1]})
            elif best and sim >= 0.85:
                decisions.append({"index": idx, "event": "UPDATE", "fact_id": best[1], "text": content})
            else:
                decisions.append({"index": idx, "event": "ADD"})
        return json.dumps({"decisions": decisions})
    if system.startswith("You form REFLECTIONS"):
        convo = _conversation(user)
        speakers = sorted({a for a, _ in convo})
        top = [w for w, _ in Counter(w.lower() for _, t in convo for w in _WORD.findall(t)).most_common(6)]
        new_facts = _bullet_list(_between(user, "do not repeat them):\n", "\n\nConversation"))
        session = [f"{' and '.join(speakers)} caught up about {', '.join(top[:4])}."]
        notes = [f"Keep in mind that {f.rstrip('.')}." for f in new_facts[:2]]
        return json.dumps({"agent": [], "user": notes, "session": session})
    if system.startswith("You consolidate"):
        version = int(m[1]) if (m := re.search(r'"VERSION: (\d+)"', user)) else 1
        limit = int(m[1]) if (m := re.search(r"at most (\d+) words", user)) else 300
        current = _bullet_list(_between(user, "<current>\n", "\n</current>"))
        new = _bullet_list(_between(user, "New reflections (oldest first):\n", "\n\nWrite"))
        bullets = list(dict.fromkeys(current + new))
        while bullets and sum(len(b.split()) + 1 for b in bullets) + 3 > limit:
            bullets.pop(0)
        return json.dumps({"content": "\n".join([f"VERSION: {version}", "[NOTES]", *(f"- {b}" for b in bullets)])})
    return json.dumps({"bullets": []})


# =========================================================================== replay


@dataclass
class Batch:
    """One formation job: one LoCoMo session."""

    conversation: str
    session: int
    turns: int
    extracted: int
    """Facts the extraction step returned (after the pipeline's clean-up)."""
    candidates: int
    """Stored facts shown to the dedup step, summed over the batch's facts."""
    events: dict[str, int]
    """Applied changes per event (ADD / UPDATE / DELETE / NONE)."""
    reflections: int
    consolidated: int
    usage: dict[str, dict[str, int]]
    form_s: float


@dataclass
class Replay:
    label: str
    batches: list[Batch] = field(default_factory=list)
    event_dia: dict[str, str] = field(default_factory=dict)
    """Event id -> LoCoMo dia_id, to map facts' ``source_event_ids`` back to turns."""
    event_text: dict[str, str] = field(default_factory=dict)
    add_events_s: float = 0.0
    form_s: float = 0.0

    @property
    def turns(self) -> int:
        return sum(b.turns for b in self.batches)


def _event_text(turn: locomo.Turn) -> str:
    prefix = f"{turn.speaker}: "
    return turn.text[len(prefix) :] if turn.text.startswith(prefix) else turn.text


async def replay(mem: AsyncMemory, convs: Sequence[locomo.Conversation], label: str, trigger: str) -> Replay:
    """Replay every LoCoMo session as a memlane session and form it: one batch per session."""
    rep = Replay(label)
    for conv in convs:
        for turns in conv.sessions:
            if not turns:
                continue
            sid = f"{conv.sample_id}:s{turns[0].session}"
            await mem.sessions.create_session(user_ids=[conv.sample_id], session_id=sid)
            base = (turns[0].when or datetime(2023, 1, 1)).replace(tzinfo=UTC)
            t = time.perf_counter()
            for i, turn in enumerate(turns):
                ev = Event(
                    type=EventType.USER_MESSAGE,
                    author=turn.speaker,
                    content=_event_text(turn),
                    timestamp=base + timedelta(seconds=i),
                    metadata={"dia_id": turn.dia_id},
                )
                stored = await mem.add_event(sid, ev)
                rep.event_dia[stored.id] = turn.dia_id
                rep.event_text[stored.id] = " ".join(stored.text.split())
            rep.add_events_s += time.perf_counter() - t
            t = time.perf_counter()
            res = await (mem.end_session(sid) if trigger == "end" else mem.form(sid))
            secs = time.perf_counter() - t
            rep.form_s += secs
            assert isinstance(res, FormationResult)
            job = await mem.get_job(res.job_id)
            assert job.status == "done" and job.result is not None, (job.status, job.last_error)
            result = job.result
            rep.batches.append(
                Batch(
                    conversation=conv.sample_id,
                    session=turns[0].session,
                    turns=len(turns),
                    extracted=len(job.state.get("extracted", [])),
                    candidates=sum(len(c) for c in job.state.get("candidates", [])),
                    events=dict(Counter(c["event"] for c in result.get("changes", []))),
                    reflections=len(result.get("reflections", [])),
                    consolidated=len(result.get("consolidated", [])),
                    usage=result.get("usage", {}),
                    form_s=secs,
                )
            )
        log(f"  {label}: {conv.sample_id} formed ({sum(b.turns for b in rep.batches)} turns so far)")
    return rep


def _memory(db: Path, embedder: Embedder, llm: Any) -> AsyncMemory:
    remove_db(db)
    return AsyncMemory(
        db,
        embedder=SharedEmbedder(embedder),
        sessions="sqlite",
        formation=FormationConfig(background=False, idle_minutes=None),
        llm=llm,
    )


# =========================================================================== summaries


def _calls(b: Batch, task: str) -> int:
    return int(b.usage.get(task, {}).get("calls", 0))


def _tokens(b: Batch, kind: str, tasks: Sequence[str] = TASKS) -> int:
    return sum(int(b.usage.get(t, {}).get(kind, 0)) for t in tasks)


def usage_summary(rep: Replay) -> dict[str, Any]:
    """Per task: mean / max calls, mean prompt / completion tokens per batch; facts distribution;
    calls vs facts-per-batch buckets; target violations."""
    bs = rep.batches
    n = len(bs)
    per_task: dict[str, Any] = {}
    for task in TASKS:
        calls = [_calls(b, task) for b in bs]
        per_task[task] = {
            "calls_mean": round(float(np.mean(calls)), 3),
            "calls_max": int(max(calls)),
            "batches_with_call": sum(1 for c in calls if c),
            "prompt_tokens_mean": round(float(np.mean([_tokens(b, "prompt_tokens", [task]) for b in bs])), 1),
            "completion_tokens_mean": round(float(np.mean([_tokens(b, "completion_tokens", [task]) for b in bs])), 1),
            "prompt_tokens_max": int(max(_tokens(b, "prompt_tokens", [task]) for b in bs)),
        }
    all_calls = [sum(_calls(b, t) for t in TASKS) for b in bs]
    per_task["all"] = {
        "calls_mean": round(float(np.mean(all_calls)), 3),
        "calls_max": int(max(all_calls)),
        "prompt_tokens_mean": round(float(np.mean([_tokens(b, "prompt_tokens") for b in bs])), 1),
        "completion_tokens_mean": round(float(np.mean([_tokens(b, "completion_tokens") for b in bs])), 1),
        "prompt_tokens_max": int(max(_tokens(b, "prompt_tokens") for b in bs)),
    }
    facts = [b.extracted for b in bs]
    buckets = []
    for lo, hi in BUCKETS:
        sel = [b for b in bs if lo <= b.extracted <= hi]
        if not sel:
            continue
        buckets.append(
            {
                "facts": f"{lo}" if lo == hi else (f"{lo}+" if hi >= 10_000 else f"{lo}-{hi}"),
                "batches": len(sel),
                **{f"{t}_mean": round(float(np.mean([_calls(b, t) for b in sel])), 2) for t in TASKS},
                **{f"{t}_max": max(_calls(b, t) for b in sel) for t in TASKS},
                "prompt_tokens_mean": round(float(np.mean([_tokens(b, "prompt_tokens") for b in sel])), 1),
            }
        )
    off_target = [
        f"{b.conversation}:s{b.session}"
        for b in bs
        if _calls(b, "extract") != 1 or _calls(b, "dedup") > 1 or _calls(b, "reflect") != 1
    ]
    events = Counter[str]()
    for b in bs:
        events.update(b.events)
    return {
        "batches": n,
        "turns": rep.turns,
        "turns_per_batch_mean": round(rep.turns / n, 1),
        "per_task": per_task,
        "facts_per_batch": {
            "mean": round(float(np.mean(facts)), 2),
            "median": float(np.median(facts)),
            "p90": float(np.percentile(facts, 90)),
            "max": int(max(facts)),
            "zero": sum(1 for f in facts if f == 0),
            "total": int(sum(facts)),
        },
        "events": dict(events),
        "dedup_candidates_per_fact": round(sum(b.candidates for b in bs) / max(1, sum(facts)), 2),
        "reflections_per_batch_mean": round(float(np.mean([b.reflections for b in bs])), 2),
        "consolidations_per_batch_mean": round(float(np.mean([b.consolidated for b in bs])), 2),
        "buckets": buckets,
        "off_target_batches": off_target,
    }


# =========================================================================== retrieval


@dataclass
class ExpandStats:
    searches: int = 0
    short: int = 0
    """Searches whose expanded list had fewer than k dia_ids."""
    fact_hits_top10: int = 0
    message_hits_top10: int = 0
    facts_without_source: int = 0


def expanded_search(mem: AsyncMemory, event_dia: dict[str, str], stats: ExpandStats) -> locomo.SearchFn:
    """Search, then walk the hits in order: a raw turn gives its dia_id, a fact gives the dia_ids
    of its source events; de-duplicate, cut at k."""

    async def search(user_id: str, question: str, k: int) -> list[str | None]:
        res = await mem.search(question, user_id=user_id, top_k=max(FETCH, k))
        out: list[str | None] = []
        seen: set[str] = set()
        for i, h in enumerate(res.hits):
            if h.fact.kind == "message":
                ids = [h.fact.metadata.get("dia_id")]
            else:
                ids = [event_dia.get(e) for e in h.fact.source_event_ids]
                if not any(ids):
                    stats.facts_without_source += 1
            if i < 10:
                if h.fact.kind == "message":
                    stats.message_hits_top10 += 1
                else:
                    stats.fact_hits_top10 += 1
            for d in ids:
                if d and d not in seen:
                    seen.add(d)
                    out.append(d)
            if len(out) >= k:
                break
        stats.searches += 1
        if len(out) < k:
            stats.short += 1
        return out[:k]

    return search


async def fact_stats(
    mem: AsyncMemory, convs: Sequence[locomo.Conversation], event_dia: dict[str, str]
) -> dict[str, Any]:
    """Stored formation facts: count, words, sources per fact (valid facts only)."""
    n, words, sources, no_src, multi_turn = 0, [], [], 0, 0
    for conv in convs:
        cursor: str | None = None
        while True:
            page = await mem.list(user_id=conv.sample_id, limit=200, cursor=cursor)
            for f in page.items:
                if f.kind != "fact" or not f.is_valid:
                    continue
                n += 1
                words.append(len(f.content.split()))
                src = {event_dia[e] for e in f.source_event_ids if e in event_dia}
                sources.append(len(src))
                no_src += not src
                multi_turn += len(src) > 1
            cursor = page.next_cursor
            if cursor is None:
                break
    return {
        "facts": n,
        "words_mean": round(float(np.mean(words)), 1) if words else 0.0,
        "sources_per_fact_mean": round(float(np.mean(sources)), 2) if sources else 0.0,
        "facts_without_source": no_src,
        "facts_with_several_sources": multi_turn,
    }


async def attribution_check(mem: AsyncMemory, convs: Sequence[locomo.Conversation], rep: Replay) -> dict[str, Any]:
    """Scripted facts (never updated): is the stored source turn the message the fact was written from?

    ``PromptedModel`` does not pass the model's ``sources`` on, so the pipeline attributes each
    fact by shared content words (``attribute_sources``); this counts how often that is right."""
    checked = right = 0
    for conv in convs:
        cursor: str | None = None
        while True:
            page = await mem.list(user_id=conv.sample_id, limit=200, cursor=cursor)
            for f in page.items:
                want = SCRIPTED_SOURCES.get(f.content)
                if f.kind != "fact" or f.version != 1 or want is None:  # UPDATEd facts keep old sources
                    continue
                checked += 1
                right += any(rep.event_text.get(e) == want for e in f.source_event_ids)
            cursor = page.next_cursor
            if cursor is None:
                break
    return {"facts_checked": checked, "attributed_to_the_right_turn": right}


async def retrieval(
    convs: Sequence[locomo.Conversation], formed: AsyncMemory, rep: Replay, embedder: Embedder, work: Path
) -> dict[str, Any]:
    """(iii) facts alone in the formed DB, then (ii) raw turns ingested into it; (i) raw turns alone."""
    out: dict[str, Any] = {}
    out["stored_facts"] = await fact_stats(formed, convs, rep.event_dia)
    modes: list[tuple[str, str]] = []

    async def run(key: str, label: str, mem: AsyncMemory) -> None:
        stats = ExpandStats()
        mem._query_cache.clear()
        r = await locomo.score(expanded_search(mem, rep.event_dia, stats), convs, label)
        out[key] = {**r.as_dict(), "expansion": asdict(stats)}
        modes.append((key, label))
        log(f"  {label}: R@10 {r.recall[10]:.3f}")

    await run("facts", "(iii) extracted facts alone, expanded to source turns", formed)
    n, secs = await locomo.ingest(formed, convs)
    out["raw_ingest_into_formed"] = {"turns": n, "seconds": round(secs, 2)}
    await run("raw_plus_facts", "(ii) raw turns + extracted facts (facts expanded)", formed)
    raw_db = work / "formation-raw.db"
    remove_db(raw_db)
    raw = AsyncMemory(raw_db, embedder=SharedEmbedder(embedder), sessions="null")
    try:
        await locomo.ingest(raw, convs)
        await run("raw", "(i) raw turns alone (verbatim ingest)", raw)
    finally:
        await raw.close()
        remove_db(raw_db)
    out["order"] = ["raw", "raw_plus_facts", "facts"]
    return out


# =========================================================================== main


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _embedders(specs: Sequence[str]) -> tuple[dict[str, Embedder], dict[str, Any]]:
    out: dict[str, Embedder] = {}
    info: dict[str, Any] = {}
    for spec in dict.fromkeys(specs):
        t = time.perf_counter()
        try:
            e = make_embedder(spec)
        except Exception as exc:  # the local model is optional
            log(f"embedder {spec!r} unavailable ({type(exc).__name__}: {exc}); skipped")
            info[spec] = {"unavailable": f"{type(exc).__name__}: {exc}"}
            continue
        assert e is not None
        out[spec] = e
        info[spec] = {"name": e.name, "dim": e.dim, "load_s": round(time.perf_counter() - t, 2)}
    return out, info


async def main() -> None:
    a = ARGS
    data = Path(a.data)
    if not data.exists():
        raise SystemExit(f"no LoCoMo data at {data}; pass --data PATH")
    convs = locomo.load(data)
    if a.limit_conversations:
        convs = convs[: a.limit_conversations]
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out_path = Path(a.out) if a.out else ROOT / "results" / "formation.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    n_turns = sum(c.turns for c in convs)
    n_sessions = sum(1 for c in convs for s in c.sessions if s)
    log(f"{len(convs)} conversations, {n_sessions} sessions, {n_turns} turns, trigger {a.trigger}")
    load0 = os.getloadavg()
    started = time.perf_counter()

    tp_specs = [s.strip() for s in a.throughput_embedders.split(",") if s.strip()]
    sc_specs = [] if a.skip_scripted else [s.strip() for s in a.scripted_embedders.split(",") if s.strip()]
    embedders, emb_info = _embedders([a.embedder, *tp_specs, *sc_specs])
    for e in embedders.values():
        await e.embed_batch(["warm up the embedder", "a second sentence"])
    if a.embedder not in embedders:
        raise SystemExit(f"retrieval embedder {a.embedder!r} is not available")

    report: dict[str, Any] = {
        "benchmark": "formation",
        "when": datetime.now().isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "trigger": a.trigger,
        "data": {"conversations": [c.sample_id for c in convs], "sessions": n_sessions, "turns": n_turns},
        "embedders": emb_info,
        "retrieval_embedder": a.embedder,
        "usage": {},
        "throughput": {},
    }

    # --- offline replays: usage, throughput; the retrieval embedder's DB is kept for part 2
    formed: AsyncMemory | None = None
    formed_rep: Replay | None = None
    for spec in dict.fromkeys([a.embedder, *[s for s in tp_specs if s in embedders]]):
        db = work / f"formation-offline-{spec}.db"
        mem = await _memory(db, embedders[spec], "offline").open()
        rep = await replay(mem, convs, f"offline/{spec}", a.trigger)
        report["throughput"][spec] = {
            "embedder": embedders[spec].name,
            "turns": rep.turns,
            "batches": len(rep.batches),
            "form_s": round(rep.form_s, 3),
            "turns_per_s": round(rep.turns / rep.form_s, 1),
            "batch_ms_p50": round(float(np.median([b.form_s for b in rep.batches])) * 1000, 1),
            "batch_ms_max": round(max(b.form_s for b in rep.batches) * 1000, 1),
            "add_events_s": round(rep.add_events_s, 3),
        }
        log(f"offline/{spec}: {rep.turns / rep.form_s:.0f} turns/s formed")
        report["usage"][f"offline/{spec}"] = usage_summary(rep)
        if spec == a.embedder:
            formed, formed_rep = mem, rep
        else:
            await mem.close()
            remove_db(db)

    # --- scripted (prompted model over ScriptedLLM): prompt sizes of a real model. The last
    # run stores the raw turns first (verbatim memories in the same scope as the facts), to
    # show how they change the dedup candidates.
    runs = [(x, False) for x in dict.fromkeys(sc_specs) if x in embedders]
    if runs and not a.no_crowding_check:
        runs.append((runs[0][0], True))
    for spec, raw_first in runs:
        # one callable answer per call; 8 per batch is more than the pipeline ever makes
        llm = ScriptedLLM([scripted_answer] * (8 * n_sessions), name="scripted:plausible")
        SCRIPTED_SOURCES.clear()
        label = f"scripted/{spec}" + (", raw turns stored first" if raw_first else "")
        db = work / f"formation-scripted-{spec}.db"
        mem = await _memory(db, embedders[spec], llm).open()
        try:
            if raw_first:
                await locomo.ingest(mem, convs)
            rep = await replay(mem, convs, label, a.trigger)
            attribution = await attribution_check(mem, convs, rep)
        finally:
            await mem.close()
            remove_db(db)
        summary = usage_summary(rep)
        summary["llm_calls_recorded"] = len(llm.calls)
        summary["source_attribution"] = attribution
        report["usage"][label] = summary

    # --- retrieval
    assert formed is not None and formed_rep is not None
    try:
        report["retrieval"] = await retrieval(convs, formed, formed_rep, embedders[a.embedder], work)
    finally:
        await formed.close()
        remove_db(work / f"formation-offline-{a.embedder}.db")
    for e in embedders.values():
        await e.aclose()

    report["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "loadavg_start": load0,
        "loadavg_end": os.getloadavg(),
        "threads": os.environ["OPENBLAS_NUM_THREADS"],
    }
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    out_path.write_text(json.dumps(report, indent=2))
    print_tables(report)
    log(f"wrote {out_path} in {report['elapsed_s']} s")


# =========================================================================== tables


def print_tables(r: dict[str, Any]) -> None:
    d = r["data"]
    print(
        f"## Memory formation: {len(d['conversations'])} LoCoMo dev conversations, {d['sessions']} sessions "
        f"(= batches), {d['turns']:,} turns; trigger `{r['trigger']}`; commit {r['commit']}\n"
    )
    for name, u in r["usage"].items():
        f = u["facts_per_batch"]
        print(
            f"### Calls and tokens per batch: {name} ({u['batches']} batches, {u['turns_per_batch_mean']} turns/batch; "
            f"facts/batch mean {f['mean']}, median {f['median']:g}, p90 {f['p90']:g}, max {f['max']}, "
            f"{f['zero']} batches with none; {f['total']} facts)\n"
        )
        print("| task | calls/batch mean | max | batches with a call | prompt tok/batch | completion tok/batch |")
        print("|---|---:|---:|---:|---:|---:|")
        for task in (*TASKS, "all"):
            t = u["per_task"][task]
            print(
                f"| {task} | {t['calls_mean']:.2f} | {t['calls_max']} | {t.get('batches_with_call', '-')} "
                f"| {t['prompt_tokens_mean']:,.0f} | {t['completion_tokens_mean']:,.0f} |"
            )
        print(
            f"\nchanges {u['events']}; dedup candidates/fact {u['dedup_candidates_per_fact']}; "
            f"reflections/batch {u['reflections_per_batch_mean']}; "
            f"consolidations/batch {u['consolidations_per_batch_mean']}; "
            f"off-target batches (extract != 1, dedup > 1 or reflect != 1): {len(u['off_target_batches'])}\n"
        )
        if "source_attribution" in u:
            sa = u["source_attribution"]
            print(
                f"source attribution (pipeline's word overlap): {sa['attributed_to_the_right_turn']} of "
                f"{sa['facts_checked']} stored facts point at the message they were written from\n"
            )
        print("| facts in batch | batches | extract mean/max | dedup mean/max | reflect mean/max | prompt tok/batch |")
        print("|---|---:|---:|---:|---:|---:|")
        for b in u["buckets"]:
            print(
                f"| {b['facts']} | {b['batches']} | {b['extract_mean']:.2f} / {b['extract_max']} "
                f"| {b['dedup_mean']:.2f} / {b['dedup_max']} | {b['reflect_mean']:.2f} / {b['reflect_max']} "
                f"| {b['prompt_tokens_mean']:,.0f} |"
            )
        print()
    ret = r.get("retrieval")
    if ret:
        s = ret["stored_facts"]
        print(
            f"### Retrieval, offline model, embedder `{r['retrieval_embedder']}`: {s['facts']} stored facts, "
            f"{s['words_mean']} words, {s['sources_per_fact_mean']} source turns/fact, "
            f"{s['facts_without_source']} without a source\n"
        )
        print("| mode | R@1 | R@5 | R@10 | hit@1 | hit@5 | hit@10 | fact hits in top 10 | short lists |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for key in ret["order"]:
            m = ret[key]
            x = m["expansion"]
            share = x["fact_hits_top10"] / max(1, x["fact_hits_top10"] + x["message_hits_top10"])
            print(
                f"| {m['mode']} | {m['recall@1']:.3f} | {m['recall@5']:.3f} | **{m['recall@10']:.3f}** "
                f"| {m['hit@1']:.3f} | {m['hit@5']:.3f} | {m['hit@10']:.3f} | {share:.0%} | {x['short']} |"
            )
        print()
    print("### Formation throughput, offline model (end_session calls only)\n")
    print("| embedder | turns | batches | form s | turns/s | batch p50 ms | batch max ms | add_event s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for t in r["throughput"].values():
        print(
            f"| {t['embedder']} | {t['turns']:,} | {t['batches']} | {t['form_s']} | **{t['turns_per_s']:,.0f}** "
            f"| {t['batch_ms_p50']} | {t['batch_ms_max']} | {t['add_events_s']} |"
        )
    m = r["machine"]
    print(
        f"\n{m['cpus']} CPUs, BLAS threads {m['threads']}, load avg {m['loadavg_start'][0]:.2f} -> "
        f"{m['loadavg_end'][0]:.2f}; elapsed {r['elapsed_s']} s"
    )


if __name__ == "__main__":
    asyncio.run(main())
