"""Real PostgreSQL (+ pgvector) and Redis servers for the tests (a pytest plugin).

``pg_server`` / ``redis_server`` (session-scoped) find or start one server each:
``MEMLANE_TEST_PG_URL`` names an existing PostgreSQL with pgvector, else one is started from
the ``pgserver`` wheel (:mod:`memlane.devserver`); Redis is the one at 127.0.0.1:6379
(``MEMLANE_TEST_REDIS_URL`` to change it), else a ``redis-server`` is started. When neither
can be had the tests skip, except under ``CI=true``, where they fail.

``pg_url`` is a fresh schema per test (``...?schema=t_<hex>``, dropped afterwards);
``redis_url`` a fresh key prefix per test (its keys deleted afterwards).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from memlane.devserver import PostgresServer, RedisServer, find_or_start_redis, start_postgres


def _unavailable(what: str, exc: BaseException) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is required under CI=true and could not be had: {exc}")
    pytest.skip(f"{what} unavailable: {exc}")


def with_params(url: str, **params: str) -> str:
    """``url`` with query parameters added (or replaced)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(params)
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a PostgreSQL with pgvector (no schema)."""
    given = os.environ.get("MEMLANE_TEST_PG_URL")
    if given:
        yield given
        return
    server: PostgresServer | None = None
    try:
        server = start_postgres(Path(tmp_path_factory.mktemp("pg", numbered=True)))
    except Exception as exc:
        _unavailable("PostgreSQL with pgvector", exc)
    assert server is not None
    try:
        yield server.url
    finally:
        server.stop()


def drop_schema(base_url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A store URL on a schema of its own, dropped after the test."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield with_params(pg_server, schema=schema)
    drop_schema(pg_server, schema)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """The URL of a Redis server."""
    server: RedisServer | None = None
    try:
        server = find_or_start_redis(os.environ.get("MEMLANE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    except Exception as exc:
        _unavailable("Redis", exc)
    assert server is not None
    try:
        yield server.url
    finally:
        server.stop()


def delete_prefix(base_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(base_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A Redis URL with a key prefix of its own (``?prefix=memlane-test:<hex>:``), cleaned after."""
    prefix = f"memlane-test:{uuid.uuid4().hex[:12]}:"
    yield with_params(redis_server, prefix=prefix)
    delete_prefix(redis_server, prefix)


def redis_key_bytes(client: Any, key: bytes) -> bytes:
    """A Redis key and everything stored under it (string, hash, list, set, zset or stream), joined
    by newlines: what a test scans for text that must not be there."""
    kind = client.type(key).decode()
    parts: list[bytes] = [key]
    if kind == "string":
        parts.append(client.get(key) or b"")
    elif kind == "hash":
        for k, v in client.hgetall(key).items():
            parts += [k, v]
    elif kind == "list":
        parts += client.lrange(key, 0, -1)
    elif kind == "set":
        parts += list(client.smembers(key))
    elif kind == "zset":
        parts += client.zrange(key, 0, -1)
    elif kind == "stream":
        for _, fields in client.xrange(key):
            for k, v in fields.items():
                parts += [k, v]
    return b"\n".join(parts)
