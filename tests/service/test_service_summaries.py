"""``GET /v1/users/{user}/summaries`` over a REAL loopback server: a session formed through the
API is listed with its period, count and topics, narrowed by ``since`` / ``until``; bad input is
a 400 and changes nothing; a user-bound key reads only its own user's summaries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from memlane.service.keys import KeyStore
from service_server import ServiceServer, serve_with_keys
from service_server import service as service

TALK = [
    ("user_message", "alice", "I'm planning a hiking trip to Porto with my sister Ana."),
    ("agent_response", "gaia", "Porto has lovely trails. Do you need a route?"),
    ("user_message", "alice", "Yes please, and I need a light camera for the hiking trip."),
    ("agent_response", "gaia", "A small mirrorless camera suits a hiking trip."),
]


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()


def _form(c: httpx.Client, sid: str, user: str, headers: dict[str, str] | None = None) -> None:
    ok(c.post("/v1/sessions", json={"session_id": sid, "user_ids": [user]}, headers=headers), 201)
    for i, (kind, author, text) in enumerate(TALK):
        event = {"type": kind, "author": author, "content": text, "timestamp": f"2026-11-18T19:0{i}:00Z"}
        ok(c.post(f"/v1/sessions/{sid}/events", json=event, headers=headers), 201)
    job = ok(c.post(f"/v1/sessions/{sid}/form", headers=headers), 202)
    for _ in range(1000):  # readiness wait, not a timing assertion
        state = ok(c.get(job["status_url"], headers=headers))
        if state["status"] in ("done", "failed"):
            assert state["status"] == "done", state
            return
        time.sleep(0.02)
    raise AssertionError(f"job {job} did not finish")


def test_a_formed_session_is_listed_with_its_period_count_and_topics(service: ServiceServer) -> None:
    c = service.client
    assert ok(c.get("/v1/users/alice/summaries")) == {"user_id": "alice", "summaries": []}
    _form(c, "trip-1", "alice")
    body = ok(c.get("/v1/users/alice/summaries"))
    assert body["user_id"] == "alice"
    (s,) = body["summaries"]
    assert (s["session_id"], s["app"], s["user_id"], s["message_count"]) == ("trip-1", "default", "alice", 4)
    assert (s["start"], s["end"], s["version"]) == ("2026-11-18T19:00:00Z", "2026-11-18T19:03:00Z", 1)
    assert s["topics"] == ["hiking", "trip", "Porto", "Ana", "camera"]
    assert s["text"].startswith("Conversation with gaia on Wednesday 18 November 2026, 19:00-19:03 UTC (4 messages).")
    # the memory behind it, through the memory routes
    memory = ok(c.get(f"/v1/memories/{s['id']}", params={"user_id": "alice"}))
    assert memory["kind"] == "summary" and memory["content"] == s["text"]
    listed = ok(c.get("/v1/memories", params={"user_id": "alice", "kind": "summary"}))["memories"]
    assert [m["id"] for m in listed] == [s["id"]]
    # last week, this week
    week = {"since": "2026-11-16", "until": "2026-11-22"}
    assert [x["id"] for x in ok(c.get("/v1/users/alice/summaries", params=week))["summaries"]] == [s["id"]]
    assert ok(c.get("/v1/users/alice/summaries", params={"since": "2026-11-23T00:00:00Z"}))["summaries"] == []
    assert ok(c.get("/v1/users/alice/summaries", params={"agent_id": "other"}))["summaries"] == []
    hits = ok(c.post("/v1/search", json={"query": "what did we talk about on 18 November 2026", "user_id": "alice"}))
    assert hits["hits"][0]["fact"]["id"] == s["id"]
    # bad input: 400, the one error shape
    for params in ({"since": "last week"}, {"since": "2026-11-22", "until": "2026-11-16"}, {"limit": "0"}):
        r = c.get("/v1/users/alice/summaries", params=params)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input", (params, r.text)
    assert ok(c.get("/v1/users/bob/summaries"))["summaries"] == []


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[ServiceServer, KeyStore]]:
    with KeyStore(tmp_path / "keys.db") as keys, serve_with_keys(tmp_path, keys) as srv:
        yield srv, keys


def test_a_user_bound_key_reads_only_its_own_users_summaries(keyed: tuple[ServiceServer, KeyStore]) -> None:
    srv, keys = keyed
    alice = {"Authorization": f"Bearer {keys.create('acme', user_id='alice').secret}"}
    bob = {"Authorization": f"Bearer {keys.create('acme', user_id='bob').secret}"}
    _form(srv.client, "trip-1", "alice", alice)
    assert len(ok(srv.client.get("/v1/users/alice/summaries", headers=alice))["summaries"]) == 1
    r = srv.client.get("/v1/users/alice/summaries", headers=bob)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert "Porto" not in r.text
    assert ok(srv.client.get("/v1/users/bob/summaries", headers=bob))["summaries"] == []
