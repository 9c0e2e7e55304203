"""PostgreSQL's dialect of the long-term memory core (:mod:`memlane.stores.sql`), and its driver.

Values: text NUL-safe (:func:`~memlane.stores.postgres.rows.enc`), ``timestamptz``, ``jsonb``,
booleans, pgvector vectors. The keyword index is the generated ``facts.tsv`` over the
``search_text`` / ``date_words`` / ``ctx`` columns. Writers take a transaction-scoped advisory
lock per partition (sorted: no deadlock) and lock rows ``FOR UPDATE`` before changing them.
:func:`run` drives a core program with ``await conn.execute(...)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np
from psycopg.types.json import Jsonb

from memlane.models import Fact, FactFilter
from memlane.stores.base import Vector
from memlane.stores.postgres.rows import Conn, dec, dec_json, enc, enc_json, filter_sql, row_to_fact
from memlane.stores.sql.dialect import FACT_COLS, Dialect, NewFact
from memlane.stores.sql.stmt import ALL, COUNT, MANY, ONE, Program, Row, Stmt, all_rows, drive_async

__all__ = ["PgDialect", "lock_key", "run"]

T = TypeVar("T")


def lock_key(schema: str | None, partition: str) -> int:
    """A signed 64-bit advisory-lock key for one partition of one schema."""
    raw = hashlib.blake2b(f"memlane-part:{schema or ''}|{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(raw, "big", signed=True)


@lru_cache(maxsize=2048)
def pg_sql(sql: str) -> str:
    """A core statement in psycopg's paramstyle (``?`` -> ``%s``, a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgDialect(Dialect):
    """PostgreSQL of one schema (the advisory-lock keys name it)."""

    row_locks = True
    for_update = " FOR UPDATE"
    chunk = 1 << 30
    delete_batch = 1 << 30
    # byte order (COLLATE "C"): the database's locale cannot reorder the "|" and "%" of keys
    partition_range_sql = (
        'SELECT partition FROM partitions WHERE partition COLLATE "C" >= ? AND partition COLLATE "C" < ?'
    )
    context_rows_sql = (
        "SELECT rowid, seq, content, invalid_at IS NULL, ctx FROM facts"
        " WHERE partition = ? AND session_id = ? AND seq BETWEEN ? AND ? ORDER BY seq, rowid"
    )
    set_context_sql = "UPDATE facts SET ctx = ? WHERE rowid = ?"
    byte_order = ' COLLATE "C"'

    def __init__(self, schema: str | None) -> None:
        self.schema = schema

    def text(self, value: str | None) -> Any:
        return enc(value)

    def untext(self, value: Any) -> str | None:
        return dec(value)

    def ts(self, value: datetime | None) -> Any:
        return value

    def unts(self, value: Any) -> datetime:
        return value  # type: ignore[no-any-return]

    def json(self, value: Any) -> Any:
        return Jsonb(enc_json(value))

    def unjson(self, value: Any) -> Any:
        return dec_json(value)

    def boolean(self, value: bool) -> Any:
        return bool(value)

    def fact(self, row: Row, *, with_embedding: bool = False) -> Fact:
        return row_to_fact(row, with_embedding=with_embedding)

    def in_list(self, expr: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{expr} = ANY(?)", [list(values)]

    def day(self, column: str) -> str:
        return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"

    def filter_sql(self, flt: FactFilter | None, table: str) -> tuple[str, list[Any]]:
        fsql, args = filter_sql(flt, table)
        return fsql.replace("%s", "?"), args

    def lock_partitions(self, partitions: Sequence[str]) -> list[Stmt]:
        keys = sorted({lock_key(self.schema, p) for p in partitions})
        return [Stmt("SELECT pg_advisory_xact_lock(?)", (key,)) for key in keys]

    def vector_value(self, vector: Vector) -> Any:
        return np.asarray(vector, dtype=np.float32).reshape(-1)

    def set_content(
        self, rowid: int, content: str, hash_: str, at: datetime, search_text: str, vector: Vector | None
    ) -> list[Stmt]:
        sets = "content=?, hash=?, version=version+1, updated_at=?, search_text=?"
        args: list[Any] = [enc(content), hash_, at, enc(search_text)]
        if vector is not None:
            sets += ", embedding=?"
            args.append(vector.reshape(-1).astype(np.float32))
        return [Stmt(f"UPDATE facts SET {sets} WHERE rowid=?", (*args, rowid))]

    def invalidate(self, rowid: int, at: datetime) -> list[Stmt]:
        # the searchable text is cleared, as SQLite drops the keyword row
        return [Stmt("UPDATE facts SET invalid_at=?, search_text='', ctx='', date_words='' WHERE rowid=?", (at, rowid))]

    def drop_keywords(self, rowids: Sequence[int]) -> list[Stmt]:
        return []  # the tsvector is a column of the deleted row

    def set_provenance(self, rowid: int, sources: list[str], when: datetime | None, date_words: str) -> list[Stmt]:
        return [
            Stmt(
                "UPDATE facts SET source_event_ids=?, occurred_at=?, date_words=? WHERE rowid=?",
                (Jsonb(enc_json(sources)), when, date_words, rowid),
            )
        ]

    def new_rowids(self, n: int) -> Program[list[int]]:
        rows = yield from all_rows(
            "SELECT nextval(pg_get_serial_sequence('facts', 'rowid')) FROM generate_series(1, ?)", (n,)
        )
        return sorted(int(r[0]) for r in rows)

    def insert_facts(self, rows: Sequence[NewFact]) -> list[Stmt]:
        args = [
            (
                r.rowid,
                enc(s.id),
                r.partition,
                enc(s.content),
                s.hash,
                s.scope,
                enc(s.agent_id),
                enc(s.user_id),
                enc(s.session_id),
                s.kind,
                enc(s.author),
                s.seq,
                s.occurred_at,
                s.formed_at,
                s.updated_at,
                s.access_count,
                s.version,
                Jsonb(enc_json(s.source_event_ids)),
                s.valid_from,
                s.invalid_at,
                Jsonb(enc_json(s.metadata)),
                r.vector.astype(np.float32) if r.vector is not None else None,
                enc(r.text),
                r.ctx,
                r.date,
            )
            for r in rows
            for s in (r.fact,)
        ]
        marks = ",".join("?" * len(args[0])) if args else ""
        return [Stmt(f"INSERT INTO facts ({FACT_COLS}, search_text, ctx, date_words) VALUES ({marks})", args, MANY)]

    def insert_partitions(self, partitions: Sequence[str]) -> list[Stmt]:
        return [
            Stmt(
                "INSERT INTO partitions (partition) VALUES (?) ON CONFLICT DO NOTHING", [(p,) for p in partitions], MANY
            )
        ]


async def run(conn: Conn, program: Program[T]) -> T:
    """Drive a core program on ``conn`` (inside the caller's transaction)."""

    async def execute(stmt: Stmt) -> Any:
        sql = pg_sql(stmt.sql)
        if stmt.fetch == MANY:
            async with conn.cursor() as many:
                await many.executemany(sql, stmt.args)
            return None
        cur = await conn.execute(sql, stmt.args)
        if stmt.fetch == ONE:
            row = await cur.fetchone()
            return tuple(row) if row is not None else None
        if stmt.fetch == ALL:
            return [tuple(r) for r in await cur.fetchall()]
        return cur.rowcount if stmt.fetch == COUNT else None

    return await drive_async(program, execute)
