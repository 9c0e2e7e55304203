"""The fact and reflection store contracts on PostgreSQL (unchanged), plus what only a shared
database can show: replicas (several pools on one schema) agree, apply a formation batch
exactly once between them, and schemas (one per location or tenant) never see each other."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from memlane.errors import DimensionMismatchError, NotFoundError, ScopeError
from memlane.models import Fact, Reflection, Scope, content_hash, user_partition
from memlane.providers.embed.hashing import HashEmbedder
from memlane.stores.base import Checkable, FactChange, FactStore, ReflectionStore, UserExportable
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.facts import PgFactStore
from memlane.testing import FactStoreContract, ReflectionStoreContract
from services import with_params

_EMB = HashEmbedder(64)


def _fact(text: str, user: str | None = "u1", **kw: object) -> Fact:
    return Fact(content=text, user_id=user, hash=content_hash(text), **kw)  # type: ignore[arg-type]


class TestPgFactStoreContracts(FactStoreContract, ReflectionStoreContract):
    @pytest.fixture
    async def fact_store(self, pg_url: str) -> AsyncIterator[PgFactStore]:
        store = await PgFactStore.open(pg_url)
        await store.bind_embedder("hash:64", 64)
        yield store
        await store.close()

    @pytest.fixture
    def reflection_store(self, fact_store: PgFactStore) -> PgFactStore:
        return fact_store  # one class, one schema, both protocols


async def _replicas(url: str, n: int = 2) -> list[PgFactStore]:
    """``n`` stores on one schema, each on a pool of its own (as separate replicas are)."""
    stores = [await PgFactStore.open(url) for _ in range(n)]
    for s in stores:
        await s.bind_embedder("hash:64", 64)
    return stores


async def test_protocols_and_idempotent_close(pg_url: str) -> None:
    store = await PgFactStore.open(pg_url)
    assert isinstance(store, FactStore) and isinstance(store, ReflectionStore)
    assert isinstance(store, Checkable) and isinstance(store, UserExportable)
    await store.close()
    await store.close()  # a second close releases nothing more
    assert store.db.closed


async def test_shared_database_is_released_once_per_store(pg_url: str) -> None:
    db = await PgDatabase.open(pg_url)
    db.acquire()  # the caller's own reference
    a, b = await PgFactStore.open(db), await PgFactStore.open(db)
    await a.close()
    await a.close()
    assert not db.closed
    await b.close()
    assert not db.closed  # the caller still holds it
    await db.release()
    assert db.closed


async def test_binding_sets_vector_type_and_hnsw_index_and_is_seen_by_other_replicas(pg_url: str) -> None:
    a = await PgFactStore.open(pg_url)
    b = await PgFactStore.open(pg_url)  # opened before the binding: learns it on bind
    try:
        assert a.dim is None
        await a.bind_embedder("hash:64", 64)
        async with a.db.connection() as conn:
            cur = await conn.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = 'facts'::regclass AND attname = 'embedding'"
            )
            assert (await cur.fetchone()) == ("vector(64)",)
            cur = await conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                " AND indexname = 'facts_embedding_hnsw'"
            )
            row = await cur.fetchone()
        assert row is not None and "hnsw" in row[0] and "vector_cosine_ops" in row[0]
        with pytest.raises(DimensionMismatchError):
            await b.bind_embedder("hash:128", 128)
        assert (b.dim, b.embedder_name) == (64, "hash:64")
        c = await PgFactStore.open(pg_url)  # opened after: reads it from meta
        assert (c.dim, c.embedder_name) == (64, "hash:64")
        assert await c.check() == []
        await c.close()
    finally:
        await a.close()
        await b.close()


async def test_replicas_binding_at_once_bind_once(pg_url: str) -> None:
    stores = [await PgFactStore.open(pg_url) for _ in range(3)]
    try:
        await asyncio.gather(*(s.bind_embedder("hash:64", 64) for s in stores))
        assert {(s.dim, s.embedder_name) for s in stores} == {(64, "hash:64")}
        assert await stores[0].check() == []
    finally:
        for s in stores:
            await s.close()


async def test_large_dimensions_skip_the_hnsw_index(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    store = await PgFactStore.open(pg_url)
    try:
        with caplog.at_level(logging.INFO, logger="memlane"):
            await store.bind_embedder("big:2048", 2048)
        assert any("HNSW limit of 2000" in r.getMessage() for r in caplog.records)
        async with store.db.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'facts_embedding_hnsw'"
            )
            assert await cur.fetchone() is None
        vec = np.zeros((1, 2048), dtype=np.float32)
        vec[0, 7] = 1.0
        await store.put_facts([_fact("wide vector")], vec)
        found = await store.vector_search(Scope(user_id="u1").partition_filter(), vec[0], limit=3)
        assert len(found) == 1 and found[0].score == pytest.approx(1.0, abs=1e-5)
        assert await store.check() == []
    finally:
        await store.close()


async def test_write_through_one_replica_is_read_through_another(pg_url: str) -> None:
    a, b = await _replicas(pg_url)
    try:
        assert a.db is not b.db
        scope = Scope(user_id="u1")
        [(f, created)] = await a.put_facts(
            [_fact("hotel zulu", kind="message", session_id="s")], _EMB.embed_sync(["hotel zulu"])
        )
        assert created
        got = await b.get_fact(f.id, scope)
        assert got is not None and got.content == "hotel zulu" and got.seq == 0
        stamp = await b.memory_stamp(scope.partition_filter())
        # b's write is idempotent against a's (same hash, same partition) and numbers turns on
        [(same, again), (nxt, _)] = await b.put_facts(
            [_fact("hotel zulu"), _fact("hotel two", kind="message", session_id="s")], None
        )
        assert not again and same.id == f.id and nxt.seq == 1
        assert await a.memory_stamp(scope.partition_filter()) != stamp
        await b.update_fact(f.id, scope, "hotel yankee", None)
        seen = await a.get_fact(f.id, scope)
        assert seen is not None and seen.content == "hotel yankee" and seen.version == 2
        assert [h.event for h in await a.history(f.id, scope)] == ["ADD", "UPDATE"]
    finally:
        await a.close()
        await b.close()


async def test_concurrent_turns_from_replicas_get_distinct_seqs(pg_url: str) -> None:
    a, b = await _replicas(pg_url)
    try:

        async def put(store: PgFactStore, i: int) -> None:
            await store.put_facts([_fact(f"turn number {i}", kind="message", session_id="s")], None)

        await asyncio.gather(*(put(a if i % 2 else b, i) for i in range(16)))
        page = await a.list_facts(Scope(user_id="u1"), limit=100)
        assert sorted(f.seq for f in page.items) == list(range(16))  # type: ignore[type-var]
    finally:
        await a.close()
        await b.close()


async def test_same_key_applied_concurrently_by_two_replicas_applies_once(pg_url: str) -> None:
    a, b = await _replicas(pg_url)
    try:
        part = user_partition("u1", None)
        for round_ in range(5):
            key = f"batch-{round_}"
            batch = [
                FactChange("ADD", part, fact=_fact(f"formed fact {round_} a")),
                FactChange("ADD", part, fact=_fact(f"formed fact {round_} b")),
            ]
            refl = [Reflection(content=f"reflection {round_}", scope="user", user_id="u1", id=f"r{round_}")]
            results = await asyncio.gather(a.apply_changes(batch, refl, key=key), b.apply_changes(batch, refl, key=key))
            assert [x.fact.id for x in results[0]] == [x.fact.id for x in results[1]]
            assert sorted(x.event for r in results for x in r) == ["ADD"] * 4  # the replay returns the result
        async with a.db.connection() as conn:
            cur = await conn.execute("SELECT event, count(*) FROM history GROUP BY event")
            assert dict(await cur.fetchall()) == {"ADD": 10}  # one history row per fact: applied once
            cur = await conn.execute("SELECT count(*) FROM applied_batches WHERE user_id = 'u1'")
            assert (await cur.fetchone()) == (5,)
        assert (await b.list_facts(Scope(user_id="u1"))).total == 10
        assert len(await a.list_reflections(scope="user", user_id="u1")) == 5
    finally:
        await a.close()
        await b.close()


async def test_record_access_never_waits_on_one_row_while_holding_another(pg_url: str) -> None:
    a, b = await _replicas(pg_url)
    try:
        [(f1, _), (f2, _)] = await a.put_facts([_fact("first"), _fact("second")], None)
        scope = Scope(user_id="u1")
        async with a.db.transaction() as writer, a.db.connection() as probe:
            await writer.execute("SELECT 1 FROM facts WHERE id = %s FOR UPDATE", (f1.id,))  # a writer holds f1
            task = asyncio.create_task(b.record_access([f2.id, f1.id]))
            for _ in range(500):  # until record_access waits for f1
                cur = await probe.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
                if (await cur.fetchone()) != (0,):
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail("record_access never waited for the locked row")
            counted = await b.get_fact(f2.id, scope)
            assert counted is not None and counted.access_count == 1  # committed, holding no lock
        await task
        got = await b.get_facts([f1.id, f2.id], scope)
        assert (got[f1.id].access_count, got[f2.id].access_count) == (1, 1)
    finally:
        await a.close()
        await b.close()


async def test_dotted_metadata_filters_compare_json_values_in_sql(pg_url: str) -> None:
    from memlane.models import FactFilter

    [store] = await _replicas(pg_url, 1)
    try:
        await store.put_facts(
            [
                _fact("from ann", metadata={"sender": {"id": "ann", "n": 2}}),
                _fact("from bo", metadata={"sender": "bo"}),
                _fact("numeric text", metadata={"sender": {"id": "2"}}),
                _fact("null one", metadata={"x": None}),
            ],
            None,
        )
        scope = Scope(user_id="u1")

        async def listed(*pairs: tuple[str, object]) -> list[str]:
            page = await store.list_facts(scope, filter=FactFilter(metadata=tuple(pairs)))
            return sorted(f.content for f in page.items)

        assert await listed(("sender.id", "ann")) == ["from ann"]
        assert await listed(("sender.n", 2)) == await listed(("sender.n", 2.0)) == ["from ann"]
        assert await listed(("sender.id", 2)) == []  # the string "2" is not the number 2
        assert await listed(("sender", "bo")) == ["from bo"]
        assert await listed(("x", None)) == ["null one"]
        assert await listed(("missing", None)) == []
    finally:
        await store.close()


async def test_failed_batch_leaves_its_key_free(pg_url: str) -> None:
    [store] = await _replicas(pg_url, 1)
    try:
        part = user_partition("u1", None)
        with pytest.raises(ScopeError):
            await store.apply_changes([FactChange("ADD", part, fact=Fact(content="x", user_id=None))], key="k")
        ok = await store.apply_changes([FactChange("ADD", part, fact=_fact("x"))], key="k")
        assert ok[0].event == "ADD"
    finally:
        await store.close()


async def test_schemas_never_see_each_other(pg_server: str, pg_url: str) -> None:
    other_url = with_params(pg_server, schema=pg_url.rsplit("schema=", 1)[1] + "_b")
    a = await PgFactStore.open(pg_url)
    b = await PgFactStore.open(other_url)
    try:
        for s in (a, b):
            await s.bind_embedder("hash:64", 64)
        [(fa, _)] = await a.put_facts([_fact("secret alpha words")], _EMB.embed_sync(["secret alpha words"]))
        [(fb, _)] = await b.put_facts([_fact("secret bravo words")], _EMB.embed_sync(["secret bravo words"]))
        scope = Scope(user_id="u1")
        pf = scope.partition_filter()
        for store, mine, theirs in ((a, fa, fb), (b, fb, fa)):
            page = await store.list_facts(scope)
            assert [f.id for f in page.items] == [mine.id]
            assert await store.get_fact(theirs.id, scope) is None
            assert [c.fact_id for c in await store.keyword_search(pf, ["secret"], limit=5)] == [mine.id]
            vec = await store.vector_search(pf, _EMB.embed_sync(["secret words"])[0], limit=5)
            assert [c.fact_id for c in vec] == [mine.id]
            with pytest.raises(NotFoundError):
                await store.update_fact(theirs.id, scope, "x", None)
        assert await b.purge_user("u1") >= 1
        assert (await a.list_facts(scope)).total == 1  # a purge in one schema leaves the other alone
    finally:
        await a.close()
        await b.close()
        import psycopg
        from psycopg import sql

        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(b.db.schema or "")))


async def test_nul_characters_round_trip(pg_url: str) -> None:
    [store] = await _replicas(pg_url, 1)
    try:
        text = "a\x00b \U0010fffe c"
        f = _fact(text, user="u\x00", agent_id="x\x00", metadata={"k\x00": "v\x00", "n": [1, "\x00"]})
        [(stored, _)] = await store.put_facts([f], None)
        scope = Scope(user_id="u\x00", agent_id="x\x00")
        got = await store.get_fact(stored.id, scope)
        assert got is not None
        assert (got.content, got.user_id, got.agent_id, got.metadata) == (text, "u\x00", "x\x00", f.metadata)
        assert await store.get_fact(stored.id, Scope(user_id="u", agent_id="x")) is None
        assert (await store.export_user("u\x00"))["facts"][0]["content"] == text
        assert await store.purge_user("u\x00") >= 2
        assert await store.get_fact(stored.id, scope) is None
    finally:
        await store.close()


async def test_export_user_matches_the_sqlite_shape(pg_url: str) -> None:
    [store] = await _replicas(pg_url, 1)
    try:
        [(f, _)] = await store.put_facts([_fact("export me", metadata={"a": 1})], None)
        await store.put_facts([_fact("club rule", user="u1", agent_id="club", scope="agent")], None)
        await store.put_reflection(Reflection(content="likes tea", scope="user", user_id="u1"))
        out = await store.export_user("u1")
        assert set(out) == {
            "facts",
            "shared_changes",
            "reflections",
            "consolidated",
            "consolidated_versions",
            "shared",
            "proposals",
        }
        [mine, club] = out["facts"]
        assert mine["id"] == f.id and mine["metadata"] == {"a": 1} and isinstance(mine["formed_at"], str)
        assert [h["event"] for h in mine["history"]] == ["ADD"]
        assert club["scope"] == "agent"
        assert [r["content"] for r in out["reflections"]] == ["likes tea"]
        assert (await store.export_user("nobody"))["facts"] == []
    finally:
        await store.close()


async def _files_holding(store: PgFactStore, needle: bytes) -> list[str]:
    """The schema's table, index and TOAST files (main fork, after a checkpoint) holding
    ``needle``; skips when this process cannot read the server's data directory."""
    async with store.db.connection() as conn:
        try:
            await conn.execute("CHECKPOINT")
            row = await (await conn.execute("SHOW data_directory")).fetchone()
        except psycopg.Error as exc:
            pytest.skip(f"needs a superuser on a local server: {exc}")
        cur = await conn.execute(
            "SELECT c.relname, pg_relation_filepath(c.oid) FROM pg_class c"
            " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i')"
            " UNION ALL SELECT t.relname, pg_relation_filepath(t.oid) FROM pg_class c JOIN pg_class t"
            " ON t.oid = c.reltoastrelid WHERE c.relnamespace = current_schema()::regnamespace"
        )
        files = [(name, path) for name, path in await cur.fetchall() if path]
    assert row is not None and files
    base = Path(row[0])
    if not base.is_dir() or not os.access(base, os.R_OK | os.X_OK):
        pytest.skip(f"the server's data directory {base} is not readable here")
    found = []
    for name, path in files:
        for seg in sorted(base.glob(path + "*")):
            if seg.name.split(".")[0] == Path(path).name and "_" not in seg.name and needle in seg.read_bytes():
                found.append(name)
    return sorted(set(found))


@pytest.mark.parametrize("rewrite", [False, True])
async def test_purge_leaves_no_words_in_the_indexes_or_with_rewrite_the_files(pg_url: str, rewrite: bool) -> None:
    store = await PgFactStore.open(pg_url, purge_rewrite=rewrite)
    await store.bind_embedder("hash:64", 64)
    try:
        text = "the qxzcanary sings at dawn"
        [(f, _), _theirs] = await store.put_facts(
            [_fact(text, kind="message", session_id="s", author="Qxzcanary"), _fact("what u2 says", user="u2")],
            _EMB.embed_sync([text, "what u2 says"]),
        )
        long_text = "qxzcanary " + " ".join(f"w{i}" for i in range(3000))  # TOASTed
        await store.put_facts([_fact(long_text)], None)
        await store.update_fact(f.id, Scope(user_id="u1"), text + " again", None)
        needle = b"qxzcanar"  # what the stemmer leaves of it too
        before = await _files_holding(store, needle)
        assert {"facts", "history", "facts_tsv"} <= set(before)
        await store.purge_user("u1")
        left = await _files_holding(store, needle)
        if rewrite:
            assert left == []
        else:  # vacuum frees the space without zeroing it: only the table files may keep bytes
            assert set(left) <= {"facts", "history"}
        assert (await store.list_facts(Scope(user_id="u2"))).total == 1
        assert await store.check() == []  # the rebuilt keyword index is valid
    finally:
        await store.close()


async def test_replicas_forgetting_at_once_all_scrub(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    a, b, c = await _replicas(pg_url, 3)
    try:
        for user in ("u1", "u2", "u3"):
            await a.put_facts([_fact(f"qxzcanary of {user}", user=user)], None)
        async with a.db.connection() as conn:  # what an interrupted rebuild leaves behind
            await conn.execute("CREATE INDEX facts_tsv_ccnew ON facts (id)")
            await conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'facts_tsv_ccnew'::regclass")
        assert any("facts_tsv_ccnew" in p for p in await a.check())
        with caplog.at_level(logging.WARNING, logger="memlane"):
            await asyncio.gather(a.purge_user("u1"), b.purge_user("u2"), c.purge_user("u3"))
        assert [r.getMessage() for r in caplog.records if r.name == "memlane"] == []  # every scrub ran
        assert not set(await _files_holding(a, b"qxzcanar")) - {"facts", "history"}
        assert await a.check() == []  # the leftover copy was dropped, the rebuilt index is valid
    finally:
        for s in (a, b, c):
            await s.close()


async def test_check_reports_an_invalid_index(pg_url: str) -> None:
    [store] = await _replicas(pg_url, 1)
    try:
        assert await store.check() == []
        async with store.db.connection() as conn:
            await conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'facts_user'::regclass")
        assert any("facts_user" in p for p in await store.check())
    finally:
        await store.close()


async def test_async_memory_end_to_end_on_postgres(pg_url: str) -> None:
    from memlane import AsyncMemory

    mem = AsyncMemory(pg_url, embedder="hash", sessions="local")
    try:
        added = await mem.add("Ann's favourite tea is oolong", user_id="ann")
        found = await mem.search("which tea does Ann like", user_id="ann")
        assert found.facts and "oolong" in found.facts[0].content
        assert (await mem.search("which tea does Ann like", user_id="bob")).facts == []
        assert await mem.forget("ann") >= 1
        assert (await mem.search("oolong", user_id="ann")).facts == []
        assert added is not None
    finally:
        await mem.close()


def _statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements the stores send from now on (not the pool's connection checks)."""
    sent: list[str] = []
    execute = psycopg.AsyncCursor.execute

    async def counted(cur: Any, query: Any, *a: Any, **k: Any) -> Any:
        frame = sys._getframe(1)
        setup = False
        while frame is not None:
            setup = setup or frame.f_code.co_name in ("_configure", "check_connection", "_usable")
            frame = frame.f_back  # type: ignore[assignment]
        if not setup:
            sent.append(str(query)[:60])
        return await execute(cur, query, *a, **k)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)
    return sent


async def test_get_facts_and_authors_send_one_statement_and_see_a_new_partition_at_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PgFactStore's hook for the core's scoped reads: once a user's partitions are known,
    ``get_facts`` and ``authors`` are one statement each (the core alone resolves them in a
    statement of its own), and a partition another replica added since (a new agent of the
    user) is read at once."""
    a, b = await _replicas(pg_url)
    try:
        scope, pf = Scope(user_id="u1"), Scope(user_id="u1").partition_filter()
        [(first, _)] = await a.put_facts([_fact("the first walnut", author="alice")], None)
        assert set(await b.get_facts([first.id], scope)) == {first.id}  # b resolves the user's partitions
        sent = _statements(monkeypatch)
        assert set(await b.get_facts([first.id], scope)) == {first.id}
        assert await b.authors(pf) == ["alice"]
        assert len(sent) == 2, sent
        monkeypatch.undo()
        [(later, _)] = await a.put_facts([_fact("a second walnut", agent_id="a1", author="bob")], None)
        assert later.partition != first.partition
        assert set(await b.get_facts([first.id, later.id], scope)) == {first.id, later.id}
        assert sorted(await b.authors(pf)) == ["alice", "bob"]
        assert await b.get_facts([first.id], Scope(user_id="u2")) == {}
        assert await b.authors(Scope(user_id="nobody").partition_filter()) == []
        assert await b.authors(Scope(user_id="u1", agent_id="a1").partition_filter()) == ["bob"]
    finally:
        for s in (a, b):
            await s.close()


async def test_binding_the_embedder_keeps_vectors_in_the_row(pg_url: str) -> None:
    """bind_embedder types the vector column (ALTER TYPE resets the column's storage to
    pgvector's EXTERNAL) and sets it back to MAIN: a 384-float vector stays out of TOAST."""
    store = await PgFactStore.open(pg_url)
    try:
        await store.bind_embedder("hash:384", 384)
        vecs = np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32)
        await store.put_facts([_fact(f"vector row {i}") for i in range(3)], vecs)
        async with store.db.connection() as conn:
            cur = await conn.execute(
                "SELECT a.attstorage, c.reltoastrelid::regclass::text FROM pg_attribute a"
                " JOIN pg_class c ON c.oid = a.attrelid WHERE a.attrelid = 'facts'::regclass"
                " AND a.attname = 'embedding'"
            )
            row = await cur.fetchone()
            assert row is not None and row[0] == "m"
            toasted = await (await conn.execute(f"SELECT count(*) FROM {row[1]}")).fetchone()
            assert toasted == (0,)
    finally:
        await store.close()
