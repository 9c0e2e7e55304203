"""Ingest throughput (turns/s) of ``AsyncMemory.add`` and the bulk ``add_many`` on LoCoMo turns,
with and without embeddings, side by side in one run.

Run::

    .venv/bin/python bench/ingest.py            # all 6 dev conversations (3,435 turns), 3 repeats
    .venv/bin/python bench/ingest.py --quick    # one conversation, 1 repeat (< 1 min)
    .venv/bin/python bench/ingest.py --modes none,hash,onnx-int8 --paths add,add_many,deferred

Data: ``/work/shared/bench/locomo/locomo_dev.json`` or ``--data PATH`` (LoCoMo format). The
data set is CC BY-NC: it is only read, never copied into the repository. Turns are stored
exactly as ``memlane.evaluation.locomo.ingest`` does: one ``mem.add(messages, user_id=<conversation>,
session_id=<conversation:session>)`` call per session, message text ``"Speaker: text"``
(plus the image caption), the session date as timestamp, the dia_id in metadata.

Embedders (``--modes``): ``none`` (``embedder=None``: the store cost alone: facts, FTS5 incl.
the neighbouring-turns column, history, authors), ``hash`` (feature hashing: cheap vectors),
``local`` (all-MiniLM-L6-v2, the default backend), ``numpy`` / ``onnx-fp32`` / ``onnx-int8``
(MiniLM on one backend and precision).

Write paths (``--paths``), each into a fresh database file in ``--workdir`` (default
``/tmp/memlane-bench``):

* ``add``: one ``add`` per session, vectors embedded before it returns (one call per session);
* ``add_many``: one ``add_many`` of every session (``memlane.AddBatch``), ``embed="now"``: one
  transaction and one embedding call per ~2,048-turn chunk, across sessions;
* ``deferred``: ``add_many(..., embed="low")`` (the time until it returns: keyword-searchable),
  then ``drain_embeddings()`` (the background queue embeds in batches of up to 1,024); the
  total is both. Not run for ``none`` (nothing to defer).

Each figure is wall time; CPU seconds of the process (all threads) are reported beside it:
on this shared machine the wall time moves with the other sessions' load, so compare the
rows of one run (ratios), not runs of different days.

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
    ap.add_argument(
        "--modes",
        default="none,hash,numpy,onnx-fp32,onnx-int8",
        help="comma list of none,hash,local,numpy,onnx-fp32,onnx-int8",
    )
    ap.add_argument("--paths", default="add,add_many,deferred", help="comma list of add,add_many,deferred")
    ap.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
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

from memlane import AddBatch, AsyncMemory  # noqa: E402
from memlane.evaluation import locomo  # noqa: E402
from memlane.providers.embed.base import Embedder  # noqa: E402
from memlane.providers.embed.local import LocalEmbedder  # noqa: E402
from memlane.registry import make_embedder  # noqa: E402

ROOT = Path(__file__).resolve().parent
LABELS = {
    "none": "keyword-only (embedder=None)",
    "hash": "hash embedder",
    "local": "local MiniLM (default backend)",
    "numpy": "MiniLM numpy",
    "onnx-fp32": "MiniLM onnx fp32",
    "onnx-int8": "MiniLM onnx int8",
}


def make(spec: str) -> Embedder | None:
    if spec == "none":
        return None
    if spec == "numpy":
        return LocalEmbedder(backend="numpy")
    if spec.startswith("onnx-"):
        return LocalEmbedder(backend="onnx", precision=spec.split("-", 1)[1])
    return make_embedder(spec)


def batches_of(convs: list[locomo.Conversation]) -> list[AddBatch]:
    """One batch per session, exactly as ``locomo.ingest`` adds them."""
    return [
        AddBatch(
            [{"role": t.speaker, "content": t.text, "timestamp": t.when, "metadata": {"dia_id": t.dia_id}} for t in s],
            user_id=c.sample_id,
            session_id=f"{c.sample_id}:s{s[0].session}",
        )
        for c in convs
        for s in c.sessions
        if s
    ]


async def ingest_once(batches: list[AddBatch], embedder: Embedder | None, db: Path, path: str) -> dict[str, Any]:
    remove_db(db)
    mem = AsyncMemory(db, embedder=embedder, sessions="null")
    await mem.open()  # opening is not ingest
    n = sum(len(b.messages) for b in batches)
    res: dict[str, Any] = {"turns": n}
    try:
        t, c = time.perf_counter(), time.process_time()
        if path == "add":
            for b in batches:
                await mem.add(b.messages, user_id=b.user_id, session_id=b.session_id)
        else:
            await mem.add_many(batches, embed="now" if path == "add_many" else "low")
        res["add_s"], res["add_cpu_s"] = time.perf_counter() - t, time.process_time() - c
        if path == "deferred":
            t2, c2 = time.perf_counter(), time.process_time()
            await mem.drain_embeddings()
            res["drain_s"], res["drain_cpu_s"] = time.perf_counter() - t2, time.process_time() - c2
        res["seconds"], res["cpu_s"] = time.perf_counter() - t, time.process_time() - c
        missing = await mem.facts.missing_embeddings(limit=1)
        res["all_embedded"] = embedder is None or not missing
    finally:
        await mem.close()
    res["db_mb"] = sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / 1e6
    remove_db(db)
    return res


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
    if a.conversations:
        convs = convs[: a.conversations]
    repeats = a.repeats or (1 if a.quick else 3)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    paths = [p.strip() for p in a.paths.split(",") if p.strip()]
    unknown = [m for m in modes if m not in LABELS] + [p for p in paths if p not in ("add", "add_many", "deferred")]
    if unknown:
        raise SystemExit(f"unknown mode or path: {unknown}")
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out_path = Path(a.out) if a.out else ROOT / "results" / "ingest.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    batches = batches_of(convs)
    n_turns = sum(c.turns for c in convs)
    n_sessions = len(batches)
    words = [len(t.text.split()) for c in convs for s in c.sessions for t in s]
    log(f"{len(convs)} conversations, {n_sessions} sessions, {n_turns} turns; BLAS threads {a.threads}")
    load0 = os.getloadavg()
    started = time.perf_counter()

    embedders: dict[str, Embedder | None] = {"none": None}
    embedder_info: dict[str, Any] = {}
    for spec in modes:
        if spec == "none":
            continue
        t = time.perf_counter()
        e = make(spec)
        assert e is not None
        await e.embed_batch(["warm up the embedder", "a second sentence"])
        embedder_info[spec] = {
            "name": e.name,
            "dim": e.dim,
            "backend": getattr(e, "backend", None),
            "precision": getattr(e, "precision", None),
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
        alone = [await embed_alone(e, convs) for _ in range(repeats)] if e is not None else []
        for path in paths:
            if path == "deferred" and e is None:
                continue
            runs = []
            for r in range(repeats):  # the write paths of one embedder alternate per repeat
                runs.append(
                    await ingest_once(
                        batches, SharedEmbedder(e) if e is not None else None, work / f"ingest-{spec}.db", path
                    )
                )
                log(f"{LABELS[spec]} / {path} run {r + 1}: {n_turns / runs[-1]['seconds']:,.0f} turns/s")
            secs = med([x["seconds"] for x in runs])
            res: dict[str, Any] = {
                "label": LABELS[spec],
                "embedder": spec,
                "path": path,
                "turns": n_turns,
                "calls": n_sessions if path == "add" else 1,
                "seconds": round(secs, 3),
                "seconds_runs": [round(x["seconds"], 3) for x in runs],
                "turns_per_s": round(n_turns / secs, 1),
                "cpu_s": round(med([x["cpu_s"] for x in runs]), 3),
                "turns_per_cpu_s": round(n_turns / med([x["cpu_s"] for x in runs]), 1),
                "all_embedded": all(x["all_embedded"] for x in runs),
                "db_mb": round(runs[0]["db_mb"], 2),
            }
            if path == "deferred":
                add_s = med([x["add_s"] for x in runs])
                res.update(
                    add_s=round(add_s, 3),
                    add_turns_per_s=round(n_turns / add_s, 1),
                    add_turns_per_cpu_s=round(n_turns / med([x["add_cpu_s"] for x in runs]), 1),
                    drain_s=round(med([x["drain_s"] for x in runs]), 3),
                )
            if alone:
                one = med([x["one_call_s"] for x in alone])
                per = med([x["per_session_s"] for x in alone])
                res.update(
                    embed_one_call_turns_per_s=round(n_turns / one, 1),
                    embed_per_session_turns_per_s=round(n_turns / per, 1),
                )
            results[f"{spec}/{path}"] = res
    for e in embedders.values():
        if e is not None:
            await e.aclose()
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
        "targets": {"bulk_keyword_turns_per_s": 20_000, "with_embeddings_turns_per_s": 500},
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    out_path.write_text(json.dumps(report, indent=2))
    print_table(report)
    log(f"wrote {out_path}")


def print_table(r: dict[str, Any]) -> None:
    d = r["data"]
    m = r["machine"]
    print(
        f"## ingest throughput ({r['mode']}): {d['turns']:,} LoCoMo turns in {d['sessions']} sessions, "
        f"{d['words_per_turn_mean']} words/turn\n"
    )
    print(
        f"- threads: OPENBLAS_NUM_THREADS=OMP_NUM_THREADS={r['threads']['OPENBLAS_NUM_THREADS']}; {m['cpus']} CPUs, "
        f"load avg {m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end"
    )
    for spec, info in r["embedders"].items():
        print(
            f"- {spec}: {info['name']} backend {info.get('backend')} {info.get('precision') or ''}, load + warm-up "
            f"{info['load_and_warmup_s']} s (not timed), {info.get('tokens_per_turn_mean', '-')} tokens/turn"
        )
    print(f"- median of {r['repeats']} run(s); each run into a fresh database file\n")
    print(
        "| embedder | write path | turns/s | s | turns per CPU-s | deferred: add returns (turns/s) | "
        "deferred: drain s | embedder alone, per session / one call (turns/s) | all embedded |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for res in r["results"].values():
        alone = (
            f"{res['embed_per_session_turns_per_s']:,.0f} / {res['embed_one_call_turns_per_s']:,.0f}"
            if "embed_one_call_turns_per_s" in res
            else "-"
        )
        add = f"{res['add_turns_per_s']:,.0f}" if "add_s" in res else "-"
        drain = f"{res['drain_s']}" if "drain_s" in res else "-"
        print(
            f"| {res['label']} | {res['path']} | **{res['turns_per_s']:,.0f}** | {res['seconds']} "
            f"| {res['turns_per_cpu_s']:,.0f} | {add} | {drain} | {alone} | {'yes' if res['all_embedded'] else 'NO'} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
