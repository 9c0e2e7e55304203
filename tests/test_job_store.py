"""The job store contract over every job backend (SQLite file and in-memory)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.jobs import SqliteJobStore
from memlane.testing import JobStoreContract


class TestSqliteFileJobStore(JobStoreContract):
    @pytest.fixture
    async def job_store(self, tmp_path: Path) -> AsyncIterator[SqliteJobStore]:
        store = SqliteJobStore(tmp_path / "jobs.db")
        yield store
        await store.close()


class TestSqliteMemoryJobStore(JobStoreContract):
    @pytest.fixture
    async def job_store(self) -> AsyncIterator[SqliteJobStore]:
        store = SqliteJobStore(Database(":memory:").open_sync())
        yield store
        await store.close()


async def test_two_stores_on_one_file_share_leases(tmp_path: Path) -> None:
    """Two processes' stores on one file: a lease taken through one is seen by the other."""
    a, b = SqliteJobStore(tmp_path / "shared.db"), SqliteJobStore(tmp_path / "shared.db")
    try:
        job = await a.enqueue("form", "k", {})
        assert await a.claim("w1", lease_seconds=30) is not None
        assert await b.claim("w2", lease_seconds=30) is None
        assert await b.renew(job.id, "w2", lease_seconds=30) is False
        assert await a.renew(job.id, "w1", lease_seconds=30) is True
    finally:
        await a.close()
        await b.close()
