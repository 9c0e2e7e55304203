"""Helpers of the inspector's browser tests (the fixtures are in conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from memlane.service.keys import KeyStore
from service_server import ServiceServer


@dataclass
class Inspector:
    """A running server with keys: ``url`` (``http://127.0.0.1:PORT``), the keys' secrets by
    role, ``client`` (httpx, read-write key), the backend (``sqlite`` / ``pg``)."""

    url: str
    keys: dict[str, str]
    client: httpx.Client
    backend: str
    server: ServiceServer
    key_store: KeyStore
    extra: dict[str, Any] = field(default_factory=dict)

    def client_for(self, role: str) -> httpx.Client:
        """An httpx client with the ``role`` key (close it yourself)."""
        return self.server.new_client(headers={"Authorization": f"Bearer {self.keys[role]}"})


def login(page: Any, inspector: Inspector, role: str = "rw") -> None:
    """Open the inspector and log in with the ``role`` key; returns once the shell shows who is in."""
    page.goto(f"{inspector.url}/ui/")
    page.get_by_label("API key").fill(inspector.keys[role])
    page.get_by_role("button", name="Log in").click()
    page.locator("#who").filter(has_text="tenant default").wait_for()


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()
