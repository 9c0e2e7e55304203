"""Scoped limits on the BLAS thread pool for memlane's own numpy work.

numpy's BLAS (OpenBLAS in the PyPI wheels) starts one thread per core and lets idle threads
spin. On a machine whose other cores are busy, a small matrix product then waits for a thread
that is not running: a single ``add`` with the local embedder measured 10-15x slower on a
busy 2-core machine than with one BLAS thread. memlane therefore runs its own BLAS work inside
:func:`limit_blas_threads`, so no ``OPENBLAS_NUM_THREADS`` is needed::

    with limit_blas_threads(1):
        hidden = encoder.forward(ids, mask)

How many threads: :func:`default_blas_threads` (``$MEMLANE_BLAS_THREADS``, default 1), or
``LocalEmbedder(blas_threads=N)``. A limit only ever lowers the thread count; when the pool
is already small enough (e.g. ``OPENBLAS_NUM_THREADS=1``) nothing is changed.

Concurrency. The limit is applied in the thread that does the work and works from any thread
(worker threads of ``asyncio.to_thread`` included):

* OpenBLAS with its own ("pthreads") threading layer, MKL and BLIS have ONE process-wide
  pool. The limit is then reference-counted across threads: the first of several overlapping
  calls lowers the pool, the strictest active limit wins, and the last one to finish restores
  the original size. So while memlane embeds, other numpy work in the process also runs with
  the lower count. threadpoolctl >= 3.8 lets only one "controlling" thread resize an OpenBLAS
  pool and silently ignores the others; memlane resizes under its own lock and hands control
  back right after each change, so every worker thread can apply its limit.
* OpenBLAS built on OpenMP keeps one limit per calling thread: each thread sets and restores
  its own.

Nested use in one thread is free (the outer limit stays). Without threadpoolctl (the
``local`` extra installs it) nothing is limited. A thread pool another thread holds control
of through threadpoolctl (an open ``threadpool_limits`` block of the application) is left
as that block set it.
"""

from __future__ import annotations

import importlib
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from memlane._env import env_positive_int
from memlane.errors import ConfigError

#: Environment variable giving the default BLAS thread limit of memlane's numpy work.
ENV_VAR = "MEMLANE_BLAS_THREADS"


def default_blas_threads() -> int:
    """``$MEMLANE_BLAS_THREADS`` as a positive integer, or 1 when unset.

    Raises:
        ConfigError: the variable is set but not a positive integer.
    """
    return env_positive_int(ENV_VAR, 1)


def check_blas_threads(value: Any, who: str) -> int:
    """``value`` if it is a positive integer; ``None`` means :func:`default_blas_threads`."""
    if value is None:
        return default_blas_threads()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{who} blas_threads must be a positive integer, got {value!r}")
    return value


def _per_thread(lib: Any) -> bool:
    """True when the library keeps one limit per calling thread (OpenBLAS on OpenMP)."""
    return getattr(lib, "internal_api", None) == "openblas" and getattr(lib, "threading_layer", None) == "openmp"


def _num_threads(lib: Any) -> int | None:
    with suppress(Exception):
        value = lib.get_num_threads()
        return int(value) if value is not None else None
    return None


class BlasThreads:
    """The process-wide bookkeeping behind :func:`limit_blas_threads` (one instance per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probed = False
        self._shared: list[Any] = []  # controllers of process-wide pools
        self._local_libs: list[Any] = []  # controllers with one limit per thread
        self._active: Counter[int] = Counter()  # limits of the calls in progress (shared pools)
        self._original: list[tuple[Any, int]] = []  # shared pools' sizes before the first call
        self._tls = threading.local()

    def _probe(self) -> None:
        """Find the loaded BLAS libraries once (caller holds the lock)."""
        if self._probed:
            return
        self._probed = True
        try:  # imported by name: an optional dependency (the ``local`` extra)
            module = importlib.import_module("threadpoolctl")
            controller = module.ThreadpoolController()
            libs = [lib for lib in controller.lib_controllers if getattr(lib, "user_api", None) == "blas"]
        except Exception:  # not installed, or it could not inspect the process
            return
        self._shared = [lib for lib in libs if not _per_thread(lib)]
        self._local_libs = [lib for lib in libs if _per_thread(lib)]

    @staticmethod
    def _set(lib: Any, count: int) -> None:
        """Resize one pool; never fail the caller's work over a thread setting."""
        with suppress(Exception):
            lib.set_num_threads(count)
        # threadpoolctl >= 3.8: give up OpenBLAS "control" again (only clears it if this thread
        # holds it), so the next resize can come from any thread.
        clear = getattr(type(lib), "clear_controlling_thread", None)
        if clear is not None:
            with suppress(Exception):
                clear()

    def _apply_shared(self) -> None:
        """Size the shared pools for the active limits (caller holds the lock)."""
        if not self._active:
            for lib, count in self._original:
                if _num_threads(lib) != count:
                    self._set(lib, count)
            self._original = []
            return
        if not self._original:
            self._original = [(lib, n) for lib in self._shared if (n := _num_threads(lib)) is not None]
        target = min(self._active)
        for lib, count in self._original:
            want = min(target, count)
            if _num_threads(lib) != want:
                self._set(lib, want)

    @contextmanager
    def limit(self, threads: int) -> Iterator[None]:
        """BLAS uses at most ``threads`` threads for the work done inside the block (see module doc)."""
        depth: int = getattr(self._tls, "depth", 0)
        if depth:  # nested in this thread: the outer limit holds
            self._tls.depth = depth + 1
            try:
                yield
            finally:
                self._tls.depth -= 1
            return
        restore_local: list[tuple[Any, int]] = []
        with self._lock:
            self._probe()
            if self._shared:
                self._active[threads] += 1
                self._apply_shared()
            for lib in self._local_libs:
                current = _num_threads(lib)
                if current is not None and current > threads:
                    self._set(lib, threads)
                    restore_local.append((lib, current))
        self._tls.depth = 1
        try:
            yield
        finally:
            self._tls.depth = 0
            with self._lock:
                for lib, count in restore_local:
                    self._set(lib, count)
                if self._shared:
                    self._active[threads] -= 1
                    if self._active[threads] <= 0:
                        del self._active[threads]
                    self._apply_shared()


_BLAS = BlasThreads()


def limit_blas_threads(threads: int) -> AbstractContextManager[None]:
    """Context manager: BLAS work inside it uses at most ``threads`` threads (see the module doc)."""
    return _BLAS.limit(threads)
