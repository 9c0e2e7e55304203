"""The top-level modules that moved into rooms (issue 19) still import under their old names.

Each old module *is* the moved one (one module object under two names), so code written
against ``memlane.search``, ``memlane.transfer``, ... keeps working, private names and
monkeypatching included.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = {
    "memlane.messages": "memlane.ingest.messages",
    "memlane.bulk": "memlane.ingest.bulk",
    "memlane.documents": "memlane.ingest.documents",
    "memlane.embedding_queue": "memlane.ingest.embedding_queue",
    "memlane.importers": "memlane.ingest.importers",
    "memlane.search": "memlane.engine.search",
    "memlane.transfer": "memlane.stores.transfer",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_name_is_the_moved_module(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_old_name_imported_first(old: str, new: str) -> None:
    """In a fresh interpreter, importing the old name first gives the moved module, and
    ``from <old> import <name>`` finds public and private names alike."""
    code = (
        f"import importlib, {old} as a, {new} as b\n"
        f"assert a is b, (a, b)\n"
        f"import memlane\n"
        f"assert getattr(memlane, {old.rpartition('.')[2]!r}) is b\n"
        f"names = [n for n in vars(b) if not n.startswith('__')]\n"
        f"assert names and all(getattr(importlib.import_module({old!r}), n) is getattr(b, n) for n in names)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_seed_imports_keep_working() -> None:
    from memlane.bulk import AddBatch
    from memlane.documents import MAX_DOCUMENT_CHARS
    from memlane.engine.search import SearchMode as Moved
    from memlane.search import SearchMode
    from memlane.transfer import TABLES, TransferSide, migrate

    assert AddBatch.__module__ == "memlane.ingest.bulk"
    assert MAX_DOCUMENT_CHARS > 0
    assert SearchMode is Moved
    assert TABLES and TransferSide and migrate.__module__ == "memlane.stores.transfer"
