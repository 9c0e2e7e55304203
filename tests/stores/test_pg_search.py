"""PostgreSQL search, reflections and context cache (stores/postgres/search.py, reflections.py,
context.py) on a real PostgreSQL + pgvector (fixture ``pg_url``: a fresh schema per test).

The mixins are exercised through a small test store (``_Store``) whose rows are written the
way PgFactStore writes them (search_text, date_words, partitions row, ctx refreshed inside the
same transaction); the FactStore contract on the real PgFactStore is in test_pg_facts.py.
"""

from __future__ import annotations

import asyncio
import random
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from memlane import AsyncMemory
from memlane.errors import ConflictError, DimensionMismatchError
from memlane.models import ConsolidatedMemory, FactFilter, Reflection, Scope, user_partition
from memlane.retrieval.text import date_words, parse_query
from memlane.stores.postgres.context import PgContextCache
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.facts import PgFactStore
from memlane.stores.postgres.reflections import PgReflectionMixin
from memlane.stores.postgres.rows import enc, enc_json, filter_sql
from memlane.stores.postgres.search import PgSearchMixin, _named, _vector_sql, partitions_now_sql
from memlane.testing import ContextCacheContract
from services import with_params

DIM = 16


class _Store(PgSearchMixin, PgReflectionMixin):
    """The two mixins on a database, with a bound 16-dimensional embedder (column type and
    HNSW index as PgFactStore.bind_embedder makes them)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        self.dim = DIM

    async def bind(self) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(f"ALTER TABLE facts ALTER COLUMN embedding TYPE vector({DIM})")
            await conn.execute("CREATE INDEX facts_embedding_hnsw ON facts USING hnsw (embedding vector_cosine_ops)")

    async def add(
        self,
        content: str,
        user: str = "u1",
        *,
        agent: str | None = None,
        kind: str = "fact",
        session_id: str | None = None,
        seq: int | None = None,
        author: str | None = None,
        metadata: dict[str, Any] | None = None,
        vec: np.ndarray[Any, Any] | None = None,
        occurred_at: datetime | None = None,
    ) -> str:
        """Insert one valid fact as PgFactStore.put_facts does; its id."""
        fid = uuid.uuid4().hex
        part = user_partition(user, agent)
        now = datetime.now(UTC)
        async with self.db.transaction() as conn:
            await conn.execute(
                "INSERT INTO facts (id, partition, content, hash, scope, agent_id, user_id, session_id, kind,"
                " author, seq, occurred_at, formed_at, updated_at, valid_from, metadata, embedding, search_text,"
                " date_words) VALUES (%s,%s,%s,%s,'user',%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                (
                    fid,
                    part,
                    enc(content),
                    fid,
                    enc(agent),
                    enc(user),
                    enc(session_id),
                    kind,
                    enc(author),
                    seq,
                    occurred_at,
                    now,
                    now,
                    now,
                    Jsonb(enc_json(metadata or {})),
                    vec,
                    "" if kind == "document" else enc(content),
                    date_words(occurred_at),
                ),
            )
            await conn.execute("INSERT INTO partitions (partition) VALUES (%s) ON CONFLICT DO NOTHING", (part,))
            await conn.execute("UPDATE partitions SET appends = appends + 1 WHERE partition = %s", (part,))
            if session_id is not None and seq is not None:
                await self._refresh_context(conn, part, session_id, [seq])
        return fid

    async def invalidate(self, fid: str) -> None:
        async with self.db.transaction() as conn:
            cur = await conn.execute(
                "UPDATE facts SET invalid_at = now() WHERE id = %s RETURNING partition, session_id, seq", (fid,)
            )
            row = await cur.fetchone()
            assert row is not None
            if row[1] is not None:
                await self._refresh_context(conn, row[0], row[1], [row[2]])

    async def ctx_of(self, fid: str) -> str:
        async with self.db.connection() as conn:
            row = await (await conn.execute("SELECT ctx FROM facts WHERE id = %s", (fid,))).fetchone()
            assert row is not None
            return str(row[0])


@pytest.fixture
async def db(pg_url: str) -> AsyncIterator[PgDatabase]:
    database = await PgDatabase.open(pg_url)
    database.acquire()
    try:
        yield database
    finally:
        await database.release()


@pytest.fixture
async def store(db: PgDatabase) -> _Store:
    s = _Store(db)
    await s.bind()
    return s


def _pf(user: str = "u1", agent: str | None = None) -> Any:
    return Scope(user_id=user, agent_id=agent).partition_filter()


def _terms(text: str) -> tuple[str, ...]:
    return parse_query(text).terms


def _unit(rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
    m = rng.standard_normal((n, DIM)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


# --------------------------------------------------------------------------- context cache
class TestPgContextCache(ContextCacheContract):
    @pytest.fixture
    async def context_cache(self, db: PgDatabase) -> AsyncIterator[PgContextCache]:
        cache = PgContextCache(db)
        yield cache
        await cache.close()


async def test_context_cache_holds_one_reference_and_nul_text(pg_url: str) -> None:
    from memlane.stores.base import CachedContext

    database = await PgDatabase.open(pg_url)
    cache = PgContextCache(database)  # the only reference: closing the cache closes the pool
    entry = CachedContext("k\x00", "s\x00", "text with \x00 NUL", datetime.now(UTC), user_id="u\x00", session_id="s")
    await cache.put_context(entry)
    assert await cache.get_context("k\x00") == entry
    assert await cache.get_context("k") is None
    assert await cache.drop_contexts(user_id="u\x00") == 1
    await cache.close()
    await cache.close()  # idempotent: released once
    assert database.closed


# --------------------------------------------------------------------------- keyword search
async def test_keyword_text_match_ranks_above_neighbour_context_match(store: _Store) -> None:
    turns = ["we talked about the weather", "I adopted a puppy named Rex", "how lovely", "see you later"]
    ids = [await store.add(t, kind="message", session_id="s1", seq=i) for i, t in enumerate(turns)]
    found = await store.keyword_search(_pf(), _terms("puppy"), limit=10)
    got = [c.fact_id for c in found]
    # the turn saying it first; its neighbours (within two turns) found through their context
    assert got[0] == ids[1]
    assert set(got) == {ids[0], ids[1], ids[2], ids[3]}
    assert found[0].score > found[1].score
    assert "puppy" in await store.ctx_of(ids[0]) and "puppy" not in await store.ctx_of(ids[1])


async def test_keyword_rare_word_outranks_a_repeated_common_one(store: _Store) -> None:
    for i in range(8):
        await store.add(f"apple note {i}")
    await store.add("apple apple apple")
    rare = await store.add("zebra sighting")
    found = await store.keyword_search(_pf(), ["apple", "zebra"], limit=3)
    assert found[0].fact_id == rare  # BM25's idf: ts_rank_cd alone ranks the triple apple first
    assert found[0].score > found[1].score > 0


async def test_keyword_date_words_and_documents(store: _Store) -> None:
    when = datetime(2023, 5, 8, 12, tzinfo=UTC)
    dated = await store.add("went to the museum", occurred_at=when)
    await store.add("long document body about museums", kind="document")  # its fragments are searched
    assert [c.fact_id for c in await store.keyword_search(_pf(), _terms("May 2023"), limit=5)] == [dated]
    assert [c.fact_id for c in await store.keyword_search(_pf(), _terms("museum"), limit=5)] == [dated]


async def test_keyword_terms_are_data_not_query_syntax(store: _Store) -> None:
    fid = await store.add("Bobby's table drop")
    for hostile in (["'); DROP TABLE facts; --"], ["a & b | !c"], ["<->", ":*"], ["table"], ["\\"]):
        await store.keyword_search(_pf(), hostile, limit=5)  # never a syntax error
    assert [c.fact_id for c in await store.keyword_search(_pf(), ["table", "&", "|"], limit=5)] == [fid]
    assert await store.keyword_search(_pf(), [], limit=5) == []
    assert await store.keyword_search(_pf(), ["the"], limit=5) == []  # only stopwords: nothing to match


async def test_keyword_filters_apply_before_limit(store: _Store) -> None:
    for i in range(30):
        await store.add(f"email note {i}", metadata={"source": "chat"})
    mail = await store.add("the email from Bo", author="Bo", kind="message", metadata={"sender": {"id": "b\x00o"}})
    for flt in (FactFilter(kind="message"), FactFilter(author="Bo"), FactFilter(metadata=(("sender.id", "b\x00o"),))):
        found = await store.keyword_search(_pf(), _terms("email"), limit=3, filter=flt)
        assert [c.fact_id for c in found] == [mail]
        assert found[0].author == "Bo"


# --------------------------------------------------------------------------- vector search
async def _fill(store: _Store, n: int, *, user: str = "u1", seed: int = 0) -> tuple[list[str], np.ndarray[Any, Any]]:
    """``n`` facts with random unit vectors in ``user``'s partition, every 97th (from the 6th)
    with ``metadata.rare``; copied in bulk and the HNSW index built afterwards (fast)."""
    vecs = _unit(np.random.default_rng(seed), n)
    part = user_partition(user, None)
    ids = [uuid.uuid4().hex for _ in range(n)]
    now = datetime.now(UTC)
    async with store.db.transaction() as conn:
        await conn.execute("DROP INDEX facts_embedding_hnsw")
        async with conn.cursor() as cur:
            copy_sql = (
                "COPY facts (id, partition, content, hash, scope, user_id, kind, formed_at, updated_at,"
                " valid_from, embedding, search_text, metadata) FROM STDIN"
            )
            async with cur.copy(copy_sql) as copy:
                for i, fid in enumerate(ids):
                    meta = Jsonb({"rare": True} if i % 97 == 5 else {})
                    await copy.write_row(
                        (fid, part, f"row {i}", fid, "user", user, "fact", now, now, now, vecs[i], f"row {i}", meta)
                    )
        await conn.execute(  # a sparser graph than the store's (m 16, ef_construction 64): quicker to build
            "CREATE INDEX facts_embedding_hnsw ON facts USING hnsw (embedding vector_cosine_ops)"
            " WITH (m = 8, ef_construction = 16)"
        )
        await conn.execute("INSERT INTO partitions (partition) VALUES (%s) ON CONFLICT DO NOTHING", (part,))
        await conn.execute("ANALYZE facts")
    return ids, vecs


async def _plan(store: _Store, sql: str, args: list[Any]) -> str:
    async with store.db.transaction() as conn:
        cur = await conn.execute("EXPLAIN " + sql, args)
        return "\n".join(r[0] for r in await cur.fetchall())


async def test_hnsw_path_finds_what_the_exact_scan_finds(store: _Store) -> None:
    _, vecs = await _fill(store, 600)
    rng = np.random.default_rng(7)
    queries = vecs[rng.choice(600, 10, replace=False)] + 0.05 * _unit(rng, 10)
    store.exact_max = 100_000
    exact = [await store.vector_search(_pf(), q, limit=10) for q in queries]
    assert store.last_vector_path == "exact"
    store.exact_max = 100  # the partition (600 rows) is now "large": the HNSW index serves it
    approx = [await store.vector_search(_pf(), q, limit=10) for q in queries]
    assert store.last_vector_path == "hnsw"
    for e, a in zip(exact, approx, strict=True):
        assert a[0].fact_id == e[0].fact_id and a[0].score == pytest.approx(e[0].score, abs=1e-5)
        assert len({c.fact_id for c in a} & {c.fact_id for c in e}) >= 9  # approximate, but close
        assert [c.score for c in a] == sorted((c.score for c in a), reverse=True)
        assert all(-1.0 <= c.score <= 1.0 for c in a)
    # the two paths really are two plans in the one statement: the HNSW walk runs, the exact
    # scan (which cannot use the index; facts f_2 in the plan: f and f_1 are the walks of the
    # facts and of their windows, issue 22) does not, and the other way round
    q = queries[0]
    walked = await _analyze(store, q, exact_max=100)
    assert _ran(walked, "facts_embedding_hnsw") and not _ran(walked, " on facts f_2")
    scanned = await _analyze(store, q, exact_max=100_000)
    assert not _ran(scanned, "facts_embedding_hnsw") and _ran(scanned, " on facts f_2")


async def _analyze(store: _Store, q: Any, *, exact_max: int, flt: FactFilter | None = None) -> list[str]:
    """EXPLAIN ANALYZE of the store's vector statement (limit 10), its lines."""
    fs, fa = _named(*filter_sql(flt, "f"), "f")
    now, now_args = partitions_now_sql(_pf())
    args = {
        **fa,
        **now_args,
        "parts": [user_partition("u1", None)],
        "q": q,
        "k": 10,
        "xmax": exact_max,
        "cap1": exact_max + 1,
        "ef": "100",
        "known": None,
        "cmax": 0,
        "cch": 0,
    }
    async with store.db.connection() as conn:
        cur = await conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + _vector_sql(fs, now), args)
        return [str(r[0]) for r in await cur.fetchall()]


def _ran(plan: list[str], needle: str) -> bool:
    """Whether the plan node whose line names ``needle`` was executed (the exact scan's rows
    are ``f_1``: the walk's CTE comes first)."""
    for line in plan:
        if needle in line and "->" in line:
            return "never executed" not in line
    raise AssertionError(f"{needle!r} not in the plan:\n" + "\n".join(plan))


async def test_filtered_hnsw_search_falls_back_to_exact_for_rare_matches(store: _Store) -> None:
    n = 8_000  # enough rows that the planner takes the HNSW index despite the filter
    ids, vecs = await _fill(store, n)
    rare = {ids[i] for i in range(n) if i % 97 == 5}  # 83 rows, spread over the space
    flt = FactFilter(metadata=(("rare", True),))
    store.exact_max = 1000
    q = vecs[6]  # not a rare row: the graph walk (ef_search 40) meets few rare ones, if any
    # what the index alone gives: a starved list (pgvector 0.6 filters after the walk)
    hnsw_sql = (
        "SELECT f.id FROM facts f WHERE f.partition = ANY(%s) AND (f.metadata #> %s::text[]) = %s"
        " ORDER BY f.embedding <=> %s LIMIT %s"
    )
    args = [[user_partition("u1", None)], ["rare"], Jsonb(True), q, 10]
    assert "hnsw" in await _plan(store, hnsw_sql, args)
    async with store.db.transaction() as conn:
        await conn.execute("SET LOCAL hnsw.ef_search = 40")
        starved = await (await conn.execute(hnsw_sql, args)).fetchall()
    assert len(starved) < 10
    found = await store.vector_search(_pf(), q, limit=10, filter=flt)
    assert store.last_vector_path == "hnsw+exact"
    walked = store.last_vector_walked
    assert walked is not None and walked < 10
    # the statement sets hnsw.ef_search for its own transaction, before the index is read: a
    # wider walk meets more rare rows (and the setting does not outlive the statement)
    store.ef_search_min = 1000
    await store.vector_search(_pf(), q, limit=10, filter=flt)
    assert store.last_vector_walked is not None and store.last_vector_walked > walked
    async with store.db.connection() as conn:
        setting = await (await conn.execute("SELECT current_setting('hnsw.ef_search', true)")).fetchone()
        assert setting is not None and setting[0] in (None, "", "40")
    store.ef_search_min = 100
    best = sorted(rare, key=lambda fid: -float(vecs[ids.index(fid)] @ q))[:10]
    assert [c.fact_id for c in found] == best
    store.exact_max = 100_000
    assert await store.vector_search(_pf(), q, limit=10, filter=flt) == found  # as the exact path


async def test_vector_kind_filter_and_documents(store: _Store) -> None:
    v = _unit(np.random.default_rng(1), 3)
    msg = await store.add("a message", kind="message", vec=v[0])
    frag = await store.add("a fragment", kind="fragment", vec=v[1])
    await store.add("a document", kind="document", vec=v[0])
    for exact_max in (100_000, 0):
        store.exact_max = exact_max
        got = await store.vector_search(_pf(), v[0], limit=10, filter=FactFilter(kind="fragment"))
        assert [c.fact_id for c in got] == [frag]
        every = await store.vector_search(_pf(), v[0], limit=10)
        assert every[0].fact_id == msg and len(every) == 2  # never the document itself
        assert every[0].score == pytest.approx(1.0, abs=1e-5)


async def test_wrong_dimension_query_and_backfill_are_refused(store: _Store) -> None:
    with pytest.raises(DimensionMismatchError):
        await store.vector_search(_pf(), np.ones(DIM + 1, dtype=np.float32), limit=3)
    fid = await store.add("needs a vector")
    with pytest.raises(DimensionMismatchError):
        await store.set_embeddings([fid], np.ones((1, DIM + 1), dtype=np.float32))
    with pytest.raises(DimensionMismatchError):
        await store.set_embeddings([fid, fid], np.ones((1, DIM), dtype=np.float32))
    assert [i for i, _ in await store.missing_embeddings()] == [fid]


async def test_zero_vectors_score_zero(store: _Store) -> None:
    zero = np.zeros(DIM, dtype=np.float32)
    fid = await store.add("zero", vec=zero)
    for exact_max in (100_000, 0):
        store.exact_max = exact_max
        got = await store.vector_search(_pf(), zero, limit=3)
        assert [(c.fact_id, c.score) for c in got] == [(fid, 0.0)]


# --------------------------------------------------------------------------- embeddings backfill
async def test_backfill_never_overwrites_a_newer_vector(store: _Store) -> None:
    v = _unit(np.random.default_rng(2), 3)
    old = await store.add("old text")
    doc = await store.add("D" * 5000, kind="document")
    gone = await store.add("deleted")
    await store.invalidate(gone)
    missing = await store.missing_embeddings(limit=10)
    assert [i for i, _ in missing] == [old, doc]
    assert len(missing[1][1]) < 5000  # a document's opening only
    assert await store.missing_embeddings(fact_ids=[doc, gone, "nope"]) == [missing[1]]
    # the fact was updated meanwhile, with its new text's vector
    async with store.db.connection() as conn:
        await conn.execute("UPDATE facts SET embedding = %s WHERE id = %s", (v[0], old))
    await store.set_embeddings([old, doc, gone], v)  # the backfill's vectors (old is stale)
    assert await store.missing_embeddings() == []
    store.exact_max = 100_000
    got = {c.fact_id: c.score for c in await store.vector_search(_pf(), v[0], limit=5)}
    assert got[old] == pytest.approx(1.0, abs=1e-5)  # the newer vector stayed
    async with store.db.connection() as conn:
        row = await (await conn.execute("SELECT embedding IS NULL FROM facts WHERE id = %s", (gone,))).fetchone()
    assert row == (True,)  # a deleted fact gets none


async def test_set_embeddings_moves_the_partition_counter(store: _Store) -> None:
    fid = await store.add("to embed")

    async def changes() -> int:
        async with store.db.connection() as conn:
            row = await (await conn.execute("SELECT changes FROM partitions")).fetchone()
            assert row is not None
            return int(row[0])

    before = await changes()
    await store.set_embeddings([fid], _unit(np.random.default_rng(3), 1))
    assert await changes() == before + 1


# --------------------------------------------------------------------------- neighbour context
async def test_context_follows_inserts_and_removals(store: _Store) -> None:
    a = await store.add("alpha", kind="message", session_id="s", seq=0)
    b = await store.add("bravo", kind="message", session_id="s", seq=1)
    c = await store.add("charlie", kind="message", session_id="s", seq=2)
    d = await store.add("delta", kind="message", session_id="s", seq=3)
    e = await store.add("echo", kind="message", session_id="s", seq=4)
    assert await store.ctx_of(c) == "alpha bravo delta echo"
    assert await store.ctx_of(a) == "bravo charlie"
    await store.invalidate(b)
    assert await store.ctx_of(a) == "charlie" and await store.ctx_of(d) == "charlie echo"
    assert await store.ctx_of(b) == ""  # a removed turn keeps no copy of its neighbours' words
    assert await store.ctx_of(e) == "charlie delta"  # bravo was never its neighbour
    other = await store.add("foxtrot", kind="message", session_id="t", seq=1)  # another session
    assert await store.ctx_of(other) == "" and await store.ctx_of(a) == "charlie"
    found = await store.keyword_search(_pf(), _terms("bravo"), limit=5)
    assert found == []  # neither the removed turn nor a neighbour's context holds it


# --------------------------------------------------------------------------- partitions never leak
_WORDS = st.sampled_from(["kiwi", "lime", "mango", "plum", "pear", "fig"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    facts=st.lists(
        st.tuples(
            st.sampled_from(["u1", "u2", "u1|x", "u"]),
            st.sampled_from([None, "x", "y"]),
            st.lists(_WORDS, min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=12,
    ),
    reader=st.tuples(st.sampled_from(["u1", "u2", "u"]), st.sampled_from([None, "x"])),
    query=st.lists(_WORDS, min_size=1, max_size=2),
)
def test_search_never_returns_another_partitions_facts(
    pg_url: str, facts: list[tuple[str, str | None, list[str]]], reader: tuple[str, str | None], query: list[str]
) -> None:
    asyncio.run(_isolation(pg_url, facts, reader, query))


async def _isolation(
    pg_url: str, facts: list[tuple[str, str | None, list[str]]], reader: tuple[str, str | None], query: list[str]
) -> None:
    database = await PgDatabase.open(pg_url)
    database.acquire()
    try:
        s = _Store(database)
        async with database.connection() as conn:
            bound = await (await conn.execute("SELECT to_regclass('facts_embedding_hnsw')")).fetchone()
            await conn.execute("TRUNCATE facts, partitions")
        if bound is None or bound[0] is None:
            await s.bind()
        rng = np.random.default_rng(len(facts))
        owner: dict[str, tuple[str, str | None]] = {}
        for user, agent, words in facts:
            fid = await s.add(" ".join(words), user, agent=agent, vec=_unit(rng, 1)[0])
            owner[fid] = (user, agent)
        ruser, ragent = reader
        pf = Scope(user_id=ruser, agent_id=ragent).partition_filter()
        visible = {f for f, (u, a) in owner.items() if u == ruser and (ragent is None or a == ragent)}
        for exact_max in (100_000, 0):
            s.exact_max = exact_max
            kw = await s.keyword_search(pf, query, limit=50)
            vec = await s.vector_search(pf, _unit(rng, 1)[0], limit=50)
            assert {c.fact_id for c in kw} <= visible
            assert {c.fact_id for c in vec} == visible  # every visible one, nothing else
    finally:
        await database.release()


# --------------------------------------------------------------------------- reflections
async def test_concurrent_consolidations_exactly_one_wins(pg_url: str) -> None:
    # six connections open up front, so the six writers really overlap (not one after another)
    db = await PgDatabase.open(with_params(pg_url, pool_min="6", pool_max="6"))
    db.acquire()
    try:
        await _race_consolidations(_Store(db))
    finally:
        await db.release()


async def _race_consolidations(s: _Store) -> None:
    r = await s.put_reflection(Reflection(content="likes tea", scope="user", user_id="u1"))

    async def consolidate(i: int, version: int) -> str:
        blob = ConsolidatedMemory(
            scope="user",
            user_id="u1",
            consolidated_content=f"VERSION: {version} by {i}",
            word_limit=300,
            version=version,
        )
        try:
            await s.put_consolidated(blob, [r.id], expected_version=version - 1)
        except ConflictError:
            return "lost"
        return "won"

    for version in (1, 2):  # first no blob yet (an insert race), then a blob row to lock
        results = await asyncio.gather(*(consolidate(i, version) for i in range(6)))
        assert sorted(results) == ["lost"] * 5 + ["won"]
        got = await s.get_consolidated(scope="user", user_id="u1")
        assert got is not None and got.version == version
        assert got.consolidated_content == f"VERSION: {version} by {results.index('won')}"


async def test_agent_reflections_record_contributors_and_blobs_inherit_them(db: PgDatabase) -> None:
    s = _Store(db)
    r = await s.put_reflection(
        Reflection(content="club rule", scope="agent", agent_id="club", session_id="s", source_user_ids=["u1", "u2"])
    )
    await s.put_reflection(Reflection(content="mine", scope="user", user_id="u3", source_user_ids=["u3"]))
    blob = ConsolidatedMemory(
        scope="agent", agent_id="club", consolidated_content="VERSION: 1", word_limit=300, version=1
    )
    await s.put_consolidated(blob, [r.id], expected_version=0)
    async with db.connection() as conn:
        rows = await (await conn.execute("SELECT user_id, kind, item_id FROM contributors ORDER BY 1, 2")).fetchall()
    assert rows == [
        ("u1", "blob", blob.id),
        ("u1", "reflection", r.id),
        ("u2", "blob", blob.id),
        ("u2", "reflection", r.id),
    ]
    [listed] = await s.list_reflections(scope="agent", agent_id="club")
    assert listed.absorbed and listed.source_user_ids == []  # write-only


async def test_reflection_ids_with_nul_and_null_safe_scopes(db: PgDatabase) -> None:
    s = _Store(db)
    await s.put_reflection(Reflection(content="x\x00y", scope="session", user_id="u\x00", session_id="s\x00"))
    await s.put_reflection(Reflection(content="no user", scope="session", session_id="s\x00"))
    got = await s.list_reflections(scope="session", user_id="u\x00", session_id="s\x00")
    assert [(r.content, r.user_id, r.session_id) for r in got] == [("x\x00y", "u\x00", "s\x00")]
    assert [r.content for r in await s.list_reflections(scope="session", session_id="s\x00")] == ["no user"]
    blob = ConsolidatedMemory(
        scope="session",
        user_id="u\x00",
        session_id="s\x00",
        consolidated_content="c\x00",
        word_limit=200,
        version=1,
        unabsorbed_ids=["i\x00"],
    )
    await s.put_consolidated(blob)
    back = await s.get_consolidated(scope="session", user_id="u\x00", session_id="s\x00")
    assert back is not None and back.consolidated_content == "c\x00" and back.unabsorbed_ids == ["i\x00"]
    assert await s.get_consolidated(scope="session", session_id="s\x00") is None
    assert await s.clear_session_memory(agent_id=None, user_id="u\x00", session_id="s\x00") == 2
    assert [r.content for r in await s.list_reflections(scope="session", session_id="s\x00")] == ["no user"]


# --------------------------------------------------------------------------- the engine on PgFactStore
async def test_engine_search_on_postgres_keeps_to_the_kind_filter_and_the_speaker(pg_url: str) -> None:
    from memlane import AsyncMemory

    async with AsyncMemory(pg_url, embedder="hash", sessions="null") as mem:
        turns = [
            {"role": "user", "content": "we talked about the weather"},
            {"role": "assistant", "content": "I adopted a puppy named Rex"},
            {"role": "user", "content": "how lovely"},
        ]
        said = await mem.add(turns, user_id="u", session_id="s1", kind="message")
        await mem.add_document("A guide to puppy training. " * 20, title="guide", user_id="u")
        await mem.add("Rex the puppy likes walks", user_id="u2")  # another user's
        msgs = await mem.search("puppy", user_id="u", filters={"kind": "message"})
        assert msgs.hits and {h.fact.kind for h in msgs.hits} == {"message"}
        assert msgs.hits[0].fact.id == said[1].id  # the turn saying it, above its neighbours
        frags = await mem.search("puppy", user_id="u", filters={"kind": "fragment"})
        assert frags.hits and {h.fact.kind for h in frags.hits} == {"fragment"}  # never messages (past bug)
        assert all(h.vector_rank is None or h.fact.kind == "fragment" for h in frags.hits)
        every = await mem.search("puppy", user_id="u", top_k=20)
        assert {h.fact.user_id for h in every.hits} == {"u"}
        assert "document" not in {h.fact.kind for h in every.hits}


@pytest.mark.parametrize("change", ["update", "delete"])
async def test_engine_queue_never_writes_a_stale_vector_on_postgres(pg_url: str, change: str) -> None:
    from memlane import AsyncMemory
    from memlane.providers.embed.hashing import HashEmbedder
    from memlane.retrieval.hybrid import RetrievalConfig

    class FirstCallHeld:
        """The "hash" embedder whose first call (the queue worker's) waits at the gate."""

        def __init__(self) -> None:
            self.inner = HashEmbedder(64)
            self.name, self.dim = self.inner.name, self.inner.dim
            self.started, self.gate = asyncio.Event(), asyncio.Event()

        async def embed_batch(self, texts: list[str]) -> Any:
            if not self.started.is_set():
                self.started.set()
                await self.gate.wait()
            return await self.inner.embed_batch(texts)

        async def aclose(self) -> None:
            await self.inner.aclose()

    emb = FirstCallHeld()
    keyword_only = RetrievalConfig(vector_weight=0.0)
    async with AsyncMemory(pg_url, embedder=emb, sessions="null", retrieval=keyword_only) as m:
        (fact,) = await m.add("the old text about apples", user_id="u", embed="low")
        await asyncio.wait_for(emb.started.wait(), 10)  # the worker holds the old text at the gate
        if change == "update":
            await m.update(fact.id, "completely new words about rockets", user_id="u")
        else:
            await m.delete(fact.id, user_id="u")
        emb.gate.set()
        await m.drain_embeddings()
        row = await m.facts.get_fact(fact.id, Scope(user_id="u"))
        if change == "update":
            [new] = await HashEmbedder(64).embed_batch(["completely new words about rockets"])
            assert row is not None and row.embedding is not None and np.allclose(row.embedding, new)
        else:
            assert row is None or row.embedding is None


# --------------------------------------------------------------------------- statements and bounded keyword scoring
COMMON = ["coffee", "morning", "walk", "friend"]  # in most rows
MID = ["garden", "piano", "river", "market", "letter", "bicycle"]  # in some rows
RARE = ["zeppelin", "quokka", "marzipan"]  # in a few rows
KW_QUERIES = [
    ["coffee", "garden", "zeppelin"],
    ["morning", "walk", "piano", "quokka"],
    ["friend", "river", "market"],
    ["coffee", "morning", "letter", "marzipan", "bicycle"],
    ["walk", "bicycle"],
    ["coffee", "walk"],
]


async def _fill_words(store: _Store, n: int, *, user: str = "u1", seed: int = 3) -> None:
    """``n`` facts of common, middling and rare words (test_keyword_topk's corpus shape)."""
    rng = random.Random(seed)
    part = user_partition(user, None)
    now = datetime.now(UTC)
    async with store.db.transaction() as conn, conn.cursor() as cur:
        copy_sql = (
            "COPY facts (id, partition, content, hash, scope, user_id, kind, author, formed_at, updated_at,"
            " valid_from, search_text) FROM STDIN"
        )
        async with cur.copy(copy_sql) as copy:
            for i in range(n):
                words = [w for w in COMMON if rng.random() < 0.6] + [w for w in MID if rng.random() < 0.12]
                words += [w for w in RARE if rng.random() < 0.03] + rng.sample(["the", "today", "nice", "again"], 2)
                rng.shuffle(words)
                text, fid = " ".join(words), uuid.uuid4().hex
                kind = "message" if i % 3 else "fact"
                author = "alice" if i % 2 else "bob"
                await copy.write_row((fid, part, text, fid, "user", user, kind, author, now, now, now, text))
        await conn.execute("INSERT INTO partitions (partition) VALUES (%s) ON CONFLICT DO NOTHING", (part,))
        await conn.execute("ANALYZE facts")


def _connection_setup() -> bool:
    """Whether the caller runs inside the pool's set-up or health check of a connection (the
    pool opens and checks connections in the background: not a search's statements)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in ("_configure", "check_connection", "_usable"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _Statements:
    """Counts the statements the store sends (each a round trip): every ``execute``, and BEGIN
    + COMMIT for each ``transaction()``; not the pool's own (see :func:`_connection_setup`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        execute, transaction = psycopg.AsyncCursor.execute, psycopg.AsyncConnection.transaction

        async def counted_execute(cur: Any, query: Any, *a: Any, **k: Any) -> Any:
            if not _connection_setup():
                self.sent.append(str(query)[:60])
            return await execute(cur, query, *a, **k)

        def counted_transaction(conn: Any, *a: Any, **k: Any) -> Any:
            if not _connection_setup():
                self.sent += ["BEGIN", "COMMIT"]
            return transaction(conn, *a, **k)

        monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted_execute)
        monkeypatch.setattr(psycopg.AsyncConnection, "transaction", counted_transaction)


async def test_the_candidate_statements_are_one_each(store: _Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _, vecs = await _fill(store, 300)
    await _fill_words(store, 200, user="u1", seed=4)
    pf, q = _pf(), vecs[3]
    for exact_max in (100_000, 100):  # the exact scan, then the HNSW walk
        store.exact_max = exact_max
        await store.keyword_search(pf, ["coffee", "row"], limit=10)  # the user's partitions resolved once
        await store.vector_search(pf, q, limit=10)
        count = _Statements(monkeypatch)
        kw = await store.keyword_search(pf, ["coffee", "row", "zeppelin"], limit=10)
        vec = await store.vector_search(pf, q, limit=10)
        assert kw and vec and store.last_vector_path == ("exact" if exact_max > 300 else "hnsw")
        assert len(count.sent) <= 2, count.sent
        assert all(c.fact is not None and c.fact.id == c.fact_id for c in kw + vec)  # rows come along
        monkeypatch.undo()


def _turns(n: int, speakers: tuple[str, ...] = ("alice", "bob")) -> list[dict[str, str]]:
    words = ["coffee", "garden", "piano", "harbor", "lantern", "meadow", "violin", "orchard"]
    return [
        {
            "role": "user",
            "name": speakers[i % len(speakers)],
            "content": f"{words[i % 8]} {words[(i * 3) % 8]} note {i}",
        }
        for i in range(n)
    ]


async def test_a_search_sends_at_most_two_statements(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every statement of one ``AsyncMemory.search`` once the user's partitions and authors
    are known: keyword (with the authors and the candidates' rows) and vector (with the
    rows); no get_facts, no authors, and the access counts written after it returned."""
    async with AsyncMemory(pg_url, embedder="hash", sessions="null") as mem:
        facts = mem.facts
        assert isinstance(facts, PgFactStore)
        await mem.add_many([{"messages": _turns(240), "user_id": "u1", "session_id": "s1"}])
        for exact_max in (100_000, 100):  # the exact scan, then the HNSW walk
            facts.exact_max = exact_max
            for query in ("coffee garden", "what did alice say about the piano"):  # the second boosts alice
                warm = await mem.search(query, user_id="u1")
                await facts.settle_access()  # the warm-up's access counts written before counting
                count = _Statements(monkeypatch)
                res = await mem.search(query, user_id="u1")
                monkeypatch.undo()
                assert res.hits and [h.fact.id for h in res.hits] == [h.fact.id for h in warm.hits]
                assert facts.last_vector_path == ("exact" if exact_max > 240 else "hnsw")
                assert len(count.sent) <= 2, count.sent


async def test_search_hits_are_the_rows_get_facts_reads(pg_url: str) -> None:
    async with AsyncMemory(pg_url, embedder="hash", sessions="null") as mem:
        await mem.add_many([{"messages": _turns(60), "user_id": "u1", "session_id": "s1"}])
        await mem.add("Alice keeps her coffee beans in the garden shed", user_id="u1", metadata={"k": [1, "x"]})
        res = await mem.search("coffee garden shed", user_id="u1", top_k=10)
        assert len(res.hits) == 10
        stored = await mem.facts.get_facts([h.fact.id for h in res.hits], Scope(user_id="u1"))
        assert [h.fact for h in res.hits] == [
            stored[h.fact.id].model_copy(update={"access_count": 0}) for h in res.hits
        ]


async def test_a_new_speaker_written_elsewhere_is_boosted_at_once(pg_url: str) -> None:
    """The authors come from the cache the last keyword statement filled; when that statement
    finds a speaker the cache lacked, the engine searches again with them, so the boost is
    what a fresh engine (and SQLite) gives."""
    async with (
        AsyncMemory(pg_url, embedder="hash", sessions="null") as a,
        AsyncMemory(pg_url, embedder="hash", sessions="null") as b,
    ):
        await a.add_many([{"messages": _turns(40), "user_id": "u1", "session_id": "s1"}])
        await a.search("piano meadow", user_id="u1")  # alice and bob cached
        await b.add_many([{"messages": _turns(6, ("carol",)), "user_id": "u1", "session_id": "s2"}])
        query = "what did carol say about the piano"
        got = await a.search(query, user_id="u1", top_k=5)
        async with AsyncMemory(pg_url, embedder="hash", sessions="null") as fresh:
            want = await fresh.search(query, user_id="u1", top_k=5)
        assert [h.fact.id for h in got.hits] == [h.fact.id for h in want.hits]
        assert got.hits[0].fact.author == "carol"


async def test_a_new_partition_under_the_prefix_is_searched_at_once(store: _Store) -> None:
    v = _unit(np.random.default_rng(2), 2)
    await store.add("the first walnut", vec=v[0])
    assert len(await store.keyword_search(_pf(), ["walnut"], limit=5)) == 1
    assert len(await store.vector_search(_pf(), v[1], limit=5)) == 1
    later = await store.add("a second walnut", agent="a1", vec=v[1])  # a new partition u|u1|a1
    assert {c.fact_id for c in await store.keyword_search(_pf(), ["walnut"], limit=5)} >= {later}
    assert (await store.vector_search(_pf(), v[1], limit=5))[0].fact_id == later


async def _reference(store: _Store, terms: list[str], essential: list[str], limit: int, flt: FactFilter | None):
    """Every match scored (a store without cached counts), restricted to the rows holding an
    essential term: what the bounded path must return, with the same scores."""
    ref = _Store(store.db)
    full = await ref.keyword_search(_pf(), terms, limit=10**6, filter=flt)
    tsq = " || ".join(["phraseto_tsquery('english', %s)"] * len(essential))
    async with store.db.connection() as conn:
        cur = await conn.execute(f"SELECT id FROM facts WHERE tsv @@ ({tsq})", essential)
        holding = {r[0] for r in await cur.fetchall()}
    return [c for c in full if c.fact_id in holding][:limit], full


@pytest.mark.parametrize("flt", [None, FactFilter(kind="message", author="alice")])
async def test_big_partitions_score_only_the_essential_terms_rows(store: _Store, flt: FactFilter | None) -> None:
    await _fill_words(store, 400)
    store.keyword_split_min_rows, store.keyword_budget = 100, 25
    split_seen = 0
    for terms in KW_QUERIES:
        first = await store.keyword_search(_pf(), terms, limit=10, filter=flt)  # the terms' counts cached
        stats = next(iter(store._search_cache().stats.values()))
        split = store._split(stats, terms)
        got = await store.keyword_search(_pf(), terms, limit=10, filter=flt)
        if split is None:
            assert got == first
            continue
        split_seen += 1
        essential = split[0]
        want, full = await _reference(store, terms, essential, 10, flt)
        assert [c.fact_id for c in got] == [c.fact_id for c in want], terms
        exact = {c.fact_id: c.score for c in full}
        assert all(c.score == pytest.approx(exact[c.fact_id], rel=1e-9) for c in got)
        scored = store.last_keyword_scored
        assert scored is not None and scored < len(full)
        assert scored <= max(store.keyword_budget, min(stats.dfs[t] for t in terms))
    assert split_seen >= 3  # the data exercises the bounded path


async def test_cached_counts_are_dropped_when_the_partition_grows(store: _Store) -> None:
    await _fill_words(store, 400)
    store.keyword_split_min_rows, store.keyword_budget = 100, 25
    terms = ["coffee", "garden", "zeppelin"]
    await store.keyword_search(_pf(), terms, limit=10)
    await store.keyword_search(_pf(), terms, limit=10)
    bounded = store.last_keyword_scored
    await _fill_words(store, 100, seed=9)  # 25% more rows: the counts no longer stand
    got = await store.keyword_search(_pf(), terms, limit=10)
    assert store.last_keyword_scored is not None and bounded is not None and store.last_keyword_scored > bounded
    assert got == await _Store(store.db).keyword_search(_pf(), terms, limit=10)  # scored as every match


async def test_scoped_rows_is_one_statement_and_sees_new_partitions(
    store: _Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.add("one", author="ann")
    sql = "SELECT DISTINCT author FROM authors WHERE partition = ANY(%(parts)s) ORDER BY 1"
    async with store.db.connection() as conn:
        await conn.execute("INSERT INTO authors VALUES (%s, 'ann')", (user_partition("u1", None),))
        assert await store.scoped_rows(conn, _pf(), sql) == [("ann",)]
        count = _Statements(monkeypatch)
        assert await store.scoped_rows(conn, _pf(), sql) == [("ann",)]
        assert len(count.sent) == 1
        monkeypatch.undo()
        await conn.execute("INSERT INTO partitions (partition) VALUES (%s)", (user_partition("u1", "a1"),))
        await conn.execute("INSERT INTO authors VALUES (%s, 'bob')", (user_partition("u1", "a1"),))
        assert await store.scoped_rows(conn, _pf(), sql) == [("ann",), ("bob",)]
        assert await store.scoped_rows(conn, _pf("nobody"), sql) == []


async def _toasted_after_insert(db: PgDatabase) -> int:
    """Insert one row of ~2.6 KB (a 384-float vector and 1 KB of text) and count the values
    of the facts table that went to its TOAST table."""
    vec = np.ones(384, dtype=np.float32)
    async with db.transaction() as conn:
        text = "word " * 200
        await conn.execute(
            "INSERT INTO facts (id, partition, content, hash, scope, user_id, kind, formed_at, updated_at,"
            " valid_from, embedding, search_text) VALUES (%s, 'u|t|', %s, %s, 'user', 't', 'fact', now(), now(),"
            " now(), %s, %s)",
            (uuid.uuid4().hex, text, uuid.uuid4().hex, vec, text),
        )
        toast = "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'facts'::regclass"
        row = await (await conn.execute(toast)).fetchone()
        assert row is not None
        count = await (await conn.execute(f"SELECT count(*) FROM {row[0]}")).fetchone()
        assert count is not None
        return int(count[0])


async def test_vectors_stay_in_the_row(db: PgDatabase) -> None:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT a.attstorage, c.reloptions FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE a.attrelid = 'facts'::regclass AND a.attname = 'embedding'"
        )
        row = await cur.fetchone()
        assert row is not None and row[0] == "m" and "toast_tuple_target=4080" in row[1]
    assert await _toasted_after_insert(db) == 0
    async with db.connection() as conn:  # pgvector's default storage, for contrast: the vector goes out of line
        await conn.execute("ALTER TABLE facts ALTER COLUMN embedding SET STORAGE EXTERNAL")
        await conn.execute("ALTER TABLE facts RESET (toast_tuple_target)")
    assert await _toasted_after_insert(db) > 0


async def test_keyword_counts_accumulate_across_queries(store: _Store) -> None:
    await _fill_words(store, 400)
    store.keyword_split_min_rows, store.keyword_budget = 100, 25
    await store.keyword_search(_pf(), ["zeppelin"], limit=10)  # every match scored: counts cached
    await store.keyword_search(_pf(), ["quokka", "marzipan"], limit=10)  # new terms only: counted, kept
    (stats,) = store._search_cache().stats.values()
    assert {"zeppelin", "quokka", "marzipan"} <= set(stats.dfs)
    await store.keyword_search(_pf(), ["coffee"], limit=10)
    assert store._split(stats, ["coffee", "zeppelin"]) == (["zeppelin"], ["coffee"])


async def test_access_counts_update_in_place(db: PgDatabase) -> None:
    """Migration 0006 leaves room on each page, so the access-count UPDATE after a search is a
    HOT update: the new row version stays on its page (no index gets a new entry). At the
    default fillfactor, rows of ~2.6 KB fill their pages and every updated row moves."""
    async with db.connection() as conn:
        row = await (await conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'facts'::regclass")).fetchone()
        assert row is not None and "fillfactor=60" in row[0]
        covered = await (
            await conn.execute(
                "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
                " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'facts'::regclass AND a.attname = 'access_count'"
            )
        ).fetchone()
        assert covered == (0,)  # an index on access_count would make HOT impossible
    for _ in range(12):
        await _toasted_after_insert(db)
    page = "SELECT id, (ctid::text::point)[0]::int FROM facts ORDER BY id"
    async with db.connection() as conn:
        before = await (await conn.execute(page)).fetchall()
        await conn.execute("UPDATE facts SET access_count = access_count + 1")
        after = await (await conn.execute(page)).fetchall()
    assert len(before) == 12 and after == before
