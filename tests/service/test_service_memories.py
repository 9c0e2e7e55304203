"""The long-term memory routes over a REAL loopback server (uvicorn + httpx): memories, search,
documents, context, profile, tools, stats, consolidation status, a user's export and purge;
status codes on bad input (never 5xx), pagination, the 202 job flow, and isolation across
users (user-bound keys) and tenants for every read route."""

from __future__ import annotations

import time
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

CA = "xqjzvkwplmbt"  # alice's canary


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()


def err(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    body: dict[str, Any] = r.json()
    assert "error" in body and body["error"]["code"] and body["error"]["message"], body
    return body["error"]


def leaks(r: httpx.Response) -> bool:
    """The response holds alice's canary (a tool result's echo of the query aside)."""
    body = r.json()
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k != "query"}
    return CA in str(body)


def wait_job(c: httpx.Client, url: str) -> dict[str, Any]:
    for _ in range(600):
        job: dict[str, Any] = ok(c.get(url))
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {url} did not finish")


# --------------------------------------------------------------------------- memories


def test_memory_crud_history_and_pagination(service: ServiceServer) -> None:
    c = service.client
    added = ok(c.post("/v1/memories", json={"text": f"I keep bees named {CA}", "user_id": "alice"}), 201)
    fact = added["memories"][0]
    assert fact["content"] == f"I keep bees named {CA}" and "embedding" not in fact
    msgs = [{"role": "user", "content": "We met in Porto"}, {"role": "assistant", "content": "Nice city"}]
    two = ok(c.post("/v1/memories", json={"messages": msgs, "user_id": "alice", "session_id": "s1"}), 201)
    assert [m["kind"] for m in two["memories"]] == ["message", "message"]

    got = ok(c.get(f"/v1/memories/{fact['id']}", params={"user_id": "alice"}))
    assert got["id"] == fact["id"]
    upd = ok(c.patch(f"/v1/memories/{fact['id']}", params={"user_id": "alice"}, json={"text": "I keep wasps"}))
    assert upd["version"] == 2 and upd["content"] == "I keep wasps"
    hist = ok(c.get(f"/v1/memories/{fact['id']}/history", params={"user_id": "alice"}))["history"]
    assert [h["event"] for h in hist] == ["ADD", "UPDATE"] and hist[1]["old_content"] == f"I keep bees named {CA}"

    # pagination: 3 memories, pages of 2, then the rest; filters
    p1 = ok(c.get("/v1/memories", params={"user_id": "alice", "limit": 2}))
    assert len(p1["memories"]) == 2 and p1["total"] == 3 and p1["next_cursor"]
    p2 = ok(c.get("/v1/memories", params={"user_id": "alice", "limit": 2, "cursor": p1["next_cursor"]}))
    assert len(p2["memories"]) == 1 and p2["next_cursor"] is None
    ids = {m["id"] for m in p1["memories"] + p2["memories"]}
    assert ids == {fact["id"], *(m["id"] for m in two["memories"])}
    msgs_only = ok(c.get("/v1/memories", params={"user_id": "alice", "kind": "message"}))
    assert msgs_only["total"] == 2
    by_author = ok(c.get("/v1/memories", params={"user_id": "alice", "author": "assistant"}))
    assert [m["content"] for m in by_author["memories"]] == ["Nice city"]

    gone = ok(c.delete(f"/v1/memories/{fact['id']}", params={"user_id": "alice"}))
    assert gone["invalid_at"] is not None
    assert ok(c.get("/v1/memories", params={"user_id": "alice"}))["total"] == 2
    assert ok(c.get("/v1/memories", params={"user_id": "alice", "include_invalid": True}))["total"] == 3
    # another user does not see or change alice's memory: 404
    err(c.get(f"/v1/memories/{fact['id']}", params={"user_id": "bob"}), 404)
    err(c.patch(f"/v1/memories/{two['memories'][0]['id']}", params={"user_id": "bob"}, json={"text": "x"}), 404)
    err(c.delete(f"/v1/memories/{two['memories'][0]['id']}", params={"user_id": "bob"}), 404)
    err(c.get(f"/v1/memories/{fact['id']}/history", params={"user_id": "bob"}), 404)
    assert ok(c.get("/v1/memories", params={"user_id": "bob"}))["total"] == 0


def test_bad_input_is_4xx_never_5xx(service: ServiceServer) -> None:
    c = service.client
    ok(c.post("/v1/memories", json={"text": "hello", "user_id": "alice"}), 201)
    err(c.get("/v1/memories/nope", params={"user_id": "alice"}), 404)
    err(c.get("/v1/memories", params={"user_id": "alice", "cursor": "garbage!"}), 400)
    err(c.get("/v1/memories", params={"user_id": "alice", "limit": 10**9}), 400)
    err(c.get("/v1/memories", params={"user_id": "alice", "limit": "many"}), 422)
    err(c.get("/v1/memories", params={"user_id": "alice", "kind": "poem"}), 422)
    err(c.post("/v1/memories", json={"text": 5, "user_id": "alice"}), 422)
    err(c.post("/v1/memories", json={"user_id": "alice"}), 400)  # neither text nor messages
    err(c.post("/v1/memories", json={"text": "", "user_id": "alice"}), 400)
    err(c.post("/v1/memories", json={"text": "x"}), 400)  # no user for a user memory
    err(c.post("/v1/memories", content=b"{not json", headers={"content-type": "application/json"}), 422)
    err(c.post("/v1/search", json={"query": "x", "user_id": "alice", "top_k": 10**12}), 400)
    err(c.post("/v1/search", json={"query": "x", "user_id": "alice", "top_k": "ten"}), 422)
    err(c.post("/v1/search", json={"query": ["a", "b", "c", "d"], "user_id": "alice"}), 400)
    err(c.post("/v1/search", json={"query": "x", "user_id": "alice", "filters": {"kind": {"$in": 1}}}), 400)
    err(c.get("/v1/documents/nope/fragments", params={"user_id": "alice"}), 404)
    err(c.get("/v1/context", params={"budget_tokens": -3, "user_id": "alice"}), 400)
    err(c.get("/v1/profile"), 400)  # no user
    err(c.get("/v1/tools", params={"format": "cobol"}), 422)
    err(c.post("/v1/tools/remember", params={"user_id": "alice"}, json=[1, 2]), 422)
    err(c.post("/v1/tools/nope", params={"user_id": "alice"}, json={}), 422)
    err(c.delete("/v1/users/alice", params={"shared": "maybe"}), 422)
    err(c.get("/v1/consolidation-status"), 400)


def test_infer_returns_202_and_the_job_completes(service: ServiceServer) -> None:
    c = service.client
    r = c.post(
        "/v1/memories",
        json={"text": "My sister is called Ana and she lives in Lisbon", "user_id": "alice", "infer": True},
    )
    acc = ok(r, 202)
    assert acc["job_id"] and acc["status_url"] == f"/v1/jobs/{acc['job_id']}" and r.headers["location"]
    job = wait_job(c, acc["status_url"])
    assert job["status"] == "done", job
    found = ok(c.get("/v1/memories", params={"user_id": "alice"}))
    assert found["total"] >= 1 and any("Ana" in m["content"] for m in found["memories"])


def test_search_documents_context_profile_stats_status_tools(service: ServiceServer) -> None:
    c = service.client
    ok(c.post("/v1/memories", json={"text": f"Alice's locker word is {CA}", "user_id": "alice"}), 201)
    ok(c.post("/v1/memories", json={"text": "Bob likes chess", "user_id": "bob"}), 201)
    res = ok(c.post("/v1/search", json={"query": [CA, "locker"], "user_id": "alice", "top_k": 5, "debug": True}))
    assert [h["fact"]["content"] for h in res["hits"]] == [f"Alice's locker word is {CA}"] and res["debug"]
    assert ok(c.post("/v1/search", json={"query": CA, "user_id": "bob"}))["hits"] == []

    text = "# Manual\n\n" + "\n\n".join(f"Paragraph {i} about {CA} valves and pumps." for i in range(400))
    doc = ok(c.post("/v1/documents", json={"text": text, "title": "Manual", "user_id": "alice"}), 201)
    assert doc["kind"] == "document" and doc["metadata"]["fragments"] >= 2
    frags = ok(c.get(f"/v1/documents/{doc['id']}/fragments", params={"user_id": "alice"}))["fragments"]
    assert len(frags) == doc["metadata"]["fragments"]
    parent = ok(c.get(f"/v1/fragments/{frags[0]['id']}/document", params={"user_id": "alice"}))
    assert parent["id"] == doc["id"]
    err(c.get(f"/v1/documents/{doc['id']}/fragments", params={"user_id": "bob"}), 404)

    ctx = ok(c.get("/v1/context", params={"user_id": "alice", "budget_tokens": 500}))["context"]
    assert CA in ctx
    assert CA not in ok(c.get("/v1/context", params={"user_id": "bob"}))["context"]
    prof = ok(c.get("/v1/profile", params={"user_id": "alice"}))
    assert prof["user_id"] == "alice" and CA in (prof["profile"] or "")
    assert CA not in (ok(c.get("/v1/profile", params={"user_id": "bob"}))["profile"] or "")
    st = ok(c.get("/v1/stats", params={"user_id": "alice"}))
    assert st["valid_facts"] >= 2
    assert ok(c.get("/v1/stats", params={"user_id": "bob"}))["valid_facts"] == 1
    status = ok(c.get("/v1/consolidation-status", params={"user_id": "alice"}))["scopes"]
    assert set(status) == {"user"} and status["user"]["buffer_size"] == 0

    schemas = ok(c.get("/v1/tools", params={"format": "anthropic"}))
    assert {s["name"] for s in schemas} == {"search_facts", "load_memory", "remember"}
    assert "function_declarations" in ok(c.get("/v1/tools", params={"format": "gemini"}))[0]
    found = ok(c.post("/v1/tools/search_facts", params={"user_id": "alice"}, json={"query": CA}))
    assert CA in str(found) and "error" not in found
    assert ok(c.post("/v1/tools/search_facts", params={"user_id": "bob"}, json={"query": CA}))["count"] == 0
    # identity comes from the request, never from the tool's arguments
    spoof = ok(c.post("/v1/tools/search_facts", params={"user_id": "bob"}, json={"query": CA, "user_id": "alice"}))
    assert spoof["error"]["code"] == "invalid_arguments" and CA not in str(spoof)
    ok(c.post("/v1/tools/remember", params={"user_id": "bob"}, json={"fact": "Bob owns a red kayak"}))
    assert ok(c.post("/v1/search", json={"query": "kayak", "user_id": "bob"}))["hits"]
    assert ok(c.post("/v1/search", json={"query": "kayak", "user_id": "alice"}))["hits"] == []


def test_export_and_purge(service: ServiceServer) -> None:
    c = service.client
    ok(c.post("/v1/memories", json={"text": f"Alice's pin word is {CA}", "user_id": "alice"}), 201)
    ok(c.post("/v1/sessions", json={"session_id": "s1", "user_ids": ["alice"]}), 201)
    ok(c.post("/v1/sessions/s1/events", json={"content": f"hi, {CA} here"}), 201)
    ok(c.post("/v1/memories", json={"text": "Bob's pin word is walrus", "user_id": "bob"}), 201)
    out = ok(c.get("/v1/users/alice/export"))
    assert [f["content"] for f in out["facts"]] == [f"Alice's pin word is {CA}"]
    assert [e["content"] for s in out["sessions"] for e in s["events"]] == [f"hi, {CA} here"]
    assert "walrus" not in str(out)
    purged = ok(c.delete("/v1/users/alice"))
    assert purged == {"user_id": "alice", "removed": purged["removed"]} and purged["removed"] >= 3
    after = ok(c.get("/v1/users/alice/export"))
    assert all(after[k] == [] for k in ("facts", "reflections", "consolidated", "sessions", "jobs", "shared"))
    assert ok(c.post("/v1/search", json={"query": CA, "user_id": "alice"}))["hits"] == []
    assert ok(c.post("/v1/search", json={"query": "walrus", "user_id": "bob"}))["hits"]  # bob stays


# --------------------------------------------------------------------------- keys: users and tenants


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


def _reads(fid: str, doc: str, frag: str) -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]]:
    """Every read route, naming alice's data (method, path, params, json)."""
    return [
        ("GET", "/v1/memories", {}, None),
        ("GET", f"/v1/memories/{fid}", {}, None),
        ("GET", f"/v1/memories/{fid}/history", {}, None),
        ("POST", "/v1/search", None, {"query": CA}),
        ("GET", f"/v1/documents/{doc}/fragments", {}, None),
        ("GET", f"/v1/fragments/{frag}/document", {}, None),
        ("GET", "/v1/context", {}, None),
        ("GET", "/v1/profile", {}, None),
        ("GET", "/v1/stats", {}, None),
        ("POST", "/v1/tools/search_facts", {}, {"query": CA}),
        ("GET", "/v1/users/alice/export", None, None),
    ]


def test_user_bound_and_tenant_isolation_on_every_read_route(keyed: tuple[ServiceServer, dict[str, str]]) -> None:
    srv, keys = keyed
    with (
        _as(srv, keys["alice"]) as alice,
        _as(srv, keys["bob"]) as bob,
        _as(srv, keys["globex"]) as globex,
        _as(srv, keys["admin"]) as admin,
        _as(srv, keys["alice_ro"]) as ro,
    ):
        fid = ok(alice.post("/v1/memories", json={"text": f"Alice's pin word is {CA}"}), 201)["memories"][0]["id"]
        doc = ok(alice.post("/v1/documents", json={"text": f"Notes on {CA} and more"}), 201)["id"]
        frag = ok(alice.get(f"/v1/documents/{doc}/fragments"))["fragments"][0]["id"]
        # alice reads her memory through every route (the checks below can see it)
        for method, path, params, body in _reads(fid, doc, frag):
            r = alice.request(method, path, params=params, json=body)
            assert r.status_code == 200 and (CA in r.text or path == "/v1/stats"), (path, r.text)
        for method, path, params, body in _reads(fid, doc, frag):
            # bob's own key: never alice's words (404 for her ids, empty results otherwise)
            r = bob.request(method, path, params=params, json=body)
            assert r.status_code in (200, 403, 404) and not leaks(r), (path, r.status_code, r.text)
            # bob's key naming alice: 403
            if params is not None and path != "/v1/users/alice/export":
                named = {**params, "user_id": "alice"} if method == "GET" or body is None else params
                if method == "POST" and path == "/v1/search":
                    r = bob.post(path, json={**(body or {}), "user_id": "alice"})
                else:
                    r = bob.request(method, path, params={**(named or {}), "user_id": "alice"}, json=body)
                err(r, 403)
            # another tenant's key (bound to no user) naming alice: nothing of hers
            gp = {**(params or {}), "user_id": "alice"} if params is not None else None
            gb = {**body, "user_id": "alice"} if body is not None and path == "/v1/search" else body
            r = globex.request(method, path, params=gp, json=gb)
            assert r.status_code in (200, 404) and not leaks(r), (path, r.status_code, r.text)
        err(bob.get("/v1/users/alice/export"), 403)
        err(bob.delete("/v1/users/alice"), 403)
        # the tenant-wide key of alice's tenant sees her memory (the checks are not vacuous)
        assert CA in ok(admin.get("/v1/users/alice/export"))["facts"][0]["content"]
        # read-only: reads work, every write is 403 and changes nothing
        assert ok(ro.get(f"/v1/memories/{fid}"))["id"] == fid
        err(ro.post("/v1/memories", json={"text": "sneaky"}), 403)
        err(ro.patch(f"/v1/memories/{fid}", json={"text": "sneaky"}), 403)
        err(ro.delete(f"/v1/memories/{fid}"), 403)
        err(ro.post("/v1/documents", json={"text": "sneaky"}), 403)
        err(ro.post("/v1/tools/remember", json={"fact": "sneaky"}), 403)
        err(ro.delete("/v1/users/alice"), 403)
        # a user-bound key never writes the agent's shared memory
        err(alice.post("/v1/memories", json={"text": "for all", "agent_id": "club", "scope": "agent"}), 403)
        shared = ok(
            admin.post("/v1/memories", json={"text": "Club opens at 9", "agent_id": "club", "scope": "agent"}), 201
        )["memories"][0]
        assert ok(alice.get(f"/v1/memories/{shared['id']}", params={"agent_id": "club"}))["id"] == shared["id"]
        err(alice.patch(f"/v1/memories/{shared['id']}", params={"agent_id": "club"}, json={"text": "x"}), 403)
        err(alice.delete(f"/v1/memories/{shared['id']}", params={"agent_id": "club"}), 403)
        # a user-bound key names only its own sessions as rooms
        ok(admin.post("/v1/sessions", json={"session_id": "bobs", "user_ids": ["bob"]}), 201)
        err(alice.get("/v1/memories", params={"session_id": "bobs"}), 404)
        mine = ok(admin.get("/v1/memories", params={"user_id": "alice"}))["total"]
        assert mine >= 3 and ok(alice.get("/v1/memories"))["total"] == mine == ok(ro.get("/v1/memories"))["total"]
