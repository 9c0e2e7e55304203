"""Long-term memory on SQLite: facts (FTS5 keyword index + per-partition vector cache),
history, reflections and consolidated blobs, all in one WAL database file."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memlane.errors import (
    ConfigError,
    ConflictError,
    DimensionMismatchError,
    InvalidInputError,
    NotFoundError,
    ScopeError,
)
from memlane.models import (
    ConsolidatedMemory,
    Fact,
    HistoryEntry,
    Page,
    Reflection,
    Scope,
    content_hash,
    new_id,
    utcnow,
)
from memlane.retrieval.text import date_words, fts_or_query
from memlane.retrieval.vector import VectorIndex
from memlane.stores.base import AppliedChange, Candidate, FactChange, KeywordQuery, StoreStats, Vector
from memlane.stores.sqlite.db import Database

#: Neighbouring turns (same session, i-2..i+2 without i) indexed in the ``ctx`` column.
CONTEXT_RADIUS = 2

_FACT_COLS = (
    "rowid, id, partition, content, hash, scope, agent_id, user_id, session_id, kind, author, seq, "
    "occurred_at, formed_at, updated_at, access_count, version, source_event_ids, valid_from, "
    "invalid_at, metadata, embedding"
)


def partition_token(partition: str) -> str:
    """The single FTS token that names a partition in the keyword index."""
    return "p" + hashlib.md5(partition.encode("utf-8")).hexdigest()[:20]


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _row_to_fact(r: sqlite3.Row | tuple[Any, ...], *, with_embedding: bool = False) -> Fact:
    emb = r[21]
    return Fact(
        id=r[1],
        content=r[3],
        hash=r[4],
        scope=r[5],
        agent_id=r[6],
        user_id=r[7],
        session_id=r[8],
        kind=r[9],
        author=r[10],
        seq=r[11],
        occurred_at=_dt(r[12]),
        formed_at=_dt(r[13]) or utcnow(),
        updated_at=_dt(r[14]) or utcnow(),
        access_count=r[15],
        version=r[16],
        source_event_ids=json.loads(r[17]),
        valid_from=_dt(r[18]) or utcnow(),
        invalid_at=_dt(r[19]),
        metadata=json.loads(r[20]),
        embedding=(np.frombuffer(emb, dtype=np.float32).tolist() if with_embedding and emb else None),
    )


def _encode_applied(changes: list[AppliedChange]) -> str:
    return json.dumps(
        [{"event": a.event, "fact": a.fact.model_dump(mode="json"), "previous": a.previous} for a in changes]
    )


def _decode_applied(text: str) -> list[AppliedChange]:
    return [AppliedChange(d["event"], Fact.model_validate(d["fact"]), d["previous"]) for d in json.loads(text)]


class _CachedIndex:
    def __init__(self, index: VectorIndex, appends: int, changes: int, max_rowid: int) -> None:
        self.index = index
        self.appends = appends
        self.changes = changes
        self.max_rowid = max_rowid
        self.lock = threading.Lock()


class SqliteFactStore:
    """Facts, history, reflections and consolidated blobs in one SQLite file.

    Args:
        db: a :class:`Database` to share, or a path (the store then owns the database).
        ctx_weight: BM25 weight of the neighbouring-turns column (0.5 measured best).
        date_weight: BM25 weight of the date column.
        exact_max: partitions up to this many vectors are searched exactly; larger ones
            use binary quantisation with exact rescoring.
    """

    def __init__(
        self,
        db: Database | str | os.PathLike[str],
        *,
        ctx_weight: float = 0.5,
        date_weight: float = 1.0,
        exact_max: int = 20_000,
    ) -> None:
        self._db = db.acquire() if isinstance(db, Database) else Database(db).open_sync().acquire()
        self.ctx_weight = ctx_weight
        self.date_weight = date_weight
        self.exact_max = exact_max
        self.dim: int | None = None
        self.embedder_name: str | None = None
        self._cache: dict[str, _CachedIndex] = {}
        self._cache_lock = threading.Lock()
        meta = dict(self._db.connection().execute("SELECT key, value FROM meta").fetchall())
        if "dim" in meta:
            self.dim = int(meta["dim"])
            self.embedder_name = meta.get("embedder")

    @property
    def database(self) -> Database:
        return self._db

    # ------------------------------------------------------------------ embedder binding
    def bind_embedder(self, name: str, dim: int) -> None:
        """Record the embedder on first use; refuse a different one later (clear error)."""
        if self.dim is None:
            with self._db.write() as c:
                row = c.execute("SELECT value FROM meta WHERE key='dim'").fetchone()
                if row is None:
                    c.execute("INSERT INTO meta VALUES ('dim', ?), ('embedder', ?)", (str(dim), name))
                    self.dim, self.embedder_name = dim, name
                    return
            meta = dict(self._db.connection().execute("SELECT key, value FROM meta").fetchall())
            self.dim, self.embedder_name = int(meta["dim"]), meta.get("embedder")
        if self.dim != dim:
            raise DimensionMismatchError(
                f"this database holds {self.dim}-dimensional vectors from {self.embedder_name!r}, "
                f"but the configured embedder {name!r} makes {dim}-dimensional ones. Open it with "
                f"embedder={self.embedder_name!r}, or use another database file.",
                expected=self.dim,
                got=dim,
            )
        if self.embedder_name != name:
            raise ConfigError(
                f"this database was embedded with {self.embedder_name!r}; the configured embedder is "
                f"{name!r}. Vectors of different models are not comparable: open it with "
                f"embedder={self.embedder_name!r}, or use another database file."
            )

    def _check_vectors(self, vectors: Vector | None, n: int) -> None:
        if vectors is None:
            return
        if vectors.ndim != 2 or vectors.shape[0] != n:
            raise DimensionMismatchError(f"expected {n} vectors, got array of shape {vectors.shape}")
        if self.dim is not None and vectors.shape[1] != self.dim:
            raise DimensionMismatchError(
                f"vector dimension {vectors.shape[1]} does not match the store's {self.dim}",
                expected=self.dim,
                got=int(vectors.shape[1]),
            )

    # ------------------------------------------------------------------ writes
    async def put_facts(
        self, facts: Sequence[Fact], vectors: Vector | None, *, actor: str = "api"
    ) -> list[tuple[Fact, bool]]:
        self._check_vectors(vectors, len(facts))
        for f in facts:
            _ = f.partition  # validates scope fields
        return await self._db.run(lambda c: self._put_facts(c, list(facts), vectors, actor))

    def _put_facts(
        self, c: sqlite3.Connection, facts: list[Fact], vectors: Vector | None, actor: str
    ) -> list[tuple[Fact, bool]]:
        with self._db.write(c):
            return self._insert_facts(c, facts, vectors, actor)

    def _insert_facts(
        self, c: sqlite3.Connection, facts: list[Fact], vectors: Vector | None, actor: str
    ) -> list[tuple[Fact, bool]]:
        """Insert inside the caller's transaction."""
        out: list[tuple[Fact, bool]] = []
        touched: set[tuple[str, str]] = set()
        appended: set[str] = set()
        now = utcnow()
        if True:  # keeps the body's indentation (one transaction is the caller's)
            for i, f in enumerate(facts):
                part = f.partition
                h = f.hash or content_hash(f.content)
                row = c.execute(
                    f"SELECT {_FACT_COLS} FROM facts WHERE partition=? AND hash=? AND invalid_at IS NULL",
                    (part, h),
                ).fetchone()
                if row is not None:
                    out.append((_row_to_fact(row), False))
                    continue
                seq = f.seq
                if seq is None and f.kind == "message" and f.session_id:
                    seq = c.execute(
                        "SELECT COALESCE(MAX(seq), -1) + 1 FROM facts WHERE partition=? AND session_id=?",
                        (part, f.session_id),
                    ).fetchone()[0]
                stored = f.model_copy(update={"hash": h, "seq": seq, "embedding": None})
                emb = vectors[i].astype(np.float32).tobytes() if vectors is not None else None
                cur = c.execute(
                    "INSERT INTO facts (id, partition, content, hash, scope, agent_id, user_id, session_id,"
                    " kind, author, seq, occurred_at, formed_at, updated_at, access_count, version,"
                    " source_event_ids, valid_from, invalid_at, metadata, embedding)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        stored.id, part, stored.content, h, stored.scope, stored.agent_id,
                        stored.user_id, stored.session_id, stored.kind, stored.author, seq,
                        _iso(stored.occurred_at), _iso(stored.formed_at), _iso(stored.updated_at),
                        stored.access_count, stored.version, json.dumps(stored.source_event_ids),
                        _iso(stored.valid_from), _iso(stored.invalid_at), json.dumps(stored.metadata), emb,
                    ),
                )  # fmt: skip
                rowid = cur.lastrowid
                c.execute(
                    "INSERT INTO facts_fts (rowid, part, author, text, ctx, date) VALUES (?,?,?,?,?,?)",
                    (
                        rowid,
                        partition_token(part),
                        (stored.author or "").lower(),
                        stored.content,
                        "",
                        date_words(stored.occurred_at),
                    ),
                )
                c.execute(
                    "INSERT OR IGNORE INTO partitions (partition, token) VALUES (?, ?)",
                    (part, partition_token(part)),
                )
                if stored.author:
                    c.execute("INSERT OR IGNORE INTO authors VALUES (?, ?)", (part, stored.author))
                self._history(c, stored.id, stored.user_id, "ADD", None, stored.content, actor, now)
                if seq is not None and stored.session_id:
                    touched.add((part, stored.session_id))
                appended.add(part)
                out.append((stored, True))
            for part, session_id in touched:
                self._refresh_context(c, part, session_id, [f.seq for f, new in out if new])
            for part in appended:
                c.execute("UPDATE partitions SET appends = appends + 1 WHERE partition=?", (part,))
        return out

    def _refresh_context(self, c: sqlite3.Connection, part: str, session_id: str, seqs: list[int | None]) -> None:
        """Rewrite the ``ctx`` column of new turns and their neighbours in one session."""
        valid = [s for s in seqs if s is not None]
        if not valid:
            return
        lo, hi = min(valid) - CONTEXT_RADIUS, max(valid) + CONTEXT_RADIUS
        rows = c.execute(
            "SELECT rowid, seq, content FROM facts WHERE partition=? AND session_id=? AND seq BETWEEN ? AND ?"
            " AND invalid_at IS NULL ORDER BY seq",
            (part, session_id, lo - CONTEXT_RADIUS, hi + CONTEXT_RADIUS),
        ).fetchall()
        by_seq = {r[1]: r for r in rows}
        for rowid, seq, _ in rows:
            if not lo <= seq <= hi:
                continue
            ctx = " ".join(
                by_seq[s][2] for s in range(seq - CONTEXT_RADIUS, seq + CONTEXT_RADIUS + 1) if s != seq and s in by_seq
            )
            c.execute("UPDATE facts_fts SET ctx=? WHERE rowid=?", (ctx, rowid))

    @staticmethod
    def _history(
        c: sqlite3.Connection,
        fact_id: str,
        user_id: str | None,
        event: str,
        old: str | None,
        new: str | None,
        actor: str,
        at: datetime,
    ) -> None:
        c.execute(
            "INSERT INTO history VALUES (?,?,?,?,?,?,?,?)",
            (new_id(), fact_id, user_id, event, old, new, actor, at.isoformat()),
        )

    def _visible_row(self, c: sqlite3.Connection, fact_id: str, scope: Scope) -> tuple[Any, ...]:
        parts = scope.partitions()
        row = c.execute(
            f"SELECT {_FACT_COLS} FROM facts WHERE id=? AND partition IN ({','.join('?' * len(parts))})",
            (fact_id, *parts),
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no fact {fact_id!r} in this scope")
        return tuple(row)

    async def update_fact(
        self, fact_id: str, scope: Scope, content: str, vector: Vector | None, *, actor: str = "api"
    ) -> Fact:
        if vector is not None:
            self._check_vectors(vector.reshape(1, -1), 1)

        def op(c: sqlite3.Connection) -> Fact:
            with self._db.write(c):
                return self._update_row(c, self._visible_row(c, fact_id, scope), content, vector, actor)

        return await self._db.run(op)

    def _update_row(
        self, c: sqlite3.Connection, row: tuple[Any, ...], content: str, vector: Vector | None, actor: str
    ) -> Fact:
        """Change one fact's content inside the caller's transaction."""
        old = _row_to_fact(row)
        fact_id = old.id
        if old.invalid_at is not None:
            raise InvalidInputError(f"fact {fact_id!r} was deleted; add a new fact instead")
        h = content_hash(content)
        clash = c.execute(
            "SELECT id FROM facts WHERE partition=? AND hash=? AND invalid_at IS NULL AND id<>?",
            (row[2], h, fact_id),
        ).fetchone()
        if clash:
            raise InvalidInputError(f"an identical fact already exists: {clash[0]}")
        now = utcnow()
        emb = vector.astype(np.float32).tobytes() if vector is not None else row[21]
        c.execute(
            "UPDATE facts SET content=?, hash=?, version=version+1, updated_at=?, embedding=? WHERE id=?",
            (content, h, now.isoformat(), emb, fact_id),
        )
        c.execute("UPDATE facts_fts SET text=? WHERE rowid=?", (content, row[0]))
        c.execute("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (row[2],))
        self._history(c, fact_id, old.user_id, "UPDATE", old.content, content, actor, now)
        return old.model_copy(update={"content": content, "hash": h, "version": old.version + 1, "updated_at": now})

    def _invalidate_row(self, c: sqlite3.Connection, row: tuple[Any, ...], actor: str) -> Fact:
        """Soft-delete one fact inside the caller's transaction (no-op when already invalid)."""
        fact = _row_to_fact(row)
        if fact.invalid_at is not None:
            return fact
        now = utcnow()
        c.execute("UPDATE facts SET invalid_at=? WHERE id=?", (now.isoformat(), fact.id))
        c.execute("DELETE FROM facts_fts WHERE rowid=?", (row[0],))
        c.execute("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (row[2],))
        self._history(c, fact.id, fact.user_id, "DELETE", fact.content, None, actor, now)
        return fact.model_copy(update={"invalid_at": now})

    async def invalidate_fact(self, fact_id: str, scope: Scope, *, actor: str = "api") -> Fact:
        def op(c: sqlite3.Connection) -> Fact:
            with self._db.write(c):
                return self._invalidate_row(c, self._visible_row(c, fact_id, scope), actor)

        return await self._db.run(op)

    async def apply_changes(
        self,
        changes: Sequence[FactChange],
        reflections: Sequence[Reflection] = (),
        *,
        key: str,
        actor: str = "formation",
    ) -> list[AppliedChange]:
        for ch in changes:
            if ch.fact is not None:
                _ = ch.fact.partition
            if ch.vector is not None:
                self._check_vectors(ch.vector.reshape(1, -1), 1)

        def op(c: sqlite3.Connection) -> list[AppliedChange]:
            with self._db.write(c):
                done = c.execute("SELECT result FROM applied_batches WHERE key=?", (key,)).fetchone()
                if done is not None:
                    return _decode_applied(done[0])
                out = [self._apply_one(c, ch, actor) for ch in changes]
                for r in reflections:
                    self._insert_reflection(c, r)
                owner = next((a.fact.user_id for a in out if a.fact.user_id), None)
                owner = owner or next((r.user_id for r in reflections if r.user_id), None)
                c.execute(
                    "INSERT INTO applied_batches VALUES (?,?,?,?)",
                    (key, owner, utcnow().isoformat(), _encode_applied(out)),
                )
                return out

        return await self._db.run(op)

    def _target_row(self, c: sqlite3.Connection, ch: FactChange) -> tuple[Any, ...] | None:
        """The change's target, only if it is a valid fact in the same partition as the change."""
        if ch.target_id is None:
            return None
        row = c.execute(f"SELECT {_FACT_COLS} FROM facts WHERE id=?", (ch.target_id,)).fetchone()
        if row is None or row[19] is not None or row[2] != ch.partition:
            return None
        return tuple(row)

    @staticmethod
    def _merge_provenance(c: sqlite3.Connection, rowid: int, updated: Fact, new: Fact) -> Fact:
        """An UPDATE merges the new fact in: its source events join the old ones, its time wins."""
        sources = list(dict.fromkeys([*updated.source_event_ids, *new.source_event_ids]))
        when = max((t for t in (updated.occurred_at, new.occurred_at) if t is not None), default=None)
        c.execute(
            "UPDATE facts SET source_event_ids=?, occurred_at=? WHERE id=?",
            (json.dumps(sources), _iso(when), updated.id),
        )
        c.execute("UPDATE facts_fts SET date=? WHERE rowid=?", (date_words(when), rowid))
        return updated.model_copy(update={"source_event_ids": sources, "occurred_at": when})

    def _apply_one(self, c: sqlite3.Connection, ch: FactChange, actor: str) -> AppliedChange:
        now = utcnow()
        target = self._target_row(c, ch)
        new_fact = ch.fact
        if new_fact is not None:
            same = c.execute(
                f"SELECT {_FACT_COLS} FROM facts WHERE partition=? AND hash=? AND invalid_at IS NULL",
                (ch.partition, new_fact.hash or content_hash(new_fact.content)),
            ).fetchone()
            if same is not None:  # identical fact already stored: NONE, never a deletion
                existing = _row_to_fact(same)
                self._history(c, existing.id, existing.user_id, "NONE", existing.content, new_fact.content, actor, now)
                return AppliedChange("NONE", existing, existing.content)
        if ch.event == "UPDATE" and target is not None:
            text = ch.text or (new_fact.content if new_fact else None)
            if text:
                old = _row_to_fact(target)
                clash = c.execute(
                    "SELECT id FROM facts WHERE partition=? AND hash=? AND invalid_at IS NULL AND id<>?",
                    (ch.partition, content_hash(text), old.id),
                ).fetchone()
                if clash is None:
                    updated = self._update_row(c, target, text, ch.vector, actor)
                    if new_fact is not None:
                        updated = self._merge_provenance(c, target[0], updated, new_fact)
                    return AppliedChange("UPDATE", updated, old.content)
        if ch.event == "NONE" and target is not None:
            existing = _row_to_fact(target)
            self._history(
                c, existing.id, existing.user_id, "NONE", existing.content, new_fact.content if new_fact else None,
                actor, now,
            )  # fmt: skip
            return AppliedChange("NONE", existing, existing.content)
        previous = None
        if ch.event == "DELETE" and target is not None:
            previous = self._invalidate_row(c, target, actor).content
        if new_fact is None:
            raise InvalidInputError(f"{ch.event} change without a fact to store")
        vectors = ch.vector.reshape(1, -1) if ch.vector is not None else None
        stored, _ = self._insert_facts(c, [new_fact], vectors, actor)[0]
        return AppliedChange("DELETE" if previous is not None else "ADD", stored, previous)

    async def purge_user(self, user_id: str) -> int:
        if not user_id or not user_id.strip():
            raise ScopeError("purge_user needs a non-empty user_id")

        def op(c: sqlite3.Connection) -> int:
            removed = 0
            with self._db.write(c):
                parts = [r[0] for r in c.execute("SELECT DISTINCT partition FROM facts WHERE user_id=?", (user_id,))]
                rowids = [r[0] for r in c.execute("SELECT rowid FROM facts WHERE user_id=?", (user_id,))]
                for rid in rowids:
                    c.execute("DELETE FROM facts_fts WHERE rowid=?", (rid,))
                removed += c.execute("DELETE FROM facts WHERE user_id=?", (user_id,)).rowcount
                removed += c.execute("DELETE FROM history WHERE user_id=?", (user_id,)).rowcount
                removed += c.execute("DELETE FROM reflections WHERE user_id=?", (user_id,)).rowcount
                removed += c.execute("DELETE FROM consolidated WHERE user_id=?", (user_id,)).rowcount
                removed += c.execute("DELETE FROM applied_batches WHERE user_id=?", (user_id,)).rowcount
                for part in parts:
                    left = c.execute("SELECT 1 FROM facts WHERE partition=? LIMIT 1", (part,)).fetchone()
                    if left is None:
                        c.execute("DELETE FROM partitions WHERE partition=?", (part,))
                        c.execute("DELETE FROM authors WHERE partition=?", (part,))
                    else:
                        c.execute("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (part,))
            with self._cache_lock:
                for part in parts:
                    self._cache.pop(part, None)
            return removed

        return await self._db.run(op)

    # ------------------------------------------------------------------ reads
    async def get_fact(self, fact_id: str, scope: Scope) -> Fact | None:
        def op(c: sqlite3.Connection) -> Fact | None:
            try:
                return _row_to_fact(self._visible_row(c, fact_id, scope), with_embedding=True)
            except NotFoundError:
                return None

        return await self._db.run(op)

    async def get_facts(self, fact_ids: Sequence[str], scope: Scope) -> dict[str, Fact]:
        ids = list(dict.fromkeys(fact_ids))
        if not ids:
            return {}
        parts = scope.partitions()

        def op(c: sqlite3.Connection) -> dict[str, Fact]:
            out: dict[str, Fact] = {}
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                rows = c.execute(
                    f"SELECT {_FACT_COLS} FROM facts WHERE id IN ({','.join('?' * len(chunk))})"
                    # `+partition`: keep the planner on the id index (without ANALYZE statistics it
                    # picked the partition index and scanned the whole partition: 131 ms at 100k rows).
                    f" AND +partition IN ({','.join('?' * len(parts))})",
                    (*chunk, *parts),
                ).fetchall()
                for r in rows:
                    out[r[1]] = _row_to_fact(r)
            return out

        return await self._db.run(op)

    async def list_facts(
        self,
        scope: Scope,
        *,
        limit: int = 50,
        cursor: str | None = None,
        include_invalid: bool = False,
    ) -> Page:
        if limit < 1 or limit > 10_000:
            raise InvalidInputError("limit must be between 1 and 10000")
        try:
            before = int(cursor) if cursor else None
        except ValueError as exc:
            raise InvalidInputError(f"invalid cursor {cursor!r}") from exc
        parts = scope.partitions()
        where = f"partition IN ({','.join('?' * len(parts))})"
        args: list[Any] = list(parts)
        if not include_invalid:
            where += " AND invalid_at IS NULL"
        if scope.session_id:
            where += " AND session_id=?"
            args.append(scope.session_id)

        def op(c: sqlite3.Connection) -> Page:
            total = c.execute(f"SELECT COUNT(*) FROM facts WHERE {where}", args).fetchone()[0]
            q = f"SELECT {_FACT_COLS} FROM facts WHERE {where}"
            qargs = list(args)
            if before is not None:
                q += " AND rowid < ?"
                qargs.append(before)
            rows = c.execute(q + " ORDER BY rowid DESC LIMIT ?", (*qargs, limit + 1)).fetchall()
            more = len(rows) > limit
            rows = rows[:limit]
            return Page(
                items=[_row_to_fact(r) for r in rows],
                next_cursor=str(rows[-1][0]) if more and rows else None,
                total=total,
            )

        return await self._db.run(op)

    async def history(self, fact_id: str, scope: Scope) -> list[HistoryEntry]:
        def op(c: sqlite3.Connection) -> list[HistoryEntry]:
            self._visible_row(c, fact_id, scope)
            rows = c.execute(
                "SELECT id, fact_id, event, old_content, new_content, actor, at FROM history"
                " WHERE fact_id=? ORDER BY at, rowid",
                (fact_id,),
            ).fetchall()
            return [
                HistoryEntry(
                    id=r[0], fact_id=r[1], event=r[2], old_content=r[3], new_content=r[4], actor=r[5],
                    at=datetime.fromisoformat(r[6]),
                )
                for r in rows
            ]  # fmt: skip

        return await self._db.run(op)

    async def authors(self, partitions: Sequence[str]) -> list[str]:
        parts = list(partitions)
        if not parts:
            return []
        return await self._db.run(
            lambda c: [
                r[0]
                for r in c.execute(
                    f"SELECT DISTINCT author FROM authors WHERE partition IN ({','.join('?' * len(parts))})",
                    parts,
                )
            ]
        )

    async def keyword_search(
        self,
        partitions: Sequence[str],
        query: KeywordQuery,
        *,
        limit: int,
        session_id: str | None = None,
        kind: str | None = None,
    ) -> list[Candidate]:
        if not query.terms or not partitions:
            return []
        parts = " OR ".join(f'part : "{partition_token(p)}"' for p in partitions)
        # `part` only ever holds partition tokens, so the terms need no column filter.
        match = f"({parts}) AND ({fts_or_query(query.terms)})"
        bm25 = f"bm25(facts_fts, 0.0, 0.0, 1.0, {float(self.ctx_weight)}, {float(self.date_weight)})"
        # Placeholders bind in textual order: the boost's author names come before MATCH.
        args: list[Any] = [a.lower() for a in query.boost_authors]
        if query.boost_authors:
            marks = ",".join("?" * len(query.boost_authors))
            order = f"{bm25} * (CASE WHEN author IN ({marks}) THEN {float(query.author_boost)} ELSE 1.0 END)"
        else:
            order = bm25
        args.append(match)
        sql = f"SELECT rowid, {order} AS s FROM facts_fts WHERE facts_fts MATCH ? ORDER BY s"
        if session_id is None and kind is None:
            sql = f"SELECT f.id, k.s FROM ({sql} LIMIT ?) k JOIN facts f ON f.rowid = k.rowid ORDER BY k.s"
            args.append(limit)
        else:
            where = []
            if session_id is not None:
                where.append("f.session_id = ?")
                args.append(session_id)
            if kind is not None:
                where.append("f.kind = ?")
                args.append(kind)
            sql = (
                f"SELECT f.id, k.s FROM ({sql}) k JOIN facts f ON f.rowid = k.rowid"
                f" WHERE {' AND '.join(where)} ORDER BY k.s LIMIT ?"
            )
            args.append(limit)
        rows = await self._db.run(lambda c: c.execute(sql, args).fetchall())
        return [Candidate(r[0], -float(r[1])) for r in rows]

    def _index_for(self, c: sqlite3.Connection, part: str) -> _CachedIndex | None:
        if self.dim is None:
            return None
        state = c.execute("SELECT appends, changes FROM partitions WHERE partition=?", (part,)).fetchone()
        if state is None:
            with self._cache_lock:
                self._cache.pop(part, None)
            return None
        appends, changes = state
        with self._cache_lock:
            cached = self._cache.get(part)
            if cached is None or cached.changes != changes:
                cached = _CachedIndex(VectorIndex(self.dim, exact_max=self.exact_max), -1, changes, 0)
                self._cache[part] = cached
        with cached.lock:
            if cached.appends != appends:
                rows = c.execute(
                    "SELECT rowid, id, session_id, embedding, kind FROM facts WHERE partition=? AND rowid>?"
                    " AND invalid_at IS NULL AND embedding IS NOT NULL ORDER BY rowid",
                    (part, cached.max_rowid),
                ).fetchall()
                if rows:
                    mat = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
                    cached.index.append([r[1] for r in rows], [r[2] for r in rows], mat, [r[4] for r in rows])
                    cached.max_rowid = rows[-1][0]
                cached.appends = appends
        return cached

    async def vector_search(
        self,
        partitions: Sequence[str],
        vector: Vector,
        *,
        limit: int,
        session_id: str | None = None,
        kind: str | None = None,
    ) -> list[Candidate]:
        if self.dim is None or not partitions:
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"query vector has dimension {q.shape[0]}, the store holds {self.dim}",
                expected=self.dim,
                got=int(q.shape[0]),
            )

        def op(c: sqlite3.Connection) -> list[Candidate]:
            found: list[Candidate] = []
            for part in partitions:
                cached = self._index_for(c, part)
                if cached is None or len(cached.index) == 0:
                    continue
                with cached.lock:
                    index = cached.index
                    rows, scores = index.search(q, limit, session_id=session_id, kind=kind)
                    found.extend(Candidate(index.keys[i], float(s)) for i, s in zip(rows, scores, strict=True))
            found.sort(key=lambda x: -x.score)
            return found[:limit]

        return await self._db.run(op)

    async def missing_embeddings(self, *, limit: int = 256) -> list[tuple[str, str]]:
        """Valid facts stored without a vector: ``[(fact_id, content)]``, oldest first."""
        return await self._db.run(
            lambda c: [
                (r[0], r[1])
                for r in c.execute(
                    "SELECT id, content FROM facts WHERE embedding IS NULL AND invalid_at IS NULL"
                    " ORDER BY rowid LIMIT ?",
                    (limit,),
                )
            ]
        )

    async def set_embeddings(self, fact_ids: Sequence[str], vectors: Vector) -> None:
        """Attach vectors to existing facts (backfill after an embedder failure)."""
        self._check_vectors(vectors, len(fact_ids))

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                parts = set()
                for fid, vec in zip(fact_ids, vectors, strict=True):
                    row = c.execute(
                        "UPDATE facts SET embedding=? WHERE id=? RETURNING partition",
                        (vec.astype(np.float32).tobytes(), fid),
                    ).fetchone()
                    if row:
                        parts.add(row[0])
                for part in parts:
                    c.execute("UPDATE partitions SET changes = changes + 1 WHERE partition=?", (part,))

        await self._db.run(op)

    async def record_access(self, fact_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(fact_ids))
        if not ids:
            return

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                marks = ",".join("?" * len(ids))
                c.execute(f"UPDATE facts SET access_count = access_count + 1 WHERE id IN ({marks})", ids)

        await self._db.run(op)

    # ------------------------------------------------------------------ reflections
    async def put_reflection(self, reflection: Reflection) -> Reflection:
        r = reflection

        def op(c: sqlite3.Connection) -> Reflection:
            with self._db.write(c):
                self._insert_reflection(c, r)
            return r

        return await self._db.run(op)

    @staticmethod
    def _insert_reflection(c: sqlite3.Connection, r: Reflection) -> None:
        c.execute(
            "INSERT OR IGNORE INTO reflections VALUES (?,?,?,?,?,?,?,?)",
            (r.id, r.content, r.scope, r.agent_id, r.user_id, r.session_id, int(r.absorbed), r.formed_at.isoformat()),
        )

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
                for i in range(0, len(ids), 500):
                    chunk = ids[i : i + 500]
                    c.execute(f"UPDATE reflections SET absorbed=1 WHERE id IN ({','.join('?' * len(chunk))})", chunk)
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
        def op(c: sqlite3.Connection) -> StoreStats:
            if scope is None:
                where, args = "1", []
            else:
                parts = scope.partitions()
                where, args = f"partition IN ({','.join('?' * len(parts))})", parts
            facts = c.execute(f"SELECT COUNT(*) FROM facts WHERE {where}", args).fetchone()[0]
            valid = c.execute(f"SELECT COUNT(*) FROM facts WHERE {where} AND invalid_at IS NULL", args).fetchone()[0]
            nparts = c.execute(f"SELECT COUNT(DISTINCT partition) FROM facts WHERE {where}", args).fetchone()[0]
            st = StoreStats(facts=facts, valid_facts=valid, partitions=nparts, embedder=self.embedder_name,
                            dim=self.dim)  # fmt: skip
            if scope is None:
                st.reflections = c.execute("SELECT COUNT(*) FROM reflections").fetchone()[0]
                st.consolidated = c.execute("SELECT COUNT(*) FROM consolidated").fetchone()[0]
                st.sessions = c.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
                st.events = c.execute("SELECT COUNT(*) FROM events").fetchone()[0]
            else:
                st.reflections = c.execute(
                    "SELECT COUNT(*) FROM reflections WHERE user_id IS ? AND agent_id IS ?",
                    (scope.user_id, scope.agent_id),
                ).fetchone()[0]
            return st

        return await self._db.run(op)

    async def close(self) -> None:
        with self._cache_lock:
            self._cache.clear()
        self._db.release_sync()
