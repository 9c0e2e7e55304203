"""The Redis backends on a real Redis: the session store (KAOS ``RedisMemory``) and the job
queue pass the same contract suites as SQLite, plus Redis-specific behaviour."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from memlane import AsyncMemory
from memlane.errors import ConfigError, InvalidInputError, NotFoundError, StorageError
from memlane.formation.runner import FormationResult
from memlane.models import Event, EventType, Session
from memlane.stores.base import Checkable
from memlane.stores.redis.jobs import RedisJobStore
from memlane.stores.redis.sessions import RedisSessionStore
from memlane.stores.redis.url import parse_redis_url, tenant_url, with_params, with_prefix
from memlane.testing import JobStoreContract, SessionStoreContract
from services import redis_key_bytes


class TestRedisSessionContract(SessionStoreContract):
    @pytest.fixture
    async def session_store(self, redis_url: str) -> AsyncIterator[RedisSessionStore]:
        store = await RedisSessionStore.open(redis_url)
        yield store
        await store.close()


class TestRedisJobContract(JobStoreContract):
    @pytest.fixture
    async def job_store(self, redis_url: str) -> AsyncIterator[RedisJobStore]:
        store = await RedisJobStore.open(redis_url)
        yield store
        await store.close()


# --------------------------------------------------------------------------- helpers


def ev(content: object = "hi", **kw: Any) -> Event:
    return Event(type=EventType.USER_MESSAGE, content=content, **kw)


def raw_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(parse_redis_url(url).url, decode_responses=True)


def keys_of(url: str) -> set[str]:
    """Every key under the URL's prefix."""
    client = raw_client(url)
    try:
        return set(client.scan_iter(match=f"{parse_redis_url(url).prefix}*", count=1000))
    finally:
        client.close()


@pytest.fixture
async def two_replicas(redis_url: str) -> AsyncIterator[tuple[RedisSessionStore, RedisSessionStore]]:
    """Two session stores with their own connections on one Redis and prefix (two replicas)."""
    a, b = await RedisSessionStore.open(redis_url), await RedisSessionStore.open(redis_url)
    yield a, b
    await a.close()
    await b.close()


# --------------------------------------------------------------------------- URLs


def test_url_defaults_and_memlane_parameters() -> None:
    loc = parse_redis_url("redis://127.0.0.1:6379/0")
    assert (loc.url, loc.prefix, loc.ttl, loc.max_sessions, loc.max_session_events) == (
        "redis://127.0.0.1:6379/0",
        "memlane:",
        None,
        1000,
        500,
    )
    loc = parse_redis_url(
        "rediss://:pw@cache:6380/2?prefix=app%3A&ttl=1.5&max_sessions=7&max_session_events=3&socket_timeout=5"
    )
    assert (loc.prefix, loc.ttl, loc.max_sessions, loc.max_session_events) == ("app:", 1.5, 7, 3)
    assert loc.url == "rediss://:pw@cache:6380/2?socket_timeout=5"  # redis-py's own parameters pass on
    assert loc.redacted == "rediss://:***@cache:6380/2?socket_timeout=5"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://:hunter2@h:6379/0", "redis://"),
        ("redis://:hunter2@h:6379/0?ttl=0", "ttl"),
        ("redis://:hunter2@h:6379/0?ttl=soon", "ttl"),
        ("redis://:hunter2@h:6379/0?max_sessions=0", "max_sessions"),
        ("redis://:hunter2@h:6379/0?max_session_events=1.5", "max_session_events"),
        ("redis://:hunter2@h:6379/0?prefix=", "prefix"),
        ("redis://:hunter2@h:6379/0?prefix=a%20b", "prefix"),
        ("redis://:hunter2@h:6379/x", "database"),
        ("redis://:hunter2@h:port/0", "port"),
        ("redis://:hunter2@/0", "host"),
        ("redis://:hunter2@h:6379/0?ttl=1&ttl=2", "twice"),
    ],
)
def test_bad_urls_are_config_errors_without_the_password(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as exc:
        parse_redis_url(url)
    assert "hunter2" not in str(exc.value)


def test_with_prefix_and_tenant_url() -> None:
    base = "redis://:pw@h:6379/0?prefix=svc%3A&ttl=60"
    assert parse_redis_url(with_prefix(base, "other:")).prefix == "other:"
    assert parse_redis_url(with_prefix(base, "other:")).ttl == 60
    tenant = parse_redis_url(tenant_url(base, "acme:eu"))
    assert tenant.prefix == "svc:tenant:acme%3Aeu:" and tenant.url == "redis://:pw@h:6379/0"
    with pytest.raises(ConfigError):
        with_prefix(base, "")


async def test_open_refuses_an_unknown_parameter_and_an_unreachable_server(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="bad Redis URL"):
        await RedisSessionStore.open(with_params(redis_url, no_such_option="1"))
    with pytest.raises(StorageError, match="cannot reach Redis"):
        await RedisJobStore.open("redis://:hunter2@127.0.0.1:1/0")


# --------------------------------------------------------------------------- LocalMemory's bounds


class TestBounds:
    async def test_evicts_one_oldest_at_ten(self, redis_url: str) -> None:
        async with await RedisSessionStore.open(with_params(redis_url, max_sessions="10")) as store:
            for i in range(10):
                await store.create_session(session_id=f"s{i}")
            await store.create_session(session_id="s10")
            assert (await store.counts())[0] == 10
            assert await store.get_session("s0") is None
            assert await store.get_session("s1") is not None and await store.get_session("s10") is not None

    async def test_evicts_oldest_ten_percent_by_creation_order(self, redis_url: str) -> None:
        async with await RedisSessionStore.open(with_params(redis_url, max_sessions="100")) as store:
            for i in range(100):
                await store.create_session(session_id=f"s{i}", user_ids=[f"u{i}"])
            await store.add_event("s0", ev("recent activity does not protect s0"))
            # a group of u0..u19: the oldest 10 of the sessions that are its users' own go (never
            # another user's: tests/stores/test_session_eviction.py)
            await store.create_session(session_id="new", user_ids=[f"u{i}" for i in range(20)])
            remaining = {s.id for s in await store.list_sessions()}
            assert remaining == {f"s{i}" for i in range(10, 100)} | {"new"}
            assert await store.counts() == (91, 0)  # s0's event went with it
            assert [s.id for s in await store.list_sessions(user_id="u0")] == ["new"]
            with pytest.raises(NotFoundError):
                await store.add_event("s0", ev())
        # nothing of an evicted session is left behind in Redis
        assert not {k for k in keys_of(redis_url) if k.endswith((":s0", ":s9"))}

    @pytest.mark.parametrize(("max_sessions", "evicted"), [(1, 1), (5, 1), (11, 2), (30, 3)])
    async def test_eviction_count_is_ceil_of_ten_percent(self, redis_url: str, max_sessions: int, evicted: int) -> None:
        url = with_params(redis_url, max_sessions=str(max_sessions))
        async with await RedisSessionStore.open(url) as store:
            for i in range(max_sessions):
                await store.create_session(session_id=f"s{i}")
            await store.get_or_create_session(session_id="one-more")  # get_or_create evicts too
            assert (await store.counts())[0] == max_sessions - evicted + 1
            await store.get_or_create_session(session_id="one-more")  # an existing one never evicts
            assert (await store.counts())[0] == max_sessions - evicted + 1

    async def test_eviction_spans_apps(self, redis_url: str) -> None:
        async with await RedisSessionStore.open(with_params(redis_url, max_sessions="2")) as store:
            for app in ("a", "b", "c"):
                await store.create_session(app=app, session_id="s")
            assert await store.get_session("s", app="a") is None
            assert await store.get_session("s", app="b") is not None
            assert await store.list_sessions(app="a") == []

    async def test_events_are_capped_oldest_dropped(self, redis_url: str) -> None:
        async with await RedisSessionStore.open(with_params(redis_url, max_session_events="5")) as store:
            await store.create_session(session_id="s")
            for i in range(8):
                await store.add_event("s", ev(i))
            assert [e.content for e in await store.get_events("s")] == [3, 4, 5, 6, 7]
            session = await store.get_session("s")
            assert session is not None and [e.content for e in session.events] == [3, 4, 5, 6, 7]
            assert [e.content for e in await store.get_events("s", limit=2)] == [6, 7]
            assert await store.counts() == (1, 5)

    @pytest.mark.parametrize(
        "kwargs", [{"max_sessions": 0}, {"max_session_events": 0}, {"max_sessions": -1}, {"ttl": 0}, {"prefix": ""}]
    )
    def test_bounds_must_be_positive(self, kwargs: dict[str, Any]) -> None:
        with pytest.raises(InvalidInputError):
            RedisSessionStore(redis.asyncio.Redis(), **kwargs)


# --------------------------------------------------------------------------- TTL


async def test_ttl_expiry_removes_a_session_from_every_index(redis_url: str) -> None:
    """Expiry by Redis's clock, without racing it: the expiry times are read from the index,
    and "old" is made to have expired by moving its time into the past (what a ttl running
    out does), so the outcome does not depend on how long the steps take."""
    url = with_params(redis_url, ttl="60")
    async with await RedisSessionStore.open(url) as store:
        await store.create_session(session_id="old", user_ids=["sam"])
        await store.add_event("old", ev("soon gone"))
        await store.create_session(session_id="kept", user_ids=["sam"])
        client = raw_client(url)
        expiry = f"{store.prefix}sessions:expiry"
        old, kept = store._member("default", "old"), store._member("default", "kept")
        try:  # the keys also carry a Redis expiry (twice the ttl), so an abandoned prefix empties itself
            assert 60_000 < client.pttl(f"{store.prefix}session:default:old") <= 120_000
            seconds, micros = client.time()
            now_ms = seconds * 1000 + micros // 1000
            assert now_ms < client.zscore(expiry, old) <= now_ms + 60_000  # ttl after the last activity
            before = client.zscore(expiry, kept)
            while client.time()[0] * 1000 + client.time()[1] // 1000 <= before - 60_000:
                await asyncio.sleep(0.005)  # Redis's clock moves on (milliseconds)
            await store.add_event("kept", ev("activity restarts the ttl"))
            assert client.zscore(expiry, kept) > before
            client.zadd(expiry, {old: now_ms - 1})  # "old": its ttl has run out
        finally:
            client.close()
        assert await store.get_session("old") is None
        assert await store.get_events("old") == []
        assert [s.id for s in await store.list_sessions()] == ["kept"]
        assert [s.id for s in await store.list_sessions(user_id="sam")] == ["kept"]
        assert await store.counts() == (1, 1)
        with pytest.raises(NotFoundError):
            await store.add_event("old", ev())
        assert not {k for k in keys_of(url) if k.endswith(":old")}
        again = await store.create_session(session_id="old")  # the id is free again, empty
        assert again.events == [] and await store.get_events("old") == []


async def test_erasing_a_users_words_from_a_group_keeps_the_events_expiry(redis_url: str) -> None:
    url = with_params(redis_url, ttl="60")
    async with await RedisSessionStore.open(url) as store:
        await store.create_session(session_id="g", user_ids=["u", "v"])
        await store.add_event("g", ev("from u", author="u"))
        await store.add_event("g", ev("from v", author="v"))
        assert await store.delete_user_sessions("u") == 1
        assert [e.content for e in await store.get_events("g")] == ["from v"]
        client = raw_client(url)
        try:
            assert 0 < client.pttl(f"{store.prefix}events:default:g") <= 120_000
        finally:
            client.close()


async def test_without_ttl_keys_do_not_expire(redis_url: str) -> None:
    async with await RedisSessionStore.open(redis_url) as store:
        await store.create_session(session_id="s")
        client = raw_client(redis_url)
        try:
            assert client.pttl(f"{store.prefix}session:default:s") == -1
        finally:
            client.close()


# --------------------------------------------------------------------------- replicas


async def test_two_replicas_share_sessions(two_replicas: tuple[RedisSessionStore, RedisSessionStore]) -> None:
    a, b = two_replicas
    await a.create_session(session_id="s", user_ids=["sam"], state={"k": 1})
    await b.add_event("s", ev("written through b"))
    await a.add_event("s", ev("written through a"))
    got = await b.get_session("s")
    assert got is not None and got.state == {"k": 1}
    assert [e.content for e in got.events] == ["written through b", "written through a"]
    assert [s.id for s in await b.list_sessions(user_id="sam")] == ["s"]
    assert await b.delete_session("s") is True
    assert await a.get_session("s") is None


async def test_racing_creates_on_two_replicas_make_one_session(
    two_replicas: tuple[RedisSessionStore, RedisSessionStore],
) -> None:
    a, b = two_replicas
    results = await asyncio.gather(
        *(store.create_session(session_id="race", user_ids=[f"u{i}"]) for i, store in enumerate([a, b] * 5)),
        return_exceptions=True,
    )
    made = [r for r in results if isinstance(r, Session)]
    assert len(made) == 1
    assert all(isinstance(r, InvalidInputError) and "already exists" in str(r) for r in results if r not in made)
    got = await a.get_session("race")
    assert got is not None and got.user_ids == made[0].user_ids
    assert await a.counts() == (1, 0)


async def test_concurrent_pops_on_two_replicas_take_each_event_once(
    two_replicas: tuple[RedisSessionStore, RedisSessionStore],
) -> None:
    a, b = two_replicas
    await a.create_session(session_id="s")
    for i in range(20):
        await a.add_event("s", ev(i))
    popped = await asyncio.gather(*(store.pop_event("s") for store in [a, b] * 15))
    contents = [e.content for e in popped if e is not None]
    assert sorted(contents) == list(range(20))  # 30 pops, 20 events: each exactly once
    assert await b.get_events("s") == []


# --------------------------------------------------------------------------- keys never collide


async def test_ids_with_colons_never_collide(redis_url: str) -> None:
    async with await RedisSessionStore.open(redis_url) as store:
        await store.create_session(app="a:b", session_id="c", user_ids=["x:y"])
        await store.create_session(app="a", session_id="b:c", user_ids=["x"])
        await store.create_session(app="a", session_id="b%3Ac", user_ids=["y"])
        await store.add_event("c", ev("in a:b / c"), app="a:b")
        await store.add_event("b:c", ev("in a / b:c"), app="a")
        one = await store.get_session("c", app="a:b")
        two = await store.get_session("b:c", app="a")
        three = await store.get_session("b%3Ac", app="a")
        assert one is not None and [e.content for e in one.events] == ["in a:b / c"]
        assert two is not None and [e.content for e in two.events] == ["in a / b:c"]
        assert three is not None and three.events == []
        assert [s.id for s in await store.list_sessions(app="a:b")] == ["c"]
        assert {s.id for s in await store.list_sessions(app="a")} == {"b:c", "b%3Ac"}
        assert [s.id for s in await store.list_sessions(app="a", user_id="x")] == ["b:c"]
        assert await store.list_sessions(app="a", user_id="x:y") == []
        assert await store.delete_user_sessions("x:y") == 1
        assert await store.get_session("b:c", app="a") is not None
    async with await RedisJobStore.open(redis_url) as jobs:
        a = await jobs.enqueue("form", "a:b", {}, coalesce=True)
        b = await jobs.enqueue("form", "a", {}, coalesce=True)
        assert a.id != b.id
        assert await jobs.claim("w1", lease_seconds=30, job_id=a.id) is not None
        assert await jobs.claim("w2", lease_seconds=30, job_id=b.id) is not None  # another key
        await jobs.touch("a:b", "c", user_ids=["u"], agent_id=None, tier=None, messages=1, tokens=1)
        await jobs.touch("a", "b:c", user_ids=["u"], agent_id=None, tier=None, messages=2, tokens=1)
        one_c = await jobs.get_cursor("a:b", "c")
        two_c = await jobs.get_cursor("a", "b:c")
        assert one_c is not None and two_c is not None
        assert (one_c.pending_messages, two_c.pending_messages) == (1, 2)


async def test_prefixes_keep_deployments_and_tenants_apart(redis_url: str) -> None:
    other = tenant_url(redis_url, "acme")
    async with (
        await RedisSessionStore.open(redis_url) as base,
        await RedisSessionStore.open(other) as tenant,
        await RedisJobStore.open(redis_url) as base_jobs,
        await RedisJobStore.open(other) as tenant_jobs,
    ):
        await base.create_session(session_id="s", user_ids=["u"])
        await base.add_event("s", ev("base"))
        assert await tenant.get_session("s") is None
        await tenant.create_session(session_id="s", user_ids=["u"])  # the same id, apart
        assert await tenant.get_events("s") == []
        assert await tenant.delete_user_sessions("u") == 1
        assert await base.get_session("s") is not None
        job = await base_jobs.enqueue("form", "k", {})
        assert await tenant_jobs.claim("w", lease_seconds=30) is None
        assert await tenant_jobs.get(job.id) is None
        assert await tenant_jobs.counts() == {} and await base_jobs.counts() == {"queued": 1}
        assert await base.counts() == (1, 1)
    tenant_prefix = parse_redis_url(other).prefix
    assert all(k.startswith(tenant_prefix) for k in keys_of(other))


# --------------------------------------------------------------------------- the job queue


async def test_concurrent_claimers_on_two_connections_claim_each_job_once(redis_url: str) -> None:
    stores = [await RedisJobStore.open(redis_url) for _ in range(2)]
    try:
        ids = {(await stores[0].enqueue("form", f"k{i}", {"i": i})).id for i in range(30)}
        same_key = {(await stores[1].enqueue("form", "shared", {"n": n})).id for n in range(3)}
        claimed: list[str] = []
        running_shared: list[int] = []

        async def worker(store: RedisJobStore, name: str) -> None:
            for _ in range(100):  # bounded: a broken claim that hands out a job twice must fail, not hang
                job = await store.claim(name, lease_seconds=30)
                if job is None:
                    return
                claimed.append(job.id)
                if job.key == "shared":
                    running_shared.append(1)
                    assert len(running_shared) == 1  # never two running jobs of one key
                    await asyncio.sleep(0.005)
                    running_shared.pop()
                await store.complete(job.id, {"by": name})

        await asyncio.gather(*(worker(stores[i % 2], f"w{i}") for i in range(8)))
        assert sorted(claimed) == sorted(ids | same_key)  # every job, each exactly once
        assert await stores[0].counts() == {"done": 33}
    finally:
        for store in stores:
            await store.close()


async def test_purge_user_scrubs_memory_text_from_other_users_jobs(redis_url: str) -> None:
    async with await RedisJobStore.open(redis_url) as jobs:
        other = await jobs.enqueue("form", "k", {}, user_id="ann")
        assert await jobs.claim("w", lease_seconds=30) is not None
        await jobs.complete(
            other.id, {"consolidated": ["Agent blob quoting sam"], "changes": [{"event": "UPDATE", "previous": "x"}]}
        )
        waiting = await jobs.enqueue("form", "k2", {}, user_id="ann")
        await jobs.checkpoint(waiting.id, {"candidates": ["sam's words"]})
        assert await jobs.purge_user("sam") == 0
        done = await jobs.get(other.id)
        assert done is not None and done.result == {
            "consolidated": [],
            "changes": [{"event": "UPDATE", "previous": None}],
        }
        queued = await jobs.get(waiting.id)
        assert queued is not None and queued.state == {}


async def test_export_user_jobs_and_cursors(redis_url: str) -> None:
    async with await RedisJobStore.open(redis_url) as jobs:
        mine = await jobs.enqueue("infer", "k1", {"text": "x"}, user_id="sam")
        await jobs.enqueue("infer", "k2", {}, user_id="ann")
        await jobs.touch("app", "solo", user_ids=["sam"], agent_id=None, tier=None, messages=1, tokens=1)
        await jobs.touch("app", "theirs", user_ids=["ann"], agent_id=None, tier=None, messages=1, tokens=1)
        out = await jobs.export_user("sam")
        assert [j["id"] for j in out["jobs"]] == [mine.id] and out["jobs"][0]["payload"] == {"text": "x"}
        assert [c["session_id"] for c in out["formation_cursors"]] == ["solo"]
        json.dumps(out)  # JSON data


async def test_closed_stores_refuse_work(redis_url: str) -> None:
    sessions, jobs = await RedisSessionStore.open(redis_url), await RedisJobStore.open(redis_url)
    await sessions.close()
    await jobs.close()
    await jobs.close()
    with pytest.raises(StorageError, match="closed"):
        await sessions.get_session("s")
    with pytest.raises(StorageError, match="closed"):
        await jobs.enqueue("form", "k", {})


# --------------------------------------------------------------------------- end to end


async def test_memory_forms_through_the_redis_queue(tmp_path: Path, redis_url: str) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions=redis_url, jobs=redis_url) as m:
        assert isinstance(m.sessions, RedisSessionStore) and isinstance(m.jobs, RedisJobStore)
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content="I'm vegetarian."))
        await m.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted!"))
        result = await m.form("s")
        assert isinstance(result, FormationResult)
        assert [f.content for f in result.facts] == ["Sam is vegetarian"]
        [job] = await m.jobs.list(key=None)
        assert job.status == "done" and job.result is not None
        cursor = await m.jobs.get_cursor("default", "s")
        assert cursor is not None and cursor.formed_events == 2
        hits = (await m.search("vegetarian", user_id="sam")).hits
        assert [h.fact.content for h in hits if h.fact.kind != "summary"] == ["Sam is vegetarian"]
        assert [h.fact.metadata["session_id"] for h in hits if h.fact.kind == "summary"] == ["s"]
        assert (await m.check()).ok  # memlane check covers the Redis stores too
        stats = await m.stats()
        assert (stats.sessions, stats.events) == (1, 2)
        export = await m.export_user("sam")
        assert [len(x["events"]) for x in export["sessions"]] == [2] and export["not_exported"] == []
        assert [c["session_id"] for c in export["formation_cursors"]] == ["s"]
    # the queue and the sessions outlive the engine: they are in Redis
    async with await RedisJobStore.open(redis_url) as jobs:
        assert (await jobs.counts()).get("done") == 1
    async with await RedisSessionStore.open(redis_url) as sessions:
        assert len(await sessions.get_events("s")) == 2


async def test_rediss_urls_reach_the_redis_stores() -> None:
    """``rediss://`` (TLS) and ``unix://`` name the same stores: the registry opens them (here:
    nothing listens)."""
    from memlane.registry import open_job_store, open_session_store

    with pytest.raises(StorageError, match="cannot reach Redis"):
        await open_session_store("rediss://:hunter2@127.0.0.1:1/0", None)  # type: ignore[arg-type]
    with pytest.raises(StorageError, match="cannot reach Redis") as exc:
        await open_job_store("rediss://:hunter2@127.0.0.1:1/0", None)  # type: ignore[arg-type]
    assert "hunter2" not in str(exc.value)
    with pytest.raises(StorageError, match="cannot reach Redis"):
        await open_session_store("unix:///nonexistent/redis.sock?prefix=x:", None)  # type: ignore[arg-type]


async def test_check_reports_index_entries_without_their_data(redis_url: str) -> None:
    async with await RedisSessionStore.open(redis_url) as sessions, await RedisJobStore.open(redis_url) as jobs:
        assert isinstance(sessions, Checkable) and isinstance(jobs, Checkable)
        await sessions.create_session(session_id="s")
        job = await jobs.enqueue("form", "k", {})
        assert await sessions.check() == [] and await jobs.check() == []
        client = raw_client(redis_url)
        try:  # damage behind the stores' backs
            client.delete(f"{sessions.prefix}session:default:s", f"{jobs.prefix}job:{job.id}")
        finally:
            client.close()
        assert await sessions.check() == ["session index entry default:s has no session"]
        problems = await jobs.check()
        assert f"job {job.id} is indexed as queued but is missing" in problems
        assert f"job {job.id} is in jobs:due but is missing" in problems


def redis_text(url: str) -> str:
    """Every key and value under the URL's prefix, as one string (to look for a user's words)."""
    client = redis.Redis.from_url(parse_redis_url(url).url)
    try:
        keys = client.scan_iter(match=f"{parse_redis_url(url).prefix}*".encode(), count=1000)
        return "\n".join(redis_key_bytes(client, key).decode("utf-8", "replace") for key in keys)
    finally:
        client.close()


async def test_forget_leaves_none_of_the_users_words_in_redis(tmp_path: Path, redis_url: str) -> None:
    async with AsyncMemory(tmp_path / "f.db", embedder="hash", sessions=redis_url, jobs=redis_url) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content="I'm vegetarian."))
        await m.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted!"))
        await m.form("s")
        await m.sessions.create_session(user_ids=["ann"], session_id="t")
        await m.add_event("t", Event(type=EventType.USER_MESSAGE, author="Ann", content="I'm a pianist."))
        assert "vegetarian" in redis_text(redis_url)
        assert await m.forget("sam") > 0
        assert await m.sessions.get_session("s") is None
        assert await m.jobs.get_cursor("default", "s") is None
        left = redis_text(redis_url)
        assert "vegetarian" not in left and "sam" not in left.lower()
        assert "pianist" in left  # another user's session stays


async def test_kaos_redis_memory_constructor_makes_a_working_store(redis_url: str) -> None:
    """KAOS: ``RedisMemory(redis_url=...)``: same API, no I/O in the constructor, keywords
    over URL parameters, and the SessionStore contract's basics through it."""
    from memlane.stores.base import SessionStore
    from memlane.stores.redis.sessions import RedisMemory

    unreachable = RedisMemory(redis_url="redis://127.0.0.1:1/0")  # constructing does no I/O
    await unreachable.close()
    store = RedisMemory(redis_url=redis_url, max_session_events=2)
    try:
        assert isinstance(store, SessionStore) and store.max_session_events == 2 and store.max_sessions == 1000
        await store.create_session(session_id="k1", user_ids=["kai"])
        for i in range(3):
            await store.add_event("k1", Event(type=EventType.USER_MESSAGE, author="kai", content=f"m{i}"))
        assert [e.content for e in await store.get_events("k1")] == ["m1", "m2"]
        other = await RedisSessionStore.open(redis_url)  # another replica on the same prefix sees it
        try:
            assert (await other.get_session("k1")) is not None
        finally:
            await other.close()
    finally:
        await store.close()
    with pytest.raises(ConfigError):
        RedisMemory(redis_url="redis://:pw@127.0.0.1:notaport/0")


# --------------------------------------------------------------------------- restarts


class _PrivateRedis:
    """A ``redis-server`` of this test's own on a free loopback port (never the shared one),
    to stop and start again on the same port."""

    def __init__(self) -> None:
        import shutil

        from memlane.devserver import free_port

        binary = shutil.which("redis-server")
        if binary is None:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail("redis-server is required under CI=true")
            pytest.skip("redis-server is not installed")
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        from memlane.devserver import _redis_up

        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(600):
            if _redis_up("127.0.0.1", self.port):
                return
            assert self.process.poll() is None, "redis-server exited"
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)
            self.process = None


@pytest.fixture
def private_redis() -> Iterator[_PrivateRedis]:
    server = _PrivateRedis()
    try:
        yield server
    finally:
        server.stop()


async def test_no_call_fails_once_a_restarted_redis_is_back(private_redis: _PrivateRedis) -> None:
    """Issue 17: a 503 "Connection closed by server" from a stale pooled connection after Redis
    came back. Reads and writes made once the server is back all succeed: the pool checks a
    connection as it leaves (redis-py's maintenance notifications, which skip that check, are
    off), and a read meeting a dropped connection anyway is retried once on a fresh one."""
    sessions = await RedisSessionStore.open(private_redis.url)
    jobs = await RedisJobStore.open(private_redis.url)
    try:
        await sessions.create_session(user_ids=["u"], session_id="s")
        await asyncio.gather(*(sessions.get_session("s") for _ in range(10)))  # several pooled connections

        def restart() -> None:
            private_redis.stop()
            private_redis.start()

        # (a) restarted while this process's loop runs (as in a server): every write and read works
        await asyncio.to_thread(restart)
        await sessions.create_session(user_ids=["u"], session_id="s")  # the restart lost the data
        writes = await asyncio.gather(*(sessions.add_event("s", ev(f"w{i}")) for i in range(10)))
        reads = await asyncio.gather(*(sessions.get_session("s") for _ in range(10)))
        assert len(writes) == 10 and all(r is not None for r in reads)
        assert len(await sessions.get_events("s")) == 10
        assert await jobs.list() == []
        # (b) restarted while the loop was blocked (the pool has not seen the old connections
        # close): reads are retried once on a fresh connection
        retried = sessions._redis.retried
        private_redis.stop()
        private_redis.start()
        reads = await asyncio.gather(*(sessions.get_session("s") for _ in range(10)))
        assert reads == [None] * 10  # an empty server
        assert sessions._redis.retried > retried
        assert await jobs.list() == [] and await jobs.counts() == {}
    finally:
        await sessions.close()
        await jobs.close()
