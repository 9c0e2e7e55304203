"""``memlane summaries USER``: the sessions an import formed, one block each, the latest first,
narrowed by ``--since`` / ``--until``; ``--json`` prints the data; bad input is one error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_line_error, run


def _turns(tmp_path: Path) -> str:
    lines = []
    for sid, day in (("s1", "2026-11-18"), ("s2", "2026-11-25")):
        said = [
            ("user", f"I'm planning a hiking trip to Porto ({sid})."),
            ("assistant", "Porto has lovely trails."),
            ("user", "I need a light camera for the hiking trip."),
            ("assistant", "A mirrorless camera suits hiking."),
        ]
        for i, (role, text) in enumerate(said):
            turn = {"user_id": "sam", "session_id": sid, "role": role, "content": text}
            lines.append(json.dumps(turn | {"timestamp": f"{day}T19:0{i}:00+00:00"}))
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_summaries_of_imported_and_formed_sessions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, db: list[str]
) -> None:
    code, _, err = run(capsys, "import", _turns(tmp_path), "--form", *db)
    assert code == 0, err
    code, out, err = run(capsys, "summaries", "sam", *db)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("2026-11-25 19:00-19:03 UTC  session s2 (4 messages, version 1)  ")
    assert lines[1] == "  topics: hiking, trip, Porto, camera, light"
    assert lines[2].startswith("  Conversation on Wednesday 25 November 2026, 19:00-19:03 UTC (4 messages).")
    assert lines[3].startswith("2026-11-18 19:00-19:03 UTC  session s1 ")
    assert len(lines) == 6

    code, out, _ = run(capsys, "summaries", "sam", "--since", "2026-11-16", "--until", "2026-11-22", "--json", *db)
    (only,) = json.loads(out)
    assert (only["session_id"], only["message_count"], only["start"]) == ("s1", 4, "2026-11-18T19:00:00Z")
    code, out, _ = run(capsys, "summaries", "sam", "-n", "1", "--json", *db)
    assert [s["session_id"] for s in json.loads(out)] == ["s2"]
    code, out, _ = run(capsys, "summaries", "kai", *db)
    assert (code, out) == (0, "(no session summaries for kai)\n")

    code, out, err = run(capsys, "summaries", "sam", "--since", "2026-11-22", "--until", "2026-11-16", *db)
    assert code == 2 and out == "" and "since (2026-11-22T00:00:00+00:00) is after until" in one_line_error(err)
