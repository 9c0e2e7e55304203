"""API keys for the memlane service, stored hashed in a SQLite file of their own.

A key is ``ml_<key id>_<secret>``: the key id is public (``memlane keys list`` shows it, the
server logs it), the secret is 32 random bytes shown once by ``memlane keys create`` and never
stored. The file keeps ``sha256(key)`` only; a presented key is looked up by its id and its
hash compared in constant time. (A plain hash suits a 256-bit random secret: there is nothing
to brute-force; password hashes such as scrypt exist for low-entropy human passwords.)

Each key is bound to a tenant (the app: one store of its own), optionally to one user and to
read-only. An *admin* key (never user-bound) may also act in any other tenant: the service
lets it name one with the ``X-Memlane-Tenant`` header and list the tenants. Revoking a key
keeps its row (``revoked_at``), so the id is never reused and a revoked key stays refused.

The keys file is tenant-independent: the settings' ``server.keys_file`` (``$MEMLANE_KEYS_FILE``),
by default ``<data dir>/keys.db``. This module needs only the standard library, so the CLI can
manage keys without the ``server`` extra.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memlane import inputs
from memlane.errors import InvalidInputError, NotFoundError, StorageError

__all__ = ["ApiKey", "KeyStore", "NewKey", "check_host", "default_keys_path", "is_loopback"]

#: Prefix of every memlane API key.
KEY_PREFIX = "ml"
#: Longest key name accepted (characters).
MAX_NAME_CHARS = 200
#: ``last_used_at`` is written at most this often per key (a write per request would cost more
#: than the request).
LAST_USED_EVERY = timedelta(seconds=60)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id            TEXT PRIMARY KEY,
    hash          TEXT NOT NULL,
    tenant        TEXT NOT NULL,
    user_id       TEXT,
    read_only     INTEGER NOT NULL DEFAULT 0,
    name          TEXT,
    created_at    TEXT NOT NULL,
    last_used_at  TEXT,
    revoked_at    TEXT,
    admin         INTEGER NOT NULL DEFAULT 0
);
"""
#: Added to keys files written before admin keys existed (their keys are not admin).
_ADD_ADMIN = "ALTER TABLE api_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 0"
_COLUMNS = "id, hash, tenant, user_id, read_only, name, created_at, last_used_at, revoked_at, admin"


def default_keys_path() -> str:
    """``$MEMLANE_KEYS_FILE`` if set, else ``<data dir>/keys.db`` (next to the default store).
    The server and the CLI use the settings' ``server.keys_file``, whose default this is."""
    from memlane.config import default_data_dir

    return os.environ.get("MEMLANE_KEYS_FILE") or str(default_data_dir() / "keys.db")


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One key's public record (never its secret or hash).

    Attributes:
        id: the public key id (the ``<id>`` in ``ml_<id>_<secret>``).
        tenant: the app the key is bound to.
        user_id: the one user it may act for (None: any user of the tenant).
        read_only: the key may not write.
        name: a label for people.
        created_at, last_used_at, revoked_at: UTC times (last_used_at is updated at most once a
            minute; revoked_at None while the key is live).
        admin: the key may also act in other tenants (``X-Memlane-Tenant``) and list them;
            never user-bound.
    """

    id: str
    tenant: str
    user_id: str | None
    read_only: bool
    name: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    admin: bool = False

    @property
    def revoked(self) -> bool:
        """True once the key has been revoked."""
        return self.revoked_at is not None


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just created: :attr:`secret` is the whole key to hand out; it is not stored and
    cannot be shown again."""

    key: ApiKey
    secret: str

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"NewKey(key={self.key!r}, secret='ml_{self.key.id}_***')"


class KeyStore:
    """The API keys of a memlane server, in the SQLite file ``path``.

    Safe to share between threads; several processes may use one file (the CLI creating or
    revoking keys while a server runs): every call looks at the file first (one ``stat``), so
    it sees the file's latest committed state, a file created after the store was opened, and
    a file replaced by another one (it reopens it).

    Fail closed: once the store has seen a key (:meth:`configured`), a keys file that is then
    missing, unreadable or not a keys database makes every call raise
    :class:`~memlane.errors.StorageError` (the server answers 503): it never falls back to
    serving without keys. Only a file that never held a key means "no keys".

    Args:
        path: the keys file.
        create: create the file (readable by its owner only) when it is missing: what the
            ``memlane keys`` commands do. A server passes False: a missing file means no keys
            (yet), and the server creates nothing.

    Raises:
        StorageError: the file exists but is not a usable keys database.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path)
        self._create = create
        self._conn: sqlite3.Connection | None = None
        self._ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the open file
        self._lock = threading.Lock()
        self._closed = False
        self._configured = False  # once a key exists it always does (rows are never deleted)
        with self._lock:
            self._refresh()

    def _open(self) -> None:
        """Open the file (creating it if ``create``); sets the connection and the file's identity."""
        try:
            if self._create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fresh = not self.path.exists()
                conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                if fresh and os.name == "posix":
                    with contextlib.suppress(OSError):
                        os.chmod(self.path, 0o600)
            else:  # never create it: a file removed since the stat is "missing", not a new empty file
                uri = f"{self.path.absolute().as_uri()}?mode=rw"
                conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            try:
                conn.execute("PRAGMA busy_timeout = 5000")
                conn.executescript(_SCHEMA)
                _add_admin_column(conn)
                stat = os.stat(self.path)
            except BaseException:
                conn.close()
                raise
        except (sqlite3.DatabaseError, OSError) as exc:
            raise StorageError(f"cannot open the API keys file {str(self.path)!r}: {exc}") from exc
        self._conn = conn
        self._ident = (stat.st_dev, stat.st_ino)

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None
        self._ident = None

    def _refresh(self) -> sqlite3.Connection | None:
        """The connection to the file as it is now (lock held): opened when the file appeared,
        reopened when it was replaced; None when there is no file and no key was ever seen.

        Raises:
            StorageError: a key was seen and the file is now missing or unusable; or the file
                exists but cannot be opened as a keys database.
        """
        if self._closed:
            raise StorageError("the API keys file is closed")
        try:
            stat: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            stat = None
        except OSError as exc:
            self._drop()
            raise StorageError(f"cannot read the API keys file {str(self.path)!r}: {exc}") from exc
        if stat is None:
            self._drop()
            if self._configured:
                raise StorageError(
                    f"the API keys file {str(self.path)!r} is gone: every request is refused until it is restored"
                )
            if not self._create:
                return None
            self._open()
        elif (stat.st_dev, stat.st_ino) != self._ident:
            self._drop()
            self._open()
        return self._conn

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._drop()

    def __enter__(self) -> KeyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection | None]:
        """The connection to the file's current state under the lock (None: no file yet and
        none is created)."""
        with self._lock:
            conn = self._refresh()
            try:
                yield conn
            except sqlite3.DatabaseError as exc:
                raise StorageError(f"the API keys file {str(self.path)!r} failed: {exc}") from exc

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._db() as db:
            if db is None:
                raise StorageError(f"the API keys file {str(self.path)!r} does not exist")
            yield db

    # ----------------------------------------------------------------- keys

    def create(
        self,
        tenant: str,
        *,
        user_id: str | None = None,
        read_only: bool = False,
        name: str | None = None,
        admin: bool = False,
    ) -> NewKey:
        """Create a key bound to ``tenant`` (and to ``user_id`` / read-only when given).

        Args:
            admin: an admin key: it may also act in any other tenant (the service's
                ``X-Memlane-Tenant`` header) and list the tenants. A read-only admin key stays
                read-only in every tenant. Not with ``user_id``.

        Returns:
            the new key; its :attr:`NewKey.secret` is shown once and never stored.

        Raises:
            ScopeError: ``tenant`` or ``user_id`` is blank, too long or not a string.
            InvalidInputError: ``name`` is not a string or longer than 200 characters, or
                ``admin`` with ``user_id`` (an admin key acts for every user).
        """
        tenant = inputs.identifier(tenant, "tenant")
        user_id = inputs.optional_id(user_id, "user_id")
        read_only = inputs.flag(read_only, "read_only")
        admin = inputs.flag(admin, "admin")
        if admin and user_id is not None:
            raise InvalidInputError(
                "an admin key cannot be bound to a user: an admin key acts for every user of every tenant "
                "(leave out the user, or create a user-bound key without admin)"
            )
        if name is not None:
            if not isinstance(name, str):
                raise InvalidInputError(f"name must be a string, got {inputs.show(name)}")
            if len(name) > MAX_NAME_CHARS:
                raise InvalidInputError(f"name has {len(name)} characters; the limit is {MAX_NAME_CHARS}")
        key_id = secrets.token_hex(8)
        secret = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        created = _now()
        with self._write() as db:
            db.execute(
                f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
                (key_id, _hash(secret), tenant, user_id, int(read_only), name, created.isoformat(), int(admin)),
            )
            self._configured = True
        record = ApiKey(key_id, tenant, user_id, read_only, name, created, None, None, admin)
        return NewKey(record, secret)

    def list(self, *, tenant: str | None = None, include_revoked: bool = True) -> list[ApiKey]:
        """Every key (oldest first), optionally of one tenant and without the revoked ones."""
        sql = f"SELECT {_COLUMNS} FROM api_keys"
        where: list[str] = []
        args: list[object] = []
        if tenant is not None:
            where.append("tenant = ?")
            args.append(inputs.identifier(tenant, "tenant"))
        if not include_revoked:
            where.append("revoked_at IS NULL")
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._db() as db:
            rows = [] if db is None else db.execute(sql + " ORDER BY created_at, id", args).fetchall()
        return [self._record(row) for row in rows]

    def get(self, key_id: str) -> ApiKey:
        """The key ``key_id``.

        Raises:
            NotFoundError: no such key.
        """
        key_id = inputs.identifier(key_id, "key_id", error=InvalidInputError)
        with self._db() as db:
            row = (
                None
                if db is None
                else db.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            )
        if row is None:
            raise NotFoundError(f"no API key {key_id!r} (see memlane keys list)")
        return self._record(row)

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke ``key_id``: every later request with it is refused (401). Revoking a revoked
        key is a no-op.

        Raises:
            NotFoundError: no such key.
        """
        key_id = inputs.identifier(key_id, "key_id", error=InvalidInputError)
        with self._db() as db:
            if db is None:
                raise NotFoundError(f"no API key {key_id!r}: the keys file {str(self.path)!r} does not exist")
            db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (_now().isoformat(), key_id)
            )
        return self.get(key_id)

    def configured(self) -> bool:
        """True when any key was ever created (even if all are revoked now): the server then
        requires a key on every request. Looks at the file each time (a key created by another
        process counts at once); once True it stays True.

        Raises:
            StorageError: keys were seen and the file is now missing or unusable, or the file
                exists but is not a usable keys database (fail closed: never "no keys").
        """
        with self._db() as db:
            if not self._configured and db is not None:
                self._configured = db.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone() is not None
        return self._configured

    @property
    def known_configured(self) -> bool:
        """True once :meth:`configured` has seen a key (no file access: it cannot turn false;
        the file itself is checked by :meth:`verify`)."""
        return self._configured

    def verify(self, presented: str) -> ApiKey | None:
        """The live key ``presented`` is, or None (malformed, unknown, wrong secret, revoked).

        The hash is compared in constant time; ``last_used_at`` is refreshed at most once a
        minute.

        Raises:
            StorageError: keys were seen and the file is now missing or unusable (the caller
                refuses the request: 503).
        """
        parts = presented.split("_", 2)
        if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or len(presented) > 200:
            return None
        digest = _hash(presented)
        with self._db() as db:
            if db is None:
                return None
            row = db.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", (parts[1],)).fetchone()
            if row is None or not hmac.compare_digest(str(row[1]), digest):
                return None
            record = self._record(row)
            if record.revoked:
                return None
            now = _now()
            if record.last_used_at is None or now - record.last_used_at >= LAST_USED_EVERY:
                with contextlib.suppress(sqlite3.OperationalError):  # busy: try again next time
                    db.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (now.isoformat(), record.id))
        return record

    @staticmethod
    def _record(row: tuple[object, ...]) -> ApiKey:
        key_id, _digest, tenant, user_id, read_only, name, created, used, revoked, admin = row
        return ApiKey(
            id=str(key_id),
            tenant=str(tenant),
            user_id=None if user_id is None else str(user_id),
            read_only=bool(read_only),
            name=None if name is None else str(name),
            created_at=datetime.fromisoformat(str(created)),
            last_used_at=_time(None if used is None else str(used)),
            revoked_at=_time(None if revoked is None else str(revoked)),
            admin=bool(admin),
        )


def _add_admin_column(conn: sqlite3.Connection) -> None:
    """Give a keys file written before admin keys existed its ``admin`` column (its keys are
    not admin). Another process adding it at the same moment is fine."""
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(api_keys)")}
    if "admin" in columns:
        return
    try:
        conn.execute(_ADD_ADMIN)
    except sqlite3.OperationalError:
        columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(api_keys)")}
        if "admin" not in columns:
            raise


# --------------------------------------------------------------------------- the loopback rule


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, *, keys: bool, what: str = "memlane serve") -> None:
    """Without API keys a server (``memlane serve``, ``memlane mcp``) binds loopback only.

    Raises:
        ConfigError: a non-loopback ``host`` and no keys.
    """
    from memlane.errors import ConfigError

    if not keys and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve on {host}: no API keys are configured, so {what} binds to loopback only "
            "(127.0.0.1); create a key first (memlane keys create --tenant APP) to serve other hosts"
        )
