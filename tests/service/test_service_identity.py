"""``/v1/identities`` and the routes that take ``channel`` + ``sender`` instead of a user, on a
real loopback server with API keys: a user-bound key links, resolves and unlinks only its own
user's senders (another user's sender looks unknown), a read-only key links nothing, and one
tenant's links never resolve in another tenant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from memlane.service.auth import KeyStore
from service_server import ServiceServer, serve_with_keys


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[KeyStore]:
    with KeyStore(tmp_path / "keys.db") as store:
        yield store


@pytest.fixture
def srv(tmp_path: Path, keys: KeyStore) -> Iterator[ServiceServer]:
    with serve_with_keys(tmp_path, keys) as server:
        yield server


def _key(keys: KeyStore, user: str | None = None, *, tenant: str = "acme", read_only: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {keys.create(tenant, user_id=user, read_only=read_only).secret}"}


SMS = {"channel": "sms", "sender": "+15550100"}


def test_link_resolve_list_unlink_and_the_routes_that_take_a_sender(srv: ServiceServer, keys: KeyStore) -> None:
    wide, c = _key(keys), srv.client
    r = c.post("/v1/identities", json={**SMS, "user_id": "sam"}, headers=wide)
    assert r.status_code == 201, r.text
    linked = r.json()
    assert linked["user_id"] == "sam" and linked["linked_at"]
    assert c.post("/v1/identities", json={**SMS, "user_id": "sam"}, headers=wide).json() == linked  # idempotent
    r = c.post("/v1/identities", json={**SMS, "user_id": "bob"}, headers=wide)
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"
    c.post("/v1/identities", json={"channel": "telegram", "sender": "sam", "user_id": "sam"}, headers=wide)
    r = c.get("/v1/identities/resolve", params=SMS, headers=wide)
    assert r.json() == {**SMS, "user_id": "sam"}
    r = c.get("/v1/identities/resolve", params={"channel": "sms", "sender": "+1999"}, headers=wide)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = c.get("/v1/identities", params={"user_id": "sam"}, headers=wide)
    assert [(i["channel"], i["sender"]) for i in r.json()["identities"]] == [("sms", "+15550100"), ("telegram", "sam")]
    assert c.get("/v1/identities", headers=wide).status_code == 400  # whose links?

    # memories: channel + sender instead of user_id
    r = c.post("/v1/memories", json={"text": "I am vegetarian", **SMS}, headers=wide)
    assert r.status_code == 201, r.text
    assert r.json()["memories"][0]["user_id"] == "sam"
    r = c.post("/v1/memories", json={"text": "x", "user_id": "bob", **SMS}, headers=wide)
    assert r.status_code == 400, r.text
    r = c.post("/v1/memories", json={"text": "x", "channel": "sms", "sender": "+1999"}, headers=wide)
    assert r.status_code == 404, r.text
    assert c.get("/v1/memories", params={"user_id": "bob"}, headers=wide).json()["total"] == 0

    # sessions and events: the participant and the event's user are the linked user
    r = c.post("/v1/sessions", json={"session_id": "sam:sms", "app": "gaia", **SMS}, headers=wide)
    assert r.status_code == 201, r.text
    assert (r.json()["user_ids"], r.json()["channel"]) == (["sam"], "sms")
    r = c.post("/v1/sessions/sam:sms/events", params={"app": "gaia"}, json={"content": "hi", **SMS}, headers=wide)
    assert r.status_code == 201 and r.json()["metadata"] == {"user_id": "sam"}, r.text
    c.post("/v1/sessions", json={"session_id": "other", "app": "gaia", "user_ids": ["bob"]}, headers=wide)
    r = c.get("/v1/sessions", params={"app": "gaia", **SMS}, headers=wide)
    assert [s["id"] for s in r.json()["sessions"]] == ["sam:sms"]
    r = c.get("/memory/sessions", params={"app": "gaia", **SMS}, headers=wide)
    assert r.json()["sessions"] == ["sam:sms"]
    assert sorted(c.get("/memory/sessions", params={"app": "gaia"}, headers=wide).json()["sessions"]) == [
        "other",
        "sam:sms",
    ]
    r = c.get("/memory/events", params={"app": "gaia", **SMS}, headers=wide)
    assert [e["content"] for e in r.json()["events"]] == ["hi"]
    r = c.get("/memory/events", params={"app": "gaia", "session_id": "other", **SMS}, headers=wide)
    assert r.json()["events"] == []  # not the sender's session

    # export has the links; forget erases them
    export = c.get("/v1/users/sam/export", headers=wide).json()
    assert [i["sender"] for i in export["identities"]] == ["+15550100", "sam"]
    assert c.delete("/v1/users/sam", headers=wide).status_code == 200
    assert c.get("/v1/identities/resolve", params=SMS, headers=wide).status_code == 404
    assert c.get("/v1/users/sam/export", headers=wide).json()["identities"] == []

    # unlink
    c.post("/v1/identities", json={**SMS, "user_id": "ana"}, headers=wide)
    assert c.delete("/v1/identities", params=SMS, headers=wide).status_code == 204
    assert c.delete("/v1/identities", params=SMS, headers=wide).status_code == 404


def test_a_user_bound_key_reaches_only_its_own_users_senders(srv: ServiceServer, keys: KeyStore) -> None:
    wide, alice, c = _key(keys), _key(keys, "alice"), srv.client
    c.post("/v1/identities", json={**SMS, "user_id": "sam"}, headers=wide)
    c.post("/v1/sessions", json={"session_id": "sam:sms", "user_ids": ["sam"]}, headers=wide)
    # linking for another user: 403; for itself (user_id defaults to its user): 201
    assert (
        c.post("/v1/identities", json={"channel": "sms", "sender": "+1", "user_id": "sam"}, headers=alice).status_code
        == 403
    )
    r = c.post("/v1/identities", json={"channel": "telegram", "sender": "ally"}, headers=alice)
    assert r.status_code == 201 and r.json()["user_id"] == "alice", r.text
    # sam's sender looks unknown to alice's key, whatever route names it
    assert c.get("/v1/identities/resolve", params=SMS, headers=alice).status_code == 404
    assert c.delete("/v1/identities", params=SMS, headers=alice).status_code == 404
    assert c.post("/v1/memories", json={"text": "I am sam now", **SMS}, headers=alice).status_code == 404
    assert c.post("/v1/sessions", json={"session_id": "x", **SMS}, headers=alice).status_code == 404
    assert c.get("/v1/sessions", params=SMS, headers=alice).status_code == 404
    assert c.get("/memory/sessions", params=SMS, headers=alice).status_code == 404
    assert c.get("/v1/identities", params={"user_id": "sam"}, headers=alice).status_code == 403
    # nothing of sam's changed
    assert c.get("/v1/identities/resolve", params=SMS, headers=wide).json()["user_id"] == "sam"
    assert c.get("/v1/memories", params={"user_id": "sam"}, headers=wide).json()["total"] == 0
    # its own sender works everywhere
    ally = {"channel": "telegram", "sender": "ally"}
    assert c.get("/v1/identities/resolve", params=ally, headers=alice).json()["user_id"] == "alice"
    r = c.post("/v1/memories", json={"text": "I like chess", **ally}, headers=alice)
    assert r.status_code == 201 and r.json()["memories"][0]["user_id"] == "alice"
    r = c.post("/v1/sessions", json={"session_id": "a1", **ally}, headers=alice)
    assert r.status_code == 201 and r.json()["user_ids"] == ["alice"]
    r = c.post("/v1/sessions/a1/events", json={"content": "hi", **ally}, headers=alice)
    assert r.status_code == 201 and r.json()["metadata"] == {"user_id": "alice"}
    # an event in alice's own session naming sam's sender: unknown to her key
    r = c.post("/v1/sessions/a1/events", json={"content": "hi", **SMS}, headers=alice)
    assert r.status_code == 404, r.text
    assert [i["sender"] for i in c.get("/v1/identities", headers=alice).json()["identities"]] == ["ally"]
    assert c.delete("/v1/identities", params=ally, headers=alice).status_code == 204


def test_read_only_keys_link_nothing_and_tenants_do_not_share_links(srv: ServiceServer, keys: KeyStore) -> None:
    wide, c = _key(keys), srv.client
    reader = _key(keys, read_only=True)
    assert c.post("/v1/identities", json={**SMS, "user_id": "sam"}, headers=reader).status_code == 403
    c.post("/v1/identities", json={**SMS, "user_id": "sam"}, headers=wide)
    assert c.delete("/v1/identities", params=SMS, headers=reader).status_code == 403
    assert c.post("/v1/memories", json={"text": "x", **SMS}, headers=reader).status_code == 403
    assert c.get("/v1/identities/resolve", params=SMS, headers=reader).json()["user_id"] == "sam"
    other = _key(keys, tenant="globex")
    assert c.get("/v1/identities/resolve", params=SMS, headers=other).status_code == 404
    assert c.post("/v1/memories", json={"text": "x", **SMS}, headers=other).status_code == 404
    r = c.post("/v1/identities", json={**SMS, "user_id": "zed"}, headers=other)  # its own map
    assert r.status_code == 201
    assert c.get("/v1/identities/resolve", params=SMS, headers=wide).json()["user_id"] == "sam"
