"""usearch + onnxruntime in one process (memlane._native): loading onnxruntime after usearch
crashes the interpreter, so each case runs in a fresh subprocess and checks its exit code."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

# Not importorskip: importing them here, in the wrong order, is the crash under test.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("usearch") is None or importlib.util.find_spec("onnxruntime") is None,
    reason="needs the ann and local extras",
)


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_memlane_loads_usearch_after_onnxruntime_and_both_work() -> None:
    out = run(
        "import numpy as np\n"
        "from memlane.stores.sqlite.vector import load_usearch\n"
        "from memlane.providers.embed.local import LocalEmbedder\n"
        "ix_mod = load_usearch()\n"
        "e = LocalEmbedder(backend='onnx', precision='int8')\n"
        "v = e.embed_sync(['my cat is called Miso', 'hello'])\n"
        "ix = ix_mod.Index(ndim=v.shape[1], metric='cos'); ix.add(np.arange(2), v)\n"
        "print(e.backend, [int(k) for k in ix.search(v[0], 1).keys])\n"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["onnx", "[0]"]


def test_usearch_loaded_first_by_someone_else_falls_back_instead_of_crashing() -> None:
    out = run(
        "import usearch.index\n"
        "from memlane.providers.embed.local import LocalEmbedder\n"
        "from memlane.errors import MemlaneError\n"
        "e = LocalEmbedder()\n"
        "print(e.backend, e.embed_sync(['hi']).shape[1])\n"
        "try:\n"
        "    LocalEmbedder(backend='onnx').embed_sync(['hi'])\n"
        "except MemlaneError as exc:\n"
        "    print('refused:', 'usearch was imported before onnxruntime' in str(exc))\n"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["numpy 384", "refused: True"]
