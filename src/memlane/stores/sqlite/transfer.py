"""This backend's side of ``memlane migrate`` (:mod:`memlane.transfer`): a memlane SQLite file
read and written table by table. Its row in :mod:`memlane.registry` names :func:`open_side`.

The keyword index lives in ``facts_fts`` (``text``, ``ctx``, ``date``, ``part``): read beside
each fact and written for each valid one; ``partitions.token`` is computed from the partition.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from memlane.errors import NotFoundError
from memlane.models import as_utc
from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.fts import partition_token
from memlane.stores.transfer import FTS_COLS, Row, Table, keyset

__all__ = ["SqliteSide", "open_side"]


async def open_side(location: str, role: str) -> SqliteSide:
    """The file at ``location`` (``role`` ``"source"``: it must exist; ``"target"``: created
    and migrated if needed).

    Raises:
        NotFoundError: a source file that does not exist.
    """
    path = Path(location).expanduser()
    if role == "source" and not path.is_file():
        raise NotFoundError(f"the source database {location} does not exist")
    db = Database(path)
    try:
        await asyncio.to_thread(db.open_sync)
    except BaseException:
        db.close_sync()
        raise
    db.acquire()
    return SqliteSide(db)


class SqliteSide:
    """A memlane SQLite file, read and written through its :class:`~memlane.stores.sqlite.db.Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.identity = "sqlite:" + str(Path(db.path).resolve())
        self.label = db.path

    def _select(self, table: Table) -> str:
        if table.name == "facts":
            cols = ", ".join(f"f.{c}" for c in table.cols)
            return f"SELECT {cols}, x.text, x.ctx, x.date FROM facts f LEFT JOIN facts_fts x ON x.rowid = f.rowid"
        extra = "rowid, " if table.rowid else ""
        return f"SELECT {extra}{', '.join(table.cols)} FROM {table.name}"

    async def count(self, table: Table, upto: list[Any] | None = None) -> int:
        where, args = "", []
        if upto is not None:
            where = f" WHERE ({', '.join(table.pk)}) <= ({', '.join('?' * len(table.pk))})"
            args = list(upto)
        sql = f"SELECT count(*) FROM {table.name}{where}"
        return int(await self.db.run(lambda c: c.execute(sql, args).fetchone()[0]))

    async def read(self, table: Table, after: list[Any] | None, limit: int) -> list[Row]:
        where, args = keyset(table, after, "?")
        if table.name == "facts":
            where = where.replace("(rowid)", "(f.rowid)")
        order = ", ".join(("f." if table.name == "facts" else "") + c for c in table.pk)
        sql = f"{self._select(table)}{where} ORDER BY {order} LIMIT ?"
        names = (["rowid"] if table.rowid else []) + list(table.cols)
        if table.name == "facts":
            names += list(FTS_COLS)

        def op(c: Any) -> list[Row]:
            return [dict(zip(names, r, strict=True)) for r in c.execute(sql, [*args, limit]).fetchall()]

        rows: list[Row] = await self.db.run(op)
        if table.name == "facts":
            for r in rows:
                for k in FTS_COLS:
                    r[k] = r[k] or ""
        return rows

    @staticmethod
    def _value(table: Table, col: str, v: Any) -> Any:
        if v is None:
            return None
        if col in table.json and not isinstance(v, str):
            return json.dumps(v, ensure_ascii=not table.fixed)
        if col in table.times and isinstance(v, datetime):
            return as_utc(v).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00") if table.fixed else as_utc(v).isoformat()
        if col in table.bools:
            return int(bool(v))
        if col == "embedding" and not isinstance(v, bytes):
            return np.asarray(v, dtype=np.float32).tobytes()
        return v

    async def write(self, table: Table, rows: list[Row], keep_ids: bool, checkpoint: tuple[str, str]) -> int:
        cols = [c for c in table.cols if keep_ids or c != table.serial]
        if table.rowid and keep_ids and "rowid" not in cols:
            cols = ["rowid", *cols]
        if table.name == "partitions":
            cols = [*cols, "token"]
        sql = f"INSERT OR IGNORE INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        fts = "INSERT INTO facts_fts (rowid, part, author, text, ctx, date) VALUES (?,?,?,?,?,?)"

        def op(c: Any) -> int:
            n = 0
            with self.db.write(c):
                for r in rows:
                    values: list[Any] = []
                    for col in cols:
                        if col == "token":
                            values.append(partition_token(r["partition"]))
                        elif col == "rowid" and table.rowid:
                            values.append(r.get("rowid"))
                        else:
                            values.append(self._value(table, col, r[col]))
                    cur = c.execute(sql, values)
                    if cur.rowcount != 1:
                        continue
                    n += 1
                    if table.name == "facts" and r["invalid_at"] is None:  # the index holds valid facts only
                        c.execute(
                            fts,
                            (
                                cur.lastrowid,
                                partition_token(r["partition"]),
                                (r["author"] or "").lower(),
                                r["search_text"],
                                r["ctx"],
                                r["date_words"],
                            ),
                        )
                c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", checkpoint)
            return n

        return int(await self.db.run(op))

    async def before(self, table: Table) -> None:
        return None

    async def finish(self, table: Table) -> None:
        return None  # INTEGER PRIMARY KEY / AUTOINCREMENT continue after the largest id by themselves

    async def meta(self) -> dict[str, str]:
        return dict(await self.db.run(lambda c: c.execute("SELECT key, value FROM meta").fetchall()))

    async def set_meta(self, items: dict[str, str]) -> None:
        def op(c: Any) -> None:
            with self.db.write(c):
                c.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(items.items()))

        await self.db.run(op)

    async def bind(self, name: str, dim: int) -> None:
        from memlane.stores.sqlite.facts import SqliteFactStore

        store = await SqliteFactStore.open(self.db)
        try:
            await store.bind_embedder(name, dim)
        finally:
            await store.close()

    async def index_problems(self) -> list[str]:
        def op(c: Any) -> list[str]:
            valid = c.execute("SELECT count(*) FROM facts WHERE invalid_at IS NULL").fetchone()[0]
            indexed = c.execute("SELECT count(*) FROM facts_fts").fetchone()[0]
            missing = c.execute(
                "SELECT count(*) FROM facts f WHERE f.invalid_at IS NULL AND NOT EXISTS"
                " (SELECT 1 FROM facts_fts x WHERE x.rowid = f.rowid)"
            ).fetchone()[0]
            if valid != indexed or missing:
                return [f"keyword index: {indexed} entries for {valid} valid facts ({missing} missing)"]
            return []

        problems: list[str] = await self.db.run(op)
        return problems

    async def close(self) -> None:
        await asyncio.to_thread(self.db.release_sync)
