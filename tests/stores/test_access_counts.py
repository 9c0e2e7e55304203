"""Access counts off the search path (issue 19, :mod:`memlane.stores.sql.access`), on a SQLite
file, SQLite ``:memory:`` and PostgreSQL: a search returns before its access-count write
runs, searches meanwhile share one write, reads see every search that returned before them
(through any engine of the process on that database), ``close()`` writes what is pending,
and a failing write costs neither the search nor the read."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory
from memlane.errors import StorageError
from memlane.models import Scope
from memlane.stores.sql import access
from memlane.stores.sql.access import pending_access
from memlane.stores.sql.store import SqlFactStore

Write = Callable[[dict[str, int], Callable[[Iterable[str]], None]], Awaitable[None]]


@pytest.fixture(params=["sqlite", "memory", "pg"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "m.db")
    if request.param == "memory":
        return ":memory:"
    url: str = request.getfixturevalue("pg_url")
    return url


def _memory(location: str) -> AsyncMemory:
    return AsyncMemory(location, embedder="hash", sessions="null")


def _store(mem: AsyncMemory) -> SqlFactStore:
    assert isinstance(mem.facts, SqlFactStore)
    return mem.facts


def _writes(store: SqlFactStore, gate: asyncio.Event | None = None) -> list[dict[str, int]]:
    """Record each background write's counts on ``store`` (held until ``gate`` is set)."""
    seen: list[dict[str, int]] = []
    plain: Write = store._write_access

    async def write(counts: dict[str, int], done: Callable[[Iterable[str]], None]) -> None:
        seen.append(dict(counts))
        if gate is not None:
            await gate.wait()
        await plain(counts, done)

    store._write_access = write  # type: ignore[method-assign]
    return seen


async def _stored_count(mem: AsyncMemory, fact_id: str, user: str) -> int:
    """The count as stored, without writing what is pending."""
    got = await _store(mem).get_facts([fact_id], Scope(user_id=user), settle=False)
    return got[fact_id].access_count


async def test_a_search_returns_before_its_access_count_is_written(location: str) -> None:
    async with _memory(location) as mem:
        [f] = await mem.add("The launch code is 1234", user_id="u")
        gate = asyncio.Event()
        writes = _writes(_store(mem), gate)
        res = await asyncio.wait_for(mem.search("launch code", user_id="u"), 30)
        assert [h.fact.id for h in res.hits] == [f.id]
        for _ in range(200):  # the background write starts, and waits at the gate
            if writes:
                break
            await asyncio.sleep(0.01)
        assert writes == [{f.id: 1}]  # the search returned while its write was held
        assert await _stored_count(mem, f.id, "u") == 0
        reader = asyncio.ensure_future(mem.get(f.id, user_id="u"))
        await asyncio.sleep(0.05)
        assert not reader.done()  # a read of that fact waits for the write in flight
        gate.set()
        assert (await reader).access_count == 1


async def test_searches_meanwhile_share_one_write(location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access, "ACCESS_FLUSH_DELAY_S", 3600.0)  # only a read or close() writes
    async with _memory(location) as mem:
        [f] = await mem.add("The launch code is 1234", user_id="u")
        [g] = await mem.add("The launch window opens at dawn", user_id="u")
        writes = _writes(_store(mem))
        for _ in range(3):
            await mem.search("launch", user_id="u")
        assert writes == [] and pending_access(_store(mem)._access_key) == {f.id: 3, g.id: 3}
        assert (await mem.get(f.id, user_id="u")).access_count == 3
        assert writes == [{f.id: 3}]  # the read wrote its own fact's increments
        page = await mem.list(user_id="u")  # a list writes everything pending
        assert {x.id: x.access_count for x in page.items} == {f.id: 3, g.id: 3}
        assert writes == [{f.id: 3}, {g.id: 3}]


async def test_close_writes_what_is_pending(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    for location in (str(tmp_path / "m.db"), request.getfixturevalue("pg_url")):
        async with _memory(location) as mem:
            [f] = await mem.add("The launch code is 1234", user_id="u")
            await mem.search("launch code", user_id="u")
            await mem.search("launch code", user_id="u")
        assert pending_access(_store(mem)._access_key) == {}
        async with _memory(location) as again:
            assert await _stored_count(again, f.id, "u") == 2


async def test_another_engine_on_the_database_reads_the_counts(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access, "ACCESS_FLUSH_DELAY_S", 3600.0)
    for location in (str(tmp_path / "m.db"), request.getfixturevalue("pg_url")):
        async with _memory(location) as a, _memory(location) as b:
            [f] = await a.add("The launch code is 1234", user_id="u")
            await a.search("launch code", user_id="u")
            await b.search("launch code", user_id="u")
            assert (await b.get(f.id, user_id="u")).access_count == 2  # a's increment, written by b


async def test_a_failing_write_is_logged_and_costs_nothing_else(
    location: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with _memory(location) as mem:
        [f] = await mem.add("The launch code is 1234", user_id="u")
        store = _store(mem)

        async def failing(counts: dict[str, int], done: Callable[[Iterable[str]], None]) -> None:
            raise StorageError("the database went away")

        store._write_access = failing  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="memlane"):
            res = await mem.search("launch code", user_id="u")
            assert [h.fact.id for h in res.hits] == [f.id]
            got = await mem.get(f.id, user_id="u")
        assert got.access_count == 0  # dropped
        assert "writing 1 access count(s) failed (the database went away)" in caplog.text
        del store._write_access
        await mem.search("launch code", user_id="u")
        assert (await mem.get(f.id, user_id="u")).access_count == 1


async def test_a_read_writes_only_what_it_returns(location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """get_facts(settle=False), the search's own read, leaves pending increments alone."""
    monkeypatch.setattr(access, "ACCESS_FLUSH_DELAY_S", 3600.0)
    async with _memory(location) as mem:
        [f] = await mem.add("The launch code is 1234", user_id="u")
        writes = _writes(_store(mem))
        await mem.search("launch code", user_id="u")
        res = await mem.search("launch code", user_id="u")
        assert res.hits[0].fact.access_count == 0 and writes == []
        assert await _stored_count(mem, f.id, "u") == 0
        facts: Any = await _store(mem).get_facts([f.id], Scope(user_id="u"))
        assert facts[f.id].access_count == 2 and writes == [{f.id: 2}]
