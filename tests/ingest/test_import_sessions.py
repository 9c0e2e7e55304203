"""``memlane import --form`` joins only its users' own sessions (issue 17, section 6).

The HTTP face (``POST /v1/import``) is tested in tests/service/test_service_import.py and in the
isolation property (tests/isolation_property.py); this is the CLI: an existing session of
another user (``S``, or the default ``alice:import``) makes the import exit 2 with nothing
written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlane import Memory
from memlane.cli.main import main


@pytest.mark.parametrize("line", [{"session_id": "S"}, {}], ids=["named", "default id"])
def test_cli_import_refuses_another_users_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: dict[str, str]
) -> None:
    db = tmp_path / "m.db"
    with Memory(db, embedder="hash") as m:
        for sid in ("S", "alice:import"):
            m.sessions.create_session(user_ids=["bob"], session_id=sid)
    data = tmp_path / "turns.jsonl"
    data.write_text(json.dumps({"user_id": "alice", "role": "user", "content": "my passport is X1", **line}) + "\n")
    code = main(["import", str(data), "--form", "--llm", "offline", "--db", str(db), "--embedder", "hash", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "does not take part" in err, err
    with Memory(db, embedder="hash") as m:
        for sid in ("S", "alice:import"):
            session = m.sessions.get_session(sid)
            assert session is not None and session.user_ids == ["bob"] and session.events == []
        assert m.list(user_id="alice").total == 0  # nothing written
    # alice's own session takes her turns
    data.write_text(json.dumps({"user_id": "alice", "session_id": "A1", "role": "user", "content": "I live in Porto"}))
    assert main(["import", str(data), "--form", "--llm", "offline", "--db", str(db), "--embedder", "hash", "-q"]) == 0
