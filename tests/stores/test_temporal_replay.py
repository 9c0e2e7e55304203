"""The core's replay of a fact's history (memlane.stores.sql.temporal.replay), pure: record time,
world time, and history rows written before migration ``bitemporal`` (no ``effective_at``)."""

from __future__ import annotations

from datetime import UTC, datetime

from memlane.models import Fact
from memlane.stores.sql.temporal import Version, replay


def at(day: int, month: int = 1, year: int = 2025) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


def stored(**kw: object) -> Fact:
    base = {"content": "Sam lives in Porto", "user_id": "sam", "version": 2, "formed_at": at(1), "valid_from": at(10)}
    return Fact.model_validate(base | kw)


HISTORY = [
    Version("ADD", at(1), "Sam lives in Lisbon", at(1, 1, 2023)),
    Version("UPDATE", at(10), "Sam lives in Porto", at(2, 5, 2024), old="Sam lives in Lisbon"),
]


def test_record_time_replays_versions() -> None:
    fact = stored(valid_from=at(2, 5, 2024))
    assert replay(fact, HISTORY, at(1, 1, 2024)) is None  # not recorded yet
    then = replay(fact, HISTORY, at(5))
    assert then is not None and (then.content, then.version, then.invalid_at) == ("Sam lives in Lisbon", 1, None)
    assert then.valid_from == at(1, 1, 2023) and then.hash != fact.hash
    now = replay(fact, HISTORY, at(20))
    assert now is fact  # nothing differs: the stored row itself


def test_world_time_picks_the_version_that_held() -> None:
    fact = stored(valid_from=at(2, 5, 2024))
    lisbon = replay(fact, HISTORY, None, at(1, 6, 2023))
    assert lisbon is not None and lisbon.content == "Sam lives in Lisbon" and lisbon.invalid_at == at(2, 5, 2024)
    porto = replay(fact, HISTORY, None, at(1, 6, 2024))
    assert porto is not None and porto.content == "Sam lives in Porto" and porto.invalid_at is None
    assert replay(fact, HISTORY, None, at(1, 6, 2020)) is None
    # as held on day 5 (before the update was recorded), Lisbon still held in June 2024
    known = replay(fact, HISTORY, at(5), at(1, 6, 2024))
    assert known is not None and known.content == "Sam lives in Lisbon"


def test_deletion_ends_the_last_version() -> None:
    fact = stored(invalid_at=at(3, 2, 2024), valid_from=at(2, 5, 2024))
    history = [*HISTORY, Version("DELETE", at(15), None, at(3, 2, 2024))]
    before = replay(fact, history, at(12))
    assert before is not None and before.invalid_at is None
    gone = replay(fact, history, at(20))
    assert gone is not None and gone.invalid_at == at(3, 2, 2024)


def test_rows_from_before_the_migration_fall_back() -> None:
    """No effective_at: an ADD holds from the row's valid_from, an UPDATE from when it was
    recorded, a DELETE ends the fact at the row's invalid_at."""
    fact = stored(valid_from=at(1, 1, 2023))  # an old update did not move valid_from
    old = [Version("ADD", at(1), "Sam lives in Lisbon"), Version("UPDATE", at(10), "Sam lives in Porto")]
    lisbon = replay(fact, old, None, at(5))
    assert lisbon is not None and lisbon.content == "Sam lives in Lisbon" and lisbon.invalid_at == at(10)
    porto = replay(fact, old, None, at(12))
    assert porto is not None and porto.content == "Sam lives in Porto"
    # no ADD row at all (an old import): the first text is the first update's old text
    lone = [Version("UPDATE", at(10), "Sam lives in Porto", old="Sam lives in Faro")]
    first = replay(fact, lone, at(5))
    assert first is not None and first.content == "Sam lives in Faro" and first.version == 1
