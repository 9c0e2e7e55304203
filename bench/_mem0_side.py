"""mem0's side of ``bench/peers.py``: runs in the throwaway mem0 venv, never imports memlane.

Usage (``bench/peers.py`` runs it)::

    /tmp/mem0-venv/bin/python bench/_mem0_side.py SPEC.json

SPEC: ``{"model_dir", "workdir", "conversations": [{"user", "turns": [{"dia_id", "speaker",
"text"}]}]}``. The script builds mem0, adds every turn, then prints one JSON line
(``{"ready": true, "versions", "torch_threads", "init_s", "ingest_s", "turns"}``) and answers
one JSON line per request line on stdin: ``{"user", "question", "top_k", "threshold"}`` ->
``{"ranked": [dia_id, ...], "ms": search time, "embed_ms": its query embedding}``;
``{"notes": true}`` -> ``{"notes": [...]}``.
Anything mem0 or its libraries print goes to stderr, never into the protocol.

mem0 is configured as a user without servers or keys would: the HuggingFace embedder on the
local all-MiniLM-L6-v2 folder (sentence-transformers, torch on 1 thread), the default vector
store (Qdrant in-process on a temp path), the SQLite history in the work folder. ``add`` runs with
``infer=False`` (one memory per message: no LLM call; the LLM config is a placeholder mem0 needs
to construct, never called). ``search(query, filters={"user_id": ...}, top_k=..., threshold=...)``
is mem0's hybrid search: with neither fastembed's BM25 model nor spaCy installed (both download
models at run time, impossible offline) it is the semantic score alone, as its log says.
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any


def main(spec_path: Path) -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's stdout
    os.dup2(2, 1)  # library prints go to stderr
    sys.stdout = sys.stderr
    spec: dict[str, Any] = json.loads(spec_path.read_text())
    work = Path(spec["workdir"])
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MEM0_DIR", str(work / "mem0dir"))  # the caller sets these; kept for a direct run
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from mem0 import Memory

    dims = 384
    config = {
        "embedder": {"provider": "huggingface", "config": {"model": spec["model_dir"], "embedding_dims": dims}},
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "path": str(work / "qdrant"),
                "collection_name": "peers",
                "embedding_model_dims": dims,
                "on_disk": False,
            },
        },
        # mem0 builds its LLM client at construction even when add(infer=False) never calls it.
        "llm": {"provider": "openai", "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9/v1"}},
        "history_db_path": str(work / "history.db"),
    }
    m = Memory.from_config(config)
    init_s = time.perf_counter() - t0

    turns = 0
    t = time.perf_counter()
    for conv in spec["conversations"]:
        for turn in conv["turns"]:
            m.add(
                [{"role": "user", "name": turn["speaker"], "content": turn["text"]}],
                user_id=conv["user"],
                infer=False,
                metadata={"dia_id": turn["dia_id"]},
            )
            turns += 1
    ingest_s = time.perf_counter() - t
    ready = {
        "ready": True,
        "versions": {p: version(p) for p in ("mem0ai", "torch", "sentence-transformers", "qdrant-client")},
        "torch_threads": torch.get_num_threads(),
        "init_s": init_s,
        "ingest_s": ingest_s,
        "turns": turns,
    }
    proto.write(json.dumps(ready) + "\n")

    embed_ms: list[float] = []  # the query embedding inside each search, timed by a wrapper
    embed = m.embedding_model.embed

    def timed_embed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = embed(*args, **kwargs)
        embed_ms.append((time.perf_counter() - t) * 1000)
        return out

    m.embedding_model.embed = timed_embed  # type: ignore[method-assign]

    for line in sys.stdin:
        req = json.loads(line)
        if req.get("notes"):
            store = m.vector_store
            bm25 = getattr(store, "_bm25_encoder", None) not in (None, False)
            notes = [
                f"vector store {type(store).__module__}.{type(store).__name__} (local, in-process)",
                "BM25 keyword search " + ("on" if bm25 else "off (fastembed's Qdrant/bm25 model: a download)"),
            ]
            proto.write(json.dumps({"notes": notes}) + "\n")
            continue
        embed_ms.clear()
        t = time.perf_counter()
        res = m.search(
            req["question"], filters={"user_id": req["user"]}, top_k=req["top_k"], threshold=req["threshold"]
        )
        ms = (time.perf_counter() - t) * 1000
        ranked = [(r.get("metadata") or {}).get("dia_id") for r in res["results"]]
        proto.write(json.dumps({"ranked": ranked, "ms": ms, "embed_ms": sum(embed_ms)}) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
