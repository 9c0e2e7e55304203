"""memlane.agent.commands: slash commands out of band over a real SQLite memlane, and
``forget(sessions=False)`` (the long-term-only erase behind ``/forget``).

A command never reaches the session store or formation; each command acts on its caller only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memlane import AsyncMemory, Event, EventType, Memory, ScopeError
from memlane.agent.commands import HELP_TEXT, handle_command, handle_command_sync, is_command, parse_command
from memlane.formation.config import FormationConfig

CANARY = "qzxvbnkwmtrp"  # remembered long-term: must leave the file on /forget
SESSION_CANARY = "plkmjhygtfrd"  # said in the conversation: short-term, must survive /forget


@pytest.fixture
async def fmem(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    """Formation runs in the test (no background worker, no idle timer)."""
    m = await AsyncMemory(
        tmp_path / "m.db", embedder="hash", formation=FormationConfig(background=False, idle_minutes=None)
    ).open()
    try:
        yield m
    finally:
        await m.close()


async def conversation(m: AsyncMemory, session_id: str = "s1", user: str = "alice", *users: str) -> None:
    await m.sessions.create_session(app="chat", user_ids=[user, *users], session_id=session_id)
    turns = [
        (EventType.USER_MESSAGE, f"My name is Alice and I work at Acme as a welder. Code word {SESSION_CANARY}."),
        (EventType.AGENT_RESPONSE, "Nice to meet you Alice!"),
        (EventType.USER_MESSAGE, "I am allergic to peanuts."),
        (EventType.AGENT_RESPONSE, "Noted."),
    ]
    for kind, text in turns:
        author = user if kind == EventType.USER_MESSAGE else "bot"
        await m.add_event(session_id, Event(type=kind, author=author, content=text), app="chat")


async def cmd(m: AsyncMemory | Memory | None, text: str, user: str = "alice", session: str | None = "s1"):  # type: ignore[no-untyped-def]
    return await handle_command(m, text, user_id=user, session_id=session, app="chat")


def raw_contains(db: Path, word: str) -> bool:
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(f"{db}{suffix}")
        if p.exists() and word.encode() in p.read_bytes():
            return True
    return False


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/remember I like tea", ("remember", "I like tea")),
        ("  /REMEMBER   spaced  ", ("remember", "spaced")),
        ("/remember\nline one\nline two", ("remember", "line one\nline two")),
        ("/memory", ("memory", "")),
        ("/memories", ("memory", "")),
        ("/memory@gaia_bot", ("memory", "")),
        ("/forget", ("forget", "")),
        ("/reset now", ("reset", "now")),
        ("/help", ("help", "")),
        ("/xyz whatever", ("xyz", "whatever")),
        ("hello /remember x", None),
        ("/usr/bin/python crashed", None),
        ("//comment", None),
        ("/", None),
        ("/ remember", None),
        ("/123", None),
        ("", None),
        ("remember this", None),
    ],
)
def test_parse_command(text: str, parsed: tuple[str, str] | None) -> None:
    assert parse_command(text) == parsed
    assert is_command(text) is (parsed is not None)


async def test_not_a_command_returns_none_and_does_nothing(fmem: AsyncMemory) -> None:
    assert await cmd(fmem, "what's the weather?") is None
    assert await cmd(fmem, "/usr/bin is a directory") is None
    assert (await fmem.list(user_id="alice")).total == 0


# --------------------------------------------------------------------------- each command


async def test_remember_stores_verbatim_for_the_caller(fmem: AsyncMemory) -> None:
    r = await cmd(fmem, "/remember   My passport number is X1234567  ")
    assert r is not None and r.ok and r.command == "remember"
    fact = await fmem.get(r.data["id"], user_id="alice", agent_id="chat")
    assert fact.content == "My passport number is X1234567" and fact.metadata["source"] == "command:remember"
    usage = await cmd(fmem, "/remember")
    assert usage is not None and not usage.ok and "Usage: /remember <fact>" in usage.text
    too_long = await cmd(fmem, "/remember " + "x" * 40_000)
    assert too_long is not None and not too_long.ok
    assert (await fmem.list(user_id="alice")).total == 1


async def test_memory_lists_mine_only(fmem: AsyncMemory) -> None:
    empty = await cmd(fmem, "/memory")
    assert empty is not None and empty.ok and empty.data["total"] == 0 and "don't have anything" in empty.text
    await cmd(fmem, "/remember Alice's cat is Miso")
    await fmem.add("Alice prefers window seats", user_id="alice", agent_id="travel-bot")  # another agent: still hers
    await fmem.add("Bob's cat is Rex", user_id="bob", agent_id="chat")
    await fmem.add("The office closes at 6pm", agent_id="chat", scope="agent")  # shared, not hers
    r = await cmd(fmem, "/memories")
    assert r is not None and r.ok and r.command == "memory"
    listed = sorted(m["content"] for m in r.data["memories"])
    assert listed == ["Alice prefers window seats", "Alice's cat is Miso"]
    assert r.data["total"] == 2
    assert "Alice's cat is Miso (just now)" in r.text and "Rex" not in r.text and "office" not in r.text


async def test_forget_erases_long_term_and_keeps_the_conversation(fmem: AsyncMemory, tmp_path: Path) -> None:
    await conversation(fmem)
    formed = await fmem.form("s1", app="chat")
    assert formed.facts  # the conversation formed long-term facts
    await cmd(fmem, f"/remember my locker word is {CANARY}")
    await fmem.add("Bob's locker is 12", user_id="bob", agent_id="chat")
    events_before = [e.id for e in await fmem.sessions.get_events("s1", app="chat")]

    r = await cmd(fmem, "/forget")
    assert r is not None and r.ok and r.command == "forget" and r.data["removed"] > 0
    assert (await fmem.list(user_id="alice")).total == 0
    assert await fmem.reflections("user", user_id="alice", agent_id="chat") == []
    # short-term untouched: the session and every event stay, and already formed turns are not formed again
    assert [e.id for e in await fmem.sessions.get_events("s1", app="chat")] == events_before
    again = await fmem.form("s1", app="chat")
    assert again.turns == 0 and again.facts == []
    # the others' memory stays; the long-term text left the file, the conversation's did not
    assert (await fmem.list(user_id="bob")).total == 1
    assert not raw_contains(tmp_path / "m.db", CANARY)
    assert raw_contains(tmp_path / "m.db", SESSION_CANARY)
    # what is said after /forget is formed as usual
    await fmem.add_event(
        "s1", Event(type=EventType.USER_MESSAGE, author="alice", content="I live in Porto."), app="chat"
    )
    await fmem.add_event("s1", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Lovely."), app="chat")
    later = await fmem.form("s1", app="chat")
    assert later.turns == 2


async def test_reset_forms_then_clears_my_session(fmem: AsyncMemory) -> None:
    await conversation(fmem)
    r = await cmd(fmem, "/reset")
    assert r is not None and r.ok and r.command == "reset"
    assert r.data["cleared"] is True and r.data["turns"] == 4 and r.data["facts"] > 0
    assert await fmem.sessions.get_session("s1", app="chat") is None
    assert (await fmem.list(user_id="alice")).total > 0  # formed into long-term memory first
    nothing = await cmd(fmem, "/reset")
    assert nothing is not None and nothing.ok and "Nothing to reset" in nothing.text
    no_session = await cmd(fmem, "/reset", session=None)
    assert no_session is not None and not no_session.ok


async def test_reset_refuses_a_group_session(fmem: AsyncMemory) -> None:
    await conversation(fmem, "g1", "alice", "bob")
    r = await cmd(fmem, "/reset", session="g1")
    assert r is not None and not r.ok
    assert len(await fmem.sessions.get_events("g1", app="chat")) == 4
    assert await fmem.list_jobs() == []


async def test_help_and_unknown_commands(fmem: AsyncMemory) -> None:
    h = await cmd(fmem, "/help")
    assert h is not None and h.ok and h.text == HELP_TEXT
    for name in ("/remember", "/memory", "/forget", "/reset", "/help"):
        assert name in HELP_TEXT
    u = await cmd(fmem, "/xyz do something")
    assert u is not None and not u.ok and u.command == "unknown"
    assert u.text.startswith("Unknown command /xyz.") and HELP_TEXT in u.text


async def test_memory_off(fmem: AsyncMemory) -> None:
    for text in ("/remember x", "/memory", "/forget", "/reset"):
        r = await cmd(None, text)
        assert r is not None and not r.ok and "Memory is off" in r.text
    h = await cmd(None, "/help")
    assert h is not None and h.ok
    s = handle_command_sync(None, "/memory", user_id="alice")
    assert s is not None and "Memory is off" in s.text
    assert handle_command_sync(None, "hello", user_id="alice") is None


async def test_commands_never_reach_the_session_or_formation(fmem: AsyncMemory) -> None:
    await conversation(fmem)
    before = [(e.id, e.text) for e in await fmem.sessions.get_events("s1", app="chat")]
    for text in ("/remember Alice's bike is blue", "/memory", "/help", "/xyz", "/forget", "/memories"):
        assert await cmd(fmem, text) is not None
        assert [(e.id, e.text) for e in await fmem.sessions.get_events("s1", app="chat")] == before
        assert await fmem.list_jobs() == []  # no formation job queued or run
    assert not any(t.startswith("/") for _, t in before)


async def test_identity_is_checked(fmem: AsyncMemory) -> None:
    with pytest.raises(ScopeError):
        await handle_command(fmem, "/memory", user_id="")
    with pytest.raises(ScopeError):
        await handle_command(fmem, "/memory", user_id="alice", app="")


# --------------------------------------------------------------------------- isolation, every command


async def test_cross_user_every_command(fmem: AsyncMemory, tmp_path: Path) -> None:
    await conversation(fmem, "sa", "alice")
    await cmd(fmem, f"/remember Alice's locker word is {CANARY}", session="sa")
    alice_facts = (await fmem.list(user_id="alice")).total
    # /remember: bob's lands in bob's memory
    await cmd(fmem, "/remember Bob's locker is 12", user="bob", session="sb")
    assert (await fmem.list(user_id="alice")).total == alice_facts
    # /memory: bob lists only his
    r = await cmd(fmem, "/memory", user="bob", session="sb")
    assert r is not None and [m["content"] for m in r.data["memories"]] == ["Bob's locker is 12"]
    assert CANARY not in r.text
    # /reset: bob cannot reset (or form) alice's conversation
    r = await cmd(fmem, "/reset", user="bob", session="sa")
    assert r is not None and not r.ok
    assert len(await fmem.sessions.get_events("sa", app="chat")) == 4 and await fmem.list_jobs() == []
    # /forget: bob's erases bob's only
    await cmd(fmem, "/forget", user="bob", session="sb")
    assert (await fmem.list(user_id="bob")).total == 0
    assert (await fmem.list(user_id="alice")).total == alice_facts
    assert raw_contains(tmp_path / "m.db", CANARY)
    # /help: no data either way
    h = await cmd(fmem, "/help", user="bob")
    assert h is not None and CANARY not in h.text and h.data == {}


# --------------------------------------------------------------------------- sync facade


def test_sync_memory(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder="hash") as m:
        r = handle_command_sync(m, "/remember Alice likes figs", user_id="alice")
        assert r is not None and r.ok
        listed = handle_command_sync(m, "/memory", user_id="alice")
        assert listed is not None and [x["content"] for x in listed.data["memories"]] == ["Alice likes figs"]
        assert handle_command_sync(m, "/memory", user_id="bob").data["total"] == 0  # type: ignore[union-attr]
        assert handle_command_sync(m, "not a command", user_id="alice") is None


# --------------------------------------------------------------------------- forget(sessions=False)


async def test_forget_long_term_only_keeps_sessions_jobs_purged(fmem: AsyncMemory, tmp_path: Path) -> None:
    await conversation(fmem)
    await fmem.form("s1", app="chat")
    await fmem.add(f"remembered {CANARY}", user_id="alice", agent_id="chat")
    assert await fmem.list_jobs()  # the formation job holds formed text
    await fmem.forget("alice", sessions=False)
    assert await fmem.list_jobs() == []
    assert (await fmem.list(user_id="alice")).total == 0
    assert await fmem.sessions.get_session("s1", app="chat") is not None
    assert not raw_contains(tmp_path / "m.db", CANARY)
    # the default still removes the sessions too
    await fmem.forget("alice")
    assert await fmem.sessions.get_session("s1", app="chat") is None
    assert not raw_contains(tmp_path / "m.db", SESSION_CANARY)


async def test_forget_sessions_flag_is_checked(fmem: AsyncMemory) -> None:
    from memlane import InvalidInputError

    with pytest.raises(InvalidInputError):
        await fmem.forget("alice", sessions="no")  # type: ignore[arg-type]


def test_sync_forget_passes_sessions_through(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder="hash") as m:
        m.sessions.create_session(app="chat", user_ids=["alice"], session_id="s1")
        m.add("Alice likes figs", user_id="alice")
        m.forget("alice", sessions=False)
        assert m.list(user_id="alice").total == 0
        assert m.sessions.get_session("s1", app="chat") is not None
        m.forget("alice")
        assert m.sessions.get_session("s1", app="chat") is None
