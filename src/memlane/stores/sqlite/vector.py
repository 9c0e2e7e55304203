"""In-memory vector index for one partition (numpy; optional usearch HNSW; no I/O).

Exact cosine search (one matrix-vector product) up to ``exact_max`` rows. Above that:

* when an ANN graph is attached (:attr:`VectorIndex.ann`, a usearch HNSW index over the first
  :attr:`VectorIndex.ann_n` rows, built off the search path by
  :mod:`memlane.stores.sqlite.vector_cache`), the graph proposes ``ann_candidates`` rows, the
  rows appended since the graph was built (the "tail") are added, and all of them are scored
  exactly: the final scores are exact, only the candidate set is approximate;
* otherwise a binary-quantised first pass (sign bits, Hamming distance via popcount) selects
  ``rescore`` candidates that are then scored exactly.

Filters (session, kind, allowed keys) are always exact: a narrow filter scans its rows; a broad
one over-fetches from the graph, keeps the rows that pass, and falls back to the exact scan when
too few survive. Recall and latency of each path: ``bench/vector_ann.py``.

Rows are append-only between full reloads. The first rows may come from a memory-mapped
sidecar (:meth:`VectorIndex.from_arrays`), later ones are appended in memory.

Several rows may share a key: a memory longer than the encoder reads has one row per window
(issue 22). :meth:`VectorIndex.search_keys` returns each key once, with its best row's score.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane._native import import_usearch

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


def load_usearch() -> Any | None:
    """The ``usearch.index`` module, or None when the ``ann`` extra is not installed (imported
    after onnxruntime: see :mod:`memlane._native`)."""
    return import_usearch()


#: Graph parameters (measured in bench/vector_ann.py): candidates proposed per search, the
#: graph's search breadth (usearch ``expansion_search``, HNSW "ef"; 1.5x above
#: ``ANN_WIDE_ROWS`` rows) and its links per node (HNSW "M").
ANN_CANDIDATES = 64
ANN_EXPANSION = 128
ANN_WIDE_ROWS = 50_000
ANN_CONNECTIVITY = 32


def sign_bits(matrix: F32) -> npt.NDArray[np.uint64]:
    """Each row's sign bits, packed into ``(dim + 63) // 64`` words."""
    words = (matrix.shape[1] + 63) // 64
    packed = np.packbits(np.asarray(matrix) > 0, axis=1)
    padded = np.zeros((matrix.shape[0], words * 8), dtype=np.uint8)
    padded[:, : packed.shape[1]] = packed
    return padded.view(np.uint64)


class _Codes:
    """A growable int32 column of small-vocabulary strings (session ids, kinds)."""

    def __init__(self) -> None:
        self.names: list[str | None] = []
        self._code: dict[str | None, int] = {}
        self.arr = np.zeros(0, dtype=np.int32)
        self.n = 0

    def code(self, name: str | None) -> int:
        c = self._code.get(name)
        if c is None:
            c = self._code[name] = len(self.names)
            self.names.append(name)
        return c

    def lookup(self, name: str | None) -> int:
        return self._code.get(name, -1)

    def set_base(self, names: list[str | None], codes: npt.NDArray[np.int32]) -> None:
        self.names = list(names)
        self._code = {v: i for i, v in enumerate(self.names)}
        self.arr = np.array(codes, dtype=np.int32)
        self.n = len(codes)

    def extend(self, values: list[str | None]) -> None:
        m = len(values)
        need = self.n + m
        if need > self.arr.shape[0]:
            grown = np.zeros(max(need, int(self.arr.shape[0] * 1.5) + 64), dtype=np.int32)
            grown[: self.n] = self.arr[: self.n]
            self.arr = grown
        self.arr[self.n : need] = [self.code(v) for v in values]
        self.n = need

    @property
    def values(self) -> npt.NDArray[np.int32]:
        return self.arr[: self.n]


class VectorIndex:
    """Rows of unit vectors with their keys; append-only between full reloads.

    Args:
        dim: vector dimension.
        exact_max: partitions up to this many rows are searched exactly.
        rescore: candidates of the sign-bit first pass (used above ``exact_max`` without a graph).
        ann_candidates: candidates proposed by the graph (at least ``2 * limit``).
    """

    def __init__(
        self, dim: int, *, exact_max: int = 20_000, rescore: int = 1000, ann_candidates: int = ANN_CANDIDATES
    ) -> None:
        self.dim = dim
        self.exact_max = exact_max
        self.rescore = rescore
        self.ann_candidates = ann_candidates
        # rows [0, base_n): a read-only (possibly memory-mapped) matrix; rows [base_n, n): _mat
        self._base = np.zeros((0, dim), dtype=np.float32)
        self._base_n = 0
        self._base_keys: tuple[Any, npt.NDArray[np.int64]] | None = None  # (utf-8 blob, offsets)
        self._mat = np.zeros((0, dim), dtype=np.float32)
        self._n = 0
        self._tail_keys: list[str] = []
        self._sessions = _Codes()
        self._kinds = _Codes()
        self._pos: dict[str, list[int]] | None = None
        self._bits: npt.NDArray[np.uint64] | None = None
        self._bits_n = 0
        #: usearch HNSW graph over rows [0, ann_n) (keys = row numbers), or None.
        self.ann: Any | None = None
        self.ann_n = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        dim: int,
        matrix: F32,
        key_blob: Any,
        key_offsets: npt.NDArray[np.int64],
        session_names: list[str | None],
        session_codes: npt.NDArray[np.int32],
        kind_names: list[str | None],
        kind_codes: npt.NDArray[np.int32],
        bits: npt.NDArray[np.uint64] | None = None,
        **kwargs: Any,
    ) -> VectorIndex:
        """An index whose first rows are given arrays (e.g. memory-mapped from a sidecar):
        ``key_blob[key_offsets[i]:key_offsets[i + 1]]`` is row ``i``'s key in UTF-8; ``bits``:
        the rows' sign bits (:func:`sign_bits`), else computed on first use."""
        ix = cls(dim, **kwargs)
        if bits is not None and bits.shape[0] == matrix.shape[0]:
            ix._bits, ix._bits_n = bits, int(bits.shape[0])
        n = int(matrix.shape[0])
        ix._base, ix._base_n, ix._n = matrix, n, n
        ix._base_keys = (key_blob, key_offsets)
        ix._sessions.set_base(session_names, session_codes)
        ix._kinds.set_base(kind_names, kind_codes)
        return ix

    def __len__(self) -> int:
        return self._n

    @property
    def base_rows(self) -> int:
        """Rows held by the read-only (sidecar) part."""
        return self._base_n

    def key(self, i: int) -> str:
        """Row ``i``'s key."""
        if i < self._base_n:
            assert self._base_keys is not None
            blob, off = self._base_keys
            return bytes(blob[int(off[i]) : int(off[i + 1])]).decode("utf-8")
        return self._tail_keys[i - self._base_n]

    @property
    def keys(self) -> list[str]:
        return [self.key(i) for i in range(self._n)]

    def key_arrays(self, n: int) -> tuple[bytes, npt.NDArray[np.int64]]:
        """Keys of rows [0, n) as (UTF-8 blob, offsets) (for a sidecar)."""
        parts: list[bytes] = []
        if self._base_keys is not None and self._base_n:
            blob, off = self._base_keys
            m = min(n, self._base_n)
            parts.append(bytes(blob[: int(off[m])]))
            base_off = np.asarray(off[: m + 1], dtype=np.int64)
        else:
            base_off = np.zeros(1, dtype=np.int64)
        tail = [k.encode("utf-8") for k in self._tail_keys[: max(0, n - self._base_n)]]
        lens = np.fromiter((len(t) for t in tail), dtype=np.int64, count=len(tail))
        offsets = np.concatenate([base_off, base_off[-1] + np.cumsum(lens)])
        return b"".join(parts + tail), offsets

    def code_arrays(
        self, n: int
    ) -> tuple[list[str | None], npt.NDArray[np.int32], list[str | None], npt.NDArray[np.int32]]:
        """(session names, session codes, kind names, kind codes) of rows [0, n)."""
        return (
            list(self._sessions.names),
            self._sessions.values[:n].copy(),
            list(self._kinds.names),
            self._kinds.values[:n].copy(),
        )

    @property
    def sessions(self) -> list[str | None]:
        return [self._sessions.names[c] for c in self._sessions.values]

    @property
    def kinds(self) -> list[str | None]:
        return [self._kinds.names[c] for c in self._kinds.values]

    @property
    def matrix(self) -> F32:
        """All rows (a copy when part of them is memory-mapped)."""
        return self.rows(0, self._n)

    def rows(self, lo: int, hi: int) -> F32:
        """Rows [lo, hi) as one matrix (a view when they lie in one part)."""
        b = self._base_n
        if hi <= b:
            return self._base[lo:hi]
        if lo >= b:
            return self._mat[lo - b : hi - b]
        return np.concatenate([self._base[lo:b], self._mat[: hi - b]])

    def _gather(self, rows: I64) -> F32:
        b = self._base_n
        if b == 0:
            return self._mat[rows]
        if self._n == b:
            return np.asarray(self._base[rows])
        out = np.empty((rows.shape[0], self.dim), dtype=np.float32)
        low = rows < b
        out[low] = self._base[rows[low]]
        out[~low] = self._mat[rows[~low] - b]
        return out

    def _all_scores(self, q: F32) -> F32:
        b = self._base_n
        if b == 0:
            return self._mat[: self._n] @ q
        if self._n == b:
            return self._base @ q
        return np.concatenate([self._base @ q, self._mat[: self._n - b] @ q])

    def append(self, keys: list[str], sessions: list[str | None], vectors: F32, kinds: list[str] | None = None) -> None:
        """Add rows (amortised growth, like a list). ``kinds``: each row's fact kind
        (``fact``, ``message``, ``fragment``, ...), for :meth:`search`'s ``kind`` filter."""
        m = len(keys)
        if m == 0:
            return
        tn = self._n - self._base_n
        need = tn + m
        if need > self._mat.shape[0]:
            cap = max(need, int(self._mat.shape[0] * 1.5) + 64)
            grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[:tn] = self._mat[:tn]
            self._mat = grown  # rows already handed out (a builder's snapshot) stay in the old array
        self._mat[tn:need] = vectors
        if self._pos is not None:
            for j, k in enumerate(keys):
                self._pos.setdefault(k, []).append(self._n + j)
        self._n += m
        self._tail_keys.extend(keys)
        self._sessions.extend(list(sessions))
        self._kinds.extend(list(kinds) if kinds is not None else [None] * m)

    def attach_ann(self, ann: Any, rows: int) -> None:
        """Use ``ann`` (usearch index, keys = row numbers) for rows [0, rows)."""
        ann.expansion_search = ANN_EXPANSION * 3 // 2 if rows > ANN_WIDE_ROWS else ANN_EXPANSION
        self.ann, self.ann_n = ann, rows

    def positions(self) -> dict[str, list[int]]:
        """Key -> its rows (built on first use; a long memory has one row per window)."""
        if self._pos is None:
            pos: dict[str, list[int]] = {}
            for i in range(self._n):
                pos.setdefault(self.key(i), []).append(i)
            self._pos = pos
        return self._pos

    def _packed(self) -> npt.NDArray[np.uint64]:
        if self._bits is None or self._bits_n != self._n:
            words = (self.dim + 63) // 64
            old = self._bits if self._bits is not None else np.zeros((0, words), dtype=np.uint64)
            self._bits = np.concatenate([old[: self._bits_n], sign_bits(self.rows(self._bits_n, self._n))])
            self._bits_n = self._n
        return self._bits

    # ------------------------------------------------------------------ search
    def _mask(self, session_id: str | None, kind: str | None, allowed: set[str] | None) -> npt.NDArray[np.bool_]:
        n = self._n
        mask = np.ones(n, dtype=np.bool_)
        if session_id is not None:
            mask &= self._sessions.values == self._sessions.lookup(session_id)
        if kind is not None:
            mask &= self._kinds.values == self._kinds.lookup(kind)
        if allowed is not None:
            keep = np.zeros(n, dtype=np.bool_)
            pos = self.positions()
            rows = [r for k in allowed if k in pos for r in pos[k]]
            keep[np.asarray(rows, dtype=np.int64)] = True
            mask &= keep
        return mask

    def search(
        self,
        query: F32,
        limit: int,
        *,
        session_id: str | None = None,
        kind: str | None = None,
        allowed: set[str] | None = None,
    ) -> tuple[I64, F32]:
        """Top ``limit`` rows by cosine: (row indexes, scores), best first; optionally only
        rows of one session, one kind (``fact``, ``message``, ``fragment``, ...) and/or whose keys are in
        ``allowed`` (filters are exact: every row returned passes them)."""
        n = self._n
        if n == 0 or limit <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if session_id is not None or kind is not None or allowed is not None:
            mask = self._mask(session_id, kind, allowed)
            hits = int(mask.sum())
            if hits > self.exact_max and self.ann is not None and self.ann_n:
                # broad filter: over-fetch from the graph in proportion to the rows it excludes
                want = min(self.ann_n, math.ceil(limit * n / hits * 3) + self.ann_candidates)
                cand = self._ann_candidates(q, want)
                cand = cand[mask[cand]]
                if cand.shape[0] >= limit:
                    return self._top(cand, self._gather(cand) @ q, limit)
            rows = np.flatnonzero(mask).astype(np.int64)
            return self._top(rows, self._gather(rows) @ q, limit)
        if n <= self.exact_max:
            return self._top(np.arange(n, dtype=np.int64), self._all_scores(q), limit)
        if self.ann is not None and self.ann_n:
            cand = self._ann_candidates(q, max(self.ann_candidates, 2 * limit))
            return self._top(cand, self._gather(cand) @ q, limit)
        # Approximate first pass on sign bits, then exact rescoring.
        words = (self.dim + 63) // 64
        qb = np.zeros(words * 8, dtype=np.uint8)
        qpacked = np.packbits(q > 0)
        qb[: qpacked.shape[0]] = qpacked
        ham = np.bitwise_count(self._packed() ^ qb.view(np.uint64)).sum(axis=1, dtype=np.int32)
        r = min(n, max(self.rescore, limit * 10))
        cand = np.argpartition(ham, r - 1)[:r].astype(np.int64)
        return self._top(cand, self._gather(cand) @ q, limit)

    def search_keys(
        self,
        query: F32,
        limit: int,
        *,
        session_id: str | None = None,
        kind: str | None = None,
        allowed: set[str] | None = None,
    ) -> list[tuple[str, float]]:
        """The top ``limit`` keys by their best row's cosine, best first (:meth:`search`'s
        filters): rows are fetched until ``limit`` distinct keys are found or none is left
        (one round when every key has one row)."""
        want = limit
        while True:
            rows, scores = self.search(query, want, session_id=session_id, kind=kind, allowed=allowed)
            out: dict[str, float] = {}
            for i, s in zip(rows.tolist(), scores.tolist(), strict=True):
                k = self.key(int(i))
                if k not in out:  # best first: the first row of a key is its best
                    out[k] = float(s)
            if len(out) >= limit or rows.shape[0] < want or want >= self._n:
                return list(out.items())[:limit]
            want = min(self._n, want * 2 + (limit - len(out)))

    def _ann_candidates(self, q: F32, count: int) -> I64:
        """Graph candidates among rows [0, ann_n) plus every later row (the tail)."""
        assert self.ann is not None
        found = self.ann.search(q, count=min(count, self.ann_n), threads=1)
        cand = np.asarray(found.keys, dtype=np.int64)
        if self._n > self.ann_n:
            cand = np.concatenate([cand, np.arange(self.ann_n, self._n, dtype=np.int64)])
        return cand

    @staticmethod
    def _top(rows: I64, scores: F32, limit: int) -> tuple[I64, F32]:
        if rows.shape[0] > limit:
            part = np.argpartition(-scores, limit - 1)[:limit]
            rows, scores = rows[part], scores[part]
        order = np.argsort(-scores, kind="stable")
        return rows[order], scores[order].astype(np.float32)


def build_ann(
    usearch: Any,
    dim: int,
    vectors: F32,
    *,
    start: int = 0,
    base: Any | None = None,
    dtype: str = "i8",
    threads: int = 1,
    progress: Any | None = None,
) -> Any:
    """A usearch HNSW graph (inner product on unit vectors) holding ``vectors`` under keys
    ``start, start + 1, ...``; added to a copy of ``base`` when given (``base`` is not changed)."""
    if base is not None:
        ann = base.copy()
    else:
        ann = usearch.Index(
            ndim=dim, metric="ip", dtype=dtype, connectivity=ANN_CONNECTIVITY, expansion_search=ANN_EXPANSION
        )
    if vectors.shape[0]:
        keys = np.arange(start, start + vectors.shape[0], dtype=np.uint64)
        ann.add(keys, np.ascontiguousarray(vectors, dtype=np.float32), threads=threads, progress=progress)
    return ann
