"""Issue 22: a small-scope search on SQLite pays few thread hand-offs (mechanism, not timings).

One ``AsyncMemory.search`` on a scope of a few hundred memories runs as one program on the
SQL thread (round 2: ``SqliteFactStore.run_search``): the keyword statement, which also reads
the partitions' authors (the engine's author boost is then served without a hand-off), the
vector scoring in the call that loaded its index, the fusion and the hits' rows; nothing else
runs on a thread but the query embedding. Without programs (``Searcher.programs = False``, the
path of stores that cannot run one) the stages are one call each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory
from memlane.models import Fact, PartitionFilter, Scope, content_hash
from memlane.stores.sqlite import facts as sqlite_facts
from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.facts import SqliteFactStore


def _turns(n: int) -> list[dict[str, str]]:
    words = ["coffee", "garden", "piano", "river", "mountain", "letter", "bread", "violin"]
    speakers = ["alice", "bob"]
    return [
        {"role": "user", "name": speakers[i % 2], "content": f"{words[i % 8]} {words[(i * 3) % 8]} note {i}"}
        for i in range(n)
    ]


class _Count:
    """Counts the fact store's ``Database.run`` calls (not the job queue's polls on the same
    file, nor the access counts' background write, which runs after a search returned) and
    the ``asyncio.to_thread`` calls made from the SQLite fact store."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        self.store_threads: list[str] = []
        run = Database.run
        to_thread = asyncio.to_thread

        async def counted_run(db: Database, fn: Callable[[Any], Any]) -> Any:
            name = getattr(fn, "__qualname__", repr(fn))
            if name.startswith("SqliteFactStore.") and "_write_access" not in name:
                self.names.append(name)
            return await run(db, fn)

        async def counted_to_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            self.store_threads.append(getattr(fn, "__qualname__", repr(fn)))
            return await to_thread(fn, *args, **kwargs)

        monkeypatch.setattr(Database, "run", counted_run)
        monkeypatch.setattr(sqlite_facts.asyncio, "to_thread", counted_to_thread)

    @property
    def runs(self) -> int:
        return len(self.names)


async def test_small_scope_search_hand_offs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        await mem.add_many([{"messages": _turns(300), "user_id": "u1", "session_id": "s1"}])
        await mem.drain_embeddings()  # no background write while counting
        cases = (("keyword", True, 1), ("hybrid", True, 1), ("keyword", False, 2), ("hybrid", False, 3))
        for mode, programs, runs in cases:
            mem.search_engine.programs = programs
            warm = await mem.search("what did alice say about the piano", user_id="u1", mode=mode)
            assert warm.hits
            await mem.facts.settle_access()
            count = _Count(monkeypatch)
            got = await mem.search("what did alice say about the piano", user_id="u1", mode=mode)
            # one program; or keyword (+ authors), [vector load + scoring], the hits' rows
            assert count.runs == runs, (mode, count.names)
            if programs:
                assert count.names == ["SqliteFactStore.run_search.<locals>.op"]
            assert not any("vector_search" in name for name in count.store_threads)
            assert [h.fact.id for h in got.hits] == [h.fact.id for h in warm.hits]
            assert got.hits[0].fact.author == "alice"  # the author boost had its authors
            monkeypatch.undo()


async def test_large_scope_scores_off_the_sql_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above INLINE_SCAN_MAX vectors the scoring moves to its own thread (SQL threads stay free
    for writes); the candidates are the same either way."""
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        await mem.add_many([{"messages": _turns(120), "user_id": "u1", "session_id": "s1"}])
        await mem.drain_embeddings()  # no background write while counting
        vec = (await mem.embedder.embed_batch(["piano river"]))[0]  # type: ignore[union-attr]
        pf = Scope(user_id="u1").partition_filter()
        count = _Count(monkeypatch)
        inline = await mem.facts.vector_search(pf, vec, limit=10)
        assert count.runs == 1 and count.store_threads == [], count.names
        monkeypatch.setattr(sqlite_facts, "INLINE_SCAN_MAX", 100)
        count = _Count(monkeypatch)
        threaded = await mem.facts.vector_search(pf, vec, limit=10)
        assert count.runs == 1, count.names
        assert count.store_threads == ["_VectorScan.score"]
        assert [(c.fact_id, c.score) for c in threaded] == [(c.fact_id, c.score) for c in inline]


def _message(text: str, author: str) -> Fact:
    return Fact(content=text, user_id="u1", hash=content_hash(text), kind="message", author=author, session_id="s")


async def test_authors_follow_other_writers_and_forget(tmp_path: Path) -> None:
    """The authors a keyword search remembers: another store on the file adds a speaker, the
    next keyword search sees them; a purge forgets them."""
    path = tmp_path / "f.db"
    a = await SqliteFactStore.open(path)
    b = await SqliteFactStore.open(path)
    try:
        pf: PartitionFilter = Scope(user_id="u1").partition_filter()
        await a.put_facts([_message("quartz one", "Ann")], None)
        assert await a.keyword_search(pf, ["quartz"], limit=5)
        assert await a.authors(pf) == ["Ann"]
        await b.put_facts([_message("quartz two", "Zed")], None)
        await a.keyword_search(pf, ["quartz"], limit=5)
        assert sorted(await a.authors(pf)) == ["Ann", "Zed"]
        assert await a.purge_user("u1") >= 2
        assert a._authors == {}  # no forgotten speaker's name kept
        assert await a.authors(pf) == []
    finally:
        await a.close()
        await b.close()


async def test_a_search_program_resolves_the_scope_s_partitions_once(tmp_path: Path) -> None:
    """The keyword search, the vector index load and the hits' rows of one program share one
    reading of the scope's partitions (the stage path read them in each call)."""
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="null") as mem:
        await mem.add_many([{"messages": _turns(50), "user_id": "u1", "session_id": "s1"}])
        await mem.drain_embeddings()
        await mem.search("piano river", user_id="u1")
        await mem.facts.settle_access()
        seen: list[str] = []
        db = mem.facts.database
        for conn in db._conns:
            conn.set_trace_callback(seen.append)
        try:
            for programs, reads in ((True, 1), (False, 3)):
                mem.search_engine.programs = programs
                seen.clear()
                got = await mem.search("what did alice say about the piano", user_id="u1")
                assert got.hits
                await mem.facts.settle_access()
                assert sum("FROM partitions WHERE partition >=" in q for q in seen) == reads, seen
        finally:
            for conn in db._conns:
                conn.set_trace_callback(None)
