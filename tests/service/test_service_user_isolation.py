"""One user never reaches another user's data inside a tenant (issue 17, section 6): the
reproductions, each on a real loopback server with user-bound keys.

* formation jobs stay with the participants of the session they were queued for: a session id
  reused by another user (after ``/reset``) reaches none of them;
* room memories are read only by users taking part in the room's session in every app that has
  a session of that id (a room is keyed by agent and session id, not by app);
* the session cap (KAOS's 1,000 in-process / Redis sessions) evicts only the creator's own
  sessions: one user creating sessions never evicts another's (tests/stores/test_session_eviction.py
  has the store-level cases).

The import case is in tests/service/test_service_import.py; all of them are also in the isolation
property (tests/isolation_property.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from memlane.config import MemlaneSettings, ServerSettings
from memlane.service.app import create_app
from memlane.service.auth import KeyStore
from service_server import ServiceServer, make_hub, serve, serve_with_keys


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[KeyStore]:
    with KeyStore(tmp_path / "keys.db") as store:
        yield store


@pytest.fixture
def srv(tmp_path: Path, keys: KeyStore) -> Iterator[ServiceServer]:
    with serve_with_keys(tmp_path, keys) as server:
        yield server


def _key(keys: KeyStore, user: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {keys.create('acme', user_id=user).secret}"}


def _wait_job(srv: ServiceServer, job_id: str, headers: dict[str, str]) -> dict[str, object]:
    for _ in range(1000):  # readiness wait, not a timing assertion
        job: dict[str, object] = srv.client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_a_reused_session_id_reaches_none_of_the_earlier_sessions_jobs(srv: ServiceServer, keys: KeyStore) -> None:
    bob, alice = _key(keys, "bob"), _key(keys, "alice")
    assert srv.client.post("/v1/sessions", json={"session_id": "S"}, headers=bob).status_code == 201
    for text in ("I am Bob and my safe code is 4411", "My sister Ada lives in Lyon", "I love sailing"):
        r = srv.client.post("/v1/sessions/S/events", json={"content": text}, headers=bob)
        assert r.status_code == 201, r.text
    r = srv.client.post("/v1/sessions/S/reset", headers=bob)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    assert _wait_job(srv, job_id, bob)["status"] == "done"
    assert srv.client.get("/v1/sessions/S", headers=bob).status_code == 404  # reset: the session is gone
    r = srv.client.post("/v1/sessions", json={"session_id": "S"}, headers=alice)  # the id is free again
    assert r.status_code == 201, r.text
    r = srv.client.get(f"/v1/jobs/{job_id}", headers=alice)
    assert r.status_code == 404, r.text
    listed = srv.client.get("/v1/jobs", headers=alice).json()["jobs"]
    assert job_id not in [j["id"] for j in listed], listed
    # bob still sees his job, and a tenant-wide key every job
    assert srv.client.get(f"/v1/jobs/{job_id}", headers=bob).status_code == 200
    assert srv.client.get(f"/v1/jobs/{job_id}", headers=_key(keys)).status_code == 200
    # alice's own job on her session S is hers, not bob's
    assert srv.client.post("/v1/sessions/S/events", json={"content": "I like tea"}, headers=alice).status_code == 201
    mine = srv.client.post("/v1/sessions/S/form", headers=alice).json()["job_id"]
    assert srv.client.get(f"/v1/jobs/{mine}", headers=alice).status_code == 200
    assert srv.client.get(f"/v1/jobs/{mine}", headers=bob).status_code == 404


def test_one_user_creating_sessions_never_evicts_another_users(tmp_path: Path, keys: KeyStore) -> None:
    """In-process sessions capped at 20 (KAOS: 1,000): mallory creating 60 sessions evicts only
    her own; bob's sessions and acknowledged events stay (his export lists them). When the store
    is full of bob's sessions, mallory gets 507 ``storage_full`` and nothing changes."""
    from memlane.stores.local import LocalMemory

    sessions = LocalMemory(max_sessions=20)
    app = create_app(
        MemlaneSettings(server=ServerSettings(rate_limit=0)), hub=make_hub(tmp_path, sessions=sessions), keys=keys
    )
    bob, mallory = _key(keys, "bob"), _key(keys, "mallory")
    with serve(app) as srv:
        for i in range(3):
            assert srv.client.post("/v1/sessions", json={"session_id": f"b{i}"}, headers=bob).status_code == 201
            r = srv.client.post(f"/v1/sessions/b{i}/events", json={"content": f"bob turn {i}"}, headers=bob)
            assert r.status_code == 201, r.text
        for i in range(60):
            r = srv.client.post("/v1/sessions", json={"session_id": f"m{i}"}, headers=mallory)
            assert r.status_code == 201, r.text
        export = srv.client.get("/v1/users/bob/export", headers=bob).json()
        assert sorted(s["id"] for s in export["sessions"]) == ["b0", "b1", "b2"], export["sessions"]
        for i in range(3):
            events = srv.client.get(f"/v1/sessions/b{i}/events", headers=bob).json()["events"]
            assert [e["content"] for e in events] == [f"bob turn {i}"]
        for i in range(60):  # mallory's sessions out, bob's in
            r = srv.client.delete(f"/v1/sessions/m{i}", headers=mallory)
            assert r.status_code in (204, 404), r.text
        for i in range(3, 20):
            assert srv.client.post("/v1/sessions", json={"session_id": f"b{i}"}, headers=bob).status_code == 201
        r = srv.client.post("/v1/sessions", json={"session_id": "m-full"}, headers=mallory)
        assert r.status_code == 507, r.text
        assert r.json()["error"]["code"] == "storage_full"
        assert len(srv.client.get("/v1/sessions", headers=bob).json()["sessions"]) == 20


def test_a_room_is_not_readable_through_a_session_of_the_same_id_in_another_app(
    srv: ServiceServer, keys: KeyStore
) -> None:
    """bob's room memory (agent concierge, session S of app hotel) was read by alice through
    her own session S of app other: room memories are keyed by (agent, session id), not app."""
    bob, alice = _key(keys, "bob"), _key(keys, "alice")
    r = srv.client.post("/v1/sessions", json={"app": "hotel", "session_id": "S"}, headers=bob)
    assert r.status_code == 201, r.text
    room = {"agent_id": "concierge", "session_id": "S", "app": "hotel"}
    r = srv.client.post(
        "/v1/memories", json={"text": "room 12 asked for zqroom towels", "scope": "room", **room}, headers=_key(keys)
    )
    assert r.status_code == 201, r.text
    seen = srv.client.get("/v1/memories", params=room, headers=bob).json()["memories"]
    assert ["zqroom" in m["content"] for m in seen] == [True]  # bob, in the room, reads it
    r = srv.client.post("/v1/sessions", json={"app": "other", "session_id": "S"}, headers=alice)
    assert r.status_code == 201, r.text
    other = {**room, "app": "other"}
    r = srv.client.get("/v1/memories", params=other, headers=alice)
    assert r.status_code == 404 and "zqroom" not in r.text, r.text
    r = srv.client.post("/v1/search", json={"query": "zqroom towels", **other}, headers=alice)
    assert r.status_code == 404 and "zqroom" not in r.text, r.text
    r = srv.client.post("/v1/tools/load_memory", params=other, json={"query": "zqroom"}, headers=alice)
    assert "zqroom" not in r.text, r.text
    # the room id now names sessions of two users: no user-bound key reads the room (fail closed);
    # a tenant-wide key still does
    assert srv.client.get("/v1/memories", params=room, headers=bob).status_code == 404
    assert "zqroom" in srv.client.get("/v1/memories", params=room, headers=_key(keys)).text
    assert srv.client.delete("/v1/sessions/S", params={"app": "other"}, headers=alice).status_code == 204
    assert "zqroom" in srv.client.get("/v1/memories", params=room, headers=bob).text


def test_a_formation_job_shows_to_the_participants_stored_with_it_only() -> None:
    """A trigger coalesced into a queued job of a deleted session whose id was reused merges the
    new participants into the payload; the job's ``user_id`` still names the first session's
    user, who must not see it (it forms the new session)."""
    from memlane.models import Job
    from memlane.service.auth import Principal
    from memlane.service.routes.jobs import _visible

    def job(kind: str, user_id: str | None, payload: dict[str, object]) -> Job:
        return Job(id="j", kind=kind, key="k", payload=payload, user_id=user_id)  # type: ignore[arg-type]

    def sees(user: str | None, j: Job) -> bool:
        return _visible(Principal(tenant="acme", user_id=user, read_only=False), j)

    merged = job("form", "bob", {"app": "default", "session_id": "S", "user_ids": ["alice"]})
    assert (sees("bob", merged), sees("alice", merged), sees(None, merged)) == (False, True, True)
    legacy = job("form", "bob", {"app": "default", "session_id": "S"})  # queued before participants were stored
    assert (sees("bob", legacy), sees("alice", legacy)) == (True, False)
    infer = job("infer", "bob", {"user_id": "bob"})
    assert (sees("bob", infer), sees("alice", infer)) == (True, False)
