"""Chat completions from the Anthropic Messages API (``POST /v1/messages``).

::

    AnthropicChat("claude-3-5-haiku-latest")          # key from ANTHROPIC_API_KEY

System messages go to the top-level ``system`` field and consecutive messages of one role
are merged (the API wants alternating turns). Structured output uses a single forced
tool whose ``input_schema`` is the schema; the tool call's ``input`` comes back as the JSON
text of the :class:`~memlane.providers.llm.base.Completion`.

Needs the ``anthropic`` extra (``pip install 'memlane[anthropic]'``), which only installs
httpx; importing this module never fails without it, creating a client does.

A client opens its HTTP connection pool on first use and belongs to that event loop from
then on; use one client per loop (or :meth:`AnthropicChat.aclose` it before moving on).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane.errors import ConfigError, InvalidInputError, LLMError
from memlane.providers.llm._client import HttpChatClient, check_message
from memlane.providers.llm.base import ChatMessage, Completion, Usage, estimate_tokens
from memlane.providers.llm.limits import RateLimiter

if TYPE_CHECKING:
    pass

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"

_WRAP_KEY = "value"  # a non-object schema travels as {"value": <schema>} (tool inputs must be objects)


def _identifier(name: str) -> str:
    """``schema_name`` as a tool name the API accepts: ``[a-zA-Z0-9_-]{1,64}``."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "output"


class AnthropicChat(HttpChatClient):
    """Chat model behind the Anthropic Messages API.

    Args:
        model: model name, e.g. ``claude-3-5-haiku-latest``.
        api_key: sent as ``x-api-key``; default ``$ANTHROPIC_API_KEY`` (required).
        base_url: API root without ``/v1``; default ``$ANTHROPIC_BASE_URL`` or the Anthropic API.
        max_tokens: output limit when :meth:`complete` gets none (the API requires one).
        timeout: seconds per HTTP request.
        max_retries: retries after the first attempt on 429, 5xx (including 529
            "overloaded"), timeouts and connection errors (exponential backoff with
            jitter, ``Retry-After`` honoured).
        backoff_base: first backoff delay in seconds (0 disables waiting; for tests).
        name: ``provider:model`` reported in :attr:`name` and errors; default ``anthropic:<model>``.
        limiter: concurrency / rate limit shared with other clients; default
            :data:`~memlane.providers.llm.limits.GLOBAL_LIMITER`.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 2048,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        name: str | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._setup_http(
            "anthropic", timeout=timeout, max_retries=max_retries, backoff_base=backoff_base, limiter=limiter
        )
        if not model:
            raise ConfigError("AnthropicChat needs a model name, e.g. 'claude-3-5-haiku-latest'")
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {max_tokens}")
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ConfigError("No key found - set ANTHROPIC_API_KEY or pass api_key=")
        self._api_key = key

        base = base_url if base_url is not None else os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        base = base.rstrip("/")
        self.base_url = base.removesuffix("/v1")
        self.model = model
        self.name = name or f"anthropic:{model}"
        self.max_tokens = max_tokens

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicChat(name={self.name!r}, base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        return {"content-type": "application/json", "x-api-key": self._api_key, "anthropic-version": API_VERSION}

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "output",
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
    ) -> Completion:
        """One chat completion (see :class:`~memlane.providers.llm.base.LLM`)."""
        system, turns = _convert(messages, self.name)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens if max_tokens is not None else self.max_tokens,
            "messages": turns,
        }
        if system:
            body["system"] = system
        if temperature is not None:
            body["temperature"] = temperature
        tool = _identifier(schema_name)
        wrapped = schema is not None and schema.get("type") != "object"
        if schema is not None:
            input_schema: dict[str, Any] = (
                {"type": "object", "properties": {_WRAP_KEY: dict(schema)}, "required": [_WRAP_KEY]}
                if wrapped
                else dict(schema)
            )
            body["tools"] = [
                {
                    "name": tool,
                    "description": f"Record the {schema_name} as structured data matching the input schema.",
                    "input_schema": input_schema,
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": tool}
        data = await self._post(f"{self.base_url}/v1/messages", body, self._headers())
        return self._parse(data, body, tool if schema is not None else None, wrapped)

    def _parse(self, data: dict[str, Any], body: dict[str, Any], tool: str | None, wrapped: bool) -> Completion:
        blocks = data.get("content")
        if not isinstance(blocks, list):
            raise LLMError(f"{self.name}: response has no 'content' list - check base_url", retryable=False)
        texts: list[str] = []
        tool_uses: list[dict[str, Any]] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use":
                tool_uses.append(block)
        stop = data.get("stop_reason")
        text = "".join(texts)
        if tool is not None and tool_uses:
            chosen = next((b for b in tool_uses if b.get("name") == tool), tool_uses[0])
            value = chosen.get("input")
            if wrapped and isinstance(value, dict) and _WRAP_KEY in value:
                value = value[_WRAP_KEY]
            text = json.dumps(value, ensure_ascii=False)
        elif not text and stop == "refusal":
            raise LLMError(f"{self.name}: the model refused to answer (stop_reason 'refusal')", retryable=False)
        return Completion(
            text=text,
            model=self.name,
            usage=_usage(data.get("usage"), body, text),
            finish_reason=str(stop) if stop is not None else None,
        )


def _convert(messages: Sequence[ChatMessage], who: str) -> tuple[str, list[dict[str, str]]]:
    """``(system, turns)``: system texts joined; empty messages dropped; same-role neighbours merged."""
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for message in messages:
        checked = check_message(message, who)
        role, content = checked["role"], checked["content"]
        if not content.strip():  # the API rejects empty text blocks
            continue
        if role == "system":
            system.append(content)
        elif turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    if not turns:
        if not system:
            raise InvalidInputError(f"{who}: no messages to send")
        return "", [{"role": "user", "content": "\n\n".join(system)}]  # instructions only: send them as the turn
    if turns[-1]["role"] == "assistant":  # a prefill may not end in whitespace
        turns[-1]["content"] = turns[-1]["content"].rstrip()
    return "\n\n".join(system), turns


def _usage(raw: Any, body: dict[str, Any], text: str) -> Usage:
    def count(key: str) -> int | None:
        value = raw.get(key) if isinstance(raw, dict) else None
        return value if isinstance(value, int) else None

    prompt = count("input_tokens")
    if prompt is not None:  # cached prompt tokens are counted separately
        prompt += (count("cache_creation_input_tokens") or 0) + (count("cache_read_input_tokens") or 0)
    else:
        prompt = estimate_tokens(body.get("system", "")) + sum(estimate_tokens(t["content"]) for t in body["messages"])
    completion = count("output_tokens")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion if completion is not None else estimate_tokens(text),
        calls=1,
    )
