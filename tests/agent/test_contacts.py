"""memlane.agent.contacts: "my girlfriend" / "mom" / a nickname -> a stored contact, through the
caller's own memory only (real SQLite memlane)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from memlane import AsyncMemory, ConfigError, InvalidInputError, Memory, ScopeError
from memlane.agent.contacts import Contact, extract_contacts, resolve_contact, resolve_contact_sync
from memlane.models import Fact


async def remember(m: AsyncMemory, user: str, *texts: str) -> None:
    for t in texts:
        await m.add(t, user_id=user, agent_id="chat")


@pytest.mark.parametrize(
    ("text", "name", "phones", "emails"),
    [
        ("My girlfriend is Dana, her number is +1 555 0100", "Dana", ["+15550100"], []),
        ("Grace is my girlfriend. Reach her at grace.h@example.com", "Grace", [], ["grace.h@example.com"]),
        ("The user's girlfriend is Mia Lopez (phone 020 7946 0000)", "Mia Lopez", ["02079460000"], []),
        ("alice's girlfriend, Noor: +44 7700 900123", "Noor", ["+447700900123"], []),
        ("My gf Kim texts from (555) 010-9999", "Kim", ["5550109999"], []),
    ],
)
def test_extract_contacts(text: str, name: str, phones: list[str], emails: list[str]) -> None:
    [c] = extract_contacts("my girlfriend", [Fact(content=text, user_id="u")])
    assert c.name == name and list(c.phones) == phones and list(c.emails) == emails
    assert c.relation == "girlfriend"


def test_extract_ignores_dates_and_unrelated_facts() -> None:
    facts = [
        Fact(content="My girlfriend Dana was born on 1996-04-12", user_id="u"),
        Fact(content="My boss is Tom, +1 555 0111", user_id="u"),
    ]
    [c] = extract_contacts("my girlfriend", facts)
    assert c.name == "Dana" and c.phones == () and c.sources == (facts[0].id,)


async def test_a_single_clear_match_resolves(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "My girlfriend is Dana, her number is +1 555 0100", "Alice likes hiking")
    r = await resolve_contact(mem, "my girlfriend", user_id="alice")
    assert r.status == "resolved" and r.contact is not None
    assert r.contact.name == "Dana" and r.address == "+15550100" and r.question is None
    json.dumps(r.to_dict())
    by_phone = await resolve_contact(mem, "my girlfriend", user_id="alice", channel="phone")
    assert by_phone.address == "+15550100"
    no_mail = await resolve_contact(mem, "my girlfriend", user_id="alice", channel="email")
    assert no_mail.status == "not_found" and "Dana" in (no_mail.question or "")
    assert "e-mail address" in (no_mail.question or "")


async def test_synonyms_and_two_facts_joined_by_name(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "My mother is Ruth", "Ruth's e-mail is ruth.silva@example.com")
    r = await resolve_contact(mem, "mom", user_id="alice")
    assert r.status == "resolved" and r.contact is not None
    assert r.contact.name == "Ruth" and r.address == "ruth.silva@example.com" and len(r.contact.sources) == 2


async def test_same_person_in_several_facts_is_one_match(mem: AsyncMemory) -> None:
    await remember(
        mem,
        "alice",
        "My girlfriend is Dana",
        "Dana is my girlfriend; her number is +1 555 0100",
        "My girlfriend's number is +1 555 0100",
    )
    r = await resolve_contact(mem, "my girlfriend", user_id="alice")
    assert r.status == "resolved" and r.contact is not None and r.contact.name == "Dana"


async def test_several_people_ask(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "My brother is Tom (+44 7700 900123)", "Sam is my brother, sam@example.org")
    r = await resolve_contact(mem, "my brother", user_id="alice")
    assert r.status == "ambiguous" and r.contact is None and r.address is None
    assert sorted(c.name or "" for c in r.candidates) == ["Sam", "Tom"]
    assert r.question is not None and "Tom (+447700900123)" in r.question and "Sam (sam@example.org)" in r.question
    phones_only = await resolve_contact(mem, "my brother", user_id="alice", channel="phone")
    assert phones_only.status == "resolved" and phones_only.address == "+447700900123"


async def test_one_person_with_two_numbers_asks_which(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "My dad Joe's mobile is +1 555 0142", "My dad Joe's office line is +1 555 0199")
    r = await resolve_contact(mem, "dad", user_id="alice")
    assert r.status == "ambiguous" and len(r.candidates) == 1
    assert r.question is not None and "+15550142" in r.question and "+15550199" in r.question


async def test_none_is_not_found(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "Alice likes hiking")
    r = await resolve_contact(mem, "my girlfriend", user_id="alice")
    assert r.status == "not_found" and r.candidates == ()
    assert r.question == "I don't know who your girlfriend is. Who do you mean?"
    await remember(mem, "alice", "My sister is Jo")
    known = await resolve_contact(mem, "my sister", user_id="alice")
    assert known.status == "not_found" and [c.name for c in known.candidates] == ["Jo"]


async def test_nickname(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "Bobby is my cousin Robert; his number is +1 555 0177")
    r = await resolve_contact(mem, "Bobby", user_id="alice")
    assert r.status == "resolved" and r.address == "+15550177"


async def test_a_number_or_address_needs_no_memory(mem: AsyncMemory) -> None:
    r = await resolve_contact(mem, "+1 555 0100", user_id="nobody")
    assert r.status == "resolved" and r.address == "+15550100"
    r = await resolve_contact(mem, "dana@example.com", user_id="nobody", channel="email")
    assert r.status == "resolved" and r.address == "dana@example.com"


async def test_cross_user_never_sees_anothers_contact(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "My girlfriend is Dana, her number is +1 555 0100", "Dana's e-mail is d@example.com")
    b = await resolve_contact(mem, "my girlfriend", user_id="bob")
    assert b.status == "not_found" and "0100" not in json.dumps(b.to_dict()) and "Dana" not in json.dumps(b.to_dict())
    b = await resolve_contact(mem, "Dana", user_id="bob")
    assert b.status == "not_found"
    await remember(mem, "bob", "My girlfriend is Erin, +1 555 0200")
    b = await resolve_contact(mem, "my girlfriend", user_id="bob")
    assert b.status == "resolved" and b.contact is not None and b.contact.name == "Erin"
    a = await resolve_contact(mem, "my girlfriend", user_id="alice")
    assert a.status == "resolved" and a.address == "+15550100"


async def test_an_agents_shared_memory_is_not_a_contact_source(mem: AsyncMemory) -> None:
    # shared memories may hold other users' words ("my girlfriend is ...") said in a group
    await mem.add("My girlfriend is Zoe, +1 555 0300", agent_id="chat", scope="agent")
    r = await resolve_contact(mem, "my girlfriend", user_id="bob")
    assert r.status == "not_found"


async def test_custom_extractor(mem: AsyncMemory) -> None:
    await remember(mem, "alice", "Reach my girlfriend on signal: @dee_99 (she goes by D)")
    await remember(mem, "bob", "My girlfriend is Erin, +1 555 0200")
    seen: list[str] = []

    async def llm_like(reference: str, facts: Sequence[Fact]) -> list[Contact]:
        seen.extend(f.content for f in facts)
        return [Contact(name="D", relation="girlfriend", handles=("@dee_99",), sources=(facts[0].id,))]

    r = await resolve_contact(mem, "my girlfriend", user_id="alice", extractor=llm_like)
    assert r.status == "resolved" and r.address == "@dee_99"
    assert r.contact is not None and r.contact.name == "D"  # the extractor's, not the regexes' (no name)
    assert seen and not any("Erin" in s for s in seen)  # it is given the caller's memories only


async def test_bad_input(mem: AsyncMemory) -> None:
    with pytest.raises(InvalidInputError):
        await resolve_contact(mem, "   ", user_id="alice")
    with pytest.raises(InvalidInputError):
        await resolve_contact(mem, "x" * 500, user_id="alice")
    with pytest.raises(InvalidInputError):
        await resolve_contact(mem, "mom", user_id="alice", channel="fax")  # type: ignore[arg-type]
    with pytest.raises(ScopeError):
        await resolve_contact(mem, "mom", user_id="")
    with pytest.raises(ConfigError):
        await resolve_contact(None, "mom", user_id="alice")  # type: ignore[arg-type]


def test_sync_memory(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder="hash") as m:
        m.add("My girlfriend is Dana, her number is +1 555 0100", user_id="alice")
        assert resolve_contact_sync(m, "my girlfriend", user_id="alice").address == "+15550100"
        assert resolve_contact_sync(m, "my girlfriend", user_id="bob").status == "not_found"
