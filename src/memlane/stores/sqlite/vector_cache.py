"""Per-partition vector caches: persisted sidecars and the background graph builder.

A partition's :class:`~memlane.stores.sqlite.vector.VectorIndex` is loaded from the
``facts.embedding`` BLOBs (about 0.8 s for 100k rows). Partitions of ``sidecar_min`` rows or
more are also written, off the search path, to a sidecar next to the database file::

    <db>.vectors/<blake2b(partition)>.vec             header + float32 matrix + keys + codes
    <db>.vectors/<blake2b(partition)>.<token>.usearch  HNSW graph over its first rows (``ann``)

A later process (or store) memory-maps them instead of reading the BLOBs, when the header's
stamp still matches the database: same ``changes`` counter of the partition (every update,
delete and purge bumps it), and the row it recorded last (``max_rowid`` -> ``last_id``) still
holds the same fact; rows appended (``appends``) or backfilled (``embedded``) since are then
read from SQLite as a delta. Anything else (other ``changes``, a truncated or foreign file, a
dimension mismatch) is ignored, and a stale sidecar is deleted.

Safety: files are written under a temporary name and renamed into place (``os.replace``), so a
reader never sees a half-written file (and a file whose size disagrees with its header is
ignored). After the rename the builder checks the partition's stamp again and deletes what it
wrote when the partition changed meanwhile; ``forget``/purge deletes the sidecars of every
partition it touched after its commit: no forgotten vector stays on disk in either order.
``:memory:`` and read-only databases get no sidecar.

The HNSW graph (usearch, the ``ann`` extra) is built on a background thread for partitions
above ``ann_min`` rows; until it is ready, and without usearch, searches use the exact / sign-bit
paths of :class:`VectorIndex`. Rows appended after the graph are scanned exactly (the tail)
until the tail reaches ``rebuild_fraction`` of the rows, when the builder extends a copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane.stores.sqlite.vector import VectorIndex, build_ann, load_usearch, sign_bits

log = logging.getLogger("memlane")

MAGIC = b"MLVEC01\n"
FORMAT = 1
_ALIGN = 64


_prewarm_lock = threading.Lock()
_prewarmed = False


def prewarm_usearch(db_path: str) -> None:
    """Import usearch on a daemon thread when the database has graph sidecars: its import costs
    ~0.15 s (urllib, tqdm), which the first search would otherwise wait for."""
    global _prewarmed
    if _prewarmed or "usearch.index" in sys.modules or db_path == ":memory:":
        return
    with contextlib.suppress(OSError):
        if not any(Path(db_path + ".vectors").glob("*.usearch")):
            return
        with _prewarm_lock:
            if not _prewarmed:
                _prewarmed = True
                threading.Thread(target=load_usearch, name="memlane-usearch-import", daemon=True).start()


class CachedIndex:
    """One partition's index and the database state it reflects."""

    def __init__(
        self,
        index: VectorIndex,
        appends: int,
        changes: int,
        max_rowid: int,
        generation: str | None = None,
        embedded: int = 0,
    ) -> None:
        self.index = index
        self.appends = appends
        self.changes = changes
        self.generation = generation
        self.max_rowid = max_rowid
        #: the partition's ``embedded`` counter (backfills) this index includes
        self.embedded = embedded
        #: id of the row ``max_rowid`` (a sidecar's proof that the partition is the same one)
        self.last_id: str | None = None
        #: rows covered by the sidecar on disk (0: none); rows the builder was asked for
        self.persisted_n = 0
        self.requested_n = 0
        #: rows read from BLOBs into this index (tests and benchmarks count them)
        self.blob_rows = 0
        self.lock = threading.Lock()


@dataclass
class Stamp:
    appends: int
    changes: int
    embedded: int
    max_rowid: int
    last_id: str | None


def partition_file_key(part: str) -> str:
    return hashlib.blake2b(part.encode("utf-8"), digest_size=16).hexdigest()


def _pad(n: int) -> int:
    return -n % _ALIGN


class Sidecars:
    """The sidecar directory of one database file."""

    def __init__(self, db_path: str) -> None:
        self.dir = Path(db_path + ".vectors")

    def _vec(self, key: str) -> Path:
        return self.dir / f"{key}.vec"

    # ------------------------------------------------------------------ write
    def save(
        self,
        part: str,
        index: VectorIndex,
        n: int,
        stamp: Stamp,
        ann: Any | None,
        ann_rows: int,
        still_current: Callable[[], bool],
    ) -> bool:
        """Write rows [0, n) of ``index`` (and ``ann``) atomically; False when the partition
        changed meanwhile (nothing is left on disk then)."""
        key = partition_file_key(part)
        self.dir.mkdir(exist_ok=True)
        token = secrets.token_hex(6)
        ann_name = None
        tmp_ann = self.dir / f".{key}.{token}.usearch.tmp"
        tmp = self.dir / f".{key}.{token}.vec.tmp"
        try:
            if ann is not None:
                ann_name = f"{key}.{token}.usearch"
                ann.save(str(tmp_ann))
                os.replace(tmp_ann, self.dir / ann_name)
            blob, offsets = index.key_arrays(n)
            snames, scodes, knames, kcodes = index.code_arrays(n)
            matrix = np.ascontiguousarray(index.rows(0, n), dtype=np.float32)
            sections: list[tuple[str, Any]] = [
                ("matrix", matrix),
                ("key_offsets", offsets.astype(np.int64)),
                ("key_blob", np.frombuffer(blob, dtype=np.uint8)),
                ("session_codes", scodes.astype(np.int32)),
                ("kind_codes", kcodes.astype(np.int32)),
                ("sign_bits", sign_bits(matrix)),  # computed here: the index's own copy is the searches'
            ]
            header: dict[str, Any] = {
                "format": FORMAT,
                "dim": index.dim,
                "rows": n,
                "appends": stamp.appends,
                "changes": stamp.changes,
                "embedded": stamp.embedded,
                "max_rowid": stamp.max_rowid,
                "last_id": stamp.last_id,
                "sessions": snames,
                "kinds": knames,
                "ann": {"file": ann_name, "rows": ann_rows} if ann_name else None,
            }
            # layout: offsets are relative to the data start (after the header block)
            layout: dict[str, list[int]] = {}
            pos = 0
            for name, arr in sections:
                layout[name] = [pos, int(arr.nbytes)]
                pos += arr.nbytes + _pad(arr.nbytes)
            header["sections"] = layout
            header["data_bytes"] = pos
            head = json.dumps(header).encode("utf-8")
            head_block = MAGIC + len(head).to_bytes(8, "little") + head
            head_block += b"\0" * _pad(len(head_block))
            with open(tmp, "wb") as f:
                f.write(head_block)
                for _, arr in sections:
                    f.write(memoryview(arr).cast("B"))
                    f.write(b"\0" * _pad(arr.nbytes))
            os.replace(tmp, self._vec(key))
        except OSError as exc:  # a full disk, a read-only directory: the cache stays in memory
            log.warning("memlane: could not write the vector sidecar: %s", exc)
            for p in (tmp, tmp_ann):
                with contextlib.suppress(OSError):
                    p.unlink()
            return False
        if not still_current():  # a purge or change committed meanwhile: take it back
            self.drop(part)
            return False
        self._remove_old_graphs(key, keep=ann_name)
        return True

    def _remove_old_graphs(self, key: str, keep: str | None) -> None:
        with contextlib.suppress(OSError):
            for p in self.dir.glob(f"{key}.*.usearch"):
                if p.name != keep:
                    with contextlib.suppress(OSError):
                        p.unlink()

    def drop(self, part: str) -> None:
        """Delete the partition's sidecar files (its vectors leave the disk)."""
        key = partition_file_key(part)
        with contextlib.suppress(OSError):
            self._vec(key).unlink()
        self._remove_old_graphs(key, keep=None)

    def files(self, part: str) -> list[Path]:
        key = partition_file_key(part)
        if not self.dir.exists():
            return []
        return sorted(p for p in self.dir.iterdir() if key in p.name)

    # ------------------------------------------------------------------ read
    def load(
        self,
        part: str,
        dim: int,
        changes: int,
        same_row: Callable[[int, str | None], bool],
        **index_kwargs: Any,
    ) -> tuple[VectorIndex, Stamp, tuple[Path, int] | None] | None:
        """The partition's index memory-mapped from its sidecar and its graph file (path, rows),
        or None (missing, stale, damaged). ``same_row(max_rowid, last_id)`` checks the recorded
        last row in the database."""
        key = partition_file_key(part)
        path = self._vec(key)
        try:
            with open(path, "rb") as f:
                magic = f.read(len(MAGIC))
                size = os.fstat(f.fileno()).st_size
                if magic != MAGIC:
                    return None
                hlen = int.from_bytes(f.read(8), "little")
                if hlen <= 0 or hlen > size:
                    return None
                header = json.loads(f.read(hlen).decode("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        try:
            start = len(MAGIC) + 8 + hlen
            start += _pad(start)
            if header.get("format") != FORMAT or header.get("dim") != dim:
                return None
            if start + int(header["data_bytes"]) != size:
                return None  # truncated or padded: never read a half-written file
            if header["changes"] != changes:
                if header["changes"] < changes:  # stale: rows were changed or deleted since
                    self.drop(part)
                return None
            stamp = Stamp(
                header["appends"], header["changes"], header["embedded"], header["max_rowid"], header["last_id"]
            )
            if not same_row(stamp.max_rowid, stamp.last_id):  # another partition of the same name
                self.drop(part)
                return None
            n = int(header["rows"])
            sec = header["sections"]

            def arr(name: str, dtype: Any, shape: tuple[int, ...]) -> Any:
                off, nbytes = sec[name]
                if nbytes == 0:
                    return np.zeros(shape, dtype=dtype)
                return np.memmap(path, dtype=dtype, mode="r", offset=start + off, shape=shape)

            matrix = arr("matrix", np.float32, (n, dim))
            offsets = np.asarray(arr("key_offsets", np.int64, (n + 1,)))
            blob = arr("key_blob", np.uint8, (int(sec["key_blob"][1]),))
            scodes: npt.NDArray[np.int32] = np.asarray(arr("session_codes", np.int32, (n,)))
            kcodes: npt.NDArray[np.int32] = np.asarray(arr("kind_codes", np.int32, (n,)))
            bits = arr("sign_bits", np.uint64, (n, (dim + 63) // 64)) if "sign_bits" in sec else None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        index = VectorIndex.from_arrays(
            dim, matrix, blob, offsets, header["sessions"], scodes, header["kinds"], kcodes, bits, **index_kwargs
        )
        ann_info = header.get("ann")
        graph = (self.dir / ann_info["file"], int(ann_info["rows"])) if ann_info else None
        return index, stamp, graph

    @staticmethod
    def open_graph(path: Path, rows: int, dim: int, usearch: Any) -> Any | None:
        """A graph sidecar memory-mapped (None when it is missing, damaged or not the expected one)."""
        try:
            ann = usearch.Index.restore(str(path), view=True)
            if ann is not None and len(ann) == rows and ann.ndim == dim:
                return ann
        except Exception as exc:  # a damaged graph file: search without it (rebuilt later)
            log.debug("memlane: vector graph sidecar unreadable: %s", exc)
        return None


class VectorCaches:
    """Sidecars and the background builder of one store.

    Args:
        path: the database file (None: ``:memory:`` or read-only, no sidecar).
        ann_min: partitions of at least this many rows get an HNSW graph (when usearch imports).
        sidecar_min: partitions of at least this many rows are persisted.
        rebuild_fraction: the builder runs again when rows not covered by the sidecar / graph
            exceed this fraction of the partition (and ``min_tail`` rows).
        current: ``current(part) -> (changes, generation)`` read from the database now, or None.
    """

    def __init__(
        self,
        path: str | None,
        *,
        current: Callable[[str], tuple[int, str | None] | None],
        ann_min: int = 20_000,
        sidecar_min: int = 20_000,
        rebuild_fraction: float = 0.05,
        min_tail: int = 1_000,
        use_ann: bool = True,
    ) -> None:
        self.sidecars = Sidecars(path) if path else None
        self._use_ann = use_ann
        self._usearch: Any | None = None
        self._usearch_loaded = False
        self.ann_min = ann_min
        self.sidecar_min = sidecar_min
        self.rebuild_fraction = rebuild_fraction
        self.min_tail = min_tail
        self._current = current
        self._cond = threading.Condition()
        self._jobs: dict[str, tuple[CachedIndex, tuple[Path, int] | None, bool]] = {}
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        #: partitions the builder finished (graph and/or sidecar), for tests and benchmarks
        self.built = 0

    def load(
        self, part: str, dim: int, changes: int, same_row: Callable[[int, str | None], bool], **index_kwargs: Any
    ) -> tuple[VectorIndex, Stamp, tuple[Path, int] | None] | None:
        """The partition's sidecar (see :meth:`Sidecars.load`); pass its graph to
        :meth:`attach_later` once the index is cached."""
        if self.sidecars is None:
            return None
        return self.sidecars.load(part, dim, changes, same_row, **index_kwargs)

    def attach_later(self, part: str, cached: CachedIndex, graph: tuple[Path, int]) -> None:
        """Memory-map the graph file into ``cached`` on the builder thread (importing usearch
        takes ~0.15 s; searches use the sign-bit path of the sidecar meanwhile)."""
        if self._use_ann and not self._closed:
            self._submit(part, cached, graph, build=False)

    def drop(self, part: str) -> None:
        if self.sidecars is not None:
            self.sidecars.drop(part)

    @property
    def usearch(self) -> Any | None:
        """The usearch module (imported on first use), or None."""
        if not self._usearch_loaded:
            self._usearch = load_usearch() if self._use_ann else None
            self._usearch_loaded = True
        return self._usearch

    # ------------------------------------------------------------------ builder
    def _due(self, cached: CachedIndex) -> bool:
        n = len(cached.index)
        wants_ann = self._use_ann and n >= self.ann_min and self.usearch is not None
        wants_file = self.sidecars is not None and n >= self.sidecar_min
        if not (wants_ann or wants_file):
            return False
        covered = max(cached.requested_n, cached.persisted_n if wants_file else n)
        if wants_ann:
            covered = min(covered, max(cached.requested_n, cached.index.ann_n))
        return n - covered >= max(self.min_tail, int(n * self.rebuild_fraction)) or covered == 0

    def maybe_build(self, part: str, cached: CachedIndex) -> None:
        """Queue ``part`` for the builder when its graph or sidecar is missing or far behind
        (call with ``cached.lock`` held)."""
        if self._closed or not self._due(cached):
            return
        cached.requested_n = len(cached.index)
        self._submit(part, cached, None, build=True)

    def _submit(self, part: str, cached: CachedIndex, graph: tuple[Path, int] | None, *, build: bool) -> None:
        with self._cond:
            prev = self._jobs.get(part)
            if prev is not None and prev[0] is cached:  # merge with the queued job
                graph, build = graph or prev[1], build or prev[2]
            self._jobs[part] = (cached, graph, build)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="memlane-vector-builder", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no build is queued or running (tests, benchmarks)."""
        with self._cond:
            return self._cond.wait_for(lambda: (not self._jobs and not self._busy) or self._closed, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the builder (a running graph build is cancelled)."""
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._jobs) or self._closed)
                if self._closed:
                    self._busy = False
                    self._cond.notify_all()
                    return
                part, (cached, graph, build) = next(iter(self._jobs.items()))
                del self._jobs[part]
                self._busy = True
            try:
                if graph is not None:
                    self._attach(cached, graph)
                if build:
                    self._build(part, cached)
            except Exception:  # never let a cache refresh kill the thread
                if not self._closed:  # (closing cancels a graph build: usearch raises)
                    log.exception("memlane: vector cache build failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _attach(self, cached: CachedIndex, graph: tuple[Path, int]) -> None:
        usearch = self.usearch
        if usearch is None or self._closed:
            return
        ann = Sidecars.open_graph(graph[0], graph[1], cached.index.dim, usearch)
        if ann is None:
            return
        with cached.lock:
            if cached.index.ann is None and graph[1] <= len(cached.index):
                cached.index.attach_ann(ann, graph[1])

    def _still(self, part: str, changes: int, generation: str | None) -> bool:
        try:
            now = self._current(part)
        except Exception:  # the database closed under us: keep nothing on disk
            return False
        return now is not None and now == (changes, generation)

    def _build(self, part: str, cached: CachedIndex) -> None:
        with cached.lock:
            index = cached.index
            n = len(index)
            stamp = Stamp(cached.appends, cached.changes, cached.embedded, cached.max_rowid, cached.last_id)
            generation = cached.generation
            old_ann, old_ann_n = index.ann, index.ann_n
        if not self._still(part, stamp.changes, generation):
            return
        ann, ann_n = old_ann, old_ann_n
        if self.usearch is not None and n >= self.ann_min and n > old_ann_n:

            def progress(done: int, total: int) -> bool:
                return not self._closed

            # usearch checks the callback's annotations (real types, not postponed strings)
            progress.__annotations__ = {"done": int, "total": int, "return": bool}

            fresh = old_ann is None or old_ann_n == 0
            ann = build_ann(
                self.usearch,
                index.dim,
                index.rows(0 if fresh else old_ann_n, n),
                start=0 if fresh else old_ann_n,
                base=None if fresh else old_ann,
                progress=progress,
            )
            ann_n = n
            if self._closed:
                return
            with cached.lock:
                if index.ann is old_ann:
                    index.attach_ann(ann, ann_n)
        if self.sidecars is not None and n >= self.sidecar_min and not self._closed:
            ok = self.sidecars.save(
                part,
                index,
                n,
                stamp,
                ann if ann_n else None,
                ann_n,
                lambda: self._still(part, stamp.changes, generation),
            )
            if ok:
                with cached.lock:
                    cached.persisted_n = max(cached.persisted_n, n)
        self.built += 1
