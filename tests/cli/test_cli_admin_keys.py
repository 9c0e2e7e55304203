"""``memlane keys create --admin``: an admin key (any tenant with ``X-Memlane-Tenant``), shown by
``keys list``; an admin key bound to a user is one error line that creates nothing; keys files
written before admin keys existed keep working (their keys are not admin)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import one_line_error, run
from memlane.errors import InvalidInputError
from memlane.service.keys import KeyStore


def test_keys_create_admin_and_list_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "keys.db")
    code, out, _ = run(capsys, "keys", "create", "--keys-file", path, "--tenant", "ops", "--admin")
    assert code == 0 and "admin" in out.splitlines()[0]
    secret = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("key: "))
    with KeyStore(path) as store:
        key = store.verify(secret)
    assert key is not None and key.admin and key.tenant == "ops" and key.user_id is None
    code, out, _ = run(capsys, "keys", "create", "--keys-file", path, "--tenant", "ops")
    plain = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("key: "))
    code, out, _ = run(capsys, "keys", "list", "--keys-file", path)
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "admin" in rows[key.id]
    assert "admin" not in rows[plain.split("_")[1]]
    code, out, _ = run(capsys, "keys", "list", "--keys-file", path, "--json")
    assert {r["id"]: r["admin"] for r in json.loads(out)} == {key.id: True, plain.split("_")[1]: False}


def test_an_admin_key_cannot_be_user_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "keys.db")
    code, out, err = run(capsys, "keys", "create", "--keys-file", path, "--tenant", "ops", "--admin", "--user", "u")
    assert code == 2 and out == ""
    assert "admin key cannot be bound to a user" in one_line_error(err)
    with KeyStore(path) as store:
        assert store.list() == []
        with pytest.raises(InvalidInputError):
            store.create("ops", admin=True, user_id="u")
        with pytest.raises(InvalidInputError):
            store.create("ops", admin="yes")  # type: ignore[arg-type]
        assert store.list() == []


def test_a_keys_file_from_before_admin_keys_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "old-keys.db"
    with KeyStore(path) as store:
        old = store.create("acme", user_id="alice", read_only=True)
    conn = sqlite3.connect(path)  # the file as memlane wrote it before: no admin column
    conn.execute("ALTER TABLE api_keys DROP COLUMN admin")
    conn.commit()
    assert "admin" not in {r[1] for r in conn.execute("PRAGMA table_info(api_keys)")}
    conn.close()
    with KeyStore(path, create=False) as store:  # as a server opens it
        key = store.verify(old.secret)
        assert key is not None and not key.admin and (key.tenant, key.user_id, key.read_only) == ("acme", "alice", True)
        admin = store.create("ops", admin=True)
        assert [k.admin for k in store.list()] == [False, True]
        assert store.verify(admin.secret) is not None
