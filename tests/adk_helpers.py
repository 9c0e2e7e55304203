"""Google ADK test helpers shared by the adapter tests and the agent-attack tests: a scripted
``BaseLlm`` (no network) and a ``Runner`` over memlane's ADK services."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.events.event import Event as AdkEvent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from pydantic import Field

from memlane import AsyncMemory
from memlane.adapters.adk import MemlaneMemoryService, MemlaneSessionService

APP = "concierge"


class ScriptedModel(BaseLlm):
    """A model that answers from a script and records every request it receives."""

    model: str = "scripted"
    replies: list[types.Content] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request.model_copy(deep=True))
        reply = self.replies.pop(0) if self.replies else text("(script ended)", role="model")
        yield LlmResponse(content=reply)


def text(value: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=value)])


async def run_turn(runner: Runner, user_id: str, session_id: str, message: str) -> list[AdkEvent]:
    return [e async for e in runner.run_async(user_id=user_id, session_id=session_id, new_message=text(message))]


def runner_for(memory: AsyncMemory, model: ScriptedModel, tools: list[Any], app: str = APP) -> Runner:
    agent = LlmAgent(name="concierge", model=model, instruction="You are a concierge.", tools=tools)
    return Runner(
        app_name=app,
        agent=agent,
        session_service=MemlaneSessionService(memory),
        memory_service=MemlaneMemoryService(memory),
    )


def request_text(request: LlmRequest) -> str:
    return "\n".join(p.text for c in request.contents for p in c.parts or [] if p.text)
