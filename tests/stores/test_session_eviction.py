"""The session cap never evicts another user's sessions (issue 17, section 6).

KAOS's bounded stores (in-process :class:`~memlane.stores.local.LocalMemory` and
:class:`~memlane.stores.redis.sessions.RedisSessionStore`, 1,000 sessions by default) evicted
the oldest 10% of *all* sessions when full: one user creating 1,001 sessions destroyed every
other user's sessions and their acknowledged events. Now a full store evicts only the oldest
sessions of the new session's own users (participants all among the new session's), and
refuses (StoreFullError, HTTP 507) when it holds none of them, changing nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from memlane.errors import StorageError, StoreFullError
from memlane.models import Event
from memlane.stores.local import LocalMemory


@pytest.fixture(params=["local", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "local":
        yield LocalMemory(max_sessions=20)
        return
    pytest.importorskip("redis")
    from memlane.stores.redis.sessions import RedisSessionStore

    s = await RedisSessionStore.open(request.getfixturevalue("redis_url") + "&max_sessions=20")
    try:
        yield s
    finally:
        await s.close()


async def test_one_user_filling_the_store_evicts_only_their_own(store: Any) -> None:
    for i in range(3):
        await store.create_session(user_ids=["bob"], session_id=f"bob{i}")
        await store.add_event(f"bob{i}", Event(content=f"bob's acknowledged turn {i}"))
    await store.create_session(user_ids=["bob", "carol"], session_id="group")
    for i in range(200):  # the attacker: ten times the cap
        await store.create_session(user_ids=["mallory"], session_id=f"m{i}")
    for i in range(3):
        kept = await store.get_session(f"bob{i}")
        assert kept is not None and [e.content for e in kept.events] == [f"bob's acknowledged turn {i}"]
    assert await store.get_session("group") is not None  # mallory is not in it
    assert await store.get_session("m199") is not None and await store.get_session("m0") is None  # her oldest went


async def test_a_full_store_of_others_sessions_refuses_and_changes_nothing(store: Any) -> None:
    for i in range(20):
        await store.create_session(user_ids=["bob"], session_id=f"bob{i}")
    with pytest.raises(StoreFullError, match="never evicted") as exc:
        await store.create_session(user_ids=["mallory"], session_id="m")
    assert isinstance(exc.value, StorageError)
    with pytest.raises(StoreFullError):
        await store.get_or_create_session(user_ids=["mallory"], session_id="m")
    with pytest.raises(StoreFullError):  # a session without users evicts only sessions without users
        await store.create_session(session_id="anon")
    assert [await store.get_session(f"bob{i}") is not None for i in range(20)] == [True] * 20
    assert await store.get_session("m") is None
    # bob himself makes room among his own (the KAOS 10%: 2 of 20)
    await store.create_session(user_ids=["bob"], session_id="bob20")
    assert await store.get_session("bob0") is None and await store.get_session("bob1") is None
    assert await store.get_session("bob2") is not None and await store.get_session("bob20") is not None
