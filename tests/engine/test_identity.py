"""One person across channels (issue 20): the identity map, on a SQLite file, ``:memory:``,
PostgreSQL, and PostgreSQL with Redis sessions and queue.

"sam" on Telegram and "+15550100" on SMS are linked to user ``sam``; ``add``,
``create_session`` and ``add_event`` given ``channel=`` / ``sender=`` act for the linked user;
an unknown sender is an error (nothing written); ``forget`` erases the links and
``export_user`` includes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from test_engine_backends import BACKENDS, Backend, _backend, q

from memlane import (
    AsyncMemory,
    ConflictError,
    Event,
    InvalidInputError,
    Memory,
    NotFoundError,
    ScopeError,
    UnknownIdentityError,
)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return _backend(request.param, tmp_path, request)


@pytest.fixture
async def mem(backend: Backend) -> AsyncIterator[AsyncMemory]:
    m = await backend.memory().open()
    try:
        yield m
    finally:
        await m.close()


async def test_one_memory_across_channels(mem: AsyncMemory) -> None:
    await mem.link_identity("telegram", "sam", "sam")
    await mem.link_identity("sms", "+15550100", "sam")
    await mem.link_identity("telegram", "alex", "alex")
    await mem.add("I am vegetarian", channel="telegram", sender="sam")
    await mem.add("I moved to Lisbon", channel="sms", sender="+15550100")
    await mem.add("I eat everything", channel="telegram", sender="alex")
    mine = {f.content for f in (await mem.list(user_id="sam")).items}
    assert mine == {"I am vegetarian", "I moved to Lisbon"}
    assert {f.content for f in (await mem.list(user_id="alex")).items} == {"I eat everything"}
    hits = (await mem.search("vegetarian Lisbon", user_id="sam")).hits
    assert {h.fact.content for h in hits} == mine
    assert await mem.resolve_identity("sms", "+15550100") == "sam"
    assert await mem.resolve_identity("sms", "sam") is None  # a sender is per channel
    assert [(i.channel, i.sender) for i in await mem.identities("sam")] == [("sms", "+15550100"), ("telegram", "sam")]
    # the same user named both ways agrees; infer=True and wait=False resolve too
    await mem.add("I like tea", user_id="sam", channel="sms", sender="+15550100")
    job = await mem.add("I like green tea", channel="sms", sender="+15550100", infer=True, wait=False)
    assert job.user_id == "sam"  # type: ignore[union-attr]


async def test_unknown_or_contradicting_identities_write_nothing(mem: AsyncMemory) -> None:
    await mem.link_identity("sms", "+15550100", "sam")
    with pytest.raises(UnknownIdentityError, match="link it first"):
        await mem.add("I am a stranger", channel="sms", sender="+19990000")
    assert isinstance(UnknownIdentityError("x"), NotFoundError)
    with pytest.raises(InvalidInputError, match="different users"):
        await mem.add("Not me", user_id="alex", channel="sms", sender="+15550100")
    with pytest.raises(InvalidInputError, match="go together"):
        await mem.add("Half a name", sender="+15550100")
    with pytest.raises(ScopeError):
        await mem.link_identity("", "x", "sam")
    with pytest.raises(ScopeError):
        await mem.link_identity("sms", "x", "  ")
    assert (await mem.list(user_id="sam")).items == []
    assert (await mem.list(user_id="alex")).items == []
    assert await mem.identities("alex") == []


async def test_linking_is_idempotent_and_never_moves_a_sender(mem: AsyncMemory) -> None:
    first = await mem.link_identity("sms", "+15550100", "sam")
    again = await mem.link_identity("sms", "+15550100", "sam")
    assert again == first  # the first link, linked_at included
    with pytest.raises(ConflictError, match="unlink it first"):
        await mem.link_identity("sms", "+15550100", "alex")
    assert await mem.resolve_identity("sms", "+15550100") == "sam"
    assert not await mem.unlink_identity("sms", "+15550100", user_id="alex")  # not alex's
    assert await mem.resolve_identity("sms", "+15550100") == "sam"
    await mem.add("Kept after unlinking", channel="sms", sender="+15550100")
    assert await mem.unlink_identity("sms", "+15550100")
    assert not await mem.unlink_identity("sms", "+15550100")
    with pytest.raises(UnknownIdentityError):
        await mem.add("After", channel="sms", sender="+15550100")
    assert [f.content for f in (await mem.list(user_id="sam")).items] == ["Kept after unlinking"]
    await mem.link_identity("sms", "+15550100", "alex")  # a number changes hands: unlink, then link
    assert await mem.resolve_identity("sms", "+15550100") == "alex"


async def test_concurrent_links_of_one_sender_leave_one_owner(backend: Backend) -> None:
    async with backend.memory() as a, backend.memory() as b:  # two replicas of one store
        results = await asyncio.gather(
            *(m.link_identity("sms", "+15550100", u) for m, u in ((a, "sam"), (b, "alex"), (a, "kim"), (b, "lee"))),
            return_exceptions=True,
        )
        won = [r for r in results if not isinstance(r, BaseException)]
        assert len(won) == 1 and all(isinstance(r, ConflictError) for r in results if r not in won), results
        assert await b.resolve_identity("sms", "+15550100") == won[0].user_id  # type: ignore[union-attr]


async def test_sessions_and_events_by_sender(backend: Backend, mem: AsyncMemory) -> None:
    await mem.link_identity("telegram", "sam", "sam")
    await mem.link_identity("sms", "+15550100", "sam")
    await mem.link_identity("sms", "+15550199", "alex")
    s = await mem.create_session(channel="telegram", sender="sam", app="gaia", session_id="sam:telegram")
    assert (s.user_ids, s.channel, s.app) == (["sam"], "telegram", "gaia")
    assert [x.id for x in await mem.sessions.list_sessions(app="gaia", user_id="sam")] == ["sam:telegram"]
    with pytest.raises(UnknownIdentityError):
        await mem.create_session(channel="telegram", sender="nobody", app="gaia")
    with pytest.raises(InvalidInputError, match="does not hold"):
        await mem.create_session(channel="sms", sender="+15550100", user_ids=["alex"], app="gaia")
    # a group chat: each sender's turns carry the linked user, so forget finds them
    group = await mem.create_session(
        channel="sms", sender="+15550100", user_ids=["sam", "alex"], app="gaia", session_id="grp"
    )
    assert group.user_ids == ["sam", "alex"]
    said = await mem.add_event(
        "grp", Event(content="sam: my pin is 4711"), app="gaia", channel="sms", sender="+15550100"
    )
    assert said.metadata == {"user_id": "sam"}
    await mem.add_event("grp", Event(content="alex: hello all"), app="gaia", channel="sms", sender="+15550199")
    with pytest.raises(UnknownIdentityError):
        await mem.add_event("grp", Event(content="who?"), app="gaia", channel="sms", sender="+10000000")
    with pytest.raises(InvalidInputError, match="different users"):
        await mem.add_event(
            "grp", Event(content="x", metadata={"user_id": "alex"}), app="gaia", channel="sms", sender="+15550100"
        )
    assert [e.content for e in await mem.sessions.get_events("grp", app="gaia")] == [
        "sam: my pin is 4711",
        "alex: hello all",
    ]
    await mem.forget("sam")
    assert [e.content for e in await mem.sessions.get_events("grp", app="gaia")] == ["alex: hello all"]
    assert await mem.resolve_identity("telegram", "sam") is None
    assert await mem.resolve_identity("sms", "+15550199") == "alex"


async def test_forget_erases_the_links_and_export_has_them(backend: Backend, mem: AsyncMemory) -> None:
    await mem.link_identity("telegram", "sam", "sam")
    await mem.link_identity("sms", "+15550100", "sam")
    await mem.link_identity("sms", "+15550199", "alex")
    out = await mem.export_user("sam")
    assert [(i["channel"], i["sender"], i["user_id"]) for i in out["identities"]] == [
        ("sms", "+15550100", "sam"),
        ("telegram", "sam", "sam"),
    ]
    assert {(r[0], r[1]) for r in q(backend, "SELECT channel, sender FROM identities WHERE user_id='sam'")} == {
        (i["channel"], i["sender"]) for i in out["identities"]
    }
    assert [i["sender"] for i in (await mem.export_user("alex"))["identities"]] == ["+15550199"]
    assert await mem.forget("sam") >= 2  # the links count as removed rows
    assert q(backend, "SELECT COUNT(*) FROM identities WHERE user_id='sam'") == [(0,)]
    assert q(backend, "SELECT COUNT(*) FROM identities") == [(1,)]
    assert (await mem.export_user("sam"))["identities"] == []
    assert await mem.identities("alex") != []
    # Gaia's /forget (long-term memory only): the user keeps talking, so the links stay
    await mem.link_identity("sms", "+15550100", "sam")
    await mem.add("I am vegetarian", channel="sms", sender="+15550100")
    await mem.forget("sam", sessions=False)
    assert (await mem.list(user_id="sam")).items == []
    assert await mem.resolve_identity("sms", "+15550100") == "sam"


def test_in_memory_database_and_the_sync_facade() -> None:
    with Memory(":memory:", embedder="hash") as m:
        link = m.link_identity("whatsapp", "+4915112345", "ana")
        assert (link.channel, link.sender, link.user_id) == ("whatsapp", "+4915112345", "ana")
        m.add("Ana speaks German", channel="whatsapp", sender="+4915112345")
        s = m.create_session(channel="whatsapp", sender="+4915112345")
        assert m.add_event(s.id, Event(content="hallo"), channel="whatsapp", sender="+4915112345").metadata == {
            "user_id": "ana"
        }
        assert m.resolve_identity("whatsapp", "+4915112345") == "ana"
        assert [f.content for f in m.list(user_id="ana").items] == ["Ana speaks German"]
        assert [i.sender for i in m.identities("ana")] == ["+4915112345"]
        assert m.unlink_identity("whatsapp", "+4915112345")
        assert m.identities("ana") == []


def test_an_existing_file_gains_the_identity_table(tmp_path: Path) -> None:
    """A database made before the migration opens, gets the table, and keeps its memories."""
    import sqlite3

    db = tmp_path / "old.db"
    with Memory(db, embedder="hash") as m:
        m.add("Before the map", user_id="sam")
    with sqlite3.connect(db) as c:
        c.execute("DROP TABLE identities")
        c.execute("DELETE FROM _migrations WHERE name='0012_identities'")
    with Memory(db, embedder="hash") as m:
        m.link_identity("sms", "+15550100", "sam")
        m.add("After the map", channel="sms", sender="+15550100")
        assert {f.content for f in m.list(user_id="sam").items} == {"Before the map", "After the map"}
