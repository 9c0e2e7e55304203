"""Point-in-time memory over HTTP (docs/temporal.md), on a REAL loopback server over SQLite and
PostgreSQL: ``?as_of=`` / ``?valid_at=`` on the memories list and get, search (query string
or body), context and profile; bad times are a 400 that changes nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from memlane import AsyncMemory
from memlane.service.app import create_app
from memlane.service.hub import MemoryHub
from service_server import ServiceServer, serve


@pytest.fixture(params=["sqlite", "pg"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServiceServer]:
    location = str(tmp_path / "memlane.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")

    def factory(where: str) -> AsyncMemory:
        return AsyncMemory(where, embedder="hash", sessions="sqlite")

    with serve(create_app(hub=MemoryHub(factory, location, tmp_path / "tenants"))) as srv:
        yield srv


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()


def infer(c: httpx.Client, text: str, when: str, session: str) -> None:
    """An ``infer=true`` add (a formation job, 202), waited for."""
    said = [{"role": "user", "content": text, "timestamp": when}]
    job = ok(
        c.post("/v1/memories", json={"messages": said, "user_id": "sam", "session_id": session, "infer": True}), 202
    )
    for _ in range(600):
        if ok(c.get(job["status_url"]))["status"] in ("done", "failed"):
            assert ok(c.get(job["status_url"]))["status"] == "done"
            return
        time.sleep(0.05)
    raise AssertionError("the formation job did not finish")


def tick() -> str:
    time.sleep(0.005)
    t = datetime.now(UTC).isoformat()
    time.sleep(0.005)
    return t


def test_as_of_and_valid_at_over_http(service: ServiceServer) -> None:
    c, sam = service.client, {"user_id": "sam"}
    infer(c, "I live in Lisbon", "2023-01-10T09:00:00Z", "a")
    [home] = ok(c.get("/v1/memories", params=sam))["memories"]
    assert home["valid_from"].startswith("2023-01-10")
    t1 = tick()
    infer(c, "I moved to Porto", "2024-05-02T09:00:00Z", "b")
    [jazz] = ok(c.post("/v1/memories", json={"text": "Sam likes jazz concerts", **sam}), 201)["memories"]
    t2 = tick()
    ok(c.delete(f"/v1/memories/{jazz['id']}", params=sam))

    def listed(**params: str) -> list[str]:
        return [m["content"] for m in ok(c.get("/v1/memories", params={**sam, **params}))["memories"]]

    assert listed() == ["Sam moved to Porto"]
    assert listed(as_of=t1) == ["Sam lives in Lisbon"]
    assert listed(as_of=t2) == ["Sam likes jazz concerts", "Sam moved to Porto"]
    assert listed(valid_at="2023-06-01") == ["Sam lives in Lisbon"]
    assert listed(valid_at="2024-06-01T00:00:00Z") == ["Sam moved to Porto"]

    got = ok(c.get(f"/v1/memories/{home['id']}", params={**sam, "as_of": t1}))
    assert (got["content"], got["version"]) == ("Sam lives in Lisbon", 1)
    then = ok(c.get(f"/v1/memories/{home['id']}", params={**sam, "valid_at": "2023-06-01"}))
    assert then["content"] == "Sam lives in Lisbon" and then["invalid_at"].startswith("2024-05-02")
    assert c.get(f"/v1/memories/{home['id']}", params={**sam, "valid_at": "2020-01-01"}).status_code == 404

    def searched(params: dict[str, str] | None = None, **body: Any) -> list[str]:
        r = c.post("/v1/search", params=params, json={"query": "where does Sam live", **sam, **body})
        return [h["fact"]["content"] for h in ok(r)["hits"]]

    assert searched(as_of=t1) == ["Sam lives in Lisbon"]
    assert searched({"as_of": t1}) == ["Sam lives in Lisbon"]
    assert searched(valid_at="2023-06-01") == ["Sam lives in Lisbon"]
    assert "Sam lives in Lisbon" not in searched()
    assert c.post("/v1/search", params={"as_of": t1}, json={"query": "x", **sam, "as_of": t2}).status_code == 400

    ctx = ok(c.get("/v1/context", params={**sam, "as_of": t1}))["context"]
    assert "Lisbon" in ctx and "Porto" not in ctx
    assert "Porto" in ok(c.get("/v1/context", params=sam))["context"]
    assert "Lisbon" in (ok(c.get("/v1/profile", params={**sam, "as_of": t1}))["profile"] or "")

    for url in ("/v1/memories", f"/v1/memories/{home['id']}", "/v1/context", "/v1/profile"):
        r = c.get(url, params={**sam, "as_of": "yesterday-ish"})
        assert r.status_code == 400 and "as_of" in r.json()["error"]["message"], (url, r.text)
    assert c.get("/v1/memories", params={**sam, "valid_at": "nope"}).status_code == 400
    assert listed() == ["Sam moved to Porto"]
