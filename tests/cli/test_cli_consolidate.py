"""``memlane consolidate SCOPE``: merges the pending reflections now and says so (a status line
on stderr, the new version and blob on stdout); nothing pending says that; ``--history`` lists
the versions newest first; ``--no-wait`` only queues the job; bad input is one error line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cli_helpers import one_line_error, run
from memlane import AsyncMemory
from memlane.models import Reflection


def _reflect(path: str, *texts: str) -> None:
    async def put() -> None:
        async with AsyncMemory(path, embedder="hash", sessions="sqlite") as m:
            for text in texts:
                await m.reflection_store.put_reflection(Reflection(content=text, scope="user", user_id="sam"))

    asyncio.run(put())


def test_consolidate_now_then_the_history(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    path = db[1]
    code, out, err = run(capsys, "consolidate", "user", "-u", "sam", *db)
    assert code == 2 and out == "" and "no database" in one_line_error(err)  # never creates one
    _reflect(path, "Sam keeps bees.")
    code, out, err = run(capsys, "consolidate", "user", "-u", "sam", *db)
    assert code == 0, err
    assert "consolidating the user memory (user sam) ..." in err
    lines = out.splitlines()
    assert lines[0] == "consolidated 1 reflection(s): version 1, 6/300 words"
    assert lines[1:] == ["VERSION: 1", "- Sam keeps bees."]
    code, out, _ = run(capsys, "consolidate", "user", "-u", "sam", *db)
    assert code == 0 and out.startswith("nothing to consolidate: no reflections waiting")
    _reflect(path, "Sam moved to Porto.", "Sam has a sister, Ana.")
    code, out, _ = run(capsys, "consolidate", "user", "-u", "sam", "--json", *db)
    body = json.loads(out)
    assert body["consolidated"][0]["version"] == 2 and body["skipped"] is None
    code, out, _ = run(capsys, "consolidate", "user", "-u", "sam", "--history", *db)
    heads = [line for line in out.splitlines() if line.startswith("== version")]
    assert [h.split()[2] for h in heads] == ["2", "1"]
    code, out, _ = run(capsys, "consolidate", "user", "-u", "sam", "--history", "--json", "-n", "1", *db)
    (latest,) = json.loads(out)
    assert latest["version"] == 2 and "Ana" in latest["content"]
    code, out, _ = run(capsys, "consolidate", "user", "-u", "kai", "--history", *db)
    assert out == "(no consolidated versions of the user memory (user kai))\n"
    _reflect(path, "Sam likes jam.")
    code, out, _ = run(capsys, "consolidate", "user", "-u", "sam", "--no-wait", *db)
    assert code == 0 and out.startswith("queued job ") and "(status: queued)" in out
    code, out, _ = run(capsys, "jobs", "--run", "--json", *db)
    assert any(j["kind"] == "consolidate" and j["status"] == "done" for j in json.loads(out.split("\n", 1)[1]))


def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, db: list[str]) -> None:
    _reflect(db[1], "Sam keeps bees.")
    code, out, err = run(capsys, "consolidate", "agent", *db)
    assert code == 2 and out == "" and "agent-scope reflections need agent_id" in one_line_error(err)
