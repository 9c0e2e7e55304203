"""The sans-IO storage core (memlane.stores.sql): its programs, its two drivers, and that the
long-term memory algorithms exist once (SQLite and PostgreSQL only run them)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from memlane.stores.sql import facts as core
from memlane.stores.sql.stmt import ALL, COUNT, Program, Stmt, all_rows, count, drive, drive_async, one
from memlane.stores.sql.store import SqlFactStore, SqlReflectionStore
from memlane.stores.sqlite.dialect import DIALECT
from memlane.stores.sqlite.dialect import run as sqlite_run
from memlane.stores.sqlite.facts import SqliteFactStore


def _program() -> Program[tuple[Any, list[Any], int]]:
    yield Stmt("CREATE TABLE t (k TEXT, v INTEGER)")
    n = yield from count("INSERT INTO t VALUES ('a', 1), ('b', 2), ('c', 3)")
    first = yield from one("SELECT v FROM t WHERE k=?", ("b",))
    rows = yield from all_rows("SELECT k FROM t WHERE v >= ? ORDER BY k", (2,))
    return first, rows, n


def test_the_sqlite_driver_sends_each_statement_result_back_and_returns_the_programs_value() -> None:
    c = sqlite3.connect(":memory:")
    first, rows, n = sqlite_run(c, _program())
    assert (tuple(first), [tuple(r) for r in rows], n) == ((2,), [("b",), ("c",)], 3)


def test_the_async_driver_runs_the_same_program_statement_by_statement() -> None:
    seen: list[Stmt] = []
    answers = {ALL: [("b",), ("c",)], COUNT: 3}

    async def execute(stmt: Stmt) -> Any:
        seen.append(stmt)
        await asyncio.sleep(0)
        return (2,) if stmt.fetch == "one" else answers.get(stmt.fetch)

    assert asyncio.run(drive_async(_program(), execute)) == ((2,), [("b",), ("c",)], 3)
    assert [s.fetch for s in seen] == ["exec", "count", "one", "all"]


def test_an_error_raised_by_a_program_reaches_the_caller_and_stops_it() -> None:
    def failing() -> Program[None]:
        yield Stmt("SELECT 1", (), "one")
        raise ValueError("policy said no")

    ran: list[str] = []
    with pytest.raises(ValueError, match="policy said no"):
        drive(failing(), lambda stmt: ran.append(stmt.sql))
    assert ran == ["SELECT 1"]


def test_postgresql_statements_take_psycopg_placeholders_and_literal_percent_signs() -> None:
    pg_dialect = pytest.importorskip("memlane.stores.postgres.dialect")
    assert pg_dialect.pg_sql("SELECT a FROM t WHERE b=? AND c LIKE 'x%' AND d = ANY(?)") == (
        "SELECT a FROM t WHERE b=%s AND c LIKE 'x%%' AND d = ANY(%s)"
    )


def test_the_partition_range_reads_stored_partitions_by_prefix() -> None:
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE partitions (partition TEXT PRIMARY KEY)")
    c.executemany("INSERT INTO partitions VALUES (?)", [("u|ann|",), ("u|ann|bot",), ("u|anna|",), ("a|bot",)])

    class Filter:
        exact: Sequence[str] = ("a|bot",)
        prefixes: Sequence[str] = ("u|ann|",)

    assert sqlite_run(c, core.partitions(DIALECT, Filter())) == ["a|bot", "u|ann|", "u|ann|bot"]  # type: ignore[arg-type]


CORE_METHODS = [
    "put_facts",
    "put_fact_groups",
    "update_fact",
    "invalidate_fact",
    "invalidate_facts",
    "apply_changes",
    "purge_user",
    "get_fact",
    "get_facts",
    "list_facts",
    "history",
    "authors",
    "memory_stamp",
    "stats",
    "reflection_stamp",
    "put_reflection",
    "list_reflections",
    "get_consolidated",
    "put_consolidated",
    "clear_session_memory",
]


@pytest.mark.parametrize("name", CORE_METHODS)
def test_each_long_term_memory_operation_is_written_once_in_the_core(name: str) -> None:
    """A backend supplies how statements run, not the algorithm: a copy of an operation in a
    backend's class would drift from the other backend's."""
    pg_facts = pytest.importorskip("memlane.stores.postgres.facts")
    for store in (SqliteFactStore, pg_facts.PgFactStore):
        assert issubclass(store, SqlFactStore)
        owner = next(k for k in store.__mro__ if name in k.__dict__)
        assert owner in (SqlFactStore, SqlReflectionStore), f"{store.__name__}.{name} is defined in {owner}"


SESSION_METHODS = [
    "create_session",
    "get_or_create_session",
    "get_session",
    "list_sessions",
    "sessions_with_id",
    "delete_session",
    "counts",
    "delete_user_sessions",
    "export_user",
    "add_event",
    "get_events",
    "pop_event",
    "close",
]


@pytest.mark.parametrize("name", SESSION_METHODS)
def test_each_session_operation_is_written_once_in_the_core(name: str) -> None:
    """The session rules live in memlane.stores.sql.sessions; a backend supplies encodings,
    its row lock and runners only."""
    from memlane.stores.sql.sessions import SqlSessionStore
    from memlane.stores.sqlite.sessions import SqliteSessionStore

    pg_sessions = pytest.importorskip("memlane.stores.postgres.sessions")
    for store in (SqliteSessionStore, pg_sessions.PgSessionStore):
        assert issubclass(store, SqlSessionStore)
        owner = next(k for k in store.__mro__ if name in k.__dict__)
        assert owner is SqlSessionStore, f"{store.__name__}.{name} is defined in {owner}"


def _statements(program: Program[Any], results: Sequence[Any]) -> list[Stmt]:
    """The statements a program yields when each is answered by the next of ``results``."""
    seen: list[Stmt] = []
    answers = iter(results)

    def execute(stmt: Stmt) -> Any:
        seen.append(stmt)
        return next(answers)

    drive(program, execute)
    return seen


def test_session_writers_lock_the_sessions_row_where_rows_lock() -> None:
    """PostgreSQL: pop_event locks the session's row before it reads the newest event (a
    concurrent add or pop waits); SQLite's write transaction already holds the file's lock."""
    from memlane.stores.sql import sessions as score
    from memlane.stores.sqlite.sessions import SqliteSessionDialect

    pg_sessions = pytest.importorskip("memlane.stores.postgres.sessions")
    pg = _statements(score.pop_event(pg_sessions.PgSessionDialect(), "app", "s"), [(1,), None])
    assert pg[0].sql.endswith("FOR NO KEY UPDATE") and "FROM sessions" in pg[0].sql
    assert "FROM events" in pg[1].sql
    lite = _statements(score.pop_event(SqliteSessionDialect(), "app", "s"), [(1,), None])
    assert "FOR" not in lite[0].sql


def test_erasing_a_group_member_keeps_the_other_participants_in_order() -> None:
    """delete_user_sessions on a group session: the member's own events and participation go,
    the others stay in their order (the row re-read under its lock)."""
    from memlane.stores.sql import sessions as score
    from memlane.stores.sqlite.sessions import SqliteSessionDialect

    d = SqliteSessionDialect()
    stmts = _statements(
        score.delete_user_sessions(d, "bob"), [0, [("app", "s")], 2, None, ('["ann", "bob", "cy"]',), None]
    )
    assert stmts[-1].sql.startswith("UPDATE sessions SET user_ids")
    assert d.unjson(stmts[-1].args[0]) == ["ann", "cy"]


JOB_METHODS = [
    "enqueue",
    "claim",
    "renew",
    "checkpoint",
    "complete",
    "fail",
    "release",
    "retry",
    "get",
    "list",
    "next_due",
    "counts",
    "purge_user",
    "touch",
    "get_cursor",
    "reset_pending",
    "advance",
    "delete_cursor",
    "idle_cursors",
]


@pytest.mark.parametrize("name", JOB_METHODS)
def test_each_job_operation_is_written_once_in_the_core(name: str) -> None:
    """Leasing, heartbeats, retries and cursors live in memlane.stores.sql.jobs; a backend
    supplies its clock, locks, encodings and runners."""
    from memlane.stores.sql.jobs import SqlJobStore
    from memlane.stores.sqlite.jobs import SqliteJobStore

    pg_jobs = pytest.importorskip("memlane.stores.postgres.jobs")
    for store in (SqliteJobStore, pg_jobs.PgJobStore):
        assert issubclass(store, SqlJobStore)
        owner = next(k for k in store.__mro__ if name in k.__dict__)
        assert owner is SqlJobStore, f"{store.__name__}.{name} is defined in {owner}"


def test_postgresql_claimers_take_a_keys_lock_without_waiting_then_skip_locked_rows() -> None:
    """PostgreSQL: claim tries the candidate key's advisory lock, moves on to the next key when
    another claimer holds it, and picks the job under the lock FOR UPDATE SKIP LOCKED; SQLite
    (the file's write lock) reads the candidate and leases it."""
    from memlane.stores.sql import jobs as jcore
    from memlane.stores.sqlite.jobs import SqliteJobDialect

    pg_jobs = pytest.importorskip("memlane.stores.postgres.jobs")
    d = pg_jobs.PgJobDialect()
    busy, row = (False,), ("j1", "k1")
    stmts = _statements(jcore.claim(d, "w", 30, None), [row, busy, None])
    assert "pg_try_advisory_xact_lock" in stmts[1].sql
    assert "NOT IN (?)" in stmts[2].sql and stmts[2].args[-1] == "k1"  # the busy key skipped
    free = (True,)
    job = ("j1", "form", "k1", None, "running", {}, {}, None, 0, 8, None) + (datetime.now(UTC),) * 3 + ("w", None)
    stmts = _statements(jcore.claim(d, "w", 30, None), [row, free, ("j1",), job])
    assert stmts[2].sql.endswith("FOR UPDATE OF j SKIP LOCKED")
    assert "RETURNING" in stmts[3].sql
    lite = _statements(jcore.claim(SqliteJobDialect(), "w", 30, None), [None])
    assert len(lite) == 1 and "FOR UPDATE" not in lite[0].sql
