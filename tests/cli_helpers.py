"""Helpers of the CLI tests: run ``memlane`` in-process, read its one-line errors, a tmp database."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``memlane ARGV`` in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    """The error output is exactly one ``memlane: error: ...`` line (no traceback)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memlane: error: "), err
    return lines[0]


@pytest.fixture
def db(tmp_path: Path) -> list[str]:
    """``--db`` on a fresh tmp file, the hash embedder, quiet."""
    return ["--db", str(tmp_path / "cli.db"), "--embedder", "hash", "-q"]
