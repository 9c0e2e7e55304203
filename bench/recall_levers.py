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
    author: list[str] = field(default_factory=list)
    ctxmat: np.ndarray | None = None
    questions: list[tuple[str, list[str]]] = field(default_factory=list)


def rows_of(db: str, conv: Conversation) -> Conv:
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT id, metadata, embedding, content, session_id, seq, occurred_at, rowid, author FROM facts"
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
        author=[r[8] or "" for r in rows],
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
    rel_floor: float | None = None  # keep vector candidates within this of the query's best cosine


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
        if lever.rel_floor is not None and vec:
            vec = [x for x in vec if x.score >= vec[0].score - lever.rel_floor]
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


# ---------------------------------------------------------------------------------- lever 7
#: Lever 7 (learned fusion): per-candidate features of the fused depth-20 pool, in this order.
FEATURES = [
    "blend",  # the default fusion's score
    "kw_norm",  # keyword min-max value (0 when not a keyword candidate)
    "kw_max",  # keyword score / best keyword score
    "kw_inv_rank",
    "has_kw",
    "cos",  # the cosine the blend uses (the vector list's lowest for a keyword-only candidate)
    "vec_inv_rank",
    "has_vec",
    "both",
    "session_share",  # the candidate's session's share of the pool's blend score
    "neighbour",  # best blend score of a pool member 1-2 turns away in the same session
    "speaker_named",  # the question names the turn's speaker
    "other_named",  # the question names a speaker, not this turn's
    "date_match",  # the question names the month or year of the turn's session
    "when_q",  # a "when" question ...
    "when_x_date",  # ... times date_match
    "log_len",  # log of the turn's length in characters
]
_YEAR = re.compile(r"\b(19|20)\d\d\b")


def candidate_features(
    c: Conv, pos: dict[str, int], q: str, kw: list[Candidate], vec: list[Candidate], cfg: RetrievalConfig
) -> tuple[list[str], np.ndarray]:
    """The fused pool (every candidate of the two depth-``cfg.depth`` lists, blend order) and
    its feature rows (:data:`FEATURES`)."""
    fused = fuse([kw], [vec], cfg, top_k=10_000)
    if not fused:
        return [], np.zeros((0, len(FEATURES)))
    kws = [x.score for x in kw if x.score > 0][: cfg.depth]
    lo, hi = (min(kws), max(kws)) if kws else (0.0, 1.0)
    vec_scores = [x.score for x in vec[: cfg.depth]]
    cos_low = min(vec_scores) if vec_scores else 0.0
    qwords = {w.lower() for w in re.findall(r"[A-Za-z]+", q)}
    speakers = {a.lower() for a in c.author if a}
    named = qwords & speakers
    ql = q.lower()
    when_q = 1.0 if ql.startswith("when") or " when " in ql else 0.0
    years = set(_YEAR.findall(q)) and {m.group(0) for m in _YEAR.finditer(q)}
    mass: dict[str, float] = defaultdict(float)
    for f in fused:
        mass[c.session[pos[f.key]]] += f.score
    total = sum(mass.values()) or 1.0
    by_turn = {(c.session[pos[f.key]], c.seq[pos[f.key]]): f.score for f in fused}
    rows = []
    for f in fused:
        i = pos[f.key]
        ks = f.raw.get("keyword")
        kr = f.ranks.get("keyword")
        vr = f.ranks.get("vector")
        cos = f.raw.get("vector", cos_low)
        s, n = c.session[i], c.seq[i]
        nb = max((by_turn.get((s, n + d), 0.0) for d in (-2, -1, 1, 2)), default=0.0)
        who = c.author[i].lower()
        w = c.when[i]
        dm = 0.0
        if w is not None:
            if _MONTHS[w.month - 1] in qwords:
                dm += 0.5
            if str(w.year) in (years or set()):
                dm += 0.5
        rows.append(
            [
                f.score,
                (ks - lo) / (hi - lo) if ks is not None and hi > lo else (1.0 if ks is not None else 0.0),
                ks / hi if ks is not None and hi > 0 else 0.0,
                1.0 / kr if kr else 0.0,
                1.0 if kr else 0.0,
                cos,
                1.0 / vr if vr else 0.0,
                1.0 if vr else 0.0,
                1.0 if kr and vr else 0.0,
                mass[s] / total,
                nb,
                1.0 if who and who in named else 0.0,
                1.0 if named and who not in named else 0.0,
                dm,
                when_q,
                when_q * dm,
                float(np.log1p(len(c.text[i]))),
            ]
        )
    return [f.key for f in fused], np.asarray(rows, dtype=np.float64)


async def dump_features(m: AsyncMemory, convs: list[Conv], depth: int) -> dict[str, Any]:
    """Lever 7's training data for one half: every question's pool with features and labels."""
    cfg = BEFORE.model_copy(update={"depth": depth})
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    qid: list[np.ndarray] = []
    conv_of: list[str] = []
    n_ev: list[int] = []
    j = 0
    for c in convs:
        pos = {fid: i for i, fid in enumerate(c.ids)}
        lever = Lever(kw_depth=depth, vec_depth=depth)
        for q, ev in c.questions:
            eng = m.search_engine
            scope = Scope(user_id=c.name)
            pf = scope.partition_filter(None)
            eng.config = BEFORE
            authors = await eng.facts.authors(pf)
            kw = await eng.keyword(pf, q, authors, limit=lever.kw_depth, flt=FactFilter(), scope=scope)
            qv = await embed_query(m, q)
            cos = c.mat @ qv
            order = np.argsort(-cos, kind="stable")[: lever.vec_depth]
            vec = [Candidate(c.ids[i], float(cos[i])) for i in order]
            keys, x = candidate_features(c, pos, q, kw, vec, cfg)
            e = set(ev)
            xs.append(x)
            ys.append(np.asarray([1.0 if c.dia[pos[k]] in e else 0.0 for k in keys]))
            qid.append(np.full(len(keys), j))
            conv_of.append(c.name)
            n_ev.append(len(e))
            j += 1
    return {
        "x": np.concatenate(xs),
        "y": np.concatenate(ys),
        "qid": np.concatenate(qid),
        "conv": np.asarray(conv_of),
        "n_ev": np.asarray(n_ev),
    }


def rank_recall(scores: np.ndarray, d: dict[str, Any]) -> dict[str, float]:
    """R@1/5/10 of ranking each question's pool by ``scores`` (evidence outside the pool is a
    miss; ties keep the blend order, which is the pool's order)."""
    sums = {k: 0.0 for k in KS}
    qid, y, n_ev = d["qid"], d["y"], d["n_ev"]
    starts = np.searchsorted(qid, np.arange(len(n_ev)))
    ends = np.append(starts[1:], len(qid))
    for j, (a, b) in enumerate(zip(starts, ends, strict=True)):
        order = np.argsort(-scores[a:b], kind="stable")
        hit = y[a:b][order]
        for k in KS:
            sums[k] += float(hit[:k].sum()) / n_ev[j]
    return {f"r@{k}": round(sums[k] / len(n_ev), 4) for k in KS}


def _standardise(x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return np.hstack([(x - mu) / sd, np.ones((x.shape[0], 1))])


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float, iters: int = 50) -> np.ndarray:
    """Pointwise L2 logistic regression by Newton's method (the bias is the last column)."""
    w = np.zeros(x.shape[1])
    reg = np.full(x.shape[1], l2)
    reg[-1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        g = x.T @ (p - y) + reg * w
        h = (x * (p * (1 - p))[:, None]).T @ x + np.diag(reg + 1e-9)
        step = np.linalg.solve(h, g)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fit_listwise(x: np.ndarray, y: np.ndarray, qid: np.ndarray, l2: float, iters: int = 300) -> np.ndarray:
    """Listwise (softmax over each question's pool, cross-entropy against its evidence) linear
    scorer by gradient descent with a fixed step (the bias is irrelevant and stays 0)."""
    w = np.zeros(x.shape[1])
    nq = int(qid.max()) + 1
    ysum = np.bincount(qid, weights=y, minlength=nq)
    keep = ysum[qid] > 0
    x, y, qid = x[keep], y[keep], qid[keep]
    target = y / ysum[qid]
    m = len(np.unique(qid))
    lr = 0.5
    for _ in range(iters):
        s = x @ w
        mx = np.full(nq, -np.inf)
        np.maximum.at(mx, qid, s)
        e = np.exp(s - mx[qid])
        p = e / np.bincount(qid, weights=e, minlength=nq)[qid]
        g = x.T @ (p - target) / m + l2 * w
        g[-1] = 0.0
        w -= lr * g
    return w


def learn(tune: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    """Lever 7: fit on the tune half only (the regulariser picked by leave-one-conversation-out
    inside tune), then score both halves; the blend ordering of the same pool is the baseline."""
    out: dict[str, Any] = {
        "blend tune": rank_recall(tune["x"][:, 0], tune),
        "blend check": rank_recall(check["x"][:, 0], check),
    }
    mu, sd = tune["x"].mean(axis=0), tune["x"].std(axis=0) + 1e-9
    xt, xc = _standardise(tune["x"], mu, sd), _standardise(check["x"], mu, sd)
    convs = sorted(set(tune["conv"].tolist()))
    qconv = tune["conv"][tune["qid"]]
    for kind in ("pointwise", "listwise"):
        cv: dict[float, float] = {}
        for l2 in (0.01, 0.1, 1.0, 10.0, 100.0):
            got = 0.0
            for held in convs:
                tr, te = qconv != held, qconv == held
                if kind == "pointwise":
                    w = fit_logistic(xt[tr], tune["y"][tr], l2)
                else:
                    w = fit_listwise(xt[tr], tune["y"][tr], tune["qid"][tr], l2 / 100)
                sub = _subset(tune, te)
                got += rank_recall(xt[te] @ w, sub)["r@10"] * len(sub["n_ev"])
            cv[l2] = round(got / len(tune["n_ev"]), 4)
        best = max(cv, key=lambda k: (cv[k], k))
        if kind == "pointwise":
            w = fit_logistic(xt, tune["y"], best)
        else:
            w = fit_listwise(xt, tune["y"], tune["qid"], best / 100)
        out[kind] = {
            "cv_r@10_by_l2": cv,
            "l2": best,
            "tune (in sample)": rank_recall(xt @ w, tune),
            "check": rank_recall(xc @ w, check),
            "weights": dict(zip([*FEATURES, "bias"], [round(float(v), 3) for v in w], strict=True)),
        }
        # the blend's first hit stays first; the model orders the rest (recall@1 as the blend's)
        cv_kept = 0.0
        for held in convs:
            tr, te = qconv != held, qconv == held
            if kind == "pointwise":
                wk = fit_logistic(xt[tr], tune["y"][tr], best)
            else:
                wk = fit_listwise(xt[tr], tune["y"][tr], tune["qid"][tr], best / 100)
            sub = _subset(tune, te)
            cv_kept += rank_recall(_first_kept(xt[te] @ wk, sub), sub)["r@10"] * len(sub["n_ev"])
        out[kind + ", blend's first hit kept"] = {
            "cv_r@10": round(cv_kept / len(tune["n_ev"]), 4),
            "tune (in sample)": rank_recall(_first_kept(xt @ w, tune), tune),
            "check": rank_recall(_first_kept(xc @ w, check), check),
        }
    # one feature added to the blend, its weight picked on tune (by R@10, then R@1)
    for name in ("log_len", "neighbour", "session_share", "date_match", "both"):
        j = FEATURES.index(name)
        grid = {a: rank_recall(tune["x"][:, 0] + a * tune["x"][:, j], tune) for a in (0.02, 0.05, 0.1, 0.2)}
        a = max(grid, key=lambda k: (grid[k]["r@10"], grid[k]["r@1"], -k))
        out[f"blend + a x {name}"] = {
            "a": a,
            "tune": grid[a],
            "check": rank_recall(check["x"][:, 0] + a * check["x"][:, j], check),
        }
    return out


def _first_kept(scores: np.ndarray, d: dict[str, Any]) -> np.ndarray:
    """``scores`` with each question's first pool member (the blend's first hit) put first."""
    out = scores.copy()
    starts = np.searchsorted(d["qid"], np.arange(len(d["n_ev"])))
    out[starts] = np.inf
    return out


def _subset(d: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """The questions of ``d`` whose candidate rows are selected (question ids renumbered)."""
    qs = np.unique(d["qid"][rows])
    remap = {int(q): i for i, q in enumerate(qs)}
    return {
        "x": d["x"][rows],
        "y": d["y"][rows],
        "qid": np.asarray([remap[int(q)] for q in d["qid"][rows]]),
        "n_ev": d["n_ev"][qs],
        "conv": d["conv"][qs],
    }


def floor(cos: float) -> RetrievalConfig:
    """The default with another cosine floor (the calibration floor follows it down)."""
    return BEFORE.model_copy(update={"min_vector_score": cos})


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
    for fl in (0.25, 0.2, 0.15):
        table[f"8a cosine floor {fl}"] = Lever(config=floor(fl))
    for rel, lo in ((0.1, 0.2), (0.15, 0.2), (0.2, 0.15), (0.1, 0.1), (0.15, 0.3), (0.25, 0.3)):
        table[f"8b relative floor: within {rel} of the best, at least {lo}"] = Lever(config=floor(lo), rel_floor=rel)
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
    ap.add_argument("--features", metavar="NPZ", help="lever 7: write the pool features here")
    ap.add_argument("--depth", type=int, default=20, help="lever 7: each list's depth in the pool")
    ap.add_argument(
        "--learn", nargs=2, metavar=("TUNE_NPZ", "CHECK_NPZ"), help="lever 7: fit on tune, score both (no store)"
    )
    if "--learn" in sys.argv:
        i = sys.argv.index("--learn")
        tune, check = (dict(np.load(p)) for p in sys.argv[i + 1 : i + 3])
        print(json.dumps(learn(tune, check), indent=1))
        return
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
        if args.features:
            np.savez(args.features, **await dump_features(m, convs, args.depth))
            print(f"features: {args.features}", file=sys.stderr)
            return
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
