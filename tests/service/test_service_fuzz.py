"""schemathesis against the COMMITTED docs/openapi.json and a real loopback server (issue 9 proof).

For every operation of the committed schema, schemathesis generates requests (positive: valid
by the schema; negative: invalid bodies and parameters) and sends them with a valid key to a
real uvicorn server (tests/service_server.py) over a fresh store. Every response must pass:
no 5xx, a documented status code, a JSON body matching the schema documented for that status.

CI budget: a few examples per operation and mode, derandomized (< ~60 s). Long mode:
``MEMLANE_FUZZ_LONG=1`` (random seeds, ``MEMLANE_FUZZ_EXAMPLES`` per operation and mode,
default 100); its run is recorded in docs/reliability.md.

The auth-bypass attempts (no key, wrong key, revoked key, another tenant's key, a read-only
key writing, a user-bound key naming another user) live in tests/service/test_service_auth.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")

import requests  # noqa: E402  (schemathesis' transport)
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.core.result import Ok  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service_server import ServiceServer, make_hub, serve  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = Path(os.environ.get("MEMLANE_FUZZ_SCHEMA", ROOT / "docs" / "openapi.json"))
LONG = os.environ.get("MEMLANE_FUZZ_LONG") == "1"
EXAMPLES = int(os.environ.get("MEMLANE_FUZZ_EXAMPLES", "100" if LONG else "6"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _schema() -> Any:
    return schemathesis.openapi.from_path(OPENAPI)


def _operations() -> list[Any]:
    return [r.ok() for r in _schema().get_all_operations() if isinstance(r, Ok)]


OPERATIONS = _operations() if OPENAPI.exists() else []


def test_committed_schema_is_there_and_has_the_service_routes() -> None:
    """The fuzz run below covers the committed schema; it must exist and hold the routes."""
    assert OPENAPI.exists(), f"{OPENAPI} is not committed"
    paths = set(json.loads(OPENAPI.read_text())["paths"])
    for path in ("/health", "/memory/events", "/memory/sessions"):
        assert path in paths, path
    assert len(OPERATIONS) >= 3


def _app(tmp: Path, keys: Any) -> Any:
    """The app over ``tmp`` (hash embedder, offline formation model), rate limit off (the fuzzer
    sends hundreds of requests a minute with one key; 429 is covered by the auth tests)."""
    from memlane.config import load_settings
    from memlane.service.app import create_app

    return create_app(load_settings(env={"MEMLANE_RATE_LIMIT": "0"}), hub=make_hub(tmp), keys=keys)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceServer, dict[str, str]]]:
    """A real server over a fresh store with API keys; yields it with a full-access key's headers."""
    from memlane.service.keys import KeyStore

    tmp = tmp_path_factory.mktemp("fuzz")
    with KeyStore(tmp / "keys.db") as keys:
        headers = {"Authorization": f"Bearer {keys.create('fuzz').secret}"}
        with serve(_app(tmp, keys)) as srv:
            yield srv, headers


def _fuzz(op: Any, mode: Any, server: ServiceServer, headers: dict[str, str]) -> None:
    session = requests.Session()
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else [])

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not LONG,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=server.url, session=session, headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS, headers=headers)

    try:
        run()
    finally:
        session.close()


def _negatable(op: Any) -> bool:
    """An operation has invalid inputs to generate: a body, a query/header parameter, or a path
    parameter with a constraint (a plain string path parameter accepts every string)."""
    raw = op.definition.raw
    if raw.get("requestBody"):
        return True
    return any(
        p["in"] != "path" or p.get("schema") != {"title": p.get("schema", {}).get("title"), "type": "string"}
        for p in raw.get("parameters", [])
    )


CASES = [(op, "positive") for op in OPERATIONS] + [(op, "negative") for op in OPERATIONS if _negatable(op)]


@pytest.mark.parametrize(("op", "mode"), CASES, ids=[f"{op.label} {mode}" for op, mode in CASES])
def test_fuzz_operation(op: Any, mode: str, fuzz_server: tuple[ServiceServer, dict[str, str]]) -> None:
    """Positive cases (valid by the schema) and negative ones (invalid input: an operation
    without parameters or body has none) of one operation."""
    server, headers = fuzz_server
    _fuzz(op, schemathesis.GenerationMode(mode), server, headers)


# --------------------------------------------------------------------------- the fuzzer is not vacuous


def test_fuzzer_fails_on_a_body_the_schema_does_not_allow(tmp_path: Path) -> None:
    """Against a schema whose Health requires a field the server never sends, the same harness fails."""
    raw = json.loads(OPENAPI.read_text())
    raw["components"]["schemas"]["Health"]["required"] = ["status", "not_sent"]
    raw["components"]["schemas"]["Health"]["properties"]["not_sent"] = {"type": "string"}
    schema = schemathesis.openapi.from_dict(raw)
    op = schema["/health"]["GET"]
    with serve(_app(tmp_path, None)) as srv, pytest.raises(BaseException) as caught:
        _fuzz(op, schemathesis.GenerationMode.POSITIVE, srv, {})
    assert "JsonSchemaError" in _failure_types(caught.value) and "not_sent" in repr(_leaves(caught.value))


def test_fuzzer_fails_on_a_server_error(tmp_path: Path) -> None:
    """A server whose engine is broken answers 500: the harness reports it."""
    from memlane.service.app import create_app

    class BrokenHub:
        async def get(self, tenant: str) -> Any:
            raise RuntimeError("boom")

        async def aclose(self) -> None:
            return None

    op = _schema()["/v1/stats"]["GET"]
    with serve(create_app(hub=BrokenHub())) as srv, pytest.raises(BaseException) as caught:  # type: ignore[arg-type]
        _fuzz(op, schemathesis.GenerationMode.POSITIVE, srv, {})
    assert "ServerError" in _failure_types(caught.value)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _failure_types(exc: BaseException) -> set[str]:
    return {type(leaf).__name__ for leaf in _leaves(exc)}


# --------------------------------------------------------------------------- auth bypass

#: Routes anyone may call without a key.
PUBLIC = {"GET /health", "GET /version"}
#: Routes that hold no tenant data and may answer without a key (none today: the static tool
#: definitions are behind the key too). Any other answer to a bad credential must be 401.
STATIC: set[str] = set()
#: Routes that answer a user-bound key naming another user with 404 instead of 403 (adk-rs
#: ingest: "no session of that user", hiding whether it exists). Nothing is read or changed.
NOT_FOUND_FOR_OTHER_USER = {"PATCH /apps/{app}/users/{user}/memory"}
MARK = "acmesecret"
#: The header with which an admin key acts in another tenant (a non-admin key: 403).
TENANT = "X-Memlane-Tenant"


@dataclass
class Seeded:
    """Tenant ``acme``'s data (alice's and bob's) and the keys that attack it."""

    server: ServiceServer
    store: Path
    keys: dict[str, str]
    ids: dict[str, str]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    from memlane.service.keys import KeyStore

    tmp = tmp_path_factory.mktemp("bypass")
    with KeyStore(tmp / "keys.db") as store:
        keys = {
            "full": store.create("acme").secret,
            "read_only": store.create("acme", read_only=True).secret,
            "bob": store.create("acme", user_id="bob").secret,
            "other_tenant": store.create("other").secret,
        }
        revoked = store.create("acme")
        store.revoke(revoked.key.id)
        keys["revoked"] = revoked.secret
        with serve(_app(tmp, store)) as srv:
            ids = _seed(srv, keys["full"])
            yield Seeded(srv, tmp / "tenants" / "acme.db", keys, ids)


#: alice's sender (the identity map): bob's key and other tenants' keys find it unknown.
ALICE_SMS = {"channel": "sms", "sender": "+15550100"}


def _seed(srv: ServiceServer, key: str) -> dict[str, str]:
    h = {"Authorization": f"Bearer {key}"}
    c = srv.client
    for sid, user in (("sa", "alice"), ("sb", "bob")):
        assert c.post("/v1/sessions", json={"session_id": sid, "user_ids": [user]}, headers=h).status_code == 201
        r = c.post(f"/v1/sessions/{sid}/events", json={"content": f"{MARK} {user} said hi"}, headers=h)
        assert r.status_code == 201, r.text
    ids = {}
    for user in ("alice", "bob"):
        r = c.post("/v1/memories", json={"text": f"{MARK} {user} likes tea", "user_id": user}, headers=h)
        assert r.status_code == 201, r.text
        ids[f"{user}_memory"] = r.json()["memories"][0]["id"]
    r = c.post("/v1/identities", json={**ALICE_SMS, "user_id": "alice"}, headers=h)
    assert r.status_code == 201, r.text
    r = c.post("/v1/documents", json={"text": f"{MARK} alice's notes. " * 40, "user_id": "alice"}, headers=h)
    assert r.status_code == 201, r.text
    ids["document"] = r.json()["id"]
    r = c.get(f"/v1/documents/{ids['document']}/fragments", params={"user_id": "alice"}, headers=h)
    assert r.status_code == 200, r.text
    ids["fragment"] = r.json()["fragments"][0]["id"]
    r = c.post("/v1/proposals", json={"text": f"{MARK} alice is a vegan", "user_id": "alice"}, headers=h)
    assert r.status_code == 201, r.text
    ids["proposal"] = r.json()["id"]
    r = c.post("/v1/sessions/sa/form", headers=h)
    assert r.status_code == 202, r.text
    ids["job"] = r.json()["job_id"]
    for _ in range(500):  # the snapshot must not race the formation job
        if c.get(f"/v1/jobs/{ids['job']}", headers=h).json()["status"] in ("done", "failed"):
            break
        time.sleep(0.02)
    return ids


def _requests(ids: dict[str, str]) -> dict[str, tuple[str, str, dict[str, Any], bool]]:
    """A valid request of every non-public operation, aimed at alice's data in tenant acme:
    label -> (path, httpx kwargs, write?, names alice?)."""
    a = {"user_id": "alice"}
    mem, doc, frag, job = ids["alice_memory"], ids["document"], ids["fragment"], ids["job"]
    prop = ids["proposal"]
    text = {"text": "overwritten by an attacker"}
    return {
        "PATCH /apps/{app}/users/{user}/memory": (
            "/apps/default/users/alice/memory",
            {"json": {"sessionId": "sa"}},
            True,
            True,
        ),
        "GET /memory/events": ("/memory/events", {"params": {"session_id": "sa"}}, False, False),
        "GET /memory/sessions": ("/memory/sessions", {}, False, False),
        "GET /v1/consolidation-status": ("/v1/consolidation-status", {"params": a}, False, True),
        "GET /v1/context": ("/v1/context", {"params": {**a, "session_id": "sa"}}, False, True),
        "GET /v1/consolidated": ("/v1/consolidated", {"params": a}, False, True),
        "GET /v1/consolidated/history": ("/v1/consolidated/history", {"params": a}, False, True),
        "POST /v1/consolidate": ("/v1/consolidate", {"json": a}, True, True),
        "GET /v1/documents": ("/v1/documents", {"params": a}, False, True),
        "POST /v1/documents": ("/v1/documents", {"json": {**text, **a}}, True, True),
        "GET /v1/documents/{document_id}/fragments": (f"/v1/documents/{doc}/fragments", {"params": a}, False, True),
        "GET /v1/embeddings": ("/v1/embeddings", {}, False, False),
        "POST /v1/identities": ("/v1/identities", {"json": {"channel": "sms", "sender": "+1999", **a}}, True, True),
        "GET /v1/identities": ("/v1/identities", {"params": a}, False, True),
        "GET /v1/identities/resolve": ("/v1/identities/resolve", {"params": ALICE_SMS}, False, False),
        "DELETE /v1/identities": ("/v1/identities", {"params": ALICE_SMS}, True, False),
        "POST /v1/import": ("/v1/import", {"json": {"content": _IMPORT_LINE}}, True, True),
        "GET /v1/fragments/{fragment_id}/document": (f"/v1/fragments/{frag}/document", {"params": a}, False, True),
        "GET /v1/jobs": ("/v1/jobs", {}, False, False),
        "GET /v1/jobs/{job_id}": (f"/v1/jobs/{job}", {}, False, False),
        "POST /v1/jobs/{job_id}/retry": (f"/v1/jobs/{job}/retry", {}, True, False),
        "GET /v1/memories": ("/v1/memories", {"params": a}, False, True),
        "POST /v1/memories": ("/v1/memories", {"json": {**text, **a}}, True, True),
        "DELETE /v1/memories/{memory_id}": (f"/v1/memories/{mem}", {"params": a}, True, True),
        "GET /v1/memories/{memory_id}": (f"/v1/memories/{mem}", {"params": a}, False, True),
        "PATCH /v1/memories/{memory_id}": (f"/v1/memories/{mem}", {"params": a, "json": text}, True, True),
        "GET /v1/memories/{memory_id}/history": (f"/v1/memories/{mem}/history", {"params": a}, False, True),
        "GET /v1/profile": ("/v1/profile", {"params": a}, False, True),
        "GET /v1/proposals": ("/v1/proposals", {"params": a}, False, True),
        "POST /v1/proposals": ("/v1/proposals", {"json": {**text, **a}}, True, True),
        "GET /v1/reflections": ("/v1/reflections", {"params": a}, False, True),
        "GET /v1/proposals/{proposal_id}": (f"/v1/proposals/{prop}", {}, False, False),
        "POST /v1/proposals/{proposal_id}/review": (f"/v1/proposals/{prop}/review", {"json": {}}, True, False),
        "POST /v1/search": ("/v1/search", {"json": {"query": MARK, **a}}, False, True),
        "GET /v1/sessions": ("/v1/sessions", {"params": a}, False, True),
        "POST /v1/sessions": ("/v1/sessions", {"json": {"session_id": "sx", "user_ids": ["alice"]}}, True, True),
        "DELETE /v1/sessions/{session_id}": ("/v1/sessions/sa", {}, True, False),
        "GET /v1/sessions/{session_id}": ("/v1/sessions/sa", {}, False, False),
        "POST /v1/sessions/{session_id}/end": ("/v1/sessions/sa/end", {}, True, False),
        "GET /v1/sessions/{session_id}/events": ("/v1/sessions/sa/events", {}, False, False),
        "POST /v1/sessions/{session_id}/events": ("/v1/sessions/sa/events", {"json": {"content": "x"}}, True, False),
        "POST /v1/sessions/{session_id}/form": ("/v1/sessions/sa/form", {}, True, False),
        "POST /v1/sessions/{session_id}/reset": ("/v1/sessions/sa/reset", {}, True, False),
        "GET /v1/stats": ("/v1/stats", {"params": a}, False, True),
        "GET /v1/tools": ("/v1/tools", {}, False, False),
        "POST /v1/tools/{name}": ("/v1/tools/remember", {"params": a, "json": {"content": "x"}}, True, True),
        "DELETE /v1/users/{user_id}": ("/v1/users/alice", {}, True, True),
        "GET /v1/users/{user_id}/export": ("/v1/users/alice/export", {}, False, True),
        "GET /v1/users/{user_id}/summaries": ("/v1/users/alice/summaries", {}, False, True),
        "GET /v1/whoami": ("/v1/whoami", {}, False, False),
        "GET /v1/tenants": ("/v1/tenants", {}, False, False),
        "GET /v1/users": ("/v1/users", {}, False, False),
        "GET /v1/agents": ("/v1/agents", {}, False, False),
        "GET /v1/users/{user_id}/timeline": ("/v1/users/alice/timeline", {}, False, True),
        "GET /v1/users/{user_id}/growth": ("/v1/users/alice/growth", {}, False, True),
    }


_IMPORT_LINE = json.dumps({"user_id": "alice", "session_id": "imp", "role": "user", "content": "imported"})


def _send(srv: ServiceServer, label: str, path: str, kwargs: dict[str, Any], headers: dict[str, str]) -> Any:
    with srv.new_client(headers=headers) as client:
        return client.request(label.split()[0], path, **kwargs)


def _snapshot(db: Path) -> dict[str, list[str]]:
    """Every row of every table of a store file, as sorted text (read on its own connection)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(repr(row) for row in conn.execute(f'SELECT * FROM "{t}"')) for t in tables}
    finally:
        conn.close()


def test_every_route_has_a_bypass_request() -> None:
    """A route added to the committed schema without a bypass attempt here fails this test."""
    labels = {op.label for op in OPERATIONS} - PUBLIC
    assert labels == set(_requests(dict.fromkeys(("alice_memory", "document", "fragment", "job", "proposal"), "x")))


def test_public_routes_need_no_key(seeded: Seeded) -> None:
    for label in PUBLIC:
        assert _send(seeded.server, label, label.split()[1], {}, {}).status_code == 200


def test_auth_bypass_attempts_fail_and_change_nothing(seeded: Seeded) -> None:
    """No key, a wrong key, a revoked key, a wrong scheme, two different keys (401); a read-only
    key writing (403); a bob-bound key naming alice (403) or reaching her sessions and jobs
    (403/404, never her data); another tenant's key (never acme's data, 404 on acme's ids;
    403 when it names acme with the X-Memlane-Tenant header).
    Tenant acme's store file is byte-for-byte the same rows afterwards."""
    srv, keys, ids = seeded.server, seeded.keys, seeded.ids
    before = _snapshot(seeded.store)
    acme_ids = set(ids.values())
    bad_credentials = {
        "no key": {},
        "wrong key": {"Authorization": "Bearer ml_0123456789abcdef_notarealkey"},
        "malformed key": {"Authorization": "Bearer not-even-the-format"},
        "revoked key": {"Authorization": f"Bearer {keys['revoked']}"},
        "basic auth": {"Authorization": "Basic YWxpY2U6cGFzc3dvcmQ="},
        "wrong X-API-Key": {"X-API-Key": "ml_0123456789abcdef_notarealkey"},
        "two different keys": {"Authorization": f"Bearer {keys['full']}", "X-API-Key": keys["read_only"]},
    }
    problems: list[str] = []
    for label, (path, kwargs, write, names_alice) in _requests(ids).items():
        for what, headers in bad_credentials.items():
            r = _send(srv, label, path, kwargs, headers)
            if label in STATIC and r.status_code == 200 and MARK not in r.text:
                continue
            if r.status_code != 401 or r.json()["error"]["code"] != "unauthenticated":
                problems.append(f"{what}: {label} -> {r.status_code} {r.text[:120]}")
        if write:
            r = _send(srv, label, path, kwargs, {"Authorization": f"Bearer {keys['read_only']}"})
            if r.status_code != 403:
                problems.append(f"read-only key: {label} -> {r.status_code} {r.text[:120]}")
        r = _send(srv, label, path, kwargs, {"Authorization": f"Bearer {keys['bob']}"})
        leaked = (MARK in r.text and "alice" in r.text) or any(i in r.text for i in acme_ids - {ids["bob_memory"]})
        if names_alice and r.status_code != 403 and not (label in NOT_FOUND_FOR_OTHER_USER and r.status_code == 404):
            problems.append(f"bob-bound key naming alice: {label} -> {r.status_code} {r.text[:120]}")
        elif not names_alice and (r.status_code not in (403, 404) and (r.status_code >= 300 or leaked)):
            problems.append(f"bob-bound key on alice's session/job: {label} -> {r.status_code} {r.text[:120]}")
        elif r.is_success and leaked:
            problems.append(f"bob-bound key saw alice's data: {label} -> {r.text[:200]}")
        # another tenant's (non-admin) key naming acme with the tenant header: 403, always
        r = _send(srv, label, path, kwargs, {"Authorization": f"Bearer {keys['other_tenant']}", TENANT: "acme"})
        if r.status_code != 403 or MARK in r.text:
            problems.append(f"another tenant's key naming acme: {label} -> {r.status_code} {r.text[:120]}")
        r = _send(srv, label, path, kwargs, {"Authorization": f"Bearer {keys['other_tenant']}"})
        if MARK in r.text:
            problems.append(f"another tenant's key saw acme's data: {label} -> {r.text[:200]}")
        targets_acme_id = any(i in path for i in acme_ids) or "/sessions/sa" in path
        if targets_acme_id and r.status_code != 404:
            problems.append(f"another tenant's key on acme's id: {label} -> {r.status_code} {r.text[:120]}")
    after = _snapshot(seeded.store)
    changed = sorted(t for t in before.keys() | after.keys() if before.get(t) != after.get(t))
    if changed:
        problems.append(f"tables of tenant acme changed: {changed}")
    assert not problems, "\n".join(problems)
