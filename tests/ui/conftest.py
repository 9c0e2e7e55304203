"""The inspector's browser tests: headless Chromium (Debian's ``chromium``, driven by Playwright
with ``executable_path``; Playwright's own browser download is not used) against a REAL memlane
server on loopback, over SQLite and over PostgreSQL.

Fixtures:

* ``browser`` (session): Chromium, started once.
* ``inspector``: a server with API keys over a fresh store, parametrized ``sqlite`` / ``pg``:
  ``inspector.keys["rw" | "ro" | "ann"]`` (read-write, read-only, bound to user ``ann``),
  ``inspector.client`` (httpx with the read-write key: seed data, check what was stored).
* ``page``: a fresh browser context and page; any JavaScript error on the page fails the test.
* :func:`login`: open ``/ui/`` and log in with a key.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("playwright.sync_api")

from inspector_helpers import Inspector, login, ok  # noqa: F401  (re-exported for the tests)
from playwright import sync_api

from memlane import AsyncMemory
from memlane.config import MemlaneSettings, ServerSettings
from memlane.service.app import create_app
from memlane.service.hub import MemoryHub
from memlane.service.keys import KeyStore
from service_server import serve, service  # noqa: F401  (the fixture, for these tests)

#: Where Debian's chromium package puts the browser (override with $MEMLANE_CHROMIUM).
CHROMIUM = os.environ.get("MEMLANE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
#: The flags a root, offline, headless Chromium needs here (no sandbox as root; no calls home).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        reason = f"Chromium not found at {CHROMIUM} (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(params=["sqlite", "pg"])
def inspector(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Inspector]:
    backend = request.param
    location = str(tmp_path / "memlane.db") if backend == "sqlite" else request.getfixturevalue("pg_url")

    def factory(where: str) -> AsyncMemory:
        return AsyncMemory(where, embedder="hash", sessions="sqlite")

    keys = KeyStore(tmp_path / "keys.db")
    secrets = {
        "rw": keys.create("default", name="inspector rw").secret,
        "ro": keys.create("default", read_only=True, name="inspector ro").secret,
        "ann": keys.create("default", user_id="ann", name="inspector ann").secret,
    }
    settings = MemlaneSettings(server=ServerSettings(rate_limit=0))
    app = create_app(settings, hub=MemoryHub(factory, location, tmp_path / "tenants"), keys=keys)
    try:
        with serve(app, headers={"Authorization": f"Bearer {secrets['rw']}"}) as srv:
            yield Inspector(srv.url, secrets, srv.client, backend, srv, keys)
    finally:
        keys.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The browser tests run after every other test of the run: Playwright's sync API keeps an event
    loop marked as running in the main thread while the session's browser is open, and a later
    ``asyncio.run()`` (the SQL core's tests, for one) would fail with "cannot be called from a
    running event loop"."""
    here = Path(__file__).parent
    items.sort(key=lambda item: here in Path(str(item.path)).parents)
