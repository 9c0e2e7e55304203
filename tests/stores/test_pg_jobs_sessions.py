"""PostgreSQL job and session stores: the shared contracts, unchanged, plus what only a shared
database has to prove (claims and sessions raced from several connection pools, as separate
replicas or workers would)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest

from memlane.errors import InvalidInputError, NotFoundError, StorageError
from memlane.models import Event, EventType
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.jobs import PgJobStore
from memlane.stores.postgres.sessions import PgSessionStore
from memlane.testing import JobStoreContract, SessionStoreContract
from services import drop_schema, with_params


@pytest.fixture(scope="module")
def contract_url(pg_server: str) -> Iterator[str]:
    """One schema for the contract suites, emptied before each test (:func:`_emptied`):
    migrating a fresh schema per test would dominate this file's run time."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield with_params(pg_server, schema=schema)
    drop_schema(pg_server, schema)


async def _emptied(url: str) -> PgDatabase:
    """A new pool on ``url`` with the job and session tables empty (as a fresh store sees them)."""
    db = await PgDatabase.open(url)
    async with db.connection() as conn:
        await conn.execute("TRUNCATE jobs, formation_cursors, events, session_users, sessions")
    return db


class TestPgJobStore(JobStoreContract):
    @pytest.fixture
    async def job_store(self, contract_url: str) -> AsyncIterator[PgJobStore]:
        store = PgJobStore(await _emptied(contract_url))
        yield store
        await store.close()


class TestPgSessionStore(SessionStoreContract):
    @pytest.fixture
    async def session_store(self, contract_url: str) -> AsyncIterator[PgSessionStore]:
        store = PgSessionStore(await _emptied(contract_url))
        yield store
        await store.close()


async def test_open_owns_its_database(pg_url: str) -> None:
    """``PgSessionStore.open(url)`` (``sessions="postgresql://..."``) opens a pool of its own
    and closes it on close."""
    store = await PgSessionStore.open(pg_url)
    await store.create_session(session_id="s")
    assert [s.id for s in await store.list_sessions()] == ["s"]
    await store.close()
    assert store.db.closed


async def _job_stores(pg_url: str, n: int) -> list[PgJobStore]:
    """``n`` job stores on ``n`` separate pools (as ``n`` worker processes would have)."""
    return [PgJobStore(db) for db in await asyncio.gather(*(PgDatabase.open(pg_url) for _ in range(n)))]


async def test_many_claimers_on_separate_pools_claim_each_job_once(pg_url: str) -> None:
    stores = await _job_stores(pg_url, 4)
    try:
        ids = {(await stores[0].enqueue("form", f"k{i}", {"i": i})).id for i in range(50)}
        claimed: list[str] = []

        async def claimer(store: PgJobStore, name: str) -> None:
            while True:
                job = await store.claim(name, lease_seconds=30)
                if job is None:
                    if (await store.counts()).get("queued", 0) == 0:
                        return
                    await asyncio.sleep(0.01)  # the rest are being claimed right now
                    continue
                claimed.append(job.id)
                await store.complete(job.id, {"by": name})

        await asyncio.gather(*(claimer(s, f"w{p}-{t}") for p, s in enumerate(stores) for t in range(4)))
        twice = [jid for jid, n in Counter(claimed).items() if n > 1]
        assert twice == [] and set(claimed) == ids
        assert await stores[1].counts() == {"done": 50}
    finally:
        for s in stores:
            await s.close()


async def test_jobs_of_one_key_never_run_at_once_across_pools(pg_url: str) -> None:
    """10 keys x 3 queued jobs, 16 claimers on two pools at once: each round runs exactly one
    job per key (the oldest first), whichever claimers win."""
    a, b = await _job_stores(pg_url, 2)
    try:
        order: dict[str, list[str]] = {}
        for n in range(3):
            for k in range(10):
                order.setdefault(f"s{k}", []).append((await a.enqueue("form", f"s{k}", {"n": n})).id)
        for n in range(3):
            got = await asyncio.gather(*(s.claim(f"w{i}", lease_seconds=30) for i in range(8) for s in (a, b)))
            jobs = [j for j in got if j is not None]
            assert sorted(j.key for j in jobs) == sorted(order), f"round {n}"  # one job per key
            assert all(j.id == order[j.key][n] for j in jobs)  # the key's oldest
            running = await a.list(status="running", limit=100)
            assert len(running) == 10 and len({j.key for j in running}) == 10
            await asyncio.gather(*(a.complete(j.id, {}) for j in jobs))
        assert await b.claim("w", lease_seconds=30) is None
        assert await a.counts() == {"done": 30}
    finally:
        await a.close()
        await b.close()


async def test_expired_lease_is_taken_over_from_another_pool(pg_url: str) -> None:
    a, b = await _job_stores(pg_url, 2)
    try:
        job = await a.enqueue("form", "k", {})
        first = await a.claim("dead-worker", lease_seconds=30)
        assert first is not None and first.lease_until is not None
        assert await b.claim("w2", lease_seconds=30) is None  # a live lease holds
        # the worker's last heartbeat, then it dies: its lease runs out (no race with the
        # machine's load: the live check above had 30 s, the wait below only has to be long enough)
        assert await a.renew(job.id, "dead-worker", lease_seconds=0.1) is True
        await asyncio.sleep(0.3)
        taken = await b.claim("w2", lease_seconds=30)
        assert taken is not None and taken.id == job.id and taken.worker == "w2"
        assert await a.renew(job.id, "dead-worker", lease_seconds=30) is False
        assert await a.check() == []
    finally:
        await a.close()
        await b.close()


async def test_concurrent_get_or_create_from_two_pools_makes_one_session(pg_url: str) -> None:
    a, b = await PgSessionStore.open(pg_url), await PgSessionStore.open(pg_url)
    try:
        for round_ in range(5):
            sid = f"race-{round_}"
            got = await asyncio.gather(
                *(s.get_or_create_session(session_id=sid, user_ids=[f"u{i}"]) for i in range(4) for s in (a, b))
            )
            assert {s.id for s in got} == {sid}
            assert len({(s.created_at, tuple(s.user_ids)) for s in got}) == 1  # all the one winner's session
        assert len(await b.list_sessions()) == 5
        assert await a.counts() == (5, 0)
    finally:
        await a.close()
        await b.close()


async def test_concurrent_pops_take_each_event_once(pg_url: str) -> None:
    a, b = await PgSessionStore.open(pg_url), await PgSessionStore.open(pg_url)
    try:
        await a.create_session(session_id="s")
        for i in range(20):
            await a.add_event("s", Event(content=f"m{i}"))
        popped = await asyncio.gather(*(s.pop_event("s") for _ in range(12) for s in (a, b)))
        contents = [e.content for e in popped if e is not None]
        assert sorted(contents) == sorted(f"m{i}" for i in range(20))  # none lost, none twice
        assert popped.count(None) == 4
    finally:
        await a.close()
        await b.close()


async def test_concurrent_coalesce_from_two_pools_makes_one_job(pg_url: str) -> None:
    a, b = await _job_stores(pg_url, 2)
    try:
        got = await asyncio.gather(
            *(s.enqueue("form", "k", {f"p{i}": i}, coalesce=True) for i in range(5) for s in (a, b))
        )
        assert len({j.id for j in got}) == 1
        (job,) = await a.list(key="k")
        assert job.payload == {f"p{i}": i for i in range(5)}
    finally:
        await a.close()
        await b.close()


async def test_nul_and_the_codec_escape_round_trip_nan_is_bad_input(pg_url: str) -> None:
    """PostgreSQL text and jsonb cannot hold NUL; SQLite can. Through the stores' codec every
    string comes back as written (and ids holding NUL still match), as on SQLite. NaN, which
    jsonb refuses, is bad input and writes nothing."""
    store = await PgSessionStore.open(pg_url)
    jobs = PgJobStore(store.db)
    odd = "a\x00b \U0010fffe0 c"  # NUL, and the codec's own escape character followed by "0"
    try:
        await store.create_session(session_id=odd, app=odd, user_ids=[odd], channel=odd, state={odd: [odd]})
        sent = Event(content={"t": odd}, author=odd, id=odd, metadata={odd: {"k": odd}, "user_id": odd})
        assert await store.add_event(odd, sent, app=odd) == sent
        got = await store.get_session(odd, app=odd)
        assert got is not None and (got.id, got.app, got.user_ids, got.channel) == (odd, odd, [odd], odd)
        assert got.state == {odd: [odd]} and [e.model_dump() for e in got.events] == [sent.model_dump()]
        assert [s.id for s in await store.list_sessions(app=odd, user_id=odd)] == [odd]
        assert (await store.export_user(odd))["sessions"][0]["events"][0]["author"] == odd
        await store.create_session(session_id="plain", user_ids=[odd, "v"])
        await store.add_event("plain", Event(content="by odd", metadata={"user_id": odd}))
        assert await store.delete_user_sessions(odd) == 2  # the solo session, odd's event of "plain"
        assert await store.get_events("plain") == []
        with pytest.raises(InvalidInputError):
            await store.create_session(session_id="t", state={"x": float("nan")})
        with pytest.raises(InvalidInputError):
            await store.add_event("plain", Event(content="ok", metadata={"x": float("inf")}))
        assert await store.get_session("t") is None and await store.get_events("plain") == []

        job = await jobs.enqueue("form", odd, {odd: odd}, user_id=odd)
        merged = await jobs.enqueue("form", odd, {"more": odd}, user_id=odd, coalesce=True)
        assert merged.id == job.id and merged.payload == {odd: odd, "more": odd} and merged.key == odd
        claimed = await jobs.claim(odd, lease_seconds=30)
        assert claimed is not None and claimed.worker == odd and await jobs.renew(job.id, odd, lease_seconds=30)
        await jobs.checkpoint(job.id, {"s": odd})
        failed = await jobs.fail(job.id, f"boom {odd}", retry_in=None)
        assert failed.status == "failed" and failed.last_error == f"boom {odd}" and failed.state == {"s": odd}
        assert [j.id for j in await jobs.list(key=odd)] == [job.id]
        assert (await jobs.export_user(odd))["jobs"][0]["payload"] == {odd: odd, "more": odd}
        cursor = await jobs.touch(odd, odd, user_ids=[odd], agent_id=odd, tier=None, messages=1, tokens=1)
        assert (cursor.app, cursor.session_id, cursor.user_ids, cursor.agent_id) == (odd, odd, [odd], odd)
        await jobs.advance(odd, odd, last_event_id=odd, formed=1)
        again = await jobs.get_cursor(odd, odd)
        assert again is not None and again.last_event_id == odd
        assert await jobs.purge_user(odd) == 2
        assert await jobs.get(job.id) is None and await jobs.get_cursor(odd, odd) is None
        with pytest.raises(InvalidInputError):
            await jobs.enqueue("form", "k", {"x": float("nan")})
        assert await jobs.counts() == {}
        with pytest.raises(NotFoundError):
            await jobs.fail("nope", "x", retry_in=None)
    finally:
        await jobs.close()
        await store.close()
    with pytest.raises(StorageError, match="closed"):
        await store.get_session("s")
    with pytest.raises(StorageError, match="closed"):
        await jobs.get("x")


async def test_purge_user_scrubs_other_jobs_and_group_cursors(pg_url: str) -> None:
    store = PgJobStore(await PgDatabase.open(pg_url))
    try:
        done = await store.enqueue("form", "k", {}, user_id="ann")
        assert await store.claim("w", lease_seconds=30, job_id=done.id) is not None
        await store.complete(done.id, {"consolidated": ["sam said x"], "changes": [{"previous": "old", "id": "f"}]})
        plain = await store.enqueue("form", "k2", {}, user_id="ann")
        await store.complete(plain.id, {"changes": [{"previous": None}], "n": 1})
        waiting = await store.enqueue("form", "k3", {}, user_id="ann")
        await store.checkpoint(waiting.id, {"candidates": ["sam's words"]})
        await store.touch(
            "app", "group", user_ids=["ann", "sam", "bob"], agent_id=None, tier=None, messages=1, tokens=1
        )
        export = await store.export_user("sam")
        assert export["jobs"] == [] and [c["session_id"] for c in export["formation_cursors"]] == ["group"]
        assert isinstance(export["formation_cursors"][0]["last_activity_at"], str)
        await store.purge_user("sam")
        scrubbed = await store.get(done.id)
        assert scrubbed is not None and scrubbed.result == {
            "consolidated": [],
            "changes": [{"previous": None, "id": "f"}],
        }
        untouched = await store.get(plain.id)
        assert untouched is not None and untouched.result == {"changes": [{"previous": None}], "n": 1}
        cleared = await store.get(waiting.id)
        assert cleared is not None and cleared.state == {}
        group = await store.get_cursor("app", "group")
        assert group is not None and group.user_ids == ["ann", "bob"]
    finally:
        await store.close()


async def test_session_export_and_forget_in_groups(pg_url: str) -> None:
    store = await PgSessionStore.open(pg_url)
    try:
        await store.create_session(session_id="g", user_ids=["u", "v"], state={"secret": 1})
        await store.add_event("g", Event(content="mine", author="u"))
        await store.add_event("g", Event(content="also mine", author="Uma", metadata={"user_id": "u"}))
        await store.add_event("g", Event(content="numeric id", author="x", metadata={"user_id": 5}))
        await store.add_event("g", Event(type=EventType.AGENT_RESPONSE, content="reply", author="bot"))
        exported = (await store.export_user("u"))["sessions"]
        assert [e["content"] for e in exported[0]["events"]] == ["mine", "also mine"]
        assert exported[0]["group"] is True and "state" not in exported[0]
        assert await store.delete_user_sessions("u") == 2
        group = await store.get_session("g")
        assert group is not None and group.user_ids == ["v"]
        assert [e.content for e in group.events] == ["numeric id", "reply"]
    finally:
        await store.close()


async def test_async_memory_uses_the_postgres_stores_own_sessions_and_jobs(pg_url: str) -> None:
    """``AsyncMemory(postgresql://..., sessions="sqlite")``: "the store's own" session store is the
    PostgreSQL one, so a second engine (another replica) reads what the first wrote."""
    from memlane import AsyncMemory

    first = AsyncMemory(pg_url, embedder="hash", sessions="sqlite")
    second = AsyncMemory(pg_url, embedder="hash", sessions="sqlite")
    try:
        await first.open()
        assert isinstance(first.sessions, PgSessionStore) and isinstance(first.jobs, PgJobStore)
        await first.sessions.get_or_create_session(session_id="ann:cli", user_ids=["ann"])
        await first.add_event("ann:cli", Event(content="I moved to Lisbon", author="ann"))
        await first.add_event("ann:cli", Event(type=EventType.AGENT_RESPONSE, content="Noted!", author="bot"))
        await second.open()
        events = await second.sessions.get_events("ann:cli")
        assert [e.content for e in events] == ["I moved to Lisbon", "Noted!"]
        cursor = await second.jobs.get_cursor("default", "ann:cli")
        assert cursor is not None and cursor.pending_messages == 2 and cursor.user_ids == ["ann"]
        exported = await second.export_user("ann")
        assert [s["id"] for s in exported["sessions"]] == ["ann:cli"] and exported["not_exported"] == []
        assert [c["session_id"] for c in exported["formation_cursors"]] == ["ann:cli"]
        await second.forget("ann")
        assert await first.sessions.get_session("ann:cli") is None
        assert await first.jobs.get_cursor("default", "ann:cli") is None
    finally:
        await first.close()
        await second.close()


async def test_a_late_heartbeat_cannot_revive_a_lease_once_the_key_moved_on(pg_url: str) -> None:
    """A worker whose lease ran out while another job of its key was claimed (by id, as
    ``form(wait=True)`` does) gets False from renew: two jobs of one key never run at once."""
    a, b = await _job_stores(pg_url, 2)
    try:
        first = await a.enqueue("form", "k", {})
        second = await a.enqueue("form", "k", {})
        assert await a.claim("slow", lease_seconds=0.2, job_id=first.id) is not None
        await asyncio.sleep(0.3)
        assert await a.renew(first.id, "slow", lease_seconds=0.2) is True  # late, but nobody moved on: kept
        await asyncio.sleep(0.3)
        assert await b.claim("inline", lease_seconds=30, job_id=second.id) is not None
        assert await a.renew(first.id, "slow", lease_seconds=30) is False
        running = await a.list(status="running")
        live = [j for j in running if j.lease_until is not None and j.lease_until > datetime.now(UTC)]
        assert [j.id for j in live] == [second.id]
        assert await b.check() == []
    finally:
        await a.close()
        await b.close()


async def test_check_reports_broken_job_invariants(pg_url: str) -> None:
    store = PgJobStore(await PgDatabase.open(pg_url))
    try:
        a = await store.enqueue("form", "k", {})
        b = await store.enqueue("form", "k", {})
        assert await store.claim("w", lease_seconds=30, job_id=a.id) is not None
        assert await store.check() == []
        async with store._db.connection() as conn:  # damage no store call can make
            await conn.execute(
                "UPDATE jobs SET status='running', worker='w2', lease_until=now() + interval '1 minute' WHERE id=%s",
                (b.id,),
            )
            c = await store.enqueue("form", "other", {})
            await conn.execute("UPDATE jobs SET status='running' WHERE id=%s", (c.id,))
        problems = await store.check()
        assert problems == ["jobs: 1 running job(s) without a lease holder", "jobs: key 'k' has 2 jobs running at once"]
    finally:
        await store.close()


async def test_sessions_by_id_in_every_app_read_an_index(pg_url: str) -> None:
    """``sessions_with_id`` (the room check) has the ``sessions_id`` index (0004): with
    sequential scans priced out, the planner reads it."""
    store = await PgSessionStore.open(pg_url)
    try:
        for app in ("hotel", "other"):
            await store.create_session(session_id="S", user_ids=["bob"], app=app)
        assert [s.app for s in await store.sessions_with_id("S")] == ["hotel", "other"]
        async with store.db.connection() as conn:
            await conn.execute("SET enable_seqscan = off")
            try:
                cur = await conn.execute("EXPLAIN SELECT * FROM sessions WHERE id = %s ORDER BY app", ("S",))
                plan = " ".join(str(row[0]) for row in await cur.fetchall())
            finally:
                await conn.execute("RESET enable_seqscan")
    finally:
        await store.close()
    assert "sessions_id" in plan, plan
