"""Ingest with embeddings, two code trees side by side in one run (issue 22): the local embedder
alone and ``add_many`` with vectors, plus how far the two trees' vectors are apart.

Run::

    .venv/bin/python bench/embed_ab.py --before /path/to/old/src --rounds 4

Data: the LoCoMo dev turns (``--data``; read, never copied), stored as ``bench/ingest.py``
stores them (one ``AddBatch`` per session, ``"Speaker"`` as the role, the dia_id in metadata).
Each round runs one fresh process per tree (``PYTHONPATH=<src>``), alternating which goes
first. A process creates the default local embedder (or ``--backend`` / ``--precision``),
warms it up on 64 turns (building the ONNX graph first if that tree's cache has none), then
times ``--repeats`` times: the embedder alone, every turn in one ``embed_sync`` call, and one
``add_many(embed="now")`` of every session into a fresh SQLite file. Each timing gives the wall
time and the CPU time of the process (all threads): on the shared 2-core machine the wall time
follows the other sessions' load, so the table gives the minimum over all runs of each tree
(the least disturbed run), the median, and the before/after ratios of both.

Vectors: each tree writes the matrix of every turn's vector (one call) to the work folder; the
report gives the cosine between the two trees' vectors of each turn (min / mean), and of each
against the numpy fp32 encoder (``--reference``, computed once in the after tree: the same
arithmetic as onnx fp32 without quantisation), so a change of speed is shown not to be a
change of vectors beyond what int8 does anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import asyncio, json, os, sys, time
import numpy as np
from memlane import AddBatch, AsyncMemory
from memlane.evaluation import locomo
from memlane.providers.embed.local import LocalEmbedder

data, work, tag, repeats, backend, precision = sys.argv[1:7]
repeats = int(repeats)
convs = locomo.load(data)
batches = [
    AddBatch(
        [{"role": t.speaker, "content": t.text, "timestamp": t.when, "metadata": {"dia_id": t.dia_id}} for t in s],
        user_id=c.sample_id,
        session_id=f"{c.sample_id}:s{s[0].session}",
    )
    for c in convs
    for s in c.sessions
    if s
]
texts = [m["content"] for b in batches for m in b.messages]
kw = {}
if backend != "default":
    kw["backend"] = backend
if precision != "default":
    kw["precision"] = precision
emb = LocalEmbedder(**kw)
emb.embed_sync(texts[:64])




async def _keep_open():  # the embedder outlives each AsyncMemory (close would close it)
    return None


emb.aclose = _keep_open


out = {"tree": tag, "turns": len(texts), "batch_size": emb.batch_size, "backend": emb.backend,
       "precision": emb.precision, "alone": [], "add_many": []}
vectors = None


async def store(path):
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    mem = AsyncMemory(path, embedder=emb, sessions="null")
    await mem.open()
    try:
        t, c = time.perf_counter(), time.process_time()
        await mem.add_many(batches, embed="now")
        res = (time.perf_counter() - t, time.process_time() - c)
        assert not await mem.facts.missing_embeddings(limit=1)
    finally:
        await mem.close()
    return res


for r in range(repeats):
    t, c = time.perf_counter(), time.process_time()
    vectors = emb.embed_sync(texts)
    out["alone"].append((time.perf_counter() - t, time.process_time() - c))
    out["add_many"].append(asyncio.run(store(os.path.join(work, f"{tag}.db"))))
np.save(os.path.join(work, f"{tag}.npy"), vectors)
print(json.dumps(out))
"""

REFERENCE = r"""
import sys
import numpy as np
from memlane.evaluation import locomo
from memlane.providers.embed.local import LocalEmbedder
convs = locomo.load(sys.argv[1])
texts = [t.text for c in convs for s in c.sessions if s for t in s]
np.save(sys.argv[2], LocalEmbedder(backend="numpy").embed_sync(texts))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the other tree's src/ folder")
    ap.add_argument("--data", default="/work/shared/bench/locomo/locomo_dev.json")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="timings per process")
    ap.add_argument("--backend", default="default", help="LocalEmbedder backend (default: the default)")
    ap.add_argument("--precision", default="default", help="LocalEmbedder precision (default: the default)")
    ap.add_argument("--reference", action="store_true", help="also compare with numpy fp32 vectors")
    ap.add_argument("--workdir", default="/tmp/memlane-bench/embed-ab")
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parents[1] / "src")
    trees = {"before": str(Path(args.before).resolve()), "after": here}
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    load = [os.getloadavg()]
    runs: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for tag in order:
            child_env = dict(env, PYTHONPATH=trees[tag])
            cmd = [sys.executable, "-c", CHILD, args.data, str(work), tag, str(args.repeats), args.backend]
            done = subprocess.run([*cmd, args.precision], env=child_env, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{tag} failed:\n{done.stderr[-3000:]}")
            res = json.loads(done.stdout.strip().splitlines()[-1])
            runs[tag].append(res)
            n = res["turns"]
            print(
                f"round {r + 1} {tag}: alone {min(n / w for w, _ in res['alone']):.0f} turns/s, "
                f"add_many {min(n / w for w, _ in res['add_many']):.0f} turns/s",
                flush=True,
            )
        load.append(os.getloadavg())
    import numpy as np

    n = runs["after"][0]["turns"]
    assert isinstance(n, int)
    print(f"\n{n} turns; load average at the start and after each round: {[round(x[0], 1) for x in load]}")
    for tag in ("before", "after"):
        first = runs[tag][0]
        print(f"{tag}: {trees[tag]} backend {first['backend']} {first['precision']} batch_size {first['batch_size']}")
    print("\n| what | tree | turns/s (best run) | wall ms/turn min / median | CPU ms/turn min / median |")
    print("|---|---|---:|---:|---:|")
    ratios = {}
    for what in ("alone", "add_many"):
        stats = {}
        for tag in ("before", "after"):
            wall = [w / n * 1e3 for res in runs[tag] for w, _ in res[what]]  # type: ignore[attr-defined]
            cpu = [c / n * 1e3 for res in runs[tag] for _, c in res[what]]  # type: ignore[attr-defined]
            stats[tag] = (min(wall), statistics.median(wall), min(cpu), statistics.median(cpu))
            w0, w1, c0, c1 = stats[tag]
            print(f"| {what} | {tag} | {1e3 / w0:,.0f} | {w0:.3f} / {w1:.3f} | {c0:.3f} / {c1:.3f} |")
        b, a = stats["before"], stats["after"]
        ratios[what] = (b[0] / a[0], b[1] / a[1], b[2] / a[2], b[3] / a[3])
    for what, (w0, w1, c0, c1) in ratios.items():
        print(f"{what}: before/after wall min {w0:.2f}x median {w1:.2f}x; CPU min {c0:.2f}x median {c1:.2f}x")
    vb, va = np.load(work / "before.npy"), np.load(work / "after.npy")
    cos = (vb * va).sum(axis=1)
    print(f"cosine before vs after, per turn: min {cos.min():.5f} mean {cos.mean():.6f}")
    if args.reference:
        ref_path = work / "numpy-fp32.npy"
        subprocess.run(
            [sys.executable, "-c", REFERENCE, args.data, str(ref_path)],
            env=dict(env, PYTHONPATH=here),
            check=True,
        )
        ref = np.load(ref_path)
        for tag, v in (("before", vb), ("after", va)):
            c = (v * ref).sum(axis=1)
            print(f"cosine {tag} vs numpy fp32: min {c.min():.5f} mean {c.mean():.6f}")


if __name__ == "__main__":
    main()
