"""The prompted formation model: lenient JSON parsing, the one corrective retry, prompts, ScriptedLLM."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from pydantic import BaseModel, ValidationError

from memlane.errors import LLMError, OutputParseError
from memlane.formation.model import FormationModel
from memlane.formation.prompted import PromptedModel, trim_to_words, with_header
from memlane.formation.prompts import DEFAULT_EXTRACTION_INSTRUCTIONS, format_turn, render_conversation
from memlane.formation.schemas import (
    ConsolidationInput,
    DedupInput,
    DedupItem,
    DedupOutput,
    ExistingFact,
    ExtractionInput,
    ExtractionOutput,
    ProfileInput,
    ReflectionInput,
    ReflectionOutput,
    ScopeMemory,
    Turn,
    word_count,
)
from memlane.providers.llm.base import LLM, ChatMessage, UsageMeter
from memlane.providers.llm.parsing import extract_json, generate, parse_output
from memlane.testing import ScriptedLLM

CONVO = [
    Turn(role="user", author="Caroline", text="My sister Maya moved to Lisbon.", at=datetime(2024, 5, 3, 14, 5)),
    Turn(role="assistant", author="Helper", text="I created a reminder for you.", at=datetime(2024, 5, 3, 14, 6)),
    Turn(role="user", author="Caroline", text="Thanks!"),
]


def _all_text(llm: ScriptedLLM, call: int = -1) -> str:
    return "\n".join(m["content"] for m in llm.calls[call]["messages"])


def _words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)


# --------------------------------------------------------------------------- extract_json


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("[1, 2]", [1, 2]),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ('Sure! Here it is:\n```json\n{"a": 1}\n```\nHope that helps.', {"a": 1}),
        ('<think>The user wants {"a": 0}. Let me answer.</think>\n{"a": 1}', {"a": 1}),
        ('<THINK>\nhmm [x]\n</THINK>{"a": 1}', {"a": 1}),
        ('Reasoning without an opening tag.</think>{"a": 1}', {"a": 1}),
        ('<think>still thinking, maybe {"a": 0} ... final answer:\n{"a": 1}', {"a": 1}),
        ('Here are the facts: {"facts": []} -- done.', {"facts": []}),
        ('The answer [1] is below.\n{"facts": [{"content": "x"}]}\nThat is all.', {"facts": [{"content": "x"}]}),
        ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
        ('{"a": "keeps, commas,] and } braces in strings",}', {"a": "keeps, commas,] and } braces in strings"}),
        ('{"a": "escaped \\" quote", "b": 2}', {"a": 'escaped " quote', "b": 2}),
        ("{not json} but then [3, 4]", [3, 4]),
    ],
)
def test_extract_json_is_lenient(text: str, expected: object) -> None:
    assert extract_json(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("no json here at all", "no JSON"),
        ("{not: json}", "no JSON"),
        ('{"a": [1, 2', "incomplete"),
        ("<think>only reasoning</think>", "reasoning"),
        ("42", "no JSON"),
    ],
)
def test_extract_json_rejects_garbage(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        extract_json(text)


# --------------------------------------------------------------------------- parse_output


class Pair(BaseModel):
    a: int
    b: str = "x"


class OneStr(BaseModel):
    text: str


def test_parse_output_wraps_bare_array_for_one_list_field() -> None:
    out = parse_output('[{"content": "Ann lives in Oslo"}]', ExtractionOutput)
    assert [f.content for f in out.facts] == ["Ann lives in Oslo"]
    assert out.facts[0].scope == "user"


def test_parse_output_unwraps_one_extra_level() -> None:
    assert parse_output('{"result": {"a": 1, "b": "y"}}', Pair) == Pair(a=1, b="y")
    out = parse_output('{"output": {"facts": [{"content": "c", "scope": "agent"}]}}', ExtractionOutput)
    assert out.facts[0].scope == "agent"
    assert parse_output('{"memories": [{"content": "c"}]}', ExtractionOutput).facts[0].content == "c"
    assert parse_output('{"document": "VERSION: 2"}', OneStr).text == "VERSION: 2"  # one-field model: renamed


def test_parse_output_takes_a_lone_item_for_the_list() -> None:
    out = parse_output('{"index": 0, "event": "NONE", "fact_id": "f1"}', DedupOutput)
    assert [(d.index, d.event, d.fact_id) for d in out.decisions] == [(0, "NONE", "f1")]
    out2 = parse_output('{"fact": {"content": "Ann lives in Oslo", "scope": "agent"}}', ExtractionOutput)
    assert [(f.content, f.scope) for f in out2.facts] == [("Ann lives in Oslo", "agent")]


def test_parse_output_rejects_objects_without_any_expected_field() -> None:
    with pytest.raises(ValueError, match="expected a JSON object with facts"):
        parse_output('{"answer": "none", "notes": []}', ExtractionOutput)
    with pytest.raises(ValueError, match="expected a JSON object with a, b"):
        parse_output('{"result": {"x": 1}}', Pair)
    assert parse_output("{}", ExtractionOutput).facts == []  # an empty object is the all-defaults answer


def test_parse_output_does_not_unwrap_known_fields() -> None:
    out = parse_output('{"facts": []}', ExtractionOutput)
    assert out.facts == []
    with pytest.raises(ValidationError):
        parse_output('{"a": {"b": 1}}', Pair)


def test_parse_output_raises_validation_error_and_value_error() -> None:
    with pytest.raises(ValidationError):
        parse_output('{"a": "not a number"}', Pair)
    with pytest.raises(ValidationError):
        parse_output('[{"a": 1}]', Pair)  # no list field: a bare array is not wrapped
    with pytest.raises(ValueError, match="no JSON"):
        parse_output("sorry, I cannot help with that", Pair)


# --------------------------------------------------------------------------- generate


async def test_generate_parses_and_meters_one_call() -> None:
    llm = ScriptedLLM(['```json\n{"a": 3}\n```'])
    meter = UsageMeter()
    out = await generate(llm, [ChatMessage(role="user", content="give a")], Pair, task="t", meter=meter)
    assert out == Pair(a=3)
    assert len(llm.calls) == 1
    assert llm.calls[0]["schema"] == Pair.model_json_schema()
    assert llm.calls[0]["schema_name"] == "Pair"
    assert meter.snapshot()["t"]["calls"] == 1
    assert meter.by_model["scripted:test"].prompt_tokens > 0


async def test_generate_makes_one_corrective_retry() -> None:
    llm = ScriptedLLM(['{"a": "three"}', '{"a": 3}'])
    meter = UsageMeter()
    out = await generate(llm, [ChatMessage(role="user", content="give a")], Pair, task="t", meter=meter)
    assert out == Pair(a=3)
    assert len(llm.calls) == 2
    retry = llm.calls[1]["messages"]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"]
    assert retry[1]["content"] == '{"a": "three"}'
    assert "a: Input should be a valid integer" in retry[2]["content"]
    assert '"properties"' in retry[2]["content"]  # the schema is quoted
    assert meter.snapshot()["t"]["calls"] == 2


async def test_generate_gives_up_after_the_retry() -> None:
    llm = ScriptedLLM(["not json", "still not json", '{"a": 1}'])
    meter = UsageMeter()
    with pytest.raises(OutputParseError, match=r"scripted:test: t output was not valid") as err:
        await generate(llm, [ChatMessage(role="user", content="q")], Pair, task="t", meter=meter)
    assert err.value.raw == "still not json"
    assert err.value.retryable
    assert "no JSON" in llm.calls[1]["messages"][-1]["content"]
    assert len(llm.calls) == 2 and llm.pending == 1
    assert meter.snapshot()["t"]["calls"] == 2
    assert meter.total.calls == 2


async def test_generate_echoes_an_empty_answer_as_a_placeholder() -> None:
    llm = ScriptedLLM(["", '{"a": 1}'])
    assert await generate(llm, [ChatMessage(role="user", content="q")], Pair, task="t", meter=None) == Pair(a=1)
    assert llm.calls[1]["messages"][1] == {"role": "assistant", "content": "(empty answer)"}
    assert "empty output" in llm.calls[1]["messages"][2]["content"]


async def test_generate_propagates_provider_errors_unchanged() -> None:
    boom = LLMError("rate limited", status_code=429, retryable=True)
    llm = ScriptedLLM([boom])
    meter = UsageMeter()
    with pytest.raises(LLMError) as err:
        await generate(llm, [ChatMessage(role="user", content="q")], Pair, task="t", meter=meter)
    assert err.value is boom
    assert meter.snapshot() == {}
    # an error on the corrective retry propagates too
    llm.push("garbage", boom)
    with pytest.raises(LLMError) as err2:
        await generate(llm, [ChatMessage(role="user", content="q")], Pair, task="t", meter=meter)
    assert err2.value is boom and not isinstance(err2.value, OutputParseError)


async def test_generate_passes_sampling_options() -> None:
    llm = ScriptedLLM(['{"a": 1}'])
    await generate(
        llm, [ChatMessage(role="user", content="q")], Pair, task="t", meter=None, temperature=0.7, max_tokens=99
    )
    assert (llm.calls[0]["temperature"], llm.calls[0]["max_tokens"]) == (0.7, 99)


# --------------------------------------------------------------------------- ScriptedLLM


async def test_scripted_llm_behaviour() -> None:
    llm = ScriptedLLM(["one", ValueError("injected")], name="scripted:x")
    assert isinstance(llm, LLM)
    msgs = [ChatMessage(role="system", content="sys"), ChatMessage(role="user", content="hello")]
    first = await llm.complete(msgs, schema={"type": "object"}, schema_name="S")
    assert (first.text, first.model, first.usage.calls) == ("one", "scripted:x", 1)
    assert first.usage.prompt_tokens == 1 + 2 and first.usage.completion_tokens == 1
    with pytest.raises(ValueError, match="injected"):
        await llm.complete(msgs)
    llm.push(lambda m: f"{len(m)} messages, last: {m[-1]['content']}")
    assert (await llm.complete(msgs)).text == "2 messages, last: hello"
    with pytest.raises(AssertionError, match="no response queued"):
        await llm.complete(msgs)
    assert len(llm.calls) == 4  # failing calls are recorded too
    assert llm.calls[0] == {
        "messages": msgs,
        "schema": {"type": "object"},
        "schema_name": "S",
        "temperature": 0.0,
        "max_tokens": None,
    }
    assert llm.calls[0]["messages"] is not msgs
    llm.reset()
    assert llm.calls == [] and llm.pending == 0
    await llm.aclose()
    await llm.aclose()
    assert llm.closed


async def test_scripted_llm_default() -> None:
    llm = ScriptedLLM(default="{}")
    llm.push("queued")
    assert (await llm.complete([ChatMessage(role="user", content="q")])).text == "queued"
    assert (await llm.complete([ChatMessage(role="user", content="q")])).text == "{}"
    assert (await llm.complete([ChatMessage(role="user", content="q")])).text == "{}"


# --------------------------------------------------------------------------- prompts


def test_conversation_rendering() -> None:
    assert format_turn(CONVO[0]) == "[2024-05-03 14:05] Caroline (user): My sister Maya moved to Lisbon."
    assert format_turn(CONVO[2]) == "Caroline (user): Thanks!"
    multi = Turn(role="assistant", author="Helper", text="line one\nline two")
    assert format_turn(multi) == "Helper (assistant): line one\n    line two"
    assert render_conversation(CONVO).count("\n") == 2
    assert render_conversation([]) == "(no messages)"


# --------------------------------------------------------------------------- PromptedModel


def _extraction(**kw: object) -> ExtractionInput:
    base: dict[str, object] = {
        "conversation": CONVO,
        "instructions": "Keep pet names.",
        "user_name": "Caroline",
        "agent_name": "Helper",
    }
    base.update(kw)
    return ExtractionInput.model_validate(base)


async def test_prompted_model_is_a_formation_model() -> None:
    llm = ScriptedLLM(name="scripted:m")
    model = PromptedModel(llm)
    assert isinstance(model, FormationModel)
    assert model.name == "scripted:m"
    assert isinstance(model.meter, UsageMeter)
    await model.aclose()
    assert llm.closed


async def test_extract_facts_prompt_and_output() -> None:
    long_fact = _words(31)
    answer = {
        "facts": [
            {"content": "  Caroline's sister Maya lives in Lisbon.  ", "scope": "user", "sources": [0, 7]},
            {"content": "   ", "scope": "user"},
            {"content": long_fact, "scope": "user"},
            {"content": _words(30), "scope": "agent"},
        ]
    }
    llm = ScriptedLLM([json.dumps(answer)])
    meter = UsageMeter()
    out = await PromptedModel(llm, meter=meter).extract_facts(_extraction())
    assert [(f.content, f.scope) for f in out.facts] == [
        ("Caroline's sister Maya lives in Lisbon.", "user"),
        (_words(30), "agent"),
    ]
    assert out.facts[0].sources == [0]  # the cited message kept, an out-of-range number dropped
    prompt = _all_text(llm)
    system, user = llm.calls[0]["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    assert "Keep pet names." in system["content"]
    assert "#0 [2024-05-03 14:05] Caroline (user): My sister Maya moved to Lisbon." in user["content"]
    assert "#1 [2024-05-03 14:06] Helper (assistant): I created a reminder for you." in user["content"]
    assert "\n#2 Caroline (user): Thanks!" in user["content"]
    for needle in (
        "Searchable",
        "Specific",
        "at least a month",
        "Cold-storage",
        "30 words",
        "only describes what the assistant did",
        "pronouns",
        '"agent"',
    ):
        assert needle in prompt, needle
    assert llm.calls[0]["schema_name"] == "ExtractionOutput"
    assert meter.snapshot()["extract"]["calls"] == 1


async def test_extract_facts_default_instructions_and_group_scope() -> None:
    llm = ScriptedLLM(
        [
            '{"facts": [{"content": "Bob lives in Oslo", "scope": "user"}, {"content": "Ann owns a cat"'
            ', "scope": "agent"}]}'
        ]
    )
    out = await PromptedModel(llm).extract_facts(_extraction(instructions="  ", allow_user_scope=False))
    assert [f.content for f in out.facts] == ["Ann owns a cat"]  # user scope is not allowed in a group
    system = llm.calls[0]["messages"][0]["content"]
    assert DEFAULT_EXTRACTION_INSTRUCTIONS in system
    assert 'use scope "agent" for EVERY fact' in system


async def test_extract_facts_bare_array_and_empty() -> None:
    llm = ScriptedLLM(['[{"content": "Ann lives in Oslo"}]', '```json\n{"facts": []}\n```'])
    model = PromptedModel(llm)
    assert [f.content for f in (await model.extract_facts(_extraction())).facts] == ["Ann lives in Oslo"]
    assert (await model.extract_facts(_extraction())).facts == []


async def test_decide_prompt_and_output() -> None:
    inp = DedupInput(
        items=[
            DedupItem(
                index=0,
                content="Caroline lives in Lisbon",
                candidates=[ExistingFact(id="fact-123", content="Caroline lives in Porto", similarity=0.84)],
            ),
            DedupItem(index=1, content="Maya is a nurse", candidates=[]),
            DedupItem(index=2, content="Ann's email is a@b.c", candidates=[ExistingFact(id="fact-9", content="x")]),
        ]
    )
    answer = (
        '{"decisions": [{"index": 0, "event": "DELETE", "fact_id": " fact-123 "}, {"index": 1, "event": "ADD",'
        ' "fact_id": "", "text": "  "}, {"index": 2, "event": "UPDATE", "fact_id": "fact-9", "text": " merged "}]}'
    )
    llm = ScriptedLLM([answer])
    meter = UsageMeter()
    out = await PromptedModel(llm, meter=meter).decide(inp)
    assert isinstance(out, DedupOutput)
    assert [(d.index, d.event, d.fact_id, d.text) for d in out.decisions] == [
        (0, "DELETE", "fact-123", None),
        (1, "ADD", None, None),
        (2, "UPDATE", "fact-9", "merged"),
    ]
    prompt = _all_text(llm)
    assert "[0] NEW: Caroline lives in Lisbon" in prompt
    assert "id=fact-123 (similarity 0.84): Caroline lives in Porto" in prompt
    assert "id=fact-9 (keyword match): x" in prompt
    assert "candidates: none" in prompt
    assert "NONE, never DELETE" in prompt
    for event in ("ADD", "UPDATE", "DELETE", "NONE"):
        assert f"- {event}:" in prompt
    assert meter.snapshot()["dedup"]["calls"] == 1


async def test_reflect_prompt_and_output() -> None:
    inp = ReflectionInput(
        conversation=CONVO,
        new_facts=["Caroline's sister Maya lives in Lisbon"],
        agent=ScopeMemory(consolidated="VERSION: 3\n[CURRENT PROJECTS]\n- Mars Festival", recent=["Phase 2 began"]),
        user=ScopeMemory(consolidated="VERSION: 1\n[PREFERENCES]\n- Caroline likes short answers"),
        session=ScopeMemory(recent=["Goal: plan a trip"]),
        user_name="Caroline",
    )
    answer = {
        "agent": ["Mars Festival needs a Lisbon venue"],
        "user": ["  Caroline wants reminders for family events ", "", _words(36)],
        "session": [_words(35)],
    }
    llm = ScriptedLLM([json.dumps(answer)])
    meter = UsageMeter()
    out = await PromptedModel(llm, meter=meter).reflect(inp)
    assert out == ReflectionOutput(
        agent=["Mars Festival needs a Lisbon venue"],
        user=["Caroline wants reminders for family events"],
        session=[_words(35)],
    )
    prompt = _all_text(llm)
    for needle in (
        "[CURRENT PROJECTS]",
        "- Phase 2 began",
        "Caroline likes short answers",
        "- Goal: plan a trip",
        "- Caroline's sister Maya lives in Lisbon",
        "Caroline (user): Thanks!",
        "35 words",
        "agent (broadest",
    ):
        assert needle in prompt, needle
    assert 'leave "agent" empty' not in prompt and 'leave "user" empty' not in prompt
    assert "disabled" not in prompt
    assert meter.snapshot()["reflect"]["calls"] == 1


async def test_reflect_disabled_levels_say_leave_empty_and_are_emptied() -> None:
    inp = ReflectionInput(conversation=CONVO, new_facts=[], agent=None, user=None)
    llm = ScriptedLLM(['{"agent": ["leak"], "user": ["leak"], "session": ["Goal: a trip"]}'])
    out = await PromptedModel(llm).reflect(inp)
    assert out == ReflectionOutput(agent=[], user=[], session=["Goal: a trip"])
    system = llm.calls[0]["messages"][0]["content"]
    assert 'leave "agent" empty' in system
    assert 'leave "user" empty' in system
    assert "(disabled: leave this level empty)" in llm.calls[0]["messages"][1]["content"]


async def test_consolidate_prompt_and_header() -> None:
    inp = ConsolidationInput(
        scope="user",
        current="VERSION: 2\n[PREFERENCES]\n- Likes tea",
        version=3,
        reflections=["Switched to coffee", "Wants short answers"],
        word_limit=300,
    )
    llm = ScriptedLLM(
        [
            '{"content": "[PREFERENCES]\\n- Likes coffee\\n- Wants short answers"}',
            '{"content": "VERSION: 9\\n[PREFERENCES]\\n- Likes coffee"}',
            '{"content": "VERSION: 3\\n[PREFERENCES]\\n- Likes coffee"}',
        ]
    )
    meter = UsageMeter()
    model = PromptedModel(llm, meter=meter)
    assert await model.consolidate(inp) == "VERSION: 3\n[PREFERENCES]\n- Likes coffee\n- Wants short answers"
    assert await model.consolidate(inp) == "VERSION: 3\n[PREFERENCES]\n- Likes coffee"  # a wrong number is fixed
    assert await model.consolidate(inp) == "VERSION: 3\n[PREFERENCES]\n- Likes coffee"
    prompt = _all_text(llm, 0)
    for needle in (
        "VERSION: 2\n[PREFERENCES]\n- Likes tea",
        "- Switched to coffee",
        "VERSION: 3",
        "300 words",
        "[SECTION NAME]",
        "new information wins",
        "Never invent",
        "Garbage-collect",
    ):
        assert needle in prompt, needle
    assert meter.snapshot()["consolidate"]["calls"] == 3


async def test_consolidate_enforces_the_word_limit() -> None:
    blob = "\n".join(
        [
            "VERSION: 5",
            "[PROJECTS]",
            "- alpha project is on track",
            "- beta project needs review",
            "",
            "[LEARNINGS]",
            "- one two three four",
            "- five six seven eight",
        ]
    )
    llm = ScriptedLLM([json.dumps({"content": blob})] * 2)
    model = PromptedModel(llm)
    # 25 words ("- " counts): the last line of the lowest section goes first
    inp = ConsolidationInput(scope="agent", current="", version=5, reflections=["r"], word_limit=21)
    out = await model.consolidate(inp)
    assert word_count(out) == 20
    assert out == "\n".join(blob.splitlines()[:-1])
    assert "21 words" in _all_text(llm)
    # then the section's other line, and its heading with it; the blank line left at the end goes too
    out = await model.consolidate(inp.model_copy(update={"word_limit": 16}))
    assert out == "VERSION: 5\n[PROJECTS]\n- alpha project is on track\n- beta project needs review"
    assert word_count(out) == 14


@pytest.mark.parametrize("limit", [0, 1, 2, 3, 5, 8, 11, 12, 13, 20, 100])
def test_trim_to_words_never_exceeds_the_limit(limit: int) -> None:
    blob = "VERSION: 2\n[A]\n- a1 a1 a1\n- a2 a2\n[B]\n- b1 b1 b1\n\n[C]\n- c1 c1"
    out = trim_to_words(blob, limit)
    assert word_count(out) <= limit
    if limit >= 2:
        assert out.startswith("VERSION: 2")
    if limit >= word_count(blob):
        assert out == blob
    # whole lines go from the bottom: the kept lines are a prefix of the original ones (but the last may be cut)
    kept = out.splitlines()
    original = blob.splitlines()
    assert all(line in original for line in kept[:-1])
    assert not any(line.startswith("[") and i == len(kept) - 1 for i, line in enumerate(kept))  # no empty heading


def test_trim_to_words_cuts_a_single_long_line_at_words() -> None:
    assert trim_to_words("VERSION: 1\n[A]\n- " + _words(50), 10) == "VERSION: 1\n[A]\n- " + _words(6)
    assert trim_to_words("VERSION: 1\n" + _words(50), 4) == "VERSION: 1\nword word"


def test_with_header() -> None:
    assert with_header("\n\n- a", 2) == "VERSION: 2\n- a"
    assert with_header("**Version: 7**\n- a", 2) == "VERSION: 2\n- a"
    assert with_header("", 1) == "VERSION: 1"


async def test_distill_profile_prompt_and_output() -> None:
    inp = ProfileInput(
        facts=["The user's name is Itay", "Itay watched football on Monday", "Itay watched football on Tuesday"],
        items=["Build the garden shed"],
        limit=2,
        user_name="Itay",
    )
    llm = ScriptedLLM(['{"bullets": ["- The user\'s name is Itay", " ", "Follows football", "Building a shed"]}'])
    meter = UsageMeter()
    out = await PromptedModel(llm, meter=meter).distill_profile(inp)
    assert out.bullets == ["The user's name is Itay", "Follows football"]
    prompt = _all_text(llm)
    for needle in (
        "At most 2 bullets",
        "importance",
        "verbatim",
        "- Build the garden shed",
        "Itay watched football",
        "one line",
    ):
        assert needle in prompt, needle
    assert meter.snapshot()["profile"]["calls"] == 1


async def test_prompted_model_corrective_retry_and_failure() -> None:
    llm = ScriptedLLM(['{"bullets": "not a list"}', '{"bullets": ["ok"]}', "nope", "nope again"])
    meter = UsageMeter()
    model = PromptedModel(llm, meter=meter)
    assert (await model.distill_profile(ProfileInput(facts=["a"]))).bullets == ["ok"]
    assert "bullets" in llm.calls[1]["messages"][-1]["content"]
    with pytest.raises(OutputParseError, match="scripted:test: extract output was not valid"):
        await model.extract_facts(_extraction())
    assert meter.snapshot()["profile"]["calls"] == 2
    assert meter.snapshot()["extract"]["calls"] == 2


async def test_prompted_model_propagates_llm_errors() -> None:
    llm = ScriptedLLM([LLMError("down", status_code=503, retryable=True)])
    with pytest.raises(LLMError, match="down"):
        await PromptedModel(llm).decide(DedupInput(items=[]))


async def test_temperature_is_passed_through() -> None:
    llm = ScriptedLLM(default='{"bullets": []}')
    await PromptedModel(llm, temperature=None).distill_profile(ProfileInput(facts=["a"]))
    assert llm.calls[0]["temperature"] is None
