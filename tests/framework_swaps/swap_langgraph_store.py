"""langgraph-checkpoint's own ``tests/test_store.py`` against :class:`memlane.adapters.langgraph.MemlaneStore`.

``langgraph.store.memory.InMemoryStore`` becomes a factory of ``MemlaneStore`` over a fresh
sync :class:`memlane.Memory` on its own SQLite file (the hash embedder), before the test module
imports it.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import langgraph.store.memory
from memlane_suite import Suite

from memlane import Memory
from memlane.adapters.langgraph import MemlaneStore

SUITE = Suite(
    name="langgraph-store",
    dist="langgraph-checkpoint",
    pinned="4.3.2",
    paths=("tests/test_store.py",),
    deselected={},
)

_count = itertools.count()


def _store(**kwargs: Any) -> MemlaneStore:
    folder = Path(os.environ["MEMLANE_SUITE_TMP"])
    folder.mkdir(parents=True, exist_ok=True)
    memory = Memory(str(folder / f"store-{next(_count)}.db"), embedder="hash")
    index = kwargs.get("index")
    fields = {"fields": index["fields"]} if index and "fields" in index else None
    return MemlaneStore(memory, index=fields)  # type: ignore[arg-type]


langgraph.store.memory.InMemoryStore = _store  # type: ignore[misc,assignment]
