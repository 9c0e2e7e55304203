"""Fact-store search latency: PostgreSQL + pgvector against SQLite on the same data, side by side.

Run::

    .venv/bin/python bench/pg_search.py --quick                       # smoke run (< 2 min)
    .venv/bin/python bench/pg_search.py --cases single-100k,users-1m  # what docs/benchmarks.md records

The PostgreSQL server is started with :func:`memlane.devserver.start_postgres` in
``<workdir>/pg`` (PostgreSQL 16 + pgvector 0.6.2 from the pgserver wheel) unless ``--pg URL``
names one. Each case gets its own schema (``?schema=bench_<case>``) and its own SQLite file in
``--workdir`` (default ``/tmp/memlane-bench``), never in the repository; ``--reuse`` reuses a
case loaded earlier with the same parameters (both stores), ``--keep`` keeps them afterwards.

Cases
-----
* ``single-<N>``: N memories in ONE partition (one user's memory; an agent's shared
  knowledge is the same shape: one big partition, where the vector index matters).
* ``users-<N>``: N memories over N/1000 users (1,000 each) in one store; every query searches
  one random user's partition.

Data (identical in both stores)
-------------------------------
Texts come from the generator of ``bench/search_latency.py`` (``TextGen``: ~25 chat-memory
sentence templates, Zipfian word lists, 15-30 words), all generated (no text pool), seeded per
case. Memories are chat turns: sessions of 20 turns (alternating authors, one date per session,
``seq`` set), ``kind="message"``, so both stores index the neighbouring turns. Ids and hashes
are deterministic, so the two stores hold the same ids. Vectors: memlane's ``hash:384``
feature-hashing embedder (384 dimensions, the size of MiniLM's vectors; captures word overlap,
not meaning), also used for the queries, so a query costs ~0.1 ms to embed and the figures
are the stores' and the engine's own cost.

Loading: ``FactStore.put_facts`` in batches of 5,000 (one transaction each) in both stores,
users' sessions interleaved over time (one user's rows are spread over the table). On
PostgreSQL ``bind_embedder`` (called by ``AsyncMemory.open``) types the column and builds the
HNSW index; with ``--pg-load bulk`` (the default) that index is dropped before the load and
rebuilt after it with the exact definition ``bind_embedder`` created (``pg_indexes.indexdef``),
what one does for any bulk load into PostgreSQL; ``--pg-load api`` keeps it during the load.
Then ``ANALYZE``. The index build time is reported separately.

Measured, per case, with both stores open in this one process and every query run on both
stores back to back (the store that goes first alternates from query to query):

* ``keyword``: ``facts.keyword_search(partitions, terms, limit=depth)`` (terms from the query
  as the engine parses them);
* ``vector``: ``facts.vector_search(partitions, query vector, limit=depth)``;
* ``search``: ``AsyncMemory.search(query, user_id=..., top_k=10)``: keyword + query embedding
  + vector + RRF fusion + fetch, the whole engine path;
* the first search of a partition (SQLite loads the partition's vectors into memory then),
  for up to 20 partitions; every timed query is preceded by one untimed ``search`` of the
  same user on the same store, so the three timed operations find the user's rows warm;
* vector recall@10 of each store against exact top-10 (numpy over the partition's vectors,
  ties counted), and the overlap of the two stores' top-10 ids for keyword and for search.

Queries: half questions from templates filled with the same Zipfian word lists, half built
from 2-4 content words of one random memory of the target user (so they have real matches).
Results: a table on stdout, JSON in ``bench/results/pg_search.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import asyncio  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import SharedEmbedder, db_size_mb, log, remove_db  # noqa: E402

from memlane import AsyncMemory  # noqa: E402
from memlane.models import Fact, Scope  # noqa: E402
from memlane.registry import make_embedder  # noqa: E402
from memlane.retrieval.text import parse_query  # noqa: E402

ROOT = Path(__file__).resolve().parent
BATCH = 5000
SESSION_LEN = 20
PER_USER = 1000
EMBEDDER = "hash:384"


def _textgen(seed: int) -> Any:
    """``TextGen`` of bench/search_latency.py (that module parses its own command line on
    import, so it is imported with an empty one)."""
    saved = sys.argv
    sys.argv = [saved[0]]
    try:
        import search_latency
    finally:
        sys.argv = saved
    return search_latency.TextGen(seed)


# ------------------------------------------------------------------------------ data
class CaseData:
    """The memories of one case: users, texts, vectors, ids; the same for both stores."""

    def __init__(self, name: str, seed: int) -> None:
        kind, _, size = name.partition("-")
        total = parse_size(size)
        if kind == "single":
            n_users, per_user = 1, total
        elif kind == "users":
            if total % PER_USER:
                raise SystemExit(f"{name}: users-N needs N a multiple of {PER_USER}")
            n_users, per_user = total // PER_USER, PER_USER
        else:
            raise SystemExit(f"unknown case {name!r} (single-N or users-N)")
        self.name, self.n_users, self.per_user, self.total = name, n_users, per_user, total
        self.seed = seed + zlib.crc32(name.encode())
        self.tag = f"{zlib.crc32(name.encode()):08x}"
        self.users = [f"{name}-user{u:05d}" for u in range(n_users)]
        t = time.perf_counter()
        gen = _textgen(self.seed)
        # texts[u * per_user + j]: memory j of user u
        self.texts = [gen.sentence() for _ in range(total)]
        self.gen_s = time.perf_counter() - t
        self.qgen = _textgen(self.seed + 99)
        self.vectors: np.ndarray = np.empty((0, 0), dtype=np.float32)

    def fact_id(self, u: int, j: int) -> str:
        return f"{self.tag}{u:08x}{j:016x}"

    def row_of(self, fact_id: str) -> int:
        return int(fact_id[8:16], 16) * self.per_user + int(fact_id[16:], 16)

    async def embed(self, embedder: Any) -> float:
        t = time.perf_counter()
        parts = [await embedder.embed_batch(self.texts[i : i + 20000]) for i in range(0, self.total, 20000)]
        self.vectors = np.ascontiguousarray(np.concatenate(parts).astype(np.float32))
        return time.perf_counter() - t

    def batches(self) -> Any:
        """Yield (facts, vectors) batches of whole sessions, users interleaved over time."""
        rng = np.random.default_rng(self.seed)
        base = datetime(2023, 1, 2, 10, 0, tzinfo=UTC)
        n_sessions = -(-self.per_user // SESSION_LEN)
        facts: list[Fact] = []
        rows: list[int] = []
        for s in range(n_sessions):
            for u in range(self.n_users):
                lo, hi = s * SESSION_LEN, min(self.per_user, (s + 1) * SESSION_LEN)
                when = base + timedelta(days=3 * s + int(rng.integers(0, 3)), minutes=int(rng.integers(0, 600)))
                sid = f"{self.users[u]}:s{s}"
                for j in range(lo, hi):
                    row = u * self.per_user + j
                    facts.append(
                        Fact(
                            id=self.fact_id(u, j),
                            content=self.texts[row],
                            user_id=self.users[u],
                            session_id=sid,
                            kind="message",
                            author="user" if j % 2 == 0 else "assistant",
                            seq=j - lo,
                            occurred_at=when + timedelta(minutes=j - lo),
                            hash=f"h{self.tag}-{u}-{j}",
                        )
                    )
                    rows.append(row)
                if len(facts) >= BATCH:
                    yield facts, self.vectors[rows]
                    facts, rows = [], []
        if facts:
            yield facts, self.vectors[rows]

    def queries(self, n: int) -> list[tuple[str, int]]:
        """(query text, user index): half template questions, half recall questions."""
        rng = np.random.default_rng(self.seed + 5)
        out = []
        for i in range(n):
            u = int(rng.integers(self.n_users))
            if i % 2 == 0:
                q = self.qgen.question()
            else:
                q = self.qgen.recall_question(self.texts[u * self.per_user + int(rng.integers(self.per_user))])
            out.append((q, u))
        return out


def parse_size(s: str) -> int:
    s = s.lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


# ------------------------------------------------------------------------------ helpers
def summary(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0}
    return {
        "n": len(xs),
        "p50": round(float(np.percentile(xs, 50)), 3),
        "p95": round(float(np.percentile(xs, 95)), 3),
        "mean": round(float(np.mean(xs)), 3),
        "max": round(float(max(xs)), 3),
    }


async def pg_exec(url: str, schema: str, statements: list[str]) -> list[Any]:
    """Run statements on one connection in ``schema`` (autocommit); return the last rows of each."""
    import psycopg

    out: list[Any] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"SET search_path TO {schema}, public")
        for st in statements:
            cur = await conn.execute(st)
            out.append(await cur.fetchall() if cur.description else None)
    return out


async def pg_sizes(url: str, schema: str) -> dict[str, float]:
    """MB on disk: every table of the schema with its indexes and TOAST, and the facts parts."""
    rows = (
        await pg_exec(
            url,
            schema,
            [
                "SELECT c.relname, c.relkind, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON "
                f"n.oid = c.relnamespace WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'i')"
            ],
        )
    )[0]
    out = {"total_mb": round(sum(size for _, kind, size in rows if kind == "r") / 1e6, 1)}
    for name, kind, size in rows:
        if name == "facts" or (kind == "i" and ("hnsw" in name or "embedding" in name or name == "facts_tsv")):
            out[f"{name}_mb"] = round(size / 1e6, 1)
    return out


async def pg_hot(url: str, schema: str) -> tuple[int, int]:
    """``facts``' updates and HOT updates so far (``pg_stat_user_tables``)."""
    q = f"SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = '{schema}' AND relname = 'facts'"
    row = (await pg_exec(url, "public", [q]))[0][0]
    return int(row[0]), int(row[1])


async def hnsw_indexes(url: str, schema: str) -> list[tuple[str, str]]:
    rows = (
        await pg_exec(
            url,
            schema,
            [f"SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = '{schema}' AND indexdef ILIKE '%hnsw%'"],
        )
    )[0]
    return [(r[0], r[1]) for r in rows]


# ------------------------------------------------------------------------------ loading
async def load_store(mem: AsyncMemory, data: CaseData, label: str) -> dict[str, float]:
    t0 = time.perf_counter()
    done, next_log = 0, 30.0
    for facts, vecs in data.batches():
        await mem.facts.put_facts(facts, vecs)
        done += len(facts)
        el = time.perf_counter() - t0
        if el > next_log:
            log(f"  {label}: loaded {done}/{data.total} ({done / el:.0f} rows/s)")
            next_log = el + 30
    secs = time.perf_counter() - t0
    return {"load_s": round(secs, 1), "rows_per_s": round(data.total / secs, 1)}


FACT_COPY_COLS = (
    "id, partition, content, hash, scope, agent_id, user_id, session_id, kind, author, seq, occurred_at,"
    " formed_at, updated_at, access_count, version, source_event_ids, valid_from, invalid_at, metadata,"
    " embedding, search_text, ctx, date_words"
)
FACT_COPY_TYPES = [
    *["text"] * 10,
    "int4",
    *["timestamptz"] * 3,
    "int4",
    "int4",
    "jsonb",
    "timestamptz",
    "timestamptz",
    "jsonb",
    "vector",
    "text",
    "text",
    "text",
]


async def bulk_load_pg(url: str, schema: str, data: CaseData, label: str = "pg bulk") -> dict[str, float]:
    """Write the rows ``PgFactStore.put_facts`` would write, with ``COPY`` instead of five
    statements per row: ``facts`` (the same column values, computed with the store's own
    helpers: ``enc``, ``_search_text``, ``date_words``, ``neighbour_context``), one ``ADD``
    ``history`` row per fact, ``partitions`` and ``authors``. :func:`check_bulk` compares the
    result with ``put_facts``'s on a sample; the script refuses to run when they differ."""
    import psycopg
    from pgvector.psycopg import register_vector_async
    from psycopg.types.json import Jsonb

    from memlane.models import new_id, utcnow
    from memlane.retrieval.context import neighbour_context
    from memlane.retrieval.text import date_words
    from memlane.stores.postgres.rows import enc, enc_json
    from memlane.stores.sql.facts import search_text as _search_text

    t0 = time.perf_counter()
    done, next_log = 0, 30.0
    parts: set[str] = set()
    authors: set[tuple[str, str]] = set()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"SET search_path TO {schema}, public")
        await register_vector_async(conn)
        for facts, vecs in data.batches():
            now = utcnow()
            by_session: dict[tuple[str, str | None], dict[int, str]] = {}
            for f in facts:
                if f.seq is not None:
                    by_session.setdefault((f.partition, f.session_id), {})[f.seq] = enc(f.content) or ""
            async with conn.transaction():
                async with conn.cursor().copy(f"COPY facts ({FACT_COPY_COLS}) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.set_types(FACT_COPY_TYPES)
                    for f, vec in zip(facts, vecs, strict=True):
                        part = f.partition
                        ctx = neighbour_context(by_session[(part, f.session_id)], f.seq) if f.seq is not None else ""
                        await cp.write_row(
                            (
                                enc(f.id),
                                part,
                                enc(f.content),
                                f.hash,
                                f.scope,
                                enc(f.agent_id),
                                enc(f.user_id),
                                enc(f.session_id),
                                f.kind,
                                enc(f.author),
                                f.seq,
                                f.occurred_at,
                                f.formed_at,
                                f.updated_at,
                                f.access_count,
                                f.version,
                                Jsonb(enc_json(f.source_event_ids)),
                                f.valid_from,
                                f.invalid_at,
                                Jsonb(enc_json(f.metadata)),
                                vec,
                                enc(_search_text(f.kind, f.content)),
                                ctx,
                                date_words(f.occurred_at),
                            )
                        )
                        parts.add(part)
                        if f.author:
                            authors.add((part, enc(f.author) or ""))
                cols = "id, fact_id, user_id, event, old_content, new_content, actor, at"
                async with conn.cursor().copy(f"COPY history ({cols}) FROM STDIN") as cp:
                    for f in facts:
                        await cp.write_row(
                            (new_id(), enc(f.id), enc(f.user_id), "ADD", None, enc(f.content), "api", now)
                        )
            done += len(facts)
            el = time.perf_counter() - t0
            if el > next_log:
                log(f"  {label}: loaded {done}/{data.total} ({done / el:.0f} rows/s)")
                next_log = el + 30
        async with conn.transaction():
            await conn.cursor().executemany(
                "INSERT INTO partitions (partition, appends) VALUES (%s, 1)"
                " ON CONFLICT (partition) DO UPDATE SET appends = partitions.appends + 1",
                [(p,) for p in sorted(parts)],
            )
            await conn.cursor().executemany(
                "INSERT INTO authors (partition, author) VALUES (%s, %s) ON CONFLICT DO NOTHING", sorted(authors)
            )
    secs = time.perf_counter() - t0
    return {"load_s": round(secs, 1), "rows_per_s": round(data.total / secs, 1)}


COMPARE_SQL = [
    "SELECT id, partition, content, hash, scope, agent_id, user_id, session_id, kind, author, seq, occurred_at,"
    " access_count, version, source_event_ids, invalid_at, metadata, embedding::text, search_text, ctx, date_words,"
    " tsv::text FROM facts ORDER BY rowid",
    "SELECT fact_id, user_id, event, old_content, new_content, actor FROM history ORDER BY rowid",
    "SELECT partition FROM partitions ORDER BY partition",
    "SELECT partition, author FROM authors ORDER BY partition, author",
]


async def check_bulk(url: str, embedder: Any, seed: int, case: str = "users-2k") -> dict[str, Any]:
    """Load one small case through ``put_facts`` and through :func:`bulk_load_pg` into two
    schemas and compare every stored column (facts, history, partitions, authors); timestamps
    set at write time (``formed_at``, ``updated_at``, ``valid_from``, history ``at``) and
    history ids are left out (they are "now" / random)."""
    data = CaseData(case, seed)
    await data.embed(embedder)
    a, b = "bench_check_api", "bench_check_bulk"
    await pg_exec(url, "public", [f"DROP SCHEMA IF EXISTS {a} CASCADE", f"DROP SCHEMA IF EXISTS {b} CASCADE"])
    mem_a = await open_pg(url, a, embedder)
    api = await load_store(mem_a, data, "check api")
    await mem_a.close()
    mem_b = await open_pg(url, b, embedder)
    await mem_b.close()
    bulk = await bulk_load_pg(url, b, data, "check bulk")
    ra = await pg_exec(url, a, COMPARE_SQL)
    rb = await pg_exec(url, b, COMPARE_SQL)
    same = {name: x == y for name, x, y in zip(("facts", "history", "partitions", "authors"), ra, rb, strict=True)}
    await pg_exec(url, "public", [f"DROP SCHEMA {a} CASCADE", f"DROP SCHEMA {b} CASCADE"])
    out = {"case": case, "rows": data.total, "identical": same, "put_facts": api, "bulk": bulk}
    log(f"bulk check: {out}")
    if not all(same.values()):
        raise SystemExit(f"the bulk path does not write what put_facts writes: {same}")
    return out


async def open_pg(url: str, schema: str, embedder: Any) -> AsyncMemory:
    return await AsyncMemory(f"{url}?schema={schema}", embedder=SharedEmbedder(embedder), sessions="null").open()


async def prepare(
    data: CaseData, sqlite_path: Path, pg_url: str | None, schema: str, embedder: Any, args: argparse.Namespace
) -> tuple[dict[str, AsyncMemory], dict[str, Any]]:
    """The case's stores (``--stores``), loaded or reused; returns (stores by name, load info)."""
    meta_path = sqlite_path.with_suffix(".load.json")
    info: dict[str, Any] = json.loads(meta_path.read_text()) if args.reuse and meta_path.exists() else {}
    stores: dict[str, AsyncMemory] = {}
    wanted = args.stores.split(",")
    if "sqlite" in wanted:
        if args.reuse and sqlite_path.exists() and "sqlite" in info:
            log(f"{data.name}: reusing {sqlite_path}")
            stores["sqlite"] = await AsyncMemory(sqlite_path, embedder=SharedEmbedder(embedder), sessions="null").open()
            info["sqlite"]["reused"] = True
        else:
            remove_db(sqlite_path)
            log(f"{data.name}: loading SQLite {sqlite_path}")
            sq = await AsyncMemory(sqlite_path, embedder=SharedEmbedder(embedder), sessions="null").open()
            info["sqlite"] = await load_store(sq, data, "sqlite")
            sq.facts.database.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[attr-defined]
            info["sqlite"]["db_mb"] = round(db_size_mb(sqlite_path), 1)
            log(f"  sqlite: {info['sqlite']}")
            stores["sqlite"] = sq
            meta_path.write_text(json.dumps(info))
    if "pg" in wanted:
        assert pg_url is not None
        exists = (await pg_exec(pg_url, "public", [f"SELECT to_regclass('{schema}.facts') IS NOT NULL"]))[0][0][0]
        count = (await pg_exec(pg_url, schema, ["SELECT count(*) FROM facts"]))[0][0][0] if exists else -1
        if args.reuse and count == data.total and "pg" in info:
            log(f"{data.name}: reusing schema {schema}")
            stores["pg"] = await open_pg(pg_url, schema, embedder)
            info["pg"]["reused"] = True
        else:
            await pg_exec(pg_url, "public", [f"DROP SCHEMA IF EXISTS {schema} CASCADE"])
            log(f"{data.name}: loading PostgreSQL schema {schema} ({args.pg_load})")
            t = time.perf_counter()
            pg = await open_pg(pg_url, schema, embedder)
            if args.pg_fillfactor:  # the proposed migration, on a new store: pages keep room for HOT updates
                await pg_exec(pg_url, schema, [f"ALTER TABLE facts SET (fillfactor = {int(args.pg_fillfactor)})"])
            pinfo: dict[str, Any] = {"open_bind_s": round(time.perf_counter() - t, 2), "load_path": args.pg_load}
            indexes = await hnsw_indexes(pg_url, schema)
            pinfo["hnsw_indexes"] = [d for _, d in indexes]
            if args.pg_load == "bulk" and indexes:
                await pg_exec(pg_url, schema, [f"DROP INDEX {name}" for name, _ in indexes])
            if args.pg_load == "bulk":
                pinfo.update(await bulk_load_pg(pg_url, schema, data))
            else:
                pinfo.update(await load_store(pg, data, "pg"))
            if args.pg_load == "bulk" and indexes:
                t = time.perf_counter()
                mwm = f"SET maintenance_work_mem = '{args.maintenance_work_mem}'"
                await pg_exec(pg_url, schema, [mwm, *[d for _, d in indexes]])
                pinfo["hnsw_build_s"] = round(time.perf_counter() - t, 1)
                pinfo["maintenance_work_mem"] = args.maintenance_work_mem
                log(f"  pg: HNSW index rebuilt in {pinfo['hnsw_build_s']} s")
            t = time.perf_counter()
            await pg_exec(pg_url, schema, ["VACUUM ANALYZE facts"])
            pinfo["vacuum_analyze_s"] = round(time.perf_counter() - t, 1)
            pinfo["sizes"] = await pg_sizes(pg_url, schema)
            log(f"  pg: {pinfo}")
            info["pg"] = pinfo
            stores["pg"] = pg
            meta_path.write_text(json.dumps(info))
    return stores, info


# ------------------------------------------------------------------------------ measuring
def exact_top(data: CaseData, u: int, qv: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """Exact scores over user u's rows and the k-th best score."""
    mat = data.vectors[u * data.per_user : (u + 1) * data.per_user]
    scores = mat @ qv
    kth = float(np.partition(-scores, k - 1)[k - 1] * -1)
    return scores, kth


def recall_at(ids: list[str], data: CaseData, u: int, scores: np.ndarray, kth: float, k: int) -> float:
    hits = 0
    for fid in ids[:k]:
        row = data.row_of(fid) - u * data.per_user
        if 0 <= row < data.per_user and scores[row] >= kth - 1e-5:
            hits += 1
    return hits / k


def overlap(a: list[str], b: list[str]) -> float:
    if not a and not b:
        return 1.0
    return len(set(a) & set(b)) / max(len(a), len(b))


async def count_statements(mem: AsyncMemory, query: str, user: str) -> dict[str, int]:
    """SQL statements one ``search`` sends (each a round trip to the server), by kind: every
    ``execute``, and BEGIN + COMMIT for each ``transaction()``; the access-count write runs
    after the search returned (in the background) and is not counted. Run twice, the second counted
    (the first resolves the user's partitions; the store remembers them)."""
    import psycopg

    counts: dict[str, int] = {}
    original, transaction = psycopg.AsyncCursor.execute, psycopg.AsyncConnection.transaction

    def setup() -> bool:  # the pool opening or checking a connection: not the search's statements
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_name in ("_configure", "check_connection", "_usable"):
                counts["(pool: connection set-up or check)"] = counts.get("(pool: connection set-up or check)", 0) + 1
                return True
            frame = frame.f_back  # type: ignore[assignment]
        return False

    async def counting(self: Any, q: Any, *a: Any, **k: Any) -> Any:
        if not setup():
            key = " ".join(str(q).split()[:4])[:60]
            counts[key] = counts.get(key, 0) + 1
        return await original(self, q, *a, **k)

    def counting_tx(self: Any, *a: Any, **k: Any) -> Any:
        if not setup():
            counts["BEGIN + COMMIT"] = counts.get("BEGIN + COMMIT", 0) + 2
        return transaction(self, *a, **k)

    await mem.search(query, user_id=user, top_k=10)
    await mem.facts.settle_access()  # the first search's access counts written before counting
    psycopg.AsyncCursor.execute = counting  # type: ignore[method-assign]
    psycopg.AsyncConnection.transaction = counting_tx  # type: ignore[method-assign]
    try:
        await mem.search(query, user_id=user, top_k=10)
    finally:
        psycopg.AsyncCursor.execute = original  # type: ignore[method-assign]
        psycopg.AsyncConnection.transaction = transaction  # type: ignore[method-assign]
    pool = counts.get("(pool: connection set-up or check)", 0)
    return {"total": sum(counts.values()) - pool, **counts}


async def explain_pg(
    mem: AsyncMemory, url: str, schema: str, pf: Any, terms: list[str], qv: np.ndarray, depth: int
) -> dict[str, list[str]]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the statements the store's ``keyword_search`` and
    ``vector_search`` send for one query: they are captured as the store sends them, then
    replayed in one transaction, each search's statements in order, the ones scoring rows
    (``ts_rank_cd`` / ``<=>``) explained."""
    import psycopg
    from pgvector.psycopg import register_vector_async

    captured: list[tuple[str, Any]] = []
    original = psycopg.AsyncCursor.execute

    async def capture(self: Any, q: Any, params: Any = None, *a: Any, **k: Any) -> Any:
        captured.append((q if isinstance(q, str) else q.as_string(self), params))
        return await original(self, q, params, *a, **k)

    plans: dict[str, list[str]] = {}
    psycopg.AsyncCursor.execute = capture  # type: ignore[method-assign]
    try:
        await mem.facts.keyword_search(pf, terms, limit=depth)
        kw = list(captured)
        captured.clear()
        await mem.facts.vector_search(pf, qv, limit=depth)
        vec = list(captured)
    finally:
        psycopg.AsyncCursor.execute = original  # type: ignore[method-assign]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"SET search_path TO {schema}, public")
        await register_vector_async(conn)
        for name, stmts in (("keyword", kw), ("vector", vec)):
            async with conn.transaction():
                for i, (q, params) in enumerate(stmts):
                    if "ts_rank_cd" in q or "<=>" in q:
                        cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + q, params)
                        plans[f"{name}_{i}"] = [str(r[0])[:300] for r in await cur.fetchall()]
                    else:
                        await conn.execute(q, params)
    return plans


async def measure(
    data: CaseData,
    stores: dict[str, AsyncMemory],
    embedder: Any,
    n_queries: int,
    warmup: int,
    pg_target: tuple[str, str] | None = None,
) -> dict[str, Any]:
    queries = data.queries(n_queries + warmup)
    texts = [q for q, _ in queries]
    qvecs = await embedder.embed_batch(texts)
    res: dict[str, Any] = {name: {} for name in stores}
    names = list(stores)
    depth = max(next(iter(stores.values())).retrieval.depth, 10)

    # first search of a partition, on each store (distinct users for users-N)
    first: dict[str, list[float]] = {n: [] for n in names}
    cold_users = list(range(min(data.n_users, 20)))
    for i, u in enumerate(cold_users):
        order = names if i % 2 == 0 else names[::-1]
        for n in order:
            t = time.perf_counter()
            await stores[n].search(data.qgen.question(), user_id=data.users[u], top_k=10)
            first[n].append((time.perf_counter() - t) * 1000)
    for n in names:
        res[n]["first_search_ms"] = summary(first[n])

    authors: dict[str, list[str]] = {}
    timings: dict[str, dict[str, list[float]]] = {n: {"keyword": [], "vector": [], "search": []} for n in names}
    recall: dict[str, list[float]] = {n: [] for n in names}
    kw_ids: dict[str, list[list[str]]] = {n: [] for n in names}
    se_ids: dict[str, list[list[str]]] = {n: [] for n in names}
    kw_counts: dict[str, list[int]] = {n: [] for n in names}
    kw_scored: dict[str, list[int]] = {n: [] for n in names}
    kw_every: dict[str, list[float]] = {n: [] for n in names}
    log(f"  {data.name}: {warmup} warm-up + {n_queries} timed queries x 3 operations x {len(names)} stores")
    access_ms: dict[str, list[float]] = {n: [] for n in names}
    access_rows: dict[str, list[int]] = {n: [] for n in names}
    searches: dict[str, int] = dict.fromkeys(names, 0)
    for n in names:  # the access-count write, in the background after searches (coalesced), timed per write
        facts = stores[n].facts
        await facts.settle_access()  # the first searches' writes before timing
        plain = facts._write_access

        async def timed_write(counts: Any, done: Any, _plain: Any = plain, _n: str = n) -> None:
            t = time.perf_counter()
            await _plain(counts, done)
            access_ms[_n].append((time.perf_counter() - t) * 1000)
            access_rows[_n].append(len(counts))

        facts._write_access = timed_write
    hot0 = await pg_hot(*pg_target) if "pg" in stores and pg_target is not None else None
    for i, ((q, u), qv) in enumerate(zip(queries, qvecs, strict=True)):
        timed = i >= warmup
        user = data.users[u]
        pf = Scope(user_id=user).partition_filter()
        order = names if i % 2 == 0 else names[::-1]
        scores, kth = exact_top(data, u, qv, 10) if timed else (None, 0.0)
        for n in order:
            mem = stores[n]
            if n not in authors:
                authors[n] = await mem.facts.authors(pf)
            terms = parse_query(q, authors[n]).terms
            # untimed: the user's rows warm in this store's caches (SQLite's per-partition
            # vector cache and pages, PostgreSQL's buffers), as for a user in a conversation;
            # cold costs are the first-search figures above
            await mem.search(q, user_id=user, top_k=10)
            t = time.perf_counter()
            kw = await mem.facts.keyword_search(pf, terms, limit=depth)
            t_kw = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            vec = await mem.facts.vector_search(pf, qv, limit=depth)
            t_vec = (time.perf_counter() - t) * 1000
            scored = getattr(mem.facts, "last_keyword_scored", None)
            t = time.perf_counter()
            hits = await mem.search(q, user_id=user, top_k=10)
            t_se = (time.perf_counter() - t) * 1000
            searches[n] += 2
            if not timed:
                continue
            if scored is not None:
                kw_scored[n].append(scored)
            if hasattr(mem.facts, "keyword_split_min_rows"):  # PostgreSQL: bounded vs every match scored
                saved = mem.facts.keyword_split_min_rows
                mem.facts.keyword_split_min_rows = 1 << 62
                try:
                    every = await mem.facts.keyword_search(pf, terms, limit=depth)
                finally:
                    mem.facts.keyword_split_min_rows = saved
                kw_every[n].append(overlap([c.fact_id for c in kw[:10]], [c.fact_id for c in every[:10]]))
            timings[n]["keyword"].append(t_kw)
            timings[n]["vector"].append(t_vec)
            timings[n]["search"].append(t_se)
            assert scores is not None
            recall[n].append(recall_at([c.fact_id for c in vec], data, u, scores, kth, 10))
            kw_ids[n].append([c.fact_id for c in kw[:10]])
            kw_counts[n].append(len(kw))
            se_ids[n].append([h.fact.id for h in hits.hits])
    for n in names:
        await stores[n].facts.settle_access()
        res[n]["access_write_ms"] = summary(access_ms[n]) if access_ms[n] else None  # each background write
        res[n]["access_writes"] = {"writes": len(access_ms[n]), "searches": searches[n], "rows": sum(access_rows[n])}
        del stores[n].facts._write_access
    if hot0 is not None and pg_target is not None:
        await asyncio.sleep(1.5)  # the server publishes table statistics within a second
        hot1 = await pg_hot(*pg_target)
        upd, hot = hot1[0] - hot0[0], hot1[1] - hot0[1]
        res["pg"]["facts_updates"] = {"updates": upd, "hot": hot, "hot_share": round(hot / upd, 3) if upd else None}
    if "pg" in stores:
        res["pg"]["statements_per_search"] = await count_statements(
            stores["pg"], queries[0][0], data.users[queries[0][1]]
        )
    if "pg" in stores and pg_target is not None:
        q0, u0 = queries[warmup + 1]  # a recall question (real matches)
        pf0 = Scope(user_id=data.users[u0]).partition_filter()
        terms0 = list(parse_query(q0, authors.get("pg", [])).terms)
        res["pg"]["explain_query"] = q0
        res["pg"]["explain"] = await explain_pg(stores["pg"], *pg_target, pf0, terms0, qvecs[warmup + 1], depth)
    for n in names:
        res[n].update({f"{op}_ms": summary(v) for op, v in timings[n].items()})
        res[n]["vector_recall@10"] = round(float(np.mean(recall[n])), 4)
        res[n]["vector_recall@10_min"] = round(float(np.min(recall[n])), 4)
        res[n]["keyword_candidates_mean"] = round(float(np.mean(kw_counts[n])), 1)
        if kw_scored[n]:
            res[n]["keyword_rows_scored"] = summary([float(x) for x in kw_scored[n]])
        if kw_every[n]:
            res[n]["keyword_overlap@10_vs_every_match"] = round(float(np.mean(kw_every[n])), 4)
    if len(names) == 2:
        a, b = names
        res["overlap@10"] = {
            "keyword": round(float(np.mean([overlap(x, y) for x, y in zip(kw_ids[a], kw_ids[b], strict=True)])), 3),
            "search": round(float(np.mean([overlap(x, y) for x, y in zip(se_ids[a], se_ids[b], strict=True)])), 3),
        }
    return res


# ------------------------------------------------------------------------------ bulk ingest
async def ingest_compare(name: str, seed: int, pg_url: str, work: Path, *, hnsw: bool = True) -> dict[str, Any]:
    """``--ingest <case>``: the case's turns (sessions of 20 turns per user, as loaded for
    search) through the public ``AsyncMemory.add_many`` with ``embedder="hash"``
    (``embed="now"``: one transaction, one embedding call per chunk), into a fresh SQLite file
    and a fresh PostgreSQL schema, one after the other; turns/s, CPU seconds of this process,
    and on PostgreSQL the statements sent (by kind) and the rows stored. ``hnsw=False``
    (``--ingest-without-hnsw``, a diagnosis, not a way to run a live store): the HNSW index is
    dropped after the binding, so the load pays no per-row index maintenance for it."""
    import psycopg

    from memlane.ingest.bulk import AddBatch

    data = CaseData(name, seed)
    batches = []
    for s in range(-(-data.per_user // SESSION_LEN)):
        for u in range(data.n_users):
            lo, hi = s * SESSION_LEN, min(data.per_user, (s + 1) * SESSION_LEN)
            msgs = [
                {"role": "user" if j % 2 == 0 else "assistant", "content": data.texts[u * data.per_user + j]}
                for j in range(lo, hi)
            ]
            batches.append(AddBatch(msgs, user_id=data.users[u], session_id=f"{data.users[u]}:s{s}"))
    words = [len(t.split()) for t in data.texts]
    out: dict[str, Any] = {"turns": data.total, "users": data.n_users, "words_per_turn_mean": float(np.mean(words))}
    schema = "bench_ingest_" + name.replace("-", "_")
    sent: dict[str, int] = {}
    execute, executemany = psycopg.AsyncCursor.execute, psycopg.AsyncCursor.executemany

    async def counting(cur: Any, q: Any, *a: Any, **k: Any) -> Any:
        key = " ".join(str(q).split()[:3])[:40]
        sent[key] = sent.get(key, 0) + 1
        return await execute(cur, q, *a, **k)

    async def counting_many(cur: Any, q: Any, params: Any, *a: Any, **k: Any) -> Any:
        params = list(params)
        key = "(executemany) " + " ".join(str(q).split()[:3])[:40]
        sent[key] = sent.get(key, 0) + len(params)
        return await executemany(cur, q, params, *a, **k)

    for store in ("sqlite", "pg"):
        embedder = make_embedder("hash")
        if store == "sqlite":
            path = work / f"ingest-{name}.db"
            remove_db(path)
            mem = AsyncMemory(path, embedder=embedder, sessions="null")
        else:
            await pg_exec(pg_url, "public", [f"DROP SCHEMA IF EXISTS {schema} CASCADE"])
            mem = AsyncMemory(f"{pg_url}?schema={schema}", embedder=embedder, sessions="null")
        await mem.open()  # opening (and binding the embedder) is not ingest
        if store == "pg" and not hnsw:
            await pg_exec(pg_url, schema, ["DROP INDEX facts_embedding_hnsw"])
        sent.clear()
        psycopg.AsyncCursor.execute = counting  # type: ignore[method-assign]
        psycopg.AsyncCursor.executemany = counting_many  # type: ignore[method-assign]
        try:
            t, c = time.perf_counter(), time.process_time()
            await mem.add_many(batches, embed="now")
            secs, cpu = time.perf_counter() - t, time.process_time() - c
        finally:
            psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
            psycopg.AsyncCursor.executemany = executemany  # type: ignore[method-assign]
        stored = (await mem.facts.stats()).facts
        await mem.close()
        await embedder.aclose()
        r: dict[str, Any] = {"s": round(secs, 2), "turns_per_s": round(data.total / secs, 1), "cpu_s": round(cpu, 2)}
        r["stored"] = stored
        if store == "pg":
            r["statements"] = dict(sorted(sent.items(), key=lambda kv: -kv[1]))
            await pg_exec(pg_url, "public", [f"DROP SCHEMA IF EXISTS {schema} CASCADE"])
        else:
            remove_db(path)
        out[store] = r
        log(f"ingest {name} {store}: {r}")
    out["ratio_sqlite_over_pg"] = round(out["sqlite"]["turns_per_s"] / out["pg"]["turns_per_s"], 2)
    return out


# ------------------------------------------------------------------------------ forget
async def forget_timed(mem: AsyncMemory, user: str) -> dict[str, Any]:
    """``--forget``: ``purge_user`` of one user on the case's PostgreSQL store (which it then
    no longer holds: the next ``--reuse`` reloads it), the whole call and each statement it
    sends (the purge's transaction, then the clean-up after it: vacuums and the keyword-index
    rebuild), by its first words, in ms."""
    import psycopg

    steps: list[tuple[str, float]] = []
    execute = psycopg.AsyncConnection.execute

    async def timed(conn: Any, q: Any, *a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return await execute(conn, q, *a, **k)
        finally:
            steps.append((" ".join(str(q).split()[:4])[:70], (time.perf_counter() - t) * 1000))

    psycopg.AsyncConnection.execute = timed  # type: ignore[method-assign]
    try:
        t = time.perf_counter()
        removed = await mem.facts.purge_user(user)
        total = (time.perf_counter() - t) * 1000
    finally:
        psycopg.AsyncConnection.execute = execute  # type: ignore[method-assign]
    slow = [(q, round(ms, 1)) for q, ms in steps if ms >= 5]
    rest = sum(ms for _, ms in steps if ms < 5)
    out = {"removed": removed, "total_ms": round(total, 1), "statements": len(steps), "over_5ms": slow}
    out["rest_ms"] = round(rest, 1)
    return out


# ------------------------------------------------------------------------------ main
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="single-100k,users-1m", help="comma list of single-N / users-N")
    ap.add_argument("--quick", action="store_true", help="cases single-5k,users-20k; 50 queries")
    ap.add_argument("--queries", type=int, default=200, help="timed queries per case (default 200)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--pg", default=None, help="PostgreSQL base URL (default: start one in <workdir>/pg)")
    ap.add_argument(
        "--pg-load", choices=("bulk", "api"), default="bulk", help="bulk: COPY (checked first), api: put_facts"
    )
    ap.add_argument("--no-check", action="store_true", help="skip the bulk-vs-put_facts equality check")
    ap.add_argument("--maintenance-work-mem", default="3GB", help="for the HNSW rebuild of --pg-load bulk")
    ap.add_argument("--stores", default="sqlite,pg", help="which stores to measure")
    ap.add_argument("--workdir", default="/tmp/memlane-bench")
    ap.add_argument("--reuse", action="store_true", help="reuse both stores of a case loaded earlier")
    ap.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    ap.add_argument("--load-only", action="store_true", help="load the stores (with --keep), measure nothing")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--forget", action="store_true", help="after loading: time purge_user of one user (PostgreSQL)")
    ap.add_argument("--ingest-without-hnsw", action="store_true", help="--ingest with PostgreSQL's HNSW index dropped")
    ap.add_argument("--ingest", default=None, help="only the add_many ingest comparison on this case's turns")
    ap.add_argument(
        "--pg-fillfactor",
        type=int,
        default=None,
        help="PostgreSQL facts fillfactor set before the load (schema bench_<case>_ff<N>): the proposed migration",
    )
    ap.add_argument("--out", default=str(ROOT / "results" / "pg_search.json"))
    a = ap.parse_args()
    if a.quick:
        a.cases, a.queries = "single-5k,users-20k", 50
    return a


async def main() -> None:
    args = parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load0 = os.getloadavg()
    server = None
    pg_url: str | None = None
    server_info: dict[str, Any] = {}
    if "pg" in args.stores.split(","):
        if args.pg:
            pg_url = args.pg
        else:
            from memlane.devserver import start_postgres

            server = start_postgres(work / "pg")
            pg_url = server.url
        names = "'server_version', 'shared_buffers', 'work_mem', 'maintenance_work_mem', 'effective_cache_size', 'jit'"
        settings = [f"SELECT name, current_setting(name) FROM pg_settings WHERE name IN ({names})"]
        server_info = {str(r[0]): str(r[1]) for r in (await pg_exec(pg_url, "public", settings))[0]}
        vector = ["SELECT extversion FROM pg_extension WHERE extname = 'vector'"]
        server_info["vector"] = str(((await pg_exec(pg_url, "public", vector))[0] or [["?"]])[0][0])
        log(f"PostgreSQL {pg_url}: {server_info}")
    if args.ingest:
        assert pg_url is not None
        try:
            res = await ingest_compare(args.ingest, args.seed, pg_url, work, hnsw=not args.ingest_without_hnsw)
        finally:
            if server is not None and not args.keep:
                server.stop()
        Path(args.out).write_text(json.dumps(res, indent=1))
        log(f"wrote {args.out}")
        return
    embedder = make_embedder(EMBEDDER)
    assert embedder is not None
    results: dict[str, Any] = {}
    bulk_check = None
    try:
        if pg_url is not None and args.pg_load == "bulk" and not args.no_check:
            bulk_check = await check_bulk(pg_url, embedder, args.seed)
        for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
            data = CaseData(name, args.seed)
            embed_s = await data.embed(embedder)
            log(f"{name}: {data.total} rows, {data.n_users} users; texts {data.gen_s:.1f} s, vectors {embed_s:.1f} s")
            schema = "bench_" + name.replace("-", "_") + (f"_ff{args.pg_fillfactor}" if args.pg_fillfactor else "")
            sqlite_path = work / f"pg_search-{name}-s{args.seed}.db"
            stores, info = await prepare(data, sqlite_path, pg_url, schema, embedder, args)
            if args.forget and "pg" in stores:
                info["forget"] = await forget_timed(stores["pg"], data.users[0])
                log(f"{name}: forget {info['forget']}")
                Path(sqlite_path.with_suffix(".load.json")).unlink(missing_ok=True)  # the schema changed
            if args.load_only or args.forget:
                for mem in stores.values():
                    await mem.close()
                results[name] = {"load": info}
                continue
            la = os.getloadavg()[0]
            target = (pg_url, schema) if pg_url is not None else None
            r = await measure(data, stores, embedder, args.queries, args.warmup, target)
            r.update(
                memories=data.total,
                users=data.n_users,
                per_user=data.per_user,
                load=info,
                loadavg_1min=[round(la, 2), round(os.getloadavg()[0], 2)],
            )
            results[name] = r
            for mem in stores.values():
                await mem.close()
            if not args.keep and not args.reuse:
                remove_db(sqlite_path)
                sqlite_path.with_suffix(".load.json").unlink(missing_ok=True)
                if pg_url is not None:
                    await pg_exec(pg_url, "public", [f"DROP SCHEMA IF EXISTS {schema} CASCADE"])
            print_case(name, r)
    finally:
        await embedder.aclose()
        if server is not None and not args.keep and not args.reuse:
            server.stop()
    report = {
        "benchmark": "pg_search",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
        },
        "postgres": server_info,
        "pg_load": args.pg_load,
        "pg_fillfactor": args.pg_fillfactor,
        "bulk_check": bulk_check,
        "embedder": EMBEDDER,
        "queries_per_case": args.queries,
        "cases": results,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    if not args.load_only:
        print_table(report)
    log(f"wrote {out} ({report['elapsed_s']} s)")


def print_case(name: str, r: dict[str, Any]) -> None:
    parts = [f"{name}:"]
    for n in ("sqlite", "pg"):
        if n in r:
            s = r[n]
            parts.append(
                f"{n} kw {s['keyword_ms']['p50']:.2f}/{s['keyword_ms']['p95']:.2f} vec {s['vector_ms']['p50']:.2f}/"
                f"{s['vector_ms']['p95']:.2f} search {s['search_ms']['p50']:.2f}/{s['search_ms']['p95']:.2f} "
                f"recall {s['vector_recall@10']}"
            )
            if s.get("access_write_ms"):
                w = s["access_write_ms"]
                parts.append(f"access write {w['p50']:.2f}/{w['p95']:.2f} {s['access_writes']}")
    if "pg" in r:
        parts.append(f"pg updates {r['pg'].get('facts_updates')} statements {r['pg'].get('statements_per_search')}")
    log("  ".join(parts))


def print_table(rep: dict[str, Any]) -> None:
    print(f"\n## fact-store search, SQLite vs PostgreSQL ({rep['embedder']}, {rep['queries_per_case']} queries)\n")
    print(
        "| case | store | load s (rows/s) | index build s | size MB | first search p50 | keyword p50 / p95 "
        "| vector p50 / p95 | search p50 / p95 | vector recall@10 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rep["cases"].items():
        for n in ("sqlite", "pg"):
            if n not in r:
                continue
            s = r[n]
            ld = r["load"].get(n, {})
            size = ld.get("db_mb") if n == "sqlite" else ld.get("sizes", {}).get("total_mb")
            print(
                f"| {name} ({r['users']} x {r['per_user']:,}) | {n} "
                f"| {ld.get('load_s', '-')} ({ld.get('rows_per_s', 0):,.0f}) "
                f"| {ld.get('hnsw_build_s', '-')} | {size} | {s['first_search_ms'].get('p50', 0):.1f} "
                f"| {s['keyword_ms']['p50']:.2f} / {s['keyword_ms']['p95']:.2f} "
                f"| {s['vector_ms']['p50']:.2f} / {s['vector_ms']['p95']:.2f} "
                f"| **{s['search_ms']['p50']:.2f}** / **{s['search_ms']['p95']:.2f}** | {s['vector_recall@10']} |"
            )
        if "overlap@10" in r:
            o = r["overlap@10"]
            print(f"| {name} | top-10 overlap sqlite/pg | | | | | keyword {o['keyword']} | | search {o['search']} | |")


if __name__ == "__main__":
    asyncio.run(main())
