"""Chat completions from any OpenAI-compatible ``/chat/completions`` endpoint.

Works with OpenAI itself and with local servers that speak the same API, which need no key::

    OpenAIChat("gpt-4o-mini")                        # OpenAI, key from OPENAI_API_KEY
    ollama_chat("llama3.1")                          # http://localhost:11434/v1, name "ollama:llama3.1"
    OpenAIChat("qwen2.5", base_url="http://gpu-box:8000/v1", name="vllm:qwen2.5")

The registry spells these ``openai:<model>``, ``ollama:<model>``, ``vllm:<model>``,
``lmstudio:<model>`` and ``llamacpp:<model>``.

Structured output (``complete(..., schema=...)``) uses ``response_format`` type
``json_schema`` (non-strict, so any JSON schema is accepted). With ``structured="auto"`` a
server that rejects it (HTTP 400 naming ``response_format`` / ``json_schema``) is asked in
JSON mode (``json_object``, schema in the system prompt) for the rest of the client's life,
and one that rejects that too gets the schema in the prompt only.

Needs the ``openai`` extra (``pip install 'memlane[openai]'``), which only installs httpx;
importing this module never fails without it, creating a client does.

A client opens its HTTP connection pool on first use and belongs to that event loop from
then on; use one client per loop (or :meth:`OpenAIChat.aclose` it before moving on).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

from memlane.errors import ConfigError, InvalidInputError, LLMError
from memlane.providers.llm._client import HttpChatClient, check_message
from memlane.providers.llm.base import ChatMessage, Completion, Usage, estimate_tokens
from memlane.providers.llm.limits import RateLimiter

if TYPE_CHECKING:
    pass

log = logging.getLogger("memlane")

DEFAULT_BASE_URL = "https://api.openai.com/v1"

StructuredMode = Literal["json_schema", "json_object", "none", "auto"]

#: Local OpenAI-compatible servers: provider name -> default base URL (overridden by ``$<PROVIDER>_BASE_URL``).
LOCAL_SERVERS: dict[str, str] = {
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
    "lmstudio": "http://localhost:1234/v1",
    "llamacpp": "http://localhost:8080/v1",
}

_STRUCTURED_MODES = ("json_schema", "json_object", "none", "auto")
_REJECTS_JSON_SCHEMA = ("response_format", "response format", "json_schema")
_REJECTS_JSON_OBJECT = ("response_format", "response format", "json_object")


def _is_official(base_url: str) -> bool:
    return (urlparse(base_url).hostname or "").lower() == "api.openai.com"


def _identifier(name: str) -> str:
    """``schema_name`` as the API accepts it: ``[a-zA-Z0-9_-]{1,64}``."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "output"


def schema_instruction(schema: Mapping[str, Any], schema_name: str) -> str:
    """The system-prompt text that asks for JSON when the server cannot be told natively."""
    return (
        f"Answer with one JSON object only (no prose, no code fences) named {schema_name!r}, "
        f"matching this JSON schema:\n{json.dumps(schema, ensure_ascii=False, separators=(',', ':'))}"
    )


def _content_text(content: Any) -> str:
    """``message.content`` as text: a string, null, or a list of parts (text parts joined; others skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") in ("text", "output_text"):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "".join(texts)
    raise TypeError(f"message content is a {type(content).__name__}")


class OpenAIChat(HttpChatClient):
    """Chat model behind an OpenAI-compatible ``/chat/completions`` API.

    Args:
        model: model name sent to the server.
        base_url: API root (``.../v1``); default ``$OPENAI_BASE_URL`` or the OpenAI API.
        api_key: bearer key; default ``$OPENAI_API_KEY``. Only required for the official
            OpenAI URL; other servers are called without an ``Authorization`` header
            unless a key is given.
        timeout: seconds per HTTP request.
        max_retries: retries after the first attempt on 429, 5xx, timeouts and connection
            errors (exponential backoff with jitter, ``Retry-After`` honoured).
        backoff_base: first backoff delay in seconds (0 disables waiting; for tests).
        structured: how a ``schema`` is requested: ``"json_schema"`` (``response_format``
            with the schema), ``"json_object"`` (JSON mode, schema in the system prompt),
            ``"none"`` (schema in the system prompt only) or ``"auto"`` (``json_schema``,
            falling back to ``json_object`` and then ``none`` when the server rejects it).
        name: ``provider:model`` reported in :attr:`name` and errors; default ``openai:<model>``.
        limiter: concurrency / rate limit shared with other clients; default
            :data:`~memlane.providers.llm.limits.GLOBAL_LIMITER`.

    Parameters the server rejects as unsupported for the model (``temperature`` on
    reasoning models; ``max_tokens`` where ``max_completion_tokens`` is wanted) are
    dropped or renamed after the first 400, for the rest of the client's life. The official
    OpenAI API gets ``max_completion_tokens`` from the start. A ``max_tokens`` that does not
    fit the model's context next to the prompt (vLLM answers 400 "maximum context length is
    N tokens ...") is lowered to what fits and the request sent again.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        structured: StructuredMode = "auto",
        name: str | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._setup_http("openai", timeout=timeout, max_retries=max_retries, backoff_base=backoff_base, limiter=limiter)
        if not model:
            raise ConfigError("OpenAIChat needs a model name, e.g. 'gpt-4o-mini'")
        if structured not in _STRUCTURED_MODES:
            raise ConfigError(f"structured must be one of {', '.join(_STRUCTURED_MODES)}; got {structured!r}")

        base = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = base.rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._api_key = key or None
        if self._api_key is None and _is_official(self.base_url):
            raise ConfigError("No key found - set OPENAI_API_KEY or pass api_key=")

        self.model = model
        self.name = name or f"openai:{model}"
        self.structured: StructuredMode = structured
        # what the server accepts, learned from its 400s; kept for the client's life
        self._mode: Literal["json_schema", "json_object", "none"] = (
            "json_schema" if structured == "auto" else structured
        )
        self._send_temperature = True
        self._max_tokens_field = "max_completion_tokens" if _is_official(self.base_url) else "max_tokens"

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChat(name={self.name!r}, base_url={self.base_url!r}, structured={self.structured!r})"

    @property
    def structured_mode(self) -> Literal["json_schema", "json_object", "none"]:
        """The way a schema is currently requested (``auto`` may have fallen back)."""
        return self._mode

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

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
        sent = [check_message(m, self.name) for m in messages]
        if not sent:
            raise InvalidInputError(f"{self.name}: no messages to send")
        for _ in range(6):  # each retry follows a permanent adjustment; there are at most 4 of them
            mode = self._mode if schema is not None else "none"
            body = self._body(sent, schema, schema_name, mode, temperature, max_tokens)
            try:
                data = await self._post(f"{self.base_url}/chat/completions", body, self._headers())
            except LLMError as exc:
                if self._adapt(exc, mode if schema is not None else None, body):
                    continue
                fitted = fit_max_tokens(exc, max_tokens)
                if fitted is not None:
                    log.info(
                        "memlane: %s: max_tokens %s does not fit the context; sending %d", self.name, max_tokens, fitted
                    )
                    max_tokens = fitted
                    continue
                raise
            return self._parse(data, body["messages"])
        raise LLMError(f"{self.name}: the server keeps rejecting the request", retryable=False)  # pragma: no cover

    def _body(
        self,
        messages: list[ChatMessage],
        schema: Mapping[str, Any] | None,
        schema_name: str,
        mode: Literal["json_schema", "json_object", "none"],
        temperature: float | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        msgs: list[dict[str, str]] = [{"role": m["role"], "content": m["content"]} for m in messages]
        response_format: dict[str, Any] | None = None
        if schema is not None:
            if mode == "json_schema":
                response_format = {
                    "type": "json_schema",
                    "json_schema": {"name": _identifier(schema_name), "schema": dict(schema), "strict": False},
                }
            else:
                response_format = {"type": "json_object"} if mode == "json_object" else None
                instruction = schema_instruction(schema, schema_name)
                first_system = next((m for m in msgs if m["role"] == "system"), None)
                if first_system is None:
                    msgs.insert(0, {"role": "system", "content": instruction})
                else:
                    first_system["content"] = f"{first_system['content']}\n\n{instruction}".lstrip()
        body: dict[str, Any] = {"model": self.model, "messages": msgs}
        if temperature is not None and self._send_temperature:
            body["temperature"] = temperature
        if max_tokens is not None:
            body[self._max_tokens_field] = max_tokens
        if response_format is not None:
            body["response_format"] = response_format
        return body

    def _adapt(self, exc: LLMError, mode: str | None, body: Mapping[str, Any]) -> bool:
        """Learn from a 400 what the server does not support; True when a changed request is worth sending."""
        if exc.status_code not in (400, 422):
            return False
        text = str(exc).lower()
        if self.structured == "auto" and mode == "json_schema" and any(k in text for k in _REJECTS_JSON_SCHEMA):
            log.info("memlane: %s rejected response_format json_schema; using JSON mode from now on", self.name)
            self._mode = "json_object"
            return True
        if self.structured == "auto" and mode == "json_object" and any(k in text for k in _REJECTS_JSON_OBJECT):
            log.info("memlane: %s rejected JSON mode; asking for JSON in the prompt only from now on", self.name)
            self._mode = "none"
            return True
        if (
            "temperature" in body
            and "temperature" in text
            and any(k in text for k in ("unsupported", "not support", "does not support", "only the default"))
        ):
            self._send_temperature = False
            return True
        if self._max_tokens_field == "max_tokens" and "max_tokens" in body and "max_completion_tokens" in text:
            self._max_tokens_field = "max_completion_tokens"
            return True
        return False

    def _parse(self, data: dict[str, Any], sent: list[dict[str, str]]) -> Completion:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            err = data.get("error")
            detail = f": {err.get('message', err) if isinstance(err, dict) else err}" if err else " - check base_url"
            raise LLMError(f"{self.name}: response has no choices{detail}", retryable=False)
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise LLMError(f"{self.name}: malformed response (choices[0] has no message)", retryable=False)
        try:
            text = _content_text(message.get("content"))
        except TypeError as exc:
            raise LLMError(f"{self.name}: malformed response ({exc})", retryable=False) from None
        refusal = message.get("refusal")
        if not text and isinstance(refusal, str) and refusal:
            raise LLMError(f"{self.name}: the model refused: {refusal}", retryable=False)
        finish = choice.get("finish_reason")
        return Completion(
            text=text,
            model=self.name,
            usage=_usage(data.get("usage"), sent, text),
            finish_reason=str(finish) if finish is not None else None,
        )


_CONTEXT_LENGTH = re.compile(r"maximum context length is (\d+)", re.IGNORECASE)
_PROMPT_TOKENS = re.compile(
    r"(\d+) (?:tokens )?in the messages|has (\d+) input tokens|(\d+) input tokens", re.IGNORECASE
)
#: Tokens left free when lowering ``max_tokens`` to fit the context (servers count a few extra).
_FIT_MARGIN = 16


def fit_max_tokens(exc: LLMError, max_tokens: int | None) -> int | None:
    """A lower ``max_tokens`` when ``exc`` is a server's "prompt + max_tokens exceeds the
    context" 400 (vLLM, OpenAI) that states both numbers; None when it is not, or nothing fits."""
    if max_tokens is None or exc.status_code not in (400, 422):
        return None
    text = str(exc)
    context, prompt = _CONTEXT_LENGTH.search(text), _PROMPT_TOKENS.search(text)
    if context is None or prompt is None:
        return None
    used = int(next(g for g in prompt.groups() if g is not None))
    room = int(context.group(1)) - used - _FIT_MARGIN
    return room if 0 < room < max_tokens else None


def _usage(raw: Any, sent: list[dict[str, str]], text: str) -> Usage:
    prompt = raw.get("prompt_tokens") if isinstance(raw, dict) else None
    completion = raw.get("completion_tokens") if isinstance(raw, dict) else None
    return Usage(
        prompt_tokens=prompt if isinstance(prompt, int) else sum(estimate_tokens(m["content"]) for m in sent),
        completion_tokens=completion if isinstance(completion, int) else estimate_tokens(text),
        calls=1,
    )


def compatible_chat(provider: str, model: str, **kwargs: Any) -> OpenAIChat:
    """An :class:`OpenAIChat` for a local OpenAI-compatible server named in :data:`LOCAL_SERVERS`.

    The base URL is ``base_url=``, else ``$<PROVIDER>_BASE_URL`` (``$OLLAMA_BASE_URL``,
    ``$VLLM_BASE_URL``, ``$LMSTUDIO_BASE_URL``, ``$LLAMACPP_BASE_URL``), else the server's
    usual local address; a URL without a path gets ``/v1``. The key is ``api_key=``, else
    ``$<PROVIDER>_API_KEY``, else none (``$OPENAI_API_KEY`` is never sent to these servers).
    The client is named ``<provider>:<model>``.
    """
    if provider not in LOCAL_SERVERS:
        raise ConfigError(f"unknown OpenAI-compatible server {provider!r}; choose one of: {', '.join(LOCAL_SERVERS)}")
    env = provider.upper()
    base = kwargs.pop("base_url", None) or os.environ.get(f"{env}_BASE_URL") or LOCAL_SERVERS[provider]
    if urlparse(base).path in ("", "/"):
        base = base.rstrip("/") + "/v1"
    api_key = kwargs.pop("api_key", None)
    if api_key is None:
        api_key = os.environ.get(f"{env}_API_KEY", "")
    kwargs.setdefault("name", f"{provider}:{model}")
    return OpenAIChat(model, base_url=base, api_key=api_key, **kwargs)


def ollama_chat(model: str, **kwargs: Any) -> OpenAIChat:
    """Ollama (``$OLLAMA_BASE_URL`` or http://localhost:11434/v1); see :func:`compatible_chat`."""
    return compatible_chat("ollama", model, **kwargs)


def vllm_chat(model: str, **kwargs: Any) -> OpenAIChat:
    """A vLLM server (``$VLLM_BASE_URL`` or http://localhost:8000/v1); see :func:`compatible_chat`."""
    return compatible_chat("vllm", model, **kwargs)


def lmstudio_chat(model: str, **kwargs: Any) -> OpenAIChat:
    """LM Studio's local server (``$LMSTUDIO_BASE_URL`` or http://localhost:1234/v1); see :func:`compatible_chat`."""
    return compatible_chat("lmstudio", model, **kwargs)


def llamacpp_chat(model: str, **kwargs: Any) -> OpenAIChat:
    """llama.cpp's server (``$LLAMACPP_BASE_URL`` or http://localhost:8080/v1); see :func:`compatible_chat`."""
    return compatible_chat("llamacpp", model, **kwargs)
