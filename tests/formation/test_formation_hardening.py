"""Formation hardening found with a tiny local model (SmolLM2-135M behind llama.cpp):

* every formation call carries ``max_tokens``, through each provider (OpenAI-compatible,
  Anthropic, Gemini) — checked on the wire with a loopback server;
* every formation output schema bounds its arrays (``maxItems``), free-text strings
  (``maxLength``) and integers (``maximum``), so schema-constrained decoding always ends;
* the prompt's own example statements are never stored (SmolLM2 answered every chat with
  the extraction example, "Alice's email is alice@example.com").
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from loopback import JsonHandler, Reply, serve
from memlane import AsyncMemory, Event, EventType, FormationConfig
from memlane.errors import ConfigError
from memlane.formation import prompts
from memlane.formation.prompted import DEFAULT_MAX_TOKENS, PromptedModel, consolidation_max_tokens
from memlane.formation.schemas import (
    MAX_FACTS_PER_CALL,
    MAX_REFLECTIONS_PER_LEVEL,
    ConsolidationInput,
    ConsolidationOutput,
    DedupInput,
    DedupItem,
    DedupOutput,
    ExistingFact,
    ExtractionInput,
    ExtractionOutput,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
    ScopeMemory,
    Turn,
)
from memlane.providers.llm.anthropic import AnthropicChat
from memlane.providers.llm.base import LLM
from memlane.providers.llm.gemini import GeminiChat
from memlane.providers.llm.openai import OpenAIChat
from memlane.testing import ScriptedLLM

OUTPUTS: tuple[type[BaseModel], ...] = (
    ExtractionOutput,
    DedupOutput,
    ReflectionOutput,
    ConsolidationOutput,
    ProfileOutput,
)
CONVO = [
    Turn(role="user", author="Sam", text="I'm vegetarian and I live in Lisbon."),
    Turn(role="assistant", author="bot", text="Noted!"),
]
EXAMPLE = "Alice's email is alice@example.com"


# --------------------------------------------------------------------------- schemas


def _unbounded(node: Any, path: str = "$") -> list[str]:
    """Paths of arrays without maxItems, free strings without maxLength, integers without maximum."""
    out: list[str] = []
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "array" and "maxItems" not in node:
            out.append(f"{path} (array without maxItems)")
        if kind == "string" and "maxLength" not in node and "enum" not in node and "const" not in node:
            out.append(f"{path} (string without maxLength)")
        if kind == "integer" and "maximum" not in node:
            out.append(f"{path} (integer without maximum)")
        for key, value in node.items():
            out.extend(_unbounded(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_unbounded(value, f"{path}[{i}]"))
    return out


@pytest.mark.parametrize("model", OUTPUTS, ids=lambda m: m.__name__)
def test_every_formation_schema_is_bounded(model: type[BaseModel]) -> None:
    schema = model.model_json_schema()
    assert _unbounded(schema) == []
    # the walk does see the leaves it checks (a schema with no arrays / strings proves nothing)
    text = json.dumps(schema)
    assert '"maxItems"' in text or '"maxLength"' in text


def test_the_bounds_are_in_the_schema_only() -> None:
    """A model that overshoots is trimmed by the prompted model, not rejected (no retry burnt)."""
    many = ExtractionOutput.model_validate({"facts": [{"content": "x" * 1000}] * (MAX_FACTS_PER_CALL + 5)})
    assert len(many.facts) == MAX_FACTS_PER_CALL + 5


async def test_the_prompted_model_trims_lists_to_the_schema_bounds() -> None:
    facts = [{"content": f"Sam owns bike number {i}", "scope": "user"} for i in range(MAX_FACTS_PER_CALL + 5)]
    reflections = [f"note {i}" for i in range(MAX_REFLECTIONS_PER_LEVEL + 3)]
    llm = ScriptedLLM([json.dumps({"facts": facts}), json.dumps({"session": reflections})])
    model = PromptedModel(llm)
    extracted = await model.extract_facts(ExtractionInput(conversation=CONVO, instructions=""))
    assert len(extracted.facts) == MAX_FACTS_PER_CALL
    reflected = await model.reflect(ReflectionInput(conversation=CONVO, new_facts=[]))
    assert reflected.session == reflections[:MAX_REFLECTIONS_PER_LEVEL]


# --------------------------------------------------------------------------- max_tokens


def _inputs() -> dict[str, Any]:
    return {
        "extract": ExtractionInput(conversation=CONVO, instructions=""),
        "dedup": DedupInput(
            items=[DedupItem(index=0, content="Sam lives in Porto", candidates=[ExistingFact(id="f1", content="x")])]
        ),
        "reflect": ReflectionInput(conversation=CONVO, new_facts=[], user=ScopeMemory()),
        "consolidate": ConsolidationInput(scope="user", current="", version=1, reflections=["a"], word_limit=300),
        "profile": ProfileInput(facts=["Sam is vegetarian"]),
    }


ANSWERS = {
    "extract": {"facts": [{"content": "Sam is vegetarian", "scope": "user"}]},
    "dedup": {"decisions": [{"index": 0, "event": "ADD"}]},
    "reflect": {"session": ["Sam talked about food"]},
    "consolidate": {"content": "VERSION: 1\n[PREFERENCES]\n- vegetarian"},
    "profile": {"bullets": ["Sam is vegetarian"]},
}


async def _run_all_steps(model: PromptedModel) -> None:
    inp = _inputs()
    await model.extract_facts(inp["extract"])
    await model.decide(inp["dedup"])
    await model.reflect(inp["reflect"])
    await model.consolidate(inp["consolidate"])
    await model.distill_profile(inp["profile"])


def _task_of(text: str) -> str:
    for prefix, task in (
        ("You extract FACTS", "extract"),
        ("You keep", "dedup"),
        ("You form REFLECTIONS", "reflect"),
        ("You consolidate", "consolidate"),
        ("You distil", "profile"),
    ):
        if prefix in text:
            return task
    raise AssertionError(f"unknown prompt: {text[:80]!r}")


@dataclass
class Wire:
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    bad_first: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class ProviderHandler(JsonHandler):
    """OpenAI ``/v1/chat/completions``, Anthropic ``/v1/messages``, Gemini ``:generateContent``."""

    def do_POST(self) -> None:
        state: Wire = self.server.state
        body = self.read_json()
        with state.lock:
            state.bodies.append(body)
            bad = state.bad_first and len(state.bodies) == 1
        text = json.dumps(body)
        answer = "not json at all" if bad else json.dumps(ANSWERS[_task_of(text)])
        if self.path == "/v1/chat/completions":
            reply: dict[str, Any] = {
                "choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        elif self.path == "/v1/messages":
            content: list[dict[str, Any]] = (
                [{"type": "text", "text": answer}]
                if bad
                else [{"type": "tool_use", "id": "t1", "name": body["tools"][0]["name"], "input": json.loads(answer)}]
            )
            reply = {
                "content": content,
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        else:
            reply = {
                "candidates": [{"content": {"role": "model", "parts": [{"text": answer}]}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5},
            }
        self._send(Reply(200, reply))


@pytest.fixture
def wire() -> Iterator[Wire]:
    state = Wire()
    with serve(ProviderHandler, state) as url:
        state.url = url
        yield state


def _client(provider: str, url: str) -> LLM:
    if provider == "openai":
        return OpenAIChat("m", base_url=f"{url}/v1", api_key="k", backoff_base=0)
    if provider == "anthropic":
        return AnthropicChat("m", base_url=url, api_key="k", backoff_base=0)
    return GeminiChat("m", base_url=url, api_key="k", backoff_base=0)


def _sent_max_tokens(provider: str, body: dict[str, Any]) -> Any:
    if provider == "openai":
        return body.get("max_tokens", body.get("max_completion_tokens"))
    if provider == "anthropic":
        return body.get("max_tokens")
    return body.get("generationConfig", {}).get("maxOutputTokens")


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
async def test_every_formation_call_sends_the_configured_max_tokens(provider: str, wire: Wire) -> None:
    wire.bad_first = True  # the corrective retry is a formation call too
    model = PromptedModel(_client(provider, wire.url), max_tokens=321)
    try:
        await _run_all_steps(model)
    finally:
        await model.aclose()
    assert len(wire.bodies) == 6  # five steps + one corrective retry
    assert [_sent_max_tokens(provider, b) for b in wire.bodies] == [321] * 6


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
async def test_default_max_tokens_per_step(provider: str, wire: Wire) -> None:
    model = PromptedModel(_client(provider, wire.url))
    try:
        await _run_all_steps(model)
    finally:
        await model.aclose()
    sent = {_task_of(json.dumps(b)): _sent_max_tokens(provider, b) for b in wire.bodies}
    assert sent == {**DEFAULT_MAX_TOKENS, "consolidate": consolidation_max_tokens(300)}
    assert consolidation_max_tokens(5000) > consolidation_max_tokens(300) >= 2 * 300


def test_max_tokens_must_be_positive() -> None:
    for bad in (0, -5, 2.5, True, "100"):
        with pytest.raises(ConfigError, match="max_tokens"):
            PromptedModel(ScriptedLLM(), max_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tokens"):
        FormationConfig(max_tokens=0)


async def test_formation_config_max_tokens_reaches_the_wire(wire: Wire, tmp_path: Path) -> None:
    """``FormationConfig(max_tokens=...)`` caps every call of a whole formation run."""
    conf = FormationConfig(background=False, idle_minutes=None, max_tokens=200, retry_base_seconds=0)
    llm = OpenAIChat("m", base_url=f"{wire.url}/v1", api_key="k", backoff_base=0)
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", llm=llm, formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        for text in ("I'm vegetarian", "and I live in Lisbon"):
            await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
            await m.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))
        await m.end_session("s")
        await m.profile("sam")
    tasks = [_task_of(json.dumps(b)) for b in wire.bodies]
    assert {"extract", "reflect", "profile"} <= set(tasks)
    assert [b.get("max_tokens") for b in wire.bodies] == [200] * len(wire.bodies)


# --------------------------------------------------------------------------- the prompt's own examples


def test_every_listed_example_is_quoted_in_its_prompt() -> None:
    """The lists stay in step with the templates (an example removed from a prompt must leave the list)."""
    extraction = prompts.EXTRACTION_SYSTEM + prompts.DEFAULT_EXTRACTION_INSTRUCTIONS
    for examples, text in (
        (prompts.EXTRACTION_EXAMPLES, extraction),
        (prompts.DEDUP_EXAMPLES, prompts.DEDUP_SYSTEM),
        (prompts.PROFILE_EXAMPLES, prompts.PROFILE_SYSTEM),
    ):
        flat = re.sub(r"\\\s*\n", "", text).replace("\n", " ")
        for example in examples:
            assert example in flat, example


@pytest.mark.parametrize(
    "copied",
    [EXAMPLE, "alice's email is ALICE@example.com.", "  Alice’s  email is alice@example.com!  ", "- " + EXAMPLE],
)
async def test_extraction_drops_the_prompt_example(copied: str) -> None:
    answer = {"facts": [{"content": copied, "scope": "user"}, {"content": "Sam is vegetarian", "scope": "user"}]}
    llm = ScriptedLLM([json.dumps(answer)])
    out = await PromptedModel(llm).extract_facts(ExtractionInput(conversation=CONVO, instructions=""))
    assert [f.content for f in out.facts] == ["Sam is vegetarian"]


async def test_an_example_sentence_really_said_is_kept() -> None:
    said = [Turn(role="user", author="Alice", text=f"For the record: {EXAMPLE}.")]
    llm = ScriptedLLM([json.dumps({"facts": [{"content": EXAMPLE, "scope": "user"}]})])
    out = await PromptedModel(llm).extract_facts(ExtractionInput(conversation=said, instructions=""))
    assert [f.content for f in out.facts] == [EXAMPLE]


async def test_a_fact_that_merely_contains_example_words_is_kept() -> None:
    fact = "Alice's email is alice@example.com.au"
    llm = ScriptedLLM([json.dumps({"facts": [{"content": fact, "scope": "user"}]})])
    out = await PromptedModel(llm).extract_facts(ExtractionInput(conversation=CONVO, instructions=""))
    assert [f.content for f in out.facts] == [fact]


async def test_profile_and_dedup_drop_their_prompt_examples() -> None:
    llm = ScriptedLLM(
        [
            json.dumps({"bullets": ["The user's name is Itay", "Sam is vegetarian"]}),
            json.dumps({"decisions": [{"index": 0, "event": "UPDATE", "fact_id": "f1", "text": "John likes pizza"}]}),
        ]
    )
    model = PromptedModel(llm)
    profile = await model.distill_profile(ProfileInput(facts=["Sam is vegetarian"]))
    assert profile.bullets == ["Sam is vegetarian"]
    item = DedupItem(index=0, content="Sam likes pasta", candidates=[ExistingFact(id="f1", content="Sam likes rice")])
    decided = await model.decide(DedupInput(items=[item]))
    assert decided.decisions[0].event == "UPDATE" and decided.decisions[0].text is None  # keeps the new fact's text
    # a stored fact that says the example keeps it in the profile
    llm.push(json.dumps({"bullets": ["The user's name is Itay"]}))
    kept = await model.distill_profile(ProfileInput(facts=["The user's name is Itay"]))
    assert kept.bullets == ["The user's name is Itay"]


async def test_the_example_fact_never_reaches_memory(tmp_path: Path) -> None:
    """Through the whole pipeline: a model that parrots the prompt stores nothing of it."""

    def parrot(messages: Any) -> str:
        task = _task_of(messages[0]["content"])
        if task == "extract":
            return json.dumps({"facts": [{"content": EXAMPLE, "scope": "user", "sources": [0]}]})
        return json.dumps({"reflect": {}, "profile": {"bullets": []}}.get(task, ANSWERS[task]))

    llm = ScriptedLLM(default=None)
    llm.push(*([parrot] * 10))
    conf = FormationConfig(background=False, idle_minutes=None)
    async with AsyncMemory(tmp_path / "p.db", embedder="hash", llm=llm, formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        for text in ("Hello there!", "Just saying hi."):
            await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
            await m.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Hi!"))
        result = await m.form("s")
        assert result.facts == []
        page = await m.list(user_id="sam")
        assert [f.content for f in page.items if "alice" in f.content.lower()] == []
        hits = await m.search("Alice email", user_id="sam")
        assert [h.fact.content for h in hits.hits if "alice" in h.fact.content.lower()] == []


class SmallContextHandler(JsonHandler):
    """A vLLM-like server with a 4096-token context that rejects prompt + max_tokens beyond it."""

    def do_POST(self) -> None:
        state: Wire = self.server.state
        body = self.read_json()
        with state.lock:
            state.bodies.append(body)
        wanted = body.get("max_tokens") or 0
        if 904 + wanted > 4096:
            message = (
                f"This model's maximum context length is 4096 tokens. However, you requested {904 + wanted} tokens "
                f"(904 in the messages, {wanted} in the completion). Please reduce the length of the messages or "
                "completion."
            )
            self._send(Reply(400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400}))
            return
        answer = json.dumps(ANSWERS["extract"])
        reply = {"choices": [{"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}
        self._send(Reply(200, reply))


async def test_a_max_tokens_that_does_not_fit_the_context_is_lowered() -> None:
    state = Wire()
    with serve(SmallContextHandler, state) as url:
        model = PromptedModel(OpenAIChat("m", base_url=f"{url}/v1", backoff_base=0))
        try:
            out = await model.extract_facts(ExtractionInput(conversation=CONVO, instructions=""))
        finally:
            await model.aclose()
    assert [f.content for f in out.facts] == ["Sam is vegetarian"]
    assert [b["max_tokens"] for b in state.bodies] == [DEFAULT_MAX_TOKENS["extract"], 4096 - 904 - 16]
