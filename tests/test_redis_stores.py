"""The Redis backends on a real Redis: the session store (KAOS ``RedisMemory``) and the job
queue pass the same contract suites as SQLite, plus Redis-specific behaviour."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memlane.stores.redis.jobs import RedisJobStore
from memlane.stores.redis.sessions import RedisSessionStore
from memlane.testing import JobStoreContract, SessionStoreContract


class TestRedisSessionContract(SessionStoreContract):
    @pytest.fixture
    async def session_store(self, redis_url: str) -> AsyncIterator[RedisSessionStore]:
        store = await RedisSessionStore.open(redis_url)
        yield store
        await store.close()


class TestRedisJobContract(JobStoreContract):
    @pytest.fixture
    async def job_store(self, redis_url: str) -> AsyncIterator[RedisJobStore]:
        store = await RedisJobStore.open(redis_url)
        yield store
        await store.close()
