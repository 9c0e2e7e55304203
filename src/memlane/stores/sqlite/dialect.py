"""SQLite's dialect of the long-term memory core (:mod:`memlane.stores.sql`), and its driver.

Values: timestamps and JSON as text, booleans as 0/1, vectors as float32 BLOBs. The keyword
index is the FTS5 table ``facts_fts`` keyed by the fact's ``rowid``. A write transaction
(``BEGIN IMMEDIATE``) holds the file's write lock, so there are no partition or row locks.
:func:`run` drives a core program on the calling thread's connection (inside ``Database.run``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import numpy as np

from memlane.models import Fact, FactFilter, as_utc, metadata_path, utcnow
from memlane.stores.base import Vector
from memlane.stores.sql.dialect import FACT_COLS, Dialect, NewFact, filter_conditions
from memlane.stores.sql.stmt import ALL, COUNT, EXEC, MANY, ONE, Memo, Program, Row, Stmt, drive, one
from memlane.stores.sqlite.fts import partition_token

__all__ = ["DIALECT", "SqliteDialect", "filter_sql", "row_to_fact", "run"]

T = TypeVar("T")


def iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _dt(value: str | None) -> datetime | None:
    return as_utc(datetime.fromisoformat(value)) if value else None


def row_to_fact(r: Row, *, with_embedding: bool = False) -> Fact:
    """A fact from a row of :data:`~memlane.stores.sql.dialect.FACT_COLS`."""
    emb = r[21]
    return Fact(
        id=r[1],
        content=r[3],
        hash=r[4],
        scope=r[5],
        agent_id=r[6],
        user_id=r[7],
        session_id=r[8],
        kind=r[9],
        author=r[10],
        seq=r[11],
        occurred_at=_dt(r[12]),
        formed_at=_dt(r[13]) or utcnow(),
        updated_at=_dt(r[14]) or utcnow(),
        access_count=r[15],
        version=r[16],
        source_event_ids=json.loads(r[17]),
        valid_from=_dt(r[18]) or utcnow(),
        invalid_at=_dt(r[19]),
        metadata=json.loads(r[20]),
        embedding=(np.frombuffer(emb, dtype=np.float32).tolist() if with_embedding and emb else None),
    )


def _metadata_sql(table: str, key: str, value: Any) -> tuple[str, list[Any]]:
    """One metadata condition: JSON types compared as the JSON value (``True`` only ``true``)."""
    path = "$." + ".".join(json.dumps(part) for part in metadata_path(key))  # "sender.id": nested
    if value is None:
        return f"json_type({table}.metadata, ?) = 'null'", [path]
    if isinstance(value, bool):
        return f"json_type({table}.metadata, ?) = ?", [path, "true" if value else "false"]
    if isinstance(value, int | float):
        cond = f"json_type({table}.metadata, ?) IN ('integer', 'real') AND json_extract({table}.metadata, ?) = ?"
        return cond, [path, path, value]
    return f"json_type({table}.metadata, ?) = 'text' AND json_extract({table}.metadata, ?) = ?", [
        path,
        path,
        str(value),
    ]


def filter_sql(flt: FactFilter | None, table: str) -> tuple[str, list[Any]]:
    """`` AND ...`` conditions on ``table``'s columns for a pushed-down filter."""
    return filter_conditions(flt, table, text=str, metadata=_metadata_sql)


class SqliteDialect(Dialect):
    """SQLite: text timestamps and JSON, FTS5 keyword rows, BLOB vectors, one write lock."""

    # One DELETE per row in forget: a multi-row DELETE (``rowid IN (...)``) left a deleted history
    # row's bytes in its page despite secure_delete (tests/engine/test_erasure.py reads the file's bytes).
    delete_batch = 1
    partition_range_sql = "SELECT partition FROM partitions WHERE partition >= ? AND partition < ?"
    # invalid turns have no keyword row left: only valid ones, their stored ctx unread
    context_rows_sql = (
        "SELECT rowid, seq, content, 1, NULL FROM facts WHERE partition=? AND session_id=?"
        " AND seq BETWEEN ? AND ? AND invalid_at IS NULL ORDER BY seq"
    )
    set_context_sql = "UPDATE facts_fts SET ctx=? WHERE rowid=?"

    def text(self, value: str | None) -> Any:
        return value

    def untext(self, value: Any) -> str | None:
        return value if value is None else str(value)

    def ts(self, value: datetime | None) -> Any:
        return iso(value)

    def unts(self, value: Any) -> datetime:
        return datetime.fromisoformat(value)

    def json(self, value: Any) -> Any:
        return json.dumps(value)

    def unjson(self, value: Any) -> Any:
        return json.loads(value)

    def boolean(self, value: bool) -> Any:
        return int(value)

    def fact(self, row: Row, *, with_embedding: bool = False) -> Fact:
        return row_to_fact(row, with_embedding=with_embedding)

    def in_list(self, expr: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{expr} IN ({','.join('?' * len(values))})", list(values)

    def unindexed(self, column: str) -> str:
        return "+" + column

    def day(self, column: str) -> str:
        return f"substr({column}, 1, 10)"  # ISO-8601 text of a UTC time

    def filter_sql(self, flt: FactFilter | None, table: str) -> tuple[str, list[Any]]:
        return filter_sql(flt, table)

    def lock_partitions(self, partitions: Sequence[str]) -> list[Stmt]:
        return []

    def vector_value(self, vector: Vector) -> Any:
        return np.asarray(vector, dtype=np.float32).reshape(-1).tobytes()

    def set_content(
        self, rowid: int, content: str, hash_: str, at: datetime, search_text: str, vector: Vector | None
    ) -> list[Stmt]:
        sets = "content=?, hash=?, version=version+1, updated_at=?"
        args: list[Any] = [content, hash_, at.isoformat()]
        if vector is not None:
            sets += ", embedding=?"
            args.append(vector.astype(np.float32).tobytes())
        return [
            Stmt(f"UPDATE facts SET {sets} WHERE rowid=?", (*args, rowid)),
            Stmt("UPDATE facts_fts SET text=? WHERE rowid=?", (search_text, rowid)),
        ]

    def invalidate(self, rowid: int, at: datetime) -> list[Stmt]:
        return [
            Stmt("UPDATE facts SET invalid_at=? WHERE rowid=?", (at.isoformat(), rowid)),
            Stmt("DELETE FROM facts_fts WHERE rowid=?", (rowid,)),
        ]

    def drop_keywords(self, rowids: Sequence[int]) -> list[Stmt]:
        return [Stmt("DELETE FROM facts_fts WHERE rowid=?", [(r,) for r in rowids], MANY)] if rowids else []

    def set_provenance(self, rowid: int, sources: list[str], when: datetime | None, date_words: str) -> list[Stmt]:
        return [
            Stmt(
                "UPDATE facts SET source_event_ids=?, occurred_at=? WHERE rowid=?",
                (json.dumps(sources), iso(when), rowid),
            ),
            Stmt("UPDATE facts_fts SET date=? WHERE rowid=?", (date_words, rowid)),
        ]

    def new_rowids(self, n: int) -> Program[list[int]]:
        top = yield from one("SELECT COALESCE(MAX(rowid), 0) FROM facts")
        start = int(top[0]) + 1 if top else 1
        return list(range(start, start + n))

    def insert_facts(self, rows: Sequence[NewFact]) -> list[Stmt]:
        stamp, dumps = Memo(iso), json.dumps  # one isoformat per distinct time (a batch shares a few)
        facts = [
            (
                r.rowid,
                s.id,
                r.partition,
                s.content,
                s.hash,
                s.scope,
                s.agent_id,
                s.user_id,
                s.session_id,
                s.kind,
                s.author,
                s.seq,
                stamp[s.occurred_at],
                stamp[s.formed_at],
                stamp[s.updated_at],
                s.access_count,
                s.version,
                dumps(s.source_event_ids) if s.source_event_ids else "[]",
                stamp[s.valid_from],
                stamp[s.invalid_at],
                dumps(s.metadata) if s.metadata else "{}",
                r.vector.astype(np.float32).tobytes() if r.vector is not None else None,
            )
            for r in rows
            for s in (r.fact,)
        ]
        tokens = Memo(partition_token)
        keyword = [(r.rowid, tokens[r.partition], (r.fact.author or "").lower(), r.text, r.ctx, r.date) for r in rows]
        return [
            Stmt(f"INSERT INTO facts ({FACT_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", facts, MANY),
            Stmt("INSERT INTO facts_fts (rowid, part, author, text, ctx, date) VALUES (?,?,?,?,?,?)", keyword, MANY),
        ]

    def insert_partitions(self, partitions: Sequence[str]) -> list[Stmt]:
        return [
            Stmt(
                "INSERT OR IGNORE INTO partitions (partition, token) VALUES (?, ?)",
                [(p, partition_token(p)) for p in partitions],
                MANY,
            )
        ]


DIALECT = SqliteDialect()


def run(c: sqlite3.Connection, program: Program[T]) -> T:
    """Drive a core program on ``c`` (this thread's connection, inside the caller's transaction)."""

    def execute(stmt: Stmt) -> Any:
        if stmt.fetch == MANY:
            c.executemany(stmt.sql, stmt.args)
            return None
        cur = c.execute(stmt.sql, stmt.args)
        return _FETCH[stmt.fetch](cur)

    return drive(program, execute)


_FETCH: dict[str, Callable[[sqlite3.Cursor], Any]] = {
    ONE: sqlite3.Cursor.fetchone,
    ALL: sqlite3.Cursor.fetchall,
    COUNT: lambda cur: cur.rowcount,
    EXEC: lambda cur: None,
}
