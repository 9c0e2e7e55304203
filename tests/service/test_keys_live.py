"""API keys fail closed on a live server (issue 17, section 2).

A real ``memlane serve`` (and ``memlane mcp --transport http``) process is started with
``MEMLANE_KEYS_FILE`` naming a file that does not exist yet; keys are then created and revoked
by other processes (``memlane keys create/revoke``), and the whole bypass matrix runs against
the running server: no key, a wrong key, another tenant's key, a read-only key writing, a
user-bound key reading another user. Each must be refused from the next request on, without a
restart. A keys file that disappears or goes bad refuses every request (503), never serves
everyone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ENGINE_ARGS = ["--embedder", "hash", "--llm", "offline"]
WRONG_KEY = "ml_deadbeefdeadbeef_wrongsecret"


def _env(tmp: Path, keys_file: Path) -> dict[str, str]:
    return {
        "MEMLANE_KEYS_FILE": str(keys_file),
        "XDG_DATA_HOME": str(tmp / "xdg"),
        "MEMLANE_CONFIG": "",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Live:
    url: str
    tmp: Path
    keys_file: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def cli(self, *args: str) -> str:
        """Run ``memlane ARGS`` in another process against this server's keys file."""
        done = subprocess.run(
            [sys.executable, "-m", "memlane.cli.main", *args],
            env=_env(self.tmp, self.keys_file),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def create_key(self, tenant: str, *extra: str) -> dict[str, str]:
        made: dict[str, str] = json.loads(self.cli("keys", "create", "--tenant", tenant, "--json", *extra))
        return made


def _start(tmp: Path, command: list[str], keys_file: Path, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"server-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memlane.cli.main", *command],
            env=_env(tmp, keys_file),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 90  # readiness wait, not a timing assertion
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, log
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"the server did not start: {log.read_text()}") from None
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def live_http(tmp_path: Path) -> Iterator[Live]:
    """``memlane serve`` with ``MEMLANE_KEYS_FILE`` naming a file that does not exist yet."""
    keys_file = tmp_path / "keys.db"
    port = _free_port()
    command = [
        "serve",
        "--port",
        str(port),
        "--db",
        str(tmp_path / "default.db"),
        "--tenants-dir",
        str(tmp_path / "tenants"),
        *ENGINE_ARGS,
    ]
    proc, log = _start(tmp_path, command, keys_file, port)
    try:
        yield Live(f"http://127.0.0.1:{port}", tmp_path, keys_file, proc, log)
    finally:
        _stop(proc)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_created_after_start_are_enforced_on_the_next_request(live_http: Live) -> None:
    c = httpx.Client(base_url=live_http.url, timeout=60)
    assert not live_http.keys_file.exists()
    # no keys yet: the loopback server serves the default tenant (and creates no keys file)
    r = c.post("/v1/memories", json={"text": "Before keys: the default tenant", "user_id": "alice"})
    assert r.status_code == 201, r.text
    assert not live_http.keys_file.exists()

    # keys created by other processes while the server runs
    acme = live_http.create_key("acme")
    alice = live_http.create_key("acme", "--user", "alice")
    reader = live_http.create_key("acme", "--read-only")
    globex = live_http.create_key("globex")
    assert live_http.keys_file.exists()

    # the next request already needs a key
    secret_text = "Alice's door code is 4711"
    r = c.post("/v1/memories", json={"text": secret_text, "user_id": "alice"}, headers=bearer(acme["key"]))
    assert r.status_code == 201, r.text
    memory_id = r.json()["memories"][0]["id"]

    write = {"text": "Mallory was here", "user_id": "alice"}
    refused = {
        "no key": c.post("/v1/memories", json=write),
        "no key (read)": c.get("/v1/memories", params={"user_id": "alice"}),
        "wrong key": c.get("/v1/memories", params={"user_id": "alice"}, headers=bearer(WRONG_KEY)),
        "wrong key (write)": c.post("/v1/memories", json=write, headers=bearer(WRONG_KEY)),
        "wrong key (X-API-Key)": c.get("/v1/memories", params={"user_id": "alice"}, headers={"X-API-Key": WRONG_KEY}),
        "two different Authorization headers": c.get(
            "/v1/memories",
            params={"user_id": "alice"},
            headers=[("Authorization", f"Bearer {globex['key']}"), ("Authorization", f"Bearer {acme['key']}")],
        ),
    }
    for what, r in refused.items():
        assert r.status_code == 401, (what, r.status_code, r.text)
        assert r.json()["error"]["code"] == "unauthenticated", what
        assert secret_text not in r.text
    forbidden = {
        "read-only key writing": c.post("/v1/memories", json=write, headers=bearer(reader["key"])),
        "alice's key reading carol": c.get("/v1/memories", params={"user_id": "carol"}, headers=bearer(alice["key"])),
        "alice's key writing for carol": c.post(
            "/v1/memories", json={"text": "x", "user_id": "carol"}, headers=bearer(alice["key"])
        ),
    }
    for what, r in forbidden.items():
        assert r.status_code == 403, (what, r.status_code, r.text)
        assert r.json()["error"]["code"] == "forbidden", what

    # globex's key reading acme's user sees globex's (empty) store, not acme's
    r = c.get("/v1/memories", params={"user_id": "alice"}, headers=bearer(globex["key"]))
    assert r.status_code == 200 and r.json()["memories"] == [], r.text
    assert (
        c.get(f"/v1/memories/{memory_id}", params={"user_id": "alice"}, headers=bearer(globex["key"])).status_code
        == 404
    )
    r = c.post("/v1/search", json={"query": "door code", "user_id": "alice"}, headers=bearer(globex["key"]))
    assert r.status_code == 200 and secret_text not in r.text

    # the allowed requests work: alice's own key and the read-only key read alice's memory
    for key in (alice, reader):
        r = c.get("/v1/memories", params={"user_id": "alice"}, headers=bearer(key["key"]))
        assert r.status_code == 200, r.text
        assert [m["content"] for m in r.json()["memories"]] == [secret_text]

    # nothing refused was written; the keyed writes landed in acme's own store, not the default one
    r = c.get("/v1/memories", params={"user_id": "alice"}, headers=bearer(acme["key"]))
    assert [m["content"] for m in r.json()["memories"]] == [secret_text]
    assert (live_http.tmp / "tenants" / "acme.db").exists()

    # revoked by another process: refused from the next request on
    live_http.cli("keys", "revoke", alice["id"])
    r = c.get("/v1/memories", params={"user_id": "alice"}, headers=bearer(alice["key"]))
    assert r.status_code == 401, r.text
    assert c.get("/v1/memories", params={"user_id": "alice"}, headers=bearer(acme["key"])).status_code == 200

    # the default tenant got nothing after the keys appeared
    r = c.post("/v1/memories", json=write, headers=bearer(acme["key"]))  # acme, not default
    assert r.status_code == 201
    c.close()
    _stop(live_http.proc)
    from memlane import Memory

    with Memory(str(live_http.tmp / "default.db"), embedder="hash", sessions="null") as m:
        assert [f.content for f in m.list(user_id="alice").items] == ["Before keys: the default tenant"]


def test_a_keys_file_that_goes_missing_or_bad_refuses_everything(live_http: Live) -> None:
    c = httpx.Client(base_url=live_http.url, timeout=60)
    acme = live_http.create_key("acme")
    assert c.get("/v1/sessions", headers=bearer(acme["key"])).status_code == 200
    assert c.get("/v1/sessions").status_code == 401

    # removed: never "no keys, everyone is the default tenant"
    moved = live_http.keys_file.with_suffix(".bak")
    os.replace(live_http.keys_file, moved)
    for headers in ({}, bearer(acme["key"]), bearer(WRONG_KEY)):
        r = c.get("/v1/sessions", headers=headers)
        assert r.status_code in (401, 503), (headers, r.text)
        assert "error" in r.json()
    r = c.get("/v1/sessions", headers=bearer(acme["key"]))
    assert r.status_code == 503 and r.json()["error"]["code"] == "storage_unavailable"
    r = c.post("/v1/memories", json={"text": "while the file is gone", "user_id": "alice"})
    assert r.status_code == 401

    # replaced by a file that is not a keys database: refused
    live_http.keys_file.write_bytes(b"this is not a database" * 100)
    assert c.get("/v1/sessions", headers=bearer(acme["key"])).status_code == 503
    assert c.get("/v1/sessions").status_code == 401

    # a new keys file (another inode): its keys count, the old file's do not
    live_http.keys_file.unlink()
    globex = live_http.create_key("globex")
    assert c.get("/v1/sessions", headers=bearer(globex["key"])).status_code == 200
    assert c.get("/v1/sessions", headers=bearer(acme["key"])).status_code == 401
    assert c.get("/v1/sessions").status_code == 401
    c.close()


def test_a_corrupt_keys_file_stops_the_server_from_starting(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.db"
    keys_file.write_bytes(b"garbage" * 500)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memlane.cli.main",
            "serve",
            "--port",
            str(_free_port()),
            "--db",
            str(tmp_path / "d.db"),
            *ENGINE_ARGS,
        ],
        env=_env(tmp_path, keys_file),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "keys file" in done.stderr


# ---------------------------------------------------------------------------- MCP over HTTP
mcp_client = pytest.importorskip("mcp")


def _mcp_post(url: str, body: dict[str, object], headers: dict[str, str]) -> httpx.Response:
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    return httpx.post(url, json=body, headers=base | headers, timeout=60)


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _sse_json(r: httpx.Response) -> dict[str, object]:
    if r.headers.get("content-type", "").startswith("application/json"):
        parsed: dict[str, object] = r.json()
        return parsed
    lines = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
    found: dict[str, object] = json.loads(lines[-1])
    return found


def _call(url: str, headers: dict[str, str], name: str, arguments: dict[str, object]) -> httpx.Response:
    """initialize, then tools/call in that session (raw streamable HTTP)."""
    r = _mcp_post(url, INIT, headers)
    if r.status_code != 200:
        return r
    session = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    _mcp_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers | session)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return _mcp_post(url, call, headers | session)


def test_mcp_over_http_enforces_keys_created_after_start(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.db"
    port = _free_port()
    stores = ["--db", str(tmp_path / "default.db"), "--tenants-dir", str(tmp_path / "tenants")]
    command = ["mcp", "--transport", "http", "--port", str(port), "--user", "carol", *stores, *ENGINE_ARGS]
    proc, log = _start(tmp_path, command, keys_file, port)
    live = Live(f"http://127.0.0.1:{port}/mcp", tmp_path, keys_file, proc, log)
    try:
        # no keys: the configured user, loopback
        r = _call(live.url, {}, "remember", {"fact": "Carol bikes to work"})
        assert r.status_code == 200 and "isError" not in json.dumps(_sse_json(r)).replace('"isError": false', ""), (
            r.text
        )
        # a session opened before the keys exist
        early = _mcp_post(live.url, INIT, {})
        early_session = {"mcp-session-id": early.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}

        alice = live.create_key("acme", "--user", "alice")
        reader = live.create_key("acme", "--user", "alice", "--read-only")
        globex = live.create_key("globex", "--user", "alice")

        list_call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list", "arguments": {}}}
        assert _mcp_post(live.url, list_call, early_session).status_code == 401  # the key-less session is over
        for headers in ({}, bearer(WRONG_KEY), {"Authorization": "Bearer not-a-key"}):
            r = _mcp_post(live.url, INIT, headers)
            assert r.status_code == 401, (headers, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer")
        two = [("Authorization", f"Bearer {globex['key']}"), ("Authorization", f"Bearer {alice['key']}")]
        r = httpx.post(live.url, json=INIT, headers=[*two, ("Accept", "application/json, text/event-stream")])
        assert r.status_code == 401, r.text

        # alice's key: her own tenant store, not carol's default one
        r = _call(live.url, bearer(alice["key"]), "remember", {"fact": "Alice's door code is 4711"})
        assert r.status_code == 200, r.text
        r = _call(live.url, bearer(alice["key"]), "list", {})
        assert "4711" in r.text and "Carol" not in r.text
        # the read-only key cannot write; globex's alice sees nothing of acme's
        r = _call(live.url, bearer(reader["key"]), "remember", {"fact": "Mallory was here"})
        assert r.status_code == 200 and "read-only" in r.text
        r = _call(live.url, bearer(globex["key"]), "list", {})
        assert r.status_code == 200 and "4711" not in r.text

        # revoked by another process: refused on the next request
        live.cli("keys", "revoke", alice["id"])
        assert _mcp_post(live.url, INIT, bearer(alice["key"])).status_code == 401
    finally:
        _stop(proc)


# ---------------------------------------------------------------------------- create_app() itself
def test_create_app_from_the_environment_enforces_the_keys_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_app()`` (what ``uvicorn --factory memlane.service.app:create_app`` runs) uses the
    settings' keys file, looked at on every request: it never serves everyone while keys exist."""
    from memlane.service.app import create_app
    from memlane.service.keys import KeyStore
    from service_server import serve

    keys_file = tmp_path / "keys.db"
    for name, value in {
        "MEMLANE_KEYS_FILE": str(keys_file),
        "MEMLANE_DB": str(tmp_path / "m.db"),
        "MEMLANE_TENANTS_DIR": str(tmp_path / "tenants"),
        "MEMLANE_EMBEDDER": "hash",
        "MEMLANE_LLM": "offline",
        "MEMLANE_CONFIG": "",
    }.items():
        monkeypatch.setenv(name, value)
    with serve(create_app()) as srv:
        assert srv.client.get("/v1/sessions").status_code == 200  # no keys yet: loopback, default tenant
        assert not keys_file.exists()
        with KeyStore(keys_file) as store:  # e.g. memlane keys create, in another process
            key = store.create("acme").secret
        assert srv.client.get("/v1/sessions").status_code == 401
        assert srv.client.get("/v1/sessions", headers=bearer(WRONG_KEY)).status_code == 401
        assert srv.client.get("/v1/sessions", headers=bearer(key)).status_code == 200


def test_create_app_with_explicit_settings_enforces_their_keys_file(tmp_path: Path) -> None:
    """An app built from settings a library user passes (no ``keys=``) enforces the settings'
    keys file too: a key created before or after the app starts is required from then on."""
    from memlane.config import load_settings
    from memlane.service.app import create_app
    from memlane.service.keys import KeyStore
    from service_server import make_hub, serve

    keys_file = tmp_path / "keys.db"
    settings = load_settings(env={"MEMLANE_KEYS_FILE": str(keys_file), "MEMLANE_RATE_LIMIT": "0"})
    with serve(create_app(settings, hub=make_hub(tmp_path / "store"))) as srv:
        assert srv.client.get("/v1/sessions").status_code == 200  # no keys file: default tenant
        with KeyStore(keys_file) as store:
            key = store.create("acme").secret
        assert srv.client.get("/v1/sessions").status_code == 401
        assert srv.client.get("/v1/sessions", headers=bearer(key)).status_code == 200


def test_keys_list_and_revoke_create_no_keys_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from memlane.cli.main import main

    missing = tmp_path / "keys.db"
    assert main(["keys", "list", "--keys-file", str(missing)]) == 0
    assert "no API keys" in capsys.readouterr().out
    assert main(["keys", "revoke", "0123456789abcdef", "--keys-file", str(missing)]) != 0
    assert "no API key" in capsys.readouterr().err
    assert not missing.exists()
