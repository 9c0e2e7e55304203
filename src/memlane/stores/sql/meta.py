"""The ``meta`` table's key/value settings a store keeps for the engine, once for every SQL
dialect (sans-IO: see :mod:`memlane.stores.sql`)."""

from __future__ import annotations

from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.stmt import EXEC, Program, Stmt, one

__all__ = ["meta_setdefault"]


def meta_setdefault(d: Dialect, key: str, value: str) -> Program[str]:
    """``key``'s stored value; ``value`` is stored first when the key has none (the first
    writer wins a race: every caller gets the same value back)."""
    yield Stmt("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, value), EXEC)
    row = yield from one("SELECT value FROM meta WHERE key = ?", (key,))
    assert row is not None
    return str(row[0])
