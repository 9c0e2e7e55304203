"""Shared fixtures: real SQLite files in tmp_path, the deterministic hash embedder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

# One cache of built ONNX graphs for the whole run, also for tests (and their subprocesses) that
# point HOME at a temporary folder: otherwise each of them rebuilds MiniLM's graph (~4-6 s).
os.environ.setdefault("MEMLANE_CACHE_DIR", str(Path.home() / ".cache" / "memlane"))
# create_app() enforces the keys file of its settings: the tests' apps never look at the
# developer's own keys file (a path that does not exist), also for settings built without the
# environment (their default data folder, $XDG_DATA_HOME/memlane, is a temporary one too).
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="memlane-test-data-")
os.environ.setdefault("MEMLANE_KEYS_FILE", str(Path(os.environ["XDG_DATA_HOME"]) / "no-keys.db"))

from hypothesis import settings as hypothesis_settings

from memlane import AsyncMemory, Memory

# Hypothesis's per-example deadline (200 ms) measures the machine, not the property: on 2 shared
# cores a first example that imports a driver went over it (tests/service/test_tenant_locations.py).
# Properties are judged by their assertions only; durations live in bench/.
hypothesis_settings.register_profile("memlane", deadline=None)
hypothesis_settings.load_profile("memlane")

#: ``llama_server``: SmolLM2-135M behind a real llama.cpp server (session-scoped, started on first use);
#: ``services``: real PostgreSQL + pgvector and Redis (``pg_url``, ``redis_url``: fresh per test);
#: ``repo_guard``: a test (or the run) that leaves a file in the checkout fails; ``cli_helpers``: the
#: ``db`` fixture of the CLI tests (a tmp database, the hash embedder).
pytest_plugins = ("llama_server", "services", "repo_guard", "cli_helpers")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memlane.db"


@pytest.fixture
async def mem(db_path: Path) -> AsyncIterator[AsyncMemory]:
    m = await AsyncMemory(db_path, embedder="hash", sessions="sqlite").open()
    try:
        yield m
    finally:
        await m.close()


@pytest.fixture
def open_memory() -> Callable[..., AsyncMemory]:
    """What a test opens its engines with, ``open_memory(path, **kw)``: :class:`AsyncMemory` on
    the test's own SQLite file. tests/engine/test_engine_backends.py overrides it to open each backend
    (and checks, after the test, that the engines really used that backend)."""
    return AsyncMemory


@pytest.fixture
def open_sync_memory() -> Callable[..., Memory]:
    """:func:`open_memory` for the sync facade: :class:`Memory`."""
    return Memory
