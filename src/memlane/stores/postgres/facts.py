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
from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg

from memlane.errors import (
    InvalidInputError,
)
from memlane.models import PartitionFilter
from memlane.stores.embedding import check_binding
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.dialect import lock_key, pg_sql
from memlane.stores.postgres.reflections import PgReflectionMixin
from memlane.stores.postgres.rows import (
    Conn,
    dec,
    dec_json,
    enc,
)
from memlane.stores.postgres.search import PgSearchMixin, partitions_now_sql
from memlane.stores.sql.proposals import export_proposals
from memlane.stores.sql.reflections import export_versions
from memlane.stores.sql.stmt import ALL, ONE, Program, Stmt, drive_async
from memlane.stores.sql.store import SqlFactStore

__all__ = ["HNSW_MAX_DIM", "PgFactStore"]

log = logging.getLogger("memlane")

T = TypeVar("T")

#: pgvector's HNSW index holds ``vector`` columns of at most this many dimensions; larger
#: embeddings are searched by exact scan.
HNSW_MAX_DIM = 2000

#: pgvector's largest ``vector`` dimension.
VECTOR_MAX_DIM = 16_000

#: How long the keyword-index rebuild after a purge waits for older transactions.
SCRUB_LOCK_TIMEOUT_S = 60


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class PgFactStore(PgSearchMixin, PgReflectionMixin, SqlFactStore):
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
        """Write pending access counts, then release the database reference (once: closing
        again does nothing)."""
        if self._closed:
            return
        await self._close_access()
        self._closed = True
        await self.db.release()

    # ------------------------------------------------------------------ plumbing
    async def _ready(self) -> None:
        """Nothing to load: the binding is read on open and by :meth:`bind_embedder`."""

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

    async def _scoped_query(self, pf: PartitionFilter, read: Callable[[list[str]], Program[T]]) -> T:
        """The core's scoped reads (``get_facts``, ``authors``) in one statement each once a
        user's partitions are known (remembered per prefix, as search does): each statement of
        ``read`` is wrapped to also read the prefixes' partitions afresh
        (:func:`~memlane.stores.postgres.search.partitions_now_sql`), and ``read`` runs again
        when they changed (a new agent of the user), at most three times."""
        if not pf.prefixes:  # exact partitions only: nothing to resolve
            return await self._query(read(list(pf.exact)))
        now_sql, now_named = partitions_now_sql(pf)
        now_q = now_sql
        now_args: list[Any] = []
        for name in sorted(now_named, key=lambda n: now_sql.index(f"%({n})s")):
            now_q = now_q.replace(f"%({name})s", "?")
            now_args.append(now_named[name])
        async with self._read() as conn:
            result: T
            for _ in range(3):
                parts = await self._partitions(conn, pf)
                seen: list[Sequence[str] | None] = []

                async def execute(stmt: Stmt, seen: list[Sequence[str] | None] = seen) -> Any:
                    if stmt.fetch not in (ALL, ONE):
                        raise AssertionError(f"a scoped read sent a {stmt.fetch} statement")
                    wrapped = (
                        f"SELECT {now_q}, x.* FROM (SELECT 1) one"
                        f" LEFT JOIN LATERAL (SELECT true, y.* FROM ({stmt.sql}) y) x ON true"
                    )
                    cur = await conn.execute(pg_sql(wrapped), [*now_args, *stmt.args])
                    rows = [tuple(r) for r in await cur.fetchall()]
                    seen.append(rows[0][0])
                    out = [r[2:] for r in rows if r[1] is not None]  # r[1]: NULL on the one row of no match
                    return out if stmt.fetch == ALL else (out[0] if out else None)

                result = await drive_async(read(parts), execute)
                if not seen:  # no partition known: did one appear?
                    row = await self._one(conn, pg_sql(f"SELECT {now_q}"), now_args)
                    seen.append(row[0] if row else None)
                if all(self._confirm(pf, now) for now in seen):
                    break
        return result

    authors_cached = True  # every keyword search refreshes them (PgSearchMixin._cached_authors)

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
                    # ALTER TYPE resets the storage to the type's (pgvector: EXTERNAL); MAIN keeps
                    # vectors in the row for exact scans, as migration 0005_vectors_inline set it
                    await conn.execute("ALTER TABLE facts ALTER COLUMN embedding SET STORAGE MAIN")
                    # long texts' further windows (issue 22), typed, stored and indexed alike
                    await conn.execute(f"ALTER TABLE fact_windows ALTER COLUMN embedding TYPE vector({int(dim)})")
                    await conn.execute("ALTER TABLE fact_windows ALTER COLUMN embedding SET STORAGE MAIN")
                    if dim <= HNSW_MAX_DIM:
                        await conn.execute(
                            "CREATE INDEX IF NOT EXISTS facts_embedding_hnsw ON facts"
                            " USING hnsw (embedding vector_cosine_ops)"
                        )
                        await conn.execute(
                            "CREATE INDEX IF NOT EXISTS fact_windows_hnsw ON fact_windows"
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

    # ------------------------------------------------------------------ writes
    @property
    def _access_key(self) -> Hashable:
        """The database and schema."""
        return ("pg", self.db.url, self.db.schema)

    async def _write_access(self, counts: dict[str, int], done: Callable[[Iterable[str]], None]) -> None:
        """Every pending increment in one ``UPDATE`` of the rows no writer holds; then each row
        a writer holds right now on its own (never holding one row's lock while waiting for
        another's: that writer may want this one, a deadlock), each statement its own
        transaction. Readers of the first rows wait for the first statement only."""
        ids = list(counts)
        encoded = [enc(i) for i in ids]
        async with self._read() as conn:
            cur = await conn.execute(
                "UPDATE facts f SET access_count = f.access_count + v.n"
                " FROM unnest(%s::text[], %s::int[]) v(id, n) WHERE f.id = v.id AND f.rowid IN"
                " (SELECT rowid FROM facts WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED) RETURNING f.id",
                (encoded, [counts[i] for i in ids], encoded),
            )
            updated = {r[0] for r in await cur.fetchall()}
            done(i for i, e in zip(ids, encoded, strict=True) if e in updated)
            for fid, e in zip(ids, encoded, strict=True):
                if e not in updated:
                    await conn.execute(
                        "UPDATE facts SET access_count = access_count + %s WHERE id = %s", (counts[fid], e)
                    )
                    done([fid])

    # ------------------------------------------------------------------ erasure
    async def _after_purge(self, partitions: list[str], any_fact: bool) -> None:
        """After ``purge_user`` (as SQLite merges its keyword index and truncates its WAL): the
        touched tables are vacuumed, and the keyword index is rebuilt (``REINDEX INDEX
        CONCURRENTLY facts_tsv``: a GIN index keeps a deleted row's words as keys until it is
        rebuilt; the rebuild blocks neither reads nor writes). The vacuum takes the deleted
        rows out of the indexes only when they sat on at least 2% of the table's pages: below
        that PostgreSQL skips the index pass ("index scan bypassed"), and their entries (the
        HNSW index's hold the vectors) stay until a later vacuum's index pass. Both the rebuild
        and an index pass cost time proportional to the table, not the user (docs/benchmarks.md,
        issue 19 round 2). Vacuum does not zero the space it frees, so
        bytes of deleted rows can stay in the table files until new rows overwrite them; with
        ``purge_rewrite=True`` the tables are rewritten instead (``VACUUM FULL``), which takes
        them out of the files but locks the tables meanwhile. All of this is best effort: a
        failure is logged, and autovacuum and the next purge catch up. PostgreSQL's WAL,
        standbys and backups keep old pages until they are recycled: the operator's retention.
        """
        self._search_cache().authors.clear()  # no forgotten speaker's name kept here
        await self._scrub(reindex=any_fact)

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
                            " consolidated, consolidated_versions, contributors, applied_batches, partitions,"
                            " authors, proposals"
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
                stray = await self._one(
                    conn,
                    "SELECT COUNT(*) FROM fact_windows w"
                    " WHERE NOT EXISTS (SELECT 1 FROM facts f WHERE f.id = w.fact_id)",
                )
                if stray and stray[0]:
                    problems.append(f"{stray[0]} window vector(s) of fact_windows belong to no fact")
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
        await self.settle_access()
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
        return {
            "facts": facts,
            "shared_changes": changes,
            "reflections": reflections,
            "consolidated": blobs,
            "shared": shared,
            "proposals": await self._query(export_proposals(self._d, user_id)),
            "consolidated_versions": await self._query(export_versions(self._d, user_id)),
        }

    @staticmethod
    async def _dicts(conn: Conn, query: str, args: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows as JSON-ready dicts: text decoded, timestamps as ISO strings (as SQLite stores them)."""
        cur = await conn.execute(query, args)
        names = [d.name for d in cur.description or ()]
        out = []
        for r in await cur.fetchall():
            out.append({n: _iso(dec_json(v)) for n, v in zip(names, r, strict=True)})
        return out
