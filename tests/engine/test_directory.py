"""The directory (``AsyncMemory.users`` / ``directory``): which users, agents and apps a memory
holds, with counts. Uses the ``mem`` fixture, so tests/engine/test_engine_backends.py re-runs
these on PostgreSQL and on PostgreSQL with Redis sessions; the in-process session store is
tested here."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane import AsyncMemory
from memlane.errors import InvalidInputError, ScopeError
from memlane.models import UserActivity


async def _seed(mem: AsyncMemory) -> None:
    """alice: 2 memories under agent bot (one deleted) and a session in app web; bob: 1 memory
    (no agent); carol: a session under agent bot in app chat only; agent helper: 1 shared."""
    first = await mem.add("alice likes tea", user_id="alice", agent_id="bot")
    await mem.add("alice lives in Oslo", user_id="alice", agent_id="bot")
    await mem.delete(first[0].id, user_id="alice", agent_id="bot")
    await mem.add("bob plays chess", user_id="bob")
    await mem.add("the helper answers in French", scope="agent", agent_id="helper")
    await mem.create_session(app="chat", user_ids=["carol"], agent_id="bot", session_id="c1")
    await mem.create_session(app="web", user_ids=["alice"], session_id="a1")


def _counts(rows: list[UserActivity]) -> dict[str, tuple[int, int, int]]:
    return {r.user_id: (r.facts, r.valid_facts, r.sessions) for r in rows}


async def test_users_come_from_memories_and_sessions_with_counts(mem: AsyncMemory) -> None:
    await _seed(mem)
    page = await mem.users()
    assert [u.user_id for u in page.users] == ["alice", "bob", "carol"]
    assert _counts(page.users) == {"alice": (2, 1, 1), "bob": (1, 1, 0), "carol": (0, 0, 1)}
    assert page.next_cursor is None
    assert all(u.last_activity is not None for u in page.users)
    # the latest change wins: a new session of bob's moves his last activity past his memory's
    before = next(u for u in page.users if u.user_id == "bob").last_activity
    assert before is not None
    await mem.create_session(app="web", user_ids=["bob"], session_id="b1")
    (bob,) = (await mem.users(user_id="bob")).users
    assert bob.sessions == 1 and bob.last_activity is not None and bob.last_activity > before


async def test_users_by_agent_and_by_user(mem: AsyncMemory) -> None:
    await _seed(mem)
    by_bot = await mem.users(agent_id="bot")
    assert _counts(by_bot.users) == {"alice": (2, 1, 0), "carol": (0, 0, 1)}
    assert (await mem.users(agent_id="helper")).users == []  # shared memories have no user
    assert _counts((await mem.users(user_id="carol")).users) == {"carol": (0, 0, 1)}
    assert (await mem.users(user_id="nobody")).users == []


async def test_paging_walks_every_user_once_in_code_point_order(mem: AsyncMemory) -> None:
    names = ["zoe", "Ådam", "émile", "Bob", "bob", "a|b", "a", "ab", "日本", "x y"]
    for i, name in enumerate(names):
        if i % 2:
            await mem.add(f"{name} fact", user_id=name)
        else:
            await mem.create_session(app="p", user_ids=[name], session_id=f"s{i}")
    await mem.add("a second fact of zoe's", user_id="zoe")
    for limit in (1, 3, 100):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await mem.users(limit=limit, cursor=cursor)
            assert len(page.users) <= limit
            seen += [u.user_id for u in page.users]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == sorted(names), limit


async def test_directory_lists_agents_and_apps(mem: AsyncMemory) -> None:
    await _seed(mem)
    d = await mem.directory()
    assert [(a.agent_id, a.facts) for a in d.agents] == [("bot", 2), ("helper", 1)]
    assert [(a.app, a.sessions) for a in d.apps] == [("chat", 1), ("web", 1)]
    alice = await mem.directory(user_id="alice")
    assert [(a.agent_id, a.facts) for a in alice.agents] == [("bot", 2)]
    assert [(a.app, a.sessions) for a in alice.apps] == [("web", 1)]
    carol = await mem.directory(user_id="carol")
    assert carol.agents == [] and [(a.app, a.sessions) for a in carol.apps] == [("chat", 1)]
    nobody = await mem.directory(user_id="nobody")
    assert nobody.agents == [] and nobody.apps == []


async def test_bad_arguments_are_refused(mem: AsyncMemory) -> None:
    await _seed(mem)
    for cursor in ("!!", "YWxpY2U=", "not base64 at all", "x" * 5000):
        with pytest.raises(InvalidInputError):
            await mem.users(cursor=cursor)
    for limit in (0, -1, 10_001, True):
        with pytest.raises(InvalidInputError):
            await mem.users(limit=limit)
    with pytest.raises(ScopeError):
        await mem.users(agent_id="  ")
    with pytest.raises(ScopeError):
        await mem.directory(user_id="")


async def test_in_process_sessions_are_listed_too(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="local") as mem:
        await _seed(mem)
        assert _counts((await mem.users()).users) == {"alice": (2, 1, 1), "bob": (1, 1, 0), "carol": (0, 0, 1)}
        assert [(a.app, a.sessions) for a in (await mem.directory()).apps] == [("chat", 1), ("web", 1)]


def test_the_sync_facade_lists_too(tmp_path: Path) -> None:
    from memlane import Memory

    with Memory(tmp_path / "m.db", embedder="hash") as m:
        m.add("dan likes jazz", user_id="dan", agent_id="bot")
        assert [u.user_id for u in m.users().users] == ["dan"]
        assert [a.agent_id for a in m.directory().agents] == ["bot"]
