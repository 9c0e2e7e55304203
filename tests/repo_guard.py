"""Tests write only to temporary paths: a guard against files left in the repository (a pytest plugin).

Two autouse fixtures compare what is in the checkout before and after:

* per test, the entries of the repository's top folder (one ``os.listdir``): a test that
  writes to a relative path while pytest runs from the checkout fails itself, by name;
* per session, every file git does not track, ignored ones included (``*.db`` is ignored),
  listed by ``git ls-files --others --directory``: anything new fails the session's last
  teardown with the list.

Caches that tools keep in the checkout (``.venv``, ``__pycache__``, ``.pytest_cache``,
``.mypy_cache``, ``.ruff_cache``, ``.hypothesis``, ``*.egg-info``) are not flagged, nor are
untracked source files (``.py``, ``.md``): those are someone editing the checkout while the
tests run. Outside a git checkout (an sdist) the session check is off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Folder names tools keep caches in; never a test's output.
CACHE_NAMES = frozenset({".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"})
#: Untracked files with these suffixes are someone's work in progress, not a test's output.
SOURCE_SUFFIXES = (".py", ".md")


def _is_cache(path: str) -> bool:
    return any(part in CACHE_NAMES or part.endswith(".egg-info") for part in Path(path).parts)


def untracked(root: Path) -> set[str] | None:
    """Paths under ``root`` that git does not track (ignored ones included; an untracked
    folder is one entry ending in ``/``), caches left out; ``None`` outside a git checkout."""
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return None
    found: set[str] = set()
    for extra in ([], ["--ignored", "--exclude-standard"]):
        out = subprocess.run(
            [git, "-C", str(root), "ls-files", "--others", "--directory", "-z", *extra],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        found.update(p for p in out.decode(errors="surrogateescape").split("\0") if p and not _is_cache(p))
    return found


def left_behind(before: set[str], after: set[str]) -> list[str]:
    """What appeared between the two :func:`untracked` listings, untracked sources left out."""
    new = {p for p in after - before if not p.endswith(SOURCE_SUFFIXES)}
    folders = {p for p in new if p.endswith("/")}
    return sorted(p for p in new if not any(p != f and p.startswith(f) for f in folders))


def top_entries(root: Path) -> set[str]:
    """The names in ``root``'s top folder, caches and source files left out."""
    return {name for name in os.listdir(root) if not _is_cache(name) and not name.endswith(SOURCE_SUFFIXES)}


@pytest.fixture(scope="session", autouse=True)
def _no_files_left_in_the_repository() -> Iterator[None]:
    before = untracked(REPO)
    yield
    if before is None:
        return
    after = untracked(REPO)
    assert after is not None
    new = left_behind(before, after)
    if new:
        pytest.fail(f"the tests left files in the repository {REPO} (tests write only under tmp_path): {new}")


@pytest.fixture(autouse=True)
def _no_files_left_in_the_top_folder() -> Iterator[None]:
    before = top_entries(REPO)
    yield
    new = sorted(top_entries(REPO) - before)
    if new:
        pytest.fail(f"this test wrote {new} into {REPO} (tests write only under tmp_path)")
