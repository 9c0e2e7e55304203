"""``POST /v1/import`` and ``GET /v1/embeddings`` on a real loopback server: 202 at once, all or
nothing with the bad line named, background embedding, formation jobs with ``form``, and keys
(a user-bound key imports only its own user's turns, a read-only key none)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memlane.service.auth import KeyStore
from service_server import ServiceServer, serve_with_keys


def jsonl(*rows: dict[str, str]) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


TURNS = jsonl(
    {"user_id": "ann", "session_id": "s1", "role": "user", "content": "My cat Miso is a tabby"},
    {"user_id": "ann", "session_id": "s1", "role": "assistant", "content": "Miso sounds lovely"},
    {"user_id": "bob", "session_id": "s2", "role": "user", "content": "I play the cello on Sundays"},
)


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[KeyStore]:
    with KeyStore(tmp_path / "keys.db") as store:
        yield store


@pytest.fixture
def keyed(tmp_path: Path, keys: KeyStore) -> Iterator[ServiceServer]:
    with serve_with_keys(tmp_path, keys) as srv:
        yield srv


def _wait_embedded(srv: ServiceServer, headers: dict[str, str]) -> dict[str, object]:
    for _ in range(500):
        progress: dict[str, object] = srv.client.get("/v1/embeddings", headers=headers).json()
        if progress["queued"] == 0 and progress["idle"]:
            return progress
        time.sleep(0.02)
    raise AssertionError(f"embedding queue did not drain: {progress}")


def test_import_is_202_and_all_turns_become_searchable(keyed: ServiceServer, keys: KeyStore) -> None:
    h = {"Authorization": f"Bearer {keys.create('acme').secret}"}
    r = keyed.client.post("/v1/import", json={"content": TURNS}, headers=h)
    assert r.status_code == 202, r.text
    assert r.json() == {
        "imported": 3,
        "sessions": 2,
        "format": "jsonl",
        "jobs": [],
        "embedding_status_url": "/v1/embeddings",
    }
    assert _wait_embedded(keyed, h)["done"] == 3
    found = keyed.client.post("/v1/search", json={"query": "tabby cat", "user_id": "ann"}, headers=h).json()
    assert [hit["fact"]["content"] for hit in found["hits"]][:1] == ["My cat Miso is a tabby"]
    other = keyed.client.post("/v1/search", json={"query": "tabby cat", "user_id": "bob"}, headers=h).json()
    assert all("tabby" not in hit["fact"]["content"] for hit in other["hits"])
    # another tenant sees none of it
    h2 = {"Authorization": f"Bearer {keys.create('globex').secret}"}
    assert keyed.client.post("/v1/search", json={"query": "tabby", "user_id": "ann"}, headers=h2).json()["hits"] == []


def test_import_with_form_queues_a_formation_job_per_session(keyed: ServiceServer, keys: KeyStore) -> None:
    h = {"Authorization": f"Bearer {keys.create('acme').secret}"}
    r = keyed.client.post("/v1/import", json={"content": TURNS, "form": True}, headers=h)
    assert r.status_code == 202, r.text
    jobs = r.json()["jobs"]
    assert len(jobs) == 2
    for job_id in jobs:
        for _ in range(500):
            status = keyed.client.get(f"/v1/jobs/{job_id}", headers=h).json()["status"]
            if status in ("done", "failed"):
                break
            time.sleep(0.02)
        assert status == "done"
    events = keyed.client.get("/v1/sessions/s1/events", headers=h).json()["events"]
    assert [e["content"] for e in events] == ["My cat Miso is a tabby", "Miso sounds lovely"]


def test_a_bad_line_names_itself_and_nothing_is_written(keyed: ServiceServer, keys: KeyStore) -> None:
    h = {"Authorization": f"Bearer {keys.create('acme').secret}"}
    bad = TURNS + '{"user_id": "ann", "session_id": "s1", "role": "user", "content": ""}\n'
    r = keyed.client.post("/v1/import", json={"content": bad}, headers=h)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_input" and "body:4" in r.json()["error"]["message"]
    assert keyed.client.get("/v1/memories", params={"user_id": "ann"}, headers=h).json()["memories"] == []
    for body in (
        {"content": "not json at all"},
        {"content": "[1, 2]", "format": "locomo"},
        {"content": ""},
        {"content": TURNS, "format": "xml"},
        {"content": TURNS, "extra": 1},
    ):
        r = keyed.client.post("/v1/import", json=body, headers=h)
        assert r.status_code in (400, 422), (body, r.text)


def test_user_bound_and_read_only_keys(keyed: ServiceServer, keys: KeyStore) -> None:
    ann = {"Authorization": f"Bearer {keys.create('acme', user_id='ann').secret}"}
    r = keyed.client.post("/v1/import", json={"content": TURNS}, headers=ann)  # has bob's line
    assert r.status_code == 403, r.text
    assert keyed.client.get("/v1/memories", params={"user_id": "ann"}, headers=ann).json()["memories"] == []
    own = jsonl({"user_id": "ann", "session_id": "s9", "role": "user", "content": "I moved to Porto"})
    assert keyed.client.post("/v1/import", json={"content": own}, headers=ann).status_code == 202
    reader = {"Authorization": f"Bearer {keys.create('acme', read_only=True).secret}"}
    assert keyed.client.post("/v1/import", json={"content": own}, headers=reader).status_code == 403


def test_an_import_never_joins_another_users_session(keyed: ServiceServer, keys: KeyStore) -> None:
    """Issue 17 (6): alice's user-bound key imported into bob's session S (her turn in his
    session, formed as "bob said"), and into ``alice:import`` that bob created first (bob then
    read her turns). An existing session of another user is 409, and nothing is written."""
    bob = {"Authorization": f"Bearer {keys.create('acme', user_id='bob').secret}"}
    alice = {"Authorization": f"Bearer {keys.create('acme', user_id='alice').secret}"}
    for sid in ("S", "alice:import"):
        r = keyed.client.post("/v1/sessions", json={"session_id": sid}, headers=bob)
        assert r.status_code == 201, r.text
    named = jsonl({"user_id": "alice", "session_id": "S", "role": "user", "content": "my passport number is 123"})
    default = jsonl({"user_id": "alice", "role": "user", "content": "my passport number is 456"})
    for content in (named, default):
        r = keyed.client.post("/v1/import", json={"content": content, "form": True}, headers=alice)
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "conflict"
    for sid in ("S", "alice:import"):
        session = keyed.client.get(f"/v1/sessions/{sid}", headers=bob).json()
        assert session["user_ids"] == ["bob"] and session["events"] == [], session
    assert keyed.client.get("/v1/memories", headers=alice).json()["memories"] == []  # all or nothing
    assert keyed.client.get("/v1/jobs", headers=bob).json()["jobs"] == []
    # her own session (or a new one) still takes her turns
    own = jsonl({"user_id": "alice", "session_id": "A1", "role": "user", "content": "I moved to Porto"})
    assert keyed.client.post("/v1/import", json={"content": own, "form": True}, headers=alice).status_code == 202
    assert keyed.client.get("/v1/sessions/A1", headers=alice).json()["user_ids"] == ["alice"]


def test_a_group_session_is_imported_as_the_cli_imports_it(keyed: ServiceServer, keys: KeyStore) -> None:
    """One workflow (memlane.importers) for the CLI and the API (issue 19): turns of two users
    sharing a session id become one group session with both users and one formation job, as
    ``memlane import --form`` makes it. The API's own copy made the session for the first user
    only and then refused the second user's turns with 409, after storing them."""
    h = {"Authorization": f"Bearer {keys.create('acme').secret}"}
    group = jsonl(
        {"user_id": "ann", "session_id": "g1", "role": "user", "content": "Ann booked the boat for Saturday"},
        {"user_id": "bob", "session_id": "g1", "role": "user", "content": "Bob brings the fishing rods"},
    )
    r = keyed.client.post("/v1/import", json={"content": group, "form": True}, headers=h)
    assert r.status_code == 202, r.text
    assert r.json()["sessions"] == 2 and len(r.json()["jobs"]) == 1
    session = keyed.client.get("/v1/sessions/g1", headers=h).json()
    assert sorted(session["user_ids"]) == ["ann", "bob"] and len(session["events"]) == 2
