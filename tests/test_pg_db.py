"""The PostgreSQL database seam: URL parameters, migrations once, schemas kept apart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memlane.errors import ConfigError, StorageError
from memlane.stores.postgres.db import CHECK_IDLE_SECONDS, PgDatabase, parse_pg_location, redact
from memlane.stores.postgres.migrations import MIGRATIONS


def test_location_parameters_are_memlanes_own() -> None:
    url, schema, lo, hi = parse_pg_location("postgresql://u:pw@h:5/db?schema=t1&pool_max=4&sslmode=disable")
    assert (schema, lo, hi) == ("t1", 1, 4)
    assert url == "postgresql://u:pw@h:5/db?sslmode=disable"
    assert redact("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    for bad in ("postgresql://h/db?schema=a;drop", "postgresql://h/db?pool_max=0", "postgresql://h/db?pool_min=x"):
        with pytest.raises(ConfigError):
            parse_pg_location(bad)
    assert PgDatabase("postgresql://h/db?purge=rewrite").purge_rewrite
    assert not PgDatabase("postgresql://h/db").purge_rewrite
    with pytest.raises(ConfigError, match="purge= takes"):
        PgDatabase("postgresql://h/db?purge=shred")


async def test_concurrent_opens_migrate_once(pg_url: str) -> None:
    dbs = await asyncio.gather(*(PgDatabase.open(pg_url) for _ in range(3)))
    try:
        async with dbs[0].connection() as conn:
            rows = await (await conn.execute("SELECT name FROM schema_migrations ORDER BY name")).fetchall()
            assert [r[0] for r in rows] == [name for name, _ in MIGRATIONS]
            path = await (await conn.execute("SHOW search_path")).fetchone()
            assert path is not None and dbs[0].schema in path[0]
    finally:
        for db in dbs:
            db.acquire()
            await db.release()


async def test_unreachable_server_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot connect"):
        await PgDatabase.open("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


async def test_a_server_gone_away_is_a_clear_storage_error_and_its_return_is_recovered_from(tmp_path: Path) -> None:
    from memlane.devserver import start_postgres

    server = start_postgres(tmp_path / "pg")
    db = await PgDatabase.open(server.url + "?pool_timeout=1&pool_min=0")
    db.acquire()
    try:
        async with db.connection() as conn:
            await conn.execute("SELECT 1")
        server.stop()
        # The connection still in the pool dies with the server: its call fails as a StorageError
        # too; the next ones wait pool_timeout for a new connection and say why there is none.
        with pytest.raises(StorageError, match=r"PostgreSQL at .*terminat"):
            async with db.connection() as conn:
                await conn.execute("SELECT 1")
        with pytest.raises(StorageError, match=r"no PostgreSQL connection within 1 s at .*: .*(refused|failed)"):
            async with db.connection() as conn:
                await conn.execute("SELECT 1")
        server = start_postgres(tmp_path / "pg", port=server.port)  # back: the same pool recovers
        for _ in range(30):  # once its reconnection backoff (which grew while the server was down) ends
            try:
                async with db.connection() as conn:
                    assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
                break
            except StorageError:
                await asyncio.sleep(0.5)
        else:
            pytest.fail("the pool did not recover from the server's restart in 30 tries")
        # A restart while the pooled connection sits idle: it is checked as it leaves the pool
        # (idle >= CHECK_IDLE_SECONDS) and replaced, so the call does not fail at all.
        db.pool_timeout = 30.0  # the replacement connection may wait out the pool's reconnection backoff
        server.stop()
        server = start_postgres(tmp_path / "pg", port=server.port)
        await asyncio.sleep(CHECK_IDLE_SECONDS)
        async with db.connection() as conn:
            assert await (await conn.execute("SELECT 2")).fetchone() == (2,)
    finally:
        await db.release()
        server.stop()
    with pytest.raises(ConfigError, match="pool_timeout"):
        PgDatabase("postgresql://h/db?pool_timeout=soon")


def test_driver_connection_errors_are_503_storage_unavailable_not_500() -> None:
    import psycopg
    import redis

    from memlane.service.errors import status_and_code

    for exc in (psycopg.errors.AdminShutdown("gone"), psycopg.OperationalError("x"), redis.ConnectionError("x"),
                redis.TimeoutError("x"), StorageError("x")):  # fmt: skip
        assert status_and_code(exc) == (503, "storage_unavailable"), exc
    assert status_and_code(psycopg.errors.UniqueViolation("bug")) == (500, "internal_error")
    assert status_and_code(ValueError("bug")) == (500, "internal_error")
