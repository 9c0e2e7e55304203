"""Candidate-generation levers on LoCoMo (issue 22), measured on the tune and check halves.

One process per half (``--conversations``): the half is ingested once by the real engine into
a SQLite file (``--db``, reused when present), then every question is searched once per lever
with the engine's own parts: ``Searcher.keyword`` (FTS5 BM25 + author boost) for the keyword
list, the engine's query embedding, an exact cosine over the stored vectors (what the SQLite
store does below its ANN threshold), and :func:`memlane.retrieval.hybrid.fuse`. A lever changes
one of these steps (the query, a list's depth, the vectors searched, a second stage over the
fused pool). The ``baseline`` row equals ``memlane bench locomo`` on the same half (checked in
docs/benchmarks.md, "Issue 22"). A row's p50 is its whole pipeline per question (query
embedding included, no cache), but rows run one after another, so on a busy machine compare
them only through ``--latency``: the real ``search`` without and with keyword feedback,
interleaved question by question.

    python bench/recall_levers.py --data ../shared/bench/locomo/locomo_dev.json \\
        --conversations conv-26 conv-30 conv-41 --db /var/tmp/recall/tune.db [--levers baseline,prior]
    python bench/recall_levers.py ... --coverage      # evidence in keyword top-N ∪ vector top-N
    python bench/recall_levers.py ... --latency 1     # search p50/p95 and recall, feedback off vs on

``--embedder e5`` runs the same levers over an e5 database (a separate ``--db``). The data is
read in place (CC BY-NC: never copied into the repository).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memlane.evaluation.locomo import KS, Conversation, ingest, load
from memlane.memory import AsyncMemory
from memlane.models import Candidate, FactFilter, Scope
from memlane.retrieval.hybrid import FEEDBACK_DOCS, RetrievalConfig, fuse
from memlane.retrieval.text import STOPWORDS, date_words, query_terms, words


@dataclass
class Conv:
    name: str
    ids: list[str]
    dia: list[str]
    text: list[str]
    session: list[str]
    seq: list[int]
    when: list[datetime | None]
    rowid: list[int]
    mat: np.ndarray
    ctxmat: np.ndarray | None = None
    questions: list[tuple[str, list[str]]] = field(default_factory=list)


def rows_of(db: str, conv: Conversation) -> Conv:
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT id, metadata, embedding, content, session_id, seq, occurred_at, rowid FROM facts"
        " WHERE user_id=? AND invalid_at IS NULL ORDER BY rowid",
        (conv.sample_id,),
    ).fetchall()
    con.close()
    dim = len(rows[0][2]) // 4
    mat = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), dim).copy()
    when = [datetime.fromisoformat(r[6]) if r[6] else None for r in rows]
    return Conv(
        conv.sample_id,
        [r[0] for r in rows],
        [json.loads(r[1]).get("dia_id") for r in rows],
        [r[3] for r in rows],
        [r[4] for r in rows],
        [int(r[5] or 0) for r in rows],
        when,
        [int(r[7]) for r in rows],
        mat,
        questions=[(q, ev) for q, ev, _ in conv.questions],
    )


# ---------------------------------------------------------------------------------- lever 1
#: Question scaffolding: words that say what kind of answer is wanted, not what it is about.
SCAFFOLD = frozenset(
    [
        "say",
        "said",
        "says",
        "saying",
        "mention",
        "mentioned",
        "mentions",
        "talk",
        "talked",
        "tell",
        "told",
        "think",
        "thinks",
        "thought",
        "feel",
        "feels",
        "kind",
        "type",
        "sort",
        "many",
        "much",
        "long",
        "ago",
        "ever",
        "recently",
        "likely",
        "would",
        "might",
        "could",
        "probably",
        "one",
    ]
)
_PREFIX = re.compile(
    r"^\s*(what|which|who|whom|when|where|why|how)(\s+(kind|type|sort)\s+of)?(\s+(many|much|long|often))?"
    r"(\s+\w+)??\s+(did|does|do|is|was|were|are|has|have|had|would|might|could)\s+",
    re.I,
)


def drop_scaffold(q: str) -> str:
    """The question without its scaffolding words (the keyword side drops stopwords itself)."""
    kept = [w for w in re.findall(r"[\w'’-]+", q) if w.lower() not in SCAFFOLD]
    return " ".join(kept) or q


def vector_scaffold(q: str) -> str:
    """The question's leading wh- frame removed for the vector side ("When did Caroline go ..."
    -> "Caroline go ...")."""
    out = _PREFIX.sub("", q).rstrip("?").strip()
    return out or q


_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_REL = {
    "yesterday": (-1, "day"),
    "last night": (-1, "day"),
    "today": (0, "day"),
    "tonight": (0, "day"),
    "last week": (-7, "week"),
    "last weekend": (-7, "weekend"),
    "this week": (0, "week"),
    "this weekend": (0, "weekend"),
    "last month": (-1, "month"),
    "this month": (0, "month"),
    "last year": (-1, "year"),
    "this year": (0, "year"),
    "next week": (7, "week"),
    "next month": (1, "month"),
    "next year": (1, "year"),
}
_REL_RE = re.compile(r"\b(" + "|".join(sorted(_REL, key=len, reverse=True)) + r")\b", re.I)


def resolved_dates(text: str, when: datetime | None) -> str:
    """Date words for the relative dates in a turn, resolved against its session date
    ("last month" in a 2 August 2023 session -> "July 2023")."""
    if when is None:
        return ""
    out: list[str] = []
    for m in _REL_RE.finditer(text):
        delta, unit = _REL[m.group(1).lower()]
        if unit == "day":
            d = when + timedelta(days=delta)
            out.append(f"{d.day} {d.strftime('%B')} {d.year} {d.strftime('%A')}")
        elif unit in ("week", "weekend"):
            d = when + timedelta(days=delta)
            out.append(f"{d.strftime('%B')} {d.year}")
        elif unit == "month":
            y, mo = divmod(when.year * 12 + when.month - 1 + delta, 12)
            out.append(f"{_MONTHS[mo].title()} {y}")
        else:
            out.append(str(when.year + delta))
    return " ".join(dict.fromkeys(out))


# ---------------------------------------------------------------------------------- pipeline
#: The default (before and after issue 22): no keyword feedback.
BEFORE = RetrievalConfig(feedback_docs=0)
#: ``memory.keyword_feedback: true``: the engine's RM3.
FEEDBACK = RetrievalConfig(feedback_docs=FEEDBACK_DOCS)


def rm3(docs: int, terms: int, keep: float) -> RetrievalConfig:
    """The engine's RM3 (``RetrievalConfig.feedback_*``): ``keep`` is the original query's share."""
    return RetrievalConfig(feedback_docs=docs, feedback_terms=terms, feedback_weight=round(1 - keep, 6))


@dataclass
class Lever:
    """One configuration: how the query is rewritten, how deep each side goes, what second
    stage runs over the fused pool."""

    kw_query: Callable[[str], str] = lambda q: q
    vec_query: Callable[[str], str] = lambda q: q
    kw_depth: int = 20
    vec_depth: int = 20
    config: RetrievalConfig = field(default_factory=lambda: BEFORE)
    vectors: str = "turn"  # turn | ctx | max (turn and ctx, best cosine) | none
    prior: float = 0.0  # session prior weight
    prior_pool: int = 30
    rm3: tuple[int, int, float] | None = None  # the bench's own RM3 (docs, terms, original weight)
    full_cosine: bool = False  # keyword candidates get their own cosine, not the list's lowest
    db: str = "main"  # main | dates (relative dates resolved into the date column)


async def embed_query(m: AsyncMemory, q: str) -> np.ndarray:
    m._query_cache.clear()
    out = await m.search_engine.embed_queries([q])  # type: ignore[misc]
    assert out is not None
    return np.asarray(out, dtype=np.float32)[0]


#: How RM3 weighs its feedback documents: softmax of the BM25 scores, linear in them, or uniform.
RM3_WEIGHTS = "softmax"


def rm3_terms(c: Conv, pos: dict[str, int], kw: list[Candidate], q: str, docs: int, terms: int) -> list[str]:
    """RM3's expansion terms: the query-likelihood-weighted term distribution of the top
    ``docs`` keyword hits (scores softmax-normalised), query terms and stopwords left out."""
    top = [cand for cand in kw[:docs] if cand.fact_id in pos]
    if not top:
        return []
    s = np.array([cand.score for cand in top])
    if RM3_WEIGHTS == "softmax":
        w = np.exp(s - s.max())
    elif RM3_WEIGHTS == "linear":
        w = s / s.sum()
    elif RM3_WEIGHTS == "rank":
        w = 0.5 ** np.arange(len(s))
    else:
        w = np.ones_like(s)
    w /= w.sum()
    qt = set(query_terms(q))
    weight: Counter[str] = Counter()
    for wi, cand in zip(w, top, strict=True):
        toks = [t for t in words(c.text[pos[cand.fact_id]]) if t not in STOPWORDS and len(t) > 2 and t not in qt]
        tf = Counter(toks)
        n = sum(tf.values()) or 1
        for t, k in tf.items():
            weight[t] += float(wi) * k / n
    # speaker names are in every turn: leave the first word (the "Name:" prefix) to the author boost
    return [t for t, _ in weight.most_common(terms)]


async def run_question(m: AsyncMemory, c: Conv, pos: dict[str, int], lever: Lever, q: str) -> list[str]:
    eng = m.search_engine
    scope = Scope(user_id=c.name)
    pf = scope.partition_filter(None)
    flt = FactFilter()
    authors = await eng.facts.authors(pf)
    kq = lever.kw_query(q)
    eng.config = lever.config  # the engine's feedback (RM3) reads it
    kw = await eng.keyword(pf, kq, authors, limit=lever.kw_depth, flt=flt, scope=scope)
    if lever.rm3 is not None:
        docs, nterms, keep = lever.rm3
        exp = rm3_terms(c, pos, kw, kq, docs, nterms)
        if exp:
            kw2 = await eng.keyword(pf, kq + " " + " ".join(exp), authors, limit=lever.kw_depth, flt=flt)
            top1 = max((x.score for x in kw), default=1.0) or 1.0
            top2 = max((x.score for x in kw2), default=1.0) or 1.0
            mixed: dict[str, float] = defaultdict(float)
            for x in kw:
                mixed[x.fact_id] += keep * x.score / top1
            for x in kw2:
                mixed[x.fact_id] += (1 - keep) * x.score / top2
            kw = [Candidate(k, s) for k, s in sorted(mixed.items(), key=lambda kv: -kv[1])][: lever.kw_depth]
    vec: list[Candidate] = []
    if lever.vectors != "none":
        qv = await embed_query(m, lever.vec_query(q))
        if lever.vectors == "turn":
            cos = c.mat @ qv
        elif lever.vectors == "ctx":
            assert c.ctxmat is not None
            cos = c.ctxmat @ qv
        else:
            assert c.ctxmat is not None
            cos = np.maximum(c.mat @ qv, c.ctxmat @ qv)
        order = np.argsort(-cos, kind="stable")[: lever.vec_depth]
        vec = [Candidate(c.ids[i], float(cos[i])) for i in order]
        if lever.full_cosine:
            have = {x.fact_id for x in vec}
            extra = [Candidate(x.fact_id, float(cos[pos[x.fact_id]])) for x in kw if x.fact_id not in have]
            vec = vec + sorted(extra, key=lambda x: -x.score)
    cfg = lever.config.model_copy(update={"depth": max(lever.kw_depth, lever.vec_depth)})
    pool = lever.prior_pool if lever.prior > 0 else 10
    fused = fuse([kw], [vec] if vec else [], cfg, top_k=pool)
    if lever.prior > 0 and fused:
        mass: dict[str, float] = defaultdict(float)
        for f in fused:
            mass[c.session[pos[f.key]]] += f.score
        top = max(mass.values()) or 1.0
        scored = [(f.score + lever.prior * mass[c.session[pos[f.key]]] / top, f.key) for f in fused]
        scored.sort(key=lambda t: -t[0])
        keys = [k for _, k in scored]
    else:
        keys = [f.key for f in fused]
    return [c.dia[pos[k]] for k in keys[:10]]


async def run_lever(m: AsyncMemory, convs: list[Conv], lever: Lever) -> dict[str, Any]:
    sums = {k: 0.0 for k in KS}
    n = 0
    ms: list[float] = []
    for c in convs:
        pos = {fid: i for i, fid in enumerate(c.ids)}
        for q, ev in c.questions:
            t = time.perf_counter()
            got = await run_question(m, c, pos, lever, q)
            ms.append((time.perf_counter() - t) * 1000)
            e = set(ev)
            for k in KS:
                sums[k] += len(e.intersection(got[:k])) / len(e)
            n += 1
    return {**{f"r@{k}": round(sums[k] / n, 4) for k in KS}, "p50_ms": round(float(np.percentile(ms, 50)), 2), "n": n}


async def latency(
    m: AsyncMemory, convs: list[Conv], configs: dict[str, RetrievalConfig], rounds: int
) -> dict[str, Any]:
    """The real ``AsyncMemory.search`` under each configuration, interleaved question by
    question (a busy machine slows them alike), query embedding included (no cache): recall
    and p50 / p95 ms per configuration."""
    ms: dict[str, list[float]] = {k: [] for k in configs}
    sums: dict[str, dict[int, float]] = {k: {k2: 0.0 for k2 in KS} for k in configs}
    n = 0
    for _ in range(rounds):
        for c in convs:
            for q, ev in c.questions:
                e = set(ev)
                for name, cfg in configs.items():
                    m.retrieval = cfg
                    m._query_cache.clear()
                    t = time.perf_counter()
                    res = await m.search(q, user_id=c.name, top_k=10)
                    ms[name].append((time.perf_counter() - t) * 1000)
                    got = [h.fact.metadata.get("dia_id") for h in res.hits]
                    for k in KS:
                        sums[name][k] += len(e.intersection(got[:k])) / len(e)
                n += 1
    return {
        name: {
            **{f"r@{k}": round(sums[name][k] / n, 4) for k in KS},
            "p50_ms": round(float(np.percentile(ms[name], 50)), 2),
            "p95_ms": round(float(np.percentile(ms[name], 95)), 2),
        }
        for name in configs
    }


async def coverage(m: AsyncMemory, convs: list[Conv], depths: list[int], vectors: str = "turn") -> dict[str, Any]:
    """Share of evidence in keyword top-N ∪ vector top-N (N = each depth), and in each alone."""
    out: dict[str, dict[str, float]] = {str(d): {"kw": 0.0, "vec": 0.0, "union": 0.0} for d in depths}
    n = 0
    deep = max(depths)
    for c in convs:
        pos = {fid: i for i, fid in enumerate(c.ids)}
        pf = Scope(user_id=c.name).partition_filter(None)
        authors = await m.search_engine.facts.authors(pf)
        for q, ev in c.questions:
            kw = await m.search_engine.keyword(pf, q, authors, limit=deep, flt=FactFilter())
            qv = await embed_query(m, q)
            mat = c.mat if vectors == "turn" else c.ctxmat
            assert mat is not None
            cos = mat @ qv
            if vectors == "max":
                cos = np.maximum(c.mat @ qv, cos)
            order = list(np.argsort(-cos, kind="stable")[:deep])
            e = set(ev)
            for d in depths:
                k = {c.dia[pos[x.fact_id]] for x in kw[:d]}
                v = {c.dia[i] for i in order[:d]}
                out[str(d)]["kw"] += len(e & k) / len(e)
                out[str(d)]["vec"] += len(e & v) / len(e)
                out[str(d)]["union"] += len(e & (k | v)) / len(e)
            n += 1
    return {d: {k: round(v / n, 4) for k, v in r.items()} for d, r in out.items()}


async def context_matrix(m: AsyncMemory, c: Conv, radius: int, dated: bool) -> np.ndarray:
    """Each turn embedded with its session neighbours (``radius`` each side) and its date."""
    by_session: dict[str, dict[int, str]] = defaultdict(dict)
    for s, q, t in zip(c.session, c.seq, c.text, strict=True):
        by_session[s][q] = t
    texts = []
    for s, q, w in zip(c.session, c.seq, c.when, strict=True):
        near = by_session[s]
        parts = [near[i] for i in range(q - radius, q + radius + 1) if i in near]
        head = f"{date_words(w)}. " if dated and w else ""
        texts.append(head + " ".join(parts))
    assert m.embedder is not None
    out = await m.embedder.embed_batch(texts)
    return np.asarray(out, dtype=np.float32)


def dated_copy(db: str, convs: list[Conv]) -> str:
    """A copy of ``db`` whose keyword date column also holds each turn's relative dates
    resolved against its session date (what an ingest-side resolver would index)."""
    out = db + ".dates"
    shutil.copyfile(db, out)
    con = sqlite3.connect(out)
    changed = 0
    for c in convs:
        for rowid, text, w in zip(c.rowid, c.text, c.when, strict=True):
            extra = resolved_dates(text, w)
            if extra:
                con.execute("UPDATE facts_fts SET date = date || ' ' || ? WHERE rowid=?", (extra, rowid))
                changed += 1
    con.commit()
    con.close()
    print(f"dates: {changed} turns got resolved date words", file=sys.stderr)
    return out


def levers(names: list[str]) -> dict[str, Lever]:
    rrf = RetrievalConfig(fusion="rrf", vector_weight=0.1, vector_margin=None, feedback_docs=0)
    table: dict[str, Lever] = {
        "baseline": Lever(),
        "keyword-only": Lever(vectors="none"),
        "1a scaffold dropped (keyword)": Lever(kw_query=drop_scaffold),
        "1b scaffold dropped (both sides)": Lever(kw_query=drop_scaffold, vec_query=vector_scaffold),
        "1c relative dates resolved into the date column": Lever(db="dates"),
        "2 session prior 0.1": Lever(prior=0.1),
        "2 session prior 0.2": Lever(prior=0.2),
        "2 session prior 0.4": Lever(prior=0.4),
        "3 RM3 (10 docs, 10 terms, 0.7)": Lever(rm3=(10, 10, 0.7)),
        "3 RM3 (5 docs, 5 terms, 0.8)": Lever(rm3=(5, 5, 0.8)),
        "3e engine RM3 (20 docs, 10 terms, 0.9): memory.keyword_feedback": Lever(config=FEEDBACK),
        "4a vectors of turn + neighbours (r=1) + date": Lever(vectors="ctx"),
        "4b best of turn / neighbours vector": Lever(vectors="max"),
        "5a depth 30 / 30": Lever(kw_depth=30, vec_depth=30),
        "5b depth 50 / 50": Lever(kw_depth=50, vec_depth=50),
        "5c depth keyword 20 / vector 50": Lever(vec_depth=50),
        "5d keyword candidates' own cosine": Lever(full_cosine=True),
        "rrf (old default)": Lever(config=rrf),
        "6 combined: RM3 (10, 10, 0.7) + depth 30": Lever(rm3=(10, 10, 0.7), kw_depth=30, vec_depth=30),
    }
    for docs in (5, 10, 20):
        for terms in (5, 10, 20):
            for keep in (0.6, 0.7, 0.8, 0.9):
                table[f"3g RM3 ({docs}, {terms}, {keep})"] = Lever(rm3=(docs, terms, keep))
                table[f"3h engine RM3 ({docs}, {terms}, {keep})"] = Lever(config=rm3(docs, terms, keep))
    if names == ["all"]:
        return {k: v for k, v in table.items() if not k.startswith(("3g", "3h"))}
    return {k: v for k, v in table.items() if any(k.startswith(n) for n in names)}


def parse_names(text: str) -> list[str]:
    """``--levers``: name prefixes separated by ``;`` (or ``,`` when there is no ``;``)."""
    return [n.strip() for n in text.split(";" if ";" in text else ",") if n.strip()]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--conversations", nargs="+", required=True)
    ap.add_argument("--db", required=True, help="SQLite file for the half (ingested when missing)")
    ap.add_argument("--embedder", default="local")
    ap.add_argument("--levers", default="all", help="comma-separated name prefixes, or all")
    ap.add_argument("--coverage", action="store_true", help="candidate-pool coverage instead of levers")
    ap.add_argument(
        "--latency",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="the real search without and with keyword feedback, interleaved, this many rounds (instead of levers)",
    )
    ap.add_argument("--rm3-weights", default="softmax", choices=["softmax", "linear", "rank", "uniform"])
    ap.add_argument("--radius", type=int, default=1, help="lever 4: neighbours each side")
    args = ap.parse_args()
    global RM3_WEIGHTS
    RM3_WEIGHTS = args.rm3_weights
    convs_raw = load(args.data, args.conversations)
    fresh = not Path(args.db).exists()
    out: dict[str, Any] = {"conversations": args.conversations, "embedder": args.embedder}
    async with AsyncMemory(args.db, embedder=args.embedder, sessions="null") as m:
        if fresh:
            n, sec = await ingest(m, convs_raw)
            out["ingest_turns_per_s"] = round(n / sec, 1)
            print(f"ingested {n} turns in {sec:.1f} s", file=sys.stderr)
        convs = [rows_of(args.db, c) for c in convs_raw]
        chosen = levers(parse_names(args.levers))
        if args.coverage or any(lv.vectors in ("ctx", "max") for lv in chosen.values()):
            t = time.perf_counter()
            for c in convs:
                c.ctxmat = await context_matrix(m, c, args.radius, dated=True)
            out["ctx_embed_s"] = round(time.perf_counter() - t, 1)
        if args.latency:
            configs = {"default (no feedback)": BEFORE, "keyword_feedback (RM3 20/10/0.1)": FEEDBACK}
            out["latency"] = await latency(m, convs, configs, args.latency)
            print(json.dumps(out, indent=1))
            return
        if args.coverage:
            out["coverage"] = {v: await coverage(m, convs, [10, 20, 30, 50, 100], vectors=v) for v in ("turn", "max")}
            print(json.dumps(out, indent=1))
            return
        results: dict[str, Any] = {}
        main_levers = {k: v for k, v in chosen.items() if v.db == "main"}
        for name, lever in main_levers.items():
            results[name] = await run_lever(m, convs, lever)
            print(name, results[name], file=sys.stderr)
    date_levers = {k: v for k, v in chosen.items() if v.db == "dates"}
    if date_levers:
        dated = dated_copy(args.db, convs)
        async with AsyncMemory(dated, embedder=args.embedder, sessions="null") as m:
            for name, lever in date_levers.items():
                results[name] = await run_lever(m, convs, lever)
                print(name, results[name], file=sys.stderr)
    out["levers"] = results
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
