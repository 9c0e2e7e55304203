"""langgraph-checkpoint's own ``tests/test_store.py`` against :class:`memlane.adapters.langgraph.MemlaneStore`.

``langgraph.store.memory.InMemoryStore`` becomes a subclass of ``MemlaneStore`` taking
``InMemoryStore``'s constructor (``index=``, passed on unchanged: ``embed``, ``dims`` and
``fields`` act as a LangGraph user passing them to ``MemlaneStore`` gets), over a fresh sync
:class:`memlane.Memory` on its own SQLite file (the hash embedder), before the test module
imports it. A subclass, not a factory: the suite spies on ``InMemoryStore.batch``.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import langgraph.store.memory
import pytest
from langgraph.store.base import IndexConfig
from memlane_suite import Suite

from memlane import Memory
from memlane.adapters.langgraph import MemlaneStore

SUITE = Suite(
    name="langgraph-store",
    dist="langgraph-checkpoint",
    pinned="4.3.2",
    paths=("tests/test_store.py",),
    deselected={},
    min_passed=100,
)

_count = itertools.count()


class MemlaneInMemoryStore(MemlaneStore):
    """``InMemoryStore(*, index=None)``: a MemlaneStore over a new memlane file."""

    def __init__(self, *, index: IndexConfig | None = None) -> None:
        folder = Path(os.environ["MEMLANE_SUITE_TMP"])
        folder.mkdir(parents=True, exist_ok=True)
        super().__init__(Memory(str(folder / f"store-{next(_count)}.db"), embedder="hash"), index=index)


def pytest_configure(config: pytest.Config) -> None:
    """Swap when loaded as the child pytest's plugin (before collection), never on a plain import."""
    langgraph.store.memory.InMemoryStore = MemlaneInMemoryStore  # type: ignore[misc]
