"""Hot reload through the HTTP service: a request in flight keeps its engine (leased for the
whole request by the `engine` dependency) while the edited YAML serves new requests, and the
routes read the reloaded settings (a real server on loopback, the hub watching the file)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import Request
from test_hub import base_yaml, settings_of, write_config

from memlane.service.app import create_app
from memlane.service.deps import Engine
from memlane.service.deps import settings_of as route_settings
from memlane.service.hub import MemoryHub
from service_server import serve


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def test_in_flight_request_keeps_its_engine_across_a_reload(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "memlane.yaml", base_yaml(tmp_path, "  preload_limit: 10\n") + "  reload_interval: 0.1\n"
    )
    settings = settings_of(cfg)
    hub = MemoryHub.from_settings(settings, drain_seconds=0, watch=True)
    app = create_app(settings, hub=hub)
    started, release = threading.Event(), threading.Event()

    async def slow(memory: Engine) -> dict[str, Any]:
        started.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        facts = await memory.add("I drink green tea", user_id="alice")  # fails if the engine was closed
        return {"preload_limit": memory.formation_config.preload_limit, "id": facts[0].id}

    async def current(request: Request) -> dict[str, Any]:
        return {"preload_limit": route_settings(request).memory.preload_limit}

    app.add_api_route("/test/slow", slow, methods=["POST"])
    app.add_api_route("/test/settings", current, methods=["GET"])
    with serve(app) as srv:
        assert srv.client.get("/test/settings").json() == {"preload_limit": 10}
        result: dict[str, Any] = {}

        def call_slow() -> None:
            with srv.new_client() as client:
                result.update(client.post("/test/slow").json())

        caller = threading.Thread(target=call_slow)
        caller.start()
        assert started.wait(20)
        write_config(cfg, base_yaml(tmp_path, "  preload_limit: 4\n") + "  reload_interval: 0.1\n")
        _wait(lambda: srv.client.get("/test/settings").json() == {"preload_limit": 4})  # routes see the reload
        release.set()
        caller.join(30)
        assert result["preload_limit"] == 10  # finished on the engine it started on, still open
        listed = srv.client.get("/v1/memories", params={"user_id": "alice"}).json()
        assert [m["id"] for m in listed["memories"]] == [result["id"]]  # the new engine sees the write
