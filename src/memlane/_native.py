"""Import order of native extensions that clash.

usearch's compiled module carries its own static copy of the C++ standard library and
exports its ``STB_GNU_UNIQUE`` symbols (locale facet ids among them), which bind process-wide
even though Python loads extensions ``RTLD_LOCAL``. onnxruntime loaded *after* it resolves
those symbols to usearch's copies and crashes while initialising (segmentation fault in
``std::codecvt``; ``python -c "import usearch.index; import onnxruntime"`` exits 139 with
usearch 2.26 and onnxruntime 1.32). Loaded in the other order both work. So memlane imports
usearch only through :func:`import_usearch`, which loads onnxruntime first when it is
installed, and the ONNX embedder refuses (falls back to numpy) when something else loaded
usearch first: :func:`onnxruntime_blocked`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import threading
from types import ModuleType

_lock = threading.Lock()


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):  # e.g. sys.modules[name] = None
        return False


def import_usearch() -> ModuleType | None:
    """``usearch.index``, with onnxruntime loaded before it when installed; None when usearch
    is not installed (the ``ann`` extra) or fails to import."""
    with _lock:
        if "usearch.index" not in sys.modules and "onnxruntime" not in sys.modules and _installed("onnxruntime"):
            with contextlib.suppress(ImportError):
                importlib.import_module("onnxruntime")
        try:
            return importlib.import_module("usearch.index")
        except ImportError:
            return None


def onnxruntime_blocked() -> str | None:
    """Why onnxruntime must not be imported now (usearch was loaded before it), else None."""
    if "onnxruntime" in sys.modules or "usearch.compiled" not in sys.modules:
        return None
    return (
        "usearch was imported before onnxruntime, and loading onnxruntime after it crashes the process "
        "(their C++ runtimes clash); import memlane (or onnxruntime) before usearch"
    )
