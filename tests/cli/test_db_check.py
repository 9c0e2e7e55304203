"""Corruption: ``check()`` / ``memlane check`` find damaged pages and an inconsistent full-text
index, and damaged pages met during normal use raise CorruptDatabaseError, never a raw
sqlite3 error or partial results."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory, Memory
from memlane.cli.main import main
from memlane.errors import CorruptDatabaseError, MemlaneError
from memlane.formation.config import FormationConfig

CONF = FormationConfig(background=False, idle_minutes=None)


def _fill(path: Path, n: int = 300) -> None:
    with Memory(path, embedder="hash", formation=CONF) as m:
        for i in range(n):
            m.add(f"note {i} about zebra topic {i * 7} " + "filler words for bulk " * 15, user_id=f"u{i % 3}")
    for suffix in ("-wal", "-shm"):  # closed cleanly: everything is in the main file
        assert not Path(f"{path}{suffix}").exists() or Path(f"{path}{suffix}").stat().st_size == 0


def _damage_middle(path: Path) -> None:
    """Overwrite 16 KiB in the middle of the file (a few pages) with garbage."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2 - (size // 2) % 4096)
        f.write(b"\xde\xad\xbe\xef" * 4096)
        f.flush()
        os.fsync(f.fileno())


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


async def test_healthy_database_checks_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "ok.db"
    async with AsyncMemory(db, embedder="hash", formation=CONF) as m:
        await m.add("Sam is vegetarian", user_id="sam")
        report = await m.check()
        assert report.ok and report.problems == []
    code, out = _cli(capsys, "check", "--db", str(db))
    assert code == 0 and out.startswith("ok:")


def test_corrupted_pages_are_reported_and_raise_a_typed_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "bad.db"
    _fill(db)
    _damage_middle(db)

    code, out = _cli(capsys, "check", "--db", str(db))
    assert code == 1, out
    assert "problem(s) found" in out and "restore it from a backup" in out

    with Memory(db, embedder="hash", formation=CONF) as m:
        report = m.check()
        assert not report.ok and report.problems
        ops: list[Callable[[], Any]] = [
            lambda: m.search("zebra", user_id="u1"),
            lambda: m.list(user_id="u0", limit=500),
            lambda: m.list(user_id="u1", limit=500),
            lambda: m.list(user_id="u2", limit=500),
        ]
        raised = []
        for op in ops:
            try:
                op()
            except MemlaneError as exc:
                assert isinstance(exc, CorruptDatabaseError), f"{type(exc).__name__}: {exc}"
                assert "memlane check" in str(exc) and "backup" in str(exc)
                raised.append(exc)
        assert raised, "reads over damaged pages returned results silently"


def test_inconsistent_full_text_index_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "fts.db"
    _fill(db, 20)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE facts_fts_content SET c2 = 'words the index never saw' WHERE id = 3")
    conn.commit()
    conn.close()
    with Memory(db, embedder="hash", formation=CONF) as m:
        report = m.check()
    assert not report.ok and any("facts_fts" in p for p in report.problems), report.problems
    code, out = _cli(capsys, "check", "--db", str(db), "--json")
    assert code == 1 and '"ok": false' in out


def test_check_never_creates_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.db"
    code, out = _cli(capsys, "check", "--db", str(missing))
    assert code == 2 and "no database" in out
    assert not missing.exists()


def test_a_file_that_is_not_a_database_fails_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(64 * 1024))
    code, out = _cli(capsys, "check", "--db", str(junk))
    assert code == 1 and "problem(s) found" in out
