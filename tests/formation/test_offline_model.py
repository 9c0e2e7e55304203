"""The offline (rule-based) formation model: extraction, dedup, reflections, consolidation, profile."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane.formation.model import FormationModel
from memlane.formation.offline import OfflineModel
from memlane.formation.schemas import (
    MAX_FACT_WORDS,
    MAX_REFLECTION_WORDS,
    ConsolidationInput,
    DedupInput,
    DedupItem,
    ExistingFact,
    ExtractionInput,
    ProfileInput,
    ReflectionInput,
    ScopeMemory,
    Turn,
    word_count,
)
from memlane.providers.llm.base import UsageMeter

Role = Literal["user", "assistant"]


async def extract(*turns: tuple[Role, str, str], user_name: str | None = None) -> list[str]:
    conv = [Turn(role=role, author=author, text=text) for role, author, text in turns]
    out = await OfflineModel().extract_facts(ExtractionInput(conversation=conv, instructions="", user_name=user_name))
    return [f.content for f in out.facts]


# --------------------------------------------------------------------------- extraction: positives

EXTRACTION_CASES: list[tuple[str, list[str]]] = [
    ("I'm vegetarian.", ["Caroline is vegetarian"]),
    ("I am a nurse.", ["Caroline is a nurse"]),
    ("I'm 34", ["Caroline is 34 years old"]),
    ("I live in Lisbon.", ["Caroline lives in Lisbon"]),
    ("I moved to Berlin in 2021.", ["Caroline moved to Berlin in 2021"]),
    ("I work at Acme.", ["Caroline works at Acme"]),
    ("I work for the city council.", ["Caroline works for the city council"]),
    ("I work as a data engineer.", ["Caroline works as a data engineer"]),
    ("I'm from Portugal.", ["Caroline is from Portugal"]),
    ("I was born in Porto.", ["Caroline was born in Porto"]),
    ("I was born on May 3, 1990.", ["Caroline was born on May 3, 1990"]),
    ("I have two kids.", ["Caroline has two kids"]),
    ("I have a dog named Rex.", ["Caroline has a dog named Rex"]),
    ("I'm allergic to peanuts!", ["Caroline is allergic to peanuts"]),
    ("I speak Portuguese and English.", ["Caroline speaks Portuguese and English"]),
    ("I study marine biology.", ["Caroline studies marine biology"]),
    ("My birthday is March 12.", ["Caroline's birthday is March 12"]),
    ("my email is caro@example.com", ["Caroline's email is caro@example.com"]),
    ("My email is now caro@new.example", ["Caroline's email is caro@new.example"]),
    ("My email address has changed to caro@new.example.", ["Caroline's email is caro@new.example"]),
    ("My phone number is now +351 912 000 111.", ["Caroline's phone number is +351 912 000 111"]),
    ("My address changed to 3 Elm Street, Porto.", ["Caroline's address is 3 Elm Street, Porto"]),
    ("My job title is now head nurse.", ["Caroline's job title is head nurse"]),
    ("My phone number is +351 912 345 678.", ["Caroline's phone number is +351 912 345 678"]),
    ("My address is 12 Rua Augusta, Lisbon.", ["Caroline's address is 12 Rua Augusta, Lisbon"]),
    ("My favourite band is Radiohead.", ["Caroline's favorite band is Radiohead"]),
    ("My wife is called Anna.", ["Caroline's wife is named Anna"]),
    ("My dog's name is Rex.", ["Caroline's dog is named Rex"]),
    ("My sister is a doctor.", ["Caroline's sister is a doctor"]),
    ("Grace is my girlfriend.", ["Grace is Caroline's girlfriend"]),
    ("Tom is my brother.", ["Tom is Caroline's brother"]),
    ("Grace's birthday is May 3.", ["Grace's birthday is May 3"]),
    ("Call me Caz.", ["Caroline prefers to be called Caz"]),
    ("I love hiking in the mountains!", ["Caroline loves hiking in the mountains"]),
    ("I hate cilantro.", ["Caroline hates cilantro"]),
    ("I can't stand loud music.", ["Caroline cannot stand loud music"]),
    ("I prefer tea over coffee.", ["Caroline prefers tea over coffee"]),
    ("I don't like horror movies.", ["Caroline dislikes horror movies"]),
    ("I'm planning to run a marathon in October.", ["Caroline is planning to run a marathon in October"]),
    ("I'm getting married on June 5.", ["Caroline is getting married on June 5"]),
    ("I'm going to Japan next month.", ["Caroline is going to Japan next month"]),
    ("I'm not vegetarian anymore.", ["Caroline is not vegetarian"]),
    ("I don't eat meat.", ["Caroline does not eat meat"]),
    ("My goal is to open an animal shelter.", ["Caroline's goal is to open an animal shelter"]),
    (
        "I went to a LGBTQ support group yesterday and it was so powerful.",
        ["Caroline went to a LGBTQ support group yesterday"],
    ),
    (
        "Last Friday, I ran a charity race for mental health.",
        ["Caroline ran a charity race for mental health last Friday"],
    ),
    ("I'm a nurse and I live in Lisbon.", ["Caroline is a nurse", "Caroline lives in Lisbon"]),
    ("I'm learning German now.", ["Caroline is learning German"]),
    ("Meet my puppy, Toby!", ["Toby is Caroline's puppy"]),
    ("My dogs Luna and Oliver love the park.", ["Luna and Oliver are Caroline's dogs"]),
    ("I have celiac disease.", ["Caroline has celiac disease"]),
    ("I’m Portuguese.", ["Caroline is Portuguese"]),
]


@pytest.mark.parametrize(("text", "expected"), EXTRACTION_CASES, ids=[c[0][:40] for c in EXTRACTION_CASES])
async def test_extracts_standalone_third_person_facts(text: str, expected: list[str]) -> None:
    assert await extract(("user", "Caroline", text)) == expected


NEGATIVE_CASES = [
    "Are you vegetarian?",
    "Do you live in Lisbon",
    "What's your email?",
    "Is my email caro@example.com?",
    "If I were a nurse I'd be happier.",
    "I wish I lived in Paris.",
    "I would love to visit Japan.",
    "Maybe I'll move to Berlin next year.",
    "I think I'm allergic to cats.",
    "I'm good, thanks!",
    "I'm so excited!",
    "I love it!",
    "I love your painting!",
    "I'm a bit tired today.",
    "I'm going to bed.",
    "I'm working in the garden.",
    "The photo I took last week is my favorite.",
    "Hey Mel! Good to see you! How have you been?",
    "Thanks, I'm really grateful for your help.",
    "I'm a huge fan.",
    "I'm creating a library for when I have kids.",
    "Now I'm gonna order some sushi for tonight.",
]


@pytest.mark.parametrize("text", NEGATIVE_CASES)
async def test_extracts_nothing_from_questions_hypotheticals_and_small_talk(text: str) -> None:
    assert await extract(("user", "Caroline", text)) == []


async def test_assistant_self_actions_are_never_facts_but_reported_user_facts_are() -> None:
    facts = await extract(
        ("user", "Sam", "Can you set a reminder?"),
        (
            "assistant",
            "Gaia",
            "I've created the task. I took a screenshot. I'm an AI assistant and I love helping. "
            "You mentioned you're allergic to shellfish, so I skipped the paella.",
        ),
    )
    assert facts == ["Sam is allergic to shellfish"]


async def test_assistant_turn_without_a_user_name_names_the_user_generically() -> None:
    facts = await extract(("assistant", "Gaia", "Since you live in Porto, I picked a local venue."))
    assert facts == ["The user lives in Porto"]


async def test_unknown_speaker_uses_user_name_then_the_user() -> None:
    assert await extract(("user", "user", "I'm vegan."), user_name="Itay") == ["Itay is vegan"]
    assert await extract(("user", "user", "I'm vegan.")) == ["The user is vegan"]
    assert await extract(("user", "user", "Grace is my girlfriend.")) == ["Grace is the user's girlfriend"]


async def test_a_name_the_user_gives_names_their_other_facts() -> None:
    facts = await extract(("user", "user", "I'm vegetarian. Hi, my name is Sam. I live in Lisbon."))
    assert facts == ["Sam is vegetarian", "The user's name is Sam", "Sam lives in Lisbon"]


async def test_a_speaker_naming_themselves_by_their_known_name_adds_nothing() -> None:
    assert await extract(("user", "Sam", "Hi! I'm Sam. I'm vegetarian.")) == ["Sam is vegetarian"]
    assert await extract(("user", "user", "My name is Sam."), user_name="Sam") == []


async def test_relative_dates_are_anchored_to_the_turn_date() -> None:
    conv = [
        Turn(
            role="user",
            author="Tim",
            text="I'm hoping to attend a book conference next month.",
            at=datetime(2023, 5, 8),
        )
    ]
    out = await OfflineModel().extract_facts(ExtractionInput(conversation=conv, instructions=""))
    assert [f.content for f in out.facts] == [
        "Tim is hoping to attend a book conference next month (said on 8 May 2023)"
    ]


async def test_several_sentences_and_speakers_are_deduplicated_within_the_batch() -> None:
    facts = await extract(
        ("user", "Caroline", "I'm vegetarian. I'm vegetarian!"),
        ("user", "Melanie", "I'm vegetarian too. I live in Lisbon, Portugal."),
        ("user", "Melanie", "I live in Lisbon."),
    )
    assert facts == ["Caroline is vegetarian", "Melanie is vegetarian", "Melanie lives in Lisbon, Portugal"]


async def test_scopes_follow_the_session_kind() -> None:
    conv = [Turn(role="user", author="Sam", text="I'm vegan. My email is sam@x.io.")]
    model = OfflineModel()
    group = await model.extract_facts(ExtractionInput(conversation=conv, instructions="", allow_user_scope=False))
    assert {f.scope for f in group.facts} == {"agent"} and len(group.facts) == 2
    single = await model.extract_facts(ExtractionInput(conversation=conv, instructions=""))
    assert {f.scope for f in single.facts} == {"user"}
    none = await model.extract_facts(
        ExtractionInput(conversation=conv, instructions="", allow_user_scope=False, allow_agent_scope=False)
    )
    assert none.facts == []


async def test_instructions_can_rule_out_categories() -> None:
    conv = [Turn(role="user", author="Sam", text="I'm vegan. My email is sam@x.io. I live in Oslo.")]
    out = await OfflineModel().extract_facts(
        ExtractionInput(conversation=conv, instructions="Do not extract contact details or health information.")
    )
    assert [f.content for f in out.facts] == ["Sam lives in Oslo"]


async def test_facts_respect_the_word_cap() -> None:
    long_value = ", ".join(f"topic number {i}" for i in range(20))
    texts = [
        f"I'm planning to study {long_value} in October.",
        f"My address is {long_value}.",
        "I love " + " ".join(["really"] * 10) + " long walks on the beach with friends, family, dogs and cats, "
        "and everyone else who wants to come along for the ride.",
    ]
    for text in texts:
        for fact in await extract(("user", "Bartholomew Maximilian", text)):
            assert word_count(fact) <= MAX_FACT_WORDS, fact


# --------------------------------------------------------------------------- dedup


def item(index: int, content: str, *cands: tuple[str, str], similarity: float = 0.8) -> DedupItem:
    return DedupItem(
        index=index,
        content=content,
        candidates=[ExistingFact(id=i, content=c, similarity=similarity) for i, c in cands],
    )


DEDUP_CASES = [
    (item(0, "Caroline is vegetarian.", ("f1", "caroline is  Vegetarian")), "NONE", "f1"),
    (item(0, "Caroline's email is new@b.com", ("f1", "Caroline's email is old@b.com")), "UPDATE", "f1"),
    (item(0, "Caroline lives in Berlin", ("f1", "Caroline lives in Lisbon")), "UPDATE", "f1"),
    (item(0, "Caroline moved to Berlin in 2021", ("f1", "Caroline lives in Lisbon")), "UPDATE", "f1"),
    (item(0, "Caroline is vegan", ("f1", "Caroline is vegetarian")), "UPDATE", "f1"),
    (item(0, "Caroline is 35 years old", ("f1", "Caroline is 34 years old")), "UPDATE", "f1"),
    (item(0, "Caroline's favorite band is Muse", ("f1", "Caroline's favorite band is Radiohead")), "UPDATE", "f1"),
    (item(0, "Caroline is not vegetarian", ("f1", "Caroline is vegetarian")), "DELETE", "f1"),
    (item(0, "Caroline hates pizza", ("f1", "Caroline loves pizza")), "DELETE", "f1"),
    (item(0, "Caroline loves pizza", ("f1", "Caroline dislikes pizza")), "DELETE", "f1"),
    (item(0, "Caroline does not have a dog", ("f1", "Caroline has a dog named Rex")), "DELETE", "f1"),
    (item(0, "Caroline lives in Lisbon", ("f1", "Caroline lives in Lisbon, Portugal")), "NONE", "f1"),
    (item(0, "Caroline plays chess", ("f1", "Caroline plays chess every Sunday")), "NONE", "f1"),
    (item(0, "Caroline plays chess", ("f1", "Caroline lives in Lisbon")), "ADD", None),
    (item(0, "Caroline loves jazz", ("f1", "Caroline loves pizza")), "ADD", None),
    (item(0, "Caroline's sister is named Maria", ("f1", "Caroline's sister is named Ana")), "ADD", None),
    (item(0, "Caroline speaks French", ("f1", "Caroline speaks Portuguese")), "ADD", None),
    # Token containment means "adds nothing", even across relations: a known, documented limit.
    (item(0, "Caroline is vegetarian", ("f1", "Caroline cooks vegetarian food")), "NONE", "f1"),
    (item(0, "Something new entirely", ("f1", "Unrelated"), similarity=0.96), "NONE", "f1"),
    (item(0, "Caroline is vegan"), "ADD", None),
]


@pytest.mark.parametrize(("it", "event", "fact_id"), DEDUP_CASES, ids=[c[0].content for c in DEDUP_CASES])
async def test_dedup_decisions(it: DedupItem, event: str, fact_id: str | None) -> None:
    out = await OfflineModel().decide(DedupInput(items=[it]))
    [d] = out.decisions
    assert (d.index, d.event, d.fact_id) == (it.index, event, fact_id)
    if event == "UPDATE":
        assert d.text == it.content


async def test_dedup_gives_one_decision_per_item_and_only_known_ids() -> None:
    items = [
        item(3, "Sam lives in Oslo", ("a", "Sam lives in Bergen"), ("b", "Sam lives in Oslo")),
        item(7, "Sam is vegan", ("c", "Sam is not vegan")),
        item(9, "Sam likes sailing"),
        item(11, "Sam's email is s@x.io", ("d", "Sam's phone number is 123456")),
    ]
    out = await OfflineModel().decide(DedupInput(items=items))
    assert [d.index for d in out.decisions] == [3, 7, 9, 11]
    for it, d in zip(items, out.decisions, strict=True):
        assert d.fact_id is None or d.fact_id in {c.id for c in it.candidates}
    assert [(d.event, d.fact_id) for d in out.decisions] == [
        ("DELETE", "a"),  # Oslo said again: the duplicate stays, the Bergen it contradicts goes
        ("DELETE", "c"),
        ("ADD", None),
        ("ADD", None),
    ]


# --------------------------------------------------------------------------- reflections


def conversation() -> list[Turn]:
    return [
        Turn(role="user", author="Sam", text="Hi! I need help debugging the login error in my Flask app."),
        Turn(role="user", author="Sam", text="Please be concise and don't use emojis."),
        Turn(role="assistant", author="Gaia", text="Sure. Can you share the traceback? I've opened a ticket."),
        Turn(role="user", author="Sam", text="It fails with a 401 when the token expires. We launched v2.1 last week."),
        Turn(role="user", author="Sam", text="Let's go with refreshing the token on every request."),
        Turn(role="user", author="Sam", text="I'm really interested in Rust these days."),
    ]


async def test_reflections_follow_the_hierarchy_without_repetition() -> None:
    out = await OfflineModel().reflect(
        ReflectionInput(
            conversation=conversation(),
            new_facts=[],
            user=ScopeMemory(),
            agent=ScopeMemory(),
            user_name="Sam",
        )
    )
    assert out.agent == ["Sam said: We launched v2.1 last week."]
    assert out.user == [
        "Sam asked: Please be concise and don't use emojis.",
        "Sam said: I'm really interested in Rust these days.",
    ]
    assert out.session == [
        "Sam said: I need help debugging the login error in my Flask app.",
        "Sam said: It fails with a 401 when the token expires.",
        "Sam said: Let's go with refreshing the token on every request.",
    ]
    everything = [*out.agent, *out.user, *out.session]
    assert len(everything) == len(set(everything))
    assert all(word_count(r) <= MAX_REFLECTION_WORDS for r in everything)


async def test_reflections_skip_what_memory_and_new_facts_already_hold() -> None:
    out = await OfflineModel().reflect(
        ReflectionInput(
            conversation=conversation(),
            new_facts=["Sam is interested in Rust"],
            user=ScopeMemory(consolidated="VERSION: 1\n[PREFERENCES]\n- Sam asked: please be concise, no emojis"),
            session=ScopeMemory(recent=["Sam needs help debugging the Flask login error"]),
        )
    )
    assert out.agent == []  # agent reflections disabled
    assert out.user == []
    assert all("Flask" not in r for r in out.session)
    assert out.session and len(out.session) <= 3


async def test_user_reflections_only_when_enabled_and_session_always() -> None:
    out = await OfflineModel().reflect(ReflectionInput(conversation=conversation(), new_facts=[]))
    assert out.user == [] and out.agent == []
    assert 1 <= len(out.session) <= 3


async def test_reflections_are_capped_and_empty_conversation_gives_nothing() -> None:
    long = "I need " + " ".join(f"thing{i}" for i in range(60)) + "."
    out = await OfflineModel().reflect(
        ReflectionInput(conversation=[Turn(role="user", author="Sam", text=long)], new_facts=[], user=ScopeMemory())
    )
    assert out.session and all(word_count(r) <= MAX_REFLECTION_WORDS for r in out.session)
    empty = await OfflineModel().reflect(ReflectionInput(conversation=[], new_facts=[]))
    assert (empty.agent, empty.user, empty.session) == ([], [], [])


# --------------------------------------------------------------------------- consolidation


async def test_consolidation_keeps_sections_and_newer_wins() -> None:
    current = (
        "VERSION: 2\n[PREFERENCES]\n- Prefers concise responses\n- Sam lives in Bergen\n[PROJECTS]\n- Mars Festival"
    )
    out = await OfflineModel().consolidate(
        ConsolidationInput(
            scope="user",
            current=current,
            version=3,
            reflections=["Prefers concise responses", "Sam lives in Oslo", "Project deadline moved to June"],
            word_limit=300,
        )
    )
    assert out == (
        "VERSION: 3\n[PREFERENCES]\n- Prefers concise responses\n[PROJECTS]\n- Mars Festival\n"
        "- Project deadline moved to June\n[RECENT]\n- Sam lives in Oslo"
    )


async def test_consolidation_drops_oldest_first_and_starts_flat() -> None:
    out = await OfflineModel().consolidate(
        ConsolidationInput(
            scope="session", current="", version=1, reflections=["one two three", "four five"], word_limit=5
        )
    )
    assert out == "VERSION: 1\n- four five"


_WORD = st.text(alphabet="abcdefghij", min_size=1, max_size=6)
_LINE = st.lists(_WORD, min_size=1, max_size=12).map(" ".join)


@st.composite
def blobs(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return ""
    lines = [f"VERSION: {draw(st.integers(0, 9))}"]
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            lines.append(f"[{draw(_WORD).upper()}]")
        lines.extend(f"- {x}" for x in draw(st.lists(_LINE, max_size=4)))
    return "\n".join(lines)


@settings(max_examples=150, deadline=None)
@given(
    current=blobs(),
    reflections=st.lists(st.one_of(_LINE, st.text(max_size=80)), max_size=8),
    limit=st.integers(2, 120),
    version=st.integers(1, 50),
)
async def test_consolidation_invariants(current: str, reflections: list[str], limit: int, version: int) -> None:
    out = await OfflineModel().consolidate(
        ConsolidationInput(scope="user", current=current, version=version, reflections=reflections, word_limit=limit)
    )
    lines = out.split("\n")
    assert lines[0] == f"VERSION: {version}"
    assert word_count(out) <= limit
    sources = [current, *reflections]
    for line in lines[1:]:
        if re.fullmatch(r"\[[^\[\]]+\]", line):
            assert line == "[RECENT]" or line in current
            continue
        text = line[2:] if line.startswith("- ") else line
        assert text.strip() and any(text in s for s in sources), line


# --------------------------------------------------------------------------- profile


async def test_profile_orders_by_importance_and_respects_the_limit() -> None:
    facts = [  # newest first
        "Sam went to Paris last week",
        "Sam loves hiking",
        "Sam's email is s@x.com",
        "Sam is vegetarian",
        "Sam lives in Berlin",
        "Sam lives in Lisbon",
        "Sam is planning to run a marathon in October",
        "Sam is 34 years old",
        "Sam works at Acme",
        "Grace is Sam's girlfriend",
        "Sam's name is Samuel",
        "Sam is vegetarian.",
        "Sam loves hiking in the Alps",
    ]
    model = OfflineModel()
    out = await model.distill_profile(ProfileInput(facts=facts, items=["Flask login bug"], limit=20))
    assert out.bullets == [
        "Sam's name is Samuel",
        "Sam is 34 years old",
        "Sam lives in Berlin",
        "Sam works at Acme",
        "Grace is Sam's girlfriend",
        "Sam's email is s@x.com",
        "Sam is vegetarian",
        "Sam is planning to run a marathon in October",
        "Sam loves hiking in the Alps",
        "Working on: Flask login bug",
        "Sam went to Paris last week",
    ]
    short = await model.distill_profile(ProfileInput(facts=facts, items=["Flask login bug"], limit=3))
    assert short.bullets == out.bullets[:3]
    empty = await model.distill_profile(ProfileInput(facts=[], items=[]))
    assert empty.bullets == []
    only_items = await model.distill_profile(ProfileInput(facts=[], items=["Budget review", "Budget review"]))
    assert only_items.bullets == ["Working on: Budget review"]


# --------------------------------------------------------------------------- the contract


async def test_meter_counts_one_call_per_method_and_protocol_holds() -> None:
    meter = UsageMeter()
    model = OfflineModel(meter)
    assert isinstance(model, FormationModel) and model.name == "offline" and model.meter is meter
    await model.extract_facts(ExtractionInput(conversation=conversation(), instructions=""))
    await model.decide(DedupInput(items=[item(0, "Sam is vegan", ("a", "Sam is vegan"))]))
    await model.reflect(ReflectionInput(conversation=conversation(), new_facts=[]))
    await model.consolidate(
        ConsolidationInput(scope="session", current="", version=1, reflections=["x"], word_limit=50)
    )
    await model.distill_profile(ProfileInput(facts=["Sam is vegan"]))
    await model.aclose()
    snap = meter.snapshot()
    assert set(snap) == {"extract", "dedup", "reflect", "consolidate", "profile"}
    assert all(v["calls"] == 1 and v["prompt_tokens"] > 0 and v["completion_tokens"] > 0 for v in snap.values())
    assert meter.by_model["offline"].calls == 5
    assert OfflineModel().meter is not OfflineModel().meter


async def test_extracted_facts_name_the_turns_they_came_from() -> None:
    """The offline extractor cites its source turns (the pipeline then has nothing to guess on the loop)."""
    conv = [
        Turn(role="user", author="Sam", text="Hi there."),
        Turn(role="assistant", author="bot", text="Hello!"),
        Turn(role="user", author="Sam", text="I'm vegetarian."),
        Turn(role="user", author="Sam", text="I live in Lisbon."),
        Turn(role="user", author="Sam", text="As I said, I'm vegetarian."),
    ]
    out = await OfflineModel().extract_facts(ExtractionInput(conversation=conv, instructions=""))
    assert {f.content: f.sources for f in out.facts} == {"Sam is vegetarian": [2, 4], "Sam lives in Lisbon": [3]}
