"""The fact store contract over every long-term backend, plus SQLite-specific behaviour."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.facts import SqliteFactStore
from memlane.testing import FactStoreContract


class TestSqliteFileFactStore(FactStoreContract):
    @pytest.fixture
    async def fact_store(self, tmp_path: Path) -> AsyncIterator[SqliteFactStore]:
        store = SqliteFactStore(tmp_path / "facts.db")
        store.bind_embedder("hash:64", 64)
        yield store
        await store.close()


class TestSqliteMemoryFactStore(FactStoreContract):
    @pytest.fixture
    async def fact_store(self) -> AsyncIterator[SqliteFactStore]:
        store = SqliteFactStore(Database(":memory:").open_sync())
        store.bind_embedder("hash:64", 64)
        yield store
        await store.close()


class TestSqliteApproximateVectorPath(FactStoreContract):
    """The same contract with the binary-quantised vector path forced on (exact_max=0)."""

    @pytest.fixture
    async def fact_store(self, tmp_path: Path) -> AsyncIterator[SqliteFactStore]:
        store = SqliteFactStore(tmp_path / "facts.db", exact_max=0)
        store.bind_embedder("hash:64", 64)
        yield store
        await store.close()
