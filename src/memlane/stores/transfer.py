"""The tables :func:`memlane.transfer.migrate` copies, and what a backend supplies to be copied.

Dialect-neutral: no driver, no SQL of a backend. Each backend's folder has a ``transfer``
module whose ``open_side(location, role)`` returns a :class:`TransferSide` (its registry row
names it), so ``memlane migrate`` copies between any two backends that have one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["BINDING_KEYS", "FTS_COLS", "META_PREFIX", "TABLES", "Row", "Table", "TransferSide", "keyset"]

#: Prefix of the target's ``meta`` keys the copy writes (never copied from a source).
META_PREFIX = "migrate:"
#: Embedder binding keys of ``meta`` (set through the target store's ``bind_embedder``).
BINDING_KEYS = ("dim", "embedder")


@dataclass(frozen=True)
class Table:
    """One table as both backends hold it."""

    name: str
    pk: tuple[str, ...]
    cols: tuple[str, ...]
    """Columns both schemas have (the primary key included)."""
    json: frozenset[str] = frozenset()
    times: frozenset[str] = frozenset()
    bools: frozenset[str] = frozenset()
    fixed: bool = False
    """SQLite writes this table's timestamps fixed-width and its JSON with ``ensure_ascii=False``
    (the session store's format)."""
    serial: str | None = None
    """A generated id (kept when the target was empty, else the target assigns new ones)."""
    rowid: str | None = None
    """``both``: insertion order kept in ``rowid`` on both backends (PostgreSQL has the column);
    ``sqlite``: only SQLite's implicit rowid (kept SQLite to SQLite)."""


def _t(name: str, pk: Sequence[str], cols: str, **kw: Any) -> Table:
    for key in ("json", "times", "bools"):
        if key in kw:
            kw[key] = frozenset(kw[key].split())
    return Table(name, tuple(pk), tuple(c.strip() for c in cols.split(",")), **kw)


#: The copied tables, parents before children (sessions before their users and events).
TABLES: tuple[Table, ...] = (
    _t("sessions", ["app", "id"], "app, id, user_ids, agent_id, channel, state, created_at, updated_at",
       json="user_ids state", times="created_at updated_at", fixed=True, rowid="sqlite"),
    _t("session_users", ["app", "user_id", "session_id"], "app, session_id, user_id"),
    _t("events", ["seq"], "seq, app, session_id, id, type, ts, author, content, metadata",
       json="metadata", times="ts", fixed=True, serial="seq"),
    _t("facts", ["rowid"], "rowid, id, partition, content, hash, scope, agent_id, user_id, session_id, kind, "
       "author, seq, occurred_at, formed_at, updated_at, access_count, version, source_event_ids, valid_from, "
       "invalid_at, metadata, embedding", json="source_event_ids metadata",
       times="occurred_at formed_at updated_at valid_from invalid_at", serial="rowid"),
    _t("partitions", ["partition"], "partition, appends, changes"),
    _t("authors", ["partition", "author"], "partition, author"),
    _t("history", ["id"], "id, fact_id, user_id, event, old_content, new_content, actor, at", times="at",
       rowid="both"),
    _t("reflections", ["id"], "id, content, scope, agent_id, user_id, session_id, absorbed, formed_at",
       bools="absorbed", times="formed_at", rowid="both"),
    _t("consolidated", ["id"], "id, scope, agent_id, user_id, session_id, consolidated_content, word_limit, version, "
       "unabsorbed_ids, last_consolidated_at", json="unabsorbed_ids", times="last_consolidated_at"),
    _t("contributors", ["user_id", "kind", "item_id"], "user_id, kind, item_id"),
    _t("jobs", ["id"], "id, kind, key, user_id, status, payload, state, result, attempts, max_attempts, last_error, "
       "next_run_at, lease_until, worker, created_at, updated_at", json="payload state result",
       times="next_run_at lease_until created_at updated_at"),
    _t("formation_cursors", ["app", "session_id"], "app, session_id, user_ids, agent_id, tier, last_event_id, "
       "formed_events, pending_messages, pending_tokens, last_activity_at, last_formed_at", json="user_ids",
       times="last_activity_at last_formed_at"),
    _t("applied_batches", ["key"], "key, user_id, at, result", json="result", times="at"),
)  # fmt: skip

#: The keyword-index text of a fact (SQLite ``facts_fts`` columns, PostgreSQL ``facts`` columns).
FTS_COLS = ("search_text", "ctx", "date_words")

Row = dict[str, Any]


class TransferSide(Protocol):
    """One store as :func:`memlane.transfer.migrate` reads and writes it: what a backend's
    folder supplies (its ``transfer.open_side``, named by its row in :mod:`memlane.registry`).

    Rows are plain Python values (``str``, numbers, ``datetime``, JSON as Python objects or
    text, vectors as float32 arrays or blobs); each side converts them to its own types."""

    identity: str
    """Names the store (the same store opened twice has the same identity)."""
    label: str
    """What messages show (no password)."""

    async def count(self, table: Table, upto: list[Any] | None = None) -> int:
        """Rows of ``table`` (with a primary key ``<= upto`` when given)."""
        ...

    async def read(self, table: Table, after: list[Any] | None, limit: int) -> list[Row]:
        """Up to ``limit`` rows after primary key ``after``, in primary-key order: ``table.cols``
        (plus ``rowid`` when kept, and :data:`FTS_COLS` for ``facts``)."""
        ...

    async def write(self, table: Table, rows: list[Row], keep_ids: bool, checkpoint: tuple[str, str]) -> int:
        """Insert ``rows``, skipping those already there, and set ``meta`` ``checkpoint`` (key,
        value) in the same transaction; returns the rows inserted. ``keep_ids``: keep
        ``table.serial`` / ``rowid`` (else the target assigns them)."""
        ...

    async def before(self, table: Table) -> None:
        """Before the first batch of ``table`` (e.g. drop an index rebuilt in :meth:`finish`)."""
        ...

    async def finish(self, table: Table) -> None:
        """After the last batch of ``table`` (rebuild indexes, move sequences past the ids)."""
        ...

    async def meta(self) -> dict[str, str]:
        """The store's ``meta`` key/value table."""
        ...

    async def set_meta(self, items: dict[str, str]) -> None:
        """Set ``meta`` keys (one transaction)."""
        ...

    async def bind(self, name: str, dim: int) -> None:
        """Bind the store to embedder ``name`` of dimension ``dim`` (the fact store's own
        ``bind_embedder``)."""
        ...

    async def index_problems(self) -> list[str]:
        """After a copy: what is wrong with the keyword index (empty when it is complete)."""
        ...

    async def close(self) -> None:
        """Release the store."""
        ...


def keyset(table: Table, after: list[Any] | None, mark: str) -> tuple[str, list[Any]]:
    """``WHERE (pk) > (after)`` (row-value comparison) and its arguments."""
    if after is None:
        return "", []
    cols = ", ".join(table.pk)
    marks = ", ".join([mark] * len(table.pk))
    return f" WHERE ({cols}) > ({marks})", list(after)
