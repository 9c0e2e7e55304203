"""The Embedder protocol.

An embedder turns a batch of texts into a float32 matrix of shape ``(len(texts), dim)``.
Rows are L2-normalised, so a dot product is the cosine similarity (range -1..1, higher is
more similar). ``embed_batch`` is the one method an implementation must provide; it is
batch-first and async. Pure-CPU implementations run their work in a worker thread so the
event loop stays responsive; network ones use an async HTTP client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memlane.errors import DimensionMismatchError

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Batch text embedder.

    Attributes:
        name: a stable identifier such as ``"local:all-MiniLM-L6-v2"``; stored with the
            database so a later open with a different model is detected.
        dim: the dimension of every vector returned.

    Optional capability flag (read with :func:`is_latin_only`, False when absent):
        latin_only: the model reads Latin-script text only (English MiniLM): its cosines
            between texts in other scripts (Chinese, Japanese, Korean, Cyrillic...) carry no
            meaning, so search does not take them as evidence under the default floor.
    """

    name: str
    dim: int

    async def embed_batch(self, texts: list[str]) -> Matrix:
        """Embed ``texts``; returns float32 ``(len(texts), dim)``, rows L2-normalised.

        Raises:
            EmbedderError: the model or service failed (``retryable`` says whether to retry).
        """
        ...

    async def aclose(self) -> None:
        """Release resources (HTTP clients, thread pools)."""
        ...


@runtime_checkable
class QueryEmbedder(Protocol):
    """An embedder that encodes search queries differently from stored texts (e5's
    ``"query: "`` / ``"passage: "`` prefixes). Optional: search uses ``embed_queries`` when an
    embedder has it, else ``embed_batch``."""

    async def embed_queries(self, texts: list[str]) -> Matrix:
        """Embed search queries; float32 ``(len(texts), dim)``, rows L2-normalised."""
        ...


def is_latin_only(embedder: object) -> bool:
    """The embedder's optional ``latin_only`` flag (see :class:`Embedder`); False when absent."""
    return getattr(embedder, "latin_only", False) is True


async def embed_query_texts(embedder: Embedder, texts: list[str]) -> Matrix:
    """Embed search queries: ``embedder.embed_queries`` when it has one, else ``embed_batch``."""
    if isinstance(embedder, QueryEmbedder):
        return await embedder.embed_queries(texts)
    return await embedder.embed_batch(texts)


def sync_query_embedding(embedder: Embedder) -> Callable[[list[str]], Matrix] | None:
    """A blocking function computing what :func:`embed_query_texts` does, in the calling
    thread, when the embedder has one (optional capability): ``embed_queries_sync`` for a
    :class:`QueryEmbedder`, else ``embed_sync`` (the local, e5 and hash embedders). None for
    the others (a remote embedder is awaited). The search embeds queries with it in the thread
    that waits for the search anyway (issue 22), instead of handing them to a worker thread."""
    if isinstance(embedder, QueryEmbedder):
        fn = getattr(embedder, "embed_queries_sync", None)
    else:
        fn = getattr(embedder, "embed_sync", None)
    return fn if callable(fn) else None


def normalize(matrix: npt.ArrayLike) -> Matrix:
    """Return ``matrix`` as float32 with L2-normalised rows (zero rows stay zero)."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Matrix = (m / norms).astype(np.float32, copy=False)
    return out


def check_matrix(matrix: Matrix, n: int, dim: int, who: str) -> Matrix:
    """Validate an embedder's output shape; raise DimensionMismatchError when it is off."""
    if matrix.ndim != 2 or matrix.shape[0] != n:
        raise DimensionMismatchError(
            f"{who} returned shape {matrix.shape} for {n} texts; expected ({n}, {dim})",
            expected=dim,
            got=int(matrix.shape[-1]) if matrix.ndim else None,
        )
    if matrix.shape[1] != dim:
        raise DimensionMismatchError(
            f"{who} returned {matrix.shape[1]}-dimensional vectors but declares dim={dim}",
            expected=dim,
            got=int(matrix.shape[1]),
        )
    return matrix
