"""Local PostgreSQL (with pgvector) and Redis servers, for tests, benchmarks and for trying the
scale-out deployment on one machine.

PostgreSQL comes from the ``pgserver`` wheel (PostgreSQL 16 with pgvector inside; ``pip install
'memlane[devserver]'``). Its server refuses to run as root, so as root it is run as the
``postgres`` user (or ``nobody``) with ``runuser``; when that user cannot reach the wheel's
binaries (a checkout or virtualenv inside a folder only root can enter, such as ``mktemp -d``),
they are copied once to ``/var/tmp/memlane-pgserver-<version>-<digest>/`` and run from there.
Redis is found at ``127.0.0.1:6379`` or started from a ``redis-server`` binary on a free port.

    python -m memlane.devserver postgres ./pgdata    # prints postgresql://... ; stays up
    python -m memlane.devserver redis                 # prints redis://...
    python -m memlane.devserver stop ./pgdata

Production deployments point memlane at their own PostgreSQL (with the ``vector`` extension)
and Redis; nothing here is used at run time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from memlane.errors import ConfigError

__all__ = ["PostgresServer", "RedisServer", "find_or_start_redis", "free_port", "start_postgres"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_install() -> Path:
    """The ``pginstall`` folder of the installed pgserver wheel (bin/, lib/, share/)."""
    import importlib.util

    # Found, not imported: importing pgserver creates platformdirs folders and warns.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "a local PostgreSQL with pgvector needs the pgserver wheel: pip install 'memlane[devserver]' "
            "(or point memlane at your own PostgreSQL with the vector extension)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


#: Where a copy of pgserver's binaries is kept when the server's user cannot reach the wheel's.
PG_COPY_PARENT = Path("/var/tmp")


def _pg_bin() -> Path:
    """The folder of the PostgreSQL binaries the server's user can run.

    As root the server runs as ``postgres`` (or ``nobody``), which cannot execute the wheel's
    binaries when a folder above them is closed to it (a checkout or virtualenv in a ``0700``
    folder, e.g. ``mktemp -d``): then a copy made for it is used (:func:`_reachable_copy`).
    """
    install = _pg_install()
    prefix = _run_as()
    if not prefix or _can_execute(prefix, install / "bin" / "postgres"):
        return install / "bin"
    return _reachable_copy(install, prefix) / "bin"


def _can_execute(prefix: list[str], binary: Path) -> bool:
    """Whether the user of ``prefix`` (``runuser -u USER --``) may execute ``binary``."""
    test = shutil.which("test") or "/usr/bin/test"
    try:
        return subprocess.run([*prefix, test, "-x", str(binary)], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _copy_key(install: Path) -> str:
    """A name for the copy of ``install``: pgserver's version and a digest of its file list."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("pgserver")
    except PackageNotFoundError:  # pragma: no cover - found by find_spec, so installed
        ver = "unknown"
    digest = hashlib.sha256()
    for p in sorted(install.rglob("*")):
        if p.is_file() and not p.is_symlink():
            digest.update(f"{p.relative_to(install)}\0{p.stat().st_size}\0".encode())
    return f"memlane-pgserver-{ver}-{digest.hexdigest()[:12]}"


def _trusted_copy(path: Path) -> bool:
    """``path`` is a real folder of ours that nobody else can write (it holds what we run)."""
    st = path.lstat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _reachable_copy(install: Path, prefix: list[str]) -> Path:
    """A copy of ``install`` the server's user can run, kept in :data:`PG_COPY_PARENT` and reused.

    The wheel's libraries are found relative to the binaries (``$ORIGIN/../../../pgserver.libs``),
    so the copy keeps the wheel's layout: ``<copy>/pgserver/pginstall`` and ``<copy>/pgserver.libs``.
    It is made in a temporary folder and renamed into place (concurrent starts agree on one), and
    reused only when owned by this user and writable by nobody else.

    Raises:
        ConfigError: the copy could not be made or reused, or its binaries still cannot be run.
    """
    user = prefix[2]
    parent = PG_COPY_PARENT
    final = parent / _copy_key(install)
    what_to_do = (
        f"PostgreSQL runs as user {user!r}, which cannot reach {install} (a folder above it is closed to "
        f"it, e.g. a checkout in a 0700 folder); memlane runs a copy of the binaries from {parent} instead"
    )
    try:
        if not final.exists():
            staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=parent))
            try:
                shutil.copytree(install, staging / "pgserver" / "pginstall", symlinks=True)
                libs = install.parent.parent / "pgserver.libs"
                if libs.is_dir():
                    shutil.copytree(libs, staging / "pgserver.libs", symlinks=True)
                for p in [staging, *staging.rglob("*")]:
                    if not p.is_symlink():  # readable (and folders enterable) by all, writable by us only
                        mode = p.stat().st_mode
                        os.chmod(p, (mode | 0o444 | (0o111 if stat.S_ISDIR(mode) or mode & 0o100 else 0)) & ~0o022)
                try:
                    staging.rename(final)
                except OSError:  # another process put its copy in place first
                    if not final.is_dir():
                        raise
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise ConfigError(
            f"{what_to_do}, but the copy failed ({exc}). Make the folders above {install} enterable by "
            f"{user!r} (chmod o+x), or run as a user other than root."
        ) from exc
    if not _trusted_copy(final):
        raise ConfigError(
            f"{what_to_do}, but {final} is not a folder owned by uid {os.geteuid()} and writable by it only; "
            "remove it and retry."
        )
    copy = final / "pgserver" / "pginstall"
    if not _can_execute(prefix, copy / "bin" / "postgres"):
        raise ConfigError(
            f"{what_to_do}, but {user!r} cannot run {copy / 'bin' / 'postgres'} either. Make the folders "
            f"above {install} enterable by {user!r} (chmod o+x), or run as a user other than root."
        )
    return copy


def _run_as() -> list[str]:
    """A prefix running a command as a non-root user when we are root (postgres refuses root)."""
    if os.geteuid() != 0:
        return []
    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return ["runuser", "-u", user, "--"]
    raise ConfigError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


def _chown_for_server(path: Path) -> None:
    if os.geteuid() != 0:
        return
    prefix = _run_as()
    entry = pwd.getpwnam(prefix[2])
    for p in [path, *path.rglob("*")]:
        os.chown(p, entry.pw_uid, entry.pw_gid)
    # the server user must be able to reach the folder
    parent = path.parent
    while parent != parent.parent:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            with contextlib.suppress(PermissionError):
                os.chmod(parent, mode | 0o011)
        parent = parent.parent


@dataclass
class PostgresServer:
    """A PostgreSQL server this process started (or found running) in ``data_dir``."""

    data_dir: Path
    port: int
    url: str
    started: bool = True
    _bin: Path = field(default_factory=_pg_bin, repr=False)

    def stop(self) -> None:
        """Stop the server (fast shutdown); a no-op when it was already running before."""
        if not self.started:
            return
        subprocess.run(
            [*_run_as(), str(self._bin / "pg_ctl"), "-D", str(self.data_dir / "data"), "-m", "fast", "-w", "stop"],
            check=False,
            capture_output=True,
            timeout=60,
        )


def _running_port(data: Path) -> int | None:
    pid_file = data / "postmaster.pid"
    if not pid_file.exists():
        return None
    lines = pid_file.read_text().splitlines()
    try:
        pid, port = int(lines[0]), int(lines[3])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError, PermissionError):
        return None
    return port


def start_postgres(
    data_dir: str | os.PathLike[str], *, port: int | None = None, database: str = "postgres"
) -> PostgresServer:
    """Start (initialising on first use) a PostgreSQL 16 + pgvector server whose files live in
    ``data_dir``, listening on 127.0.0.1 (trust authentication: for tests and trials only).
    When the server of ``data_dir`` is already running it is reused (``started=False``).

    Raises:
        ConfigError: pgserver is not installed, or the server did not start (its log is quoted).
    """
    bin_dir = _pg_bin()
    root = Path(data_dir).resolve()
    data = root / "data"
    running = _running_port(data)
    if running is not None:
        return PostgresServer(root, running, f"postgresql://postgres@127.0.0.1:{running}/{database}", started=False)
    root.mkdir(parents=True, exist_ok=True)
    _chown_for_server(root)
    prefix = _run_as()
    if not (data / "PG_VERSION").exists():
        init = subprocess.run(
            [
                *prefix,
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-instructions",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if init.returncode != 0:
            raise ConfigError(f"initdb failed in {data}: {init.stderr.strip() or init.stdout.strip()}")
    port = port or free_port()
    log = root / "server.log"
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off"
    start = subprocess.run(
        [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(log), "-w", "-t", "120", "start"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if start.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else start.stderr
        raise ConfigError(f"PostgreSQL did not start in {data}: {tail.strip()}")
    return PostgresServer(root, port, f"postgresql://postgres@127.0.0.1:{port}/{database}", _bin=bin_dir)


@dataclass
class RedisServer:
    """A Redis server found at ``url`` or started by this process (``process`` set)."""

    url: str
    process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)


def _redis_up(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def find_or_start_redis(url: str = "redis://127.0.0.1:6379/0") -> RedisServer:
    """The Redis at ``url`` when it answers PING, else a ``redis-server`` started on a free
    loopback port (kept in memory only).

    Raises:
        ConfigError: nothing answers at ``url`` and no ``redis-server`` binary is installed.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if _redis_up(parts.hostname or "127.0.0.1", parts.port or 6379):
        return RedisServer(url)
    binary = shutil.which("redis-server")
    if binary is None:
        raise ConfigError(f"no Redis answers at {url} and redis-server is not installed (apt install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not _redis_up("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise ConfigError(f"redis-server did not start on port {port}")
        time.sleep(0.05)
    return RedisServer(f"redis://127.0.0.1:{port}/0", proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m memlane.devserver",
        description="Start a local PostgreSQL + pgvector (from the pgserver wheel) or find/start Redis, "
        "and print its URL. For tests and trials; production uses your own servers.",
    )
    sub = parser.add_subparsers(dest="what", required=True)
    pg = sub.add_parser("postgres", help="start PostgreSQL 16 + pgvector with its files in DIR; print its URL")
    pg.add_argument("dir", nargs="?", default=".memlane-pg")
    pg.add_argument("--port", type=int, default=None)
    stop = sub.add_parser("stop", help="stop the PostgreSQL whose files are in DIR")
    stop.add_argument("dir", nargs="?", default=".memlane-pg")
    rd = sub.add_parser("redis", help="print the URL of a Redis at 127.0.0.1:6379 (or start one)")
    rd.add_argument("--url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args(argv)
    try:
        if args.what == "postgres":
            print(start_postgres(args.dir, port=args.port).url)
        elif args.what == "stop":
            data = Path(args.dir).resolve()
            port = _running_port(data / "data")
            if port is None:
                print(f"no PostgreSQL is running in {data}", file=sys.stderr)
                return 1
            PostgresServer(data, port, "").stop()
        else:
            server = find_or_start_redis(args.url)
            print(server.url)
            if server.process is not None:  # keep it up until interrupted
                with contextlib.suppress(KeyboardInterrupt):
                    server.process.wait()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
