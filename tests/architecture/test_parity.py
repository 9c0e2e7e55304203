"""The sync facade exposes exactly the async engine's public methods, with the same
signatures, and really drives it on a private loop (never the caller's)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path

import pytest

from memlane import AsyncMemory, Memory, UsageError


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    out = {}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_"):
            out[name] = inspect.signature(fn)
    return out


def test_same_public_methods_and_parameters() -> None:
    a, s = _public_methods(AsyncMemory), _public_methods(Memory)
    a.pop("open")  # the sync facade opens in its constructor
    for own in ("run", "arun"):  # the facade's own: engine coroutines on its loop thread (test_binding.py)
        s.pop(own)
    assert set(a) == set(s)
    for name in a:
        assert list(a[name].parameters) == list(s[name].parameters), name
        for p in a[name].parameters.values():
            assert s[name].parameters[p.name].default == p.default, (name, p.name)
        assert inspect.iscoroutinefunction(getattr(AsyncMemory, name))
        assert not inspect.iscoroutinefunction(getattr(Memory, name))


def test_sync_facade_runs_on_its_own_loop_thread(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        m.add("sync works", user_id="u")
        loop_threads = {t.name for t in threading.enumerate()}
        assert "memlane-loop" in loop_threads
        assert m.search("sync", user_id="u").hits[0].fact.content == "sync works"
        s = m.sessions.create_session(user_ids=["u"], session_id="u:cli")
        assert m.sessions.get_session("u:cli").id == s.id


async def test_sync_facade_inside_a_running_loop(tmp_path: Path) -> None:
    """Called from async code (e.g. a notebook), the facade still works: it never touches
    the caller's loop."""
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        m.add("from inside a loop", user_id="u")
        assert asyncio.get_running_loop().is_running()
        assert len(m.search("loop", user_id="u").hits) == 1


def test_closed_facade_refuses(tmp_path: Path) -> None:
    m = Memory(tmp_path / "m.db", embedder="hash")
    m.close()
    m.close()  # idempotent
    with pytest.raises(UsageError):
        m.add("x", user_id="u")
