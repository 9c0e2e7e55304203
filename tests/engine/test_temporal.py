"""Point-in-time memory (docs/temporal.md): ``as_of`` (record time) and ``valid_at`` (world
time) on search, list, get, context and profile, over a scripted timeline of adds, updates,
deletes, contradictions and a ``forget``. These take the ``mem`` fixture (a SQLite file here);
tests/engine/test_engine_backends.py runs them again on PostgreSQL and PostgreSQL + Redis."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from memlane import AsyncMemory
from memlane.errors import InvalidInputError, NotFoundError
from memlane.models import utcnow

WHERE = "where does Sam live"


async def _tick() -> datetime:
    """A moment strictly between the writes around it."""
    await asyncio.sleep(0.002)
    t = utcnow()
    await asyncio.sleep(0.002)
    return t


async def test_as_of_sees_memory_as_it_was_before_updates_and_deletes(mem: AsyncMemory) -> None:
    before = await _tick()
    [home] = await mem.add("Sam lives in Lisbon", user_id="sam")
    t1 = await _tick()
    await mem.update(home.id, "Sam lives in Porto", user_id="sam")
    t2 = await _tick()
    [jazz] = await mem.add("Sam likes jazz concerts", user_id="sam")
    t3 = await _tick()
    await mem.delete(jazz.id, user_id="sam")
    t4 = await _tick()

    then = await mem.search(WHERE, user_id="sam", as_of=t1)
    assert [(h.fact.id, h.fact.content, h.fact.version) for h in then.hits] == [(home.id, "Sam lives in Lisbon", 1)]
    assert then.hits[0].score > 0 and then.hits[0].fact.embedding is None
    assert [h.fact.content for h in (await mem.search(WHERE, user_id="sam", as_of=t2)).hits] == ["Sam lives in Porto"]
    assert [h.fact.content for h in (await mem.search(WHERE, user_id="sam")).hits] == ["Sam lives in Porto"]
    # the old words find the old version only in the past
    assert [h.fact.content for h in (await mem.search("Lisbon", user_id="sam", as_of=t1)).hits] == [
        "Sam lives in Lisbon"
    ]
    assert "Sam lives in Lisbon" not in [h.fact.content for h in (await mem.search("Lisbon", user_id="sam")).hits]
    assert (await mem.search(WHERE, user_id="sam", as_of=before)).hits == []

    # a deleted fact: there until its delete, gone after (kept with include_invalid)
    assert [h.fact.id for h in (await mem.search("jazz concerts", user_id="sam", as_of=t3)).hits] == [jazz.id]
    assert (await mem.search("jazz concerts", user_id="sam", as_of=t4)).hits == []
    assert [f.content for f in (await mem.list(user_id="sam", as_of=t3)).items] == [
        "Sam likes jazz concerts",
        "Sam lives in Porto",
    ]
    page = await mem.list(user_id="sam", as_of=t4)
    assert [f.content for f in page.items] == ["Sam lives in Porto"] and page.total == 1
    dead = await mem.list(user_id="sam", as_of=t4, include_invalid=True)
    assert [(f.id, f.invalid_at is not None) for f in dead.items] == [(jazz.id, True), (home.id, False)]
    assert (await mem.list(user_id="sam", as_of=before)).total == 0

    # get: the version then; not found before it existed
    old = await mem.get(home.id, user_id="sam", as_of=t1)
    assert (old.content, old.version) == ("Sam lives in Lisbon", 1)
    assert (await mem.get(jazz.id, user_id="sam", as_of=t3)).invalid_at is None
    assert (await mem.get(jazz.id, user_id="sam", as_of=t4)).invalid_at is not None
    with pytest.raises(NotFoundError):
        await mem.get(home.id, user_id="sam", as_of=before)
    with pytest.raises(NotFoundError):  # the scope still decides what is visible
        await mem.get(home.id, user_id="eve", as_of=t1)


async def test_as_of_pages_filters_and_modes(mem: AsyncMemory) -> None:
    for i in range(5):
        await mem.add(f"Sam visited museum number {i}", user_id="sam", metadata={"n": i})
    await mem.add([{"role": "user", "content": "hello museum"}], user_id="sam", session_id="s1")
    t = await _tick()
    await mem.add("Sam visited museum number 9", user_id="sam")
    first = await mem.list(user_id="sam", as_of=t, limit=2, kind="fact")
    assert first.total == 5 and len(first.items) == 2 and first.next_cursor is not None
    rest = await mem.list(user_id="sam", as_of=t, limit=10, kind="fact", cursor=first.next_cursor)
    assert [f.content for f in first.items + rest.items] == [f"Sam visited museum number {i}" for i in range(4, -1, -1)]
    assert [f.metadata["n"] for f in (await mem.list(user_id="sam", as_of=t, filters={"n": 3})).items] == [3]
    found = await mem.search("museum", user_id="sam", as_of=t, top_k=10, filters={"kind": "message"})
    assert [h.fact.content for h in found.hits] == ["hello museum"]
    sub = await mem.search("NUMBER 2", user_id="sam", as_of=t, mode="substring")
    assert [h.fact.content for h in sub.hits] == ["Sam visited museum number 2"]
    kw = await mem.search("museum", user_id="sam", as_of=t, mode="keyword", top_k=10)
    assert len(kw.hits) == 6 and all(h.vector_score is None for h in kw.hits)
    assert "Sam visited museum number 9" not in [h.fact.content for h in kw.hits]
    with pytest.raises(InvalidInputError):
        await mem.search("museum", user_id="sam", as_of="not a time")
    with pytest.raises(InvalidInputError):
        await mem.list(user_id="sam", valid_at=12)


async def test_valid_at_follows_the_statements_own_times(mem: AsyncMemory) -> None:
    """Formation dates world-time validity from the turns' timestamps, not when it ran: "I
    moved to Porto" said in May 2024 ends Lisbon in May 2024."""

    def said(text: str, when: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": text, "timestamp": when}]

    [lisbon] = await mem.add(
        said("I live in Lisbon", "2023-01-10T09:00:00Z"), user_id="sam", session_id="a", infer=True
    )
    assert lisbon.valid_from == datetime(2023, 1, 10, 9, tzinfo=UTC)
    [pizza] = await mem.add(said("I love pizza", "2023-02-01T12:00:00Z"), user_id="sam", session_id="b", infer=True)
    recorded = await _tick()
    await mem.add(said("I moved to Porto", "2024-05-02T09:00:00Z"), user_id="sam", session_id="c", infer=True)
    [nope] = await mem.add(said("I hate pizza", "2024-02-01T12:00:00Z"), user_id="sam", session_id="d", infer=True)

    # a contradiction: the old fact ends when the new statement was made
    gone = await mem.get(pizza.id, user_id="sam")
    assert gone.invalid_at == datetime(2024, 2, 1, 12, tzinfo=UTC) and nope.valid_from == gone.invalid_at

    async def true_at(when: str) -> list[str]:
        return sorted(f.content for f in (await mem.list(user_id="sam", valid_at=when)).items)

    assert await true_at("2022-06-01") == []
    assert await true_at("2023-01-20") == ["Sam lives in Lisbon"]
    assert await true_at("2023-06-01") == ["Sam lives in Lisbon", "Sam loves pizza"]
    assert await true_at("2024-03-01") == ["Sam hates pizza", "Sam lives in Lisbon"]
    assert await true_at("2024-06-01") == ["Sam hates pizza", "Sam moved to Porto"]

    hits = (await mem.search(WHERE, user_id="sam", valid_at="2023-06-01")).hits
    assert [h.fact.content for h in hits][:1] == ["Sam lives in Lisbon"]
    lived = hits[0].fact
    assert lived.id == lisbon.id and lived.invalid_at == datetime(2024, 5, 2, 9, tzinfo=UTC)
    moved = [h.fact for h in (await mem.search("where did Sam move", user_id="sam", valid_at="2024-06-01")).hits]
    assert [(f.id, f.content) for f in moved][:1] == [(lisbon.id, "Sam moved to Porto")]
    earlier = await mem.search("where did Sam move", user_id="sam", valid_at="2023-06-01")
    assert "Sam moved to Porto" not in [h.fact.content for h in earlier.hits]
    assert (await mem.get(lisbon.id, user_id="sam", valid_at="2023-06-01")).content == "Sam lives in Lisbon"
    with pytest.raises(NotFoundError):
        await mem.get(lisbon.id, user_id="sam", valid_at="2020-01-01")
    # both times: what memory held at `recorded` about 2024-06 (the move was not known yet)
    assert sorted(f.content for f in (await mem.list(user_id="sam", as_of=recorded, valid_at="2024-06-01")).items) == [
        "Sam lives in Lisbon",
        "Sam loves pizza",
    ]


async def test_forget_erases_at_every_as_of(mem: AsyncMemory) -> None:
    [f] = await mem.add("Eve's passport number is X1234", user_id="eve")
    t1 = await _tick()
    await mem.update(f.id, "Eve's passport number is Y5678", user_id="eve")
    t2 = await _tick()
    await mem.add("Sam lives in Lisbon", user_id="sam")
    assert (await mem.search("passport", user_id="eve", as_of=t1)).hits
    await mem.forget("eve")
    for t in (t1, t2, utcnow()):
        assert (await mem.search("passport", user_id="eve", as_of=t)).hits == []
        assert (await mem.list(user_id="eve", as_of=t, include_invalid=True)).total == 0
        assert (await mem.list(user_id="eve", valid_at=t)).total == 0
        with pytest.raises(NotFoundError):
            await mem.get(f.id, user_id="eve", as_of=t)
    assert (await mem.list(user_id="sam", as_of=utcnow())).total == 1


async def test_context_and_profile_as_of(mem: AsyncMemory) -> None:
    [home] = await mem.add("Sam lives in Lisbon", user_id="sam")
    t1 = await _tick()
    await mem.update(home.id, "Sam lives in Porto", user_id="sam")
    now_ctx = await mem.context(user_id="sam")
    assert "Porto" in now_ctx and "Lisbon" not in now_ctx
    then_ctx = await mem.context(user_id="sam", as_of=t1)
    assert "Lisbon" in then_ctx and "Porto" not in then_ctx
    assert "Porto" in await mem.context(user_id="sam")  # the past was not cached as the present
    assert "Lisbon" in ((await mem.profile("sam", as_of=t1)) or "")
    assert "Porto" in ((await mem.profile("sam")) or "")
    assert await mem.context(user_id="sam", as_of=datetime(2000, 1, 1, tzinfo=UTC)) == ""


async def test_memory_database_in_process(tmp_path: object) -> None:
    async with AsyncMemory(":memory:", embedder="hash") as m:
        [f] = await m.add("Sam lives in Lisbon", user_id="sam")
        t = await _tick()
        await m.update(f.id, "Sam lives in Porto", user_id="sam")
        assert [h.fact.content for h in (await m.search(WHERE, user_id="sam", as_of=t)).hits] == ["Sam lives in Lisbon"]


async def test_snapshot_reads_settled_access_counts(mem: AsyncMemory) -> None:
    [f] = await mem.add("Sam lives in Lisbon", user_id="sam")
    assert [h.fact.id for h in (await mem.search(WHERE, user_id="sam")).hits] == [f.id]  # bumps it (later)
    [now] = (await mem.list(user_id="sam", as_of=utcnow())).items
    assert now.access_count == 1
