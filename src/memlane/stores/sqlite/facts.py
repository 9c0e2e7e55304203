"""Long-term memory on SQLite: facts (FTS5 keyword index + per-partition vector cache),
history, reflections and consolidated blobs, all in one WAL database file."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memlane.documents import DOCUMENT_THRESHOLD_CHARS
from memlane.errors import (
    ConflictError,
    DimensionMismatchError,
    InvalidInputError,
    NotFoundError,
    ScopeError,
)
from memlane.models import (
    ConsolidatedMemory,
    Fact,
    FactScope,
    HistoryEntry,
    Page,
    Reflection,
    Scope,
    content_hash,
    new_id,
    utcnow,
)
from memlane.providers._blas import default_blas_threads, limit_blas_threads
from memlane.retrieval.context import CONTEXT_RADIUS, neighbour_context
from memlane.retrieval.text import date_words, keyword_text
from memlane.stores.base import (
    AppliedChange,
    Candidate,
    FactChange,
    FactFilter,
    PartitionFilter,
    ReflectionKey,
    StoreStats,
    Vector,
)
from memlane.stores.embedding import check_binding, check_vectors
from memlane.stores.sql import facts as core
from memlane.stores.sql import reads
from memlane.stores.sql.dialect import FACT_COLS as _FACT_COLS
from memlane.stores.sql.stmt import Program, Row, run_all
from memlane.stores.sqlite import export as export_
from memlane.stores.sqlite.db import BUSY_TIMEOUT_MS, Database
from memlane.stores.sqlite.dialect import DIALECT as _D
from memlane.stores.sqlite.dialect import _dt
from memlane.stores.sqlite.dialect import filter_sql as _filter_sql
from memlane.stores.sqlite.dialect import iso as _iso
from memlane.stores.sqlite.dialect import row_to_fact as _row_to_fact
from memlane.stores.sqlite.dialect import run as _run
from memlane.stores.sqlite.fts import partition_token
from memlane.stores.sqlite.keyword import KeywordIndex
from memlane.stores.sqlite.vector import VectorIndex
from memlane.stores.sqlite.vector_cache import CachedIndex as _CachedIndex
from memlane.stores.sqlite.vector_cache import VectorCaches, prewarm_usearch

log = logging.getLogger("memlane")

#: How long the WAL truncation after a purge waits for other connections' readers.
CHECKPOINT_WAIT_MS = 5_000


def _digest(parts: list[Any]) -> str:
    """A short stable token of JSON-able ``parts`` (for memory stamps)."""
    return hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=12).hexdigest()


def _partition_keys(facts: Sequence[Fact]) -> list[str]:
    """Each fact's partition (which validates its scope fields), computed once per distinct scope."""
    seen: dict[tuple[str, str | None, str | None, str | None], str] = {}
    out = []
    for f in facts:
        key = (f.scope, f.agent_id, f.user_id, f.session_id if f.scope == "room" else None)
        part = seen.get(key)
        if part is None:
            part = seen[key] = f.partition
        out.append(part)
    return out


class SqliteFactStore:
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
            BLOBs (see :mod:`memlane.stores.sqlite.vector_cache`); None: never.
    """

    def __init__(
        self,
        db: Database | str | os.PathLike[str],
        *,
        ctx_weight: float = 0.5,
        date_weight: float = 1.0,
        exact_max: int = 20_000,
        ann_min: int | None = None,
        sidecar_min: int | None = 20_000,
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

    def _check_vectors(self, vectors: Vector | None, n: int) -> None:
        check_vectors(vectors, n, self.dim)

    # ------------------------------------------------------------------ writes
    async def put_facts(
        self, facts: Sequence[Fact], vectors: Vector | None, *, actor: str = "api"
    ) -> list[tuple[Fact, bool]]:
        await self._ready()
        self._check_vectors(vectors, len(facts))
        _partition_keys(facts)  # validates scope fields
        return await self._db.run(lambda c: self._put_facts(c, list(facts), vectors, actor))

    async def put_fact_groups(
        self, groups: Sequence[Sequence[Fact]], vectors: Vector | None, *, actor: str = "api"
    ) -> list[list[tuple[Fact, bool]]]:
        """``put_facts`` of several groups (``add_many``: one per session) in one transaction;
        the stored rows, seqs, context, history and counters are those of one ``put_facts``
        call per group. ``vectors``: one row per fact of all groups, in order."""
        flat = [f for g in groups for f in g]
        await self._ready()
        self._check_vectors(vectors, len(flat))
        _partition_keys(flat)  # validates scope fields
        sizes = [len(g) for g in groups]
        pairs = await self._db.run(lambda c: self._put_facts(c, flat, vectors, actor, sizes))
        out, start = [], 0
        for size in sizes:
            out.append(pairs[start : start + size])
            start += size
        return out

    def _put_facts(
        self,
        c: sqlite3.Connection,
        facts: list[Fact],
        vectors: Vector | None,
        actor: str,
        groups: Sequence[int] | None = None,
    ) -> list[tuple[Fact, bool]]:
        with self._db.write(c):
            return self._insert_facts(c, facts, vectors, actor, groups)

    def _insert_facts(
        self,
        c: sqlite3.Connection,
        facts: list[Fact],
        vectors: Vector | None,
        actor: str,
        groups: Sequence[int] | None = None,
    ) -> list[tuple[Fact, bool]]:
        """Insert inside the caller's transaction, in bulk: one de-dup query and one next-seq
        query per partition, seqs counted here, ``executemany`` inserts, and each new turn's
        neighbour context (``ctx``) computed before its keyword row is written (only turns
        already stored beside new ones are rewritten). The rows, seqs, context and history are
        the same as inserting the facts one by one.

        ``groups``: sizes of consecutive runs of ``facts`` that each count as one append of the
        partitions they add rows to (``add_many``: one per session, as one ``add`` per session
        would); default: the whole call is one.
        """
        now = utcnow()
        parts = _partition_keys(facts)
        hashes = [f.hash or content_hash(f.content) for f in facts]
        found: dict[tuple[str, str], Fact] = {}  # valid stored rows with an incoming (partition, hash)
        sessions: dict[str, set[str]] = {part: set() for part in dict.fromkeys(parts)}
        for f, part in zip(facts, parts, strict=True):
            if f.session_id:
                sessions[part].add(f.session_id)
        stored_max: dict[tuple[str, str], int | None] = {}  # (partition, session) -> highest stored seq
        for part, sids in sessions.items():
            want = list(dict.fromkeys(h for p, h in zip(parts, hashes, strict=True) if p == part))
            for k in range(0, len(want), 500):
                chunk = want[k : k + 500]
                rows = c.execute(
                    f"SELECT {_FACT_COLS} FROM facts WHERE partition=? AND hash IN ({','.join('?' * len(chunk))})"
                    " AND invalid_at IS NULL",
                    (part, *chunk),
                ).fetchall()
                found.update(((part, r[4]), _row_to_fact(r)) for r in rows)
            ids = sorted(sids)
            for k in range(0, len(ids), 500):
                chunk = ids[k : k + 500]
                stored_max.update(
                    ((part, sid), top)
                    for sid, top in c.execute(
                        "SELECT session_id, MAX(seq) FROM facts WHERE partition=? AND session_id IN"
                        f" ({','.join('?' * len(chunk))}) GROUP BY session_id",
                        (part, *chunk),
                    )
                )
        next_seq = {key: 0 if top is None else top + 1 for key, top in stored_max.items()}
        rowid = c.execute("SELECT COALESCE(MAX(rowid), 0) FROM facts").fetchone()[0]
        out: list[tuple[Fact, bool]] = []
        new: list[tuple[int, int, Fact]] = []  # (input index, rowid, stored fact)
        for i, f in enumerate(facts):
            part, h = parts[i], hashes[i]
            hit = found.get((part, h))
            if hit is not None:
                out.append((hit, False))
                continue
            seq = f.seq
            if f.session_id:
                key = (part, f.session_id)
                if seq is None and f.kind == "message":
                    seq = next_seq.get(key, 0)
                if seq is not None:
                    next_seq[key] = max(next_seq.get(key, 0), seq + 1)
            stored = f.model_copy(update={"hash": h, "seq": seq, "embedding": None})
            rowid += 1
            new.append((i, rowid, stored))
            if stored.invalid_at is None:  # a later identical fact of this call finds this one
                found[(part, h)] = stored
            out.append((stored, True))
        ctx = self._new_context(c, [(parts[i], r, f) for i, r, f in new], stored_max)
        tokens = {part: partition_token(part) for part in dict.fromkeys(parts)}
        dates = {when: date_words(when) for when in dict.fromkeys(s.occurred_at for _, _, s in new)}
        c.executemany(
            "INSERT INTO facts (rowid, id, partition, content, hash, scope, agent_id, user_id, session_id,"
            " kind, author, seq, occurred_at, formed_at, updated_at, access_count, version,"
            " source_event_ids, valid_from, invalid_at, metadata, embedding)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    r, s.id, parts[i], s.content, s.hash, s.scope, s.agent_id, s.user_id, s.session_id, s.kind,
                    s.author, s.seq, _iso(s.occurred_at), _iso(s.formed_at), _iso(s.updated_at), s.access_count,
                    s.version, json.dumps(s.source_event_ids) if s.source_event_ids else "[]", _iso(s.valid_from),
                    _iso(s.invalid_at),
                    json.dumps(s.metadata),
                    vectors[i].astype(np.float32).tobytes() if vectors is not None else None,
                )
                for i, r, s in new
            ],
        )  # fmt: skip
        c.executemany(
            "INSERT INTO facts_fts (rowid, part, author, text, ctx, date) VALUES (?,?,?,?,?,?)",
            [
                (
                    r,
                    tokens[parts[i]],
                    (s.author or "").lower(),
                    "" if s.kind == "document" else keyword_text(s.content),  # its fragments are searched
                    ctx.get(r, ""),
                    dates[s.occurred_at],
                )
                for i, r, s in new
            ],
        )
        new_parts = list(dict.fromkeys(parts[i] for i, _, _ in new))
        c.executemany(
            "INSERT OR IGNORE INTO partitions (partition, token) VALUES (?, ?)",
            [(part, tokens[part]) for part in new_parts],
        )
        c.executemany(
            "INSERT OR IGNORE INTO authors VALUES (?, ?)",
            list(dict.fromkeys((parts[i], s.author) for i, _, s in new if s.author)),
        )
        at = now.isoformat()
        c.executemany(
            "INSERT INTO history VALUES (?,?,?,?,?,?,?,?)",
            [(new_id(), s.id, s.user_id, "ADD", None, s.content, actor, at) for _, _, s in new],
        )
        appends: dict[str, int] = {}  # one append per group per partition it added rows to
        bounds = list(groups) if groups is not None else [len(facts)]
        start = 0
        created = [False] * len(facts)
        for i, _, _ in new:
            created[i] = True
        for size in bounds:
            for part in dict.fromkeys(parts[j] for j in range(start, start + size) if created[j]):
                appends[part] = appends.get(part, 0) + 1
            start += size
        c.executemany(
            "UPDATE partitions SET appends = appends + ? WHERE partition=?", [(n, p) for p, n in appends.items()]
        )
        return out

    def _new_context(
        self, c: sqlite3.Connection, new: list[tuple[str, int, Fact]], stored_max: dict[tuple[str, str], int | None]
    ) -> dict[int, str]:
        """The ``ctx`` text of new rows ``(partition, rowid, fact)`` by rowid, computed before
        they are written; turns already stored within :data:`CONTEXT_RADIUS` of new ones get
        theirs rewritten here (a session seen for the first time needs no read at all)."""
        by_session: dict[tuple[str, str], list[tuple[int, int, str]]] = {}  # -> [(seq, rowid, text)]
        for part, rowid, f in new:
            if f.seq is not None and f.session_id and f.invalid_at is None:
                by_session.setdefault((part, f.session_id), []).append((f.seq, rowid, f.content))
        out: dict[int, str] = {}
        for (part, session_id), turns in by_session.items():
            lo, hi = min(t[0] for t in turns), max(t[0] for t in turns)
            by_seq = {seq: text for seq, _, text in turns}
            stored: list[tuple[int, int]] = []  # (rowid, seq) of stored turns whose context changes
            top = stored_max.get((part, session_id))
            if top is not None and top >= lo - CONTEXT_RADIUS:
                rows = c.execute(
                    "SELECT rowid, seq, content FROM facts WHERE partition=? AND session_id=? AND seq BETWEEN ? AND ?"
                    " AND invalid_at IS NULL ORDER BY seq",
                    (part, session_id, lo - 2 * CONTEXT_RADIUS, hi + 2 * CONTEXT_RADIUS),
                ).fetchall()
                by_seq = {r[1]: r[2] for r in rows} | by_seq
                stored = [(r[0], r[1]) for r in rows if lo - CONTEXT_RADIUS <= r[1] <= hi + CONTEXT_RADIUS]
            for seq, rowid, _ in turns:
                out[rowid] = keyword_text(neighbour_context(by_seq, seq))
            c.executemany(
                "UPDATE facts_fts SET ctx=? WHERE rowid=?",
                [(keyword_text(neighbour_context(by_seq, seq)), rowid) for rowid, seq in stored],
            )
        return out

    def _partitions(self, c: sqlite3.Connection, pf: PartitionFilter) -> list[str]:
        return _run(c, core.partitions(_D, pf))

    def _visible_row(self, c: sqlite3.Connection, fact_id: str, scope: Scope) -> Row:
        return _run(c, core.visible_row(_D, fact_id, scope))

    async def update_fact(
        self, fact_id: str, scope: Scope, content: str, vector: Vector | None, *, actor: str = "api"
    ) -> Fact:
        if vector is not None:
            self._check_vectors(vector.reshape(1, -1), 1)

        def op(c: sqlite3.Connection) -> Fact:
            with self._db.write(c):
                return _run(c, core.update_fact(_D, fact_id, scope, content, vector, actor))

        return await self._db.run(op)

    async def invalidate_fact(self, fact_id: str, scope: Scope, *, actor: str = "api") -> Fact:
        return (await self.invalidate_facts([fact_id], scope, actor=actor))[0]

    async def invalidate_facts(self, fact_ids: Sequence[str], scope: Scope, *, actor: str = "api") -> list[Fact]:
        ids = list(dict.fromkeys(fact_ids))

        def op(c: sqlite3.Connection) -> list[Fact]:
            with self._db.write(c):
                return _run(c, core.invalidate_facts(_D, ids, scope, actor))

        return await self._db.run(op)

    async def apply_changes(
        self,
        changes: Sequence[FactChange],
        reflections: Sequence[Reflection] = (),
        *,
        key: str,
        actor: str = "formation",
    ) -> list[AppliedChange]:
        await self._ready()
        for ch in changes:
            if ch.fact is not None:
                _ = ch.fact.partition
            if ch.vector is not None:
                self._check_vectors(ch.vector.reshape(1, -1), 1)

        def op(c: sqlite3.Connection) -> list[AppliedChange]:
            def insert(fact: Fact, vector: Vector | None) -> Program[Fact]:
                vectors = vector.reshape(1, -1) if vector is not None else None
                return self._insert_facts(c, [fact], vectors, actor)[0][0]
                yield  # a program that writes on this thread's connection itself

            with self._db.write(c):
                return _run(c, core.apply_changes(_D, changes, reflections, key=key, actor=actor, insert=insert))

        return await self._db.run(op)

    async def purge_user(self, user_id: str, *, shared: str = "erase") -> int:
        """Hard delete everything of ``user_id`` and leave none of their text in the file.

        ``shared="erase"`` (the default) also erases the agent-scope memories formed from the
        user's words: agent facts they contributed (or changed), agent reflections formed from
        their conversations, and each consolidated agent blob those reflections went into. Such
        a blob is dropped and its remaining reflections become unabsorbed again, so the next
        consolidation rebuilds it without the user. ``shared="keep"`` keeps those agent memories
        for the agent's other users and only removes their link to the user.

        Afterwards the keyword index is merged (FTS5 keeps deleted terms in its segments until
        a merge) and the WAL is checkpointed and truncated; deleted content is overwritten with
        zeros (``secure_delete``): the words leave the file, not only the query results.
        """
        if not user_id or not user_id.strip():
            raise ScopeError("purge_user needs a non-empty user_id")
        if shared not in ("erase", "keep"):
            raise InvalidInputError(f"shared must be 'erase' or 'keep', got {shared!r}")
        erase = shared == "erase"

        def mine(kind: str) -> str:
            return f"SELECT item_id FROM contributors WHERE user_id=? AND kind='{kind}'"

        def delete_ids(c: sqlite3.Connection, sql: str, ids: Sequence[Any]) -> int:
            return sum(c.execute(sql, (i,)).rowcount for i in ids)

        def op(c: sqlite3.Connection) -> int:
            removed = 0  # every connection zeroes deleted content (secure_delete, see db.py)
            with self._db.write(c):
                if not erase:  # the agent keeps what the user told it, unlinked from the user
                    c.execute(
                        "UPDATE history SET user_id=NULL WHERE user_id=? AND fact_id IN"
                        " (SELECT id FROM facts WHERE user_id=? AND scope IN ('agent', 'room'))",
                        (user_id, user_id),
                    )
                    c.execute(
                        "UPDATE facts SET user_id=NULL WHERE user_id=? AND scope IN ('agent', 'room')", (user_id,)
                    )
                where = "user_id=?" + (f" OR id IN ({mine('fact')})" if erase else "")
                args = (user_id, user_id) if erase else (user_id,)
                victims = c.execute(
                    f"SELECT rowid, id, partition, session_id, seq FROM facts WHERE {where}", args
                ).fetchall()
                for rowid, *_ in victims:
                    c.execute("DELETE FROM facts_fts WHERE rowid=?", (rowid,))
                removed += delete_ids(c, "DELETE FROM facts WHERE rowid=?", [v[0] for v in victims])
                removed += delete_ids(c, "DELETE FROM history WHERE fact_id=?", [v[1] for v in victims])
                removed += c.execute("DELETE FROM history WHERE user_id=?", (user_id,)).rowcount
                delete_ids(c, "DELETE FROM contributors WHERE kind='fact' AND item_id=?", [v[1] for v in victims])
                if erase:
                    refl = [r[0] for r in c.execute(mine("reflection"), (user_id,))]
                    removed += delete_ids(c, "DELETE FROM reflections WHERE id=?", refl)
                    delete_ids(c, "DELETE FROM contributors WHERE kind='reflection' AND item_id=?", refl)
                    for (blob_id,) in c.execute(mine("blob"), (user_id,)).fetchall():
                        removed += self._drop_blob(c, blob_id)
                removed += c.execute("DELETE FROM reflections WHERE user_id=?", (user_id,)).rowcount
                removed += c.execute("DELETE FROM consolidated WHERE user_id=?", (user_id,)).rowcount
                c.execute("DELETE FROM contributors WHERE user_id=?", (user_id,))
                removed += c.execute("DELETE FROM applied_batches WHERE user_id=?", (user_id,)).rowcount
                sessions: dict[tuple[str, str], list[int | None]] = {}
                for _, _, part, session_id, seq in victims:
                    if session_id and seq is not None:
                        sessions.setdefault((part, session_id), []).append(seq)
                for (part, session_id), seqs in sessions.items():
                    _run(c, core.refresh_context(_D, part, session_id, seqs))
                parts = sorted({v[2] for v in victims})
                for part in parts:
                    left = c.execute("SELECT 1 FROM facts WHERE partition=? LIMIT 1", (part,)).fetchone()
                    if left is None:
                        c.execute("DELETE FROM partitions WHERE partition=?", (part,))
                        c.execute("DELETE FROM authors WHERE partition=?", (part,))
                    else:
                        c.execute("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (part,))
                        c.execute(
                            "DELETE FROM authors WHERE partition=? AND author NOT IN"
                            " (SELECT author FROM facts WHERE partition=? AND author IS NOT NULL)",
                            (part, part),
                        )
                c.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'")
            with self._cache_lock:
                for part in parts:
                    self._cache.pop(part, None)
                    self.vector_caches.drop(part)  # no vector of the user stays in a sidecar
            self._scrub(c)
            return removed

        return await self._db.run(op)

    @staticmethod
    def _drop_blob(c: sqlite3.Connection, blob_id: str) -> int:
        """Delete a consolidated blob and mark its scope's remaining reflections unabsorbed, so
        the next consolidation rebuilds the blob from them."""
        row = c.execute(
            "SELECT scope, agent_id, user_id, session_id FROM consolidated WHERE id=?", (blob_id,)
        ).fetchone()
        c.execute("DELETE FROM contributors WHERE kind='blob' AND item_id=?", (blob_id,))
        if row is None:
            return 0
        scope, agent_id, user_id, session_id = (row[0], *(v or None for v in row[1:]))
        where, args = "scope=? AND agent_id IS ? AND user_id IS ?", [scope, agent_id, user_id]
        if scope == "session":
            where, args = where + " AND session_id IS ?", [*args, session_id]
        c.execute(f"UPDATE reflections SET absorbed=0 WHERE {where}", args)
        return int(c.execute("DELETE FROM consolidated WHERE id=?", (blob_id,)).rowcount)

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

    # ------------------------------------------------------------------ reads
    async def get_fact(self, fact_id: str, scope: Scope) -> Fact | None:
        def op(c: sqlite3.Connection) -> Fact | None:
            try:
                return _row_to_fact(self._visible_row(c, fact_id, scope), with_embedding=True)
            except NotFoundError:
                return None

        return await self._db.run(op)

    async def get_facts(self, fact_ids: Sequence[str], scope: Scope) -> dict[str, Fact]:
        if not fact_ids:
            return {}
        return await self._db.run(lambda c: _run(c, reads.get_facts(_D, fact_ids, scope)))

    async def list_facts(
        self,
        scope: Scope,
        *,
        limit: int = 50,
        cursor: str | None = None,
        include_invalid: bool = False,
        filter: FactFilter | None = None,
        only: FactScope | None = None,
    ) -> Page:
        program = reads.list_facts(
            _D, scope, limit=limit, cursor=cursor, include_invalid=include_invalid, filter=filter, only=only
        )
        return await self._db.run(lambda c: _run(c, program))

    async def history(self, fact_id: str, scope: Scope) -> list[HistoryEntry]:
        return await self._db.run(lambda c: _run(c, reads.history(_D, fact_id, scope)))

    async def authors(self, partitions: PartitionFilter) -> list[str]:
        return await self._db.run(lambda c: _run(c, reads.authors(_D, partitions)))

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
        ki = self._keyword
        ki.weights = self._bm25_weights()  # ctx_weight / date_weight may be tuned between searches
        fsql, fargs = _filter_sql(filter, "f")

        def op(c: sqlite3.Connection) -> list[tuple[str, float, str | None]]:
            parts = self._partitions(c, partitions)
            return ki.search(c, parts, terms, limit=limit, fsql=fsql, fargs=fargs) if parts else []

        rows = await self._db.run(op)
        return [Candidate(fid, score, author) for fid, score, author in rows]

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
                cols = "rowid, id, session_id, embedding, kind"
                valid = "invalid_at IS NULL AND embedding IS NOT NULL AND kind <> 'document'"
                rows = []
                if cached.embedded >= 0 and cached.embedded != embedded and cached.max_rowid:
                    # vectors backfilled into rows the cache already passed (set_embeddings)
                    rows = c.execute(
                        f"SELECT {cols} FROM facts WHERE partition=? AND embed_seq>? AND rowid<=? AND {valid}"
                        " ORDER BY rowid",
                        (part, cached.embedded, cached.max_rowid),
                    ).fetchall()
                new = c.execute(
                    f"SELECT {cols} FROM facts WHERE partition=? AND rowid>? AND {valid} ORDER BY rowid",
                    (part, cached.max_rowid),
                ).fetchall()
                rows += new
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
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"query vector has dimension {q.shape[0]}, the store holds {self.dim}",
                expected=self.dim,
                got=int(q.shape[0]),
            )
        flt = filter if filter is not None and not filter.empty else None
        # Author and metadata conditions are resolved in SQL to the allowed ids.
        narrow = flt is not None and (flt.author is not None or bool(flt.metadata))

        def load(c: sqlite3.Connection) -> tuple[list[_CachedIndex], set[str] | None]:
            parts = self._partitions(c, partitions)
            indexes = [ix for ix in (self._index_for(c, p) for p in parts) if ix is not None and len(ix.index)]
            allowed: set[str] | None = None
            if narrow and parts:
                fsql, fargs = _filter_sql(flt, "facts")
                marks = ",".join("?" * len(parts))
                allowed = {
                    r[0]
                    for r in c.execute(
                        f"SELECT id FROM facts WHERE partition IN ({marks}) AND invalid_at IS NULL{fsql}",
                        [*parts, *fargs],
                    )
                }
            return indexes, allowed

        indexes, allowed = await self._db.run(load)
        if not indexes:
            return []

        def search() -> list[Candidate]:
            with limit_blas_threads(default_blas_threads()):  # the matrix products, on a busy machine
                return scan()

        def scan() -> list[Candidate]:
            found: list[Candidate] = []
            for cached in indexes:
                with cached.lock:
                    index = cached.index
                    rows, scores = index.search(
                        q, limit, session_id=flt.session_id if flt else None, kind=flt.kind if flt else None,
                        allowed=allowed,
                    )  # fmt: skip
                    found.extend(Candidate(index.key(int(i)), float(s)) for i, s in zip(rows, scores, strict=True))
            found.sort(key=lambda x: -x.score)
            return found[:limit]

        # Off the event loop and off the SQL threads, so searches don't queue behind writes (numpy
        # releases the GIL in the products, so no hand-off delay is needed as for Python work).
        return await asyncio.to_thread(search)

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

    async def set_embeddings(self, fact_ids: Sequence[str], vectors: Vector) -> None:
        """Attach vectors to existing facts (backfill after an embedder failure)."""
        await self._ready()
        self._check_vectors(vectors, len(fact_ids))

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                # A first vector is an append for the vector caches: the row records the
                # partition's next `embedded` value and caches load just those rows. Replacing
                # a vector is a change (caches reload the partition).
                changed: set[str] = set()
                seqs: dict[str, int] = {}
                for fid, vec in zip(fact_ids, vectors, strict=True):
                    row = c.execute("SELECT partition, embedding IS NOT NULL FROM facts WHERE id=?", (fid,)).fetchone()
                    if row is None:
                        continue
                    part, had = row
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

    async def record_access(self, fact_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(fact_ids))
        if not ids or self._db.readonly:  # a read-only database serves searches uncounted
            return

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                marks = ",".join("?" * len(ids))
                c.execute(f"UPDATE facts SET access_count = access_count + 1 WHERE id IN ({marks})", ids)

        await self._db.run(op)

    async def memory_stamp(self, partitions: PartitionFilter) -> str:
        return await self._db.run(lambda c: _run(c, reads.memory_stamp(_D, partitions)))

    # ------------------------------------------------------------------ reflections
    async def reflection_stamp(self, keys: Sequence[ReflectionKey]) -> str:
        def op(c: sqlite3.Connection) -> str:
            parts: list[Any] = [c.execute("SELECT value FROM meta WHERE key='generation'").fetchone()]
            for k in keys:
                where, args = "scope=? AND agent_id IS ? AND user_id IS ?", [k.scope, k.agent_id, k.user_id]
                if k.scope == "session":
                    where += " AND session_id IS ?"
                    args.append(k.session_id)
                parts.append(
                    c.execute(
                        "SELECT COUNT(*), TOTAL(absorbed), MAX(formed_at), TOTAL(LENGTH(content)) FROM reflections"
                        f" WHERE {where}",
                        args,
                    ).fetchone()
                )
                parts.append(
                    c.execute(
                        "SELECT version, last_consolidated_at FROM consolidated"
                        " WHERE scope=? AND agent_id=? AND user_id=? AND session_id=?",
                        (k.scope, k.agent_id or "", k.user_id or "", k.session_id or ""),
                    ).fetchone()
                )
            return _digest([list(p) if p is not None else None for p in parts])

        return await self._db.run(op)

    async def put_reflection(self, reflection: Reflection) -> Reflection:
        r = reflection

        def op(c: sqlite3.Connection) -> Reflection:
            with self._db.write(c):
                self._insert_reflection(c, r)
            return r

        return await self._db.run(op)

    @staticmethod
    def _insert_reflection(c: sqlite3.Connection, r: Reflection) -> None:
        _run(c, run_all(core.insert_reflection(_D, r)))

    async def list_reflections(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        absorbed: bool | None = None,
    ) -> list[Reflection]:
        where = "scope=? AND agent_id IS ? AND user_id IS ? AND session_id IS ?"
        args: list[Any] = [scope, agent_id, user_id, session_id]
        if scope != "session":  # user/agent buffers gather reflections of every session
            where = "scope=? AND agent_id IS ? AND user_id IS ?"
            args = [scope, agent_id, user_id]
        if absorbed is not None:
            where += " AND absorbed=?"
            args.append(int(absorbed))

        def op(c: sqlite3.Connection) -> list[Reflection]:
            rows = c.execute(
                "SELECT id, content, scope, agent_id, user_id, session_id, absorbed, formed_at"
                f" FROM reflections WHERE {where} ORDER BY formed_at, rowid",
                args,
            ).fetchall()
            return [
                Reflection(
                    id=r[0], content=r[1], scope=r[2], agent_id=r[3], user_id=r[4], session_id=r[5],
                    absorbed=bool(r[6]), formed_at=datetime.fromisoformat(r[7]),
                )
                for r in rows
            ]  # fmt: skip

        return await self._db.run(op)

    async def get_consolidated(
        self,
        *,
        scope: str,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> ConsolidatedMemory | None:
        key = (scope, agent_id or "", user_id or "", session_id or "")

        def op(c: sqlite3.Connection) -> ConsolidatedMemory | None:
            r = c.execute(
                "SELECT id, scope, agent_id, user_id, session_id, consolidated_content, word_limit, version,"
                " unabsorbed_ids, last_consolidated_at FROM consolidated"
                " WHERE scope=? AND agent_id=? AND user_id=? AND session_id=?",
                key,
            ).fetchone()
            if r is None:
                return None
            return ConsolidatedMemory(
                id=r[0], scope=r[1], agent_id=r[2] or None, user_id=r[3] or None, session_id=r[4] or None,
                consolidated_content=r[5], word_limit=r[6], version=r[7],
                unabsorbed_ids=json.loads(r[8]), last_consolidated_at=_dt(r[9]),
            )  # fmt: skip

        return await self._db.run(op)

    async def put_consolidated(
        self, blob: ConsolidatedMemory, absorbed_ids: Sequence[str] = (), *, expected_version: int | None = None
    ) -> ConsolidatedMemory:
        b = blob
        ids = list(absorbed_ids)

        def op(c: sqlite3.Connection) -> ConsolidatedMemory:
            with self._db.write(c):
                if expected_version is not None:
                    row = c.execute(
                        "SELECT version FROM consolidated WHERE scope=? AND agent_id=? AND user_id=? AND session_id=?",
                        (b.scope, b.agent_id or "", b.user_id or "", b.session_id or ""),
                    ).fetchone()
                    current = row[0] if row else 0
                    if current != expected_version:
                        raise ConflictError(
                            f"the {b.scope} blob is at version {current}, expected {expected_version}: "
                            "another consolidation ran first; retry"
                        )
                c.execute(
                    "INSERT INTO consolidated VALUES (?,?,?,?,?,?,?,?,?,?)"
                    " ON CONFLICT (scope, agent_id, user_id, session_id) DO UPDATE SET"
                    " consolidated_content=excluded.consolidated_content, word_limit=excluded.word_limit,"
                    " version=excluded.version, unabsorbed_ids=excluded.unabsorbed_ids,"
                    " last_consolidated_at=excluded.last_consolidated_at",
                    (
                        b.id, b.scope, b.agent_id or "", b.user_id or "", b.session_id or "",
                        b.consolidated_content, b.word_limit, b.version, json.dumps(b.unabsorbed_ids),
                        _iso(b.last_consolidated_at),
                    ),
                )  # fmt: skip
                stored_id = c.execute(
                    "SELECT id FROM consolidated WHERE scope=? AND agent_id=? AND user_id=? AND session_id=?",
                    (b.scope, b.agent_id or "", b.user_id or "", b.session_id or ""),
                ).fetchone()[0]
                for i in range(0, len(ids), 500):
                    chunk = ids[i : i + 500]
                    marks = ",".join("?" * len(chunk))
                    c.execute(f"UPDATE reflections SET absorbed=1 WHERE id IN ({marks})", chunk)
                    # the blob now holds the words of everyone its reflections came from
                    c.execute(
                        "INSERT OR IGNORE INTO contributors (user_id, kind, item_id) SELECT user_id, 'blob', ?"
                        f" FROM contributors WHERE kind='reflection' AND item_id IN ({marks})",
                        (stored_id, *chunk),
                    )
            return b

        return await self._db.run(op)

    async def clear_session_memory(self, *, agent_id: str | None, user_id: str | None, session_id: str) -> int:
        def op(c: sqlite3.Connection) -> int:
            with self._db.write(c):
                n = c.execute(
                    "DELETE FROM reflections WHERE scope='session' AND agent_id IS ? AND user_id IS ? AND session_id=?",
                    (agent_id, user_id, session_id),
                ).rowcount
                n += c.execute(
                    "DELETE FROM consolidated WHERE scope='session' AND agent_id=? AND user_id=? AND session_id=?",
                    (agent_id or "", user_id or "", session_id),
                ).rowcount
                return int(n)

        return await self._db.run(op)

    # ------------------------------------------------------------------ stats
    async def stats(self, scope: Scope | None = None) -> StoreStats:
        await self._ready()
        program = reads.stats(_D, scope, embedder=self.embedder_name, dim=self.dim)
        return await self._db.run(lambda c: _run(c, program))

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's facts (with history), reflections and blobs, and references to the shared
        memories formed from their words (see :mod:`memlane.stores.sqlite.export`)."""
        return await self._db.run(lambda c: export_.facts_part(c, user_id))

    async def close(self) -> None:
        if self._vectors is not None:  # before the connections go: the builder reads the database
            await asyncio.to_thread(self._vectors.close)
        with self._cache_lock:
            self._cache.clear()
        await self._db.release()
