"""One SQLite database file shared by memlane's stores: connections, a worker thread
pool, and named transactional migrations applied on open.

SQLite calls block, so every query runs on a small private thread pool (one connection
per thread, WAL mode, so readers run beside a writer); the event loop never waits on disk.
Writes use ``BEGIN IMMEDIATE`` and a generous ``busy_timeout``, so concurrent writers in
other threads or processes queue instead of failing or losing an acknowledged write.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from memlane.errors import CorruptDatabaseError, InvalidInputError, StorageError, UsageError
from memlane.stores.sqlite.migrations import MIGRATIONS

T = TypeVar("T")

#: PRAGMA application_id written into every memlane database ("MLNE").
APPLICATION_ID = 0x4D4C4E45
BUSY_TIMEOUT_MS = 60_000


def _locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def _retry_locked(fn: Callable[[], T], *, seconds: float = 30.0) -> T:
    """Run ``fn``, retrying while another connection holds a lock that SQLite reports at once
    (switching to WAL, first-time schema creation) instead of through the busy handler."""
    deadline = time.monotonic() + seconds
    delay = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _locked(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _redact(path: str) -> str:
    return path if len(path) < 200 else path[:200] + "..."


#: SQLite's primary result codes for damaged pages (SQLITE_CORRUPT) and a file that is not a
#: database (SQLITE_NOTADB).
_CORRUPT_CODES = (11, 26)


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """True when SQLite reports damaged pages or a non-database file (not a lock, I/O or
    permission problem). A full-text table whose pages are damaged fails to load: "vtable
    constructor failed"."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _CORRUPT_CODES:
        return True
    msg = str(exc)
    return "malformed" in msg or "not a database" in msg or "vtable constructor failed" in msg


def corrupt_error(path: str, exc: BaseException) -> CorruptDatabaseError:
    """The error for SQLite reporting corruption during normal operation."""
    p = _redact(path)
    return CorruptDatabaseError(
        f"{p} is damaged ({exc}). Run `memlane check --db {p}` to see what is broken, then restore the "
        "file from a backup (stop every process using it first)"
    )


def _not_a_database(exc: sqlite3.DatabaseError) -> bool:
    """True when SQLite says the bytes are not a (healthy) database, as opposed to an I/O or
    permission failure that says nothing about the file's content."""
    msg = str(exc)
    return "not a database" in msg or "malformed" in msg or "encrypted" in msg


def read_only_error(path: str) -> StorageError:
    """The error every write to a read-only database raises."""
    return StorageError(
        f"{_redact(path)}: database is read-only (the file or its filesystem is not writable); "
        "reads work, but this command needs to write. Fix the permissions or use another --db."
    )


class Database:
    """A memlane SQLite file. Open with :meth:`open`; share between stores; :meth:`close` once.

    Args:
        path: file path, or ``":memory:"`` for a private in-memory database (single
            connection, for tests).
        threads: worker threads (connections) for queries.
    """

    def __init__(self, path: str | os.PathLike[str], *, threads: int = 2) -> None:
        self.path = str(path)
        self._memory = self.path == ":memory:"
        self._threads = 1 if self._memory else max(1, threads)
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._refs = 0
        self._closed = False
        self._pid = os.getpid()
        #: True when the file (or its directory/filesystem) is not writable: the database is
        #: opened read-only, migrations are not applied and every write raises StorageError.
        self.readonly = False
        self._ro_uri = ""

    # ------------------------------------------------------------------ lifecycle
    def open_sync(self) -> Database:
        """Open (create if needed), validate the file and apply pending migrations."""
        if not self._memory:
            self._check_path()
        if not self._memory and Path(self.path).exists():
            self._check_foreign()
        conn = self.connection()
        if self.readonly:
            self._check_schema(conn)
        else:
            self._migrate(conn)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="memlane-sqlite")
        return self

    def _check_path(self) -> None:
        """Typed errors for paths SQLite reports obscurely ("disk I/O error") or not at all;
        decides whether an existing file is opened read-only."""
        if not self.path.strip():
            raise InvalidInputError("the database path is empty: give a file path (--db / MEMLANE_DB) or ':memory:'")
        path = Path(self.path)
        try:
            if path.is_dir():
                raise InvalidInputError(
                    f"{_redact(self.path)} is a directory, not a database file: "
                    f"give a file path, e.g. {_redact(str(path / 'memlane.db'))}"
                )
            if path.exists():
                writable = os.access(path, os.W_OK) and os.access(path.resolve().parent, os.W_OK)
                self._ro_uri = path.resolve().as_uri() + "?mode=ro"
                if not writable:
                    self.readonly = True
                    self._ro_uri = self._readable_uri(path.resolve())
                return
            parent = path.expanduser().resolve().parent
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot open the database {_redact(self.path)}: {exc.strerror or exc}") from exc
        if not os.access(parent, os.W_OK):
            raise StorageError(
                f"cannot create the database {_redact(self.path)}: the directory {_redact(str(parent))} "
                "is not writable (read-only filesystem or permissions)"
            )

    @staticmethod
    def _readable_uri(path: Path) -> str:
        """A read-only URI SQLite can open. A WAL database needs its ``-shm`` index, which a
        read-only directory or filesystem cannot hold: then open it ``immutable`` (nobody can
        write it either), unless un-checkpointed changes wait in its ``-wal`` file."""
        uri = path.as_uri() + "?mode=ro"
        try:
            probe = sqlite3.connect(uri, uri=True, isolation_level=None)
            try:
                probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return uri
            finally:
                probe.close()
        except sqlite3.DatabaseError as exc:
            if _not_a_database(exc):
                return uri  # _check_foreign reports it
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise StorageError(
                f"{_redact(str(path))} is read-only and its -wal file holds changes that cannot be read "
                "without write access: open it once where it is writable"
            )
        return uri + "&immutable=1"

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """A read-only database cannot be migrated: refuse one that needs it."""
        try:
            done = {r[0] for r in conn.execute("SELECT name FROM _migrations")}
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{_redact(self.path)} is read-only and not initialised: {exc}") from exc
        pending = [name for name, _ in MIGRATIONS if name not in done]
        if pending:
            raise StorageError(
                f"{_redact(self.path)} is read-only and needs {len(pending)} schema upgrade(s) "
                f"({', '.join(pending)}): open it once where it is writable"
            )

    def _check_foreign(self) -> None:
        """Refuse, without writing a byte, a file that is not a memlane database."""
        probe = sqlite3.connect(
            self._ro_uri,
            uri=True,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
        )

        def read_marker() -> tuple[int, set[str]]:
            # One read transaction, so a concurrent first open is seen whole or not at all.
            probe.execute("BEGIN")
            try:
                app = probe.execute("PRAGMA application_id").fetchone()[0]
                names = {r[0] for r in probe.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            finally:
                probe.execute("ROLLBACK")
            return int(app), names

        try:
            app_id, tables = _retry_locked(read_marker)
        except sqlite3.DatabaseError as exc:
            if not _not_a_database(exc):
                raise StorageError(f"cannot read the database {_redact(self.path)}: {exc}") from exc
            raise CorruptDatabaseError(
                f"{_redact(self.path)} is not a memlane database (or is damaged): {exc}. "
                "Point --db / MEMLANE_DB at another file."
            ) from exc
        finally:
            probe.close()
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
            raise CorruptDatabaseError(
                f"{_redact(self.path)} is an SQLite database of another application "
                "(foreign tables, no memlane marker); memlane will not touch it. Use another file."
            )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        try:
            _retry_locked(lambda: self._migrate_once(conn))
        except sqlite3.DatabaseError as exc:
            if is_corruption(exc):
                raise corrupt_error(self.path, exc) from exc
            raise

    def _migrate_once(self, conn: sqlite3.Connection) -> None:
        with self.write(conn) as c:
            c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            c.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
            done = {r[0] for r in c.execute("SELECT name FROM _migrations")}
            for name, statements in MIGRATIONS:
                if name in done:
                    continue
                for step in statements:
                    if callable(step):
                        step(c)
                    else:
                        c.execute(step)
                c.execute("INSERT INTO _migrations VALUES (?, datetime('now'))", (name,))

    def applied_migrations(self) -> list[str]:
        """Names of the migrations applied to this file, in order."""
        return [r[0] for r in self.connection().execute("SELECT name FROM _migrations ORDER BY rowid")]

    def close_sync(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        with self._conns_lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()

    def acquire(self) -> Database:
        """Take a reference (stores sharing one Database call this; the last release closes)."""
        self._refs += 1
        return self

    def release_sync(self) -> None:
        self._refs -= 1
        if self._refs <= 0:
            self.close_sync()

    async def release(self) -> None:
        """:meth:`release_sync` from the event loop: the closing itself (the worker threads
        joined, the connections closed, the last one checkpointing the WAL) runs in a worker
        thread, not on the loop."""
        self._refs -= 1
        if self._refs <= 0:
            await asyncio.to_thread(self.close_sync)

    # ------------------------------------------------------------------ connections
    def connection(self) -> sqlite3.Connection:
        """This thread's connection (created on first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._memory and self._conns:
            return self._conns[0]
        target = self._ro_uri if self.readonly else self.path
        try:
            conn = sqlite3.connect(
                target, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False, uri=self.readonly
            )
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"cannot open the database {_redact(self.path)}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not self._memory and not self.readonly:
                mode = _retry_locked(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
                if str(mode).lower() != "wal":  # pragma: no cover - odd filesystems
                    raise StorageError(f"could not enable WAL on {self.path} (got {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("PRAGMA cache_size = -65536")
            # Deleted and overwritten content is zeroed, not left in free space: forget(user)
            # must remove the bytes, including copies an earlier update left behind (cost: noise).
            conn.execute("PRAGMA secure_delete = ON")
        except sqlite3.DatabaseError as exc:
            conn.close()
            if not _not_a_database(exc):  # I/O, permissions, a read-only filesystem: not the content
                raise StorageError(f"cannot open the database {_redact(self.path)}: {exc}") from exc
            raise CorruptDatabaseError(
                f"{_redact(self.path)} is not a memlane database (or is damaged): {exc}. "
                "Point --db / MEMLANE_DB at another file."
            ) from exc
        self._local.conn = conn
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    @contextmanager
    def write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on success, rolled back on error."""
        if self.readonly:
            raise read_only_error(self.path)
        c = conn or self.connection()
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            if c.in_transaction:  # SQLite may already have rolled back (corruption, full disk)
                c.execute("ROLLBACK")
            raise
        else:
            c.execute("COMMIT")

    # ------------------------------------------------------------------ health
    def check_sync(self, *, max_problems: int = 100) -> list[str]:
        """Problems found by SQLite's ``PRAGMA integrity_check`` (every page, index and
        constraint) and by each FTS5 index's ``integrity-check`` (index vs. stored text);
        empty when the database is healthy. Reads only."""
        problems: list[str] = []
        try:
            conn = self.connection()
            rows = conn.execute(f"PRAGMA integrity_check({int(max_problems)})").fetchall()
        except (sqlite3.DatabaseError, CorruptDatabaseError) as exc:
            return [f"integrity check: {exc}"]
        for (line,) in rows:
            problems += [p for p in str(line).splitlines() if p.strip() and p != "ok" and not p.startswith("***")]
        try:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'"
                )
            ]
        except sqlite3.DatabaseError as exc:
            return [*problems, f"schema: {exc}"]
        for name in tables:
            quoted = '"' + name.replace('"', '""') + '"'
            try:
                conn.execute(f"INSERT INTO {quoted}({quoted}) VALUES('integrity-check')")
            except sqlite3.DatabaseError as exc:
                if "readonly" in str(exc):  # a read-only file: the FTS check needs a write statement
                    continue
                problems.append(f"full-text index {name}: {exc}")
        try:  # window vectors of long facts (issue 22) whose fact is gone
            stray = conn.execute(
                "SELECT count(*) FROM fact_windows w WHERE NOT EXISTS (SELECT 1 FROM facts f WHERE f.id = w.fact_id)"
            ).fetchone()[0]
        except sqlite3.DatabaseError as exc:
            problems.append(f"fact_windows: {exc}")
        else:
            if stray:
                problems.append(f"{stray} window vector(s) of fact_windows belong to no fact")
        return problems[:max_problems]

    async def check(self) -> list[str]:
        """:meth:`check_sync` on a worker thread."""
        if self._executor is None or self._closed:
            raise StorageError("the database is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.check_sync)

    # ------------------------------------------------------------------ async bridge
    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on a worker thread; map SQLite errors to StorageError."""
        if self._executor is None or self._closed:
            raise StorageError("the database is closed")
        if os.getpid() != self._pid:  # SQLite connections must not cross fork()
            raise UsageError(
                f"this database was opened in process {self._pid}; open a new AsyncMemory / Memory after fork"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return fn(self.connection())
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.IntegrityError):
                raise StorageError(f"constraint failed: {exc}") from exc
            msg = str(exc)
            if "readonly database" in msg:
                raise read_only_error(self.path) from exc
            if is_corruption(exc):  # damaged pages met during normal operation
                raise corrupt_error(self.path, exc) from exc
            raise StorageError(f"database error on {_redact(self.path)}: {msg}") from exc
