"""A user's memory over time, once for every SQL dialect (sans-IO: see :mod:`memlane.stores.sql`):
:func:`timeline` pages through the history of the memories in a set of partitions, newest
first; :func:`growth` counts the memories added and invalidated per day in one ``GROUP BY``
statement each and folds the days into buckets (:func:`fold_growth`, pure).

Paging by time never loses a row: a page ends after *all* the rows recorded at its last
instant (two changes of one transaction share their ``at``), so ``before`` = that instant
starts the next page exactly after them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from memlane.models import Growth, GrowthPoint, Timeline, TimelineEvent
from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.stmt import Program, Row, all_rows

__all__ = ["MAX_GROWTH_POINTS", "Bucket", "bucket_start", "fold_growth", "growth", "timeline"]

Bucket = Literal["day", "week", "month"]

#: The most buckets :func:`growth` returns (the latest ones; ``valid`` still counts from the start).
MAX_GROWTH_POINTS = 3660

_EVENT_COLS = "h.id, h.at, h.effective_at, h.fact_id, h.event, h.old_content, h.new_content, h.actor, f.kind, f.scope"


def _event(d: Dialect, r: Row) -> TimelineEvent:
    return TimelineEvent(
        id=r[0],
        at=d.unts(r[1]),
        effective_at=d.unts(r[2]) if r[2] is not None else None,
        fact_id=d.untext(r[3]) or "",
        event=r[4],
        old_content=d.untext(r[5]),
        new_content=d.untext(r[6]),
        actor=d.untext(r[7]) or "",
        kind=r[8],
        scope=r[9],
    )


def timeline(d: Dialect, parts: Sequence[str], *, limit: int, before: datetime | None) -> Program[Timeline]:
    """The history rows of the facts in ``parts`` recorded before ``before`` (all when None),
    newest first: at least ``limit`` of them when there are, more only to finish the last
    instant (see the module docstring)."""
    if not parts:
        return Timeline(events=[])
    pcond, pargs = d.in_list("f.partition", parts)
    base = f"SELECT {_EVENT_COLS} FROM history h JOIN facts f ON f.id = h.fact_id WHERE {pcond}"
    args: list[Any] = list(pargs)
    if before is not None:
        base += " AND h.at < ?"
        args.append(d.ts(before))
    rows = yield from all_rows(base + " ORDER BY h.at DESC, h.id DESC LIMIT ?", (*args, limit + 1))
    if len(rows) <= limit:
        return Timeline(events=[_event(d, r) for r in rows])
    last = rows[limit - 1][1]
    page = [r for r in rows[:limit] if r[1] != last]
    # every row of the last instant, however many
    page += yield from all_rows(
        f"SELECT {_EVENT_COLS} FROM history h JOIN facts f ON f.id = h.fact_id WHERE {pcond} AND h.at = ?"
        " ORDER BY h.id DESC",
        (*pargs, last),
    )
    return Timeline(events=[_event(d, r) for r in page], next_before=d.unts(last))


def bucket_start(day: date, bucket: Bucket) -> date:
    """The first day of the bucket holding ``day`` (weeks start on Monday)."""
    if bucket == "week":
        return day - timedelta(days=day.weekday())
    if bucket == "month":
        return day.replace(day=1)
    return day


def _next(start: date, bucket: Bucket) -> date:
    if bucket == "day":
        return start + timedelta(days=1)
    if bucket == "week":
        return start + timedelta(days=7)
    return (start.replace(day=28) + timedelta(days=4)).replace(day=1)


def fold_growth(
    added: Iterable[tuple[str, int]], invalidated: Iterable[tuple[str, int]], bucket: Bucket, today: date
) -> Growth:
    """Per-day counts (``YYYY-MM-DD``, n) folded into contiguous buckets from the first one with
    a change through the one holding ``today``, ``valid`` cumulative; at most
    :data:`MAX_GROWTH_POINTS` (the latest)."""
    per: dict[date, list[int]] = {}
    for column, days in ((0, added), (1, invalidated)):
        for text, n in days:
            start = bucket_start(date.fromisoformat(str(text)), bucket)
            per.setdefault(start, [0, 0])[column] += int(n)
    if not per:
        return Growth(bucket=bucket, points=[])
    end = max(bucket_start(today, bucket), max(per))
    points: list[GrowthPoint] = []
    valid = 0
    start = min(per)
    while start <= end:
        a, i = per.get(start, (0, 0))
        valid += a - i
        points.append(GrowthPoint(start=start, added=a, invalidated=i, valid=valid))
        start = _next(start, bucket)
    return Growth(bucket=bucket, points=points[-MAX_GROWTH_POINTS:])


def growth(d: Dialect, parts: Sequence[str], *, bucket: Bucket, today: date | None = None) -> Program[Growth]:
    """Memories of ``parts`` added and invalidated per ``bucket`` (:func:`fold_growth`): two
    ``GROUP BY`` statements over the facts, one row per day back."""
    if not parts:
        return Growth(bucket=bucket, points=[])
    pcond, pargs = d.in_list("partition", parts)
    added = yield from all_rows(
        f"SELECT {d.day('formed_at')}, COUNT(*) FROM facts WHERE {pcond} GROUP BY {d.day('formed_at')}", pargs
    )
    gone = yield from all_rows(
        f"SELECT {d.day('invalid_at')}, COUNT(*) FROM facts WHERE {pcond} AND invalid_at IS NOT NULL"
        f" GROUP BY {d.day('invalid_at')}",
        pargs,
    )
    return fold_growth(
        ((r[0], r[1]) for r in added),
        ((r[0], r[1]) for r in gone),
        bucket,
        today or datetime.now(UTC).date(),
    )
