"""What an SQL backend supplies to the core: value adapters, IN-lists, the partition lock,
and the writes of its keyword index and vector column. Pure (no I/O): every method returns
statements or values; the backend's driver runs them.

The SQL the core writes itself is standard and identical for every dialect (``?``
placeholders, ``INSERT ... ON CONFLICT DO NOTHING``, ``RETURNING``); a dialect's methods hold
only what is not: SQLite keeps the keyword index in an FTS5 table keyed by ``rowid`` and
vectors as float32 BLOBs; PostgreSQL keeps ``search_text`` / ``ctx`` / ``date_words`` columns
behind a generated ``tsvector`` and vectors in a pgvector column.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from memlane.models import Fact, FactFilter
from memlane.stores.base import Vector
from memlane.stores.sql.stmt import Program, Row, Stmt

__all__ = ["FACT_COLS", "Dialect", "NewFact", "filter_conditions"]

#: Columns of a fact row, in the order :meth:`Dialect.fact` reads them (index 0 is ``rowid``,
#: 2 ``partition``, 4 ``hash``, 19 ``invalid_at``, 21 ``embedding``).
FACT_COLS = (
    "rowid, id, partition, content, hash, scope, agent_id, user_id, session_id, kind, author, seq, "
    "occurred_at, formed_at, updated_at, access_count, version, source_event_ids, valid_from, "
    "invalid_at, metadata, embedding"
)


def filter_conditions(
    flt: FactFilter | None,
    table: str,
    *,
    text: Callable[[str], Any],
    metadata: Callable[[str, str, Any], tuple[str, list[Any]]],
    mark: str = "?",
) -> tuple[str, list[Any]]:
    """`` AND ...`` conditions on ``table``'s columns for a pushed-down filter: ``text`` adapts
    an author or session id, ``metadata(table, key, value)`` is one metadata condition (keys with
    dots are paths into nested JSON), ``mark`` the placeholder."""
    if flt is None or flt.empty:
        return "", []
    sql: list[str] = []
    args: list[Any] = []
    for col in ("kind", "author", "session_id"):
        value = getattr(flt, col)
        if value is not None:
            sql.append(f"{table}.{col} = {mark}")
            args.append(value if col == "kind" else text(value))
    for key, value in flt.metadata:
        cond, cargs = metadata(table, key, value)
        sql.append(cond)
        args += cargs
    return "".join(f" AND {s}" for s in sql), args


class NewFact(NamedTuple):
    """A fact about to be inserted, with what its keyword index row holds (a tuple: one is
    built per inserted row)."""

    rowid: int
    partition: str
    fact: Fact
    vector: Vector | None
    text: str
    """The searchable text (:func:`memlane.stores.sql.facts.search_text`)."""
    ctx: str
    """The neighbouring turns' keyword text."""
    date: str
    """The event date in words."""


class Dialect(ABC):
    """One backend's differences from the core's standard SQL.

    Attributes:
        row_locks: the backend locks rows (``SELECT ... FOR UPDATE``) and partitions, so the
            core re-reads a row under its locks before changing it; False where a write
            transaction locks the whole database (SQLite's ``BEGIN IMMEDIATE``).
        for_update: `` FOR UPDATE`` where ``row_locks``, else empty.
        chunk: the most values one IN-list takes (SQLite binds each value; PostgreSQL one array).
        delete_batch: the most rows ``forget`` deletes by key in one statement (1: one
            ``DELETE ... WHERE key=?`` per row).
        partition_range_sql: a query of the stored partitions ``>= ?`` and ``< ?`` (byte order).
        context_rows_sql: a query of one session's turns, ``(rowid, seq, content, valid, ctx)``
            for ``partition = ? AND session_id = ? AND seq BETWEEN ? AND ?`` ordered by ``seq``;
            ``ctx`` may be NULL (unknown: always rewritten), and rows the keyword index no
            longer holds may be left out.
        set_context_sql: sets one row's neighbour-context keyword text, ``(ctx, rowid)``.
        byte_order: the collation clause that orders text byte-wise (partition keys).
    """

    row_locks: bool = False
    for_update: str = ""
    chunk: int = 500
    delete_batch: int = 500
    partition_range_sql: str
    context_rows_sql: str
    set_context_sql: str
    byte_order: str = ""

    # ------------------------------------------------------------------ values
    @abstractmethod
    def text(self, value: str | None) -> Any:
        """A user-supplied string as stored and compared."""

    @abstractmethod
    def untext(self, value: Any) -> str | None:
        """The inverse of :meth:`text`."""

    @abstractmethod
    def ts(self, value: datetime | None) -> Any:
        """A timestamp as stored."""

    @abstractmethod
    def unts(self, value: Any) -> datetime:
        """A stored timestamp (never NULL) as a datetime."""

    @abstractmethod
    def json(self, value: Any) -> Any:
        """JSON data as stored."""

    @abstractmethod
    def unjson(self, value: Any) -> Any:
        """The inverse of :meth:`json`."""

    @abstractmethod
    def boolean(self, value: bool) -> Any:
        """A boolean as stored."""

    @abstractmethod
    def fact(self, row: Row, *, with_embedding: bool = False) -> Fact:
        """A fact from a row of :data:`FACT_COLS` (the vector only when ``with_embedding``)."""

    def vector(self, value: Any) -> Vector | None:
        """The embedding column's value as a float32 array, None when the row has none (without
        a Python list per row: point-in-time search reads a whole scope's). Decodes float32
        bytes (SQLite), a pgvector value and any sequence of floats."""
        if value is None:
            return None
        if isinstance(value, bytes | bytearray | memoryview):
            return np.frombuffer(value, dtype=np.float32)
        if hasattr(value, "to_numpy"):
            return np.asarray(value.to_numpy(), dtype=np.float32)
        return np.asarray(value, dtype=np.float32)

    # ------------------------------------------------------------------ SQL pieces
    @abstractmethod
    def in_list(self, expr: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``expr`` is one of ``values`` (at most :attr:`chunk` of them), as SQL and arguments."""

    def unindexed(self, column: str) -> str:
        """``column`` in a condition the planner must not choose an index for."""
        return column

    @abstractmethod
    def day(self, column: str) -> str:
        """An expression of the UTC calendar day of timestamp ``column``, as ``YYYY-MM-DD`` text."""

    @abstractmethod
    def filter_sql(self, flt: FactFilter | None, table: str) -> tuple[str, list[Any]]:
        """`` AND ...`` conditions on ``table``'s columns for a pushed-down filter."""

    @abstractmethod
    def lock_partitions(self, partitions: Sequence[str]) -> list[Stmt]:
        """Hold each partition's write lock until the transaction ends (none where a write
        transaction locks everything)."""

    @abstractmethod
    def vector_value(self, vector: Vector) -> Any:
        """A vector as the embedding columns take it (float32 bytes, a pgvector value)."""

    # ------------------------------------------------------------------ keyword index and vectors
    @abstractmethod
    def set_content(
        self, rowid: int, content: str, hash_: str, at: datetime, search_text: str, vector: Vector | None
    ) -> list[Stmt]:
        """A fact's new content: text, hash, version + 1, ``updated_at``, keyword text and,
        when given, its new vector."""

    @abstractmethod
    def invalidate(self, rowid: int, at: datetime) -> list[Stmt]:
        """Mark a fact invalid at ``at`` and take it out of the keyword index."""

    @abstractmethod
    def drop_keywords(self, rowids: Sequence[int]) -> list[Stmt]:
        """Take rows about to be deleted out of the keyword index (nothing where the index
        lives in the row itself)."""

    @abstractmethod
    def set_provenance(self, rowid: int, sources: list[str], when: datetime | None, date_words: str) -> list[Stmt]:
        """A fact's merged source events and event time (and the time's keyword words)."""

    # ------------------------------------------------------------------ inserts
    @abstractmethod
    def new_rowids(self, n: int) -> Program[list[int]]:
        """``n`` new, increasing row ids for facts inserted in this transaction."""

    @abstractmethod
    def insert_facts(self, rows: Sequence[NewFact]) -> list[Stmt]:
        """Insert fact rows with their keyword index rows and vectors."""

    @abstractmethod
    def insert_partitions(self, partitions: Sequence[str]) -> list[Stmt]:
        """Create the counters of partitions not stored yet (known ones are left alone)."""
