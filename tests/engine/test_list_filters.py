"""``list(kind=..., filters=...)``: the filters of ``search``, applied in the store's query (so a
page is full and ``total`` counts what they keep), for the async engine and the sync facade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory, InvalidInputError, Memory


async def _contents(mem: AsyncMemory, **kw: Any) -> list[str]:
    return [f.content for f in (await mem.list(**kw)).items]


async def test_kind_lists_one_memory_type(mem: AsyncMemory) -> None:
    await mem.add("Ann is a botanist", user_id="ann", kind="description")
    await mem.add("Ann likes orchids", user_id="ann")
    await mem.add([{"role": "user", "content": "hello there"}], user_id="ann", session_id="s1")
    doc = await mem.add_document("# Orchids\n\nThey need light.", user_id="ann", title="care")
    assert await _contents(mem, user_id="ann", kind="description") == ["Ann is a botanist"]
    assert await _contents(mem, user_id="ann", kind="message") == ["hello there"]
    assert [f.id for f in (await mem.list(user_id="ann", kind="document")).items] == [doc.id]
    fragments = await mem.list(user_id="ann", kind="fragment")
    assert fragments.total == 1 and fragments.items[0].metadata["document_id"] == doc.id
    assert await _contents(mem, user_id="ann", filters={"kind": "fact"}) == ["Ann likes orchids"]
    assert await _contents(mem, user_id="ann", kind="fact", filters={"kind": "fact"}) == ["Ann likes orchids"]


async def test_filters_are_pushed_into_the_query(mem: AsyncMemory) -> None:
    """A matching memory behind 30 newer non-matching ones is on the first page of one."""
    await mem.add("the invoice from Bo", user_id="ann", metadata={"sender": {"id": "123"}, "source": "email"})
    for i in range(30):
        await mem.add(f"chat note {i}", user_id="ann", metadata={"sender": {"id": "999"}, "source": "chat"})
    page = await mem.list(user_id="ann", limit=1, filters={"sender.id": "123"})
    assert [f.content for f in page.items] == ["the invoice from Bo"]
    assert page.total == 1 and page.next_cursor is None
    chat = await mem.list(user_id="ann", limit=10, filters={"source": "chat"})
    assert chat.total == 30 and len(chat.items) == 10 and chat.next_cursor is not None
    rest = await mem.list(user_id="ann", limit=50, filters={"source": "chat"}, cursor=chat.next_cursor)
    assert len(rest.items) == 20 and {f.id for f in rest.items}.isdisjoint(f.id for f in chat.items)
    assert (await mem.list(user_id="ann", filters={"source": "fax"})).total == 0


async def test_author_session_and_scope_filters(mem: AsyncMemory) -> None:
    await mem.add(
        [
            {"role": "user", "name": "Ann", "content": "Ann: pizza on Friday"},
            {"role": "assistant", "name": "bot", "content": "bot: noted"},
        ],
        user_id="ann",
        agent_id="bot",
        session_id="room-1",
    )
    await mem.add("Ann's own pizza note", user_id="ann", agent_id="bot")
    await mem.add("The bot's rule: orders close at 9pm", agent_id="bot", scope="shared")
    await mem.add("Room rule: no pineapple", agent_id="bot", session_id="room-1", scope="room")
    await mem.add("Other room rule", agent_id="bot", session_id="room-2", scope="room")
    ann = {"user_id": "ann", "agent_id": "bot"}
    assert await _contents(mem, **ann, filters={"author": "Ann"}) == ["Ann: pizza on Friday"]
    assert sorted(await _contents(mem, **ann, filters={"session_id": "room-1"})) == [
        "Ann: pizza on Friday",
        "bot: noted",
    ]
    assert await _contents(mem, **ann, filters={"scope": "shared"}) == ["The bot's rule: orders close at 9pm"]
    assert await _contents(mem, **ann, filters={"scope": "private", "kind": "fact"}) == ["Ann's own pizza note"]
    assert await _contents(mem, **ann, filters={"scope": "room"}) == []  # no room named
    in_room = {**ann, "session_id": "room-1"}
    assert await _contents(mem, **in_room, filters={"scope": "room"}) == ["Room rule: no pineapple"]
    assert await _contents(mem, **in_room, filters={"session_id": "room-2"}) == []  # another session
    assert await _contents(mem, agent_id="bot", session_id="room-2", filters={"scope": "room"}) == ["Other room rule"]


async def test_filters_never_reach_another_users_memory(mem: AsyncMemory) -> None:
    await mem.add("Ann's passport number is X1", user_id="ann", metadata={"topic": "travel"})
    await mem.add("Bob's train leaves at 8", user_id="bob", metadata={"topic": "travel"})
    assert await _contents(mem, user_id="bob", filters={"topic": "travel"}) == ["Bob's train leaves at 8"]
    assert await _contents(mem, user_id="bob", kind="fact", filters={"scope": "user"}) == ["Bob's train leaves at 8"]
    assert (await mem.list(user_id="carol", filters={"topic": "travel"})).total == 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"kind": "memo"}, "kind must be one of"),
        ({"kind": "fact", "filters": {"kind": "message"}}, "contradict"),
        ({"filters": {"kind": "memo"}}, "filters\\['kind'\\]"),
        ({"filters": {"scope": "everyone"}}, "filters\\['scope'\\]"),
        ({"filters": {"sender..id": "1"}}, "empty part"),
        ({"filters": {"source": ["a", "b"]}}, "single value"),
        ({"filters": "source=email"}, "filters must be a dict"),
        ({"filters": {"author": 7}}, "must be a string"),
    ],
)
async def test_bad_kind_or_filters(mem: AsyncMemory, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        await mem.list(user_id="ann", **kw)


def test_sync_facade_passes_kind_and_filters(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        m.add("Ann likes orchids", user_id="ann", metadata={"source": "chat"})
        m.add("Ann is a botanist", user_id="ann", kind="description", metadata={"source": "profile"})
        assert [f.content for f in m.list(user_id="ann", kind="description").items] == ["Ann is a botanist"]
        assert [f.content for f in m.list(user_id="ann", filters={"source": "chat"}).items] == ["Ann likes orchids"]
        assert m.list(user_id="bob", filters={"source": "chat"}).total == 0


def test_adapters_list_through_the_public_api() -> None:
    """The LangGraph store lists items with ``list(filters=...)``, not the fact store's own method."""
    import memlane.adapters

    src = Path(memlane.adapters.__file__).parent
    assert [p.name for p in sorted(src.glob("*.py")) if ".list_facts(" in p.read_text("utf-8")] == []
