"""openai-agents' own ``tests/memory/test_session.py`` against
:class:`memlane.adapters.openai_agents.MemlaneSession`.

``agents.SQLiteSession`` (and ``agents.memory.SQLiteSession``, both lazily resolved names of
the SDK) become a :class:`MemlaneSession` subclass with ``SQLiteSession``'s constructor:
``SQLiteSession(session_id, db_path=":memory:", sessions_table=..., messages_table=...,
session_settings=None)`` is ``MemlaneSession(session_id, db_path, user_id="user",
session_settings=...)``: a memlane database on that path (opened and closed by the session, as
a user migrating from ``SQLiteSession`` would write it), the conversation owned by one user as
in a single-user app. The table names have no meaning in memlane's schema and are ignored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest
from memlane_suite import Suite

from memlane.adapters.openai_agents import MemlaneSession

_INTERNALS = "SQLiteSession's own"

SUITE = Suite(
    name="openai-session",
    dist="openai-agents",
    pinned="0.24.0",
    paths=("tests/memory/test_session.py",),
    deselected={
        # its connection pool: per-thread sqlite3 connections, reaping, quarantine
        "tests/memory/test_session.py::test_sqlite_session_close_closes_worker_thread_connections": (
            f"{_INTERNALS} per-thread sqlite3 connections (session._connections); memlane's store has one "
            "connection per database on its own worker thread"
        ),
        "tests/memory/test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads": (
            f"{_INTERNALS} per-thread sqlite3 connections (session._connections)"
        ),
        "tests/memory/test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
            f"{_INTERNALS} per-thread sqlite3 connections (session._connections, sqlite3.connect patched)"
        ),
        "tests/memory/test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads": (
            f"{_INTERNALS} per-thread sqlite3 connections (session._connections)"
        ),
        "tests/memory/test_session.py::test_sqlite_session_rollback_failure_evicts_connection": (
            f"{_INTERNALS} connection pool: patches session._get_connection and session._connections"
        ),
        "tests/memory/test_session.py::test_sqlite_session_close_retries_quarantined_connection": (
            f"{_INTERNALS} connection pool: patches session._get_connection, reads session._quarantined_connections"
        ),
        "tests/memory/test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
            f"{_INTERNALS} connection pool: patches session._get_connection with a pausing sqlite3 connection"
        ),
        # its process-local file locks
        "tests/memory/test_session.py::test_sqlite_session_file_lock_is_shared_across_instances": (
            f"{_INTERNALS} process-local file locks (SQLiteSession._file_locks, session._lock)"
        ),
        # its SQL tables (agent_sessions, agent_messages), written or dropped by hand
        "tests/memory/test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent": (
            f"writes a non-JSON row into {_INTERNALS} agent_messages table; memlane stores items as typed events "
            "and refuses non-JSON items at add_items"
        ),
        "tests/memory/test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
            f"writes a non-JSON row into {_INTERNALS} agent_messages table"
        ),
        "tests/memory/test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
            f"writes a non-JSON row into {_INTERNALS} agent_messages table"
        ),
        "tests/memory/test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
            f"writes a non-JSON row into {_INTERNALS} agent_messages table"
        ),
        "tests/memory/test_session.py::test_sqlite_session_failed_add_items_releases_write_lock": (
            f"probes {_INTERNALS} agent_sessions table; memlane's test_adapter_openai_agents.py checks the same "
            "behaviour (TypeError, the session not created, usable afterwards)"
        ),
        "tests/memory/test_session.py::test_sqlite_session_failed_clear_session_rolls_back": (
            f"drops {_INTERNALS} agent_sessions table to make clear_session fail"
        ),
        "tests/memory/test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock": (
            f"drops {_INTERNALS} agent_messages table to make pop_item fail"
        ),
    },
    min_passed=35,
)


class SQLiteSession(MemlaneSession):
    """``MemlaneSession`` with ``SQLiteSession``'s constructor (see the module docstring)."""

    def __init__(
        self,
        session_id: str,
        db_path: str | os.PathLike[str] = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        super().__init__(
            session_id,
            Path(db_path) if str(db_path) != ":memory:" else ":memory:",
            user_id="user",
            session_settings=session_settings,
        )


def pytest_configure(config: pytest.Config) -> None:
    """Swap when loaded as the child pytest's plugin (before collection), never on a plain import."""
    agents.SQLiteSession = SQLiteSession  # type: ignore[attr-defined,misc]
    agents.memory.SQLiteSession = SQLiteSession  # type: ignore[attr-defined,misc]
