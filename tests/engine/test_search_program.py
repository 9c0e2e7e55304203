"""Issue 22, round 2: a small-scope search runs as one program on the SQL thread
(``SqliteFactStore.run_search``), and the sync facade embeds the query in the caller's thread
while the keyword stage runs (``AsyncMemory._search_prestart``). Both must give the hits of the
stage-by-stage path (``Searcher.programs = False``): same ids, order, ranks and scores."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory, Memory
from memlane.errors import EmbedderError
from memlane.models import SearchResult
from memlane.stores.sqlite import facts as sqlite_facts
from memlane.stores.sqlite.facts import SqliteFactStore

WORDS = ["coffee", "garden", "piano", "river", "mountain", "letter", "bread", "violin", "train", "Porto"]


def _batches() -> list[dict[str, Any]]:
    speakers = ["alice", "bob", "carol"]
    out = []
    for s in range(3):
        msgs = [
            {
                "role": "user",
                "name": speakers[(i + s) % 3],
                "content": f"{WORDS[i % 10]} {WORDS[(i * 3 + s) % 10]} and the {WORDS[(i * 7) % 10]} note {i}",
            }
            for i in range(60)
        ]
        out.append({"messages": msgs, "user_id": "u1", "session_id": f"s{s}"})
    return out


#: (query, search keyword arguments): modes, filters, several queries, unique, a named author
CASES: list[tuple[str | list[str], dict[str, Any]]] = [
    ("what did alice say about the piano", {}),
    ("river mountain", {"top_k": 5}),
    ("bread", {"mode": "keyword"}),
    ("violin letter", {"mode": "vector"}),
    (["coffee garden", "what about Porto", "train"], {}),
    ("piano note", {"filters": {"session_id": "s1"}}),
    ("piano note", {"filters": {"author": "bob"}}),
    ("garden", {"unique": True, "top_k": 3}),
    ("the train to Porto", {"match_threshold": 0.1}),
    ("nothing matches zzzqx", {}),
]


def _key(r: SearchResult) -> list[tuple[Any, ...]]:
    return [(h.fact.id, h.keyword_rank, h.vector_rank, h.fact.content) for h in r.hits]


def _same(a: SearchResult, b: SearchResult) -> None:
    assert _key(a) == _key(b)
    for x, y in zip(a.hits, b.hits, strict=True):
        assert x.score == pytest.approx(y.score, abs=1e-6)
        assert (x.keyword_score is None) == (y.keyword_score is None)
        assert x.keyword_score == pytest.approx(y.keyword_score, abs=1e-6)
        assert x.vector_score == pytest.approx(y.vector_score, abs=1e-6)


class _Programs:
    """Counts ``SqliteFactStore.run_search`` calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        run = SqliteFactStore.run_search

        async def counted(store: SqliteFactStore, program: Callable[[Any], Any]) -> Any:
            self.calls += 1
            return await run(store, program)

        monkeypatch.setattr(SqliteFactStore, "run_search", counted)


async def test_program_path_gives_the_stage_path_hits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        await mem.add_many(_batches())
        await mem.drain_embeddings()
        runs = _Programs(monkeypatch)
        found = 0
        for query, kwargs in CASES:
            mem.search_engine.programs = False
            before = runs.calls
            old = await mem.search(query, user_id="u1", **kwargs)
            assert runs.calls == before  # the stage-by-stage path
            mem.search_engine.programs = True
            new = await mem.search(query, user_id="u1", debug=True, **kwargs)
            assert runs.calls == before + 1, (query, kwargs)  # one program
            _same(old, new)
            found += bool(new.hits)
            assert new.debug is not None
            assert {"keyword_ms", "fuse_fetch_ms", "total_ms"} <= set(new.debug["timings"])
            if kwargs.get("mode") != "keyword":
                assert {"embed_ms", "vector_ms"} <= set(new.debug["timings"]), (query, kwargs)
        assert found >= len(CASES) - 1  # the comparisons were of hits, not of empty lists


async def test_a_large_scope_scores_vectors_off_the_sql_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above INLINE_SCAN_MAX vectors the program returns its keyword lists and the vectors are
    scored as before (a thread of their own): the same hits."""
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        await mem.add_many(_batches())
        await mem.drain_embeddings()
        monkeypatch.setattr(sqlite_facts, "INLINE_SCAN_MAX", 10)
        scored: list[str] = []
        score = sqlite_facts._VectorScan.score

        def counted(scan: Any, q: Any) -> Any:
            scored.append(threading.current_thread().name)
            return score(scan, q)

        monkeypatch.setattr(sqlite_facts._VectorScan, "score", counted)
        runs = _Programs(monkeypatch)
        for query, kwargs in CASES[:5]:
            mem.search_engine.programs = False
            old = await mem.search(query, user_id="u1", **kwargs)
            mem.search_engine.programs = True
            scored.clear()
            new = await mem.search(query, user_id="u1", debug=True, **kwargs)
            _same(old, new)
            if kwargs.get("mode") != "keyword":
                assert scored and not any(n.startswith("memlane-sqlite") for n in scored), scored
                assert new.debug is not None and new.debug["vectors_used"]
        assert runs.calls == 5


def _watch(mem: Memory, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, list[str]]], list[int]]:
    """Record the threads ``embed_sync`` runs in (and its texts) and count ``embed_batch``."""
    emb: Any = mem.engine.embedder
    sync_calls: list[tuple[str, list[str]]] = []
    batch_calls = [0]
    embed_sync, embed_batch = emb.embed_sync, emb.embed_batch

    def watched_sync(texts: list[str]) -> Any:
        sync_calls.append((threading.current_thread().name, list(texts)))
        return embed_sync(texts)

    async def watched_batch(texts: list[str]) -> Any:
        batch_calls[0] += 1
        return await embed_batch(texts)

    monkeypatch.setattr(emb, "embed_sync", watched_sync)
    monkeypatch.setattr(emb, "embed_batch", watched_batch)
    return sync_calls, batch_calls


def test_the_sync_facade_embeds_the_query_in_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        mem.add_many(_batches())
        mem.drain_embeddings()
        mem.search("warm up", user_id="u1")
        sync_calls, batch_calls = _watch(mem, monkeypatch)
        me = threading.current_thread().name
        for i, (query, kwargs) in enumerate(CASES):
            texts = [query] if isinstance(query, str) else query
            fresh = [f"{t} {i}" for t in texts]  # not in the query cache
            sync_calls.clear()
            got = mem.search(fresh if isinstance(query, list) else fresh[0], user_id="u1", **kwargs)
            if kwargs.get("mode") == "keyword":
                assert sync_calls == []  # nothing embedded ahead for a keyword search
            else:
                assert sync_calls == [(me, fresh)], (query, sync_calls)  # once, here, all the queries
            assert mem.engine._embeddings.prestarted == {}
            mem.engine.search_engine.programs = False
            _same(mem.search(fresh if isinstance(query, list) else fresh[0], user_id="u1", **kwargs), got)
            mem.engine.search_engine.programs = True
        assert batch_calls == [0]  # no worker thread embedded a query
        # a cached query is not embedded again
        sync_calls.clear()
        mem.search("river mountain 1", user_id="u1")
        assert sync_calls == []


def test_threads_searching_the_same_new_query_share_its_embedding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        mem.add_many(_batches())
        mem.drain_embeddings()
        mem.search("warm up", user_id="u1")
        sync_calls, _ = _watch(mem, monkeypatch)
        for round_ in range(5):
            query = f"piano river {round_}"
            with ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda q: mem.search(q, user_id="u1"), [query] * 8))
            assert all(_key(r) == _key(results[0]) for r in results)
            assert 1 <= sum(1 for _, texts in sync_calls if texts == [query]) <= 8
            assert mem.engine._embeddings.prestarted == {}


def test_a_failing_query_embedding_in_the_callers_thread_gives_keyword_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with Memory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        mem.add_many(_batches())
        mem.drain_embeddings()
        mem.search("warm up", user_id="u1")
        emb: Any = mem.engine.embedder
        calls: list[str] = []

        def broken(texts: list[str]) -> Any:
            calls.append(threading.current_thread().name)
            raise EmbedderError("model unavailable")

        monkeypatch.setattr(emb, "embed_sync", broken)
        with caplog.at_level(logging.WARNING, logger="memlane"):
            got = mem.search("piano note never asked", user_id="u1", debug=True)
        assert calls == [threading.current_thread().name]
        assert "query embedding failed" in caplog.text
        assert got.hits and all(h.vector_rank is None for h in got.hits)
        assert got.debug is not None and not got.debug["vectors_used"]
        kw = mem.search("piano note never asked", user_id="u1", mode="keyword")
        assert _key(got) == _key(kw)
        assert mem.engine._embeddings.prestarted == {}


async def test_the_likely_hits_are_read_while_the_query_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the query embedding runs, the program reads the rows of each query's best keyword
    matches; after fusion it reads only the hits still missing: the same hits."""
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        await mem.add_many(_batches())
        await mem.drain_embeddings()
        emb: Any = mem.embedder
        release = threading.Event()
        reads: list[list[str]] = []
        embed_sync, get_facts = emb.embed_sync, sqlite_facts._SyncReads.get_facts

        def slow_embed(texts: list[str]) -> Any:
            release.wait(30)  # until the program read rows: it did not wait for the vectors first
            return embed_sync(texts)

        def counted(self: Any, ids: Any, scope: Any) -> Any:
            reads.append(list(ids))
            release.set()
            return get_facts(self, ids, scope)

        monkeypatch.setattr(emb, "embed_sync", slow_embed)
        monkeypatch.setattr(sqlite_facts._SyncReads, "get_facts", counted)
        new = await mem.search("what did alice say about the piano", user_id="u1", debug=True)
        assert new.debug is not None
        kw = [k for k, s in new.debug["keyword"][0][:10] if s > 0]
        assert reads and reads[0] == kw  # first: the best keyword matches, before the vectors
        later = {k for ids in reads[1:] for k in ids}
        assert later == {h.fact.id for h in new.hits} - set(kw)  # then only the hits still missing
        assert any(h.keyword_rank is None for h in new.hits) or len(reads) == 1
        monkeypatch.setattr(emb, "embed_sync", embed_sync)
        mem.search_engine.programs = False
        _same(await mem.search("what did alice say about the piano", user_id="u1"), new)


def test_postgresql_takes_the_query_embedded_in_the_callers_thread(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL has no search program; the sync facade's query embedding (not SQLite's) still
    runs in the caller's thread, and its hits are those of the engine embedding it."""
    with Memory(pg_url, embedder="hash", sessions="null") as mem:
        mem.add_many(_batches()[:1])
        mem.drain_embeddings()
        mem.search("warm up", user_id="u1")
        sync_calls, batch_calls = _watch(mem, monkeypatch)
        got = mem.search("what did alice say about the piano", user_id="u1")
        assert sync_calls == [(threading.current_thread().name, ["what did alice say about the piano"])]
        assert mem.engine._embeddings.prestarted == {}
        assert got.hits
        assert batch_calls == [0]
        mem.engine._query_cache.clear()
        monkeypatch.undo()
        monkeypatch.setattr(mem.engine, "_search_prestart", lambda *a, **k: None)  # the engine embeds
        sync_calls, batch_calls = _watch(mem, monkeypatch)
        again = mem.search("what did alice say about the piano", user_id="u1")
        assert batch_calls == [1] and sync_calls[0][0] != threading.current_thread().name
        _same(again, got)
