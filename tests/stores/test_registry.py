"""Stores are chosen by URL through the registry; the engine never builds a backend itself."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from memlane import AsyncMemory, ConfigError, Event, EventType, Memory, registry
from memlane.registry import (
    BACKENDS,
    JOB_STORES,
    SESSION_STORES,
    STORES,
    Backend,
    backend_for_scheme,
    backend_of,
    parse_store_url,
    unavailable_errors,
)
from memlane.stores.transfer import Table
from memlane.transfer import migrate


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


# --------------------------------------------------------------------------- a backend is one row
class FakeServerDown(Exception):
    """A made-up driver's "server unreachable" error (module ``test_registry``)."""


def fake_tenant_location(location: str, tenant: str) -> str:
    return f"{location}#{tenant}"


class FakeSide:
    """A made-up backend's side of ``memlane migrate``: two sessions, nothing else."""

    identity = "fake://source"
    label = "fake://source"
    ROWS: ClassVar[list[dict[str, Any]]] = [
        {
            "app": "default",
            "id": f"s{i}",
            "user_ids": ["sam"],
            "agent_id": None,
            "channel": None,
            "state": {},
            "created_at": datetime(2025, 1, i, tzinfo=UTC),
            "updated_at": datetime(2025, 1, i, tzinfo=UTC),
        }
        for i in (1, 2)
    ]

    def _rows(self, table: Table) -> list[dict[str, Any]]:
        return self.ROWS if table.name == "sessions" else []

    async def count(self, table: Table, upto: list[Any] | None = None) -> int:
        return sum(upto is None or [r[c] for c in table.pk] <= upto for r in self._rows(table))

    async def read(self, table: Table, after: list[Any] | None, limit: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows(table) if after is None or [r[c] for c in table.pk] > after][:limit]

    async def write(self, table: Table, rows: list[dict[str, Any]], keep_ids: bool, checkpoint: tuple[str, str]) -> int:
        raise AssertionError("a source is never written")

    async def before(self, table: Table) -> None: ...
    async def finish(self, table: Table) -> None: ...

    async def meta(self) -> dict[str, str]:
        return {}

    async def set_meta(self, items: dict[str, str]) -> None: ...
    async def bind(self, name: str, dim: int) -> None: ...

    async def index_problems(self) -> list[str]:
        return []

    async def close(self) -> None: ...


async def open_fake_side(location: str, role: str) -> FakeSide:
    assert (location, role) == ("fake://source", "source")
    return FakeSide()


FAKE = Backend(
    name="fake",
    title="Fake",
    package=__name__,  # this test module stands for the backend's folder
    schemes=("fake",),
    stores="open_stores",  # never opened here
    tenant_location="fake_tenant_location",
    transfer="open_fake_side",
    drivers=(__name__,),
    unavailable=frozenset({(__name__, "FakeServerDown")}),
)


@pytest.fixture
def fake_row(monkeypatch: pytest.MonkeyPatch) -> Backend:
    """The registry with one more row, and nothing else changed."""
    monkeypatch.setattr(registry, "BACKENDS", (*registry.BACKENDS, FAKE))
    monkeypatch.setitem(registry._BY_SCHEME, "fake", FAKE)
    return FAKE


def test_the_row_answers_for_a_backend_every_caller_asks() -> None:
    pg, redis = backend_of("postgres://h/db"), backend_of("rediss://h:6380/0")
    assert pg is not None and pg.name == "postgresql" and pg.shared
    assert redis is not None and redis.name == "redis" and redis.stores is None and redis.shared
    assert backend_of("plain/path.db") is None and backend_of("mongodb://h/x") is None
    assert backend_for_scheme("POSTGRES") is pg
    assert not next(b for b in BACKENDS if b.name == "sqlite").shared
    assert unavailable_errors() == {
        ("psycopg", "OperationalError"),
        ("redis", "ConnectionError"),
        ("redis", "TimeoutError"),
    }
    # the former tables are views of the rows
    assert STORES == {
        "sqlite": ("memlane.stores.sqlite", "open_stores", "core"),
        "postgresql": ("memlane.stores.postgres", "open_stores", "postgres"),
    }
    assert list(SESSION_STORES) == ["local", "null", "sqlite", "postgresql", "redis", "rediss", "unix"]
    assert JOB_STORES["unix"] == ("memlane.stores.redis.jobs", "RedisJobStore", "redis")
    with pytest.raises(ConfigError, match="Redis holds sessions and the job queue, not long-term memory"):
        parse_store_url("redis://127.0.0.1:6379/0")


def test_a_new_rows_url_is_a_store_url(fake_row: Backend) -> None:
    assert parse_store_url("FAKE://h/x") == ("fake", "FAKE://h/x")
    assert "fake" not in STORES  # the lookups read the rows, not the views


def test_a_new_rows_tenant_location_is_what_the_service_uses(fake_row: Backend, tmp_path: Path) -> None:
    from memlane.service.hub import DEFAULT_TENANT, tenant_location, tenant_store

    assert tenant_location("fake://srv/db", "acme") == "fake://srv/db#acme"
    assert tenant_store("fake://srv/db", tmp_path, "acme") == "fake://srv/db#acme"  # a shared server, no file
    assert tenant_store("fake://srv/db", tmp_path, DEFAULT_TENANT) == "fake://srv/db"


def test_without_the_row_a_tenant_has_no_place_on_that_server(tmp_path: Path) -> None:
    from memlane.service.hub import tenant_location

    with pytest.raises(ConfigError, match="no per-tenant location"):
        tenant_location("fake://srv/db", "acme")


def test_a_new_rows_connection_errors_answer_503(fake_row: Backend) -> None:
    pytest.importorskip("fastapi")
    from memlane.service.errors import status_and_code

    assert status_and_code(FakeServerDown("gone")) == (503, "storage_unavailable")


def test_without_the_row_the_same_error_is_a_500() -> None:
    pytest.importorskip("fastapi")
    from memlane.service.errors import status_and_code

    assert status_and_code(FakeServerDown("gone")) == (500, "internal_error")


async def test_memlane_migrate_copies_from_a_new_rows_side(fake_row: Backend, tmp_path: Path) -> None:
    report = await migrate("fake://source", str(tmp_path / "copy.db"))
    assert report.ok, report.problems
    assert {t.name: t.copied for t in report.tables}["sessions"] == 2
    with sqlite3.connect(tmp_path / "copy.db") as db:
        assert db.execute("SELECT id, user_ids FROM sessions ORDER BY id").fetchall() == [
            ("s1", '["sam"]'),
            ("s2", '["sam"]'),
        ]


async def test_memlane_migrate_refuses_a_backend_without_a_side(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown store URL scheme 'fake'"):
        await migrate("fake://source", str(tmp_path / "copy.db"))
