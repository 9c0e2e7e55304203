"""API keys, the principal rule and the service limits (issue 9, H-AUTH).

Against a REAL uvicorn server on loopback (tests/service_server.py) running memlane's
``create_app`` with a real key store file: 401 without / with a wrong / a revoked key, tenant and
user isolation through the routes, read-only keys, keys hashed at rest, 429 + Retry-After, 413
(Content-Length and chunked). Plus unit tests of the rule, the header parsing, the token bucket,
the page size helper and the ``memlane keys`` CLI.
"""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.requests import HTTPConnection

from memlane.cli.main import main as cli_main
from memlane.config import MemlaneSettings, ServerSettings
from memlane.errors import (
    AuthenticationError,
    ConfigError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ScopeError,
)
from memlane.service.app import create_app
from memlane.service.auth import KeyStore, Principal, authorize, presented_key
from memlane.service.limits import Limits, RateLimiter, page_size
from service_server import ServiceServer, make_hub, serve


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[KeyStore]:
    with KeyStore(tmp_path / "keys.db") as store:
        yield store


def settings(**server: Any) -> MemlaneSettings:
    return MemlaneSettings(server=ServerSettings(**server))


@pytest.fixture
def keyed(tmp_path: Path, keys: KeyStore) -> Iterator[ServiceServer]:
    """The app with a key store (keys created by each test), generous limits."""
    app = create_app(settings(rate_limit=0), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as srv:
        yield srv


def create_session(client: httpx.Client, headers: dict[str, str], user: str, text: str) -> str:
    r = client.post("/v1/sessions", json={"user_ids": [user]}, headers=headers)
    assert r.status_code == 201, r.text
    sid: str = r.json()["id"]
    r = client.post(f"/v1/sessions/{sid}/events", json={"content": text, "author": user}, headers=headers)
    assert r.status_code == 201, r.text
    return sid


# ---------------------------------------------------------------------------- 401


def test_keys_configured_requests_without_a_valid_key_are_401(keyed: ServiceServer, keys: KeyStore) -> None:
    good = keys.create("acme")
    other = keys.create("acme")
    c = keyed.client
    assert c.get("/v1/sessions", headers=bearer(good.secret)).status_code == 200
    wrong_secret = good.secret[:-4] + ("AAAA" if not good.secret.endswith("AAAA") else "BBBB")
    spliced = f"ml_{good.key.id}_{other.secret.split('_', 2)[2]}"  # a real secret under another key's id
    for headers in (
        {},
        bearer("ml_0000000000000000_" + "x" * 43),
        bearer(wrong_secret),
        bearer(spliced),
        bearer("not-a-memlane-key"),
        {"Authorization": f"Basic {good.secret}"},
        {"Authorization": "Bearer"},
        {"X-API-Key": wrong_secret},
        {"X-API-Key": good.secret, "Authorization": f"Bearer {other.secret}"},
    ):
        r = c.get("/v1/sessions", headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["error"]["code"] == "unauthenticated"
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert good.secret not in r.text
    # X-API-Key works as well as Authorization: Bearer
    assert c.get("/v1/sessions", headers={"X-API-Key": good.secret}).status_code == 200
    # the KAOS endpoints are behind the same keys
    assert c.get("/memory/sessions").status_code == 401
    assert c.get("/memory/sessions", headers=bearer(good.secret)).status_code == 200


def test_a_revoked_key_is_refused_from_the_next_request(keyed: ServiceServer, tmp_path: Path) -> None:
    # revoked through another KeyStore on the same file, as `memlane keys revoke` does
    with KeyStore(tmp_path / "keys.db") as cli_side:
        new = cli_side.create("acme", name="to revoke")
        assert keyed.client.get("/v1/sessions", headers=bearer(new.secret)).status_code == 200
        cli_side.revoke(new.key.id)
    r = keyed.client.get("/v1/sessions", headers=bearer(new.secret))
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthenticated"


def test_without_keys_every_request_is_the_default_tenant(tmp_path: Path, keys: KeyStore) -> None:
    app = create_app(settings(), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as srv:
        sid = create_session(srv.client, {}, "alice", "hello")
        assert srv.client.get(f"/v1/sessions/{sid}").status_code == 200
        # auth headers (a proxy's Basic credentials, a stray key) are not looked at
        for headers in ({"Authorization": "Basic dXNlcjpwYXNz"}, bearer("ml_0_x"), {"X-API-Key": "k"}):
            assert srv.client.get(f"/v1/sessions/{sid}", headers=headers).status_code == 200
        # once a key exists (created while the server runs) the server requires one
        new = keys.create("default")
        assert srv.client.get(f"/v1/sessions/{sid}").status_code == 401
        assert srv.client.get(f"/v1/sessions/{sid}", headers=bearer(new.secret)).status_code == 200
        # revoking every key does not open the server again
        keys.revoke(new.key.id)
        assert srv.client.get(f"/v1/sessions/{sid}").status_code == 401


# ---------------------------------------------------------------------------- isolation


def test_a_key_never_reads_or_writes_another_tenants_data(keyed: ServiceServer, keys: KeyStore) -> None:
    acme, beta = keys.create("acme"), keys.create("beta")
    c = keyed.client
    sid = create_session(c, bearer(acme.secret), "alice", "acme secret: the launch is on friday")
    b = bearer(beta.secret)
    # not listed, not readable, not writable, not deletable from tenant beta
    assert c.get("/v1/sessions", headers=b).json()["sessions"] == []
    assert c.get("/v1/sessions", params={"user_id": "alice"}, headers=b).json()["sessions"] == []
    assert c.get(f"/v1/sessions/{sid}", headers=b).status_code == 404
    assert c.get(f"/v1/sessions/{sid}/events", headers=b).status_code == 404
    assert c.post(f"/v1/sessions/{sid}/events", json={"content": "x"}, headers=b).status_code == 404
    assert c.delete(f"/v1/sessions/{sid}", headers=b).status_code == 404
    kaos = c.get("/memory/sessions", headers=b)
    assert kaos.status_code == 200 and "friday" not in kaos.text and sid not in kaos.text
    assert "friday" not in c.get("/memory/events", params={"session_id": sid}, headers=b).text
    # a session of the same id made in beta is beta's own, acme's stays as it was
    r = c.post("/v1/sessions", json={"user_ids": ["alice"], "session_id": sid}, headers=b)
    assert r.status_code == 201
    events = c.get(f"/v1/sessions/{sid}/events", headers=bearer(acme.secret)).json()["events"]
    assert [e["content"] for e in events] == ["acme secret: the launch is on friday"]
    assert c.get(f"/v1/sessions/{sid}/events", headers=b).json()["events"] == []


def test_a_user_bound_key_never_reads_or_writes_another_users_data(keyed: ServiceServer, keys: KeyStore) -> None:
    admin, bob = keys.create("acme"), keys.create("acme", user_id="bob")
    c = keyed.client
    alice_sid = create_session(c, bearer(admin.secret), "alice", "alice's diary")
    b = bearer(bob.secret)
    r = c.get("/v1/sessions", params={"user_id": "alice"}, headers=b)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    listed = c.get("/v1/sessions", headers=b)  # no user named: acts for bob
    assert listed.status_code == 200 and listed.json()["sessions"] == []
    assert c.get(f"/v1/sessions/{alice_sid}", headers=b).status_code == 404
    assert c.post(f"/v1/sessions/{alice_sid}/events", json={"content": "x"}, headers=b).status_code == 404
    assert c.post("/v1/sessions", json={"user_ids": ["alice"]}, headers=b).status_code == 403
    assert c.post("/v1/sessions", json={"user_ids": ["bob", "alice"]}, headers=b).status_code == 403
    # bob's own work goes through, bound to bob
    r = c.post("/v1/sessions", json={}, headers=b)
    assert r.status_code == 201 and r.json()["user_ids"] == ["bob"]
    events = c.get(f"/v1/sessions/{alice_sid}/events", headers=bearer(admin.secret)).json()["events"]
    assert [e["content"] for e in events] == ["alice's diary"]


def test_a_read_only_key_reads_but_never_writes(keyed: ServiceServer, keys: KeyStore) -> None:
    admin, reader = keys.create("acme"), keys.create("acme", read_only=True)
    c = keyed.client
    sid = create_session(c, bearer(admin.secret), "alice", "hello")
    r = bearer(reader.secret)
    assert c.get(f"/v1/sessions/{sid}/events", headers=r).status_code == 200
    for method, url, body in (
        ("POST", "/v1/sessions", {"user_ids": ["alice"]}),
        ("POST", f"/v1/sessions/{sid}/events", {"content": "x"}),
        ("DELETE", f"/v1/sessions/{sid}", None),
        ("POST", f"/v1/sessions/{sid}/form", None),
    ):
        resp = c.request(method, url, json=body, headers=r)
        assert resp.status_code == 403, (method, url, resp.text)
        assert resp.json()["error"]["code"] == "forbidden"
    assert len(c.get(f"/v1/sessions/{sid}/events", headers=bearer(admin.secret)).json()["events"]) == 1


def test_memories_and_search_follow_the_key(keyed: ServiceServer, keys: KeyStore) -> None:
    admin, beta, bob = keys.create("acme"), keys.create("beta"), keys.create("acme", user_id="bob")
    reader = keys.create("acme", read_only=True)
    c = keyed.client
    r = c.post(
        "/v1/memories", json={"text": "alice's locker code is 4711", "user_id": "alice"}, headers=bearer(admin.secret)
    )
    assert r.status_code == 201, r.text
    fid = r.json()["memories"][0]["id"]
    query = {"query": "locker code", "user_id": "alice"}
    assert "4711" in c.post("/v1/search", json=query, headers=bearer(admin.secret)).text
    # another tenant: the same user id names a different person in a different store
    b = bearer(beta.secret)
    assert "4711" not in c.post("/v1/search", json=query, headers=b).text
    assert c.get("/v1/memories", params={"user_id": "alice"}, headers=b).json()["memories"] == []
    assert c.get(f"/v1/memories/{fid}", params={"user_id": "alice"}, headers=b).status_code == 404
    assert c.delete(f"/v1/memories/{fid}", params={"user_id": "alice"}, headers=b).status_code == 404
    # a user-bound key: not alice's, and no agent-shared writes even for itself
    u = bearer(bob.secret)
    assert c.post("/v1/search", json=query, headers=u).status_code == 403
    assert "4711" not in c.post("/v1/search", json={"query": "locker code"}, headers=u).text
    assert c.get(f"/v1/memories/{fid}", params={"user_id": "alice"}, headers=u).status_code == 403
    assert c.get(f"/v1/memories/{fid}", headers=u).status_code == 404
    shared = {"text": "the office wifi is guest", "agent_id": "helper", "scope": "agent"}
    assert c.post("/v1/memories", json=shared, headers=u).status_code == 403
    mine = c.post("/v1/memories", json={"text": "bob likes tea"}, headers=u)
    assert mine.status_code == 201 and mine.json()["memories"][0]["user_id"] == "bob"
    # a read-only key reads alice's memory but cannot add, change or delete
    ro = bearer(reader.secret)
    assert "4711" in c.post("/v1/search", json=query, headers=ro).text
    assert c.post("/v1/memories", json={"text": "x", "user_id": "alice"}, headers=ro).status_code == 403
    assert (
        c.patch(f"/v1/memories/{fid}", params={"user_id": "alice"}, json={"text": "y"}, headers=ro).status_code == 403
    )
    assert c.delete(f"/v1/memories/{fid}", params={"user_id": "alice"}, headers=ro).status_code == 403
    got = c.get(f"/v1/memories/{fid}", params={"user_id": "alice"}, headers=bearer(admin.secret))
    assert got.status_code == 200 and got.json()["content"] == "alice's locker code is 4711"


# ---------------------------------------------------------------------------- at rest


def test_keys_are_stored_hashed_not_in_plaintext(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    with KeyStore(path) as store:
        new = [store.create("acme", user_id="alice", name=f"k{i}") for i in range(3)]
        assert all(store.verify(k.secret) is not None for k in new)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("keys.db"))
    for k in new:
        secret_part = k.secret.split("_", 2)[2]
        assert k.secret.encode() not in raw
        assert secret_part.encode() not in raw
        assert k.key.id.encode() in raw  # the file is the right one: the public id is there
    with sqlite3.connect(path) as db:
        cells = [str(v) for row in db.execute("SELECT * FROM api_keys") for v in row]
    assert not any(k.secret.split("_", 2)[2] in cell for k in new for cell in cells)


def test_keystore_verify_revoke_list_and_last_used(keys: KeyStore) -> None:
    new = keys.create("acme", user_id="alice", read_only=True, name="bot")
    assert "ml_" in repr(new) and new.secret not in repr(new)
    got = keys.verify(new.secret)
    assert got is not None and (got.tenant, got.user_id, got.read_only) == ("acme", "alice", True)
    assert keys.get(new.key.id).last_used_at is not None
    assert keys.verify(new.secret + "x") is None
    assert keys.verify(new.secret.replace("ml_", "mk_", 1)) is None
    assert keys.verify("") is None
    assert keys.revoke(new.key.id).revoked
    assert keys.verify(new.secret) is None
    assert keys.revoke(new.key.id).revoked  # idempotent
    assert [k.id for k in keys.list()] == [new.key.id]
    assert keys.list(include_revoked=False) == []
    with pytest.raises(NotFoundError):
        keys.revoke("nope")
    with pytest.raises(ScopeError):
        keys.create("  ")
    with pytest.raises(ScopeError):
        keys.create("acme", user_id="")
    with pytest.raises(InvalidInputError):
        keys.create("acme", name="x" * 201)


# ---------------------------------------------------------------------------- limits over HTTP


def test_rate_limit_per_key_429_with_retry_after(tmp_path: Path, keys: KeyStore) -> None:
    a, b = keys.create("acme"), keys.create("acme")
    app = create_app(settings(rate_limit=3), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as srv:
        for _ in range(3):
            assert srv.client.get("/v1/sessions", headers=bearer(a.secret)).status_code == 200
        r = srv.client.get("/v1/sessions", headers=bearer(a.secret))
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "rate_limited"
        retry_after = int(r.headers["Retry-After"])
        assert 1 <= retry_after <= 20  # 3 a minute: one request back within 20 s
        # another key has its own bucket
        assert srv.client.get("/v1/sessions", headers=bearer(b.secret)).status_code == 200


def chunked(body: bytes, size: int) -> bytes:
    """``body`` in HTTP/1.1 chunked transfer encoding, ``size`` bytes a chunk."""
    parts = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


def raw_request(base_url: str, line: str, headers: dict[str, str], body: bytes = b"") -> str:
    """Send ``line``, ``headers`` (Host and Connection: close added) and ``body`` in one write,
    then read the answer until the server closes: what a client gets when its whole request
    was sent before the server answered. A reset (the server closed with part of the body
    unread) is accepted only after an answer began."""
    host, port = base_url.removeprefix("http://").split(":")
    head = f"{line} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    received = b""
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head.encode() + body)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            assert received.startswith(b"HTTP/1.1 "), "reset before any answer"
    return received.decode("latin-1")


def test_body_over_the_limit_is_413_by_content_length_and_when_streamed(tmp_path: Path, keys: KeyStore) -> None:
    admin = keys.create("acme")
    app = create_app(settings(max_body_bytes=4096, rate_limit=0), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as srv:
        h = bearer(admin.secret) | {"Content-Type": "application/json"}
        sid = create_session(srv.client, bearer(admin.secret), "alice", "hello")
        url = f"/v1/sessions/{sid}/events"
        big = json.dumps({"content": "x" * 5000}).encode()
        r = srv.client.post(url, content=big, headers=h)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "payload_too_large"

        # Streamed (chunked, no Content-Length). The server answers 413 as soon as the count
        # passes the limit and closes the connection, with the rest of the body unread: a client
        # still sending chunks then (a loaded machine: ConnectionResetError) gets a reset. So the
        # whole body goes out first, in one write, then the answer is read: the 413 comes whatever
        # the timing, and a reset is accepted only after it.
        streamed = h | {"Transfer-Encoding": "chunked"}
        answer = raw_request(srv.url, f"POST {url}", streamed, chunked(big, 512))
        assert answer.startswith("HTTP/1.1 413"), answer[:200]
        assert "payload_too_large" in answer
        # under the limit, both ways, goes through
        small = json.dumps({"content": "y" * 3000}).encode()
        assert srv.client.post(url, content=small, headers=h).status_code == 201
        assert raw_request(srv.url, f"POST {url}", streamed, chunked(small, 1000)).startswith("HTTP/1.1 201")
        events = srv.client.get(url, headers=h).json()["events"]
        assert [len(e["content"]) for e in events] == [5, 3000, 3000]  # nothing of the big bodies stored
        # a huge Content-Length is refused from the headers alone: the body is never sent
        answer = raw_request(srv.url, f"POST {url}", h | {"Content-Length": "1000000000"})
        assert answer.startswith("HTTP/1.1 413"), answer[:200]
        assert "payload_too_large" in answer


# ---------------------------------------------------------------------------- units


def test_authorize_rule() -> None:
    anyone = Principal("acme", key_id="k1")
    bob = Principal("acme", user_id="bob", key_id="k2")
    reader = Principal("acme", read_only=True, key_id="k3")
    bob_reader = Principal("acme", user_id="bob", read_only=True, key_id="k4")
    assert authorize(anyone, user_id="alice", write=True) == "alice"
    assert authorize(anyone, user_id=None, write=False) is None
    assert authorize(anyone, user_id="alice", write=True, scope="agent") == "alice"
    assert authorize(bob, user_id=None, write=True) == "bob"
    assert authorize(bob, user_id="bob", write=False, scope="agent") == "bob"  # reading shared is fine
    assert authorize(bob, user_id="bob", write=True, scope="room") == "bob"
    for call in (
        lambda: authorize(bob, user_id="alice", write=False),
        lambda: authorize(bob, user_id="alice", write=True),
        lambda: authorize(bob, user_id=None, write=True, scope="agent"),
        lambda: authorize(bob, user_id="bob", write=True, scope="shared"),
        lambda: authorize(reader, user_id="alice", write=True),
        lambda: authorize(bob_reader, user_id=None, write=True),
    ):
        with pytest.raises(PermissionDeniedError):
            call()
    assert authorize(reader, user_id="alice", write=False) == "alice"
    assert authorize(Principal("default"), user_id="x", write=True, scope="agent") == "x"


def _conn(headers: dict[str, str]) -> HTTPConnection:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return HTTPConnection({"type": "http", "headers": raw})


def test_presented_key_headers() -> None:
    assert presented_key(_conn({})) is None
    assert presented_key(_conn({"Authorization": "Bearer ml_a_b"})) == "ml_a_b"
    assert presented_key(_conn({"Authorization": "bearer   ml_a_b  "})) == "ml_a_b"
    assert presented_key(_conn({"X-API-Key": "ml_a_b"})) == "ml_a_b"
    assert presented_key(_conn({"X-API-Key": "ml_a_b", "Authorization": "Bearer ml_a_b"})) == "ml_a_b"
    for bad in (
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"X-API-Key": " "},
        {"X-API-Key": "ml_a_b", "Authorization": "Bearer ml_a_c"},
    ):
        with pytest.raises(AuthenticationError):
            presented_key(_conn(bad))


def test_rate_limiter_token_bucket() -> None:
    now = [1000.0]
    limiter = RateLimiter(60, burst=2, clock=lambda: now[0])  # one a second, two at once
    limiter.check("a")
    limiter.check("a")
    with pytest.raises(RateLimitedError) as info:
        limiter.check("a")
    assert info.value.retry_after == 1
    limiter.check("b")  # its own bucket
    now[0] += 1.0
    limiter.check("a")  # refilled one
    with pytest.raises(RateLimitedError):
        limiter.check("a")
    now[0] += 10.0
    limiter.check("a")
    limiter.check("a")  # refill caps at the burst
    with pytest.raises(RateLimitedError):
        limiter.check("a")
    slow = RateLimiter(2, burst=1, clock=lambda: now[0])  # one every 30 s
    slow.check("a")
    with pytest.raises(RateLimitedError) as info:
        slow.check("a")
    assert info.value.retry_after == 30


def test_page_size_and_limits_from_settings() -> None:
    limits = Limits(max_page_size=100, default_page_size=20)
    assert page_size(limits, None) == 20
    assert page_size(limits, None, default=1_000_000) == 100
    assert page_size(limits, 100) == 100
    assert page_size(None, None) == 50
    for bad in (0, 101, -1, True, "5"):
        with pytest.raises(InvalidInputError):
            page_size(limits, bad)  # type: ignore[arg-type]
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(limits=limits)))
    assert page_size(request, None) == 20  # type: ignore[arg-type]
    got = Limits.from_settings(settings(max_body_bytes=10, max_page_size=7, rate_limit=5))
    assert (got.max_body_bytes, got.max_page_size, got.default_page_size, got.rate_per_minute) == (10, 7, 7, 5)
    assert Limits.from_settings(None) == Limits()
    with pytest.raises(ConfigError):
        Limits(max_page_size=0)
    with pytest.raises(ConfigError):
        Limits(rate_burst=0)


# ---------------------------------------------------------------------------- CLI


def test_cli_keys_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "cli-keys.db")
    assert cli_main(["keys", "list", "--keys-file", path]) == 0
    assert "no API keys" in capsys.readouterr().out
    argv = ["keys", "create", "--keys-file", path, "--tenant", "acme", "--user", "alice", "--read-only"]
    assert cli_main([*argv, "--name", "ci bot"]) == 0
    out = capsys.readouterr().out
    secret = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("key: "))
    with KeyStore(path) as store:
        key = store.verify(secret)
    assert key is not None and (key.tenant, key.user_id, key.read_only, key.name) == ("acme", "alice", True, "ci bot")
    assert cli_main(["keys", "list", "--keys-file", path]) == 0
    listed = capsys.readouterr().out
    assert key.id in listed and "acme" in listed and "alice" in listed and "read-only" in listed
    assert secret.split("_", 2)[2] not in listed
    assert cli_main(["keys", "list", "--keys-file", path, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["id"] == key.id and "key" not in rows[0] and "hash" not in rows[0]
    assert secret.split("_", 2)[2] not in json.dumps(rows)
    assert cli_main(["keys", "revoke", "--keys-file", path, key.id]) == 0
    assert "revoked" in capsys.readouterr().out
    with KeyStore(path) as store:
        assert store.verify(secret) is None
    assert cli_main(["keys", "list", "--keys-file", path, "--active"]) == 0
    assert key.id not in capsys.readouterr().out
    assert cli_main(["keys", "revoke", "--keys-file", path, "nope"]) == 2
    assert "no API key 'nope'" in capsys.readouterr().err


def test_cli_keys_file_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "env-keys.db"
    monkeypatch.setenv("MEMLANE_KEYS_FILE", str(path))
    assert cli_main(["keys", "create", "--tenant", "beta"]) == 0
    capsys.readouterr()
    with KeyStore(path) as store:
        assert [k.tenant for k in store.list()] == ["beta"]
