"""Stores are chosen by URL through the registry; the engine never builds a backend itself."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memlane import AsyncMemory, ConfigError, Event, EventType, Memory
from memlane.registry import STORES, parse_store_url


def test_parse_store_url() -> None:
    assert parse_store_url(":memory:") == ("sqlite", ":memory:")
    assert parse_store_url("sqlite://") == ("sqlite", ":memory:")
    assert parse_store_url("sqlite:///rel/m.db") == ("sqlite", "rel/m.db")
    assert parse_store_url("sqlite:////abs/m.db") == ("sqlite", "/abs/m.db")
    assert parse_store_url("plain/path.db") == ("sqlite", "plain/path.db")
    assert parse_store_url(Path("/x/y.db")) == ("sqlite", "/x/y.db")
    assert parse_store_url("postgresql://u@h/db?schema=s") == ("postgresql", "postgresql://u@h/db?schema=s")
    assert parse_store_url("postgres://h/db")[0] == "postgresql"
    for bad in ("ftp://x", "sqlite://host/x.db", "redis://127.0.0.1:6379/0"):
        with pytest.raises(ConfigError):
            parse_store_url(bad)
    assert set(STORES) >= {"sqlite", "postgresql"}


async def test_db_url_and_separate_session_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with AsyncMemory("sqlite:///facts.db", embedder=None, sessions="sqlite:///sessions.db") as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content="I'm vegetarian."))
        await m.add("Sam likes figs", user_id="sam")
    facts, sessions = sqlite3.connect(tmp_path / "facts.db"), sqlite3.connect(tmp_path / "sessions.db")
    assert facts.execute("SELECT COUNT(*) FROM facts").fetchone()[0] == 1
    assert facts.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    assert sessions.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1


def test_constructor_does_no_io_and_reports_bad_specs_at_once(tmp_path: Path) -> None:
    target = tmp_path / "never" / "created.db"
    m = AsyncMemory(target, embedder="hash")
    assert not target.parent.exists()  # nothing opened yet
    with pytest.raises(ConfigError, match="unknown embedder"):
        AsyncMemory(target, embedder="word2vec")
    with pytest.raises(ConfigError, match="scheme"):
        AsyncMemory("mongodb://localhost/x")
    with pytest.raises(ConfigError):
        AsyncMemory(123)  # type: ignore[arg-type]
    del m


async def test_unopened_attributes_say_how_to_open(tmp_path: Path) -> None:
    from memlane import UsageError

    m = AsyncMemory(tmp_path / "m.db", embedder=None)
    with pytest.raises(UsageError, match="open"):
        _ = m.sessions
    await m.open()
    assert await m.sessions.list_sessions() == []
    await m.close()


def test_unknown_session_store_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="session store"):
        Memory(tmp_path / "m.db", embedder=None, sessions="memcached")
