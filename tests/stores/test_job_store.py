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


async def test_a_late_heartbeat_cannot_revive_a_lease_once_the_key_moved_on(tmp_path: Path) -> None:
    """The leasing rules are the core's (memlane.stores.sql.jobs), so SQLite keeps the
    guarantee PostgreSQL has: a worker whose lease ran out while another job of its key was
    claimed gets False from renew, and two jobs of one key never run at once."""
    import asyncio
    from datetime import UTC, datetime

    store = SqliteJobStore(tmp_path / "jobs.db")
    try:
        first = await store.enqueue("form", "k", {})
        second = await store.enqueue("form", "k", {})
        assert await store.claim("slow", lease_seconds=0.2, job_id=first.id) is not None
        await asyncio.sleep(0.3)
        assert await store.renew(first.id, "slow", lease_seconds=0.2) is True  # late, nobody moved on
        await asyncio.sleep(0.3)
        assert await store.claim("inline", lease_seconds=30, job_id=second.id) is not None
        assert await store.renew(first.id, "slow", lease_seconds=30) is False
        running = await store.list(status="running")
        live = [j for j in running if j.lease_until is not None and j.lease_until > datetime.now(UTC)]
        assert [j.id for j in live] == [second.id]
    finally:
        await store.close()


async def test_a_claimed_job_reads_back_as_stored(tmp_path: Path) -> None:
    """claim returns the row as the store holds it after the lease (worker, lease, updated_at)."""
    store = SqliteJobStore(tmp_path / "jobs.db")
    try:
        await store.enqueue("form", "k", {"a": 1})
        taken = await store.claim("w", lease_seconds=30)
        assert taken is not None and taken.status == "running" and taken.worker == "w"
        assert taken == await store.get(taken.id)
    finally:
        await store.close()
