"""A user's memory over time (issue 21): ``timeline`` lists every change to the user's memories
newest first with the text before and after, paged by time without losing the changes of one
instant; ``growth`` counts memories added, invalidated and valid per bucket. The tests taking
the ``mem`` fixture run here on a SQLite file and, imported by tests/engine/test_engine_backends.py,
on PostgreSQL and on PostgreSQL with Redis sessions and queue."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from memlane import AsyncMemory, Growth, Memory, Timeline
from memlane.errors import InvalidInputError, ScopeError
from memlane.stores.sql.activity import MAX_GROWTH_POINTS, bucket_start, fold_growth


async def test_timeline_shows_add_update_delete_with_old_and_new_text(mem: AsyncMemory) -> None:
    [fact] = await mem.add("Sam likes tea", user_id="sam")
    await mem.update(fact.id, "Sam likes green tea", user_id="sam")
    await mem.delete(fact.id, user_id="sam")
    await mem.add("Bob likes coffee", user_id="bob")
    await mem.add("Users like short answers", agent_id="gaia", scope="agent", user_id="sam")
    found = await mem.timeline("sam")
    assert isinstance(found, Timeline) and found.next_before is None
    mine = [e for e in found.events if e.fact_id == fact.id]
    assert [(e.event, e.old_content, e.new_content) for e in mine] == [
        ("DELETE", "Sam likes green tea", None),
        ("UPDATE", "Sam likes tea", "Sam likes green tea"),
        ("ADD", None, "Sam likes tea"),
    ]
    assert all((e.kind, e.scope, e.actor) == ("fact", "user", "api") for e in mine)
    assert all(e.effective_at is not None for e in mine)
    assert [e.at for e in mine] == sorted((e.at for e in mine), reverse=True)
    # the user's own memories only: not bob's, not the agent's shared ones
    assert {e.fact_id for e in found.events} == {fact.id}
    assert [e.event for e in (await mem.timeline("bob")).events] == ["ADD"]
    assert (await mem.timeline("sam", agent_id="gaia")).events == []


async def test_timeline_pages_by_time_and_keeps_an_instant_whole(mem: AsyncMemory) -> None:
    await mem.add("Sam's first note", user_id="sam")
    # one add of three messages: three ADD rows recorded at the same instant
    batch = await mem.add(
        [{"role": "user", "content": f"Sam's batch note {i}"} for i in range(3)], user_id="sam", session_id="s1"
    )
    [last] = await mem.add("Sam's last note", user_id="sam")
    first_page = await mem.timeline("sam", limit=2)
    # the newest event, then the whole instant of the batch (three, though the limit is two)
    assert [e.fact_id for e in first_page.events[:1]] == [last.id]
    assert sorted(e.fact_id for e in first_page.events[1:]) == sorted(f.id for f in batch)
    assert first_page.next_before == first_page.events[-1].at
    rest = await mem.timeline("sam", limit=2, before=first_page.next_before)
    assert [e.new_content for e in rest.events] == ["Sam's first note"] and rest.next_before is None
    # one event a page over distinct instants
    one = await mem.timeline("sam", limit=1)
    assert [e.fact_id for e in one.events] == [last.id] and one.next_before == one.events[0].at
    # an ISO string works as well
    again = await mem.timeline("sam", limit=2, before=first_page.next_before.isoformat())  # type: ignore[union-attr]
    assert again == rest


async def test_growth_counts_added_invalidated_and_valid(mem: AsyncMemory) -> None:
    facts = [f for i in range(4) for f in await mem.add(f"Sam fact {i}", user_id="sam")]
    await mem.add("Sam under gaia", user_id="sam", agent_id="gaia")
    await mem.add("Bob fact", user_id="bob")
    await mem.delete(facts[0].id, user_id="sam")
    today = datetime.now(UTC).date()
    day = await mem.growth("sam")
    assert isinstance(day, Growth) and day.bucket == "day"
    # a test running across midnight UTC may see two days: the totals still hold
    assert sum(p.added for p in day.points) == 5 and sum(p.invalidated for p in day.points) == 1
    assert day.points[-1].valid == 4 and day.points[-1].start in (today, today - timedelta(days=1))
    week = await mem.growth("sam", bucket="week")
    assert week.points[-1].start.weekday() == 0 and week.points[-1].valid == 4
    month = await mem.growth("sam", bucket="month")
    assert month.points[-1].start.day == 1 and month.points[-1].valid == 4
    under = await mem.growth("sam", agent_id="gaia")
    assert sum(p.added for p in under.points) == 1 and under.points[-1].valid == 1
    assert (await mem.growth("nobody")).points == []


async def test_timeline_and_growth_refuse_bad_input(mem: AsyncMemory) -> None:
    with pytest.raises(InvalidInputError, match="bucket"):
        await mem.growth("sam", bucket="year")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="limit"):
        await mem.timeline("sam", limit=0)
    with pytest.raises(InvalidInputError, match="before"):
        await mem.timeline("sam", before="last week")
    with pytest.raises(ScopeError):
        await mem.timeline("")


def test_fold_growth_fills_the_gaps_and_runs_the_count() -> None:
    added = [("2026-01-30", 3), ("2026-02-02", 2), ("2026-03-15", 1)]
    gone = [("2026-02-03", 1)]
    days = fold_growth(added, gone, "day", date(2026, 3, 16))
    assert days.points[0].start == date(2026, 1, 30) and days.points[-1].start == date(2026, 3, 16)
    assert len(days.points) == (date(2026, 3, 16) - date(2026, 1, 30)).days + 1
    by_day = {p.start: p for p in days.points}
    assert (by_day[date(2026, 2, 2)].added, by_day[date(2026, 2, 2)].valid) == (2, 5)
    assert (by_day[date(2026, 2, 3)].invalidated, by_day[date(2026, 2, 3)].valid) == (1, 4)
    assert by_day[date(2026, 2, 10)].valid == 4 and days.points[-1].valid == 5
    weeks = fold_growth(added, gone, "week", date(2026, 3, 16))
    assert [p.start for p in weeks.points][:2] == [date(2026, 1, 26), date(2026, 2, 2)]
    assert [(p.added, p.invalidated, p.valid) for p in weeks.points[:2]] == [(3, 0, 3), (2, 1, 4)]
    months = fold_growth(added, gone, "month", date(2026, 3, 16))
    assert [(p.start, p.added, p.invalidated, p.valid) for p in months.points] == [
        (date(2026, 1, 1), 3, 0, 3),
        (date(2026, 2, 1), 2, 1, 4),
        (date(2026, 3, 1), 1, 0, 5),
    ]
    assert fold_growth([], [], "day", date(2026, 3, 16)).points == []
    assert bucket_start(date(2026, 12, 31), "month") == date(2026, 12, 1)
    long_ago = fold_growth([("2000-01-01", 7)], [], "day", date(2026, 3, 16))
    assert len(long_ago.points) == MAX_GROWTH_POINTS and long_ago.points[-1].valid == 7


def test_the_sync_facade_reads_timeline_and_growth(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    with Memory(tmp_path / "m.db", embedder="hash", sessions="sqlite") as m:
        [fact] = m.add("Sam keeps bees", user_id="sam")
        assert [e.fact_id for e in m.timeline("sam").events] == [fact.id]
        assert m.growth("sam", bucket="month").points[-1].valid == 1
