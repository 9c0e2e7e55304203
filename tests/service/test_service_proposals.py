"""``/v1/proposals`` over a REAL loopback server: propose, list, review (approve with an edit,
reject, stale, twice: 409), and who may do what: a user-bound key only its user's proposals, a
read-only key lists but never proposes or reviews, another tenant sees nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from memlane.service.app import create_app
from memlane.service.keys import KeyStore
from service_server import ServiceServer, make_hub, serve
from service_server import service as service

CA = "xqproposalzk"  # alice's canary


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()


def test_propose_list_review_over_http(service: ServiceServer) -> None:
    c = service.client
    p = ok(c.post("/v1/proposals", json={"text": "Alice is vegan", "user_id": "alice", "reason": "chat"}), 201)
    assert (p["status"], p["action"], p["reason"]) == ("pending", "add", "chat")
    assert ok(c.get("/v1/memories", params={"user_id": "alice"}))["total"] == 0
    listed = ok(c.get("/v1/proposals", params={"user_id": "alice"}))
    assert [x["id"] for x in listed["proposals"]] == [p["id"]] and listed["total"] == 1
    done = ok(c.post(f"/v1/proposals/{p['id']}/review", json={"edit": "Alice is vegetarian", "reviewer": "kim"}))
    assert (done["status"], done["text"], done["edited_from"]) == ("approved", "Alice is vegetarian", "Alice is vegan")
    mems = ok(c.get("/v1/memories", params={"user_id": "alice"}))["memories"]
    assert [m["content"] for m in mems] == ["Alice is vegetarian"]
    hist = ok(c.get(f"/v1/memories/{done['result_id']}/history", params={"user_id": "alice"}))["history"]
    assert [(h["event"], h["actor"]) for h in hist] == [("ADD", "kim")]
    again = c.post(f"/v1/proposals/{p['id']}/review", json={"approve": True})
    assert again.status_code == 409, again.text
    assert ok(c.get("/v1/proposals", params={"user_id": "alice"}))["proposals"] == []
    assert len(ok(c.get("/v1/proposals", params={"user_id": "alice", "status": "all"}))["proposals"]) == 1

    # an update whose target changes before the review: stale, not applied
    fid = mems[0]["id"]
    up = ok(
        c.post(
            "/v1/proposals",
            json={"text": "Alice eats fish", "user_id": "alice", "action": "update", "target_id": fid},
        ),
        201,
    )
    assert up["target_version"] == 1
    ok(c.patch(f"/v1/memories/{fid}", params={"user_id": "alice"}, json={"text": "Alice is vegan again"}))
    assert ok(c.post(f"/v1/proposals/{up['id']}/review", json={}))["status"] == "stale"
    assert ok(c.get(f"/v1/memories/{fid}", params={"user_id": "alice"}))["content"] == "Alice is vegan again"

    # rejection; bad input is 4xx, never 5xx
    rj = ok(c.post("/v1/proposals", json={"text": "Alice hates tea", "user_id": "alice"}), 201)
    assert ok(c.post(f"/v1/proposals/{rj['id']}/review", json={"approve": False}))["status"] == "rejected"
    assert c.post("/v1/proposals", json={"text": "x", "user_id": "alice", "action": "update"}).status_code == 400
    assert c.post("/v1/proposals", json={"text": "x", "user_id": "alice", "action": "merge"}).status_code == 422
    assert c.get("/v1/proposals").status_code == 400  # neither user nor agent named
    assert c.post("/v1/proposals/nope/review", json={}).status_code == 404


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[ServiceServer, dict[str, str]]]:
    store = KeyStore(tmp_path / "keys.db")
    keys = {
        "admin": store.create("acme").secret,
        "alice": store.create("acme", user_id="alice").secret,
        "bob": store.create("acme", user_id="bob").secret,
        "alice_ro": store.create("acme", user_id="alice", read_only=True).secret,
        "globex": store.create("globex").secret,
    }
    with serve(create_app(hub=make_hub(tmp_path), keys=store)) as srv:
        yield srv, keys
    store.close()


def _as(srv: ServiceServer, key: str) -> httpx.Client:
    return srv.new_client(headers={"Authorization": f"Bearer {key}"})


def test_who_may_propose_list_and_review(keyed: tuple[ServiceServer, dict[str, str]]) -> None:
    srv, keys = keyed
    with (
        _as(srv, keys["admin"]) as admin,
        _as(srv, keys["alice"]) as alice,
        _as(srv, keys["bob"]) as bob,
        _as(srv, keys["alice_ro"]) as ro,
        _as(srv, keys["globex"]) as globex,
    ):
        mine = ok(alice.post("/v1/proposals", json={"text": f"Alice's code is {CA}"}), 201)
        assert mine["user_id"] == "alice"  # a user-bound key proposes for its user
        assert alice.post("/v1/proposals", json={"text": "x", "user_id": "bob"}).status_code == 403
        assert [p["id"] for p in ok(alice.get("/v1/proposals"))["proposals"]] == [mine["id"]]
        # bob: never alice's (his own empty list, 403 naming her, 404 for her proposal)
        assert ok(bob.get("/v1/proposals"))["proposals"] == []
        assert bob.get("/v1/proposals", params={"user_id": "alice"}).status_code == 403
        for r in (bob.get(f"/v1/proposals/{mine['id']}"), bob.post(f"/v1/proposals/{mine['id']}/review", json={})):
            assert r.status_code == 404 and CA not in r.text, r.text
        # the read-only key lists and reads, but neither proposes nor reviews
        assert [p["id"] for p in ok(ro.get("/v1/proposals"))["proposals"]] == [mine["id"]]
        assert ok(ro.get(f"/v1/proposals/{mine['id']}"))["text"] == f"Alice's code is {CA}"
        assert ro.post("/v1/proposals", json={"text": "x"}).status_code == 403
        assert ro.post(f"/v1/proposals/{mine['id']}/review", json={}).status_code == 403
        # another tenant: nothing
        assert ok(globex.get("/v1/proposals", params={"user_id": "alice"}))["proposals"] == []
        assert globex.post(f"/v1/proposals/{mine['id']}/review", json={}).status_code == 404
        # an agent-shared fact: alice may propose a change, only a tenant-wide key approves it
        shop = ok(admin.post("/v1/memories", json={"text": "Opens at 9", "agent_id": "shop", "scope": "agent"}), 201)
        sid = shop["memories"][0]["id"]
        change = {"text": "Opens at 10", "agent_id": "shop", "action": "update", "target_id": sid}
        prop = ok(alice.post("/v1/proposals", json=change), 201)
        assert prop["scope"] == "agent"
        assert alice.post(f"/v1/proposals/{prop['id']}/review", json={}).status_code == 403
        queue = ok(admin.get("/v1/proposals", params={"agent_id": "shop"}))["proposals"]
        assert [p["id"] for p in queue] == [prop["id"]]
        done = ok(admin.post(f"/v1/proposals/{prop['id']}/review", json={}))
        assert done["status"] == "approved" and done["reviewer"].startswith("key:")
        # her export over HTTP carries her proposals; bob's does not
        exported = ok(alice.get("/v1/users/alice/export"))["proposals"]
        assert [p["id"] for p in exported if p["id"] == mine["id"]] == [mine["id"]]
        assert CA not in bob.get("/v1/users/bob/export").text
        # alice approves her own
        assert ok(alice.post(f"/v1/proposals/{mine['id']}/review", json={}))["status"] == "approved"
