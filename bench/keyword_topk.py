"""Keyword stage alone: FTS5's exact bm25 ranking vs the top-k path (stores/sqlite/keyword.py).

Run::

    .venv/bin/python bench/keyword_topk.py --quick          # 20k in one scope (< 2 min)
    .venv/bin/python bench/keyword_topk.py                  # 100k in one scope + 1M in one file

Databases: keyword-only (no vectors), built with ``bench/search_latency.py``'s ``TextGen``
(the same Zipfian synthetic chat texts, pool, sessions of 20 turns, users interleaved) through
``SqliteFactStore.put_facts``; kept in ``--workdir`` (default ``/tmp/memlane-bench``) and
reused when present (``--rebuild`` to start again). Settings: ``100k`` = 100,000 memories in
one user scope; ``1m`` = 1,000 users x 1,000 memories in one file (queries to random users).

Queries: as search_latency.py (other seed): half template questions, half 2-4 content words
of one memory of the target user; terms by ``parse_query`` (stopwords removed).

For each query, in ONE run and alternating order, the old path (``KeywordIndex.exact``: the
single FTS5 ``MATCH`` ordered by bm25, every match scored) and the new path
(``KeywordIndex.search``) are timed on the same connection, after a warm-up pass (the new
path's document-frequency and tokenizer caches are warm, as in a long-running process).
A third arm, in the same rotation: the postings index of the scope
(stores/sqlite/keyword_sidecar.py, built first in this thread and timed: ``index_build_s``),
through ``SqliteFactStore._indexed_search`` (query tokens, FTS5's averages, the fetch of ids and
authors included); ``index = exact`` checks that it returns FTS5's exact scores and rows
(rows tied with the ``limit``-th may differ). ``--skip-full`` skips the top-k path's recall
(it scores every match of every query).
Recall@10 of the new path against the exact top 10 counts ties (a returned row whose exact
score reaches the exact 10th best counts as a hit); ``same scores`` checks that every row the
new path returns carries its exact bm25 (to 1e-9).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20k in one scope only")
    ap.add_argument("--settings", default=None, help="comma list of 100k,1m (default both; quick: 20k)")
    ap.add_argument("--queries", type=int, default=None, help="timed queries per setting (default 400, quick 100)")
    ap.add_argument("--limit", type=int, default=20, help="keyword_search limit (the engine's depth: 20)")
    ap.add_argument("--budget", type=int, default=None, help="KeywordIndex.budget")
    ap.add_argument("--budget-share", type=float, default=None, help="KeywordIndex.budget_share")
    ap.add_argument("--split-min-rows", type=int, default=None, help="KeywordIndex.split_min_rows")
    ap.add_argument("--workdir", default="/tmp/memlane-bench")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--skip-full", action="store_true", help="skip the top-k path's recall (scores every match)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/keyword_topk.json)")
    return ap.parse_args()


ARGS = _args()
ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
_argv, sys.argv = sys.argv, sys.argv[:1]  # search_latency parses sys.argv when imported
import search_latency as sl  # noqa: E402

sys.argv = _argv

import numpy as np  # noqa: E402
from _common import db_size_mb, log, remove_db  # noqa: E402

from memlane.models import Fact, user_partition  # noqa: E402
from memlane.retrieval.text import parse_query  # noqa: E402
from memlane.stores.sqlite.facts import SqliteFactStore  # noqa: E402
from memlane.stores.sqlite.keyword import KeywordIndex  # noqa: E402


async def build(path: Path, name: str, n_users: int, per_user: int, pool_n: int, seed: int) -> list[str]:
    gen = sl.TextGen(seed)
    texts = [gen.sentence() for _ in range(pool_n)]
    users, plan = sl.build_plan(name, n_users, per_user, pool_n, seed)
    if path.exists() and not ARGS.rebuild:
        return users
    remove_db(path)
    store = await SqliteFactStore.open(path)
    n_sessions = -(-per_user // sl.SESSION_LEN)
    base = datetime(2023, 1, 2, 10, 0)
    rng = np.random.default_rng(seed)
    batch: list[Fact] = []
    done, t0, next_log = 0, time.perf_counter(), 0.0
    for s, u in [(s, u) for s in range(n_sessions) for u in range(n_users)]:
        lo, hi = s * sl.SESSION_LEN, min(per_user, (s + 1) * sl.SESSION_LEN)
        when = base + timedelta(days=3 * s + int(rng.integers(0, 3)), minutes=int(rng.integers(0, 600)))
        for j in range(lo, hi):
            batch.append(
                Fact(
                    content=texts[int(plan[u, j])],
                    user_id=users[u],
                    session_id=f"{users[u]}:s{s}",
                    kind="message",
                    author="user" if j % 2 == 0 else "assistant",
                    occurred_at=when + timedelta(minutes=j - lo),
                    hash=f"m{u}-{j}",
                )
            )
        done += hi - lo
        if len(batch) >= sl.BATCH:
            await store.put_facts(batch, None)
            batch = []
            el = time.perf_counter() - t0
            if el > next_log:
                log(f"  loaded {done}/{n_users * per_user} ({done / el:.0f} rows/s)")
                next_log = el + 30
    if batch:
        await store.put_facts(batch, None)
    store.database.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    await store.close()
    return users


def _same_top(got: list[tuple[str, float, Any]], exact: list[tuple[str, float, Any]]) -> bool:
    """FTS5's exact scores and the same rows above the last one's score (ties may differ)."""
    if [round(r[1], 9) for r in got] != [round(r[1], 9) for r in exact]:
        return False
    cut = exact[-1][1] + 1e-9 if exact else 0.0
    return {r[0] for r in got if r[1] > cut} == {r[0] for r in exact if r[1] > cut}


async def run_setting(name: str, n_users: int, per_user: int, pool_n: int, n_queries: int) -> dict[str, Any]:
    a = ARGS
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"keyword-{name}-{n_users}x{per_user}-p{pool_n}-s{a.seed}.db"
    log(f"setting {name}: {n_users} x {per_user} ({path})")
    users = await build(path, name, n_users, per_user, pool_n, a.seed)
    store = await SqliteFactStore.open(path)
    c = store.database.connection()
    kw: dict[str, Any] = {}
    for key in ("budget", "budget_share", "split_min_rows"):
        if getattr(a, key) is not None:
            kw[key] = getattr(a, key)
    ki = KeywordIndex(weights=(0.0, 0.0, 1.0, float(store.ctx_weight), float(store.date_weight)), **kw)
    # the postings index (stores/sqlite/keyword_sidecar.py), built here in this thread (timed)
    sc = store.keyword_sidecars
    sc.background = False
    sc.weights = (1.0, float(store.ctx_weight), float(store.date_weight))
    t0 = time.perf_counter()
    for part in {user_partition(u, None) for u in users} if n_users == 1 else []:
        sc.build(c, part)
    build_s = time.perf_counter() - t0

    qgen = sl.TextGen(a.seed + 99)
    rng = np.random.default_rng(a.seed + 5)
    queries: list[tuple[list[str], str]] = []
    for i in range(n_queries + 30):
        u = users[int(rng.integers(len(users)))]
        part = user_partition(u, None)
        if i % 2 == 0:
            q = qgen.question()
        else:
            (text,) = c.execute(
                "SELECT content FROM facts WHERE partition=? ORDER BY rowid LIMIT 1 OFFSET ?",
                (part, int(rng.integers(per_user))),
            ).fetchone()
            q = qgen.recall_question(text)
        terms = list(parse_query(q).terms)
        queries.append((terms, part))
    warm, timed = queries[:30], queries[30:]
    for terms, part in warm + timed:  # warm-up: pages, df and tokenizer caches
        ki.search(c, [part], terms, limit=a.limit)
    for terms, part in warm:
        ki.exact(c, [part], terms, limit=a.limit)
        store._indexed_search(c, part, terms, a.limit)
    old_ms: list[float] = []
    new_ms: list[float] = []
    idx_ms: list[float] = []
    idx_same = True
    idx_served = sc.served
    recalls: list[float] = []
    same = True
    empty_both = 0
    for i, (terms, part) in enumerate(timed):
        order = [(0, 1, 2), (1, 2, 0), (2, 0, 1)][i % 3] if n_users == 1 else [(0, 1), (1, 0)][i % 2]
        out: dict[int, Any] = {}
        for which in order:
            t = time.perf_counter()
            if which == 0:
                out[0] = ki.exact(c, [part], terms, limit=a.limit)
                old_ms.append((time.perf_counter() - t) * 1000)
            elif which == 1:
                out[1] = ki.search(c, [part], terms, limit=a.limit)
                new_ms.append((time.perf_counter() - t) * 1000)
            else:
                out[2] = store._indexed_search(c, part, terms, a.limit)
                idx_ms.append((time.perf_counter() - t) * 1000)
        exact, new = out[0], out[1]
        got = out.get(2) or []
        # the index: FTS5's exact scores, the same rows above the limit-th score (ties may differ)
        if n_users == 1 and not _same_top(got, exact):
            idx_same = False
        # exact bm25 of the rows the new path returns (the full query over all matches)
        if a.skip_full:
            continue
        full = {fid: s for fid, s, _ in ki.exact(c, [part], terms, limit=10**9)} if new else {}
        for fid, s, _ in new:
            if abs(full[fid] - s) > 1e-9:
                same = False
        if not exact and not new:
            empty_both += 1
            continue
        kk = min(10, len(exact))
        kth = exact[kk - 1][1]
        recalls.append(sum(1 for fid, _, _ in new[:kk] if full.get(fid, -1e300) >= kth - 1e-9) / kk)
    res = {
        "memories": n_users * per_user,
        "scopes": n_users,
        "db_mb": round(db_size_mb(path), 1),
        "queries": len(timed),
        "limit": a.limit,
        "config": {"budget": ki.budget, "budget_share": ki.budget_share, "split_min_rows": ki.split_min_rows},
        "old_exact_ms": sl.summary(old_ms),
        "new_topk_ms": sl.summary(new_ms),
        "speedup_p50": round(float(np.median(old_ms)) / float(np.median(new_ms)), 1),
        "recall@10_vs_exact": round(float(np.mean(recalls)), 4) if recalls else None,
        "min_recall@10": round(float(np.min(recalls)), 4) if recalls else None,
        "queries_recall_below_1": int(sum(r < 1 for r in recalls)),
        "no_match_queries": empty_both,
        "scores_exact_bm25": same,
        "index_ms": sl.summary(idx_ms) if idx_ms else None,
        "index_build_s": round(build_s, 1),
        "index_served": sc.served - idx_served,
        "index_same_top_k_as_exact": idx_same,
        "index_vs_topk_p50": round(float(np.median(new_ms)) / float(np.median(idx_ms)), 1) if idx_ms else None,
        "loadavg": os.getloadavg(),
    }
    await store.close()
    log(f"  {name}: {json.dumps(res)}")
    return res


async def main() -> None:
    a = ARGS
    if a.settings:
        settings = [s.strip() for s in a.settings.split(",") if s.strip()]
    else:
        settings = ["20k"] if a.quick else ["100k", "1m"]
    sizes = {"20k": (1, 20_000, 20_000), "100k": (1, 100_000, 100_000), "1m": (1_000, 1_000, 100_000)}
    n_queries = a.queries or (100 if a.quick else 400)
    results = {s: await run_setting(s, *sizes[s], n_queries) for s in settings}
    out = Path(a.out) if a.out else ROOT / "results" / "keyword_topk.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"when": datetime.now().isoformat(timespec="seconds"), "settings": results}, indent=2))
    print(
        "| setting | memories | old exact p50 / p95 ms | new top-k p50 / p95 ms | p50 speed-up | recall@10 vs exact "
        "(min, queries < 1) | scores = exact bm25 | postings index p50 / p95 ms | index vs top-k p50 | index = exact |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for s, r in results.items():
        o, n = r["old_exact_ms"], r["new_topk_ms"]
        print(
            f"| {s} | {r['memories']:,} in {r['scopes']} scope(s) | {o['p50']:.2f} / {o['p95']:.2f} "
            f"| {n['p50']:.2f} / {n['p95']:.2f} | {r['speedup_p50']}x | {r['recall@10_vs_exact']} "
            f"({r['min_recall@10']}, {r['queries_recall_below_1']}/{r['queries']}) | {r['scores_exact_bm25']} "
            + (
                f"| {r['index_ms']['p50']:.2f} / {r['index_ms']['p95']:.2f} | {r['index_vs_topk_p50']}x "
                f"| {r['index_same_top_k_as_exact']} |"
                if r["index_ms"]
                else "| - | - | - |"
            )
        )
    log(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
