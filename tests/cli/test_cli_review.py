"""``memlane proposals`` and ``memlane review`` on a real SQLite file (in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_line_error, run
from memlane import Memory


def test_list_approve_edit_reject_and_stale(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    path = db[1]
    with Memory(path, embedder="hash") as m:
        add = m.propose("Sam is vegan", user_id="sam", reason="from chat")
        rej = m.propose("Sam hates jazz", user_id="sam")
        fact = m.add("Sam lives in Oslo", user_id="sam")[0]
        stale = m.propose("Sam lives in Bergen", user_id="sam", action="update", target_id=fact.id)
        m.update(fact.id, "Sam lives in Tromso", user_id="sam")
    code, out, _ = run(capsys, "proposals", *db, "-u", "sam")
    assert code == 0 and len(out.splitlines()) == 3
    assert f"{add.id}  pending  add" in out and "Sam is vegan  (reason: from chat)" in out
    code, out, _ = run(capsys, "review", *db, add.id, "--edit", "Sam is vegetarian", "--reviewer", "kim")
    assert code == 0 and "approved" in out and "-> ADD" in out and "by kim" in out
    code, out, _ = run(capsys, "review", *db, rej.id, "--reject")
    assert code == 0 and "rejected" in out
    code, out, _ = run(capsys, "review", *db, stale.id)
    assert code == 1 and "stale" in out
    code, _, err = run(capsys, "review", *db, add.id)
    assert code == 2 and "already reviewed" in one_line_error(err)
    code, out, _ = run(capsys, "proposals", *db, "-u", "sam", "--status", "all", "--json")
    assert code == 0 and sorted(p["status"] for p in json.loads(out)) == ["approved", "rejected", "stale"]
    with Memory(path, embedder="hash") as m:
        assert [f.content for f in m.list(user_id="sam")] == ["Sam is vegetarian", "Sam lives in Tromso"]
        added = m.list(user_id="sam").items[0]
        assert [h.actor for h in m.history(added.id, user_id="sam")] == ["kim"]


def test_errors_are_one_line_and_create_nothing(
    capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "proposals", *db, "-u", "sam")
    assert code == 2 and "no database" in one_line_error(err)
    assert not Path(db[1]).exists()
    with Memory(db[1], embedder="hash") as m:
        m.add("something", user_id="sam")
    code, _, err = run(capsys, "proposals", *db)
    assert code == 2 and "-u USER" in one_line_error(err)
    code, _, err = run(capsys, "review", *db, "nope")
    assert code == 2 and "no proposal" in one_line_error(err)
    code, _, err = run(capsys, "review", *db, "nope", "--reject", "--edit", "x")
    assert code == 2 and "--edit" in one_line_error(err)
