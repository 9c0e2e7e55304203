"""Long-term memory on PostgreSQL + pgvector: facts, history, reflections and consolidated
blobs, for any number of replicas and workers on one database (or one schema of it).

The semantics are the SQLite store's (:mod:`memlane.stores.sqlite.facts`), ported table by
table: idempotent writes by content hash within a partition, soft deletes with history rows,
per-partition change counters for memory stamps, contributors for ``forget``, and formation
batches applied exactly once per key. Where SQLite serialises every write on the file lock,
here each write transaction takes a transaction-scoped advisory lock per partition it writes
(in sorted order, so writers never deadlock): turn numbering, hash idempotency and the
neighbour-context rewrite stay race-free across replicas, and writes to different users run
in parallel. Keyword and vector search live in :mod:`memlane.stores.postgres.search`,
reflections in :mod:`memlane.stores.postgres.reflections` (mixins of :class:`PgFactStore`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from memlane.errors import (
    ConflictError,
    InvalidInputError,
    MemlaneError,
    NotFoundError,
    ScopeError,
    StorageError,
)
from memlane.models import (
    Fact,
    FactScope,
    HistoryEntry,
    Page,
    Reflection,
    Scope,
    content_hash,
    utcnow,
)
from memlane.retrieval.text import date_words
from memlane.stores.base import (
    AppliedChange,
    FactChange,
    FactFilter,
    PartitionFilter,
    StoreStats,
    Vector,
)
from memlane.stores.embedding import check_binding, check_vectors
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.dialect import PgDialect, lock_key, run
from memlane.stores.postgres.reflections import PgReflectionMixin
from memlane.stores.postgres.rows import (
    FACT_COLS,
    Conn,
    dec,
    dec_json,
    enc,
    enc_json,
    row_to_fact,
)
from memlane.stores.postgres.search import PgSearchMixin
from memlane.stores.sql import facts as core
from memlane.stores.sql import reads
from memlane.stores.sql.facts import history, search_text
from memlane.stores.sql.stmt import Program, Row, Stmt, one, run_all

__all__ = ["HNSW_MAX_DIM", "PgFactStore"]

log = logging.getLogger("memlane")

#: pgvector's HNSW index holds ``vector`` columns of at most this many dimensions; larger
#: embeddings are searched by exact scan.
HNSW_MAX_DIM = 2000

#: pgvector's largest ``vector`` dimension.
VECTOR_MAX_DIM = 16_000

#: How long the keyword-index rebuild after a purge waits for older transactions.
SCRUB_LOCK_TIMEOUT_S = 60


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class PgFactStore(PgSearchMixin, PgReflectionMixin):
    """Facts, history, reflections and consolidated blobs in one PostgreSQL schema.

    Build with :meth:`open`. Every read names its partitions (a :class:`Scope` or a
    :class:`PartitionFilter`); there is no unscoped read.

    Args:
        db: a migrated :class:`PgDatabase` to share (this store takes a reference and
            releases it once on :meth:`close`).
        ctx_weight, date_weight, exact_max: search settings of
            :class:`~memlane.stores.postgres.search.PgSearchMixin` (its defaults when None).
        purge_rewrite: after ``purge_user``, rewrite the tables (``VACUUM FULL``) instead of
            vacuuming them: PostgreSQL does not zero the space its vacuum frees, so only a
            rewrite takes the deleted bytes out of the table files; it locks the tables
            (reads and writes wait) for as long as the rewrite takes. None: the location's
            ``purge=`` parameter (``purge=rewrite``; default ``vacuum``).
    """

    db: PgDatabase

    def __init__(
        self,
        db: PgDatabase,
        *,
        ctx_weight: float | None = None,
        date_weight: float | None = None,
        exact_max: int | None = None,
        purge_rewrite: bool | None = None,
    ) -> None:
        self.db = db.acquire()
        self.purge_rewrite = db.purge_rewrite if purge_rewrite is None else purge_rewrite
        if ctx_weight is not None:
            self.ctx_weight = ctx_weight
        if date_weight is not None:
            self.date_weight = date_weight
        if exact_max is not None:
            self.exact_max = exact_max
        self.dim: int | None = None
        self.embedder_name: str | None = None
        self._closed = False
        self._d = PgDialect(db.schema)

    @classmethod
    async def open(cls, db: PgDatabase | str, **kwargs: Any) -> PgFactStore:
        """Open on a shared database, or connect to (and migrate) a location URL; the store
        then holds the only reference, so closing it closes the pool."""
        own = not isinstance(db, PgDatabase)
        database = await PgDatabase.open(db) if isinstance(db, str) else db
        try:
            store = cls(database, **kwargs)
        except BaseException:
            if own:
                await database.release()
            raise
        try:
            await store._load_meta()
        except BaseException:
            await store.close()
            raise
        return store

    @property
    def database(self) -> PgDatabase:
        return self.db

    async def close(self) -> None:
        """Release the database reference (once: closing again does nothing)."""
        if self._closed:
            return
        self._closed = True
        await self.db.release()

    # ------------------------------------------------------------------ plumbing
    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Conn]:
        """One write transaction; database errors become memlane's typed errors."""
        try:
            async with self.db.transaction() as conn:
                yield conn
        except MemlaneError:
            raise
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            raise ConflictError(f"a concurrent write got in the way; retry ({exc.diag.message_primary})") from exc
        except psycopg.errors.IntegrityError as exc:
            raise StorageError(f"constraint failed: {exc.diag.message_primary or exc}") from exc
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc.diag.message_primary or exc}") from exc

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Conn]:
        """A pooled connection for reads; database errors become :class:`StorageError`."""
        try:
            async with self.db.connection() as conn:
                yield conn
        except MemlaneError:
            raise
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc.diag.message_primary or exc}") from exc

    async def _lock(self, conn: Conn, partitions: Iterable[str]) -> None:
        """Hold the write lock of each partition until the transaction ends (sorted: no deadlock)."""
        await run(conn, run_all(self._d.lock_partitions(sorted(set(partitions)))))

    @staticmethod
    async def _one(conn: Conn, query: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = await (await conn.execute(query, args)).fetchone()
        return tuple(row) if row is not None else None

    @staticmethod
    async def _all(conn: Conn, query: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await (await conn.execute(query, args)).fetchall()]

    async def _load_meta(self) -> None:
        async with self._read() as conn:
            meta: dict[str, str] = dict(
                await self._all(conn, "SELECT key, value FROM meta WHERE key IN ('dim', 'embedder')")
            )
        if "dim" in meta:
            self.dim = int(meta["dim"])
            self.embedder_name = meta.get("embedder")

    # ------------------------------------------------------------------ embedder binding
    async def bind_embedder(self, name: str, dim: int) -> None:
        """Record the embedder on first use (typing the vector column ``vector(dim)`` and
        building the HNSW index); refuse a different one later (clear error)."""
        if self.dim is None:
            await self._load_meta()  # another replica may have bound it
        if self.dim is None:
            if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= VECTOR_MAX_DIM:
                raise InvalidInputError(f"embedding dimension must be 1..{VECTOR_MAX_DIM}, got {dim!r}")
            async with self._tx() as conn:
                # The first binder inserts the row; a concurrent one waits on it, then skips.
                won = await self._one(
                    conn,
                    "INSERT INTO meta (key, value) VALUES ('dim', %s) ON CONFLICT (key) DO NOTHING RETURNING key",
                    (str(dim),),
                )
                if won is not None:
                    await conn.execute("INSERT INTO meta (key, value) VALUES ('embedder', %s)", (name,))
                    await conn.execute(f"ALTER TABLE facts ALTER COLUMN embedding TYPE vector({int(dim)})")
                    if dim <= HNSW_MAX_DIM:
                        await conn.execute(
                            "CREATE INDEX IF NOT EXISTS facts_embedding_hnsw ON facts"
                            " USING hnsw (embedding vector_cosine_ops)"
                        )
                    else:
                        log.info(
                            "memlane: %d-dimensional vectors exceed pgvector's HNSW limit of %d dimensions;"
                            " vector search scans exactly (no approximate index)",
                            dim,
                            HNSW_MAX_DIM,
                        )
            await self._load_meta()
        self._check_binding(name, dim)

    def _check_binding(self, name: str, dim: int) -> None:
        check_binding(self.embedder_name, self.dim, name, dim, elsewhere="another database or schema")

    def _check_vectors(self, vectors: Vector | None, n: int) -> None:
        check_vectors(vectors, n, self.dim)

    # ------------------------------------------------------------------ writes
    async def put_facts(
        self, facts: Sequence[Fact], vectors: Vector | None, *, actor: str = "api"
    ) -> list[tuple[Fact, bool]]:
        """Store facts atomically (all or none); returns (stored fact, created) per input."""
        facts = list(facts)
        self._check_vectors(vectors, len(facts))
        parts = {f.partition for f in facts}  # validates scope fields before anything is written
        if not facts:
            return []
        async with self._tx() as conn:
            await self._lock(conn, parts)
            return await run(conn, self._insert_facts(facts, vectors, actor))

    def _insert_facts(self, facts: list[Fact], vectors: Vector | None, actor: str) -> Program[list[tuple[Fact, bool]]]:
        """Insert inside the caller's transaction (which holds the partitions' locks)."""
        d = self._d
        out: list[tuple[Fact, bool]] = []
        touched: dict[tuple[str, str], list[int | None]] = {}
        appended: set[str] = set()
        now = utcnow()
        for i, f in enumerate(facts):
            part = f.partition
            h = f.hash or content_hash(f.content)
            row = yield from one(
                f"SELECT {FACT_COLS} FROM facts WHERE partition=? AND hash=? AND invalid_at IS NULL", (part, h)
            )
            if row is not None:
                out.append((row_to_fact(row), False))
                continue
            seq = f.seq
            if seq is None and f.kind == "message" and f.session_id:
                nxt = yield from one(
                    "SELECT COALESCE(MAX(seq), -1) + 1 FROM facts WHERE partition=? AND session_id=?",
                    (part, enc(f.session_id)),
                )
                seq = int(nxt[0]) if nxt is not None else 0
            stored = f.model_copy(update={"hash": h, "seq": seq, "embedding": None})
            emb = vectors[i].astype(np.float32) if vectors is not None else None
            yield Stmt(
                "INSERT INTO facts (id, partition, content, hash, scope, agent_id, user_id, session_id,"
                " kind, author, seq, occurred_at, formed_at, updated_at, access_count, version,"
                " source_event_ids, valid_from, invalid_at, metadata, embedding, search_text, ctx, date_words)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'',?)",
                (
                    enc(stored.id), part, enc(stored.content), h, stored.scope, enc(stored.agent_id),
                    enc(stored.user_id), enc(stored.session_id), stored.kind, enc(stored.author), seq,
                    stored.occurred_at, stored.formed_at, stored.updated_at, stored.access_count, stored.version,
                    Jsonb(enc_json(stored.source_event_ids)), stored.valid_from, stored.invalid_at,
                    Jsonb(enc_json(stored.metadata)), emb, enc(search_text(stored.kind, stored.content)),
                    date_words(stored.occurred_at),
                ),
            )  # fmt: skip
            yield Stmt("INSERT INTO partitions (partition) VALUES (?) ON CONFLICT DO NOTHING", (part,))
            if stored.author:
                yield Stmt(
                    "INSERT INTO authors (partition, author) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (part, enc(stored.author)),
                )
            yield history(d, stored.id, stored.user_id, "ADD", None, stored.content, actor, now)
            if seq is not None and stored.session_id:
                touched.setdefault((part, stored.session_id), []).append(seq)
            appended.add(part)
            out.append((stored, True))
        for (part, session_id), seqs in touched.items():
            yield from core.refresh_context(d, part, session_id, seqs)
        for part in sorted(appended):
            yield Stmt("UPDATE partitions SET appends = appends + 1 WHERE partition=?", (part,))
        return out

    async def _visible_row(self, conn: Conn, fact_id: str, scope: Scope) -> Row:
        """The fact's row if ``scope`` sees it (valid or not), else :class:`NotFoundError`."""
        return await run(conn, core.visible_row(self._d, fact_id, scope))

    async def update_fact(
        self, fact_id: str, scope: Scope, content: str, vector: Vector | None, *, actor: str = "api"
    ) -> Fact:
        """Change a fact's content (version + 1, history row)."""
        if vector is not None:
            self._check_vectors(vector.reshape(1, -1), 1)
        async with self._tx() as conn:
            return await run(conn, core.update_fact(self._d, fact_id, scope, content, vector, actor))

    async def invalidate_fact(self, fact_id: str, scope: Scope, *, actor: str = "api") -> Fact:
        """Soft delete: set ``invalid_at``, drop from search, keep in history."""
        return (await self.invalidate_facts([fact_id], scope, actor=actor))[0]

    async def invalidate_facts(self, fact_ids: Sequence[str], scope: Scope, *, actor: str = "api") -> list[Fact]:
        """Soft delete several facts in one transaction: all visible, or nothing changes."""
        async with self._tx() as conn:
            return await run(conn, core.invalidate_facts(self._d, fact_ids, scope, actor))

    async def record_access(self, fact_ids: Sequence[str]) -> None:
        """Increment ``access_count`` of retrieved facts (ids from scoped searches)."""
        ids = [enc(i) for i in dict.fromkeys(fact_ids)]
        if not ids:
            return
        # Never hold one row's lock while waiting for another's (a writer may hold that one and
        # want this one: a deadlock): the unlocked rows in one statement, then any row a writer
        # holds right now on its own, each statement its own transaction.
        async with self._read() as conn:
            cur = await conn.execute(
                "UPDATE facts SET access_count = access_count + 1 WHERE rowid IN"
                " (SELECT rowid FROM facts WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED) RETURNING id",
                (ids,),
            )
            done = {r[0] for r in await cur.fetchall()}
            for fid in ids:
                if fid not in done:
                    await conn.execute("UPDATE facts SET access_count = access_count + 1 WHERE id = %s", (fid,))

    # ------------------------------------------------------------------ formation batches
    async def apply_changes(
        self,
        changes: Sequence[FactChange],
        reflections: Sequence[Reflection] = (),
        *,
        key: str,
        actor: str = "formation",
    ) -> list[AppliedChange]:
        """Apply a formation batch atomically, exactly once per ``key``.

        The batch's ``applied_batches`` row is inserted first (``ON CONFLICT DO NOTHING``): a
        replica applying the same key at the same time waits on that row's unique index until
        the first commits (then returns its result) or rolls back (then applies it itself).
        """
        changes = list(changes)
        for ch in changes:
            if ch.fact is not None:
                _ = ch.fact.partition  # validates scope fields before anything is written
            if ch.vector is not None:
                self._check_vectors(ch.vector.reshape(1, -1), 1)

        def insert(fact: Fact, vector: Vector | None) -> Program[Fact]:
            vectors = vector.reshape(1, -1) if vector is not None else None
            return (yield from self._insert_facts([fact], vectors, actor))[0][0]

        async with self._tx() as conn:
            return await run(
                conn, core.apply_changes(self._d, changes, reflections, key=key, actor=actor, insert=insert)
            )

    # ------------------------------------------------------------------ erasure
    async def purge_user(self, user_id: str, *, shared: str = "erase") -> int:
        """Hard delete everything of ``user_id`` (facts, history, reflections, blobs, applied
        batches): the fact store's and the reflection store's ``purge_user`` in one.

        ``shared="erase"`` (the default) also erases the agent-scope memories formed from the
        user's words: agent facts they contributed (or changed), agent reflections formed from
        their conversations, and each consolidated agent blob those reflections went into
        (dropped; its remaining reflections become unabsorbed, so the next consolidation
        rebuilds it without the user). ``shared="keep"`` keeps those agent memories for the
        agent's other users and only removes their link to the user.

        Afterwards (as SQLite merges its keyword index and truncates its WAL) the touched
        tables are vacuumed, so the deleted rows leave every index rather than waiting for
        autovacuum, and the keyword index is rebuilt (``REINDEX INDEX CONCURRENTLY facts_tsv``:
        a GIN index keeps a deleted row's words as keys until it is rebuilt; the rebuild
        blocks neither reads nor writes). Vacuum does not zero the space it frees, so bytes
        of deleted rows can stay in the table files until new rows overwrite them; with
        ``purge_rewrite=True`` the tables are rewritten instead (``VACUUM FULL``), which takes
        them out of the files but locks the tables meanwhile. All of this is best effort: a
        failure is logged, and autovacuum and the next purge catch up. PostgreSQL's WAL,
        standbys and backups keep old pages until they are recycled: the operator's retention.
        """
        if not isinstance(user_id, str) or not user_id.strip():
            raise ScopeError("purge_user needs a non-empty user_id")
        if shared not in ("erase", "keep"):
            raise InvalidInputError(f"shared must be 'erase' or 'keep', got {shared!r}")
        erase = shared == "erase"
        uid = enc(user_id)

        def mine(kind: str) -> str:
            return f"SELECT item_id FROM contributors WHERE user_id=%s AND kind='{kind}'"

        where = "user_id=%s" + (f" OR id IN ({mine('fact')})" if erase else "")
        wargs = (uid, uid) if erase else (uid,)
        async with self._tx() as conn:
            # lock the partitions about to change first (sorted, like every writer)
            await self._lock(
                conn,
                [r[0] for r in await self._all(conn, f"SELECT DISTINCT partition FROM facts WHERE {where}", wargs)],
            )
            removed = 0
            if not erase:  # the agent keeps what the user told it, unlinked from the user
                await conn.execute(
                    "UPDATE history SET user_id=NULL WHERE user_id=%s AND fact_id IN"
                    " (SELECT id FROM facts WHERE user_id=%s AND scope IN ('agent', 'room'))",
                    (uid, uid),
                )
                await conn.execute(
                    "UPDATE facts SET user_id=NULL WHERE user_id=%s AND scope IN ('agent', 'room')", (uid,)
                )
            victims = await self._all(
                conn, f"SELECT rowid, id, partition, session_id, seq FROM facts WHERE {where} FOR UPDATE", wargs
            )
            rowids = [v[0] for v in victims]
            ids = [v[1] for v in victims]
            removed += (await conn.execute("DELETE FROM facts WHERE rowid = ANY(%s)", (rowids,))).rowcount
            removed += (await conn.execute("DELETE FROM history WHERE fact_id = ANY(%s)", (ids,))).rowcount
            removed += (await conn.execute("DELETE FROM history WHERE user_id=%s", (uid,))).rowcount
            await conn.execute("DELETE FROM contributors WHERE kind='fact' AND item_id = ANY(%s)", (ids,))
            if erase:
                refl = [r[0] for r in await self._all(conn, mine("reflection"), (uid,))]
                removed += (await conn.execute("DELETE FROM reflections WHERE id = ANY(%s)", (refl,))).rowcount
                await conn.execute("DELETE FROM contributors WHERE kind='reflection' AND item_id = ANY(%s)", (refl,))
                for (blob_id,) in await self._all(conn, mine("blob"), (uid,)):
                    removed += await self._drop_blob(conn, blob_id)
            removed += (await conn.execute("DELETE FROM reflections WHERE user_id=%s", (uid,))).rowcount
            removed += (await conn.execute("DELETE FROM consolidated WHERE user_id=%s", (uid,))).rowcount
            await conn.execute("DELETE FROM contributors WHERE user_id=%s", (uid,))
            removed += (await conn.execute("DELETE FROM applied_batches WHERE user_id=%s", (uid,))).rowcount
            sessions: dict[tuple[str, str], list[int | None]] = {}
            for _, _, part, session_id, seq in victims:
                if session_id and seq is not None:
                    sessions.setdefault((part, dec(session_id) or ""), []).append(seq)
            for (part, session_id), seqs in sessions.items():
                await run(conn, core.refresh_context(self._d, part, session_id, seqs))
            for part in sorted({v[2] for v in victims}):
                left = await self._one(conn, "SELECT 1 FROM facts WHERE partition=%s LIMIT 1", (part,))
                if left is None:
                    await conn.execute("DELETE FROM partitions WHERE partition=%s", (part,))
                    await conn.execute("DELETE FROM authors WHERE partition=%s", (part,))
                else:
                    await conn.execute("UPDATE partitions SET changes = changes + 1 WHERE partition=%s", (part,))
                    await conn.execute(
                        "DELETE FROM authors WHERE partition=%s AND author NOT IN"
                        " (SELECT author FROM facts WHERE partition=%s AND author IS NOT NULL)",
                        (part, part),
                    )
            await conn.execute("UPDATE meta SET value = (CAST(value AS BIGINT) + 1)::text WHERE key='generation'")
        await self._scrub(reindex=bool(victims))
        return int(removed)

    @staticmethod
    async def _drop_blob(conn: Conn, blob_id: str) -> int:
        """Delete a consolidated blob and mark its scope's remaining reflections unabsorbed, so
        the next consolidation rebuilds the blob from them."""
        row = await PgFactStore._one(
            conn, "SELECT scope, agent_id, user_id, session_id FROM consolidated WHERE id=%s", (blob_id,)
        )
        await conn.execute("DELETE FROM contributors WHERE kind='blob' AND item_id=%s", (blob_id,))
        if row is None:
            return 0
        scope, agent_id, user_id, session_id = (row[0], *(v or None for v in row[1:]))
        where = "scope=%s AND agent_id IS NOT DISTINCT FROM %s AND user_id IS NOT DISTINCT FROM %s"
        args: list[Any] = [scope, agent_id, user_id]
        if scope == "session":
            where += " AND session_id IS NOT DISTINCT FROM %s"
            args.append(session_id)
        await conn.execute(f"UPDATE reflections SET absorbed=FALSE WHERE {where}", args)
        return int((await conn.execute("DELETE FROM consolidated WHERE id=%s", (blob_id,))).rowcount)

    async def _scrub(self, *, reindex: bool) -> None:
        """After a purge: vacuum the tables it deleted from and, when facts went, rebuild the
        keyword index (best effort: a failure is logged, never raised; the purge committed).

        One replica scrubs a schema at a time (a session advisory lock, waited for by polling:
        a scrub that started before this purge committed may not have seen its deletions), and
        every wait is bounded, so ``forget`` cannot hang behind a long transaction.
        """
        key = lock_key(self.db.schema, "\x00scrub")  # partition keys are percent-encoded: no clash
        try:
            async with self.db.connection() as conn:
                await conn.execute(f"SET lock_timeout = '{SCRUB_LOCK_TIMEOUT_S}s'")
                try:
                    await self._scrub_lock(conn, key)
                    try:
                        # copies an interrupted concurrent rebuild left behind (invalid, still written to)
                        await conn.execute("DROP INDEX CONCURRENTLY IF EXISTS facts_tsv_ccnew")
                        await conn.execute("DROP INDEX CONCURRENTLY IF EXISTS facts_tsv_ccold")
                        await conn.execute(
                            f"VACUUM {'FULL ' if self.purge_rewrite else ''}facts, history, reflections,"
                            " consolidated, contributors, applied_batches, partitions, authors"
                        )
                        if reindex and not self.purge_rewrite:  # a rewrite rebuilt every index
                            await conn.execute("REINDEX INDEX CONCURRENTLY facts_tsv")
                    finally:
                        await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                finally:
                    await conn.execute("RESET lock_timeout")
        except (psycopg.Error, TimeoutError) as exc:
            log.warning(
                "memlane: cleaning up after forget failed (%s); autovacuum reclaims the rows, and the"
                " keyword index keeps the deleted words as keys until the next forget rebuilds it",
                (exc.diag.message_primary if isinstance(exc, psycopg.Error) else None) or exc,
            )

    @staticmethod
    async def _scrub_lock(conn: Conn, key: int) -> None:
        """Take the scrub lock, polling: a session blocked in ``pg_advisory_lock`` holds a
        snapshot, and the holder's ``REINDEX CONCURRENTLY`` waits for every older snapshot:
        a deadlock. Between polls this session holds none."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SCRUB_LOCK_TIMEOUT_S
        delay = 0.01
        while True:
            got = await (await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))).fetchone()
            if got is not None and got[0]:
                return
            if loop.time() >= deadline:
                raise TimeoutError(f"another replica kept the scrub lock for {SCRUB_LOCK_TIMEOUT_S} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # ------------------------------------------------------------------ reads
    async def get_fact(self, fact_id: str, scope: Scope) -> Fact | None:
        """One fact if it is visible from ``scope`` (valid or not), with its vector, else None."""
        async with self._read() as conn:
            try:
                return row_to_fact(await self._visible_row(conn, fact_id, scope), with_embedding=True)
            except NotFoundError:
                return None

    async def get_facts(self, fact_ids: Sequence[str], scope: Scope) -> dict[str, Fact]:
        """Facts by id, only those visible from ``scope``."""
        if not fact_ids:
            return {}
        async with self._read() as conn:
            return await run(conn, reads.get_facts(self._d, fact_ids, scope))

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
        """Facts newest first, paginated by an opaque cursor; ``filter`` applied in the query."""
        program = reads.list_facts(
            self._d, scope, limit=limit, cursor=cursor, include_invalid=include_invalid, filter=filter, only=only
        )
        async with self._read() as conn:
            return await run(conn, program)

    async def history(self, fact_id: str, scope: Scope) -> list[HistoryEntry]:
        """All changes to a fact visible from ``scope``, oldest first."""
        async with self._read() as conn:
            return await run(conn, reads.history(self._d, fact_id, scope))

    async def authors(self, partitions: PartitionFilter) -> list[str]:
        """Distinct authors of verbatim memories in these partitions."""
        async with self._read() as conn:
            return await run(conn, reads.authors(self._d, partitions))

    async def memory_stamp(self, partitions: PartitionFilter) -> str:
        """A token that changes whenever a fact in these partitions is added, changed or
        removed (by any replica), and after a purge; reads counters only."""
        async with self._read() as conn:
            return await run(conn, reads.memory_stamp(self._d, partitions))

    async def stats(self, scope: Scope | None = None) -> StoreStats:
        """Fact counts (the whole store when ``scope`` is None: for operators, no content)."""
        async with self._read() as conn:
            return await run(conn, reads.stats(self._d, scope, embedder=self.embedder_name, dim=self.dim))

    # ------------------------------------------------------------------ health and export
    async def check(self) -> list[str]:
        """Integrity problems of this schema (empty when healthy). Reads only: invalid
        indexes (a failed index build), the vector column's type against the bound embedder,
        the HNSW index, and facts whose partition has no change counters."""
        problems: list[str] = []
        try:
            async with self.db.connection() as conn:
                for (name,) in await self._all(
                    conn,
                    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = current_schema() AND NOT i.indisvalid ORDER BY 1",
                ):
                    problems.append(f"index {name} is invalid (a failed build): REINDEX INDEX {name}")
                meta: dict[str, str] = dict(
                    await self._all(conn, "SELECT key, value FROM meta WHERE key IN ('dim', 'embedder')")
                )
                col = await self._one(
                    conn,
                    "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
                    " WHERE a.attrelid = 'facts'::regclass AND a.attname = 'embedding'",
                )
                coltype = col[0] if col else None
                if "dim" in meta:
                    want = f"vector({int(meta['dim'])})"
                    if coltype != want:
                        problems.append(f"facts.embedding is {coltype}, but the bound embedder makes {want}")
                    hnsw = await self._one(
                        conn,
                        "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema()"
                        " AND indexname = 'facts_embedding_hnsw'",
                    )
                    if hnsw is None and int(meta["dim"]) <= HNSW_MAX_DIM:
                        problems.append("the vector index facts_embedding_hnsw is missing")
                orphans = await self._one(
                    conn,
                    "SELECT COUNT(DISTINCT f.partition) FROM facts f"
                    " WHERE NOT EXISTS (SELECT 1 FROM partitions p WHERE p.partition = f.partition)",
                )
                if orphans and orphans[0]:
                    problems.append(f"{orphans[0]} partition(s) of facts have no change counters")
        except psycopg.Error as exc:
            problems.append(f"integrity check: {exc.diag.message_primary or exc}")
        return problems

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's facts (with history), reflections and blobs, and references (ids, never
        text) to the shared memories formed from their words: the SQLite store's export."""
        uid = enc(user_id)
        cols = (
            "id, content, scope, agent_id, user_id, session_id, kind, author, seq, occurred_at, formed_at,"
            " updated_at, access_count, version, source_event_ids, valid_from, invalid_at, metadata"
        )
        async with self._read() as conn:
            facts = await self._dicts(conn, f"SELECT {cols} FROM facts WHERE user_id=%s ORDER BY rowid", (uid,))
            own = {f["id"] for f in facts}
            for f in facts:
                f["history"] = await self._dicts(
                    conn,
                    "SELECT event, old_content, new_content, actor, at FROM history WHERE fact_id=%s"
                    " ORDER BY at, rowid",
                    (enc(f["id"]),),
                )
            # the user's changes to facts that are not theirs: what they said, not what was there
            changes = [
                r
                for r in await self._dicts(
                    conn,
                    "SELECT fact_id, event, new_content, actor, at FROM history WHERE user_id=%s ORDER BY at, rowid",
                    (uid,),
                )
                if r["fact_id"] not in own
            ]
            reflections = await self._dicts(
                conn,
                "SELECT id, content, scope, agent_id, user_id, session_id, absorbed, formed_at FROM reflections"
                " WHERE user_id=%s ORDER BY formed_at, id",
                (uid,),
            )
            blobs = await self._dicts(
                conn,
                "SELECT id, scope, agent_id, user_id, session_id, consolidated_content, word_limit, version,"
                " last_consolidated_at FROM consolidated WHERE user_id=%s ORDER BY scope, agent_id, session_id",
                (uid,),
            )
            own |= {r["id"] for r in reflections} | {b["id"] for b in blobs}
            shared: list[dict[str, Any]] = []
            for kind, item_id in await self._all(
                conn, "SELECT kind, item_id FROM contributors WHERE user_id=%s ORDER BY kind, item_id", (uid,)
            ):
                item = dec(item_id)
                if item in own:
                    continue
                table = {"fact": "facts", "reflection": "reflections", "blob": "consolidated"}.get(kind)
                ref: dict[str, Any] = {"kind": kind, "id": item, "scope": None, "agent_id": None}
                if table is not None:
                    row = await self._one(conn, f"SELECT scope, agent_id FROM {table} WHERE id=%s", (item_id,))
                    if row is not None:
                        ref["scope"], ref["agent_id"] = row[0], dec(row[1]) or None
                shared.append(ref)
        return {"facts": facts, "shared_changes": changes, "reflections": reflections, "consolidated": blobs,
                "shared": shared}  # fmt: skip

    @staticmethod
    async def _dicts(conn: Conn, query: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows as JSON-ready dicts: text decoded, timestamps as ISO strings (as SQLite stores them)."""
        cur = await conn.execute(query, args)
        names = [d.name for d in cur.description or ()]
        out = []
        for r in await cur.fetchall():
            out.append({n: _iso(dec_json(v)) for n, v in zip(names, r, strict=True)})
        return out
