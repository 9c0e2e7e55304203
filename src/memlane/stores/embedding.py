"""The embedder-binding rules every long-term store applies: a store holds vectors of one
embedder (name and dimension), recorded on first use; another embedder, or vectors of another
shape, are refused with a message saying what to do."""

from __future__ import annotations

from collections.abc import Sequence

from memlane.errors import ConfigError, DimensionMismatchError
from memlane.stores.base import Vector

__all__ = ["check_binding", "check_vectors", "check_windows"]


def check_binding(stored_name: str | None, stored_dim: int | None, name: str, dim: int, *, elsewhere: str) -> None:
    """Refuse embedder ``name`` (``dim``) on a store bound to ``stored_name`` (``stored_dim``).

    Args:
        elsewhere: what else the user could open instead ("another database file").

    Raises:
        DimensionMismatchError: the dimensions differ.
        ConfigError: same dimension, another model (its vectors are not comparable).
    """
    if stored_dim != dim:
        raise DimensionMismatchError(
            f"this database holds {stored_dim}-dimensional vectors from {stored_name!r}, "
            f"but the configured embedder {name!r} makes {dim}-dimensional ones. Open it with "
            f"embedder={stored_name!r}, or use {elsewhere}.",
            expected=stored_dim,
            got=dim,
        )
    if stored_name != name:
        raise ConfigError(
            f"this database was embedded with {stored_name!r}; the configured embedder is "
            f"{name!r}. Vectors of different models are not comparable: open it with "
            f"embedder={stored_name!r}, or use {elsewhere}."
        )


def check_vectors(vectors: Vector | None, n: int, dim: int | None) -> None:
    """Refuse a vector batch that is not ``n`` rows of the store's dimension (None: unbound)."""
    if vectors is None:
        return
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise DimensionMismatchError(f"expected {n} vectors, got array of shape {vectors.shape}")
    if dim is not None and vectors.shape[1] != dim:
        raise DimensionMismatchError(
            f"vector dimension {vectors.shape[1]} does not match the store's {dim}",
            expected=dim,
            got=int(vectors.shape[1]),
        )


def check_windows(windows: Sequence[Vector | None] | None, n: int, dim: int | None) -> None:
    """Refuse window vectors that are not one entry per fact (None or a ``(k, dim)`` matrix)."""
    if windows is None:
        return
    if len(windows) != n:
        raise DimensionMismatchError(f"expected window vectors for {n} facts, got {len(windows)}")
    for mat in windows:
        if mat is not None:
            check_vectors(mat, int(mat.shape[0]) if mat.ndim == 2 else -1, dim)
