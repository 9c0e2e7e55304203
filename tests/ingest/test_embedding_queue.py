"""The background embedding queue: ``add(..., embed="high"|"normal"|"low")`` stores at once
(keyword-searchable) and embeds later, by priority, in batches; progress, drain, durability
across a restart, failure and retry, and erasure of queued facts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from embedding_helpers import KEYWORD_ONLY, Recording, stored_vector
from memlane import AsyncMemory, InvalidInputError, Memory
from memlane.embedding_queue import DEFAULT_BATCH_SIZE
from memlane.errors import EmbedderError


def _texts(prefix: str, n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{prefix} note number {i}"} for i in range(n)]


async def test_high_before_normal_before_low_in_batches(tmp_path: Path) -> None:
    emb = Recording(gated=True)
    n = DEFAULT_BATCH_SIZE + 6  # two batches per priority
    async with AsyncMemory(tmp_path / "q.db", embedder=emb, sessions="null") as m:
        # queued least urgent first; the worker takes the first low batch and waits at the gate
        await m.add(_texts("low", n), user_id="u", embed="low")
        await asyncio.wait_for(emb.started.wait(), 10)
        await m.add(_texts("normal", n), user_id="u", embed="normal")
        await m.add(_texts("high", n), user_id="u", embed="high")
        emb.gate.set()
        done = await m.drain_embeddings()
        assert done["done"] == 3 * n and done["queued"] == 0 and done["failed"] == 0 and done["idle"]
    order = [call[0].split()[0] for call in emb.calls]
    assert all(len({t.split()[0] for t in call}) == 1 for call in emb.calls), "one priority per batch"
    assert all(len(call) <= DEFAULT_BATCH_SIZE for call in emb.calls)
    assert order[0] == "low"  # already in flight when the others arrived
    assert order[1:] == ["high", "high", "normal", "normal", "low"]
    assert sorted(t for call in emb.calls for t in call) == sorted(
        f"{p} note number {i}" for p in ("low", "normal", "high") for i in range(n)
    )


async def test_add_returns_before_embedding_and_facts_are_keyword_searchable(tmp_path: Path) -> None:
    emb = Recording(gated=True)
    async with AsyncMemory(tmp_path / "nb.db", embedder=emb, sessions="null", retrieval=KEYWORD_ONLY) as m:
        stored = await asyncio.wait_for(m.add("Ann keeps bees in the garden", user_id="ann", embed="normal"), 10)
        assert stored[0].kind == "fact"
        await asyncio.wait_for(emb.started.wait(), 10)  # the worker is blocked inside the embedder
        assert emb.calls == [] and await stored_vector(m, stored[0].id, "ann") is None
        hits = (await m.search("bees", user_id="ann")).hits
        assert [h.fact.id for h in hits] == [stored[0].id]
        progress = await m.embedding_progress()
        assert progress["done"] == 0 and not progress["idle"]
        emb.gate.set()
        await asyncio.wait_for(m.drain_embeddings(), 10)
        assert await stored_vector(m, stored[0].id, "ann") is not None


async def test_progress_counts_per_priority(tmp_path: Path) -> None:
    emb = Recording(gated=True)
    async with AsyncMemory(tmp_path / "p.db", embedder=emb, sessions="null") as m:
        assert (await m.embedding_progress())["queued"] == 0
        await m.add("warm-up memory", user_id="u", embed="low")  # taken by the worker, held at the gate
        await asyncio.wait_for(emb.started.wait(), 10)
        await m.add(_texts("a", 3), user_id="u", embed="high")
        await m.add(_texts("b", 5), user_id="u", embed="normal")
        await m.add(_texts("c", 7), user_id="u", embed="low")
        progress = await m.embedding_progress()
        assert (progress["high"], progress["normal"], progress["low"], progress["queued"]) == (3, 5, 7, 15)
        assert progress["done"] == 0
        emb.gate.set()
        final = await m.drain_embeddings()
        assert (final["high"], final["normal"], final["low"], final["queued"], final["done"]) == (0, 0, 0, 0, 16)


async def test_a_document_is_queued_with_its_fragments(tmp_path: Path) -> None:
    emb = Recording()
    text = "\n\n".join(f"## Part {i}\n\n" + "words about volcanoes " * 120 for i in range(4))
    async with AsyncMemory(tmp_path / "d.db", embedder=emb, sessions="null") as m:
        doc = await m.add_document(text, user_id="u", embed="low")
        await m.drain_embeddings()
        fragments = await m.fragments(doc.id, user_id="u")
        assert len(fragments) >= 2
        assert all([await stored_vector(m, f.id, "u") is not None for f in fragments])
        assert await stored_vector(m, doc.id, "u") is not None  # marked done: not embedded again
        # the document itself is embedded by its opening only, never whole
        assert max(len(t) for call in emb.calls for t in call) <= 4000
        hits = (await m.search("volcanoes", user_id="u")).hits
        assert hits and all(h.fact.kind == "fragment" and h.vector_rank is not None for h in hits[:1])


async def test_queued_facts_survive_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    emb = Recording(gated=True)
    async with AsyncMemory(db, embedder=emb, sessions="null") as m:
        stored = await m.add(_texts("later", 10), user_id="u", embed="low")
        await asyncio.wait_for(emb.started.wait(), 10)
    # closed with everything still queued (the worker never got past the gate)
    assert emb.calls == []
    again = Recording()
    async with AsyncMemory(db, embedder=again, sessions="null") as m:
        assert all([await stored_vector(m, f.id, "u") is None for f in stored])
        assert (await m.search("later note", user_id="u", top_k=20)).hits  # keyword search meanwhile
        progress = await m.drain_embeddings()
        assert progress["done"] == 10 and progress["idle"]
        assert all([await stored_vector(m, f.id, "u") is not None for f in stored])
    stored_texts = [t for call in again.calls for t in call if "number" in t]  # not the search's query
    assert sorted(stored_texts) == sorted(f["content"] for f in _texts("later", 10))


async def test_a_failing_embedder_loses_nothing_and_is_retried(tmp_path: Path) -> None:
    emb = Recording(failures=2)
    async with AsyncMemory(tmp_path / "f.db", embedder=emb, sessions="null") as m:
        stored = await m.add(_texts("flaky", 5), user_id="u", embed="high")
        with pytest.raises(EmbedderError, match="unavailable"):
            await asyncio.wait_for(m.drain_embeddings(), 10)
        progress = await m.embedding_progress()
        assert progress["failed"] >= 5 and "unavailable" in (progress["last_error"] or "")
        assert progress["done"] == 0 and progress["high"] + progress["queued"] >= 5
        # still there and keyword-searchable (the query embedding fails too: keyword-only results)
        assert len((await m.search("flaky note", user_id="u", top_k=10)).hits) == 5
        # the worker retries with backoff until the embedder recovers
        while True:
            try:
                final = await asyncio.wait_for(m.drain_embeddings(), 30)
                break
            except EmbedderError:
                continue
        assert final["done"] == 5 and final["queued"] == 0
        assert all([await stored_vector(m, f.id, "u") is not None for f in stored])
    stored_texts = [t for call in emb.calls for t in call if "number" in t]  # not the search's query
    assert sorted(stored_texts) == sorted(f["content"] for f in _texts("flaky", 5))


async def test_inline_failures_are_picked_up_by_the_worker(tmp_path: Path) -> None:
    emb = Recording(failures=1)
    async with AsyncMemory(tmp_path / "i.db", embedder=emb, sessions="null") as m:
        [fact] = await m.add("stored while the embedder was down", user_id="u")  # embed="now" failed: keyword-only
        assert await stored_vector(m, fact.id, "u") is None
        await m.add("a queued one", user_id="u", embed="normal")
        await asyncio.wait_for(m.drain_embeddings(), 10)
        assert await stored_vector(m, fact.id, "u") is not None


async def test_forgetting_a_user_drops_their_queued_text(tmp_path: Path) -> None:
    emb = Recording(gated=True)
    async with AsyncMemory(tmp_path / "g.db", embedder=emb, sessions="null", retrieval=KEYWORD_ONLY) as m:
        await m.add("bob's warm-up memory", user_id="bob", embed="low")
        await asyncio.wait_for(emb.started.wait(), 10)  # bob's batch is in flight
        await m.add("ann secret ingredient saffron", user_id="ann", embed="high")
        await m.forget("ann")
        emb.gate.set()
        await m.drain_embeddings()
        assert (await m.search("saffron", user_id="bob")).hits == []
    assert all("saffron" not in t for call in emb.calls for t in call), "forgotten text reached the embedder"


async def test_bad_priority_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "b.db", embedder="hash", sessions="null") as m:
        for bad in ("urgent", "HIGH", None, 1):
            with pytest.raises(InvalidInputError, match="embed must be one of"):
                await m.add("some memory", user_id="u", embed=bad)  # type: ignore[call-overload]
            with pytest.raises(InvalidInputError, match="embed must be one of"):
                await m.add_document("some document", user_id="u", embed=bad)  # type: ignore[arg-type]
        assert (await m.stats(user_id="u")).facts == 0


async def test_without_an_embedder_queueing_is_a_no_op(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "n.db", embedder=None, sessions="null") as m:
        await m.add("keyword only memory", user_id="u", embed="low")
        assert (await m.drain_embeddings())["queued"] == 0
        assert (await m.search("keyword", user_id="u")).hits


def test_sync_facade(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder="hash", sessions="null") as m:
        facts = m.add([{"role": "user", "content": f"sync bulk line {i}"} for i in range(20)], user_id="u", embed="low")
        progress = m.drain_embeddings()
        assert progress["done"] == 20 and progress["idle"]
        assert m.embedding_progress()["queued"] == 0
        hit = m.search("sync bulk line 7", user_id="u").hits[0]
        assert hit.fact.id == facts[7].id and hit.vector_rank is not None
