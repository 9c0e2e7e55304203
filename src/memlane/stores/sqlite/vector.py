"""In-memory vector index for one partition (pure numpy, no I/O).

Exact cosine search (one matrix-vector product) up to ``exact_max`` rows. Above that, a
binary-quantised first pass (sign bits, Hamming distance via popcount) selects
``rescore`` candidates that are then scored exactly: memory traffic drops 32x, and the
exact rescoring keeps the final order faithful. The trade-off is measured in
``bench/search_latency.py`` (recall of the approximate path vs exact).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


class VectorIndex:
    """Rows of unit vectors with their keys; append-only between full reloads."""

    def __init__(self, dim: int, *, exact_max: int = 20_000, rescore: int = 1000) -> None:
        self.dim = dim
        self.exact_max = exact_max
        self.rescore = rescore
        self.keys: list[str] = []
        self.sessions: list[str | None] = []
        self.kinds: list[str | None] = []
        self._mat = np.zeros((0, dim), dtype=np.float32)
        self._n = 0
        self._bits: npt.NDArray[np.uint64] | None = None
        self._bits_n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def matrix(self) -> F32:
        return self._mat[: self._n]

    def append(self, keys: list[str], sessions: list[str | None], vectors: F32, kinds: list[str] | None = None) -> None:
        """Add rows (amortised growth, like a list). ``kinds``: each row's fact kind
        (``fact``, ``message``, ``fragment``, ...), for :meth:`search`'s ``kind`` filter."""
        m = len(keys)
        if m == 0:
            return
        need = self._n + m
        if need > self._mat.shape[0]:
            cap = max(need, int(self._mat.shape[0] * 1.5) + 64)
            grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[: self._n] = self._mat[: self._n]
            self._mat = grown
        self._mat[self._n : need] = vectors
        self._n = need
        self.keys.extend(keys)
        self.sessions.extend(sessions)
        self.kinds.extend(kinds if kinds is not None else [None] * m)

    def _packed(self) -> npt.NDArray[np.uint64]:
        if self._bits is None or self._bits_n != self._n:
            words = (self.dim + 63) // 64
            bits = np.packbits(self.matrix > 0, axis=1)
            padded = np.zeros((self._n, words * 8), dtype=np.uint8)
            padded[:, : bits.shape[1]] = bits
            self._bits = padded.view(np.uint64)
            self._bits_n = self._n
        return self._bits

    def search(
        self,
        query: F32,
        limit: int,
        *,
        session_id: str | None = None,
        kind: str | None = None,
        allowed: set[str] | None = None,
    ) -> tuple[npt.NDArray[np.int64], F32]:
        """Top ``limit`` rows by cosine: (row indexes, scores), best first; optionally only
        rows of one session, one kind (``fact``, ``message``, ``fragment``, ...) and/or whose keys are in
        ``allowed``, searched exactly."""
        n = self._n
        if n == 0 or limit <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if session_id is not None or kind is not None or allowed is not None:
            mask = np.ones(n, dtype=np.bool_)
            if allowed is not None:
                mask &= np.fromiter((k in allowed for k in self.keys[:n]), dtype=np.bool_, count=n)
            if kind is not None:
                mask &= np.fromiter((k == kind for k in self.kinds[:n]), dtype=np.bool_, count=n)
            if session_id is not None:
                mask &= np.fromiter((s == session_id for s in self.sessions), dtype=np.bool_, count=n)
            rows = np.flatnonzero(mask).astype(np.int64)
            scores = self.matrix[rows] @ q
            return self._top(rows, scores, limit)
        if n <= self.exact_max:
            return self._top(np.arange(n, dtype=np.int64), self.matrix @ q, limit)
        # Approximate first pass on sign bits, then exact rescoring.
        words = (self.dim + 63) // 64
        qb = np.zeros(words * 8, dtype=np.uint8)
        qpacked = np.packbits(q > 0)
        qb[: qpacked.shape[0]] = qpacked
        ham = np.bitwise_count(self._packed() ^ qb.view(np.uint64)).sum(axis=1, dtype=np.int32)
        r = min(n, max(self.rescore, limit * 10))
        cand = np.argpartition(ham, r - 1)[:r].astype(np.int64)
        return self._top(cand, self.matrix[cand] @ q, limit)

    @staticmethod
    def _top(rows: npt.NDArray[np.int64], scores: F32, limit: int) -> tuple[npt.NDArray[np.int64], F32]:
        if rows.shape[0] > limit:
            part = np.argpartition(-scores, limit - 1)[:limit]
            rows, scores = rows[part], scores[part]
        order = np.argsort(-scores, kind="stable")
        return rows[order], scores[order].astype(np.float32)
