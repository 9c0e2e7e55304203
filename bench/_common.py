"""Helpers shared by the benchmark scripts (imported after each script fixes BLAS threads)."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from memlane.providers.embed.base import Embedder, Matrix, embed_query_texts


class SharedEmbedder:
    """Passes calls through to one embedder instance; ``aclose`` is a no-op, so closing an
    ``AsyncMemory`` leaves the embedder to the next run (and to a baseline sharing it)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim

    async def embed_batch(self, texts: list[str]) -> Matrix:
        return await self.inner.embed_batch(texts)

    async def embed_queries(self, texts: list[str]) -> Matrix:
        """Queries as the inner embedder encodes them (e5 prefixes ``query: ``)."""
        return await embed_query_texts(self.inner, texts)

    async def aclose(self) -> None:
        return None


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def db_size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6


def remove_db(path: Path) -> None:
    for p in path.parent.glob(path.name + "*"):
        if p.is_dir():  # <db>.vectors/: the vector sidecars (stores/sqlite/vector_cache.py)
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink()
