"""The HTTP API's backbone against a REAL server on loopback (uvicorn thread, httpx): health,
sessions and events, formation jobs (202), KAOS endpoints, the adk-rs ingest endpoint, the
error format and status codes, and isolation between keys (tenants, users, read-only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from memlane import Memory, __version__
from memlane.config import load_settings
from memlane.formation.config import FormationConfig
from memlane.service.app import create_app
from memlane.service.keys import KeyStore
from service_server import ServiceServer, make_hub, serve


def _app(tmp_path: Path, *, env: dict[str, str] | None = None, keys: KeyStore | None = None, **engine: Any) -> Any:
    return create_app(load_settings(env=env or {}), hub=make_hub(tmp_path, **engine), keys=keys)


def _settings_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """An environment for a server whose engines the settings build (everything under tmp_path)."""
    return {
        "MEMLANE_DB": str(tmp_path / "memlane.db"),
        "MEMLANE_EMBEDDER": "hash",
        "MEMLANE_KEYS_FILE": str(tmp_path / "keys.db"),
        "MEMLANE_TENANTS_DIR": str(tmp_path / "tenants"),
        **env,
    }


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[ServiceServer]:
    with serve(_app(tmp_path)) as server:
        yield server


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body["error"])


def _session(c: httpx.Client, sid: str, users: list[str], app: str = "hotel") -> None:
    r = c.post("/v1/sessions", json={"app": app, "session_id": sid, "user_ids": users})
    assert r.status_code == 201, r.text


def _say(
    c: httpx.Client, sid: str, text: str, *, type: str = "user_message", author: str = "user", app: str = "hotel"
) -> httpx.Response:
    return c.post(
        f"/v1/sessions/{sid}/events", params={"app": app}, json={"type": type, "content": text, "author": author}
    )


def _wait_job(c: httpx.Client, url: str) -> dict[str, Any]:
    for _ in range(2000):  # bounded polling, no timing assertion
        job = c.get(url).json()
        if job["status"] in ("done", "failed"):
            return dict(job)
        c.get("/health")
    raise AssertionError(f"job {url} did not finish: {job}")


# --------------------------------------------------------------------------- health


def test_health_and_version(srv: ServiceServer) -> None:
    assert srv.client.get("/health").json() == {"status": "ok"}
    assert srv.client.get("/version").json() == {"name": "memlane", "version": __version__}


def test_unknown_route_and_method_use_the_error_shape(srv: ServiceServer) -> None:
    _error(srv.client.get("/nope"), 404, "not_found")
    _error(srv.client.put("/health"), 405, "method_not_allowed")


# --------------------------------------------------------------------------- sessions and events


def test_session_crud(srv: ServiceServer) -> None:
    c = srv.client
    r = c.post("/v1/sessions", json={"app": "hotel", "session_id": "s1", "user_ids": ["alice"], "channel": "web"})
    assert r.status_code == 201
    assert r.json()["id"] == "s1" and r.json()["user_ids"] == ["alice"] and r.json()["channel"] == "web"
    _error(c.post("/v1/sessions", json={"app": "hotel", "session_id": "s1"}), 409, "conflict")
    _session(c, "s2", ["bob"])
    listed = c.get("/v1/sessions", params={"app": "hotel"}).json()
    assert {s["id"] for s in listed["sessions"]} == {"s1", "s2"} and listed["total"] == 2
    only = c.get("/v1/sessions", params={"app": "hotel", "user_id": "bob"}).json()
    assert [s["id"] for s in only["sessions"]] == ["s2"]
    assert c.get("/v1/sessions", params={"app": "other"}).json() == {"sessions": [], "total": 0}
    got = c.get("/v1/sessions/s1", params={"app": "hotel"})
    assert got.status_code == 200 and got.json()["events"] == []
    _error(c.get("/v1/sessions/s1"), 404, "not_found")  # app "default": another namespace
    assert c.delete("/v1/sessions/s1", params={"app": "hotel"}).status_code == 204
    _error(c.get("/v1/sessions/s1", params={"app": "hotel"}), 404, "not_found")
    _error(c.delete("/v1/sessions/s1", params={"app": "hotel"}), 404, "not_found")


def test_events_append_and_list(srv: ServiceServer) -> None:
    c = srv.client
    _session(c, "s1", ["alice"])
    r = _say(c, "s1", "I prefer rooms on high floors.", author="alice")
    assert r.status_code == 201 and r.json()["type"] == "user_message" and r.json()["author"] == "alice"
    _say(c, "s1", "Noted.", type="agent_response", author="concierge")
    _say(c, "s1", "search", type="tool_call", author="concierge")
    events = c.get("/v1/sessions/s1/events", params={"app": "hotel"}).json()
    assert [e["content"] for e in events["events"]] == ["I prefer rooms on high floors.", "Noted.", "search"]
    some = c.get("/v1/sessions/s1/events", params={"app": "hotel", "event_types": ["agent_response", "tool_call"]})
    assert [e["type"] for e in some.json()["events"]] == ["agent_response", "tool_call"]
    last = c.get("/v1/sessions/s1/events", params={"app": "hotel", "limit": 1}).json()
    assert [e["content"] for e in last["events"]] == ["search"]
    full = c.get("/v1/sessions/s1", params={"app": "hotel"}).json()
    assert len(full["events"]) == 3
    _error(_say(c, "missing", "hi"), 404, "not_found")


def test_append_runs_the_formation_triggers(tmp_path: Path) -> None:
    # message_interval=4: after the 4th message (an agent reply) a formation job is queued. The
    # store's own add_event (no triggers) would queue nothing.
    with serve(_app(tmp_path, formation=FormationConfig(message_interval=4))) as s:
        c = s.client
        _session(c, "s1", ["alice"])
        for i in range(2):
            _say(c, "s1", f"My sister {i} lives in Lisbon.", author="alice")
            _say(c, "s1", "Noted.", type="agent_response", author="concierge")
        jobs = c.get("/v1/jobs").json()["jobs"]
        assert [(j["kind"], j["session_id"], j["app"]) for j in jobs] == [("form", "s1", "hotel")]
        _wait_job(c, f"/v1/jobs/{jobs[0]['id']}")


@pytest.mark.parametrize("what", ["form", "end", "reset"])
def test_form_end_reset_return_202_and_a_job(srv: ServiceServer, what: str) -> None:
    c = srv.client
    _session(c, "s1", ["alice"])
    _say(c, "s1", "I am allergic to peanuts.", author="alice")
    _say(c, "s1", "I will remember that.", type="agent_response", author="concierge")
    r = c.post(f"/v1/sessions/s1/{what}", params={"app": "hotel"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert set(body) == {"job_id", "status", "status_url"}
    assert body["status_url"] == f"/v1/jobs/{body['job_id']}" == r.headers["location"]
    job = _wait_job(c, body["status_url"])
    assert job["status"] == "done" and job["kind"] == "form" and job["session_id"] == "s1"
    assert job["result"]["changes"] and "embedding" not in job["result"]["changes"][0]["fact"]
    gone = c.get("/v1/sessions/s1", params={"app": "hotel"})
    assert gone.status_code == (404 if what == "reset" else 200)
    _error(c.post(f"/v1/sessions/nope/{what}", params={"app": "hotel"}), 404, "not_found")


def test_jobs_list_get_retry(srv: ServiceServer) -> None:
    c = srv.client
    _session(c, "s1", ["alice"])
    _say(c, "s1", "I live in Porto.", author="alice")
    job_id = c.post("/v1/sessions/s1/form", params={"app": "hotel"}).json()["job_id"]
    _wait_job(c, f"/v1/jobs/{job_id}")
    assert [j["id"] for j in c.get("/v1/jobs", params={"status": "done"}).json()["jobs"]] == [job_id]
    assert c.get("/v1/jobs", params={"status": "failed"}).json() == {"jobs": [], "total": 0}
    retried = c.post(f"/v1/jobs/{job_id}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "done"  # only failed/queued jobs re-queue
    _error(c.get("/v1/jobs/nope"), 404, "not_found")
    _error(c.post("/v1/jobs/nope/retry"), 404, "not_found")
    _error(c.get("/v1/jobs", params={"status": "odd"}), 422, "validation_error")


# --------------------------------------------------------------------------- KAOS


def test_kaos_events_and_sessions(srv: ServiceServer) -> None:
    c = srv.client
    _session(c, "s1", ["alice"], app="default")
    _session(c, "s2", ["bob"], app="default")
    for i in range(3):
        _say(c, "s1", f"a{i}", app="default")
    _say(c, "s2", "b0", app="default")
    sessions = c.get("/memory/sessions").json()
    assert set(sessions) == {"agent", "sessions", "total"}
    assert sessions["agent"] == "default" and sorted(sessions["sessions"]) == ["s1", "s2"] and sessions["total"] == 2
    events = c.get("/memory/events").json()
    assert set(events) == {"agent", "events", "total"} and events["total"] == 4
    assert set(events["events"][0]) == {"event_id", "timestamp", "event_type", "content", "metadata"}
    assert [e["content"] for e in events["events"]] == ["a0", "a1", "a2", "b0"]
    one = c.get("/memory/events", params={"session_id": "s1", "limit": 2}).json()
    assert [e["content"] for e in one["events"]] == ["a1", "a2"] and one["events"][0]["event_type"] == "user_message"
    assert [e["content"] for e in c.get("/memory/events", params={"limit": 1}).json()["events"]] == ["b0"]
    nope = c.get("/memory/events", params={"session_id": "nope"})  # KAOS: an unknown session has no events
    assert nope.status_code == 200 and nope.json() == {"agent": "default", "events": [], "total": 0}
    assert c.get("/memory/events", params={"session_id": "s1", "app": "hotel"}).json()["events"] == []
    _error(c.get("/memory/events", params={"limit": 0}), 400, "invalid_input")
    _error(c.get("/memory/events", params={"limit": 10_000}), 400, "invalid_input")
    assert c.get("/memory/sessions", params={"app": "hotel"}).json() == {"agent": "hotel", "sessions": [], "total": 0}


def test_kaos_endpoints_are_empty_when_memory_is_off(tmp_path: Path) -> None:
    """KAOS MEMORY_ENABLED=false is NullMemory: no session history is kept at all."""
    settings = load_settings(env=_settings_env(tmp_path, MEMORY_ENABLED="false"))
    assert settings.sessions.backend == "null" and settings.source("sessions.backend") == "env:MEMORY_ENABLED"
    with serve(create_app(settings)) as s:
        _session(s.client, "s1", ["alice"], app="default")
        _say(s.client, "s1", "hello", app="default")
        assert s.client.get("/memory/events").json() == {"agent": "default", "events": [], "total": 0}
        assert s.client.get("/memory/events", params={"session_id": "s1"}).json()["events"] == []
        assert s.client.get("/memory/sessions").json() == {"agent": "default", "sessions": [], "total": 0}
        _error(s.client.get("/v1/sessions/s1/events"), 404, "not_found")  # not only the KAOS endpoints
    with Memory(tmp_path / "memlane.db", embedder="hash") as m:
        assert m.sessions.get_session("s1") is None  # nothing reached the store either


def test_gaia_memory_enabled_false_keeps_sessions(tmp_path: Path) -> None:
    """Gaia's memory.enabled: false (the file) turns off long-term memory only: sessions stay."""
    cfg = tmp_path / "memlane.yaml"
    cfg.write_text("memory:\n  enabled: false\n", encoding="utf-8")
    settings = load_settings(cfg, env=_settings_env(tmp_path))
    assert settings.sessions.backend == "sqlite"
    with serve(create_app(settings)) as s:
        _session(s.client, "s1", ["alice"], app="default")
        _say(s.client, "s1", "hello", app="default")
        assert [e["content"] for e in s.client.get("/memory/events").json()["events"]] == ["hello"]


# --------------------------------------------------------------------------- adk-rs ingest


def test_adk_ingest_stores_one_memory_per_event(tmp_path: Path) -> None:
    with serve(_app(tmp_path)) as s:
        c = s.client
        _session(c, "trip-1", ["alice"])
        _say(c, "trip-1", "I prefer rooms on high floors.", author="alice")
        _say(c, "trip-1", "", type="tool_call", author="concierge")  # no text: skipped
        _say(c, "trip-1", "Noted: high floors.", type="agent_response", author="concierge")
        r = c.patch("/apps/hotel/users/alice/memory", json={"sessionId": "trip-1"})
        assert r.status_code == 200, r.text
        assert r.json() == {"app": "hotel", "user": "alice", "sessionId": "trip-1", "stored": 2, "scope": "user"}
        again = c.patch("/apps/hotel/users/alice/memory", json={"sessionId": "trip-1"})
        assert again.json()["stored"] == 2
        _error(c.patch("/apps/hotel/users/alice/memory", json={"sessionId": "nope"}), 404, "not_found")
        _error(c.patch("/apps/hotel/users/bob/memory", json={"sessionId": "trip-1"}), 404, "not_found")  # not bob's
        _error(c.patch("/apps/spa/users/alice/memory", json={"sessionId": "trip-1"}), 404, "not_found")
        _error(c.patch("/apps/hotel/users/alice/memory", json={}), 422, "validation_error")
        _error(c.patch("/apps/hotel/users/alice/memory", json={"sessionId": 5}), 422, "validation_error")
        _error(c.patch("/apps/hotel/users/alice/memory", content=b"{not json"), 422, "validation_error")
        _session(c, "party", ["alice", "bob"])
        _say(c, "party", "We all like jazz.", author="bob")
        g = c.patch("/apps/hotel/users/alice/memory", json={"sessionId": "party"})
        assert g.status_code == 200 and g.json()["scope"] == "agent" and g.json()["stored"] == 1
    with Memory(tmp_path / "memlane.db", embedder="hash") as m:
        mine = m.list(user_id="alice", agent_id="hotel", limit=50)
        assert sorted((f.content, f.author) for f in mine.items if f.scope == "user") == [
            ("I prefer rooms on high floors.", "alice"),
            ("Noted: high floors.", "concierge"),
        ]
        assert all(f.occurred_at is not None and f.session_id == "trip-1" for f in mine.items if f.scope == "user")
        assert [f.content for f in m.list(user_id="bob", agent_id="hotel").items if f.scope == "user"] == []
        shared = [f.content for f in m.list(agent_id="hotel").items]
        assert shared == ["We all like jazz."]


def test_adk_ingest_400_when_no_memory_service(tmp_path: Path) -> None:
    with serve(_app(tmp_path, env={"MEMORY_ENABLED": "false"})) as s:
        _session(s.client, "trip-1", ["alice"])
        err = _error(
            s.client.patch("/apps/hotel/users/alice/memory", json={"sessionId": "trip-1"}), 400, "config_error"
        )
        assert "no memory service" in err["message"]


# --------------------------------------------------------------------------- bad input never 5xx

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("method", "url", "kwargs"),
    [
        ("post", "/v1/sessions", {"content": b"\xff\xfe", "headers": JSON}),
        ("post", "/v1/sessions", {"json": {"app": "hotel", "user_ids": "alice"}}),
        ("post", "/v1/sessions", {"json": {"app": "", "session_id": "x"}}),
        ("post", "/v1/sessions", {"content": b'{"session_id": "x", "state": {"a": Infinity}}', "headers": JSON}),
        ("post", "/v1/sessions", {"json": {"app": "hotel", "session_id": "x" * 5000}}),
        ("post", "/v1/sessions", {"json": {"app": "hotel", "user_ids": ["a" * 5000]}}),
        ("post", "/v1/sessions", {"json": {"unknown": 1}}),
        ("post", "/v1/sessions/s1/events", {"json": {"type": "nope", "content": "x"}}),
        ("post", "/v1/sessions/s1/events", {"json": {"content": "x"}, "params": {"tier": -1}}),
        ("post", "/v1/sessions/s1/events", {"json": {"content": "x", "timestamp": "yesterday"}}),
        ("post", "/v1/sessions/s1/events", {"json": [1, 2]}),
        ("post", "/v1/sessions/s1/events", {"content": b'{"content": {"x": NaN}}', "headers": JSON}),
        ("get", "/v1/sessions/s1/events", {"params": {"limit": "many"}}),
        ("get", "/v1/sessions/s1/events", {"params": {"limit": -5}}),
        ("get", "/v1/sessions", {"params": {"app": " "}}),
        ("get", "/v1/sessions/" + "x" * 5000, {}),
        ("get", "/memory/events", {"params": {"session_id": "", "limit": "1e9"}}),
        ("patch", "/apps/%20/users/alice/memory", {"json": {"sessionId": "s1"}}),
        ("patch", "/apps/hotel/users/alice/memory", {"json": {"sessionId": ""}}),
        ("get", "/v1/jobs", {"params": {"limit": 0}}),
    ],
)
def test_bad_input_is_4xx_in_the_error_shape(srv: ServiceServer, method: str, url: str, kwargs: Any) -> None:
    _session(srv.client, "s1", ["alice"])
    r = srv.client.request(method.upper(), url, **kwargs)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["error"]["code"] in {"invalid_input", "invalid_scope", "validation_error", "not_found"}


def test_unexpected_errors_are_500_without_details(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from fastapi import APIRouter

    app = _app(tmp_path)
    boom = APIRouter()

    @boom.get("/boom")
    async def explode() -> None:
        raise RuntimeError("secret internals")

    app.include_router(boom)
    with serve(app) as s, caplog.at_level("ERROR", logger="memlane.service"):
        r = s.client.get("/boom")
    err = _error(r, 500, "internal_error")
    assert "secret" not in err["message"]
    assert any("RuntimeError" in rec.getMessage() for rec in caplog.records)


# --------------------------------------------------------------------------- keys: tenants, users, read-only


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[ServiceServer, dict[str, str]]]:
    keys = KeyStore(tmp_path / "keys.db")
    made = {
        "a": keys.create("acme").secret,
        "a_alice": keys.create("acme", user_id="alice").secret,
        "a_bob": keys.create("acme", user_id="bob").secret,
        "a_ro": keys.create("acme", read_only=True).secret,
        "b": keys.create("globex").secret,
    }
    with serve(_app(tmp_path, keys=keys)) as server:
        yield server, made
    keys.close()


def _as(s: ServiceServer, key: str) -> httpx.Client:
    return s.new_client(headers={"Authorization": f"Bearer {key}"})


def test_keys_required_once_configured(keyed: tuple[ServiceServer, dict[str, str]]) -> None:
    s, _ = keyed
    r = s.client.get("/v1/sessions")
    _error(r, 401, "unauthenticated")
    assert r.headers["www-authenticate"].startswith("Bearer")
    _error(s.client.get("/memory/sessions", headers={"Authorization": "Bearer ml_nope_nope"}), 401, "unauthenticated")
    assert s.client.get("/health").status_code == 200  # liveness needs no key


def test_tenants_are_isolated(keyed: tuple[ServiceServer, dict[str, str]]) -> None:
    s, k = keyed
    with _as(s, k["a"]) as a, _as(s, k["b"]) as b:
        _session(a, "s1", ["alice"], app="default")
        _say(a, "s1", "acme secret", app="default")
        assert b.get("/memory/sessions").json()["sessions"] == []
        assert b.get("/memory/events").json()["events"] == []
        _error(b.get("/v1/sessions/s1"), 404, "not_found")
        assert b.get("/memory/events", params={"session_id": "s1"}).json()["events"] == []  # as if unknown
        _error(_say(b, "s1", "intrusion", app="default"), 404, "not_found")
        _error(b.patch("/apps/default/users/alice/memory", json={"sessionId": "s1"}), 404, "not_found")
        _error(b.post("/v1/sessions/s1/form"), 404, "not_found")
        job = a.post("/v1/sessions/s1/form").json()["job_id"]
        _error(b.get(f"/v1/jobs/{job}"), 404, "not_found")
        assert b.get("/v1/jobs").json()["jobs"] == []
        assert [e["content"] for e in a.get("/memory/events").json()["events"]] == ["acme secret"]


def test_user_bound_keys_see_only_their_sessions(keyed: tuple[ServiceServer, dict[str, str]]) -> None:
    s, k = keyed
    with _as(s, k["a"]) as admin, _as(s, k["a_alice"]) as alice, _as(s, k["a_bob"]) as bob:
        mine = alice.post("/v1/sessions", json={"app": "hotel", "session_id": "s-alice"})
        assert mine.status_code == 201 and mine.json()["user_ids"] == ["alice"]  # defaults to the key's user
        _error(
            alice.post("/v1/sessions", json={"app": "hotel", "session_id": "x", "user_ids": ["bob"]}), 403, "forbidden"
        )
        _say(alice, "s-alice", "alice's private note", author="alice")
        _session(admin, "s-group", ["alice", "bob"])
        _session(admin, "s-carol", ["carol"])
        assert [x["id"] for x in bob.get("/v1/sessions", params={"app": "hotel"}).json()["sessions"]] == ["s-group"]
        _error(bob.get("/v1/sessions", params={"app": "hotel", "user_id": "alice"}), 403, "forbidden")
        _error(bob.get("/v1/sessions/s-alice", params={"app": "hotel"}), 404, "not_found")
        _error(bob.get("/v1/sessions/s-alice/events", params={"app": "hotel"}), 404, "not_found")
        _error(_say(bob, "s-alice", "bob writes"), 404, "not_found")
        _error(bob.delete("/v1/sessions/s-alice", params={"app": "hotel"}), 404, "not_found")
        _error(bob.post("/v1/sessions/s-alice/form", params={"app": "hotel"}), 404, "not_found")
        kaos = bob.get("/memory/events", params={"app": "hotel", "session_id": "s-alice"})
        assert kaos.json() == {"agent": "hotel", "events": [], "total": 0}  # as an unknown session (KAOS)
        assert bob.get("/memory/sessions", params={"app": "hotel"}).json()["sessions"] == ["s-group"]
        assert "alice's private note" not in bob.get("/memory/events", params={"app": "hotel"}).text
        _error(bob.patch("/apps/hotel/users/alice/memory", json={"sessionId": "s-alice"}), 404, "not_found")
        _error(bob.patch("/apps/hotel/users/bob/memory", json={"sessionId": "s-alice"}), 404, "not_found")
        # a group session goes to the app's shared memory, which a user-bound key may not write
        _error(bob.patch("/apps/hotel/users/bob/memory", json={"sessionId": "s-group"}), 403, "forbidden")
        assert alice.patch("/apps/hotel/users/alice/memory", json={"sessionId": "s-alice"}).status_code == 200
        job = alice.post("/v1/sessions/s-alice/form", params={"app": "hotel"}).json()["job_id"]
        assert alice.get(f"/v1/jobs/{job}").status_code == 200
        _error(bob.get(f"/v1/jobs/{job}"), 404, "not_found")
        _error(bob.post(f"/v1/jobs/{job}/retry"), 404, "not_found")
        assert job not in bob.get("/v1/jobs").text
        assert job in admin.get("/v1/jobs").text


def test_read_only_keys_cannot_write(keyed: tuple[ServiceServer, dict[str, str]]) -> None:
    s, k = keyed
    with _as(s, k["a"]) as admin, _as(s, k["a_ro"]) as ro:
        _session(admin, "s1", ["alice"])
        _say(admin, "s1", "hello", author="alice")
        assert ro.get("/v1/sessions/s1/events", params={"app": "hotel"}).json()["total"] == 1
        assert ro.get("/memory/events", params={"app": "hotel"}).json()["total"] == 1
        _error(ro.post("/v1/sessions", json={"app": "hotel", "session_id": "s2"}), 403, "forbidden")
        _error(_say(ro, "s1", "write"), 403, "forbidden")
        _error(ro.delete("/v1/sessions/s1", params={"app": "hotel"}), 403, "forbidden")
        _error(ro.post("/v1/sessions/s1/form", params={"app": "hotel"}), 403, "forbidden")
        _error(ro.patch("/apps/hotel/users/alice/memory", json={"sessionId": "s1"}), 403, "forbidden")
        job = admin.post("/v1/sessions/s1/form", params={"app": "hotel"}).json()["job_id"]
        _error(ro.post(f"/v1/jobs/{job}/retry"), 403, "forbidden")
        assert admin.get("/v1/sessions/s1/events", params={"app": "hotel"}).json()["total"] == 1


def test_rate_limit_is_429_with_retry_after(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys.db")
    secret = keys.create("acme").secret
    app = create_app(load_settings(env={"MEMLANE_RATE_LIMIT": "1"}), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as s, _as(s, secret) as c:
        assert c.get("/memory/sessions").status_code == 200
        r = c.get("/memory/sessions")
        err = _error(r, 429, "rate_limited")
        assert int(r.headers["retry-after"]) >= 1 and err["retry_after"] == int(r.headers["retry-after"])
    keys.close()


# --------------------------------------------------------------------------- memlane serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_memlane_serve_runs_a_loopback_server_without_keys(tmp_path: Path) -> None:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "memlane.cli.main",
        "serve",
        "--port",
        str(port),
        "--db",
        str(tmp_path / "m.db"),
        "--embedder",
        "hash",
        "--keys",
        str(tmp_path / "keys.db"),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "HOME": str(tmp_path)})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:
            for _ in range(600):  # bounded wait for the process to listen
                try:
                    health = c.get("/health")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                    time.sleep(0.05)
            else:
                raise AssertionError("memlane serve did not start")
            assert health.json() == {"status": "ok"}
            assert c.post("/v1/sessions", json={"session_id": "s1", "user_ids": ["alice"]}).status_code == 201
            assert c.get("/memory/sessions").json()["sessions"] == ["s1"]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "no API keys configured: serving on loopback only" in err


def test_memlane_serve_refuses_a_public_host_without_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from memlane.cli.main import main
    from memlane.cli.serve_cmd import check_host

    code = main(["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "m.db"), "--keys", str(tmp_path / "k.db")])
    assert code == 2
    err = capsys.readouterr().err
    assert "refusing to serve on 0.0.0.0" in err and "memlane keys create" in err
    check_host("0.0.0.0", keys=True)  # with keys any interface is allowed
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_host(host, keys=False)
    with pytest.raises(Exception, match="refusing"):
        check_host("192.168.1.5", keys=False)
