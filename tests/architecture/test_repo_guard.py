"""The guard of tests/repo_guard.py, on a git repository of its own (never on this checkout)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from repo_guard import REPO, left_behind, top_entries, untracked

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_new_untracked_and_ignored_files_are_found_caches_and_sources_are_not(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("*.db\n.venv/\n.hypothesis/\n")
    (tmp_path / "kept.txt").write_text("x")
    subprocess.run(["git", "-C", str(tmp_path), "add", ".gitignore", "kept.txt"], check=True)
    (tmp_path / ".venv").mkdir()
    before = untracked(tmp_path)
    assert before is not None and ".venv/" not in before
    top = top_entries(tmp_path)

    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "s.db").write_text("")  # what tests/engine/test_engine_backends.py left (*.db is ignored)
    (tmp_path / "out.json").write_text("{}")
    for cache in (".hypothesis", "__pycache__", ".pytest_cache", "pkg.egg-info"):
        (tmp_path / cache).mkdir()
        (tmp_path / cache / "f").write_text("")
    (tmp_path / ".venv" / "lib.so").write_text("")
    (tmp_path / "new_module.py").write_text("")  # someone writing code meanwhile

    after = untracked(tmp_path)
    assert after is not None
    assert left_behind(before, after) == ["ignored/", "out.json"]
    assert sorted(top_entries(tmp_path) - top) == ["ignored", "out.json"]


def test_outside_a_checkout_the_session_check_is_off(tmp_path: Path) -> None:
    assert untracked(tmp_path) is None


def test_guard_watches_this_checkout() -> None:
    assert (REPO / "pyproject.toml").exists() and (REPO / "tests" / "repo_guard.py").exists()
