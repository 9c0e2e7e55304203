"""memlane.devserver's PostgreSQL wherever the checkout is: as root the server runs as another
user, which cannot run the wheel's binaries inside a folder only root can enter (``mktemp -d``)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memlane import devserver
from memlane.errors import ConfigError

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None, reason="the server runs as another user only as root"
)


@pytest.fixture(scope="module")
def wheel() -> Path:
    try:
        return devserver._pg_install()
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def private_wheel(wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The wheel's files as a checkout in a 0700 folder has them: pgserver/pginstall beside pgserver.libs."""
    private = tmp_path / "private"
    site = private / "venv" / "site-packages"
    shutil.copytree(wheel, site / "pgserver" / "pginstall", symlinks=True)
    libs = wheel.parent.parent / "pgserver.libs"
    if libs.is_dir():
        shutil.copytree(libs, site / "pgserver.libs", symlinks=True)
    private.chmod(0o700)
    install = site / "pgserver" / "pginstall"
    monkeypatch.setattr(devserver, "_pg_install", lambda: install)
    return install


@pytest.fixture
def copy_parent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder every user can enter, standing for /var/tmp (tmp_path's parents are 0700)."""
    parent = Path(tempfile.mkdtemp(prefix="memlane-test-pgcopy-"))
    parent.chmod(0o755)
    monkeypatch.setattr(devserver, "PG_COPY_PARENT", parent)
    try:
        yield parent
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_server_starts_from_a_checkout_only_root_can_enter(
    private_wheel: Path, copy_parent: Path, tmp_path: Path
) -> None:
    import psycopg

    prefix = devserver._run_as()
    assert prefix and not devserver._can_execute(prefix, private_wheel / "bin" / "postgres")
    bin_dir = devserver._pg_bin()
    assert bin_dir.is_relative_to(copy_parent) and bin_dir.parent.name == "pginstall"
    assert devserver._can_execute(prefix, bin_dir / "initdb")
    assert devserver._pg_bin() == bin_dir  # reused, not copied again
    assert [p.name for p in copy_parent.iterdir()] == [bin_dir.parent.parent.parent.name]  # no staging left
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o700  # the private folder stays private

    server = devserver.start_postgres(tmp_path / "pg")
    try:
        assert server._bin == bin_dir
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # pgvector's library, from the copy
            row = conn.execute("SELECT '[1,2]'::vector <-> '[1,3]'::vector").fetchone()
            assert row is not None and row[0] == 1.0
    finally:
        server.stop()


def test_a_copy_others_can_write_is_refused(private_wheel: Path, copy_parent: Path) -> None:
    final = copy_parent / devserver._copy_key(private_wheel)
    final.mkdir()
    final.chmod(0o777)
    final.chmod(final.stat().st_mode & ~stat.S_ISVTX)
    with pytest.raises(ConfigError, match="writable by it only; remove it"):
        devserver._pg_bin()


def test_a_copy_that_cannot_be_made_says_what_to_do(
    private_wheel: Path, copy_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devserver, "PG_COPY_PARENT", copy_parent / "missing")
    with pytest.raises(ConfigError, match=r"cannot reach .*copy failed.*chmod o\+x"):
        devserver.start_postgres(copy_parent / "pg")
    assert not (copy_parent / "pg").exists()  # nothing made
