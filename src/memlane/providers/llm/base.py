"""The LLM contract: chat messages in, text (or a JSON object for a JSON schema) out.

Every chat provider (``openai``-compatible, ``anthropic``, ``gemini``, the test-only
``scripted``) implements :class:`LLM`. Models are named ``provider:model``
(``openai:gpt-4o-mini``, ``ollama:llama3.1``, ``anthropic:claude-3-5-haiku-latest``,
``gemini:gemini-2.5-flash``). Turning text into a validated pydantic object (fences,
``<think>`` blocks, one corrective retry) is :mod:`memlane.providers.llm.parsing`'s job,
so providers stay thin.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable


class ChatMessage(TypedDict):
    """One chat message. ``system`` messages are hoisted by providers that need it (Anthropic, Gemini)."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass
class Usage:
    """Token usage of one or more calls (as reported by the provider; estimated when it does not)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __iadd__(self, other: Usage) -> Usage:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += other.calls
        return self


@dataclass
class Completion:
    """What :meth:`LLM.complete` returns."""

    text: str
    """The model's text (for structured output: the JSON text)."""
    model: str
    """``provider:model`` that answered."""
    usage: Usage = field(default_factory=Usage)
    """Tokens of this call (``calls == 1``)."""
    finish_reason: str | None = None
    """Provider's stop reason (``stop``, ``length``, ``tool_use``, ...)."""


@runtime_checkable
class LLM(Protocol):
    """A chat model.

    ``complete`` with ``schema`` asks for JSON matching that JSON schema, using the
    provider's native structured output where it has one (OpenAI ``json_schema``, JSON
    mode as a fallback; Anthropic tool use; Gemini ``responseSchema``). It still returns
    text: validation happens in :func:`memlane.providers.llm.parsing.generate`.

    Raises :class:`~memlane.errors.LLMError` (``retryable`` for timeouts, 429 and 5xx,
    after the client's own retries).
    """

    name: str
    """``provider:model``."""

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "output",
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
    ) -> Completion:
        """One chat completion."""
        ...

    async def aclose(self) -> None:
        """Release connections (idempotent)."""
        ...


class UsageMeter:
    """Thread-safe running totals of LLM usage, per model and per task (``extract``, ``dedup``, ...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_model: dict[str, Usage] = {}
        self.by_task: dict[str, Usage] = {}

    def record(self, model: str, task: str, usage: Usage) -> None:
        with self._lock:
            self.by_model.setdefault(model, Usage()).__iadd__(usage)
            self.by_task.setdefault(task, Usage()).__iadd__(usage)

    @property
    def total(self) -> Usage:
        with self._lock:
            out = Usage()
            for u in self.by_model.values():
                out += u
            return out

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{task: {"calls", "prompt_tokens", "completion_tokens"}}``."""
        with self._lock:
            return {
                k: {"calls": u.calls, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}
                for k, u in self.by_task.items()
            }

    def reset(self) -> None:
        with self._lock:
            self.by_model.clear()
            self.by_task.clear()


def estimate_tokens(text: str) -> int:
    """A provider-free token estimate (about 4 characters per token), for models that report none."""
    return max(1, (len(text) + 3) // 4) if text else 0
