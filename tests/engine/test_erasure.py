"""Erasure and stale text: ``forget`` leaves no byte of the user's text anywhere (tables, FTS
segments, freed pages, WAL), deleted or updated turns stop matching through their neighbours'
context, and a second process's vector cache notices a forget."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from formation_helpers import Brain
from memlane import AsyncMemory, Event, EventType
from memlane.formation.config import FormationConfig
from memlane.formation.schemas import ConsolidationInput

CA = "xqjzvkwplmbt"  # user A's canary: porter leaves it alone, no other word shares its prefix
CB = "wvbnqkzrtyhg"  # user B's canary: must survive A's forget


class MergingBrain(Brain):
    """A scripted model whose consolidation keeps the current blob and adds the reflections."""

    async def consolidate(self, inp: ConsolidationInput) -> str:
        kept = [line for line in inp.current.splitlines() if not line.upper().startswith("VERSION")]
        return "\n".join([f"VERSION: {inp.version}", *kept, *(f"- {r}" for r in inp.reflections)])


def cfg(**kw: Any) -> FormationConfig:
    base: dict[str, Any] = {"background": False, "retry_base_seconds": 0, "idle_minutes": None}
    base.update(kw)
    return FormationConfig(**base)


def user(text: str, author: str = "user") -> Event:
    return Event(type=EventType.USER_MESSAGE, author=author, content=text)


def agent(text: str) -> Event:
    return Event(type=EventType.AGENT_RESPONSE, author="bot", content=text)


def needles(canary: str) -> list[bytes]:
    # FTS5 leaves store terms prefix-compressed: also look for the canary's tail.
    return [canary.encode(), canary[3:].encode(), canary.title().encode()]


def raw_hits(db: Path, canary: str) -> list[str]:
    """Files of the database (main, -wal, -shm) whose raw bytes contain the canary."""
    found = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(f"{db}{suffix}")
        if p.exists():
            data = p.read_bytes().lower()
            if any(n.lower() in data for n in needles(canary)):
                found.append(p.name)
    return found


def sql_hits(db: Path, canary: str) -> list[str]:
    """Tables (FTS shadow tables included) holding the canary in any cell."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        found = []
        for t in tables:
            if t == "facts_fts":  # the virtual table itself: its shadow tables are checked raw
                continue
            for row in conn.execute(f'SELECT * FROM "{t}"'):
                for cell in row:
                    data = cell if isinstance(cell, bytes) else str(cell).encode()
                    if any(n.lower() in data.lower() for n in needles(canary)):
                        found.append(t)
                        break
                else:
                    continue
                break
        return found
    finally:
        conn.close()


async def _chat(m: AsyncMemory, sid: str, app: str, lines: list[str], author: str) -> None:
    for i, text in enumerate(lines):
        await m.add_event(sid, user(text, author) if i % 2 == 0 else agent(text), app=app)


async def _write_everything(
    db: Path, who: str, canary: str, open_memory: Callable[..., AsyncMemory] = AsyncMemory
) -> None:
    """Every kind of memory a user can leave, through the offline model (real rules)."""
    conf = cfg(agent_memory=True)
    async with open_memory(db, embedder="hash", formation=conf) as m:
        await m.add(f"My locker code word is {canary}", user_id=who)
        await m.link_identity("sms", f"+{canary}", who)  # a sender is personal data too
        await m.add(
            [
                {"role": "user", "content": f"I named my cat {canary}"},
                {"role": "assistant", "content": "Lovely name"},
                {"role": "user", "content": "She is three years old"},
            ],
            user_id=who,
            session_id=f"chat-{who}",
        )
        await m.add(f"My favourite band is {canary.title()}", user_id=who, infer=True)
        await m.add(f"Please greet me with {canary} each morning", user_id=who, agent_id="club", scope="agent")
        await m.add(f"My favourite band is {canary.title()}", user_id=who, agent_id="club", scope="agent", infer=True)
        # a session formed and ended, and one still open
        for sid in (f"ended-{who}", f"open-{who}"):
            await m.sessions.create_session(app="club", user_ids=[who], session_id=sid)
            await _chat(
                m,
                sid,
                "club",
                [
                    f"I love {canary.title()} music",
                    "Nice",
                    f"My dog is called {canary.title()}",
                    "Great",
                    "I work as a nurse in Porto",
                    "ok",
                ],
                who.title(),
            )
        await m.end_session(f"ended-{who}", app="club")
        # reads bump access counts: rows rewritten while still holding the canary
        assert (await m.search(canary, user_id=who, agent_id="club")).hits
        await m.update(
            (await m.add(f"Draft note {canary} one", user_id=who))[0].id, f"Draft note {canary} two", user_id=who
        )


async def _agent_memory_through_formation(m: AsyncMemory, brain: Brain, who: str, canary: str) -> None:
    """Agent-scope facts, reflections and the consolidated agent blob formed from ``who``'s chat."""
    sid = f"brain-{who}"
    await m.sessions.create_session(app="club", user_ids=[who], session_id=sid)
    await _chat(m, sid, "club", [f"I adore {canary}", "Noted", f"Tell others about {canary}", "Sure"], who.title())
    brain.queue("extract", [{"content": f"Club regulars enjoy {canary}", "scope": "agent"}])
    brain.queue(
        "reflect", {"agent": [f"Members often bring up {canary}"], "user": [f"{who} likes {canary}"], "session": []}
    )
    await m.form(sid, app="club")


AGENT_CONF = {"agent_memory": True, "consolidation_threshold": {"agent": 1, "user": 1, "session": 1}}


async def _populate(db: Path, open_memory: Callable[..., AsyncMemory] = AsyncMemory) -> None:
    await _write_everything(db, "ann", CA, open_memory)
    await _write_everything(db, "bob", CB, open_memory)
    brain = MergingBrain()
    async with open_memory(db, embedder="hash", llm=brain, formation=cfg(**AGENT_CONF)) as m:
        await _agent_memory_through_formation(m, brain, "ann", CA)
        await _agent_memory_through_formation(m, brain, "bob", CB)
        blob = await m.consolidated("agent", agent_id="club")
        assert blob is not None and CA in blob.consolidated_content and CB in blob.consolidated_content


async def test_forget_leaves_no_byte_of_the_user_anywhere(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    await _populate(db)
    assert sql_hits(db, CA) and sql_hits(db, CB)  # the checks can see the canaries
    # ann's words are in the versions of her blob and of the agent blob they went into
    assert "consolidated_versions" in sql_hits(db, CA)
    async with AsyncMemory(db, embedder="hash", formation=cfg(**AGENT_CONF)) as m:
        assert await m.forget("ann") > 0
        # ann's words are gone from what other users of the agent read...
        assert not (await m.search(CA, agent_id="club")).hits
        for r in await m.reflections("agent", agent_id="club"):
            assert CA not in r.content
        # ...and bob's stay
        assert (await m.search(CB, user_id="bob", agent_id="club")).hits
        assert any(CB in r.content for r in await m.reflections("agent", agent_id="club"))
        assert sql_hits(db, CA) == []
        assert raw_hits(db, CA) == []  # while open: the WAL was checkpointed and truncated
    assert raw_hits(db, CA) == []
    assert raw_hits(db, CB) == ["m.db"]  # bob's memory is still on disk (the grep works)


async def test_forget_drops_the_agent_blob_and_reconsolidates_from_the_others(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    db = tmp_path / "b.db"
    brain = MergingBrain()
    async with open_memory(db, embedder="hash", llm=brain, formation=cfg(**AGENT_CONF)) as m:
        await _agent_memory_through_formation(m, brain, "ann", CA)
        await _agent_memory_through_formation(m, brain, "bob", CB)
        await m.forget("ann")
        assert await m.consolidated("agent", agent_id="club") is None
        pending = await m.reflections("agent", agent_id="club", absorbed=False)
        assert [r.content for r in pending] == [f"Members often bring up {CB}"]
        # the next formation in the agent re-consolidates from what is left
        await m.sessions.create_session(app="club", user_ids=["cy"], session_id="c1")
        await _chat(m, "c1", "club", ["Hello there", "Hi", "Just saying hi", "Bye"], "Cy")
        await m.form("c1", app="club")
        blob = await m.consolidated("agent", agent_id="club")
        assert blob is not None and CB in blob.consolidated_content and CA not in blob.consolidated_content


async def test_forget_can_keep_the_agents_shared_memory(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    db = tmp_path / "k.db"
    brain = MergingBrain()
    async with open_memory(db, embedder="hash", llm=brain, formation=cfg(**AGENT_CONF)) as m:
        await m.add(f"Please greet everyone with {CA}", user_id="ann", agent_id="club", scope="agent")
        await m.add(f"I am ann and my pin word is {CA}", user_id="ann", agent_id="club")
        await _agent_memory_through_formation(m, brain, "ann", CA)
        await m.forget("ann", shared="keep")
        # the agent's shared memory stays for its other users, no longer linked to ann
        shared = (await m.search(CA, agent_id="club")).facts
        assert sorted(f.content for f in shared) == [f"Club regulars enjoy {CA}", f"Please greet everyone with {CA}"]
        assert all(f.user_id is None for f in shared)
        assert [r.content for r in await m.reflections("agent", agent_id="club")] == [f"Members often bring up {CA}"]
        blob = await m.consolidated("agent", agent_id="club")
        assert blob is not None and CA in blob.consolidated_content
        # ann's own memory is gone: under her scope only the agent's shared facts remain
        assert {f.scope for f in (await m.list(user_id="ann", agent_id="club")).items} == {"agent"}
        assert await m.reflections("user", user_id="ann", agent_id="club") == []
        with pytest.raises(Exception, match="shared"):
            await m.forget("ann", shared="bogus")  # type: ignore[arg-type]


async def test_forget_scrubs_keyword_segments_freed_pages_and_the_wal(tmp_path: Path) -> None:
    """Plain verbatim memories only: the rows go, and so do the FTS5 segment copies of the words
    (kept until a merge), the freed pages and the WAL frames."""
    db = tmp_path / "s.db"
    async with AsyncMemory(db, embedder="hash") as m:
        for i in range(30):
            await m.add(f"note {i}: the vault word is {CA}", user_id="ann", session_id="s")
            await m.add(f"note {i}: the vault word is {CB}", user_id="bob", session_id="s")
        await m.update((await m.add(f"draft {CA}", user_id="ann"))[0].id, f"draft {CA} final", user_id="ann")
        assert (await m.search(CA, user_id="ann")).hits
        await m.forget("ann")
        assert sql_hits(db, CA) == []
        assert raw_hits(db, CA) == []
    assert raw_hits(db, CA) == []
    assert raw_hits(db, CB) == ["s.db"]


# --------------------------------------------------------------------------- stale neighbour context


async def test_deleted_or_updated_turn_stops_matching_through_its_neighbours(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    async with open_memory(tmp_path / "n.db", embedder="none") as m:
        turns = await m.add(
            [
                {"role": "user", "content": "We met at the harbour"},
                {"role": "assistant", "content": "The password is marzipan"},
                {"role": "user", "content": "Then we had lunch"},
            ],
            user_id="u",
            session_id="s",
        )
        found = {f.id for f in (await m.search("marzipan", user_id="u")).facts}
        assert found == {t.id for t in turns}  # neighbours match through their context
        await m.delete(turns[1].id, user_id="u")
        assert (await m.search("marzipan", user_id="u")).hits == []
        # an update: the old words leave the neighbours' context, the new ones arrive
        await m.update(turns[0].id, "We met at the lighthouse", user_id="u")
        assert (await m.search("harbour", user_id="u")).hits == []
        assert {f.id for f in (await m.search("lighthouse", user_id="u")).facts} == {turns[0].id, turns[2].id}


async def test_forget_refreshes_the_context_of_kept_neighbours(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    """Verbatim agent-scope turns of two users in one session: forgetting one leaves the
    other's turns without the forgotten words in their context."""
    async with open_memory(tmp_path / "p.db", embedder="none") as m:
        await m.add(
            [{"role": "user", "content": "Bob opens the meeting"}],
            user_id="bob",
            agent_id="club",
            scope="agent",
            session_id="s",
        )
        await m.add(
            [{"role": "user", "content": f"Ann says {CA}"}],
            user_id="ann",
            agent_id="club",
            scope="agent",
            session_id="s",
        )
        assert len((await m.search(CA, agent_id="club")).hits) == 2
        await m.forget("ann")
        assert (await m.search(CA, agent_id="club")).hits == []
        assert len((await m.search("meeting", agent_id="club")).hits) == 1


# --------------------------------------------------------------------------- second process


async def test_a_second_memory_on_the_file_sees_a_forget(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    db = tmp_path / "v.db"
    async with open_memory(db, embedder="hash") as m1, open_memory(db, embedder="hash") as m2:
        old = await m1.add(
            [{"role": "user", "content": f"old memory {i} about sailing"} for i in range(3)], user_id="u"
        )
        hits = (await m2.search("sailing", user_id="u")).hits
        assert {h.fact.id for h in hits} == {f.id for f in old} and all(h.vector_rank for h in hits)
        await m1.forget("u")
        new = await m1.add(
            [{"role": "user", "content": f"new memory {i} about sailing"} for i in range(3)], user_id="u"
        )
        hits = (await m2.search("sailing", user_id="u")).hits
        assert {h.fact.id for h in hits} == {f.id for f in new}
        # found by the vector list too, not only by keywords (a stale cache held the old ids)
        assert all(h.vector_rank for h in hits)
