"""Copy one long-term store into another, table by table (``memlane migrate``).

SQLite to PostgreSQL, PostgreSQL to SQLite, SQLite to SQLite, PostgreSQL to PostgreSQL: the
two schemas hold the same tables and columns (:data:`memlane.stores.transfer.TABLES`;
PostgreSQL with native types), so a row is read from one side as plain Python values and
written to the other with the other's types. Each side lives in its backend's folder
(``stores/sqlite/transfer.py``, ``stores/postgres/transfer.py``), named by the ``transfer``
entry of the backend's row in :data:`memlane.registry.BACKENDS`:

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

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from memlane.errors import ConfigError, ConflictError, DimensionMismatchError, InvalidInputError
from memlane.models import utcnow
from memlane.registry import BACKENDS, backend_for_scheme, parse_store_url
from memlane.stores.transfer import BINDING_KEYS, META_PREFIX, TABLES, Table, TransferSide

__all__ = [
    "TABLES",
    "Table",
    "TableReport",
    "TransferReport",
    "migrate",
]


# ---------------------------------------------------------------------------- the stores
async def _open(url: str, role: str) -> TransferSide:
    """The store at ``url`` (``source`` must exist; a ``target`` is created and migrated), opened
    by its backend's side (the ``transfer`` entry of its row in :data:`memlane.registry.BACKENDS`)."""
    text = os.fspath(url).strip()
    if not text:
        raise InvalidInputError(f"the {role} store URL is empty")
    scheme, location = parse_store_url(text)  # ConfigError: unknown scheme, redis://, sqlite:relative
    if location == ":memory:":
        raise InvalidInputError(f"the {role} store {text!r} is in memory: give a file path or a PostgreSQL URL")
    row = backend_for_scheme(scheme)
    if row is None or row.transfer is None:
        movable = " and ".join(b.title for b in BACKENDS if b.transfer is not None)
        raise ConfigError(f"memlane migrate copies {movable} stores, not {scheme!r} ({text!r})")
    side: TransferSide = await row.load(row.transfer)(location, role)
    return side


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
            "source": self.source,
            "target": self.target,
            "embedder": self.embedder,
            "dim": self.dim,
            "ok": self.ok,
            "problems": self.problems,
            "tables": [
                {
                    "table": t.name,
                    "source_rows": t.source_rows,
                    "target_rows": t.target_rows,
                    "copied": t.copied,
                    "resumed": t.resumed,
                    "ok": t.ok,
                }
                for t in self.tables
            ],
        }


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
    src: TransferSide,
    dst: TransferSide,
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
