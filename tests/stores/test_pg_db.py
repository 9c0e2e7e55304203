"""The PostgreSQL database seam: URL parameters, migrations once, schemas kept apart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memlane.errors import ConfigError, StorageError
from memlane.stores.postgres.db import PgDatabase, parse_pg_location, redact
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
        # The connection still in the pool died with the server: it is not handed out (its
        # socket has the server's goodbye to read); the call waits pool_timeout for a new one
        # and says why there is none.
        for _ in range(2):
            with pytest.raises(StorageError, match=r"no PostgreSQL connection within 1 s at .*: .*(refused|failed)"):
                async with db.connection() as conn:
                    await conn.execute("SELECT 1")
        assert db.replaced == 1
        db.pool_timeout = 30.0  # generous: a bound, not a measurement
        server = start_postgres(tmp_path / "pg", port=server.port)  # back: the same pool recovers at once
        async with db.connection() as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
        # A restart while the pooled connection sits idle: it is checked as it leaves the pool
        # and replaced, so the call does not fail at all.
        server.stop()
        server = start_postgres(tmp_path / "pg", port=server.port)
        async with db.connection() as conn:
            assert await (await conn.execute("SELECT 2")).fetchone() == (2,)
    finally:
        await db.release()
        server.stop()
    with pytest.raises(ConfigError, match="pool_timeout"):
        PgDatabase("postgresql://h/db?pool_timeout=soon")


async def test_no_call_fails_once_a_restarted_server_is_back(tmp_path: Path) -> None:
    """Issue 17: after a restart calls got 503 "pool is still reconnecting" (the pool's
    reconnection backoff grew during the outage) or failed on a stale pooled connection. Every
    call made once the server is back succeeds: dead pooled connections are replaced as they
    leave the pool, and while the pool reconnects calls use connections of their own."""
    from memlane.devserver import start_postgres

    server = start_postgres(tmp_path / "pg")
    db = await PgDatabase.open(server.url + "?pool_timeout=30&pool_min=2&pool_max=4")
    db.acquire()

    async def call(i: int) -> int:
        async with db.connection() as conn:
            row = await (await conn.execute("SELECT %s::int", (i,))).fetchone()
            assert row is not None
            return int(row[0])

    try:
        assert await asyncio.gather(*(call(i) for i in range(8))) == list(range(8))
        # (a) a quick restart: every pooled connection is dead, some returned a moment ago
        server.stop()
        server = start_postgres(tmp_path / "pg", port=server.port)
        assert await asyncio.gather(*(call(i) for i in range(20))) == list(range(20))
        assert [await call(i) for i in range(20)] == list(range(20))
        assert db.replaced >= 1
        # (b) an outage long enough for the pool's reconnection backoff to grow: calls made
        # meanwhile fail (503), the calls made once the server is back all succeed
        server.stop()
        db.pool_timeout = 1.0
        failed = 0
        for _ in range(8):
            with pytest.raises(StorageError, match="no PostgreSQL connection within 1 s"):
                await call(0)
            failed += 1
        db.pool_timeout = 5.0  # shorter than the grown backoff; not a duration assertion
        server = start_postgres(tmp_path / "pg", port=server.port)
        assert await asyncio.gather(*(call(i) for i in range(20))) == list(range(20))
        assert [await call(i) for i in range(20)] == list(range(20))
        assert failed == 8
    finally:
        await db.release()
        server.stop()


def test_driver_connection_errors_are_503_storage_unavailable_not_500() -> None:
    import psycopg
    import redis

    from memlane.service.errors import status_and_code

    for exc in (
        psycopg.errors.AdminShutdown("gone"),
        psycopg.OperationalError("x"),
        redis.ConnectionError("x"),
        redis.TimeoutError("x"),
        StorageError("x"),
    ):
        assert status_and_code(exc) == (503, "storage_unavailable"), exc
    assert status_and_code(psycopg.errors.UniqueViolation("bug")) == (500, "internal_error")
    assert status_and_code(ValueError("bug")) == (500, "internal_error")
