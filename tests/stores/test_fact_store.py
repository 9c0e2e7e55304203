"""The fact and reflection store contracts over every long-term backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.facts import SqliteFactStore
from memlane.testing import FactStoreContract, ReflectionStoreContract


class _SqliteContracts(FactStoreContract, ReflectionStoreContract):
    @pytest.fixture
    def reflection_store(self, fact_store: SqliteFactStore) -> SqliteFactStore:
        return fact_store  # one class, one file, both protocols


class TestSqliteFileFactStore(_SqliteContracts):
    @pytest.fixture
    async def fact_store(self, tmp_path: Path) -> AsyncIterator[SqliteFactStore]:
        store = await SqliteFactStore.open(tmp_path / "facts.db")
        await store.bind_embedder("hash:64", 64)
        yield store
        await store.close()


class TestSqliteMemoryFactStore(_SqliteContracts):
    @pytest.fixture
    async def fact_store(self) -> AsyncIterator[SqliteFactStore]:
        store = await SqliteFactStore.open(Database(":memory:").open_sync())
        await store.bind_embedder("hash:64", 64)
        yield store
        await store.close()


class TestSqliteApproximateVectorPath(_SqliteContracts):
    """The same contracts with the binary-quantised vector path forced on (exact_max=0)."""

    @pytest.fixture
    async def fact_store(self, tmp_path: Path) -> AsyncIterator[SqliteFactStore]:
        store = await SqliteFactStore.open(tmp_path / "facts.db", exact_max=0)
        await store.bind_embedder("hash:64", 64)
        yield store
        await store.close()
