"""Room memories (``scope="room"``, docs/documents.md) are edited and their history read by callers
naming the room, as ``get`` and ``delete`` take it: ``update(..., session_id=room)`` and
``history(..., session_id=room)``. Another room, or no room, never reaches them, and naming a room
never reaches another user's private memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane import AsyncMemory, InvalidInputError, Memory, NotFoundError, ScopeError


async def _room_memory(mem: AsyncMemory) -> str:
    (fact,) = await mem.add(
        "Pizza night is on Friday", user_id="ann", agent_id="bot", session_id="room-1", scope="room"
    )
    return fact.id


async def test_update_and_history_of_a_room_memory_name_the_room(mem: AsyncMemory) -> None:
    fid = await _room_memory(mem)
    updated = await mem.update(fid, "Pizza night moved to Saturday", user_id="ann", agent_id="bot", session_id="room-1")
    assert (updated.content, updated.version, updated.scope) == ("Pizza night moved to Saturday", 2, "room")
    got = await mem.get(fid, agent_id="bot", session_id="room-1")
    assert got.content == "Pizza night moved to Saturday"
    history = await mem.history(fid, user_id="ann", agent_id="bot", session_id="room-1")
    assert [(h.old_content, h.new_content) for h in history][-1] == (
        "Pizza night is on Friday",
        "Pizza night moved to Saturday",
    )
    assert [h.event for h in await mem.history(fid, agent_id="bot", session_id="room-1")] == [
        h.event for h in history
    ]  # the room's memory, whoever names the room
    hits = await mem.search("pizza night", user_id="bob", agent_id="bot", session_id="room-1")
    assert [h.fact.content for h in hits.hits] == ["Pizza night moved to Saturday"]  # re-indexed


async def test_without_the_room_or_in_another_room_nothing_is_found_or_changed(mem: AsyncMemory) -> None:
    fid = await _room_memory(mem)
    for where in (
        {"user_id": "ann", "agent_id": "bot"},
        {"user_id": "ann", "agent_id": "bot", "session_id": "room-2"},
        {"agent_id": "bot", "session_id": "room-2"},
        {"user_id": "ann", "session_id": "room-1"},
    ):
        with pytest.raises(NotFoundError):
            await mem.update(fid, "hijacked", **where)  # type: ignore[arg-type]
        with pytest.raises(NotFoundError):
            await mem.history(fid, **where)  # type: ignore[arg-type]
    assert (await mem.get(fid, agent_id="bot", session_id="room-1")).content == "Pizza night is on Friday"


async def test_another_user_in_the_room_edits_it_without_learning_who_wrote_it(mem: AsyncMemory) -> None:
    fid = await _room_memory(mem)
    updated = await mem.update(fid, "Pizza night is on Friday at 7", user_id="bob", agent_id="bot", session_id="room-1")
    assert updated.content == "Pizza night is on Friday at 7"
    assert updated.user_id is None  # ann contributed it: hidden from bob, as get hides it
    assert (await mem.get(fid, user_id="ann", agent_id="bot", session_id="room-1")).user_id == "ann"


async def test_naming_a_room_never_reaches_another_users_private_memory(mem: AsyncMemory) -> None:
    (mine,) = await mem.add("Ann's door code is 2468", user_id="ann", agent_id="bot", session_id="room-1")
    for who in ("bob", None):
        with pytest.raises(NotFoundError):
            await mem.update(mine.id, "leaked", user_id=who, agent_id="bot", session_id="room-1")
        with pytest.raises(NotFoundError):
            await mem.history(mine.id, user_id=who, agent_id="bot", session_id="room-1")
    assert (await mem.get(mine.id, user_id="ann", agent_id="bot")).content == "Ann's door code is 2468"
    # her own memory from that session: she may name the session or not
    done = await mem.update(mine.id, "Ann's door code is 1357", user_id="ann", agent_id="bot", session_id="room-1")
    assert done.version == 2 and len(await mem.history(mine.id, user_id="ann", agent_id="bot")) == 2


async def test_a_room_document_is_still_not_edited_in_place(mem: AsyncMemory) -> None:
    doc = await mem.add_document("# Rules\n\nNo pineapple.", agent_id="bot", session_id="room-1", scope="room")
    with pytest.raises(InvalidInputError, match="not edited in place"):
        await mem.update(doc.id, "Pineapple welcome", agent_id="bot", session_id="room-1")


async def test_bad_session_id_is_refused(mem: AsyncMemory) -> None:
    fid = await _room_memory(mem)
    with pytest.raises(ScopeError):
        await mem.update(fid, "x", agent_id="bot", session_id="")
    with pytest.raises(ScopeError):
        await mem.history(fid, agent_id="bot", session_id=7)  # type: ignore[arg-type]


def test_sync_facade_passes_session_id(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        (fact,) = m.add("Standup is at 9", agent_id="bot", session_id="room-1", scope="room")
        m.update(fact.id, "Standup is at 10", agent_id="bot", session_id="room-1")
        assert len(m.history(fact.id, agent_id="bot", session_id="room-1")) == 2
        with pytest.raises(NotFoundError):
            m.history(fact.id, agent_id="bot", session_id="room-2")
