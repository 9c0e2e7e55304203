"""Chat completions from the Google Gemini API (``models/<model>:generateContent``).

::

    GeminiChat("gemini-2.5-flash")                    # key from GEMINI_API_KEY / GOOGLE_API_KEY

System messages become ``systemInstruction``; ``assistant`` turns are sent as role
``model`` and consecutive messages of one role are merged. Structured output sets
``generationConfig.responseMimeType`` to ``application/json`` and passes the schema as
``responseJsonSchema`` (plain JSON Schema); ``schema_field="responseSchema"`` uses the
older OpenAPI-subset field instead. Thought parts (``thought: true``) of thinking models
are never part of the answer.

The key is sent in the ``x-goog-api-key`` header (never in the URL). Needs the ``gemini``
extra (``pip install 'memlane[gemini]'``), which only installs httpx; importing this module
never fails without it, creating a client does.

A client opens its HTTP connection pool on first use and belongs to that event loop from
then on; use one client per loop (or :meth:`GeminiChat.aclose` it before moving on).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from memlane.errors import ConfigError, InvalidInputError, LLMError
from memlane.providers.llm._client import HttpChatClient, check_message
from memlane.providers.llm.base import ChatMessage, Completion, Usage, estimate_tokens
from memlane.providers.llm.limits import RateLimiter

if TYPE_CHECKING:
    pass

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

SchemaField = Literal["responseJsonSchema", "responseSchema"]

_ROLES = {"system": "system", "user": "user", "assistant": "model"}

#: finishReason values that mean the answer was withheld, not merely cut short.
_BLOCKED_FINISH = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})


class GeminiChat(HttpChatClient):
    """Chat model behind the Gemini API.

    Args:
        model: model name, with or without the ``models/`` prefix.
        api_key: default ``$GEMINI_API_KEY``, then ``$GOOGLE_API_KEY`` (required).
        base_url: API root without the version; default ``$GEMINI_BASE_URL`` or the Gemini
            API (a trailing ``/v1beta`` is accepted and ignored).
        schema_field: ``generationConfig`` field that carries a schema:
            ``"responseJsonSchema"`` (JSON Schema, current models) or ``"responseSchema"``
            (the OpenAPI subset older models and proxies understand).
        timeout: seconds per HTTP request.
        max_retries: retries after the first attempt on 429, 5xx, timeouts and connection
            errors (exponential backoff with jitter, ``Retry-After`` honoured).
        backoff_base: first backoff delay in seconds (0 disables waiting; for tests).
        name: ``provider:model`` reported in :attr:`name` and errors; default ``gemini:<model>``.
        limiter: concurrency / rate limit shared with other clients; default
            :data:`~memlane.providers.llm.limits.GLOBAL_LIMITER`.

    Usage counts thinking tokens (``thoughtsTokenCount``) as completion tokens: they are
    billed as output.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        schema_field: SchemaField = "responseJsonSchema",
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        name: str | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._setup_http("gemini", timeout=timeout, max_retries=max_retries, backoff_base=backoff_base, limiter=limiter)
        model = model.removeprefix("models/")
        if not model:
            raise ConfigError("GeminiChat needs a model name, e.g. 'gemini-2.5-flash'")
        if schema_field not in ("responseJsonSchema", "responseSchema"):
            raise ConfigError(f"schema_field must be 'responseJsonSchema' or 'responseSchema', got {schema_field!r}")
        key = api_key if api_key is not None else os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        if not key:
            raise ConfigError("No key found - set GEMINI_API_KEY (or GOOGLE_API_KEY) or pass api_key=")
        self._api_key = key

        base = base_url if base_url is not None else os.environ.get("GEMINI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = base.rstrip("/").removesuffix("/v1beta")
        self.model = model
        self.name = name or f"gemini:{model}"
        self.schema_field: SchemaField = schema_field

    def __repr__(self) -> str:  # never show the key
        return f"GeminiChat(name={self.name!r}, base_url={self.base_url!r})"

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "output",
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
    ) -> Completion:
        """One chat completion (see :class:`~memlane.providers.llm.base.LLM`).

        ``schema_name`` is not sent: the Gemini API has no name for a response schema.
        """
        system, contents = _convert(messages, self.name)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {}
        if temperature is not None:
            config["temperature"] = temperature
        if max_tokens is not None:
            config["maxOutputTokens"] = max_tokens
        if schema is not None:
            config["responseMimeType"] = "application/json"
            config[self.schema_field] = dict(schema)
        if config:
            body["generationConfig"] = config
        data = await self._post(
            f"{self.base_url}/v1beta/models/{self.model}:generateContent",
            body,
            {"Content-Type": "application/json", "x-goog-api-key": self._api_key},
        )
        return self._parse(data, system, contents)

    def _parse(self, data: dict[str, Any], system: str, contents: list[dict[str, Any]]) -> Completion:
        feedback = data.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            detail = feedback.get("blockReasonMessage")
            raise LLMError(
                f"{self.name}: the prompt was blocked ({feedback['blockReason']}{': ' + str(detail) if detail else ''})"
                " - rephrase it or check the safety settings",
                retryable=False,
            )
        candidates = data.get("candidates")
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            raise LLMError(f"{self.name}: response has no candidates - check base_url and the model", retryable=False)
        candidate = candidates[0]
        finish = candidate.get("finishReason")
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        text = "".join(
            part["text"]
            for part in (parts if isinstance(parts, list) else [])
            if isinstance(part, dict) and not part.get("thought") and isinstance(part.get("text"), str)
        )
        if not text and finish in _BLOCKED_FINISH:
            raise LLMError(f"{self.name}: the answer was blocked (finishReason {finish})", retryable=False)
        return Completion(
            text=text,
            model=self.name,
            usage=_usage(data.get("usageMetadata"), system, contents, text),
            finish_reason=str(finish) if finish is not None else None,
        )


def _convert(messages: Sequence[ChatMessage], who: str) -> tuple[str, list[dict[str, Any]]]:
    """``(system, contents)``: system texts joined; empty messages dropped; same-role neighbours merged."""
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    for message in messages:
        checked = check_message(message, who)
        role, content = _ROLES[checked["role"]], checked["content"]
        if not content.strip():
            continue
        if role == "system":
            system.append(content)
        elif turns and turns[-1][0] == role:
            turns[-1] = (role, turns[-1][1] + "\n\n" + content)
        else:
            turns.append((role, content))
    if not turns:
        if not system:
            raise InvalidInputError(f"{who}: no messages to send")
        turns, system = [("user", "\n\n".join(system))], []  # instructions only: send them as the turn
    return "\n\n".join(system), [{"role": role, "parts": [{"text": text}]} for role, text in turns]


def _usage(raw: Any, system: str, contents: list[dict[str, Any]], text: str) -> Usage:
    def count(key: str) -> int | None:
        value = raw.get(key) if isinstance(raw, dict) else None
        return value if isinstance(value, int) else None

    prompt = count("promptTokenCount")
    if prompt is None:
        prompt = estimate_tokens(system) + sum(estimate_tokens(c["parts"][0]["text"]) for c in contents)
    completion = count("candidatesTokenCount")
    if completion is None:
        completion = estimate_tokens(text)
    completion += count("thoughtsTokenCount") or 0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, calls=1)
