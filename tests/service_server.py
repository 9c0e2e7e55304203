"""A REAL memlane HTTP server on 127.0.0.1 for service tests (uvicorn in a thread, a real socket).

Usage::

    from service_server import ServiceServer, serve, make_hub

    def test_x(tmp_path):
        with serve(create_app(hub=make_hub(tmp_path))) as srv:
            r = srv.client.get("/health")            # httpx.Client bound to srv.url

or the ``service`` fixture (register it with ``pytest_plugins = ("service_server",)`` or import
it: ``from service_server import service  # noqa: F401``): a server on a fresh tmp store with the
hash embedder and the offline formation model, no keys.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from memlane import AsyncMemory
from memlane.service.hub import MemoryHub


def make_hub(tmp_path: Path, **engine_kwargs: Any) -> MemoryHub:
    """A hub over ``tmp_path/memlane.db`` (tenant ``default``) and ``tmp_path/tenants/*.db``,
    engines with the hash embedder and sqlite sessions unless ``engine_kwargs`` say otherwise."""
    kwargs: dict[str, Any] = {"embedder": "hash", "sessions": "sqlite"} | engine_kwargs

    def factory(location: str) -> AsyncMemory:
        return AsyncMemory(location, **kwargs)

    return MemoryHub(factory, str(tmp_path / "memlane.db"), tmp_path / "tenants")


@dataclass
class ServiceServer:
    """A running server: ``url`` (``http://127.0.0.1:PORT``) and an httpx ``client`` bound to it."""

    url: str
    client: httpx.Client
    app: Any

    def new_client(self, **kwargs: Any) -> httpx.Client:
        """Another client for this server (e.g. with other headers); close it yourself."""
        return httpx.Client(base_url=self.url, timeout=30.0, **kwargs)


@contextmanager
def serve(app: Any, *, headers: dict[str, str] | None = None) -> Iterator[ServiceServer]:
    """Run ``app`` with uvicorn on a free loopback port until the block ends (lifespan on, so
    the hub is closed at the end)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: without it every answer waited ~40 ms for the client's
    # delayed ACK (Nagle on uvicorn's separate header and body writes): 45 ms vs 0.7 ms a request
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # surfaced by the fixture
            errors.append(exc)

    thread = threading.Thread(target=run, name="memlane-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if errors or not thread.is_alive():
            raise RuntimeError(f"the test server did not start: {errors!r}")
        if time.monotonic() > deadline:
            raise RuntimeError("the test server did not start within 30 s")
        time.sleep(0.01)
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=url, timeout=30.0, headers=headers)
    try:
        yield ServiceServer(url=url, client=client, app=app)
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        if errors:
            raise RuntimeError(f"the test server failed: {errors!r}")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceServer]:
    """memlane's app (no keys, tenant ``default``) on a real loopback server over a tmp store."""
    from memlane.service.app import create_app

    with serve(create_app(hub=make_hub(tmp_path))) as srv:
        yield srv


@contextmanager
def serve_with_keys(tmp_path: Path, keys: Any) -> Iterator[ServiceServer]:
    """memlane's app enforcing ``keys`` (a :class:`~memlane.service.keys.KeyStore`), rate limit
    off, on a real loopback server over a tmp store."""
    from memlane.config import MemlaneSettings, ServerSettings
    from memlane.service.app import create_app

    app = create_app(MemlaneSettings(server=ServerSettings(rate_limit=0)), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as srv:
        yield srv
