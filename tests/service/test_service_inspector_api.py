"""The inspector's read routes (issue 21) over a REAL loopback server, on SQLite and PostgreSQL:
``/v1/reflections``, ``/v1/consolidated``, ``GET /v1/documents``, the token count of
``/v1/context``; a user-bound key reads only its own user (403 naming another, 404 for another's
room), the agent's shared buffer as it reads the agent's shared memories."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from memlane import AsyncMemory
from memlane.engine.context import estimate_tokens
from memlane.models import ConsolidatedMemory, Reflection, utcnow
from memlane.service.app import create_app
from memlane.service.hub import MemoryHub
from memlane.service.keys import KeyStore
from service_server import ServiceServer, serve


@dataclass
class Served:
    server: ServiceServer
    location: str
    headers: dict[str, dict[str, str]]
    """``full``, ``read_only``, ``alice``, ``bob``: Authorization headers."""


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()


def _engine(where: str) -> AsyncMemory:
    return AsyncMemory(where, embedder="hash", sessions="sqlite")


async def _seed(location: str) -> None:
    """Reflections of alice (user scope, one absorbed into a blob), of bob, of the agent gaia and
    of alice's session s1; one consolidated blob of alice."""
    async with _engine(location) as m:
        store = m.reflection_store
        await store.put_reflection(Reflection(content="Alice hikes every weekend.", scope="user", user_id="alice"))
        absorbed = await store.put_reflection(
            Reflection(content="Alice keeps bees.", scope="user", user_id="alice", formed_at=utcnow())
        )
        await store.put_reflection(Reflection(content="Bob plays chess.", scope="user", user_id="bob"))
        await store.put_reflection(Reflection(content="Users like short answers.", scope="agent", agent_id="gaia"))
        await store.put_reflection(
            Reflection(content="Alice asked about Porto.", scope="session", user_id="alice", session_id="s1")
        )
        blob = ConsolidatedMemory(
            scope="user",
            user_id="alice",
            consolidated_content="VERSION: 1\nAlice keeps bees.",
            word_limit=300,
            version=1,
            last_consolidated_at=utcnow(),
        )
        await store.put_consolidated(blob, [absorbed.id], expected_version=0)
        await m.sessions.get_or_create_session(session_id="s1", user_ids=["alice"])


@pytest.fixture(params=["sqlite", "pg"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    location = str(tmp_path / "memlane.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    asyncio.run(_seed(location))
    with KeyStore(tmp_path / "keys.db") as keys:
        headers = {
            name: {"Authorization": f"Bearer {keys.create('default', **kw).secret}"}
            for name, kw in {
                "full": {},
                "read_only": {"read_only": True},
                "alice": {"user_id": "alice"},
                "bob": {"user_id": "bob"},
            }.items()
        }
        from memlane.config import MemlaneSettings, ServerSettings

        app = create_app(
            MemlaneSettings(server=ServerSettings(rate_limit=0)),
            hub=MemoryHub(_engine, location, tmp_path / "tenants"),
            keys=keys,
        )
        with serve(app) as srv:
            yield Served(srv, location, headers)


def test_reflections_by_scope_and_absorption(served: Served) -> None:
    c, h = served.server.client, served.headers
    body = ok(c.get("/v1/reflections", params={"scope": "user", "user_id": "alice"}, headers=h["full"]))
    rows = body["reflections"]
    assert [r["content"] for r in rows] == ["Alice hikes every weekend.", "Alice keeps bees."]
    assert set(rows[0]) == {"id", "content", "scope", "agent_id", "user_id", "session_id", "absorbed", "formed_at"}
    assert [r["absorbed"] for r in rows] == [False, True]
    assert all(r["scope"] == "user" and r["user_id"] == "alice" for r in rows)
    pending = ok(c.get("/v1/reflections", params={"user_id": "alice", "absorbed": "false"}, headers=h["full"]))
    assert [r["content"] for r in pending["reflections"]] == ["Alice hikes every weekend."]
    agent = ok(c.get("/v1/reflections", params={"scope": "agent", "agent_id": "gaia"}, headers=h["full"]))
    assert [r["content"] for r in agent["reflections"]] == ["Users like short answers."]
    session = {"scope": "session", "user_id": "alice", "session_id": "s1"}
    assert [r["content"] for r in ok(c.get("/v1/reflections", params=session, headers=h["full"]))["reflections"]] == [
        "Alice asked about Porto."
    ]
    # bad input: the one error shape, 400
    for params in ({"scope": "galaxy", "user_id": "alice"}, {"scope": "agent"}, {"scope": "session", "user_id": "a"}):
        r = c.get("/v1/reflections", params=params, headers=h["full"])
        assert r.status_code in (400, 422) and "error" in r.json(), (params, r.text)
    # a read-only key reads; a user-bound key reads its own user, the agent's buffer, its room
    assert len(ok(c.get("/v1/reflections", params={"user_id": "alice"}, headers=h["read_only"]))["reflections"]) == 2
    assert len(ok(c.get("/v1/reflections", headers=h["alice"]))["reflections"]) == 2
    r = c.get("/v1/reflections", params={"user_id": "alice"}, headers=h["bob"])
    assert r.status_code == 403 and "bees" not in r.text
    assert [x["content"] for x in ok(c.get("/v1/reflections", headers=h["bob"]))["reflections"]] == ["Bob plays chess."]
    shared = ok(c.get("/v1/reflections", params={"scope": "agent", "agent_id": "gaia"}, headers=h["bob"]))
    assert len(shared["reflections"]) == 1
    assert len(ok(c.get("/v1/reflections", params=session, headers=h["alice"]))["reflections"]) == 1
    r = c.get("/v1/reflections", params={"scope": "session", "session_id": "s1"}, headers=h["bob"])
    assert r.status_code == 404 and "Porto" not in r.text


def test_consolidated_blob_or_null_content(served: Served) -> None:
    c, h = served.server.client, served.headers
    blob = ok(c.get("/v1/consolidated", params={"scope": "user", "user_id": "alice"}, headers=h["full"]))
    assert blob["content"] == "VERSION: 1\nAlice keeps bees."
    assert (blob["scope"], blob["user_id"], blob["version"], blob["word_limit"]) == ("user", "alice", 1, 300)
    assert blob["last_consolidated_at"] is not None and blob["word_count"] == 5
    none = ok(c.get("/v1/consolidated", params={"scope": "agent", "agent_id": "gaia"}, headers=h["full"]))
    assert none["content"] is None and none["version"] == 0 and none["last_consolidated_at"] is None
    assert (none["agent_id"], none["user_id"], none["word_limit"]) == ("gaia", None, 1200)
    assert ok(c.get("/v1/consolidated", headers=h["alice"]))["version"] == 1
    r = c.get("/v1/consolidated", params={"user_id": "alice"}, headers=h["bob"])
    assert r.status_code == 403 and "bees" not in r.text
    assert ok(c.get("/v1/consolidated", headers=h["bob"]))["content"] is None


def test_documents_are_listed_by_page(served: Served) -> None:
    c, h = served.server.client, served.headers
    ids = []
    for i in range(3):
        text = f"# Notes {i}\n\n" + f"Alice's garden plan number {i}. " * 30
        ids.append(ok(c.post("/v1/documents", json={"text": text, "user_id": "alice"}, headers=h["full"]), 201)["id"])
    ok(c.post("/v1/memories", json={"text": "Alice likes tea", "user_id": "alice"}, headers=h["full"]), 201)
    first = ok(c.get("/v1/documents", params={"user_id": "alice", "limit": 2}, headers=h["full"]))
    assert [d["id"] for d in first["documents"]] == ids[:0:-1] and first["total"] == 3
    assert all(d["kind"] == "document" and "garden plan" in d["content"] for d in first["documents"])
    rest = ok(c.get("/v1/documents", params={"user_id": "alice", "cursor": first["next_cursor"]}, headers=h["alice"]))
    assert [d["id"] for d in rest["documents"]] == ids[:1] and rest["next_cursor"] is None
    r = c.get("/v1/documents", params={"user_id": "alice"}, headers=h["bob"])
    assert r.status_code == 403 and "garden" not in r.text
    assert ok(c.get("/v1/documents", headers=h["bob"]))["documents"] == []


def test_context_reports_its_tokens_and_budget(served: Served) -> None:
    c, h = served.server.client, served.headers
    for i in range(12):
        text = f"Alice fact number {i}: she keeps bees and hikes in the mountains near Porto."
        ok(c.post("/v1/memories", json={"text": text, "user_id": "alice"}, headers=h["full"]), 201)
    whole = ok(c.get("/v1/context", params={"user_id": "alice"}, headers=h["full"]))
    assert whole["budget_tokens"] is None and whole["tokens"] == estimate_tokens(whole["context"]) > 60
    cut = ok(c.get("/v1/context", params={"user_id": "alice", "budget_tokens": 60}, headers=h["full"]))
    assert cut["budget_tokens"] == 60 and cut["tokens"] == estimate_tokens(cut["context"]) <= 60
    assert cut["tokens"] < whole["tokens"]


def test_timeline_and_growth_of_a_user(served: Served) -> None:
    c, h = served.server.client, served.headers
    [fact] = ok(c.post("/v1/memories", json={"text": "Alice likes tea", "user_id": "alice"}, headers=h["full"]), 201)[
        "memories"
    ]
    ok(
        c.patch(
            f"/v1/memories/{fact['id']}",
            params={"user_id": "alice"},
            json={"text": "Alice likes green tea"},
            headers=h["full"],
        )
    )
    r = c.delete(f"/v1/memories/{fact['id']}", params={"user_id": "alice"}, headers=h["full"])
    assert r.status_code in (200, 204), r.text
    ok(c.post("/v1/memories", json={"text": "Bob likes chess", "user_id": "bob"}, headers=h["full"]), 201)
    body = ok(c.get("/v1/users/alice/timeline", headers=h["full"]))
    assert body["user_id"] == "alice" and body["next_before"] is None
    events = body["events"]
    assert set(events[0]) >= {
        "id",
        "at",
        "effective_at",
        "fact_id",
        "event",
        "old_content",
        "new_content",
        "actor",
        "kind",
        "scope",
    }
    assert [(e["event"], e["old_content"], e["new_content"]) for e in events] == [
        ("DELETE", "Alice likes green tea", None),
        ("UPDATE", "Alice likes tea", "Alice likes green tea"),
        ("ADD", None, "Alice likes tea"),
    ]
    assert {(e["fact_id"], e["kind"], e["scope"]) for e in events} == {(fact["id"], "fact", "user")}
    first = ok(c.get("/v1/users/alice/timeline", params={"limit": 1}, headers=h["alice"]))
    assert [e["event"] for e in first["events"]] == ["DELETE"] and first["next_before"] == events[0]["at"]
    rest = ok(c.get("/v1/users/alice/timeline", params={"before": first["next_before"]}, headers=h["read_only"]))
    assert [e["event"] for e in rest["events"]] == ["UPDATE", "ADD"]
    r = c.get("/v1/users/alice/timeline", params={"before": "yesterday"}, headers=h["full"])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
    r = c.get("/v1/users/alice/timeline", headers=h["bob"])
    assert r.status_code == 403 and "tea" not in r.text
    assert [e["event"] for e in ok(c.get("/v1/users/bob/timeline", headers=h["bob"]))["events"]] == ["ADD"]

    growth = ok(c.get("/v1/users/alice/growth", params={"bucket": "week"}, headers=h["full"]))
    assert growth["user_id"] == "alice" and growth["bucket"] == "week"
    assert sum(p["added"] for p in growth["points"]) == 1 and sum(p["invalidated"] for p in growth["points"]) == 1
    assert growth["points"][-1]["valid"] == 0 and set(growth["points"][-1]) == {
        "start",
        "added",
        "invalidated",
        "valid",
    }
    assert ok(c.get("/v1/users/bob/growth", headers=h["bob"]))["points"][-1]["valid"] == 1
    r = c.get("/v1/users/alice/growth", headers=h["bob"])
    assert r.status_code == 403
    r = c.get("/v1/users/alice/growth", params={"bucket": "year"}, headers=h["full"])
    assert r.status_code in (400, 422) and "error" in r.json()


def _poll(c: httpx.Client, url: str, headers: dict[str, str]) -> dict[str, Any]:
    for _ in range(1000):  # readiness wait, not a timing assertion
        state: dict[str, Any] = ok(c.get(url, headers=headers))
        if state["status"] in ("done", "failed"):
            return state
        time.sleep(0.02)
    raise AssertionError(f"job {url} did not finish")


def test_consolidate_now_and_the_blobs_versions(served: Served) -> None:
    c, h = served.server.client, served.headers
    # alice's seeded blob is version 1 (its version row came with it); one reflection is pending
    hist = ok(c.get("/v1/consolidated/history", params={"user_id": "alice"}, headers=h["full"]))
    assert [v["version"] for v in hist["versions"]] == [1]
    assert set(hist["versions"][0]) == {"version", "content", "consolidated_at", "word_count", "word_limit"}
    # queued: 202, a consolidate job the page polls until done
    r = c.post("/v1/consolidate", json={"scope": "user", "user_id": "alice"}, headers=h["full"])
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] == "queued" and job["status_url"] == f"/v1/jobs/{job['job_id']}"
    state = _poll(c, job["status_url"], h["full"])
    assert state["status"] == "done" and state["kind"] == "consolidate", state
    assert state["result"]["consolidated"][0]["version"] == 2
    hist = ok(c.get("/v1/consolidated/history", params={"user_id": "alice"}, headers=h["alice"]))["versions"]
    assert [v["version"] for v in hist] == [2, 1]
    assert "weekend" in hist[0]["content"] and "weekend" not in hist[1]["content"]
    assert hist[1]["content"] == "VERSION: 1\nAlice keeps bees." and hist[0]["word_count"] > hist[1]["word_count"]
    assert ok(c.get("/v1/consolidated", headers=h["alice"]))["version"] == 2
    # wait=true: 200 with the new blob; nothing pending afterwards: done, null blob
    r = c.post("/v1/consolidate", json={"scope": "agent", "agent_id": "gaia", "wait": True}, headers=h["full"])
    body = ok(r)
    assert (
        body["status"] == "done" and body["consolidated"]["version"] == 1 and body["consolidated"]["scope"] == "agent"
    )
    assert "short answers" in body["consolidated"]["content"]
    again = ok(c.post("/v1/consolidate", json={"scope": "agent", "agent_id": "gaia", "wait": True}, headers=h["full"]))
    assert again["consolidated"] is None and again["skipped"]
    # a user-bound key consolidates its own user and session, never the agent's shared buffer
    mine = ok(
        c.post("/v1/consolidate", json={"scope": "session", "session_id": "s1", "wait": True}, headers=h["alice"])
    )
    assert mine["consolidated"]["session_id"] == "s1" and mine["consolidated"]["user_id"] == "alice"
    state = _poll(c, f"/v1/jobs/{mine['job_id']}", h["alice"])
    assert state["status"] == "done" and state["user_id"] == "alice"
    for who, payload, status in (
        ("alice", {"scope": "agent", "agent_id": "gaia"}, 403),
        ("bob", {"scope": "user", "user_id": "alice"}, 403),
        ("bob", {"scope": "session", "session_id": "s1"}, 404),
        ("read_only", {"scope": "user", "user_id": "alice"}, 403),
    ):
        r = c.post("/v1/consolidate", json=payload, headers=h[who])
        assert r.status_code == status, (who, payload, r.text)
    r = c.get(f"/v1/jobs/{mine['job_id']}", headers=h["bob"])
    assert r.status_code == 404
    r = c.get("/v1/consolidated/history", params={"user_id": "alice"}, headers=h["bob"])
    assert r.status_code == 403 and "bees" not in r.text
    r = c.post("/v1/consolidate", json={"scope": "user", "user_id": "alice", "extra": 1}, headers=h["full"])
    assert r.status_code in (400, 422) and "error" in r.json()
    # forget erases alice's versions (bob's stay)
    ok(c.post("/v1/consolidate", json={"scope": "user", "user_id": "bob", "wait": True}, headers=h["full"]))
    ok(c.delete("/v1/users/alice", headers=h["full"]))
    assert ok(c.get("/v1/consolidated/history", params={"user_id": "alice"}, headers=h["full"]))["versions"] == []
    assert len(ok(c.get("/v1/consolidated/history", params={"user_id": "bob"}, headers=h["full"]))["versions"]) == 1
