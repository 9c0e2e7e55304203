"""Ingest throughput (turns/s) of ``AsyncMemory.add`` on LoCoMo turns, with and without embeddings.

Run::

    .venv/bin/python bench/ingest.py            # all 6 dev conversations (3,435 turns), 3 repeats
    .venv/bin/python bench/ingest.py --quick    # one conversation, 1 repeat (< 1 min)

Data: ``/work/shared/bench/locomo/locomo_dev.json`` or ``--data PATH`` (LoCoMo format). The
data set is CC BY-NC: it is only read, never copied into the repository. Turns are stored
exactly as ``memlane.evaluation.locomo.ingest`` does: one ``mem.add(messages, user_id=<conversation>,
session_id=<conversation:session>)`` call per session, message text ``"Speaker: text"``
(plus the image caption), the session date as timestamp, the dia_id in metadata.

Modes (each into a fresh database file in ``--workdir``, default ``/tmp/memlane-bench``):

* ``keyword-only``: ``embedder=None``: the store cost alone (facts, FTS5 incl. the
  neighbouring-turns column, history, authors).
* ``hash``: the feature-hashing embedder (cheap vectors: store + vector column cost).
* ``local``: all-MiniLM-L6-v2 in numpy, batched per ``add`` call (one session per call).

Plus the embedders alone, with no store: ``embed_batch`` of every turn in one call, and
one call per session (the batches ``add`` makes), so the report separates embedding cost
from store cost. Each figure is the median of ``--repeats`` runs (the embedder instance is
created and warmed up once, outside the timings; its load time is reported separately).

Writes ``bench/results/ingest.json`` and prints a markdown table. Threads: see ``THREADS``.
"""

from __future__ import annotations

import argparse
import os

# --------------------------------------------------------------------------------- threads
#: BLAS/OpenMP threads, fixed before numpy is imported. Measured on the shared 2-core machine
#: (full run, median of 3): MiniLM ingest 108 turns/s with 1 BLAS thread vs 102 with 2, the
#: embedder alone (one call) 223 vs 170 turns/s: with 2, the embedder's two worker threads
#: each start 2 BLAS threads on 2 cores (oversubscription). One BLAS thread, and the local
#: embedder's own worker threads (one per core) run batches in parallel.
THREADS = 1


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one conversation, one repeat")
    ap.add_argument("--threads", type=int, default=THREADS, help=f"BLAS threads (default {THREADS})")
    ap.add_argument("--data", default="/work/shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--repeats", type=int, default=None, help="runs per mode (default 3, quick 1)")
    ap.add_argument("--modes", default="none,hash,local", help="comma list of none,hash,local")
    ap.add_argument("--workdir", default="/tmp/memlane-bench")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/ingest.json)")
    return ap.parse_args()


ARGS = _parse_args()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import asyncio  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import SharedEmbedder, log, remove_db  # noqa: E402

from memlane import AsyncMemory  # noqa: E402
from memlane.evaluation import locomo  # noqa: E402
from memlane.providers.embed.base import Embedder  # noqa: E402
from memlane.registry import make_embedder  # noqa: E402

ROOT = Path(__file__).resolve().parent


async def ingest_once(convs: list[locomo.Conversation], embedder: Embedder | None, db: Path) -> dict[str, Any]:
    remove_db(db)
    mem = AsyncMemory(db, embedder=embedder, sessions="null")
    try:
        n, secs = await locomo.ingest(mem, convs)
    finally:
        await mem.close()
    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    remove_db(db)
    return {"turns": n, "seconds": secs, "db_mb": size / 1e6}


async def embed_alone(embedder: Embedder, convs: list[locomo.Conversation]) -> dict[str, float]:
    texts = [t.text for c in convs for s in c.sessions for t in s]
    t = time.perf_counter()
    await embedder.embed_batch(texts)
    all_s = time.perf_counter() - t
    t = time.perf_counter()
    for c in convs:
        for s in c.sessions:
            if s:
                await embedder.embed_batch([x.text for x in s])
    per_s = time.perf_counter() - t
    return {"turns": len(texts), "one_call_s": all_s, "per_session_s": per_s}


def med(xs: list[float]) -> float:
    return float(np.median(xs))


async def main() -> None:
    a = ARGS
    data = Path(a.data)
    if not data.exists():
        raise SystemExit(f"no LoCoMo data at {data}; pass --data PATH")
    convs = locomo.load(data)
    if a.quick:
        convs = convs[:1]
    repeats = a.repeats or (1 if a.quick else 3)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out_path = Path(a.out) if a.out else ROOT / "results" / "ingest.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    n_turns = sum(c.turns for c in convs)
    n_sessions = sum(1 for c in convs for s in c.sessions if s)
    words = [len(t.text.split()) for c in convs for s in c.sessions for t in s]
    log(f"{len(convs)} conversations, {n_sessions} sessions, {n_turns} turns; BLAS threads {a.threads}")
    load0 = os.getloadavg()
    started = time.perf_counter()

    embedders: dict[str, Embedder | None] = {"none": None}
    embedder_info: dict[str, Any] = {}
    for spec in ("hash", "local"):
        if spec not in modes:
            continue
        t = time.perf_counter()
        e = make_embedder(spec)
        assert e is not None
        await e.embed_batch(["warm up the embedder", "a second sentence"])
        embedder_info[spec] = {
            "name": e.name,
            "dim": e.dim,
            "load_and_warmup_s": round(time.perf_counter() - t, 2),
            "threads": getattr(e, "threads", None),
        }
        tokenize = getattr(e, "tokenize", None)
        if callable(tokenize):  # model tokens per turn: the embedding cost scales with them
            texts = [t.text for c in convs for s in c.sessions for t in s]
            embedder_info[spec]["tokens_per_turn_mean"] = round(float(np.mean([len(x) for x in tokenize(texts)])), 1)
        embedders[spec] = e

    results: dict[str, Any] = {}
    for spec in modes:
        e = embedders[spec]
        label = {"none": "keyword-only (embedder=None)", "hash": "hash embedder", "local": "local MiniLM"}[spec]
        runs = []
        alone = []
        for r in range(repeats):
            if e is not None:
                alone.append(await embed_alone(e, convs))
            runs.append(
                await ingest_once(convs, SharedEmbedder(e) if e is not None else None, work / f"ingest-{spec}.db")
            )
            log(
                f"{label} run {r + 1}: {runs[-1]['turns'] / runs[-1]['seconds']:.0f} turns/s"
                + (f", embedder alone {alone[-1]['turns'] / alone[-1]['per_session_s']:.0f} turns/s" if alone else "")
            )
        secs = med([x["seconds"] for x in runs])
        res: dict[str, Any] = {
            "label": label,
            "turns": n_turns,
            "add_calls": n_sessions,
            "ingest_s": round(secs, 3),
            "ingest_s_runs": [round(x["seconds"], 3) for x in runs],
            "turns_per_s": round(n_turns / secs, 1),
            "db_mb": round(runs[0]["db_mb"], 2),
        }
        if alone:
            one = med([x["one_call_s"] for x in alone])
            per = med([x["per_session_s"] for x in alone])
            res.update(
                embed_one_call_s=round(one, 3),
                embed_one_call_turns_per_s=round(n_turns / one, 1),
                embed_per_session_s=round(per, 3),
                embed_per_session_turns_per_s=round(n_turns / per, 1),
            )
        results[spec] = res
    for e in embedders.values():
        if e is not None:
            await e.aclose()
    if "none" in results:  # store cost = keyword-only ingest; the rest of an embedded ingest is embedding
        store = results["none"]["ingest_s"]
        for spec in ("hash", "local"):
            if spec in results:
                r = results[spec]
                r["store_share_s"] = round(store, 3)
                r["embedding_share_s"] = round(r["ingest_s"] - store, 3)
    report = {
        "benchmark": "ingest",
        "mode": "quick" if a.quick else "full",
        "when": datetime.now().isoformat(timespec="seconds"),
        "data": {
            "conversations": [c.sample_id for c in convs],
            "sessions": n_sessions,
            "turns": n_turns,
            "words_per_turn_mean": round(float(np.mean(words)), 1),
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
        },
        "threads": {
            "OPENBLAS_NUM_THREADS": os.environ["OPENBLAS_NUM_THREADS"],
            "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"],
        },
        "embedders": embedder_info,
        "repeats": repeats,
        "results": results,
        "target_turns_per_s_with_embeddings": 500,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    out_path.write_text(json.dumps(report, indent=2))
    print_table(report)
    log(f"wrote {out_path}")


def print_table(r: dict[str, Any]) -> None:
    d = r["data"]
    print(
        f"## ingest throughput ({r['mode']}): {d['turns']:,} LoCoMo turns, {d['sessions']} add() calls "
        f"(one per session), {d['words_per_turn_mean']} words/turn\n"
    )
    loc = r["embedders"].get("local", {})
    print(
        f"- threads: OPENBLAS_NUM_THREADS=OMP_NUM_THREADS={r['threads']['OPENBLAS_NUM_THREADS']} (fixed in the "
        f"script before numpy is imported); local embedder worker threads {loc.get('threads')}; "
        f"{r['machine']['cpus']} CPUs, load avg at start {r['machine']['loadavg_start'][0]:.2f}"
    )
    if loc:
        print(
            f"- local embedder load + warm-up {loc['load_and_warmup_s']} s (not in the timings); "
            f"{loc.get('tokens_per_turn_mean', '?')} model tokens per turn"
        )
    print(f"- median of {r['repeats']} run(s); each run into a fresh database file\n")
    print(
        "| mode | ingest turns/s | ingest s | embedder alone, per session (turns/s) | embedder alone, one call "
        "(turns/s) | store share s | embedding share s | DB MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for res in r["results"].values():
        per, one = "-", "-"
        if "embed_per_session_s" in res:
            per = f"{res['embed_per_session_s']} ({res['embed_per_session_turns_per_s']:,.0f})"
            one = f"{res['embed_one_call_s']} ({res['embed_one_call_turns_per_s']:,.0f})"
        print(
            f"| {res['label']} | **{res['turns_per_s']:,.0f}** | {res['ingest_s']} | {per} | {one} "
            f"| {res.get('store_share_s', res['ingest_s'] if 'embed_per_session_s' not in res else '-')} "
            f"| {res.get('embedding_share_s', '-')} | {res['db_mb']} |"
        )
    loc_res = r["results"].get("local")
    if loc_res:
        ok = loc_res["turns_per_s"] >= r["target_turns_per_s_with_embeddings"]
        print(
            f"\nTarget >= {r['target_turns_per_s_with_embeddings']} turns/s with embeddings: "
            f"{'met' if ok else 'NOT met'} ({loc_res['turns_per_s']:,.0f} turns/s)."
        )


if __name__ == "__main__":
    asyncio.run(main())
