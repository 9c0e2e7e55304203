"""OpenAI-compatible, Anthropic and Gemini chat clients against a real local HTTP server.

The fake server (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, random port) implements
``POST /v1/chat/completions``, ``POST /v1/messages`` and
``POST /v1beta/models/<model>:generateContent``, records every request, counts requests in
flight (for the rate limiter), and can be scripted to fail.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from loopback import JsonHandler, Reply, serve
from memlane.errors import ConfigError, InvalidInputError, LLMError, UsageError
from memlane.providers.llm.anthropic import AnthropicChat
from memlane.providers.llm.base import LLM, ChatMessage, Completion, Usage
from memlane.providers.llm.gemini import GeminiChat
from memlane.providers.llm.limits import GLOBAL_LIMITER, RateLimiter, configure_llm_limits
from memlane.providers.llm.openai import OpenAIChat, compatible_chat
from memlane.registry import LLMS, make_llm

SECRET = "sk-test-SECRET-0123456789"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
}
CHAT: list[ChatMessage] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 6 x 7?"},
]

# --------------------------------------------------------------------------- fake server


def record_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds every ``asyncio.sleep`` is asked to wait (it still waits them)."""
    waits: list[float] = []
    real = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        waits.append(float(delay))
        return await real(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return waits


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeState:
    url: str = ""
    script: list[Reply] = field(default_factory=list)  # replies used first, in order
    forever: Reply | None = None  # then this one, every time
    responder: Callable[[Recorded], Reply | None] | None = None  # then this, when it answers
    delay: float = 0.0  # seconds to stall before answering
    requests: list[Recorded] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _last_user(messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        return ""
    content = users[-1].get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in users[-1].get("parts", []))


def openai_reply(body: dict[str, Any]) -> Reply:
    text = '{"answer": 42}' if "response_format" in body else f"ok: {_last_user(body['messages'])}"
    return Reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        },
    )


def anthropic_reply(body: dict[str, Any]) -> Reply:
    if body.get("tools"):
        name = body["tools"][0]["name"]
        content: list[dict[str, Any]] = [
            {"type": "text", "text": "Sure, recording it."},
            {"type": "tool_use", "id": "toolu_1", "name": name, "input": {"answer": 42}},
        ]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": f"ok: {_last_user(body['messages'])}"}]
        stop = "end_turn"
    return Reply(
        200,
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "usage": {"input_tokens": 12, "output_tokens": 5},
        },
    )


def gemini_reply(body: dict[str, Any]) -> Reply:
    config = body.get("generationConfig", {})
    text = '{"answer": 42}' if config.get("responseMimeType") == "application/json" else "ok: "
    if text == "ok: ":
        text += _last_user([{"role": "user", **c} for c in body["contents"] if c["role"] == "user"])
    return Reply(
        200,
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [{"text": "Let me think about it...", "thought": True}, {"text": text}],
                    },
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4, "thoughtsTokenCount": 3},
        },
    )


class Handler(JsonHandler):
    def do_POST(self) -> None:
        state = self.server.state
        body: Any = self.read_json()
        record = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        with state.lock:
            state.requests.append(record)
            scripted = state.script.pop(0) if state.script else state.forever
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if state.delay:
                state.release.wait(state.delay)
            if scripted is None and state.responder is not None:
                scripted = state.responder(record)
        finally:
            with state.lock:  # before answering: the client may start its next call on the reply
                state.in_flight -= 1
        if scripted is not None:
            self._send(scripted)
        elif self.path == "/v1/chat/completions":
            self._send(openai_reply(body))
        elif self.path == "/v1/messages":
            self._send(anthropic_reply(body))
        elif self.path.startswith("/v1beta/models/") and self.path.endswith(":generateContent"):
            self._send(gemini_reply(body))
        else:
            self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))


@pytest.fixture
def server() -> Iterator[FakeState]:
    state = FakeState()
    with serve(Handler, state) as url:
        state.url = url
        try:
            yield state
        finally:
            state.release.set()  # unblock handlers that wait, before the server joins them


ENV_VARS = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_BASE_URL",
    "MEMLANE_LLM_CONCURRENCY",
    "MEMLANE_LLM_RPM",
    *(f"{p}_{suffix}" for p in ("OLLAMA", "VLLM", "LMSTUDIO", "LLAMACPP") for suffix in ("BASE_URL", "API_KEY")),
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    before = (GLOBAL_LIMITER.max_concurrency, GLOBAL_LIMITER.requests_per_minute)
    yield
    configure_llm_limits(max_concurrency=before[0], requests_per_minute=before[1] or 0)


Closer = Callable[[LLM], LLM]


@pytest.fixture
async def track() -> AsyncIterator[Closer]:
    """Register clients to be closed after the test."""
    made: list[LLM] = []

    def add(llm: LLM) -> LLM:
        made.append(llm)
        return llm

    yield add
    for llm in made:
        await llm.aclose()


@pytest.fixture
def make_openai(server: FakeState, track: Closer) -> Callable[..., OpenAIChat]:
    def make(model: str = "fake-chat", **kw: Any) -> OpenAIChat:
        kw.setdefault("base_url", server.url + "/v1")
        kw.setdefault("backoff_base", 0.0)
        llm = OpenAIChat(model, **kw)
        track(llm)
        return llm

    return make


@pytest.fixture
def make_anthropic(server: FakeState, track: Closer) -> Callable[..., AnthropicChat]:
    def make(model: str = "claude-test", **kw: Any) -> AnthropicChat:
        kw.setdefault("base_url", server.url)
        kw.setdefault("backoff_base", 0.0)
        kw.setdefault("api_key", SECRET)
        llm = AnthropicChat(model, **kw)
        track(llm)
        return llm

    return make


@pytest.fixture
def make_gemini(server: FakeState, track: Closer) -> Callable[..., GeminiChat]:
    def make(model: str = "gemini-2.5-flash", **kw: Any) -> GeminiChat:
        kw.setdefault("base_url", server.url)
        kw.setdefault("backoff_base", 0.0)
        kw.setdefault("api_key", SECRET)
        llm = GeminiChat(model, **kw)
        track(llm)
        return llm

    return make


# --------------------------------------------------------------------------- OpenAI-compatible


async def test_openai_request_shape_and_parsing(server: FakeState, make_openai: Any) -> None:
    llm = make_openai(api_key=SECRET)
    assert isinstance(llm, LLM) and llm.name == "openai:fake-chat"
    out = await llm.complete(CHAT, temperature=0.2, max_tokens=50)
    assert out == Completion(
        text="ok: What is 6 x 7?",
        model="openai:fake-chat",
        usage=Usage(prompt_tokens=11, completion_tokens=7, calls=1),
        finish_reason="stop",
    )
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {SECRET}"
    assert req.body == {"model": "fake-chat", "messages": CHAT, "temperature": 0.2, "max_tokens": 50}
    assert SECRET not in repr(llm)


async def test_openai_defaults_omit_optional_fields(server: FakeState, make_openai: Any) -> None:
    await make_openai().complete([{"role": "user", "content": "hi"}], temperature=None)
    [req] = server.requests
    assert req.body == {"model": "fake-chat", "messages": [{"role": "user", "content": "hi"}]}
    assert "authorization" not in req.headers  # custom base_url, no key: no header


async def test_openai_json_schema_response_format(server: FakeState, make_openai: Any) -> None:
    llm = make_openai()
    out = await llm.complete(CHAT, schema=SCHEMA, schema_name="final answer")
    assert json.loads(out.text) == {"answer": 42}
    body = server.requests[0].body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "final_answer", "schema": SCHEMA, "strict": False},
    }
    assert body["messages"] == CHAT  # the schema travels natively, not in the prompt
    assert llm.structured_mode == "json_schema"


async def test_openai_content_parts_reasoning_and_missing_usage(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(
        200,
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "reasoning_content": "The user wants a product. 6*7=42.",
                        "content": [{"type": "text", "text": "forty"}, {"type": "text", "text": "-two"}],
                    },
                    "finish_reason": "stop",
                }
            ]
        },
    )
    out = await make_openai().complete([{"role": "user", "content": "x" * 40}])
    assert out.text == "forty-two"  # reasoning_content is not the answer
    assert out.usage == Usage(prompt_tokens=10, completion_tokens=3, calls=1)  # estimated

    server.forever = Reply(
        200, {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "length"}]}
    )
    out = await make_openai().complete(CHAT)
    assert out.text == "" and out.finish_reason == "length"


async def test_openai_malformed_and_refusal(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(200, {"object": "chat.completion", "choices": []})
    with pytest.raises(LLMError, match="no choices") as info:
        await make_openai().complete(CHAT)
    assert not info.value.retryable
    refusal = {"content": None, "refusal": "I can't help with that."}
    server.forever = Reply(200, {"choices": [{"message": refusal, "finish_reason": "stop"}]})
    with pytest.raises(LLMError, match="refused: I can't help with that"):
        await make_openai().complete(CHAT)
    with pytest.raises(InvalidInputError):
        await make_openai().complete([{"role": "tool", "content": "x"}])
    with pytest.raises(InvalidInputError):
        await make_openai().complete([])


def _rejects(kind: str) -> Callable[[Recorded], Reply | None]:
    """A server that answers 400 to ``response_format`` types listed in ``kind``."""

    def respond(req: Recorded) -> Reply | None:
        fmt = req.body.get("response_format")
        if fmt is not None and fmt["type"] in kind:
            message = f"Invalid parameter: 'response_format' of type '{fmt['type']}' is not supported"
            return Reply(400, {"error": {"message": message}})
        return None

    return respond


async def test_openai_json_schema_400_falls_back_to_json_object(server: FakeState, make_openai: Any) -> None:
    server.responder = _rejects("json_schema")
    llm = make_openai()
    out = await llm.complete(CHAT, schema=SCHEMA, schema_name="answer")
    assert json.loads(out.text) == {"answer": 42}
    assert [r.body.get("response_format", {}).get("type") for r in server.requests] == ["json_schema", "json_object"]
    retry = server.requests[1].body["messages"]
    assert retry[0]["role"] == "system" and retry[0]["content"].startswith("You are terse.\n\n")
    assert json.dumps(SCHEMA, separators=(",", ":")) in retry[0]["content"] and "JSON" in retry[0]["content"]
    assert retry[1:] == CHAT[1:]
    assert llm.structured_mode == "json_object"

    # for the rest of the client's life: straight to JSON mode
    await llm.complete(CHAT, schema=SCHEMA)
    assert len(server.requests) == 3 and server.requests[2].body["response_format"] == {"type": "json_object"}
    # plain calls are unaffected
    await llm.complete(CHAT)
    assert "response_format" not in server.requests[3].body and server.requests[3].body["messages"] == CHAT


async def test_openai_falls_back_to_prompt_only(server: FakeState, make_openai: Any) -> None:
    server.responder = _rejects("json_schema json_object")
    llm = make_openai()
    await llm.complete([{"role": "user", "content": "6 x 7?"}], schema=SCHEMA)
    assert [r.body.get("response_format", {}).get("type") for r in server.requests] == [
        "json_schema",
        "json_object",
        None,
    ]
    last = server.requests[-1].body["messages"]
    assert last[0]["role"] == "system" and "JSON schema" in last[0]["content"]  # inserted: there was none
    assert last[1] == {"role": "user", "content": "6 x 7?"}
    assert llm.structured_mode == "none"


async def test_openai_explicit_mode_does_not_fall_back(server: FakeState, make_openai: Any) -> None:
    server.responder = _rejects("json_schema")
    with pytest.raises(LLMError, match="response_format") as info:
        await make_openai(structured="json_schema").complete(CHAT, schema=SCHEMA)
    assert info.value.status_code == 400 and not info.value.retryable
    assert len(server.requests) == 1

    await make_openai(structured="json_object").complete(CHAT, schema=SCHEMA)
    assert server.requests[-1].body["response_format"] == {"type": "json_object"}
    await make_openai(structured="none").complete(CHAT, schema=SCHEMA)
    assert "response_format" not in server.requests[-1].body
    assert "JSON schema" in server.requests[-1].body["messages"][0]["content"]
    with pytest.raises(ConfigError, match="structured"):
        make_openai(structured="xml")


async def test_openai_drops_unsupported_temperature_and_renames_max_tokens(server: FakeState, make_openai: Any) -> None:
    def respond(req: Recorded) -> Reply | None:
        if "temperature" in req.body:
            message = "Unsupported value: 'temperature' does not support 0.0 with this model. Only the default (1)"
            return Reply(400, {"error": {"message": message}})
        if "max_tokens" in req.body:
            message = "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead"
            return Reply(400, {"error": {"message": message}})
        return None

    server.responder = respond
    llm = make_openai()
    out = await llm.complete(CHAT, max_tokens=99)
    assert out.text == "ok: What is 6 x 7?"
    assert len(server.requests) == 3
    assert server.requests[-1].body == {"model": "fake-chat", "messages": CHAT, "max_completion_tokens": 99}
    await llm.complete(CHAT, max_tokens=99)  # learned for good
    assert len(server.requests) == 4


async def test_openai_429_retry_after_then_success(
    server: FakeState, make_openai: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = Reply(429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "0"})
    server.script = [busy, busy]
    # a huge backoff base proves Retry-After (0 s) is what decides the wait (the waits are
    # recorded, not timed: a duration depends on the machine's load)
    waits = record_sleeps(monkeypatch)
    llm = make_openai(max_retries=3, backoff_base=30.0)
    out = await llm.complete(CHAT)
    assert waits == [0.0, 0.0]
    assert len(server.requests) == 3 and out.text == "ok: What is 6 x 7?"


async def test_openai_5xx_exhausted_is_retryable(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(502, {"error": {"message": "upstream exploded"}})
    with pytest.raises(LLMError) as info:
        await make_openai(max_retries=2).complete(CHAT)
    assert info.value.retryable is True and info.value.status_code == 502
    assert "upstream exploded" in str(info.value)
    assert len(server.requests) == 3  # max_retries + 1


async def test_openai_400_not_retried_with_server_message(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(400, {"error": {"message": "This model's maximum context length is 8192 tokens"}})
    with pytest.raises(LLMError, match="maximum context length is 8192 tokens") as info:
        await make_openai(max_retries=3).complete(CHAT, schema=SCHEMA)
    assert info.value.retryable is False and info.value.status_code == 400
    assert len(server.requests) == 1  # no retry, and no structured-output fallback either


async def test_openai_key_never_in_errors(server: FakeState, make_openai: Any) -> None:
    llm = make_openai(api_key=SECRET, max_retries=1)
    server.forever = Reply(401, {"error": {"message": f"Incorrect API key provided: {SECRET}."}})
    with pytest.raises(LLMError) as info:
        await llm.complete(CHAT)
    assert info.value.status_code == 401 and not info.value.retryable
    assert SECRET not in str(info.value) and "Incorrect API key provided" in str(info.value)
    server.forever = Reply(503, {"error": {"message": f"overloaded for key {SECRET}"}})
    with pytest.raises(LLMError) as info:
        await llm.complete(CHAT)
    assert info.value.retryable and SECRET not in str(info.value)


def test_openai_missing_key_for_official_url(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIChat("gpt-4o-mini")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        make_llm("openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    llm = OpenAIChat("gpt-4o-mini")
    assert llm.base_url == "https://api.openai.com/v1" and SECRET not in repr(llm)


async def test_openai_timeout_is_retryable(server: FakeState, make_openai: Any) -> None:
    server.delay = 2.0
    with pytest.raises(LLMError, match="timed out") as info:
        await make_openai(timeout=0.2, max_retries=1).complete(CHAT)
    assert info.value.retryable and info.value.status_code is None
    assert len(server.requests) == 2


async def test_openai_aclose_idempotent_and_reopens(server: FakeState, make_openai: Any) -> None:
    llm = make_openai()
    await llm.complete(CHAT)
    await llm.aclose()
    await llm.aclose()
    assert (await llm.complete(CHAT)).text.startswith("ok:")


async def test_client_belongs_to_one_event_loop(server: FakeState, make_openai: Any) -> None:
    llm = make_openai()
    await llm.complete(CHAT)
    errors: list[BaseException] = []

    def other_loop() -> None:
        try:
            asyncio.run(llm.complete(CHAT))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_loop)
    thread.start()
    thread.join(10)
    assert len(errors) == 1 and isinstance(errors[0], UsageError)
    assert "one client per loop" in str(errors[0])
    assert GLOBAL_LIMITER.in_flight == 0  # the slot taken on the other loop was given back


# --------------------------------------------------------------------------- local servers / registry


async def test_ollama_spec_needs_no_key(server: FakeState, track: Closer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_BASE_URL", server.url)  # no /v1: added
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # never sent to a local server
    llm = track(make_llm("ollama:llama3.1:8b", backoff_base=0.0))
    assert isinstance(llm, OpenAIChat) and llm.name == "ollama:llama3.1:8b"
    out = await llm.complete(CHAT)
    assert out.model == "ollama:llama3.1:8b"
    [req] = server.requests
    assert req.path == "/v1/chat/completions" and req.body["model"] == "llama3.1:8b"
    assert "authorization" not in req.headers


async def test_local_server_key_from_its_own_env(
    server: FakeState, track: Closer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_BASE_URL", server.url + "/v1/")
    monkeypatch.setenv("VLLM_API_KEY", "vllm-token-123")
    llm = track(make_llm("vllm:Qwen/Qwen2.5-7B-Instruct", backoff_base=0.0))
    await llm.complete(CHAT)
    assert server.requests[0].headers["authorization"] == "Bearer vllm-token-123"
    assert server.requests[0].body["model"] == "Qwen/Qwen2.5-7B-Instruct"


def test_local_server_defaults() -> None:
    expected = {
        "ollama": "http://localhost:11434/v1",
        "vllm": "http://localhost:8000/v1",
        "lmstudio": "http://localhost:1234/v1",
        "llamacpp": "http://localhost:8080/v1",
    }
    for provider, url in expected.items():
        llm = make_llm(f"{provider}:m")
        assert isinstance(llm, OpenAIChat)
        assert (llm.base_url, llm.name, llm._api_key) == (url, f"{provider}:m", None)
    custom = compatible_chat("lmstudio", "m", base_url="http://box:9999/v1", name="mine")
    assert custom.base_url == "http://box:9999/v1" and custom.name == "mine"


def test_make_llm_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(LLMS) == {"openai", "ollama", "vllm", "lmstudio", "llamacpp", "anthropic", "gemini"}
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("GEMINI_API_KEY", SECRET)
    claude = make_llm(" anthropic:claude-3-5-haiku-latest ", max_tokens=512)
    assert isinstance(claude, AnthropicChat) and claude.name == "anthropic:claude-3-5-haiku-latest"
    assert claude.max_tokens == 512
    gem = make_llm("gemini:gemini-2.5-flash")
    assert isinstance(gem, GeminiChat) and gem.name == "gemini:gemini-2.5-flash"
    gpt = make_llm("openai:gpt-4o-mini", api_key=SECRET, timeout=5.0)
    assert isinstance(gpt, OpenAIChat) and gpt.timeout == 5.0
    assert make_llm(gpt) is gpt  # an instance passes through

    for bad in ("offline", "scripted:x", "mistral:large", "gpt-4o-mini"):
        with pytest.raises(ConfigError, match="openai, ollama, vllm, lmstudio, llamacpp, anthropic, gemini"):
            make_llm(bad)
    for bad in ("openai", "ollama:", "anthropic:  "):
        with pytest.raises(ConfigError, match="has no model"):
            make_llm(bad)
    with pytest.raises(ConfigError, match="expected an LLM"):
        make_llm(42)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Anthropic


async def test_anthropic_request_shape_and_parsing(server: FakeState, make_anthropic: Any) -> None:
    llm = make_anthropic(base_url=server.url + "/v1/")  # a trailing /v1 is tolerated
    assert isinstance(llm, LLM) and llm.name == "anthropic:claude-test"
    messages: list[ChatMessage] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello."},
        {"role": "system", "content": "Answer in English."},
        {"role": "user", "content": "What is 6 x 7?"},
        {"role": "assistant", "content": "Let me see."},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Go on."},
    ]
    out = await llm.complete(messages, temperature=0.3)
    assert out == Completion(
        text="ok: Go on.",
        model="anthropic:claude-test",
        usage=Usage(prompt_tokens=12, completion_tokens=5, calls=1),
        finish_reason="end_turn",
    )
    [req] = server.requests
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == SECRET and req.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in req.headers
    assert req.body == {
        "model": "claude-test",
        "max_tokens": 2048,
        "system": "You are terse.\n\nAnswer in English.",
        "messages": [
            {"role": "user", "content": "Hello.\n\nWhat is 6 x 7?"},
            {"role": "assistant", "content": "Let me see."},
            {"role": "user", "content": "Go on."},
        ],
        "temperature": 0.3,
    }
    assert SECRET not in repr(llm)


async def test_anthropic_tool_use_structured_output(server: FakeState, make_anthropic: Any) -> None:
    out = await make_anthropic().complete(CHAT, schema=SCHEMA, schema_name="answer", max_tokens=100, temperature=None)
    assert json.loads(out.text) == {"answer": 42}  # the tool input, not the chatter before it
    assert out.finish_reason == "tool_use"
    body = server.requests[0].body
    assert body["max_tokens"] == 100 and "temperature" not in body
    assert body["tools"] == [
        {
            "name": "answer",
            "description": "Record the answer as structured data matching the input schema.",
            "input_schema": SCHEMA,
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "answer"}


async def test_anthropic_non_object_schema_is_wrapped(server: FakeState, make_anthropic: Any) -> None:
    server.forever = Reply(
        200,
        {
            "content": [{"type": "tool_use", "id": "t", "name": "items", "input": {"value": ["a", "b"]}}],
            "stop_reason": "tool_use",
        },
    )
    schema = {"type": "array", "items": {"type": "string"}}
    out = await make_anthropic().complete(
        [{"role": "system", "content": "List two letters."}], schema=schema, schema_name="items"
    )
    assert json.loads(out.text) == ["a", "b"]
    assert out.usage.calls == 1 and out.usage.prompt_tokens > 0  # estimated: no usage in the reply
    body = server.requests[0].body
    assert body["tools"][0]["input_schema"] == {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
    }
    # only instructions: they become the user turn (the API needs one)
    assert "system" not in body and body["messages"] == [{"role": "user", "content": "List two letters."}]


async def test_anthropic_529_retried_then_exhausted(server: FakeState, make_anthropic: Any) -> None:
    overloaded = Reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server.script = [overloaded, Reply(429, {"type": "error", "error": {"message": "rate"}}, {"retry-after": "0"})]
    out = await make_anthropic(max_retries=2).complete(CHAT)
    assert out.text == "ok: What is 6 x 7?" and len(server.requests) == 3

    server.forever = overloaded
    with pytest.raises(LLMError, match="Overloaded") as info:
        await make_anthropic(max_retries=1).complete(CHAT)
    assert info.value.retryable and info.value.status_code == 529


async def test_anthropic_400_and_key_redaction(server: FakeState, make_anthropic: Any) -> None:
    server.forever = Reply(
        400,
        {"type": "error", "error": {"type": "invalid_request_error", "message": f"bad request for key {SECRET}"}},
    )
    with pytest.raises(LLMError, match="bad request for key") as info:
        await make_anthropic().complete(CHAT)
    assert not info.value.retryable and info.value.status_code == 400
    assert SECRET not in str(info.value) and len(server.requests) == 1


async def test_anthropic_refusal(server: FakeState, make_anthropic: Any) -> None:
    server.forever = Reply(200, {"content": [], "stop_reason": "refusal", "usage": {"input_tokens": 3}})
    with pytest.raises(LLMError, match="refused") as info:
        await make_anthropic().complete(CHAT)
    assert not info.value.retryable


def test_anthropic_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicChat("claude-3-5-haiku-latest")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        make_llm("anthropic:claude-3-5-haiku-latest")
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://proxy.local:9000/")
    llm = AnthropicChat("claude-3-5-haiku-latest")
    assert llm.base_url == "http://proxy.local:9000" and SECRET not in repr(llm)


# --------------------------------------------------------------------------- Gemini


async def test_gemini_request_shape_and_parsing(server: FakeState, make_gemini: Any) -> None:
    llm = make_gemini("models/gemini-2.5-flash")
    assert isinstance(llm, LLM) and llm.name == "gemini:gemini-2.5-flash"
    messages: list[ChatMessage] = [
        *CHAT,
        {"role": "assistant", "content": "42"},
        {"role": "user", "content": "And 6 x 8?"},
        {"role": "user", "content": "Briefly."},
    ]
    out = await llm.complete(messages, temperature=0.1, max_tokens=64)
    assert out.text == "ok: And 6 x 8?\n\nBriefly."  # the thought part is skipped
    assert out.usage == Usage(prompt_tokens=9, completion_tokens=7, calls=1)  # thinking tokens count as output
    assert out.finish_reason == "STOP" and out.model == "gemini:gemini-2.5-flash"
    [req] = server.requests
    assert req.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert req.headers["x-goog-api-key"] == SECRET and SECRET not in req.path
    assert req.body == {
        "contents": [
            {"role": "user", "parts": [{"text": "What is 6 x 7?"}]},
            {"role": "model", "parts": [{"text": "42"}]},
            {"role": "user", "parts": [{"text": "And 6 x 8?\n\nBriefly."}]},
        ],
        "systemInstruction": {"parts": [{"text": "You are terse."}]},
        "generationConfig": {"temperature": 0.1, "maxOutputTokens": 64},
    }


async def test_gemini_structured_output(server: FakeState, make_gemini: Any) -> None:
    out = await make_gemini(base_url=server.url + "/v1beta").complete(CHAT, schema=SCHEMA, temperature=None)
    assert json.loads(out.text) == {"answer": 42}
    assert server.requests[0].body["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseJsonSchema": SCHEMA,
    }
    await make_gemini(schema_field="responseSchema").complete(CHAT, schema=SCHEMA)
    config = server.requests[1].body["generationConfig"]
    assert config["responseSchema"] == SCHEMA and "responseJsonSchema" not in config
    with pytest.raises(ConfigError, match="schema_field"):
        make_gemini(schema_field="schema")


async def test_gemini_blocked_prompt_and_empty_candidates(server: FakeState, make_gemini: Any) -> None:
    server.forever = Reply(200, {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5}})
    with pytest.raises(LLMError, match="blocked \\(SAFETY\\)") as info:
        await make_gemini().complete(CHAT)
    assert not info.value.retryable

    server.forever = Reply(200, {"candidates": []})
    with pytest.raises(LLMError, match="no candidates") as info:
        await make_gemini().complete(CHAT)
    assert not info.value.retryable

    server.forever = Reply(200, {"candidates": [{"finishReason": "RECITATION", "index": 0}]})
    with pytest.raises(LLMError, match="RECITATION") as info:
        await make_gemini().complete(CHAT)
    assert not info.value.retryable

    cut = {"content": {"parts": [{"text": "cut"}]}, "finishReason": "MAX_TOKENS"}
    server.forever = Reply(200, {"candidates": [cut]})
    out = await make_gemini().complete(CHAT)
    assert out.text == "cut" and out.finish_reason == "MAX_TOKENS"
    assert len(server.requests) == 4  # none of these is retried


async def test_gemini_errors_and_key_redaction(server: FakeState, make_gemini: Any) -> None:
    server.forever = Reply(500, {"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}})
    with pytest.raises(LLMError) as info:
        await make_gemini(max_retries=1).complete(CHAT)
    assert info.value.retryable and info.value.status_code == 500 and len(server.requests) == 2

    server.forever = Reply(400, {"error": {"code": 400, "message": f"API key not valid ({SECRET})"}})
    with pytest.raises(LLMError, match="API key not valid") as info:
        await make_gemini().complete(CHAT)
    assert not info.value.retryable and SECRET not in str(info.value)


def test_gemini_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        GeminiChat("gemini-2.5-flash")
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        make_llm("gemini:gemini-2.5-flash")
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    assert GeminiChat("gemini-2.5-flash")._api_key == "g-key"
    monkeypatch.setenv("GEMINI_API_KEY", "gem-key")
    llm = GeminiChat("gemini-2.5-flash")
    assert llm._api_key == "gem-key" and "gem-key" not in repr(llm)
    assert llm.base_url == "https://generativelanguage.googleapis.com"


# --------------------------------------------------------------------------- httpx optional


def test_missing_httpx_gives_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes `import httpx` fail
    with pytest.raises(ConfigError, match=r"pip install 'memlane\[openai\]'"):
        OpenAIChat("m", api_key="k")
    with pytest.raises(ConfigError, match=r"pip install 'memlane\[anthropic\]'"):
        AnthropicChat("m", api_key="k")
    with pytest.raises(ConfigError, match=r"pip install 'memlane\[gemini\]'"):
        GeminiChat("m", api_key="k")


def test_modules_import_without_httpx() -> None:
    code = (
        "import sys; sys.modules['httpx'] = None\n"
        "import memlane.providers.llm.openai, memlane.providers.llm.anthropic, memlane.providers.llm.gemini\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --------------------------------------------------------------------------- rate limiter


async def test_global_limiter_caps_concurrency_across_clients(
    server: FakeState, make_openai: Any, make_anthropic: Any, make_gemini: Any
) -> None:
    configure_llm_limits(max_concurrency=2)
    server.delay = 0.15
    clients: list[LLM] = [make_openai(), make_anthropic(), make_gemini()]
    outs = await asyncio.gather(*(clients[i % 3].complete(CHAT) for i in range(6)))
    assert len(outs) == 6 and len(server.requests) == 6
    assert server.max_in_flight == 2  # never more than two at once, whatever the timing
    assert GLOBAL_LIMITER.in_flight == 0 and GLOBAL_LIMITER.waiting == 0


async def test_limiter_without_cap_lets_all_through(server: FakeState, make_openai: Any) -> None:
    server.delay = 0.15
    llm = make_openai(limiter=RateLimiter(max_concurrency=6))
    await asyncio.gather(*(llm.complete(CHAT) for _ in range(6)))
    assert server.max_in_flight == 6


def test_limiter_shared_by_event_loops_in_threads() -> None:
    limiter = RateLimiter(max_concurrency=2)
    lock = threading.Lock()
    active = peak = done = 0

    async def worker() -> None:
        nonlocal active, peak, done
        for _ in range(5):
            async with limiter:
                with lock:
                    active += 1
                    peak = max(peak, active)
                await asyncio.sleep(0.005)
                with lock:
                    active -= 1
                    done += 1

    async def main() -> None:
        await asyncio.gather(worker(), worker())

    threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert done == 40 and peak == 2
    assert limiter.in_flight == 0 and limiter.waiting == 0


async def test_limiter_requests_per_minute_spacing(monkeypatch: pytest.MonkeyPatch) -> None:
    limiter = RateLimiter(max_concurrency=10, requests_per_minute=1200)  # one start every 50 ms
    starts: list[float] = []

    async def one() -> None:
        async with limiter:
            starts.append(time.monotonic())

    before = time.monotonic()
    await asyncio.gather(*(one() for _ in range(5)))
    # The i-th start is allowed no earlier than i slots after the first: a start recorded late (a
    # loaded machine resuming the task later) only moves it further, so this cannot flake, while
    # pairwise gaps did (a late start followed by an on-time one looks like a short gap).
    offsets = [t - before for t in sorted(starts)]
    assert all(offset >= 0.045 * i for i, offset in enumerate(offsets)), offsets
    limiter.configure(requests_per_minute=0)  # removed: no more spacing
    waits = record_sleeps(monkeypatch)
    await asyncio.gather(*(one() for _ in range(5)))
    assert waits == [] and limiter.requests_per_minute is None  # nobody was made to wait


async def test_limiter_cancelled_waiter_takes_no_slot() -> None:
    limiter = RateLimiter(max_concurrency=1)
    await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0.01)
    assert limiter.waiting == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.waiting == 0
    limiter.release()
    assert limiter.in_flight == 0
    await asyncio.wait_for(limiter.acquire(), 1)  # the slot is free again
    limiter.release()

    # cancelled after the slot was handed over but before it resumed: the slot is passed on
    await limiter.acquire()
    first = asyncio.create_task(limiter.acquire())
    second = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0.01)
    limiter.release()  # hands the slot to `first` (scheduled, not yet run)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)
    assert limiter.in_flight == 1

    # cancelled after it was woken (its future resolved) but before it resumed: it gives the slot back
    third = asyncio.create_task(limiter.acquire())
    fourth = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0.01)
    limiter.release()
    await asyncio.sleep(0)  # runs the wake-up callback, not yet `third` itself
    third.cancel()
    with pytest.raises(asyncio.CancelledError):
        await third
    await asyncio.wait_for(fourth, 1)
    assert limiter.in_flight == 1 and limiter.waiting == 0
    limiter.release()
    assert limiter.in_flight == 0


async def test_limiter_raising_the_cap_wakes_waiters() -> None:
    limiter = RateLimiter(max_concurrency=1)
    await limiter.acquire()
    waiters = [asyncio.create_task(limiter.acquire()) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert limiter.waiting == 2
    limiter.configure(max_concurrency=3)
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert limiter.in_flight == 3
    limiter.configure(max_concurrency=1)  # lowering: takes effect as calls finish
    for _ in range(3):
        limiter.release()
    assert limiter.in_flight == 0 and "max_concurrency=1" in repr(limiter)


def test_limiter_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RateLimiter.from_env().max_concurrency == 4
    monkeypatch.setenv("MEMLANE_LLM_CONCURRENCY", "7")
    monkeypatch.setenv("MEMLANE_LLM_RPM", "90")
    env = RateLimiter.from_env()
    assert env.max_concurrency == 7 and env.requests_per_minute == 90.0
    monkeypatch.setenv("MEMLANE_LLM_RPM", "0")
    assert RateLimiter.from_env().requests_per_minute is None
    monkeypatch.setenv("MEMLANE_LLM_CONCURRENCY", "many")
    with pytest.raises(ConfigError, match="MEMLANE_LLM_CONCURRENCY"):
        RateLimiter.from_env()
    monkeypatch.setenv("MEMLANE_LLM_CONCURRENCY", "2")
    monkeypatch.setenv("MEMLANE_LLM_RPM", "-5")
    with pytest.raises(ConfigError, match="MEMLANE_LLM_RPM"):
        RateLimiter.from_env()

    assert configure_llm_limits(max_concurrency=3, requests_per_minute=60) is GLOBAL_LIMITER
    assert (GLOBAL_LIMITER.max_concurrency, GLOBAL_LIMITER.requests_per_minute) == (3, 60.0)
    configure_llm_limits(max_concurrency=5)  # None keeps the other value
    assert (GLOBAL_LIMITER.max_concurrency, GLOBAL_LIMITER.requests_per_minute) == (5, 60.0)
    with pytest.raises(ConfigError, match="max_concurrency"):
        configure_llm_limits(max_concurrency=0)
    with pytest.raises(ConfigError, match="requests_per_minute"):
        RateLimiter(requests_per_minute=-1)
