"""elizaOS documents on memlane: memory types (message / document / fragment / description /
custom), scopes (private / shared / room) and rich message metadata (source, sender, chat
type, thread, platform ids), with cross-user and cross-room isolation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import AsyncMemory, InvalidInputError, Memory, NotFoundError, ScopeError
from memlane.errors import UsageError

GUIDE = "\n\n".join(
    [
        "# User Guide",
        "## Install\n\n" + "Run the installer and follow the prompts carefully. " * 60,
        "## Database\n\n" + "The database listens on port 5432 by default. " * 5,
        "## Backups\n\n" + "Nightly backups go to the archive bucket. " * 80,
    ]
)


@pytest.fixture
async def m(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(tmp_path / "eliza.db", embedder="hash:64", sessions="null") as mem:
        yield mem


# --------------------------------------------------------------------------- documents


async def test_a_short_document_is_still_a_document_with_one_fragment(m: AsyncMemory) -> None:
    doc = await m.add_document("Refunds take 5 business days.", title="Refunds", source="kb", user_id="ann")
    assert doc.kind == "document" and doc.content == "Refunds take 5 business days."
    assert doc.metadata == {"title": "Refunds", "source": "kb", "fragments": 1}
    [fragment] = await m.fragments(doc.id, user_id="ann")
    assert fragment.kind == "fragment" and fragment.content == doc.content
    assert fragment.metadata["document_id"] == doc.id and fragment.metadata["source"] == "kb"
    assert (await m.parent_document(fragment.id, user_id="ann")).id == doc.id
    hits = (await m.search("how long do refunds take", user_id="ann")).hits
    assert [h.fact.id for h in hits] == [fragment.id]  # the fragment is found, never the document row
    # the same words as a plain fact are another memory, not this document
    [plain] = await m.add("Refunds take 5 business days.", user_id="ann")
    assert plain.kind == "fact" and plain.id != doc.id
    again = await m.add_document("Refunds take 5 business days.", user_id="ann")
    assert again.id == doc.id  # idempotent by text


async def test_a_long_document_is_split_at_headings_linked_and_deleted_whole(m: AsyncMemory) -> None:
    doc = await m.add_document(
        GUIDE,
        title="User Guide",
        source="filesystem",
        agent_id="bot",
        scope="shared",
        metadata={"documentPath": "./docs/guide.md"},
    )
    assert doc.scope == "agent" and doc.metadata["documentPath"] == "./docs/guide.md"
    fragments = await m.fragments(doc.id, agent_id="bot")
    assert len(fragments) == doc.metadata["fragments"] >= 2
    assert [f.metadata["fragment"] for f in fragments] == list(range(len(fragments)))
    assert "".join("".join(f.content for f in fragments).split()) == "".join(GUIDE.split())
    assert all(GUIDE[f.metadata["start"] : f.metadata["end"]] == f.content for f in fragments)
    port = next(f for f in fragments if "5432" in f.content)
    assert port.metadata["headings"][-1] in ("Database", "Install")
    # every user of the agent finds the shared document
    top = (await m.search("which port does the database listen on", user_id="zoe", agent_id="bot")).hits[0].fact
    assert top.id == port.id and top.metadata["title"] == "User Guide"
    assert (await m.parent_document(top.id, user_id="zoe", agent_id="bot")).content == GUIDE
    await m.delete(doc.id, agent_id="bot")
    assert (await m.search("database port 5432", agent_id="bot")).hits == []
    assert (await m.list(agent_id="bot")).items == []


async def test_documents_are_private_to_their_user(m: AsyncMemory) -> None:
    doc = await m.add_document(GUIDE, user_id="ann", agent_id="bot")
    fragment = (await m.fragments(doc.id, user_id="ann", agent_id="bot"))[0]
    for reader in ({"user_id": "bob", "agent_id": "bot"}, {"user_id": "bob"}, {"agent_id": "bot"}):
        with pytest.raises(NotFoundError):
            await m.fragments(doc.id, **reader)
        with pytest.raises(NotFoundError):
            await m.parent_document(fragment.id, **reader)
        with pytest.raises(NotFoundError):
            await m.delete(doc.id, **reader)
        assert (await m.search("database port", **reader)).hits == []
    assert len(await m.fragments(doc.id, user_id="ann", agent_id="bot")) == doc.metadata["fragments"]


async def test_document_helpers_refuse_the_wrong_kind_and_bad_input(m: AsyncMemory) -> None:
    [fact] = await m.add("not a document", user_id="ann")
    with pytest.raises(InvalidInputError, match="not a document"):
        await m.fragments(fact.id, user_id="ann")
    with pytest.raises(InvalidInputError, match="not a document fragment"):
        await m.parent_document(fact.id, user_id="ann")
    for bad in ("", "   ", "\u200b", 42):
        with pytest.raises(InvalidInputError):
            await m.add_document(bad, user_id="ann")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await m.add_document("text", title="", user_id="ann")
    with pytest.raises(ScopeError):
        await m.add_document("text")
    with pytest.raises(ScopeError):
        await m.add_document("text", user_id="ann", scope="shared")
    assert (await m.stats(user_id="ann")).facts == 1


# --------------------------------------------------------------------------- memory types


async def test_typed_memories_are_stored_and_filtered_by_kind(tmp_path: Path) -> None:
    db = tmp_path / "kinds.db"
    async with AsyncMemory(db, embedder="hash:64", sessions="null") as m:
        await m.add("Ann is a botanist who studies orchids", user_id="ann", kind="description")
        await m.add(
            "approval request: orchids greenhouse budget",
            user_id="ann",
            kind="custom",
            metadata={"type": "approval_request"},
        )
        await m.add([{"role": "user", "content": "I watered the orchids today"}], user_id="ann", session_id="s1")
        await m.add("Ann waters orchids on Sundays", user_id="ann")
        await m.add_document("Orchids need indirect light.", user_id="ann")
        await m.add("Ann likes orchids", user_id="ann", kind="message")
    async with AsyncMemory(db, embedder="hash:64", sessions="null") as m:  # kinds survive a reopen
        kinds = sorted(f.kind for f in (await m.list(user_id="ann")).items)
        assert kinds == ["custom", "description", "document", "fact", "fragment", "message", "message"]
        for kind in ("description", "custom", "message", "fact", "fragment"):
            hits = (await m.search("orchids", user_id="ann", filters={"kind": kind})).hits
            # the vector list must respect the filter as well as the keyword list
            assert hits and {h.fact.kind for h in hits} == {kind}, kind
            assert any(h.vector_rank is not None for h in hits)
        assert (await m.search("orchids", user_id="ann", filters={"kind": "custom", "type": "approval_request"})).hits
        with pytest.raises(InvalidInputError, match="kind"):
            await m.search("orchids", user_id="ann", filters={"kind": "note"})


async def test_kind_is_validated(m: AsyncMemory) -> None:
    with pytest.raises(InvalidInputError, match="add_document"):
        await m.add("x", user_id="ann", kind="document")  # type: ignore[call-overload]
    with pytest.raises(InvalidInputError, match="fragment"):
        await m.add("x", user_id="ann", kind="fragment")  # type: ignore[call-overload]
    for bad in ("note", "Description", 3):
        with pytest.raises(InvalidInputError, match="kind must be one of"):
            await m.add("x", user_id="ann", kind=bad)  # type: ignore[call-overload]
    with pytest.raises(UsageError):
        await m.add("x", user_id="ann", kind="description", infer=True)  # type: ignore[call-overload]
    assert (await m.stats(user_id="ann")).facts == 0


async def test_same_words_as_two_kinds_are_two_memories(m: AsyncMemory) -> None:
    [fact] = await m.add("Ann is a botanist", user_id="ann")
    [desc] = await m.add("Ann is a botanist", user_id="ann", kind="description")
    assert fact.id != desc.id and (fact.kind, desc.kind) == ("fact", "description")
    [again] = await m.add("Ann is a botanist", user_id="ann", kind="description")
    assert again.id == desc.id


# --------------------------------------------------------------------------- scopes


async def test_scopes_private_shared_room(m: AsyncMemory) -> None:
    [private] = await m.add("ann private note kiwi", user_id="ann", agent_id="bot", scope="private")
    [shared] = await m.add("shared note kiwi", user_id="ann", agent_id="bot", scope="shared")
    [room] = await m.add("room note kiwi", user_id="ann", agent_id="bot", session_id="r1", scope="room")
    assert (private.scope, shared.scope, room.scope) == ("user", "agent", "room")

    async def seen(**reader: str) -> set[str]:
        return {h.fact.id for h in (await m.search("kiwi", top_k=50, **reader)).hits}

    assert await seen(user_id="ann", agent_id="bot") == {private.id, shared.id}  # no room named
    assert await seen(user_id="ann", agent_id="bot", session_id="r1") == {room.id}  # narrowed to the room
    assert await seen(user_id="bob", agent_id="bot", session_id="r1") == {room.id}
    assert await seen(user_id="bob", agent_id="bot", session_id="r2") == set()
    assert await seen(user_id="bob", agent_id="bot") == {shared.id}
    assert await seen(user_id="bob") == set()
    assert await seen(agent_id="other", session_id="r1") == set()  # a room belongs to its agent
    assert await seen(agent_id="bot", session_id="r1", filters={"scope": "room"}) == {room.id}
    assert await seen(user_id="ann", agent_id="bot", filters={"scope": "private"}) == {private.id}
    assert await seen(user_id="ann", agent_id="bot", filters={"scope": "shared"}) == {shared.id}
    # the room memory does not show its contributor to the others
    other = (await m.search("kiwi", user_id="bob", agent_id="bot", session_id="r1")).hits[0].fact
    assert other.user_id is None
    # reads by id need the room too
    with pytest.raises(NotFoundError):
        await m.get(room.id, user_id="bob", agent_id="bot")
    assert (await m.get(room.id, agent_id="bot", session_id="r1")).content == "room note kiwi"
    with pytest.raises(NotFoundError):
        await m.get(room.id, agent_id="bot", session_id="r2")
    listed = {f.id for f in (await m.list(agent_id="bot", session_id="r1")).items}
    assert listed == {room.id}
    await m.delete(room.id, agent_id="bot", session_id="r1")
    assert await seen(agent_id="bot", session_id="r1") == set()


async def test_room_scope_needs_agent_and_room(m: AsyncMemory) -> None:
    with pytest.raises(ScopeError, match="room"):
        await m.add("x", user_id="ann", session_id="r1", scope="room")
    with pytest.raises(ScopeError, match="room"):
        await m.add("x", user_id="ann", agent_id="bot", scope="room")
    with pytest.raises(InvalidInputError, match="scope must be one of"):
        await m.add("x", user_id="ann", scope="global")  # type: ignore[call-overload]
    with pytest.raises(UsageError):
        await m.add("x", agent_id="bot", session_id="r1", scope="room", infer=True)  # type: ignore[call-overload]
    assert (await m.stats(user_id="ann")).facts == 0


async def test_forget_erases_the_room_memories_a_user_contributed(m: AsyncMemory) -> None:
    await m.add("ann said the password is mango", user_id="ann", agent_id="bot", session_id="r1", scope="room")
    await m.add("bob said hello mango", user_id="bob", agent_id="bot", session_id="r1", scope="room")
    await m.forget("ann")
    left = [h.fact.content for h in (await m.search("mango", agent_id="bot", session_id="r1")).hits]
    assert left == ["bob said hello mango"]
    await m.forget("bob", shared="keep")  # the room keeps it, unlinked from bob
    [kept] = (await m.search("mango", agent_id="bot", session_id="r1")).hits
    assert kept.fact.content == "bob said hello mango" and kept.fact.user_id is None


USERS = ("ann", "bob")
ROOMS = ("r1", "r2")
SCOPES = ("private", "shared", "room")
writes = st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(SCOPES), st.sampled_from(ROOMS)), max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=writes)
def test_visibility_matches_the_model(tmp_path: Path, writes: list[tuple[str, str, str]]) -> None:
    """Whatever is written, a reader (user, room or none) sees exactly: their own private
    memories (of that room when one is named), the agent's shared ones (same), and the named
    room's room memories; never another user's private memory, never another room's."""
    with Memory(":memory:", embedder=None, sessions="null") as mem:
        stored: list[tuple[str, str, str, str]] = []
        for i, (user, scope, room) in enumerate(writes):
            text = f"marker item{i} by {user}"
            [fact] = mem.add(text, user_id=user, agent_id="bot", session_id=room, scope=scope)  # type: ignore[arg-type]
            stored.append((fact.id, user, scope, room))
        for reader in USERS:
            for named in (None, *ROOMS):
                got = {
                    h.fact.id
                    for h in mem.search("marker", user_id=reader, agent_id="bot", session_id=named, top_k=100).hits
                }
                want = {
                    fid
                    for fid, user, scope, room in stored
                    if (named is None or room == named)
                    and (
                        (scope == "private" and user == reader)
                        or scope == "shared"
                        or (scope == "room" and room == named)
                    )
                }
                assert got == want, (reader, named)


# --------------------------------------------------------------------------- metadata

DISCORD = {
    "type": "message",
    "source": "discord",
    "provider": "discord",
    "chatType": "group",
    "sender": {"id": "123456789", "name": "John Doe", "username": "johndoe"},
    "thread": {"id": "t-9", "label": "release planning"},
    "group": {"id": "987654321", "name": "Developer Chat", "channel": "#general"},
    "reply": {"id": "m-1", "body": "when is the release?", "sender": "ann"},
    "discord": {"guildId": "987654321", "channelId": "111111111", "messageId": 222222222},
    "session": {"sessionId": "s-1", "sessionKey": "k", "isNewSession": False},
}
TELEGRAM = {
    "source": "telegram",
    "chatType": "dm",
    "sender": {"id": "555", "name": "Ann"},
    "telegram": {"chatId": -100123, "messageId": "77"},
}


async def test_rich_metadata_is_stored_returned_and_filterable(m: AsyncMemory) -> None:
    await m.add(
        [
            {"role": "user", "name": "johndoe", "content": "the release ships friday", "metadata": DISCORD},
            {"role": "user", "name": "ann", "content": "the release notes are ready", "metadata": TELEGRAM},
        ],
        user_id="ann",
        agent_id="bot",
        session_id="room-1",
    )
    [first] = [h.fact for h in (await m.search("ships friday", user_id="ann", agent_id="bot")).hits[:1]]
    assert first.metadata == DISCORD  # returned as stored, nested objects included

    async def contents(filters: dict[str, object]) -> list[str]:
        hits = (await m.search("release", user_id="ann", agent_id="bot", filters=filters)).hits
        return sorted(h.fact.content for h in hits)

    friday, notes = "the release ships friday", "the release notes are ready"
    assert await contents({"source": "discord"}) == [friday]
    assert await contents({"chatType": "dm"}) == [notes]
    assert await contents({"sender.id": "123456789"}) == [friday]
    assert await contents({"sender.username": "johndoe", "thread.label": "release planning"}) == [friday]
    assert await contents({"discord.messageId": 222222222}) == [friday]  # numbers match numbers
    assert await contents({"discord.messageId": "222222222"}) == []  # ... not text
    assert await contents({"telegram.chatId": -100123}) == [notes]
    assert await contents({"session.isNewSession": False}) == [friday]
    assert await contents({"sender.id": "nobody"}) == []
    assert await contents({"sender.missing": "x"}) == []
    assert await contents({"sender": "123456789"}) == []  # an object is not its id
    # another user filtering on the same metadata sees nothing of ann's
    assert (await m.search("release", user_id="bob", agent_id="bot", filters={"source": "discord"})).hits == []


@pytest.mark.parametrize("key", ["sender..id", ".id", "sender.", " . "])
async def test_dotted_filter_keys_need_every_part(m: AsyncMemory, key: str) -> None:
    with pytest.raises(InvalidInputError, match="empty part"):
        await m.search("x", user_id="ann", filters={key: "1"})


def test_sync_facade_documents_and_rooms(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder="hash:64", sessions="null") as mem:
        doc = mem.add_document(GUIDE, title="Guide", agent_id="bot", session_id="r1", scope="room")
        assert doc.scope == "room"
        fragments = mem.fragments(doc.id, agent_id="bot", session_id="r1")
        assert mem.parent_document(fragments[0].id, agent_id="bot", session_id="r1").id == doc.id
        assert mem.search("database port", user_id="ann", agent_id="bot", session_id="r1").hits
        assert mem.search("database port", user_id="ann", agent_id="bot", session_id="r2").hits == []
        assert mem.get(doc.id, agent_id="bot", session_id="r1").metadata["title"] == "Guide"
        mem.delete(doc.id, agent_id="bot", session_id="r1")
        assert mem.search("database port", agent_id="bot", session_id="r1").hits == []


def test_fact_filter_reference_semantics_follow_paths_and_json_types() -> None:
    from memlane.models import Fact, FactFilter

    fact = Fact(content="x", user_id="u", metadata={"sender": {"id": "1", "n": 2, "ok": True, "none": None}, "a.b": 1})
    assert FactFilter(metadata=(("sender.id", "1"),)).matches(fact)
    assert FactFilter(metadata=(("sender.n", 2.0),)).matches(fact)
    assert not FactFilter(metadata=(("sender.n", "2"),)).matches(fact)
    assert FactFilter(metadata=(("sender.ok", True),)).matches(fact)
    assert not FactFilter(metadata=(("sender.ok", 1),)).matches(fact)
    assert FactFilter(metadata=(("sender.none", None),)).matches(fact)
    assert not FactFilter(metadata=(("sender.gone", None),)).matches(fact)
    assert not FactFilter(metadata=(("a.b", 1),)).matches(fact)  # a dotted key is a path, not a literal key


# --------------------------------------------------------------------------- the how-to runs

DOC = Path(__file__).resolve().parents[2] / "docs" / "documents.md"
_BLOCK = re.compile(r"^```python\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_EXPECT = re.compile(r"#\s*->\s?(?P<line>.*)$")


@pytest.mark.parametrize("index", range(len(_BLOCK.findall(DOC.read_text(encoding="utf-8")))))
def test_docs_documents_md_snippets_print_what_they_show(tmp_path: Path, index: int) -> None:
    body = _BLOCK.findall(DOC.read_text(encoding="utf-8"))[index]
    expected = [m["line"].rstrip() for m in map(_EXPECT.search, body.splitlines()) if m]
    env = {**os.environ, "HOME": str(tmp_path), "MEMLANE_DB": str(tmp_path / "m.db")}
    run = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == expected
