"""Long-term memory on SQLite: facts (FTS5 keyword index + per-partition vector cache),
history, reflections and consolidated blobs, all in one WAL database file."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from memlane.documents import DOCUMENT_THRESHOLD_CHARS
from memlane.errors import (
    DimensionMismatchError,
)
from memlane.models import Fact, Scope
from memlane.providers._blas import default_blas_threads, limit_blas_threads
from memlane.stores.base import (
    Candidate,
    FactFilter,
    PartitionFilter,
    SyncSearchReads,
    Vector,
)
from memlane.stores.embedding import check_binding
from memlane.stores.sql import facts as core
from memlane.stores.sql import reads
from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.facts import write_windows
from memlane.stores.sql.proposals import export_proposals
from memlane.stores.sql.reflections import export_versions
from memlane.stores.sql.stmt import Program, run_all
from memlane.stores.sql.store import SqlFactStore
from memlane.stores.sqlite import export as export_
from memlane.stores.sqlite.db import BUSY_TIMEOUT_MS, Database
from memlane.stores.sqlite.dialect import DIALECT as _D
from memlane.stores.sqlite.dialect import filter_sql as _filter_sql
from memlane.stores.sqlite.dialect import run as _run
from memlane.stores.sqlite.keyword import KeywordIndex, averages
from memlane.stores.sqlite.keyword_sidecar import KeywordFiles, KeywordSidecars, index_min_rows
from memlane.stores.sqlite.vector import VectorIndex
from memlane.stores.sqlite.vector_cache import CachedIndex as _CachedIndex
from memlane.stores.sqlite.vector_cache import VectorCaches, prewarm_usearch

log = logging.getLogger("memlane")

#: A vector search over at most this many vectors (all partitions read) scores them on the SQL
#: thread, in the call that loaded the indexes: one thread hand-off instead of two (issue 22:
#: below 10k rows the hand-offs, not the matrix product, are the vector stage's cost).
INLINE_SCAN_MAX = 8192
#: Partition filters whose authors the keyword search remembers (cleared when full).
AUTHORS_CACHE_MAX = 1024

T = TypeVar("T")

#: How long the WAL truncation after a purge waits for other connections' readers.
CHECKPOINT_WAIT_MS = 5_000


def _vector_rows(
    c: sqlite3.Connection, part: str, where: str, args: tuple[Any, ...], *, windows: bool = False
) -> list[Any]:
    """``(rowid, id, session_id, vector blob, kind)`` of the partition's searchable facts
    matching ``where`` (on ``facts``), in rowid order; ``windows``: their further windows' rows
    instead (issue 22: the fact's key, another vector), read from the window table's
    partition index first (a partition without long texts costs one index probe)."""
    valid = "f.invalid_at IS NULL AND f.embedding IS NOT NULL AND f.kind <> 'document'"
    cond = " AND ".join(f"f.{c.strip()}" for c in where.split(" AND "))
    if not windows:
        sql = (
            "SELECT f.rowid, f.id, f.session_id, f.embedding, f.kind FROM facts f"
            f" WHERE f.partition=? AND {cond} AND {valid} ORDER BY f.rowid"
        )
    else:  # CROSS JOIN: SQLite keeps the window table outer (its partition index), never scans facts
        sql = (
            "SELECT f.rowid, f.id, f.session_id, w.embedding, f.kind FROM fact_windows w CROSS JOIN facts f"
            f" ON f.id = w.fact_id WHERE w.partition=? AND f.partition = w.partition AND {cond} AND {valid}"
            " ORDER BY f.rowid, w.win"
        )
    return c.execute(sql, (part, *args)).fetchall()


class SqliteFactStore(SqlFactStore):
    """Facts, history, reflections and consolidated blobs in one SQLite file.

    Args:
        db: a :class:`Database` to share, or a path (the store then owns the database).
        ctx_weight: BM25 weight of the neighbouring-turns column (0.5 measured best).
        date_weight: BM25 weight of the date column.
        exact_max: partitions up to this many vectors are searched exactly; larger ones
            use an HNSW graph (usearch, the ``ann`` extra) or, without it or until the graph is
            built, binary quantisation, both with exact rescoring.
        ann_min: partitions of at least this many vectors get an HNSW graph (default ``exact_max``).
        sidecar_min: partitions of at least this many vectors are persisted next to the database
            file (``<db>.vectors/``) and memory-mapped by the next process instead of read from
            BLOBs (see :mod:`memlane.stores.sqlite.vector_cache`); None: never (nor keyword
            index files).
        keyword_index_min: partitions of at least this many keyword rows get a postings index
            answering their keyword searches with FTS5's exact ranking (see
            :mod:`memlane.stores.sqlite.keyword_sidecar`); 0: never; None (default):
            ``$MEMLANE_KEYWORD_INDEX_MIN`` or 20,000.
    """

    @property
    def _d(self) -> Dialect:
        return _D

    def __init__(
        self,
        db: Database | str | os.PathLike[str],
        *,
        ctx_weight: float = 0.5,
        date_weight: float = 1.0,
        exact_max: int = 20_000,
        ann_min: int | None = None,
        sidecar_min: int | None = 20_000,
        keyword_index_min: int | None = None,
    ) -> None:
        # A path opens the file here (blocking: use ``await SqliteFactStore.open(...)`` from
        # async code); an opened Database costs no I/O until the first call.
        self._db = db.acquire() if isinstance(db, Database) else Database(db).open_sync().acquire()
        self.ctx_weight = ctx_weight
        self.date_weight = date_weight
        self.exact_max = exact_max
        self.dim: int | None = None
        self.embedder_name: str | None = None
        self._loaded = False
        self._cache: dict[str, _CachedIndex] = {}
        self._cache_lock = threading.Lock()
        self.ann_min = exact_max if ann_min is None else ann_min
        self.sidecar_min = sidecar_min
        self._vectors: VectorCaches | None = None
        #: vectors read from ``facts.embedding`` BLOBs into the caches (a sidecar avoids them)
        self.vector_blob_rows = 0
        # Top-k keyword search (stores/sqlite/keyword.py), with its document-frequency cache.
        self._keyword = KeywordIndex(weights=self._bm25_weights())
        # Postings indexes of large partitions (stores/sqlite/keyword_sidecar.py), derived
        # from the keyword rows and proven current against the partition counters per search.
        self.keyword_index_min = index_min_rows() if keyword_index_min is None else keyword_index_min
        self._sidecars: KeywordSidecars | None = None
        # The authors of the partitions a keyword search last read (same statement batch, on
        # the SQL thread): the engine's author boost asks for them before and after its keyword
        # search, and is served from here without a thread hand-off (authors_cached).
        self._authors: dict[PartitionFilter, list[str]] = {}
        # Per SQL thread, during a search program (run_search): the partitions of each filter.
        self._program = threading.local()
        prewarm_usearch(self._db.path)
        if not isinstance(db, Database):
            self._load_meta(self._db.connection())

    @classmethod
    async def open(cls, db: Database | str | os.PathLike[str], **kwargs: Any) -> SqliteFactStore:
        """Open (create, migrate) on a worker thread: nothing blocks the event loop."""
        if not isinstance(db, Database):
            path = db
            db = await asyncio.to_thread(lambda: Database(path).open_sync())
        store = cls(db, **kwargs)  # holds the only reference: closing the store closes the file
        await store._ready()
        return store

    @property
    def database(self) -> Database:
        return self._db

    def _load_meta(self, c: sqlite3.Connection) -> None:
        meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
        if "dim" in meta:
            self.dim = int(meta["dim"])
            self.embedder_name = meta.get("embedder")
        self._loaded = True

    async def _ready(self) -> None:
        if not self._loaded:
            await self._db.run(self._load_meta)

    # ------------------------------------------------------------------ embedder binding
    async def bind_embedder(self, name: str, dim: int) -> None:
        """Record the embedder on first use; refuse a different one later (clear error)."""
        await self._ready()
        if self.dim is None:
            await self._db.run(lambda c: self._bind(c, name, dim))
        self._check_binding(name, dim)

    def _bind(self, c: sqlite3.Connection, name: str, dim: int) -> None:
        with self._db.write(c):
            row = c.execute("SELECT value FROM meta WHERE key='dim'").fetchone()
            if row is None:
                c.execute("INSERT INTO meta VALUES ('dim', ?), ('embedder', ?)", (str(dim), name))
        self._load_meta(c)

    def _check_binding(self, name: str, dim: int) -> None:
        check_binding(self.embedder_name, self.dim, name, dim, elsewhere="another database file")

    # ------------------------------------------------------------------ the core's runner
    async def _query(self, program: Program[T]) -> T:
        return await self._db.run(lambda c: _run(c, program))

    async def _transact(self, program: Program[T]) -> T:
        def op(c: sqlite3.Connection) -> T:
            with self._db.write(c):  # BEGIN IMMEDIATE: the file's write lock
                return _run(c, program)

        return await self._db.run(op)

    def _partitions(self, c: sqlite3.Connection, pf: PartitionFilter) -> list[str]:
        memo: dict[PartitionFilter, list[str]] | None = getattr(self._program, "parts", None)
        if memo is None:
            return _run(c, core.partitions(_D, pf))
        found = memo.get(pf)
        if found is None:  # a search program resolves each filter once
            found = memo[pf] = _run(c, core.partitions(_D, pf))
        return found

    async def _after_purge(self, partitions: list[str], any_fact: bool) -> None:
        """Leave none of the purged user's text in the file: drop their partitions' vector
        caches and sidecars, merge the keyword index (FTS5 keeps deleted terms in its segments
        until a merge), and checkpoint and truncate the WAL. Deleted content is overwritten
        with zeros (``secure_delete``, set on every connection: see db.py)."""
        self._authors.clear()  # no forgotten speaker's name kept here
        for part in partitions:  # no forgotten word kept in a postings index (memory or file)
            self.keyword_sidecars.drop(part)
        with self._cache_lock:
            for part in partitions:
                self._cache.pop(part, None)
                self.vector_caches.drop(part)  # no vector of the user stays in a sidecar
        await self._db.run(self._scrub)

    def _scrub(self, c: sqlite3.Connection) -> None:
        """After a purge: merge the keyword index's segments (deleted terms stay in FTS5
        segments until a merge), then checkpoint and truncate the WAL (it holds old pages)."""
        with self._db.write(c):
            c.execute("INSERT INTO facts_fts(facts_fts) VALUES ('optimize')")
        # TRUNCATE waits (busy handler) for readers of older snapshots: wait seconds, not the
        # minute-long write timeout.
        c.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
        try:
            busy = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        finally:
            c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if busy:
            log.warning(
                "memlane: a reader kept the WAL from being truncated after forget; old pages stay until a checkpoint"
            )

    async def keyword_search(
        self,
        partitions: PartitionFilter,
        terms: Sequence[str],
        *,
        limit: int,
        filter: FactFilter | None = None,
    ) -> list[Candidate]:
        if not terms:
            return []
        return await self._db.run(lambda c: self._keyword_sync(c, partitions, terms, limit=limit, filter=filter))

    def _keyword_sync(
        self,
        c: sqlite3.Connection,
        partitions: PartitionFilter,
        terms: Sequence[str],
        *,
        limit: int,
        filter: FactFilter | None,
    ) -> list[Candidate]:
        """:meth:`keyword_search` on the SQL thread (the partitions' authors read and remembered
        in the same call)."""
        if not terms:
            return []
        ki = self._keyword
        ki.weights = self._bm25_weights()  # ctx_weight / date_weight may be tuned between searches
        fsql, fargs = _filter_sql(filter, "f")
        parts = self._partitions(c, partitions)
        if not parts:
            rows: list[tuple[str, float, str | None]] = []
            authors: list[str] = []
        else:
            found = None
            if not fsql and len(parts) == 1 and self.keyword_index_min:  # a large partition's postings
                found = self._indexed_search(c, parts[0], terms, limit)
            rows = found if found is not None else ki.search(c, parts, terms, limit=limit, fsql=fsql, fargs=fargs)
            authors = _run(c, reads.authors_in(_D, parts))
        self._remember_authors(partitions, authors)
        return [Candidate(fid, score, author) for fid, score, author in rows]

    async def run_search(self, program: Callable[[SyncSearchReads], T]) -> T:
        """Run ``program`` on the SQL thread with synchronous reads (one thread hand-off for a
        whole small-scope search: :class:`memlane.stores.base.SearchPrograms`)."""
        await self._ready()

        def op(c: sqlite3.Connection) -> T:
            self._program.parts = {}
            try:
                return program(_SyncReads(self, c))
            finally:
                self._program.parts = None

        return await self._db.run(op)

    @property
    def keyword_sidecars(self) -> KeywordSidecars:
        """The postings indexes of large partitions and their builder (created on first use)."""
        if self._sidecars is None:
            db = self._db
            on_disk = db.path != ":memory:" and not db.readonly and self.sidecar_min is not None
            self._sidecars = KeywordSidecars(
                self.keyword_index_min or None,
                background=db.path != ":memory:",
                connect=db.connection,
                files=KeywordFiles(db.path) if on_disk else None,
            )
        return self._sidecars

    def _indexed_search(
        self, c: sqlite3.Connection, part: str, terms: Sequence[str], limit: int
    ) -> list[tuple[str, float, str | None]] | None:
        """The keyword top ``limit`` of one partition from its postings index, or None when it
        has none proven current (the FTS5 path then runs)."""
        ki = self._keyword
        sc = self.keyword_sidecars
        w = ki.weights
        sc.weights = (w[2], w[3], w[4])  # what a new index orders its postings by
        idx = sc.current(c, part, lambda: ki.partition_rows(c, [part], sc.min_rows or 0))
        if idx is None:
            return None
        phrases: list[str] = []
        for term in terms:
            toks = sc.tokens(term)
            if len(toks) != 1:  # a phrase (or nothing) in FTS5: its own path
                return None
            phrases.append(toks[0])
        if not phrases or limit <= 0:
            return []
        rows, tokens = averages(c)
        if rows == 0:
            return []
        if ki._whole_file(c, [part]):
            dfs = [sc.local_df(idx, t) for t in phrases]
        else:
            dfs = [ki.doc_freq(c, t, rows) for t in terms]
        hits = sc.search(
            idx, phrases, dfs, total_rows=rows, avgdl=tokens / rows, weights=(w[2], w[3], w[4]), limit=limit
        )
        if not hits:
            return []
        marks = ",".join("?" * len(hits))
        # rowid lookups (a partition condition in the WHERE could make SQLite walk its index)
        sql = f"SELECT rowid, id, author, partition, invalid_at IS NULL FROM facts WHERE rowid IN ({marks})"
        got = {r[0]: (r[1], r[2]) for r in c.execute(sql, [h[0] for h in hits]) if r[3] == part and r[4]}
        if len(got) != len(hits):  # the index named a row the database does not hold: distrust it
            sc.drop(part)
            return None
        return [(got[rid][0], score, got[rid][1] or None) for rid, score in hits]

    authors_cached = True  # every keyword search refreshes them (in its own SQL call)

    def _cached_authors(self, pf: PartitionFilter) -> list[str] | None:
        """The authors of ``pf``'s partitions as the last keyword search (or authors read) saw."""
        found = self._authors.get(pf)
        return None if found is None else list(found)

    def _remember_authors(self, pf: PartitionFilter, authors: list[str]) -> None:
        if len(self._authors) >= AUTHORS_CACHE_MAX:
            self._authors.clear()
        self._authors[pf] = list(authors)

    def _bm25_weights(self) -> tuple[float, float, float, float, float]:
        """bm25 column weights of facts_fts: part, author (not scored), text, ctx, date."""
        return (0.0, 0.0, 1.0, float(self.ctx_weight), float(self.date_weight))

    @property
    def vector_caches(self) -> VectorCaches:
        """Sidecars and the background graph builder (created on first use: whether the file
        is read-only is known once it is open)."""
        if self._vectors is None:
            db = self._db
            path = None if db.path == ":memory:" or db.readonly or self.sidecar_min is None else db.path
            self._vectors = VectorCaches(
                path,
                current=self._vector_state,
                ann_min=self.ann_min,
                sidecar_min=self.sidecar_min if self.sidecar_min is not None else 1 << 62,
            )
        return self._vectors

    def _vector_state(self, part: str) -> tuple[int, str | None] | None:
        """(changes, generation) of ``part`` now (the builder's freshness check, any thread)."""
        row = (
            self._db.connection()
            .execute(
                "SELECT changes, (SELECT value FROM meta WHERE key='generation') FROM partitions WHERE partition=?",
                (part,),
            )
            .fetchone()
        )
        return (int(row[0]), row[1]) if row is not None else None

    def _sidecar_index(
        self, c: sqlite3.Connection, part: str, changes: int, generation: str | None
    ) -> _CachedIndex | None:
        assert self.dim is not None

        def same_row(rowid: int, fact_id: str | None) -> bool:
            row = c.execute("SELECT id FROM facts WHERE rowid=? AND partition=?", (rowid, part)).fetchone()
            return row is not None and row[0] == fact_id

        found = self.vector_caches.load(part, self.dim, changes, same_row, exact_max=self.exact_max)
        if found is None:
            return None
        index, stamp, graph = found
        cached = _CachedIndex(index, stamp.appends, changes, stamp.max_rowid, generation, embedded=stamp.embedded)
        cached.last_id = stamp.last_id
        cached.persisted_n = cached.requested_n = len(index)
        if graph is not None:  # mapped on the builder thread: this search does not wait for usearch
            self.vector_caches.attach_later(part, cached, graph)
        return cached

    def _index_for(self, c: sqlite3.Connection, part: str) -> _CachedIndex | None:
        if self.dim is None:
            return None
        # One read transaction: the counters and the rows read below are the same snapshot.
        own = not c.in_transaction
        if own:
            c.execute("BEGIN")
        try:
            return self._refresh_index(c, part)
        finally:
            if own and c.in_transaction:
                c.execute("COMMIT")

    def _refresh_index(self, c: sqlite3.Connection, part: str) -> _CachedIndex | None:
        assert self.dim is not None
        # A purge deletes partition rows, so their counters restart at 0: the database-wide
        # purge generation tells a cache (of this or another process) that a partition with the
        # same counters is not the one it cached. (A sidecar checks its last row's id instead.)
        state = c.execute(
            "SELECT appends, changes, embedded, (SELECT value FROM meta WHERE key='generation') FROM partitions"
            " WHERE partition=?",
            (part,),
        ).fetchone()
        if state is None:
            with self._cache_lock:
                self._cache.pop(part, None)
            return None
        appends, changes, embedded, generation = state
        with self._cache_lock:
            cached = self._cache.get(part)
            if cached is None or cached.changes != changes or cached.generation != generation:
                cached = self._sidecar_index(c, part, changes, generation)
                if cached is None:
                    index = VectorIndex(self.dim, exact_max=self.exact_max)
                    cached = _CachedIndex(index, -1, changes, 0, generation, embedded=-1)
                self._cache[part] = cached
        with cached.lock:
            if cached.appends != appends or cached.embedded != embedded:
                rows = []
                if cached.embedded >= 0 and cached.embedded != embedded and cached.max_rowid:
                    # vectors backfilled into rows the cache already passed (set_embeddings)
                    backfilled = ("embed_seq>? AND rowid<=?", (cached.embedded, cached.max_rowid))
                    rows = _vector_rows(c, part, *backfilled)
                    rows += _vector_rows(c, part, *backfilled, windows=True)
                new = _vector_rows(c, part, "rowid>?", (cached.max_rowid,))
                rows += new
                rows += _vector_rows(c, part, "rowid>?", (cached.max_rowid,), windows=True)
                if rows:
                    mat = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
                    cached.index.append([r[1] for r in rows], [r[2] for r in rows], mat, [r[4] for r in rows])
                    cached.blob_rows += len(rows)
                    self.vector_blob_rows += len(rows)
                if new:
                    cached.max_rowid, cached.last_id = new[-1][0], new[-1][1]
                cached.appends, cached.embedded = appends, embedded
            self.vector_caches.maybe_build(part, cached)
        return cached

    async def vector_search(
        self,
        partitions: PartitionFilter,
        vector: Vector,
        *,
        limit: int,
        filter: FactFilter | None = None,
    ) -> list[Candidate]:
        await self._ready()
        if self.dim is None:
            return []
        q = self._query_vector(vector)
        flt = filter if filter is not None and not filter.empty else None

        def load(c: sqlite3.Connection) -> tuple[_VectorScan, list[Candidate] | None]:
            scan = self._vector_scan(c, partitions, limit, flt)
            if scan.small:
                return scan, scan.score(q)  # small: scored here, no second hop
            return scan, None

        scan, done = await self._db.run(load)
        if done is not None or not scan.indexes:
            return done or []
        # A large scope: off the event loop and off the SQL threads, so searches don't queue
        # behind writes (numpy releases the GIL in the products, so no hand-off delay is needed
        # as for Python work).
        return await asyncio.to_thread(scan.score, q)

    def _query_vector(self, vector: Vector) -> Any:
        assert self.dim is not None
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"query vector has dimension {q.shape[0]}, the store holds {self.dim}",
                expected=self.dim,
                got=int(q.shape[0]),
            )
        return q

    def _vector_scan(
        self, c: sqlite3.Connection, partitions: PartitionFilter, limit: int, flt: FactFilter | None
    ) -> _VectorScan:
        """The partitions' vector indexes, loaded (refreshed) on the SQL thread, with the ids an
        author or metadata filter allows (resolved in SQL)."""
        parts = self._partitions(c, partitions)
        indexes = [ix for ix in (self._index_for(c, p) for p in parts) if ix is not None and len(ix.index)]
        allowed: set[str] | None = None
        if flt is not None and (flt.author is not None or bool(flt.metadata)) and parts:
            fsql, fargs = _filter_sql(flt, "facts")
            marks = ",".join("?" * len(parts))
            allowed = {
                r[0]
                for r in c.execute(
                    f"SELECT id FROM facts WHERE partition IN ({marks}) AND invalid_at IS NULL{fsql}",
                    [*parts, *fargs],
                )
            }
        return _VectorScan(indexes, allowed, limit, flt)

    async def missing_embeddings(
        self, *, limit: int = 256, fact_ids: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """Valid facts stored without a vector: ``[(fact_id, text to embed)]``, oldest first;
        only among ``fact_ids`` when given. A document's text is its opening
        (``DOCUMENT_THRESHOLD_CHARS``): its vector only marks it embedded, its fragments are searched."""
        text = f"CASE WHEN kind = 'document' THEN substr(content, 1, {DOCUMENT_THRESHOLD_CHARS}) ELSE content END"
        where = "embedding IS NULL AND invalid_at IS NULL"  # the WHERE of index facts_unembedded (0006)

        def op(c: sqlite3.Connection) -> list[tuple[str, str]]:
            if fact_ids is None:
                sql = f"SELECT id, {text} FROM facts WHERE {where} ORDER BY rowid LIMIT ?"
                return [(r[0], r[1]) for r in c.execute(sql, (limit,))]
            ids = list(dict.fromkeys(fact_ids))
            out: list[tuple[int, str, str]] = []
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                sql = f"SELECT rowid, id, {text} FROM facts WHERE id IN ({','.join('?' * len(chunk))}) AND {where}"
                out += c.execute(sql, chunk).fetchall()
            return [(r[1], r[2]) for r in sorted(out)[:limit]]

        return await self._db.run(op)

    async def set_embeddings(
        self, fact_ids: Sequence[str], vectors: Vector, *, windows: Sequence[Vector | None] | None = None
    ) -> None:
        """Attach vectors to existing facts (backfill after an embedder failure), with
        ``windows``: per fact, its further windows' vectors (they replace the fact's earlier ones)."""
        await self._ready()
        self._check_vectors(vectors, len(fact_ids))
        self._check_windows(windows, len(fact_ids))

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                # A first vector is an append for the vector caches: the row records the
                # partition's next `embedded` value and caches load just those rows. Replacing
                # a vector is a change (caches reload the partition).
                changed: set[str] = set()
                seqs: dict[str, int] = {}
                for i, (fid, vec) in enumerate(zip(fact_ids, vectors, strict=True)):
                    row = c.execute("SELECT partition, embedding IS NOT NULL FROM facts WHERE id=?", (fid,)).fetchone()
                    if row is None:
                        continue
                    part, had = row
                    win = windows[i] if windows is not None else None
                    _run(c, run_all(write_windows(_D, [(fid, part, win)], replace=True)))
                    blob = vec.astype(np.float32).tobytes()
                    if had:
                        c.execute("UPDATE facts SET embedding=? WHERE id=?", (blob, fid))
                        changed.add(part)
                        continue
                    if part not in seqs:
                        now = c.execute("SELECT embedded FROM partitions WHERE partition=?", (part,)).fetchone()
                        seqs[part] = (now[0] if now else 0) + 1
                    c.execute("UPDATE facts SET embedding=?, embed_seq=? WHERE id=?", (blob, seqs[part], fid))
                for part in seqs:
                    c.execute("UPDATE partitions SET embedded = ? WHERE partition=?", (seqs[part], part))
                for part in changed:
                    c.execute("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (part,))

        await self._db.run(op)

    @property
    def _access_key(self) -> Hashable:
        """The file (a private in-memory database: this database object)."""
        if self._db.path == ":memory:":
            return ("sqlite", id(self._db))
        key = self.__dict__.get("_access_key_cached")
        if key is None:  # resolved once: realpath is a system call per path part, per search
            key = self.__dict__["_access_key_cached"] = ("sqlite", os.path.realpath(self._db.path))
        return key

    async def _write_access(self, counts: dict[str, int], done: Callable[[Iterable[str]], None]) -> None:
        """Every pending increment in one write transaction (one ``UPDATE`` per distinct increment)."""
        if self._db.readonly:  # a read-only database serves searches uncounted
            return
        by_n: dict[int, list[str]] = {}
        for fid, n in counts.items():
            by_n.setdefault(n, []).append(fid)

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                for n, ids in by_n.items():
                    for i in range(0, len(ids), _D.chunk):
                        chunk = ids[i : i + _D.chunk]
                        marks = ",".join("?" * len(chunk))
                        sql = f"UPDATE facts SET access_count = access_count + ? WHERE id IN ({marks})"
                        c.execute(sql, (n, *chunk))

        await self._db.run(op)
        done(counts)

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's facts (with history), reflections and blobs, and references to the shared
        memories formed from their words (see :mod:`memlane.stores.sqlite.export`)."""
        await self.settle_access()
        out = await self._db.run(lambda c: export_.facts_part(c, user_id))
        out["proposals"] = await self._query(export_proposals(self._d, user_id))
        out["consolidated_versions"] = await self._query(export_versions(self._d, user_id))
        return out

    async def close(self) -> None:
        await self._close_access()
        if self._vectors is not None:  # before the connections go: the builder reads the database
            await asyncio.to_thread(self._vectors.close)
        if self._sidecars is not None:
            await asyncio.to_thread(self._sidecars.close)
        with self._cache_lock:
            self._cache.clear()
        await self._db.release()


class _VectorScan:
    """Loaded vector indexes of one search and its filter: :meth:`score` ranks a query vector."""

    def __init__(
        self, indexes: list[_CachedIndex], allowed: set[str] | None, limit: int, flt: FactFilter | None
    ) -> None:
        self.indexes, self.allowed, self.limit, self.flt = indexes, allowed, limit, flt

    @property
    def small(self) -> bool:
        """Few enough vectors to score on the SQL thread (:data:`INLINE_SCAN_MAX`)."""
        return bool(self.indexes) and sum(len(ix.index) for ix in self.indexes) <= INLINE_SCAN_MAX

    def score(self, q: Any) -> list[Candidate]:
        if not self.indexes:
            return []
        flt, limit = self.flt, self.limit
        found: list[Candidate] = []
        with limit_blas_threads(default_blas_threads()):  # the matrix products, on a busy machine
            for cached in self.indexes:
                with cached.lock:
                    hits = cached.index.search_keys(
                        q,
                        limit,
                        session_id=flt.session_id if flt else None,
                        kind=flt.kind if flt else None,
                        allowed=self.allowed,
                    )
                    found.extend(Candidate(key, score) for key, score in hits)
        found.sort(key=lambda x: -x.score)
        return found[:limit]


class _SyncReads:
    """:class:`memlane.stores.base.SyncSearchReads` over one SQL-thread connection."""

    def __init__(self, store: SqliteFactStore, c: sqlite3.Connection) -> None:
        self.store, self.c = store, c

    def authors(self, partitions: PartitionFilter) -> list[str]:
        known = self.store._cached_authors(partitions)
        if known is not None:
            return known
        found = _run(self.c, reads.authors_in(_D, self.store._partitions(self.c, partitions)))
        self.store._remember_authors(partitions, found)
        return found

    def keyword_search(
        self, partitions: PartitionFilter, terms: Sequence[str], *, limit: int, filter: FactFilter | None = None
    ) -> list[Candidate]:
        return self.store._keyword_sync(self.c, partitions, terms, limit=limit, filter=filter)

    def vector_scorer(
        self, partitions: PartitionFilter, *, limit: int, filter: FactFilter | None = None
    ) -> Callable[[Vector], list[Candidate]] | None:
        store = self.store
        if store.dim is None:
            return lambda _v: []
        flt = filter if filter is not None and not filter.empty else None
        scan = store._vector_scan(self.c, partitions, limit, flt)
        if scan.indexes and not scan.small:
            return None  # a large scope: scored off the SQL thread (vector_search)
        return lambda v: scan.score(store._query_vector(v))

    def get_facts(self, fact_ids: Sequence[str], scope: Scope) -> dict[str, Fact]:
        if not fact_ids:
            return {}
        parts = self.store._partitions(self.c, scope.partition_filter())
        return _run(self.c, reads.get_facts_in(_D, fact_ids, parts))
