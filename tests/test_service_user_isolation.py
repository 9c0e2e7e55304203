"""One user never reaches another user's data inside a tenant (issue 17, section 6): the
reproductions, each on a real loopback server with user-bound keys.

* formation jobs stay with the participants of the session they were queued for: a session id
  reused by another user (after ``/reset``) reaches none of them;
* room memories are read only by users taking part in the room's session in every app that has
  a session of that id (a room is keyed by agent and session id, not by app);
* the session cap (KAOS's 1,000 in-process / Redis sessions) evicts only the creator's own
  sessions: one user creating sessions never evicts another's (tests/test_session_eviction.py
  has the store-level cases).

The import case is in tests/test_service_import.py; all of them are also in the isolation
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
from service_server import ServiceServer, make_hub, serve


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[KeyStore]:
    with KeyStore(tmp_path / "keys.db") as store:
        yield store


@pytest.fixture
def srv(tmp_path: Path, keys: KeyStore) -> Iterator[ServiceServer]:
    app = create_app(MemlaneSettings(server=ServerSettings(rate_limit=0)), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as server:
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
