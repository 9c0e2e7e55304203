"""Where each tenant's data lives on shared servers (service/hub.py), and the setting that
leaves formation to ``memlane worker`` processes.

* PostgreSQL: each tenant a schema of its own (``?schema=``), a valid identifier of at most 63
  characters, different for different tenant names (also names that read the same once
  sanitized), the default tenant's URL untouched;
* Redis: each tenant a key prefix of its own under the configured one, never a prefix of
  another tenant's;
* the hub hands each tenant's engine its own store, session URL and queue URL (checked on the
  unopened engines, and end to end on a real PostgreSQL and Redis: two tenants' rows land in
  two schemas, their keys under two prefixes, and neither reads the other's);
* ``server.formation_worker`` off (env, ``memlane serve --no-formation-worker``) gives the
  hub's engines ``background=False``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlane.config import load_settings
from memlane.errors import ConfigError
from memlane.service.hub import DEFAULT_TENANT, MemoryHub, tenant_location, tenant_store
from memlane.stores.postgres.tenants import tenant_schema

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
PG = "postgresql://memlane:s3cret@db.example:5432/mem?sslmode=require&schema=prod&pool_max=4"
REDIS = "redis://:pw@cache:6379/2?prefix=app1:&ttl=3600"


def _params(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


tenant_names = st.text(min_size=1, max_size=300).filter(lambda t: t.strip() != "" and t != DEFAULT_TENANT)


# --------------------------------------------------------------------------- PostgreSQL
def test_the_default_tenant_keeps_every_url_as_configured(tmp_path: Path) -> None:
    for url in (PG, REDIS, "postgresql://h/db", "redis://h:6379/0"):
        assert tenant_location(url, DEFAULT_TENANT) == url
        assert tenant_store(url, tmp_path, DEFAULT_TENANT) == url
    assert tenant_store(str(tmp_path / "m.db"), tmp_path / "t", DEFAULT_TENANT) == str(tmp_path / "m.db")


def test_a_tenant_gets_its_own_schema_and_keeps_the_rest_of_the_url() -> None:
    url = tenant_location(PG, "acme")
    parts, base = urlsplit(url), urlsplit(PG)
    assert (parts.scheme, parts.netloc, parts.path) == (base.scheme, base.netloc, base.path)  # password kept
    params = _params(url)
    assert params["sslmode"] == "require" and params["pool_max"] == "4"
    assert params["schema"] == tenant_schema("prod", "acme")
    assert params["schema"].startswith("prod_t_acme_") and IDENT.match(params["schema"])
    assert list(_params(url)).count("schema") == 1  # replaced, not added twice
    # no schema configured: t_<readable>_<digest>, added
    bare = _params(tenant_location("postgresql://h/db", "Acme Corp"))["schema"]
    assert bare.startswith("t_acme_corp_") and IDENT.match(bare)
    # the file store of another tenant is still a file in tenants_dir
    assert tenant_store("postgresql://h/db?schema=x", "/unused", "acme") == tenant_location(
        "postgresql://h/db?schema=x", "acme"
    )


def test_schemas_of_tenants_that_read_alike_differ() -> None:
    names = ["acme", "ACME", "Acme", "acme|x", "acme_x", "acme x", "acme-x", "acme__x", "_acme", "é", "è", "??", "!!"]
    names += ["a" * 200, "a" * 199 + "b", "x" * 40 + "|" + "y", "x" * 40 + "_" + "y"]
    schemas = {tenant_schema("memlane_test", n) for n in names}
    assert len(schemas) == len(names)
    assert all(IDENT.match(s) and len(s) <= 63 for s in schemas)
    # different default schemas keep their tenants apart too
    assert tenant_schema("a", "t") != tenant_schema("b", "t") != tenant_schema(None, "t")


@given(base=st.sampled_from([None, "memlane", "x" * 63, "Prod_2"]), a=tenant_names, b=tenant_names)
def test_any_tenant_name_gives_a_valid_schema_distinct_from_another_names(base: str | None, a: str, b: str) -> None:
    from memlane.stores.postgres.db import parse_pg_location

    sa, sb = tenant_schema(base, a), tenant_schema(base, b)
    assert IDENT.match(sa) and len(sa) <= 63
    assert (sa == sb) == (a == b)
    assert sa != base
    url = tenant_location("postgresql://h/db" + (f"?schema={base}" if base else ""), a)
    assert parse_pg_location(url)[1] == sa  # the store accepts it as its schema


# --------------------------------------------------------------------------- Redis
def test_a_tenant_gets_its_own_redis_prefix_under_the_configured_one() -> None:
    url = tenant_location(REDIS, "acme|x")
    params = _params(url)
    assert params["prefix"] == "app1:tenant:acme%7Cx:" and params["ttl"] == "3600"
    assert urlsplit(url).netloc == urlsplit(REDIS).netloc
    assert _params(tenant_location("redis://h:6379/0", "acme"))["prefix"] == "memlane:tenant:acme:"


@given(a=tenant_names, b=tenant_names)
def test_no_tenant_prefix_is_a_prefix_of_another(a: str, b: str) -> None:
    pa, pb = (_params(tenant_location("redis://h/0?prefix=p:", t))["prefix"] for t in (a, b))
    if a != b:
        assert not pa.startswith(pb) and not pb.startswith(pa)
    assert pa.startswith("p:") and pa != "p:"


def test_a_file_url_has_no_per_tenant_location() -> None:
    with pytest.raises(ConfigError, match="per-tenant"):
        tenant_location("sqlite:///a.db", "acme")
    with pytest.raises(ConfigError, match="per-tenant") as err:
        tenant_location("mysql://me:hunter2@db/mem", "acme")
    assert "hunter2" not in str(err.value)


# --------------------------------------------------------------------------- the hub
def _engine(hub: MemoryHub, tenant: str) -> Any:
    from memlane.service.hub import tenant_store as where

    return hub._gen.factory(tenant, where(hub.default_store, hub.tenants_dir, tenant))


def test_the_hub_builds_each_tenant_on_its_own_store_sessions_and_queue(tmp_path: Path) -> None:
    settings = load_settings(
        env={
            "MEMLANE_DB": "postgresql://h/db?schema=base",
            "MEMORY_TYPE": "redis",
            "MEMORY_REDIS_URL": "redis://h:6379/0?prefix=s:",
            "MEMLANE_QUEUE": "redis://h:6379/1?prefix=q:",
            "MEMLANE_TENANTS_DIR": str(tmp_path / "tenants"),
        }
    )
    hub = MemoryHub.from_settings(settings, watch=False)
    default, acme = _engine(hub, DEFAULT_TENANT), _engine(hub, "acme")
    assert default.db_path == "postgresql://h/db?schema=base"
    assert _params(default._specs[1])["prefix"] == "s:" and default._jobs_spec == "redis://h:6379/1?prefix=q:"
    assert acme.db_path == tenant_location("postgresql://h/db?schema=base", "acme")
    assert _params(acme._specs[1])["prefix"] == "s:tenant:acme:"
    assert urlsplit(acme._specs[1]).netloc == "h:6379" and urlsplit(acme._specs[1]).path == "/0"
    assert acme._jobs_spec == "redis://h:6379/1?prefix=q%3Atenant%3Aacme%3A"
    assert not (tmp_path / "tenants").exists()  # no tenant files on a shared server


@pytest.mark.parametrize(
    ("env", "argv", "background"),
    [
        ({}, [], True),
        ({"MEMLANE_FORMATION_WORKER": "false"}, [], False),
        ({}, ["--no-formation-worker"], False),
    ],
)
def test_formation_worker_off_gives_engines_without_background_formation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], argv: list[str], background: bool
) -> None:
    from memlane.cli.main import build_parser
    from memlane.cli.serve_cmd import service_settings

    for name in ("MEMLANE_FORMATION_WORKER", "MEMLANE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(["serve", "--db", str(tmp_path / "m.db"), *argv])
    settings = service_settings(args)
    assert settings.server.formation_worker is background
    hub = MemoryHub.from_settings(settings, watch=False)
    for tenant in (DEFAULT_TENANT, "acme"):
        cfg = _engine(hub, tenant).formation_config
        assert cfg.background is background
        assert cfg.enabled and cfg.auto_ingest  # jobs are still queued by triggers and idle timers


async def test_without_the_formation_worker_jobs_wait_in_the_queue_and_form_runs_inline(tmp_path: Path) -> None:
    """The engine queues ``wait=False`` jobs for a worker (none runs them in the process); a
    waiting ``form`` runs its own job."""
    settings = load_settings(
        env={"MEMLANE_DB": str(tmp_path / "m.db"), "MEMLANE_EMBEDDER": "hash", "MEMLANE_FORMATION_WORKER": "false"}
    )
    hub = MemoryHub.from_settings(settings, watch=False)
    try:
        m = await hub.get("default")
        await m.start()
        assert m.formation._task is None  # no background worker task
        queued = await m.add("I moved to Porto last week.", user_id="sam", infer=True, wait=False)
        assert queued.status == "queued"
        done = await m.add("My sister Ana lives in Braga.", user_id="sam", infer=True)  # waits: runs its own job
        assert [f.content for f in done] and "Braga" in done[0].content
        assert (await m.get_job(queued.id)).status == "queued"  # still waiting for a worker
        assert await m.run_jobs() == 1  # what a `memlane worker` does
        assert (await m.get_job(queued.id)).status == "done"
    finally:
        await hub.aclose()


async def test_two_tenants_on_one_postgresql_and_one_redis_never_meet(pg_url: str, redis_url: str) -> None:
    """End to end on real servers: each tenant's facts are rows of its own schema, its sessions
    and jobs keys under its own prefix; neither tenant reads the other's."""
    import psycopg
    import redis

    from services import with_params

    base_schema = _params(pg_url)["schema"]
    base_prefix = _params(redis_url)["prefix"]
    settings = load_settings(
        env={
            "MEMLANE_DB": pg_url,
            "MEMLANE_EMBEDDER": "hash",
            "MEMORY_TYPE": "redis",
            "MEMORY_REDIS_URL": with_params(redis_url, prefix=f"{base_prefix}s:"),
            "MEMLANE_QUEUE": with_params(redis_url, prefix=f"{base_prefix}q:"),
            "MEMLANE_FORMATION_WORKER": "false",
        }
    )
    hub = MemoryHub.from_settings(settings, watch=False)
    schemas = {t: tenant_schema(base_schema, t) for t in ("acme", "acme|x")}
    try:
        for tenant in ("default", "acme", "acme|x"):
            m = await hub.get(tenant)
            await m.add(f"alice's secret in {tenant} is tea", user_id="alice")
            await m.sessions.create_session(session_id=f"s-{tenant}", user_ids=["alice"])
            await m.add(f"alice also likes {tenant} biscuits", user_id="alice", infer=True, wait=False)
        for tenant in ("default", "acme", "acme|x"):
            m = await hub.get(tenant)
            page = await m.list(user_id="alice")
            assert [f.content for f in page.items] == [f"alice's secret in {tenant} is tea"]
            assert [s.id for s in (await m.sessions.list_sessions())] == [f"s-{tenant}"]
            assert len(await m.list_jobs()) == 1
    finally:
        await hub.aclose()
    base = urlsplit(pg_url)._replace(query="").geturl()
    with psycopg.connect(base, autocommit=True) as conn:
        for tenant, schema in (("default", base_schema), *schemas.items()):
            rows = conn.execute(f'SELECT content FROM "{schema}".facts').fetchall()
            assert rows == [(f"alice's secret in {tenant} is tea",)], (tenant, rows)
        for schema in schemas.values():
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    client = redis.Redis.from_url(urlsplit(redis_url)._replace(query="").geturl())
    try:
        keys = [k.decode() for k in client.scan_iter(match=f"{base_prefix}*", count=1000)]
    finally:
        client.close()
    for kind in ("s:", "q:"):
        tenant_keys = {
            t: [k for k in keys if k.startswith(f"{base_prefix}{kind}tenant:{quote(t, safe='')}:")]
            for t in ("acme", "acme|x")
        }
        assert all(tenant_keys.values()), (kind, keys)
        assert not set(tenant_keys["acme"]) & set(tenant_keys["acme|x"])
        assert any(k.startswith(f"{base_prefix}{kind}") and "tenant:" not in k for k in keys), (kind, keys)
