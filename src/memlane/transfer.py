"""Copy one long-term store into another, table by table (``memlane migrate``).

SQLite to PostgreSQL, PostgreSQL to SQLite, SQLite to SQLite, PostgreSQL to PostgreSQL: the
two schemas hold the same tables and columns (PostgreSQL with native types), so a row is read
from one side as plain Python values and written to the other with the other's types:

* timestamps: SQLite text (``isoformat``; sessions and events fixed-width) <-> ``timestamptz``;
* JSON: SQLite text <-> ``jsonb``; booleans: ``0/1`` <-> ``boolean``;
* vectors: SQLite float32 blobs <-> pgvector ``vector`` (copied verbatim, never re-embedded);
* PostgreSQL text cannot hold NUL: strings are written with the PostgreSQL stores' own codec
  (:func:`memlane.stores.postgres.rows.enc`) and decoded when read;
* the keyword index: SQLite keeps it in ``facts_fts`` (``text``, ``ctx``: neighbouring turns,
  ``date``: the event date in words, ``part``: the partition token), PostgreSQL in the
  ``facts`` columns ``search_text`` / ``ctx`` / ``date_words`` (its ``tsv`` is generated from
  them); the copy moves them across, so search finds the same facts on the target.
  ``partitions.token`` (SQLite only) is computed from the partition.

Rows are copied in primary-key order, in batches; each batch is one transaction on the target
together with the table's checkpoint (``migrate:<table>`` in the target's ``meta``), and every
insert is idempotent (``INSERT OR IGNORE`` / ``ON CONFLICT DO NOTHING``), so an interrupted copy
resumes where it stopped and never duplicates a row. The target's embedder binding is made
the source's (name and dimension: on PostgreSQL that types the column and builds the HNSW
index); a target bound to another embedder is refused. ``context_cache`` is not copied (a cache).

Copy from a quiet source (stop the servers and workers writing it): rows written to the source
during the copy may or may not be copied.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

import numpy as np

from memlane.errors import (
    ConfigError,
    ConflictError,
    DimensionMismatchError,
    InvalidInputError,
    NotFoundError,
)
from memlane.models import as_utc, utcnow
from memlane.registry import parse_store_url

__all__ = [
    "TABLES",
    "Table",
    "TableReport",
    "TransferReport",
    "migrate",
]

#: Prefix of the target's ``meta`` keys this module writes (never copied from a source).
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


# ---------------------------------------------------------------------------- backends
class _Side(Protocol):
    identity: str
    label: str

    async def count(self, table: Table, upto: list[Any] | None = None) -> int: ...
    async def read(self, table: Table, after: list[Any] | None, limit: int) -> list[Row]: ...
    async def write(self, table: Table, rows: list[Row], keep_ids: bool, checkpoint: tuple[str, str]) -> int: ...
    async def before(self, table: Table) -> None: ...
    async def finish(self, table: Table) -> None: ...
    async def meta(self) -> dict[str, str]: ...
    async def set_meta(self, items: dict[str, str]) -> None: ...
    async def bind(self, name: str, dim: int) -> None: ...
    async def index_problems(self) -> list[str]: ...
    async def close(self) -> None: ...


def _keyset(table: Table, after: list[Any] | None, mark: str) -> tuple[str, list[Any]]:
    """``WHERE (pk) > (after)`` (row-value comparison) and its arguments."""
    if after is None:
        return "", []
    cols = ", ".join(table.pk)
    marks = ", ".join([mark] * len(table.pk))
    return f" WHERE ({cols}) > ({marks})", list(after)


class _SqliteSide:
    """A memlane SQLite file, read and written through its :class:`~memlane.stores.sqlite.db.Database`."""

    def __init__(self, db: Any) -> None:
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
        where, args = _keyset(table, after, "?")
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
        from memlane.stores.sqlite.fts import partition_token

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
                        c.execute(fts, (cur.lastrowid, partition_token(r["partition"]), (r["author"] or "").lower(),
                                        r["search_text"], r["ctx"], r["date_words"]))  # fmt: skip
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


class _PgSide:
    """A PostgreSQL database/schema, read and written through its
    :class:`~memlane.stores.postgres.db.PgDatabase`."""

    def __init__(self, db: Any) -> None:
        from memlane.stores.postgres.rows import dec, dec_json, enc, enc_json

        self.db = db
        self._enc, self._dec, self._enc_json, self._dec_json = enc, dec, enc_json, dec_json
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
            args = [self._enc(v) if isinstance(v, str) else v for v in upto]
        async with self.db.connection() as conn:
            cur = await conn.execute(f"SELECT count(*) FROM {table.name}{where}", args)
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    def _names(self, table: Table) -> list[str]:
        names = (["rowid"] if table.rowid == "both" else []) + list(table.cols)
        return names + list(FTS_COLS) if table.name == "facts" else names

    async def read(self, table: Table, after: list[Any] | None, limit: int) -> list[Row]:
        where, args = _keyset(table, after, "%s")
        args = [self._enc(v) if isinstance(v, str) else v for v in args]
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
                    v = self._dec_json(v)
                elif isinstance(v, str):
                    v = self._dec(v)
                row[name] = v
            rows.append(row)
        return rows

    def _value(self, table: Table, col: str, v: Any) -> Any:
        from psycopg.types.json import Jsonb

        if v is None:
            return None
        if col in table.json:
            return Jsonb(self._enc_json(json.loads(v) if isinstance(v, str) else v))
        if col in table.times:
            return as_utc(datetime.fromisoformat(v)) if isinstance(v, str) else as_utc(v)
        if col in table.bools:
            return bool(v)
        if col == "embedding":
            return np.frombuffer(v, dtype=np.float32) if isinstance(v, bytes) else np.asarray(v, dtype=np.float32)
        return self._enc(v) if isinstance(v, str) else v

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
        """Before rows go into ``facts``: drop its HNSW index (maintained row by row it makes the
        copy ~15x slower; built once afterwards it is quick). Its definition is kept in ``meta``
        first, so an interrupted copy rebuilds it when resumed."""
        from psycopg import sql

        if table.name != "facts":
            return
        async with self.db.connection() as conn:
            cur = await conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                " AND tablename = 'facts' AND indexdef ILIKE '% USING hnsw %'"
            )
            found = await cur.fetchall()
        for name, definition in found:
            await self.set_meta({f"{META_PREFIX}index:{name}": definition})
            async with self.db.connection() as conn:
                await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))

    async def finish(self, table: Table) -> None:
        for key, definition in (await self.meta()).items():
            if table.name == "facts" and key.startswith(f"{META_PREFIX}index:"):
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
            return {self._dec(k) or "": self._dec(v) or "" for k, v in await cur.fetchall()}

    async def set_meta(self, items: dict[str, str]) -> None:
        async with self.db.transaction() as conn:
            for k, v in items.items():
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (self._enc(k), self._enc(v)),
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


async def _open(url: str, role: str) -> _Side:
    """The store at ``url`` (``source`` must exist; a ``target`` is created and migrated)."""
    text = os.fspath(url).strip()
    if not text:
        raise InvalidInputError(f"the {role} store URL is empty")
    scheme, location = parse_store_url(text)  # ConfigError: unknown scheme, redis://, sqlite:relative
    if location == ":memory:":
        raise InvalidInputError(f"the {role} store {text!r} is in memory: give a file path or a PostgreSQL URL")
    if scheme == "sqlite":
        from memlane.stores.sqlite.db import Database

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
        return _SqliteSide(db)
    if scheme == "postgresql":
        try:
            from memlane.stores.postgres.db import PgDatabase
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError(f"PostgreSQL stores need: pip install 'memlane[postgres]' ({exc})") from exc
        pg = await PgDatabase.open(location)
        pg.acquire()
        return _PgSide(pg)
    raise ConfigError(f"memlane migrate copies SQLite and PostgreSQL stores, not {scheme!r} ({text!r})")


# ---------------------------------------------------------------------------- the copy
class ProgressBar(Protocol):
    """What :func:`migrate` reports progress to (``memlane.cli.progress.Progress`` fits)."""

    def update(self, n: int = 1) -> None: ...
    def __enter__(self) -> ProgressBar: ...
    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None: ...


@dataclass
class TableReport:
    """One table after the copy."""

    name: str
    source_rows: int
    target_rows: int
    copied: int
    """Rows this run inserted (a resumed or repeated run copies only what is missing)."""
    resumed: bool = False

    @property
    def ok(self) -> bool:
        return self.source_rows == self.target_rows


@dataclass
class TransferReport:
    """What :func:`migrate` did and found."""

    source: str
    target: str
    embedder: str | None
    dim: int | None
    tables: list[TableReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Verification failures: tables whose row counts differ, an incomplete keyword index."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "target": self.target, "embedder": self.embedder, "dim": self.dim,
            "ok": self.ok, "problems": self.problems,
            "tables": [{"table": t.name, "source_rows": t.source_rows, "target_rows": t.target_rows,
                        "copied": t.copied, "resumed": t.resumed, "ok": t.ok} for t in self.tables],
        }  # fmt: skip


async def migrate(
    source: str,
    target: str,
    *,
    batch_size: int = 500,
    restart: bool = False,
    force: bool = False,
    progress: Callable[[str, int], ProgressBar] | None = None,
    after_batch: Callable[[str, int], None] | None = None,
) -> TransferReport:
    """Copy every table of the store at ``source`` into the store at ``target``.

    Args:
        source, target: store URLs or SQLite paths (``sqlite:///x.db``, ``x.db``,
            ``postgresql://...?schema=s``). The target is created and migrated if needed.
        batch_size: rows per batch (one target transaction, with its checkpoint).
        restart: ignore the checkpoints of an earlier, interrupted copy and scan every table
            again (rows already there are skipped).
        force: copy into a target that holds data from somewhere else (merged; row counts
            then differ and are reported).
        progress: ``progress(table, total_rows)`` returns a bar updated per batch.
        after_batch: called with ``(table, batches so far)`` after each committed batch (tests
            interrupt a copy with it).

    Raises:
        ConfigError / InvalidInputError / NotFoundError: a bad or missing URL; the same store
            as both source and target.
        ConflictError: the target holds data from another source (and not ``force``).
        DimensionMismatchError / ConfigError: the target is bound to another embedder.
    """
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be at least 1, got {batch_size}")
    src = await _open(source, "source")
    try:
        dst = await _open(target, "target")
    except BaseException:
        await src.close()
        raise
    try:
        return await _copy(src, dst, batch_size, restart, force, progress, after_batch)
    finally:
        await dst.close()
        await src.close()


async def _copy(
    src: _Side,
    dst: _Side,
    batch_size: int,
    restart: bool,
    force: bool,
    progress: Callable[[str, int], ProgressBar] | None,
    after_batch: Callable[[str, int], None] | None,
) -> TransferReport:
    if src.identity == dst.identity:
        raise InvalidInputError(f"the source and the target are the same store ({src.label})")
    src_meta, dst_meta = await src.meta(), await dst.meta()
    recorded = dst_meta.get(f"{META_PREFIX}source")
    if recorded != src.identity:
        held = {t.name: n for t in TABLES if (n := await dst.count(t))}
        if (held or "dim" in dst_meta) and not force:
            what = ", ".join(f"{n} {name}" for name, n in held.items()) or "an embedder binding"
            origin = f"copied from {recorded}" if recorded else "not copied by memlane migrate"
            raise ConflictError(
                f"the target {dst.label} already holds data ({what}; {origin}): copy into an empty store, or "
                "pass --force to merge into it"
            )
        keep_ids = not held
        await dst.set_meta({f"{META_PREFIX}source": src.identity, f"{META_PREFIX}keep_ids": "1" if keep_ids else "0"})
        restart = True  # checkpoints of another source mean nothing here
    keep_ids = (await dst.meta()).get(f"{META_PREFIX}keep_ids", "1") == "1"

    name, dim = src_meta.get("embedder"), src_meta.get("dim")
    if dim is not None and name is not None:
        have_dim, have_name = dst_meta.get("dim"), dst_meta.get("embedder")
        if have_dim is not None and int(have_dim) != int(dim):
            raise DimensionMismatchError(
                f"the target {dst.label} holds {have_dim}-dimensional vectors from {have_name!r}, the source "
                f"{int(dim)}-dimensional ones from {name!r}: vectors are copied verbatim, so the target must be "
                "empty or bound to the same embedder",
                expected=int(have_dim),
                got=int(dim),
            )
        if have_name is not None and have_name != name:
            raise ConfigError(
                f"the target {dst.label} was embedded with {have_name!r}, the source with {name!r}: vectors of "
                "different models are not comparable; copy into an empty store"
            )
        await dst.bind(name, int(dim))

    report = TransferReport(src.label, dst.label, name, int(dim) if dim is not None else None)
    for table in TABLES:
        key = f"{META_PREFIX}{table.name}"
        after: list[Any] | None = None
        saved = (await dst.meta()).get(key) if not restart else None
        if saved is not None:
            after = json.loads(saved)
        total = await src.count(table)
        done_before = await src.count(table, after) if after is not None else 0
        copied, batches = 0, 0
        bar: Any = progress(table.name, total) if progress is not None else None
        try:
            if bar is not None:
                bar.__enter__()
                if done_before:
                    bar.update(done_before)
            while True:
                rows = await src.read(table, after, batch_size)
                if not rows:
                    break
                if batches == 0:
                    await dst.before(table)
                after = [rows[-1][c] for c in table.pk]
                copied += await dst.write(table, rows, keep_ids, (key, json.dumps(after)))
                batches += 1
                if bar is not None:
                    bar.update(len(rows))
                if after_batch is not None:
                    after_batch(table.name, batches)
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)
        await dst.finish(table)
        report.tables.append(TableReport(table.name, total, await dst.count(table), copied, resumed=saved is not None))

    carried = {k: v for k, v in src_meta.items() if not k.startswith(META_PREFIX) and k not in BINDING_KEYS}
    if "generation" in carried and "generation" in dst_meta:  # caches compare it: never move it backwards
        carried["generation"] = str(max(int(carried["generation"]), int(dst_meta["generation"])))
    carried[f"{META_PREFIX}finished_at"] = utcnow().isoformat()
    await dst.set_meta(carried)

    for t in report.tables:
        if not t.ok:
            report.problems.append(f"{t.name}: {t.source_rows} rows in the source, {t.target_rows} in the target")
    report.problems += await dst.index_problems()
    return report
