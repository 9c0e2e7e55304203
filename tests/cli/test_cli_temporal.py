"""``memlane search|list --as-of/--valid-at`` and ``memlane profile --as-of`` (docs/temporal.md)
on a SQLite file and on PostgreSQL: the timeline is written through the API, read by the CLI."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cli_helpers import one_line_error, run
from memlane import Memory


@pytest.fixture(params=["sqlite", "pg"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "cli.db") if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


def test_as_of_and_valid_at_in_the_cli(capsys: pytest.CaptureFixture[str], location: str) -> None:
    with Memory(location, embedder="hash") as m:
        lives = [{"role": "user", "content": "I live in Lisbon", "timestamp": "2023-01-10T09:00:00Z"}]
        m.add(lives, user_id="sam", session_id="a", infer=True)
        time.sleep(0.005)
        t1 = datetime.now(UTC).isoformat()
        time.sleep(0.005)
        moved = [{"role": "user", "content": "I moved to Porto", "timestamp": "2024-05-02T09:00:00Z"}]
        m.add(moved, user_id="sam", session_id="b", infer=True)
    db = ["--db", location, "--embedder", "hash", "-q"]

    code, out, _ = run(capsys, "search", "where does Sam live", "-u", "sam", "--as-of", t1, *db)
    assert code == 0 and "Sam lives in Lisbon" in out and "Porto" not in out
    code, out, _ = run(capsys, "search", "where does Sam live", "-u", "sam", *db)
    assert code == 0 and "Lisbon" not in out
    code, out, _ = run(capsys, "list", "-u", "sam", "--valid-at", "2023-06-01", *db)
    assert code == 0 and "Sam lives in Lisbon" in out and "-- 1 of 1" in out
    code, out, _ = run(capsys, "list", "-u", "sam", "--valid-at", "2024-06-01", "--as-of", t1, *db)
    assert code == 0 and "Sam lives in Lisbon" in out  # the move was not known at t1
    code, out, _ = run(capsys, "list", "-u", "sam", "--valid-at", "2024-06-01", *db)
    assert code == 0 and "Sam moved to Porto" in out and "Lisbon" not in out
    code, out, _ = run(capsys, "profile", "-u", "sam", "--as-of", t1, *db)
    assert code == 0 and "Lisbon" in out and "Porto" not in out
    code, _, err = run(capsys, "list", "-u", "sam", "--as-of", "last tuesday", *db)
    assert code == 2 and "as_of" in one_line_error(err)
