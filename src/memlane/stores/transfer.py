"""Copy one long-term store into another, table by table (``memlane migrate``).

SQLite to PostgreSQL, PostgreSQL to SQLite, SQLite to SQLite, PostgreSQL to PostgreSQL: the
two schemas hold the same tables and columns (:data:`TABLES`;
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

The tables and what a backend supplies are dialect-neutral: no driver, no SQL of a backend. Each
backend's folder has a ``transfer`` module whose ``open_side(location, role)`` returns a
:class:`TransferSide` (its registry row names it), so ``memlane migrate`` copies between any two
backends that have one. (The copy was ``memlane.transfer``, beside this table list; that name
still imports.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from memlane.errors import ConfigError, ConflictError, DimensionMismatchError, InvalidInputError
from memlane.models import utcnow
from memlane.privacy.redaction import KEY_META
from memlane.registry import BACKENDS, backend_for_scheme, parse_store_url

__all__ = [
    "BINDING_KEYS",
    "FTS_COLS",
    "META_PREFIX",
    "TABLES",
    "Row",
    "Table",
    "TableReport",
    "TransferReport",
    "TransferSide",
    "keyset",
    "migrate",
]

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
    _t(
        "sessions",
        ["app", "id"],
        "app, id, user_ids, agent_id, channel, state, created_at, updated_at",
        json="user_ids state",
        times="created_at updated_at",
        fixed=True,
        rowid="sqlite",
    ),
    _t("session_users", ["app", "user_id", "session_id"], "app, session_id, user_id"),
    _t(
        "events",
        ["seq"],
        "seq, app, session_id, id, type, ts, author, content, metadata",
        json="metadata",
        times="ts",
        fixed=True,
        serial="seq",
    ),
    _t(
        "facts",
        ["rowid"],
        "rowid, id, partition, content, hash, scope, agent_id, user_id, session_id, kind, "
        "author, seq, occurred_at, formed_at, updated_at, access_count, version, source_event_ids, valid_from, "
        "invalid_at, metadata, embedding",
        json="source_event_ids metadata",
        times="occurred_at formed_at updated_at valid_from invalid_at",
        serial="rowid",
    ),
    # the further windows' vectors of long facts (issue 22), keyed by the fact's id (kept)
    _t("fact_windows", ["fact_id", "win"], "fact_id, win, partition, embedding"),
    _t("partitions", ["partition"], "partition, appends, changes"),
    _t("authors", ["partition", "author"], "partition, author"),
    _t(
        "history",
        ["id"],
        "id, fact_id, user_id, event, old_content, new_content, actor, at, effective_at",
        times="at effective_at",
        rowid="both",
    ),
    _t(
        "reflections",
        ["id"],
        "id, content, scope, agent_id, user_id, session_id, absorbed, formed_at",
        bools="absorbed",
        times="formed_at",
        rowid="both",
    ),
    _t(
        "consolidated",
        ["id"],
        "id, scope, agent_id, user_id, session_id, consolidated_content, word_limit, version, "
        "unabsorbed_ids, last_consolidated_at",
        json="unabsorbed_ids",
        times="last_consolidated_at",
    ),
    _t(
        "consolidated_versions",
        ["scope", "agent_id", "user_id", "session_id", "version"],
        "scope, agent_id, user_id, session_id, version, blob_id, content, word_limit, consolidated_at",
        times="consolidated_at",
    ),
    _t("contributors", ["user_id", "kind", "item_id"], "user_id, kind, item_id"),
    _t(
        "jobs",
        ["id"],
        "id, kind, key, user_id, status, payload, state, result, attempts, max_attempts, last_error, "
        "next_run_at, lease_until, worker, created_at, updated_at",
        json="payload state result",
        times="next_run_at lease_until created_at updated_at",
    ),
    _t(
        "formation_cursors",
        ["app", "session_id"],
        "app, session_id, user_ids, agent_id, tier, last_event_id, "
        "formed_events, pending_messages, pending_tokens, last_activity_at, last_formed_at",
        json="user_ids",
        times="last_activity_at last_formed_at",
    ),
    _t("applied_batches", ["key"], "key, user_id, at, result", json="result", times="at"),
    _t("identities", ["channel", "sender"], "channel, sender, user_id, linked_at", times="linked_at"),
    _t(
        "proposals",
        ["id"],
        "id, action, text, target_id, target_version, reason, provenance, scope, user_id, agent_id, session_id, "
        "metadata, status, created_at, reviewed_at, reviewer, result_id, result_event, edited_from",
        json="provenance metadata",
        times="created_at reviewed_at",
    ),
)

#: The keyword-index text of a fact (SQLite ``facts_fts`` columns, PostgreSQL ``facts`` columns).
FTS_COLS = ("search_text", "ctx", "date_words")

Row = dict[str, Any]


class TransferSide(Protocol):
    """One store as :func:`migrate` reads and writes it: what a backend's
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
    key = src_meta.get(KEY_META)  # hash-mode redaction's key: the copy's tokens match the new writes'
    if key is not None:
        if dst_meta.get(KEY_META, key) != key:
            raise ConflictError(
                f"the target {dst.label} keeps another hash-mode redaction key than the source: tokens of the "
                "same value would differ; copy into an empty store"
            )
        await dst.set_meta({KEY_META: key})

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
