"""Who am I, admin keys and the tenant header, the tenants, users and agents lists (issue 21's
API for the web inspector), against a REAL uvicorn server on loopback with a real keys file.

SQLite here (a store file per tenant); the users and agents lists on PostgreSQL and Redis
sessions are the engine's, tested on every backend in tests/engine/test_directory.py (via
test_engine_backends.py), and over HTTP on PostgreSQL below.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from memlane import AsyncMemory
from memlane.config import MemlaneSettings, ServerSettings
from memlane.service.app import create_app
from memlane.service.hub import MemoryHub
from memlane.service.keys import KeyStore
from service_server import ServiceServer, make_hub, serve

H = "X-Memlane-Tenant"


def bearer(secret: str, tenant: str | None = None) -> dict[str, str]:
    h = {"Authorization": f"Bearer {secret}"}
    if tenant is not None:
        h[H] = tenant
    return h


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()


def error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.json()["error"]["code"] == code, r.text


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[KeyStore]:
    with KeyStore(tmp_path / "keys.db") as store:
        yield store


@pytest.fixture
def keyed(tmp_path: Path, keys: KeyStore) -> Iterator[ServiceServer]:
    app = create_app(MemlaneSettings(server=ServerSettings(rate_limit=0)), hub=make_hub(tmp_path), keys=keys)
    with serve(app) as srv:
        yield srv


def contents(db: Path) -> list[str]:
    """Every memory's text in a tenant's store file (read on its own connection); [] when the
    file does not exist."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in conn.execute("SELECT content FROM facts"))
    finally:
        conn.close()


def snapshot(tmp_path: Path) -> dict[str, list[str]]:
    return {p.name: contents(p) for p in sorted((tmp_path / "tenants").glob("*.db"))}


# --------------------------------------------------------------------------- whoami


def test_whoami_for_every_kind_of_key(keyed: ServiceServer, keys: KeyStore) -> None:
    c = keyed.client
    cases = {
        "plain": keys.create("acme"),
        "read_only": keys.create("acme", read_only=True),
        "bob": keys.create("acme", user_id="bob"),
        "admin": keys.create("ops", admin=True),
        "admin_ro": keys.create("ops", admin=True, read_only=True),
    }
    seen = {name: ok(c.get("/v1/whoami", headers=bearer(k.secret))) for name, k in cases.items()}
    base = {"user_id": None, "read_only": False, "admin": False, "keys_configured": True}
    assert seen["plain"] == {**base, "tenant": "acme", "key_id": cases["plain"].key.id}
    assert seen["read_only"] == {**base, "tenant": "acme", "read_only": True, "key_id": cases["read_only"].key.id}
    assert seen["bob"] == {**base, "tenant": "acme", "user_id": "bob", "key_id": cases["bob"].key.id}
    assert seen["admin"] == {**base, "tenant": "ops", "admin": True, "key_id": cases["admin"].key.id}
    assert seen["admin_ro"]["admin"] and seen["admin_ro"]["read_only"]
    # an admin in another tenant: whoami says which one it acts in
    switched = ok(c.get("/v1/whoami", headers=bearer(cases["admin"].secret, "beta")))
    assert switched["tenant"] == "beta" and switched["admin"]
    error(c.get("/v1/whoami"), 401, "unauthenticated")


def test_whoami_on_the_keyless_loopback_server(tmp_path: Path) -> None:
    with serve(create_app(hub=make_hub(tmp_path), keys=KeyStore(tmp_path / "none.db", create=False))) as srv:
        me = ok(srv.client.get("/v1/whoami"))
        assert me == {
            "tenant": "default",
            "user_id": None,
            "read_only": False,
            "admin": True,
            "key_id": None,
            "keys_configured": False,
        }
        # the operator's own server may look into another tenant too
        assert ok(srv.client.get("/v1/whoami", headers={H: "beta"}))["tenant"] == "beta"
        listed = ok(srv.client.get("/v1/tenants"))["tenants"]
        assert {"tenant": "default", "current": True} in listed


# --------------------------------------------------------------------------- the tenant header


def test_an_admin_key_reads_and_writes_another_tenants_store(
    tmp_path: Path, keyed: ServiceServer, keys: KeyStore
) -> None:
    c = keyed.client
    admin = keys.create("ops", admin=True).secret
    beta = keys.create("beta").secret
    r = c.post("/v1/memories", json={"text": "beta's own note", "user_id": "ann"}, headers=bearer(beta))
    ok(r, 201)
    r = c.post("/v1/memories", json={"text": "written by the admin", "user_id": "ann"}, headers=bearer(admin, "beta"))
    ok(r, 201)
    assert contents(tmp_path / "tenants" / "beta.db") == ["beta's own note", "written by the admin"]
    assert contents(tmp_path / "tenants" / "ops.db") == []
    assert contents(tmp_path / "memlane.db") == []
    listed = ok(c.get("/v1/memories", params={"user_id": "ann"}, headers=bearer(admin, "beta")))
    assert sorted(m["content"] for m in listed["memories"]) == ["beta's own note", "written by the admin"]
    # without the header the admin is in its own tenant, which holds nothing of ann's
    assert ok(c.get("/v1/memories", params={"user_id": "ann"}, headers=bearer(admin)))["memories"] == []
    # the beta key sees what the admin wrote: one store
    mine = ok(c.get("/v1/memories", params={"user_id": "ann"}, headers=bearer(beta)))
    assert len(mine["memories"]) == 2


def test_a_non_admin_key_naming_another_tenant_is_refused_and_changes_nothing(
    tmp_path: Path, keyed: ServiceServer, keys: KeyStore
) -> None:
    c = keyed.client
    acme = keys.create("acme").secret
    beta = keys.create("beta").secret
    ok(c.post("/v1/memories", json={"text": "beta secret", "user_id": "ann"}, headers=bearer(beta)), 201)
    ok(c.post("/v1/memories", json={"text": "acme note", "user_id": "ann"}, headers=bearer(acme)), 201)
    before = snapshot(tmp_path)
    for method, path, kwargs in (
        ("POST", "/v1/memories", {"json": {"text": "planted", "user_id": "ann"}}),
        ("GET", "/v1/memories", {"params": {"user_id": "ann"}}),
        ("GET", "/v1/users", {}),
        ("DELETE", "/v1/users/ann", {}),
    ):
        r = c.request(method, path, headers=bearer(acme, "beta"), **kwargs)
        error(r, 403, "forbidden")
        assert "beta secret" not in r.text
    assert snapshot(tmp_path) == before
    # naming its own tenant is allowed
    assert ok(c.get("/v1/whoami", headers=bearer(acme, "acme")))["tenant"] == "acme"
    listed = ok(c.get("/v1/memories", params={"user_id": "ann"}, headers=bearer(acme, "acme")))
    assert [m["content"] for m in listed["memories"]] == ["acme note"]


def test_a_read_only_admin_stays_read_only_in_every_tenant(
    tmp_path: Path, keyed: ServiceServer, keys: KeyStore
) -> None:
    c = keyed.client
    ro_admin = keys.create("ops", admin=True, read_only=True).secret
    beta = keys.create("beta").secret
    ok(c.post("/v1/memories", json={"text": "beta note", "user_id": "ann"}, headers=bearer(beta)), 201)
    before = snapshot(tmp_path)
    r = c.post("/v1/memories", json={"text": "planted", "user_id": "ann"}, headers=bearer(ro_admin, "beta"))
    error(r, 403, "forbidden")
    error(c.delete("/v1/users/ann", headers=bearer(ro_admin, "beta")), 403, "forbidden")
    assert snapshot(tmp_path) == before
    listed = ok(c.get("/v1/memories", params={"user_id": "ann"}, headers=bearer(ro_admin, "beta")))
    assert [m["content"] for m in listed["memories"]] == ["beta note"]


def test_a_revoked_admin_key_is_refused(keyed: ServiceServer, keys: KeyStore) -> None:
    admin = keys.create("ops", admin=True)
    assert ok(keyed.client.get("/v1/tenants", headers=bearer(admin.secret)))["tenants"]
    keys.revoke(admin.key.id)
    for headers in (bearer(admin.secret), bearer(admin.secret, "beta")):
        error(keyed.client.get("/v1/tenants", headers=headers), 401, "unauthenticated")
        error(keyed.client.get("/v1/whoami", headers=headers), 401, "unauthenticated")


def test_a_malformed_tenant_header_is_a_400_that_changes_nothing(
    tmp_path: Path, keyed: ServiceServer, keys: KeyStore
) -> None:
    admin = keys.create("ops", admin=True).secret
    before = snapshot(tmp_path)
    bad: list[list[tuple[bytes, bytes]]] = [
        [(b"x-memlane-tenant", b"a\tb")],  # a control character
        [(b"x-memlane-tenant", b"\xff\xfe")],  # not UTF-8
        [(b"x-memlane-tenant", b"")],  # blank
        [(b"x-memlane-tenant", b"t" * 300)],  # too long
        [(b"x-memlane-tenant", b"a"), (b"x-memlane-tenant", b"b")],  # two tenants
    ]
    for extra in bad:
        headers = [(b"authorization", f"Bearer {admin}".encode()), *extra]
        r = keyed.client.post("/v1/memories", json={"text": "x", "user_id": "ann"}, headers=headers)
        error(r, 400, "invalid_scope")
    assert snapshot(tmp_path) == before
    # a UTF-8 name is a name like any other
    r = keyed.client.get(
        "/v1/whoami", headers=[(b"authorization", f"Bearer {admin}".encode()), (b"x-memlane-tenant", "café".encode())]
    )
    assert ok(r)["tenant"] == "café"
    # without a valid key the header is not even looked at: 401, not 400
    r = keyed.client.get("/v1/whoami", headers=[(b"x-memlane-tenant", b"\xff")])
    error(r, 401, "unauthenticated")


# --------------------------------------------------------------------------- tenants


def test_tenants_lists_stores_and_key_tenants_for_admins_only(
    tmp_path: Path, keyed: ServiceServer, keys: KeyStore
) -> None:
    c = keyed.client
    admin = keys.create("ops", admin=True).secret
    acme = keys.create("acme").secret
    keys.create("keyonly")
    revoked = keys.create("gone")
    keys.revoke(revoked.key.id)
    ok(c.post("/v1/memories", json={"text": "x", "user_id": "u"}, headers=bearer(acme)), 201)
    (tmp_path / "tenants" / "a%2Fb.db").write_bytes(b"")  # a store file of tenant "a/b"
    listed = ok(c.get("/v1/tenants", headers=bearer(admin)))["tenants"]
    assert [t["tenant"] for t in listed] == ["a/b", "acme", "default", "keyonly", "ops"]
    assert [t["tenant"] for t in listed if t["current"]] == ["ops"]
    in_acme = ok(c.get("/v1/tenants", headers=bearer(admin, "acme")))["tenants"]
    assert [t["tenant"] for t in in_acme if t["current"]] == ["acme"]
    for key in (acme, keys.create("acme", read_only=True).secret, keys.create("acme", user_id="u").secret):
        error(c.get("/v1/tenants", headers=bearer(key)), 403, "forbidden")


# --------------------------------------------------------------------------- users and agents


def _seed(c: httpx.Client, h: dict[str, str]) -> None:
    for text, user, agent in (
        ("alice likes tea", "alice", "bot"),
        ("alice lives in Oslo", "alice", "bot"),
        ("bob plays chess", "bob", None),
    ):
        ok(c.post("/v1/memories", json={"text": text, "user_id": user, "agent_id": agent}, headers=h), 201)
    ok(
        c.post("/v1/memories", json={"text": "answers in French", "agent_id": "helper", "scope": "agent"}, headers=h),
        201,
    )
    body = {"session_id": "c1", "user_ids": ["carol"], "agent_id": "bot", "app": "chat"}
    ok(c.post("/v1/sessions", json=body, headers=h), 201)


def test_users_and_agents_over_http(keyed: ServiceServer, keys: KeyStore) -> None:
    c = keyed.client
    full = bearer(keys.create("acme").secret)
    _seed(c, full)
    users = ok(c.get("/v1/users", headers=full))
    assert [(u["user_id"], u["facts"], u["valid_facts"], u["sessions"]) for u in users["users"]] == [
        ("alice", 2, 2, 0),
        ("bob", 1, 1, 0),
        ("carol", 0, 0, 1),
    ]
    assert users["next_cursor"] is None and all(u["last_activity"] for u in users["users"])
    walked: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = ok(c.get("/v1/users", params=params, headers=full))
        walked += [u["user_id"] for u in page["users"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert walked == ["alice", "bob", "carol"]
    by_bot = ok(c.get("/v1/users", params={"agent_id": "bot"}, headers=full))
    assert [u["user_id"] for u in by_bot["users"]] == ["alice", "carol"]
    agents = ok(c.get("/v1/agents", headers=full))
    assert agents == {
        "agents": [{"agent_id": "bot", "facts": 2}, {"agent_id": "helper", "facts": 1}],
        "apps": [{"app": "chat", "sessions": 1}],
    }
    error(c.get("/v1/users", params={"cursor": "%%%"}, headers=full), 400, "invalid_input")
    error(c.get("/v1/users", params={"limit": 0}, headers=full), 400, "invalid_input")
    # a read-only key reads them
    ro = bearer(keys.create("acme", read_only=True).secret)
    assert ok(c.get("/v1/users", headers=ro)) == users


def test_a_user_bound_key_lists_only_its_user(keyed: ServiceServer, keys: KeyStore) -> None:
    c = keyed.client
    _seed(c, bearer(keys.create("acme").secret))
    carol = bearer(keys.create("acme", user_id="carol").secret)
    seen = ok(c.get("/v1/users", headers=carol))
    assert [u["user_id"] for u in seen["users"]] == ["carol"]
    assert ok(c.get("/v1/agents", headers=carol)) == {"agents": [], "apps": [{"app": "chat", "sessions": 1}]}
    alice = bearer(keys.create("acme", user_id="alice").secret)
    assert ok(c.get("/v1/agents", headers=alice)) == {"agents": [{"agent_id": "bot", "facts": 2}], "apps": []}
    for r in (c.get("/v1/users", headers=alice), c.get("/v1/agents", headers=alice)):
        assert "carol" not in r.text and "bob" not in r.text and "helper" not in r.text
    nobody = bearer(keys.create("acme", user_id="nobody").secret)
    assert ok(c.get("/v1/users", headers=nobody)) == {"users": [], "next_cursor": None}
    assert ok(c.get("/v1/users", params={"agent_id": "bot"}, headers=nobody))["users"] == []


@pytest.fixture
def pg_service(tmp_path: Path, pg_url: str) -> Iterator[ServiceServer]:
    def factory(where: str) -> AsyncMemory:
        return AsyncMemory(where, embedder="hash", sessions="sqlite")

    with serve(create_app(hub=MemoryHub(factory, pg_url, tmp_path / "tenants"))) as srv:
        yield srv


def test_users_and_agents_over_http_on_postgresql(pg_service: ServiceServer) -> None:
    c = pg_service.client
    _seed(c, {})
    users = ok(c.get("/v1/users", params={"limit": 2}))
    assert [(u["user_id"], u["facts"], u["sessions"]) for u in users["users"]] == [("alice", 2, 0), ("bob", 1, 0)]
    rest = ok(c.get("/v1/users", params={"cursor": users["next_cursor"]}))
    assert [(u["user_id"], u["sessions"]) for u in rest["users"]] == [("carol", 1)]
    assert rest["next_cursor"] is None
    assert ok(c.get("/v1/agents"))["agents"] == [{"agent_id": "bot", "facts": 2}, {"agent_id": "helper", "facts": 1}]


def test_tenants_on_postgresql_are_listed_from_their_schemas(tmp_path: Path, pg_url: str, keys: KeyStore) -> None:
    """A tenant an admin wrote to (no key names it) is listed by a later server whose engine for
    it is not open: the schema records its tenant's name. A schema whose recorded name does
    not map back to it (another deployment's, a forged one) is not listed."""
    import psycopg
    from psycopg import sql

    from memlane.stores.postgres.tenants import tenant_schema
    from services import drop_schema

    base_url, _, query = pg_url.partition("?")
    base = dict(p.split("=", 1) for p in query.split("&"))["schema"]
    admin = keys.create("ops", admin=True).secret
    forged = f"{base}_t_forged"

    def app() -> Any:
        def factory(where: str) -> AsyncMemory:
            return AsyncMemory(where, embedder="hash", sessions="sqlite")

        hub = MemoryHub(factory, pg_url, tmp_path / "tenants")
        return create_app(MemlaneSettings(server=ServerSettings(rate_limit=0)), hub=hub, keys=keys)

    try:
        with serve(app()) as srv:
            r = srv.client.post(
                "/v1/memories", json={"text": "a note", "user_id": "ann"}, headers=bearer(admin, "Beta Corp|x")
            )
            ok(r, 201)
        with psycopg.connect(base_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(forged)))
            conn.execute(
                sql.SQL("CREATE TABLE {}.meta (key TEXT PRIMARY KEY, value TEXT)").format(sql.Identifier(forged))
            )
            conn.execute(sql.SQL("INSERT INTO {}.meta VALUES ('tenant', 'forged')").format(sql.Identifier(forged)))
        with serve(app()) as srv:
            listed = ok(srv.client.get("/v1/tenants", headers=bearer(admin)))["tenants"]
            assert [t["tenant"] for t in listed] == ["Beta Corp|x", "default", "ops"]
            found = ok(srv.client.get("/v1/memories", params={"user_id": "ann"}, headers=bearer(admin, "Beta Corp|x")))
            assert [m["content"] for m in found["memories"]] == ["a note"]
    finally:
        for schema in (tenant_schema(base, "Beta Corp|x"), tenant_schema(base, "ops"), forged):
            drop_schema(base_url, schema)
