"""HTTP protocol edges (issue 17, section 7), against a REAL uvicorn server on loopback.

* A body shorter than its ``Content-Length`` (or too slow) is answered 408 in the JSON error
  shape after ``server.body_timeout`` and the connection is closed; nothing is stored.
* Two ``Authorization`` headers (or ``X-API-Key`` headers) with different keys are 401, like
  the ``Authorization`` / ``X-API-Key`` conflict: a request never acts as "the first key".
* ``GET /v1/memories/%2F`` (sessions, jobs, a trailing slash) is a 404 in the JSON error
  shape, not an empty-bodied 307 redirect.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import HTTPConnection

from memlane.config import MemlaneSettings, ServerSettings, load_settings
from memlane.errors import AuthenticationError, ConfigError
from memlane.service.app import create_app
from memlane.service.auth import presented_key
from memlane.service.keys import KeyStore
from memlane.service.limits import Limits
from service_server import ServiceServer, make_hub, serve

#: How long the tests wait for an answer: a generous bound, far above the configured timeouts
#: (the test checks that an answer comes, not how fast).
WAIT = 30.0


def settings(**server: Any) -> MemlaneSettings:
    return MemlaneSettings(server=ServerSettings(**server))


def _raw(srv: ServiceServer, request: bytes) -> tuple[bytes, bool]:
    """Send ``request`` on a new connection; return everything the server sent and whether it
    closed the connection (within :data:`WAIT` seconds)."""
    host, port = srv.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        sock.sendall(request)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return received, False
            if not chunk:
                return received, True
            received += chunk


# ---------------------------------------------------------------------------- body-read timeout
@pytest.fixture
def slow_limit(tmp_path: Path) -> Iterator[ServiceServer]:
    app = create_app(settings(body_timeout=0.5, rate_limit=0), hub=make_hub(tmp_path))
    with serve(app) as srv:
        yield srv


def test_a_body_shorter_than_its_content_length_gets_408_and_the_connection_closes(
    slow_limit: ServiceServer,
) -> None:
    body = b'{"text": "x"'  # 12 bytes of the 100 announced
    request = (
        b"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n" + body
    )
    received, closed = _raw(slow_limit, request)
    head, _, payload = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), received
    assert b"application/json" in head
    assert b'"code": "request_timeout"' in payload or b'"code":"request_timeout"' in payload, payload
    assert closed, "the server keeps the connection of a client that never sends its body"
    # nothing of the cut-off request was stored, and the server still serves
    r = slow_limit.client.get("/v1/memories", params={"user_id": "u1"})
    assert r.status_code == 200 and r.json()["memories"] == []
    r = slow_limit.client.post("/v1/memories", json={"text": "Whole bodies still work", "user_id": "u1"})
    assert r.status_code == 201, r.text


def test_body_timeout_is_a_setting() -> None:
    assert Limits.from_settings(settings(body_timeout=2.5)).body_timeout == 2.5
    assert Limits.from_settings(settings()).body_timeout == 30.0
    assert load_settings(None, env={"MEMLANE_BODY_TIMEOUT": "7"}).server.body_timeout == 7.0
    with pytest.raises(ConfigError):
        Limits(body_timeout=-1)


def test_without_a_body_timeout_the_server_waits_for_the_body(tmp_path: Path) -> None:
    # body_timeout 0 turns it off: the same request gets no answer while the client waits
    app = create_app(settings(body_timeout=0, rate_limit=0), hub=make_hub(tmp_path))
    with serve(app) as srv:
        host, port = srv.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=2.0) as sock:
            sock.sendall(b"POST /v1/memories HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}")
            with pytest.raises(TimeoutError):
                sock.recv(65536)


# ---------------------------------------------------------------------------- several keys
def _conn(*headers: tuple[str, str]) -> HTTPConnection:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers]
    return HTTPConnection({"type": "http", "headers": raw, "method": "GET", "path": "/"})


def test_presented_key_refuses_several_different_keys() -> None:
    for headers in (
        (("Authorization", "Bearer ml_a_1"), ("Authorization", "Bearer ml_b_2")),
        (("X-API-Key", "ml_a_1"), ("X-API-Key", "ml_b_2")),
        (("Authorization", "Bearer ml_a_1"), ("X-API-Key", "ml_a_1"), ("X-API-Key", "ml_b_2")),
    ):
        with pytest.raises(AuthenticationError, match="different"):
            presented_key(_conn(*headers))
    # the same key twice is one key
    assert presented_key(_conn(("Authorization", "Bearer ml_a_1"), ("Authorization", "Bearer ml_a_1"))) == "ml_a_1"
    assert presented_key(_conn(("Authorization", "Bearer ml_a_1"), ("X-API-Key", "ml_a_1"))) == "ml_a_1"


def test_two_authorization_headers_with_different_keys_are_401(tmp_path: Path) -> None:
    with KeyStore(tmp_path / "keys.db") as keys:
        acme, globex = keys.create("acme"), keys.create("globex")
        app = create_app(settings(rate_limit=0), hub=make_hub(tmp_path), keys=keys)
        with serve(app) as srv:
            stored = srv.client.post(
                "/v1/memories",
                json={"text": "acme only", "user_id": "u"},
                headers={"Authorization": f"Bearer {acme.secret}"},
            )
            assert stored.status_code == 201
            for first, second in ((acme, globex), (globex, acme)):
                r = srv.client.get(
                    "/v1/memories",
                    params={"user_id": "u"},
                    headers=[("Authorization", f"Bearer {first.secret}"), ("Authorization", f"Bearer {second.secret}")],
                )
                assert r.status_code == 401, r.text
                assert r.json()["error"]["code"] == "unauthenticated"
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
                assert "acme only" not in r.text


# ---------------------------------------------------------------------------- no empty redirects
@pytest.mark.parametrize(
    "path",
    ["/v1/memories/%2F", "/v1/sessions/%2F", "/v1/jobs/%2F", "/v1/memories/", "/v1/sessions/", "/health/"],
)
def test_a_slash_id_is_a_json_404_not_a_redirect(tmp_path: Path, path: str) -> None:
    with serve(create_app(hub=make_hub(tmp_path))) as srv:
        r = srv.client.get(path)  # httpx does not follow redirects unless told to
        assert r.status_code == 404, (path, r.status_code, r.headers)
        assert "location" not in r.headers
        error = r.json()["error"]
        assert error["code"] == "not_found" and path in error["message"]


def test_mcp_over_http_has_the_body_timeout_too(tmp_path: Path) -> None:
    mcp = pytest.importorskip("memlane.service.mcp")
    app = mcp.http_app(make_hub(tmp_path), mcp.fixed_caller("carol"), body_timeout=0.5)
    with serve(app) as srv:
        port = srv.url.rsplit(":", 1)[1]
        request = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n"
        ).encode() + b'{"jsonrpc": '
        received, closed = _raw(srv, request)
        assert received.startswith(b"HTTP/1.1 408"), received
        assert b"request_timeout" in received
        assert closed
