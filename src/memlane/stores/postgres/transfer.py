"""This backend's side of ``memlane migrate`` (:mod:`memlane.transfer`): a PostgreSQL
database/schema read and written table by table. Its row in :mod:`memlane.registry` names
:func:`open_side`.

Native types on this side (``timestamptz``, ``jsonb``, ``boolean``, pgvector ``vector``);
strings go through the stores' NUL codec (:func:`memlane.stores.postgres.rows.enc`). The
keyword text is in the ``facts`` columns ``search_text`` / ``ctx`` / ``date_words`` (``tsv``
is generated from them). The HNSW index is dropped while ``facts`` is copied and rebuilt after.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from memlane.models import as_utc
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.rows import dec, dec_json, enc, enc_json
from memlane.stores.transfer import FTS_COLS, META_PREFIX, Row, Table, keyset

__all__ = ["PgSide", "open_side"]


#: Tables with an HNSW index, dropped while rows are copied in and built again afterwards.
_VECTOR_TABLES = ("facts", "fact_windows")


def _on_table(definition: str, table: str) -> bool:
    """Whether an index definition (``pg_indexes.indexdef``) is on ``table``."""
    return f".{table} USING " in definition or f" ON {table} USING " in definition


async def open_side(location: str, role: str) -> PgSide:
    """The database/schema at ``location`` (created and migrated if needed, for either role)."""
    pg = await PgDatabase.open(location)
    pg.acquire()
    return PgSide(pg)


class PgSide:
    """A PostgreSQL database/schema, read and written through its
    :class:`~memlane.stores.postgres.db.PgDatabase`."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        parts = urlsplit(db.url)
        where = f"{parts.hostname or ''}:{parts.port or 5432}{parts.path}"
        self.identity = f"postgresql://{where}?schema={db.schema or 'public'}"
        self.label = self.identity

    async def _columns(self, table: str) -> set[str]:
        async with self.db.connection() as conn:
            cur = await conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = %s",
                (table,),
            )
            return {r[0] for r in await cur.fetchall()}

    async def count(self, table: Table, upto: list[Any] | None = None) -> int:
        where, args = "", []
        if upto is not None:
            where = f" WHERE ({', '.join(table.pk)}) <= ({', '.join(['%s'] * len(table.pk))})"
            args = [enc(v) if isinstance(v, str) else v for v in upto]
        async with self.db.connection() as conn:
            cur = await conn.execute(f"SELECT count(*) FROM {table.name}{where}", args)
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    def _names(self, table: Table) -> list[str]:
        names = (["rowid"] if table.rowid == "both" else []) + list(table.cols)
        return names + list(FTS_COLS) if table.name == "facts" else names

    async def read(self, table: Table, after: list[Any] | None, limit: int) -> list[Row]:
        where, args = keyset(table, after, "%s")
        args = [enc(v) if isinstance(v, str) else v for v in args]
        names = self._names(table)
        sql = f"SELECT {', '.join(names)} FROM {table.name}{where} ORDER BY {', '.join(table.pk)} LIMIT %s"
        async with self.db.connection() as conn:
            cur = await conn.execute(sql, [*args, limit])
            raw = await cur.fetchall()
        rows = []
        for r in raw:
            row: Row = {}
            for name, v in zip(names, r, strict=True):
                if name == "embedding" and v is not None:
                    v = np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)
                elif name in table.json:
                    v = dec_json(v)
                elif isinstance(v, str):
                    v = dec(v)
                row[name] = v
            rows.append(row)
        return rows

    def _value(self, table: Table, col: str, v: Any) -> Any:
        if v is None:
            return None
        if col in table.json:
            return Jsonb(enc_json(json.loads(v) if isinstance(v, str) else v))
        if col in table.times:
            return as_utc(datetime.fromisoformat(v)) if isinstance(v, str) else as_utc(v)
        if col in table.bools:
            return bool(v)
        if col == "embedding":
            return np.frombuffer(v, dtype=np.float32) if isinstance(v, bytes) else np.asarray(v, dtype=np.float32)
        return enc(v) if isinstance(v, str) else v

    async def write(self, table: Table, rows: list[Row], keep_ids: bool, checkpoint: tuple[str, str]) -> int:
        names = [n for n in self._names(table) if keep_ids or n not in (table.serial, "rowid")]
        sql = (
            f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})"
            " ON CONFLICT DO NOTHING"
        )
        params = [[self._value(table, n, r.get(n)) for n in names] for r in rows]
        async with self.db.transaction() as conn:
            async with conn.cursor() as cur:  # one pipelined round of inserts, rowcount summed
                await cur.executemany(sql, params)
                n = int(max(cur.rowcount, 0))
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                checkpoint,
            )
        return n

    async def before(self, table: Table) -> None:
        """Before rows go into ``facts`` (or ``fact_windows``): drop its HNSW index (maintained
        row by row it makes the copy ~15x slower; built once afterwards it is quick). Its
        definition is kept in ``meta`` first, so an interrupted copy rebuilds it when resumed."""
        if table.name not in _VECTOR_TABLES:
            return
        async with self.db.connection() as conn:
            cur = await conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                " AND tablename = %s AND indexdef ILIKE '%% USING hnsw %%'",
                (table.name,),
            )
            found = await cur.fetchall()
        for name, definition in found:
            await self.set_meta({f"{META_PREFIX}index:{name}": definition})
            async with self.db.connection() as conn:
                await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))

    async def finish(self, table: Table) -> None:
        for key, definition in (await self.meta()).items():
            if key.startswith(f"{META_PREFIX}index:") and _on_table(definition, table.name):
                create = definition.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)
                async with self.db.connection() as conn:
                    await conn.execute(create)
                    await conn.execute("DELETE FROM meta WHERE key = %s", (key,))
        for col in {c for c in (table.serial, "rowid" if table.rowid == "both" else None) if c}:
            async with self.db.connection() as conn:
                await conn.execute(
                    f"SELECT setval(pg_get_serial_sequence(%s, %s), COALESCE(MAX({col}), 0) + 1, false)"
                    f" FROM {table.name}",
                    (table.name, col),
                )

    async def meta(self) -> dict[str, str]:
        async with self.db.connection() as conn:
            cur = await conn.execute("SELECT key, value FROM meta")
            return {dec(k) or "": dec(v) or "" for k, v in await cur.fetchall()}

    async def set_meta(self, items: dict[str, str]) -> None:
        async with self.db.transaction() as conn:
            for k, v in items.items():
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (enc(k), enc(v)),
                )

    async def bind(self, name: str, dim: int) -> None:
        from memlane.stores.postgres.facts import PgFactStore

        store = await PgFactStore.open(self.db)
        try:
            await store.bind_embedder(name, dim)
        finally:
            await store.close()

    async def index_problems(self) -> list[str]:
        return []  # the keyword vector is a generated column: it cannot disagree with its text

    async def close(self) -> None:
        await self.db.release()
