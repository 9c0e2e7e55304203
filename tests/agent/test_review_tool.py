"""``review_memory``: the opt-in tool an admin agent reviews the bound user's proposals with
(docs/review.md), its OpenAI / Anthropic / Gemini schemas, dispatch, and isolation."""

from __future__ import annotations

from typing import Any

import jsonschema
from google.genai import types as gtypes
from openai.types.chat import ChatCompletionToolParam
from pydantic import TypeAdapter

from memlane import AsyncMemory
from memlane.agent.tools import DEFAULT_TOOLS, MemoryTools

ADMIN = (*DEFAULT_TOOLS, "review_memory")


def admin_tools(mem: AsyncMemory, user: str = "alice") -> MemoryTools:
    return MemoryTools(mem, user_id=user, agent_id="care", tools=ADMIN)


def test_the_tool_is_opt_in_and_its_schemas_are_valid(mem: AsyncMemory) -> None:
    assert "review_memory" not in [s["name"] for s in MemoryTools(mem, user_id="a").schemas("anthropic")]
    t = admin_tools(mem)
    oa = next(s for s in t.schemas("openai") if s["function"]["name"] == "review_memory")
    TypeAdapter(ChatCompletionToolParam).validate_python(oa)
    params = oa["function"]["parameters"]
    jsonschema.Draft202012Validator.check_schema(params)
    assert set(params["properties"]) == {"action", "proposal_id", "edit"}  # never whose memory
    anthropic = next(s for s in t.schemas("anthropic") if s["name"] == "review_memory")
    assert anthropic["input_schema"] == params
    responses = next(s for s in t.schemas("openai_responses") if s["name"] == "review_memory")
    assert responses["parameters"] == params
    tool = gtypes.Tool.model_validate(t.schemas("gemini")[0])
    decl = next(d for d in tool.function_declarations or [] if d.name == "review_memory")
    assert decl.parameters is not None and decl.parameters.properties is not None
    assert decl.parameters.properties["action"].enum == ["list", "approve", "reject"]
    check = jsonschema.Draft202012Validator(t.json_schema("review_memory"))
    check.validate({"action": "approve", "proposal_id": "p1", "edit": "x"})
    assert not check.is_valid({"action": "approve", "user_id": "bob"})


async def test_an_admin_agent_lists_approves_and_rejects(mem: AsyncMemory) -> None:
    keep = await mem.propose("Alice is diabetic", user_id="alice", agent_id="care", reason="intake form")
    drop = await mem.propose("Alice is rude", user_id="alice", agent_id="care")
    t = admin_tools(mem)
    listed: dict[str, Any] = await t.call("review_memory", '{"action": "list"}')
    assert [(p["id"], p["reason"]) for p in listed["proposals"]] == [(drop.id, None), (keep.id, "intake form")]
    done = await t.call("review_memory", {"action": "approve", "proposal_id": keep.id, "edit": "Alice has diabetes"})
    assert (done["status"], done["result_event"]) == ("approved", "ADD")
    assert (await t.call("review_memory", {"action": "reject", "proposal_id": drop.id}))["status"] == "rejected"
    facts = [f.content for f in await mem.list(user_id="alice", agent_id="care")]
    assert facts == ["Alice has diabetes"]
    history = await mem.history(done["result_id"], user_id="alice", agent_id="care")
    assert [h.actor for h in history] == ["agent:care"]
    again = await t.call("review_memory", {"action": "approve", "proposal_id": keep.id})
    assert again["error"]["code"] == "already_reviewed"
    assert t.review_memory_sync is not None


async def test_the_tool_reaches_only_the_bound_users_proposals(mem: AsyncMemory) -> None:
    bobs = await mem.propose("Bob is 80", user_id="bob", agent_id="care")
    t = admin_tools(mem, "alice")
    assert (await t.call("review_memory", {"action": "list"}))["proposals"] == []
    res = await t.call("review_memory", {"action": "approve", "proposal_id": bobs.id})
    assert res["error"]["code"] == "not_found"
    assert (await mem.get_proposal(bobs.id)).status == "pending"
    for bad in (
        {"action": "merge"},
        {"action": "approve"},
        {"action": "list", "proposal_id": bobs.id},
        {"action": "reject", "proposal_id": bobs.id, "edit": "x"},
        {"action": "list", "user_id": "bob"},
    ):
        assert (await t.call("review_memory", bad))["error"]["code"] == "invalid_arguments", bad
    assert (await mem.get_proposal(bobs.id)).status == "pending"
