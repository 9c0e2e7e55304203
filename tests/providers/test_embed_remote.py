"""OpenAI-compatible and Gemini embedders against a real local HTTP server.

The fake server (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, random port) implements
``POST /v1/embeddings`` and ``POST /v1beta/models/<model>:batchEmbedContents`` with
deterministic, deliberately non-normalised vectors, and can be scripted to fail.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import numpy as np
import pytest

from loopback import JsonHandler, Reply, serve
from memlane.errors import ConfigError, DimensionMismatchError, EmbedderError
from memlane.providers._http import backoff_delay, parse_retry_after, redact
from memlane.providers.embed.base import Embedder, normalize
from memlane.providers.embed.gemini import GeminiEmbedder
from memlane.providers.embed.openai import OpenAIEmbedder

SECRET = "sk-test-SECRET-0123456789"

# --------------------------------------------------------------------------- fake server


def record_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds every ``asyncio.sleep`` is asked to wait (it still waits them)."""
    import asyncio

    waits: list[float] = []
    real = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        waits.append(float(delay))
        return await real(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return waits


def fake_vector(text: str, dim: int) -> list[float]:
    """Deterministic, not normalised (norm about 3*sqrt(dim))."""
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    return [float(x) for x in np.random.default_rng(seed).standard_normal(dim) * 3.0]


def expected(texts: list[str], dim: int) -> np.ndarray[Any, Any]:
    return normalize([fake_vector(t, dim) for t in texts])


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeState:
    url: str = ""
    dim: int = 8  # size returned when the request does not ask for one
    script: list[Reply] = field(default_factory=list)  # replies used first, in order
    forever: Reply | None = None  # then this one, every time
    delay: float = 0.0  # seconds to stall before answering
    base64: bool = False  # OpenAI: send vectors base64-encoded
    requests: list[Recorded] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Handler(JsonHandler):
    def do_POST(self) -> None:
        state = self.server.state
        body: Any = self.read_json()
        with state.lock:
            state.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            scripted = state.script.pop(0) if state.script else state.forever
        if state.delay:
            state.release.wait(state.delay)
        if scripted is not None:
            self._send(scripted)
        elif self.path == "/v1/embeddings":
            self._send(self._openai(state, body))
        elif self.path.startswith("/v1beta/models/") and self.path.endswith(":batchEmbedContents"):
            self._send(self._gemini(state, body))
        else:
            self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))

    @staticmethod
    def _openai(state: FakeState, body: dict[str, Any]) -> Reply:
        dim = body.get("dimensions", state.dim)
        data = []
        for i, text in enumerate(body["input"]):
            vec: Any = fake_vector(text, dim)
            if state.base64:
                vec = base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": vec})
        data.reverse()  # out of order on purpose: the client must sort by index
        return Reply(200, {"object": "list", "data": data, "model": body["model"]})

    def _gemini(self, state: FakeState, body: dict[str, Any]) -> Reply:
        if not self.headers.get("x-goog-api-key"):
            return Reply(403, {"error": {"code": 403, "message": "API key missing", "status": "PERMISSION_DENIED"}})
        out = []
        for req in body["requests"]:
            dim = req.get("outputDimensionality", state.dim)
            out.append({"values": fake_vector(req["content"]["parts"][0]["text"], dim)})
        return Reply(200, {"embeddings": out})


@pytest.fixture
def server() -> Iterator[FakeState]:
    state = FakeState()
    with serve(Handler, state) as url:
        state.url = url
        try:
            yield state
        finally:
            state.release.set()  # unblock handlers that wait, before the server joins them


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def make_openai(server: FakeState) -> AsyncIterator[Callable[..., OpenAIEmbedder]]:
    made: list[OpenAIEmbedder] = []

    def make(model: str = "fake-embed", **kw: Any) -> OpenAIEmbedder:
        kw.setdefault("base_url", server.url + "/v1")
        kw.setdefault("backoff_base", 0.0)
        emb = OpenAIEmbedder(model, **kw)
        made.append(emb)
        return emb

    yield make
    for emb in made:
        await emb.aclose()


@pytest.fixture
async def make_gemini(server: FakeState) -> AsyncIterator[Callable[..., GeminiEmbedder]]:
    made: list[GeminiEmbedder] = []

    def make(model: str = "gemini-embedding-001", **kw: Any) -> GeminiEmbedder:
        kw.setdefault("base_url", server.url + "/v1beta")
        kw.setdefault("backoff_base", 0.0)
        kw.setdefault("api_key", SECRET)
        emb = GeminiEmbedder(model, **kw)
        made.append(emb)
        return emb

    yield make
    for emb in made:
        await emb.aclose()


TEXTS = ["the cat sat", "on the mat", "quantum chromodynamics", "", "zürich café ☕"]

# --------------------------------------------------------------------------- OpenAI


async def test_openai_sorts_by_index_and_normalises(server: FakeState, make_openai: Any) -> None:
    emb = make_openai(dim=8)
    assert isinstance(emb, Embedder)
    assert emb.name == "openai:fake-embed"
    out = await emb.embed_batch(TEXTS[:3])
    assert out.dtype == np.float32 and out.shape == (3, 8)
    np.testing.assert_allclose(out, expected(TEXTS[:3], 8), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    [req] = server.requests
    assert req.path == "/v1/embeddings"
    assert req.body == {"model": "fake-embed", "input": TEXTS[:3], "encoding_format": "float"}
    assert "authorization" not in req.headers  # custom base_url, no key: no header


async def test_openai_empty_text_sent_as_space(server: FakeState, make_openai: Any) -> None:
    out = await make_openai(dim=8).embed_batch(["", "x"])
    assert server.requests[0].body["input"] == [" ", "x"]
    np.testing.assert_allclose(out, expected([" ", "x"], 8), rtol=1e-5, atol=1e-6)


async def test_openai_batching_preserves_order(server: FakeState, make_openai: Any) -> None:
    emb = make_openai(dim=8, batch_size=2)
    texts = ["a", "b", "c", "d", "e"]
    out = await emb.embed_batch(texts)
    assert [r.body["input"] for r in server.requests] == [["a", "b"], ["c", "d"], ["e"]]
    np.testing.assert_allclose(out, expected(texts, 8), rtol=1e-5, atol=1e-6)


async def test_openai_empty_batch_makes_no_request(server: FakeState, make_openai: Any) -> None:
    out = await make_openai(dim=8).embed_batch([])
    assert out.shape == (0, 8) and out.dtype == np.float32
    assert server.requests == []


async def test_openai_429_retry_after_then_success(
    server: FakeState, make_openai: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = Reply(429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "0"})
    server.script = [busy, busy]
    # a huge backoff base proves Retry-After (0 s) is what decides the wait (the waits are
    # recorded, not timed: a duration depends on the machine's load)
    waits = record_sleeps(monkeypatch)
    emb = make_openai(dim=8, max_retries=3, backoff_base=30.0)
    out = await emb.embed_batch(["hello"])
    assert waits == [0.0, 0.0]
    assert len(server.requests) == 3
    np.testing.assert_allclose(out, expected(["hello"], 8), rtol=1e-5, atol=1e-6)


async def test_openai_500_forever_gives_retryable_error(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(500, {"error": {"message": "upstream exploded"}})
    emb = make_openai(dim=8, max_retries=2)
    with pytest.raises(EmbedderError) as info:
        await emb.embed_batch(["hello"])
    assert info.value.retryable is True
    assert info.value.status_code == 500
    assert "upstream exploded" in str(info.value)
    assert len(server.requests) == 3  # max_retries + 1


async def test_openai_400_is_not_retried(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(
        400, {"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid"}}
    )
    emb = make_openai(dim=8, max_retries=3)
    with pytest.raises(EmbedderError) as info:
        await emb.embed_batch(["hello"])
    assert info.value.retryable is False
    assert info.value.status_code == 400
    assert "maximum context length is 8192 tokens" in str(info.value)
    assert len(server.requests) == 1


async def test_openai_ollama_style_error_string(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(404, {"error": 'model "nope" not found, try pulling it first'})
    with pytest.raises(EmbedderError, match="try pulling it first") as info:
        await make_openai("nope", dim=8).embed_batch(["x"])
    assert info.value.status_code == 404 and not info.value.retryable


async def test_openai_wrong_dimension(server: FakeState, make_openai: Any) -> None:
    emb = make_openai(dim=16)  # server answers with 8
    with pytest.raises(DimensionMismatchError) as info:
        await emb.embed_batch(["hello"])
    assert info.value.expected == 16 and info.value.got == 8


async def test_openai_dimension_discovered_for_unknown_model(server: FakeState, make_openai: Any) -> None:
    emb = make_openai()
    assert emb.dim == 0
    out = await emb.embed_batch(["a", "b"])
    assert emb.dim == 8 and out.shape == (2, 8)
    assert "dimensions" not in server.requests[0].body
    server.dim = 5  # the model changed behind our back: detected
    with pytest.raises(DimensionMismatchError):
        await emb.embed_batch(["c"])


async def test_openai_dimensions_sent_only_when_set(server: FakeState, make_openai: Any) -> None:
    small = make_openai("text-embedding-3-small", dim=8)
    out = await small.embed_batch(["a"])
    assert out.shape == (1, 8)
    assert server.requests[-1].body["dimensions"] == 8

    server.dim = 1536
    native = make_openai("text-embedding-3-small")
    assert native.dim == 1536
    assert (await native.embed_batch(["a"])).shape == (1, 1536)
    assert "dimensions" not in server.requests[-1].body

    other = make_openai("nomic-embed-text", dim=1536)  # dim only declares the size here
    await other.embed_batch(["a"])
    assert "dimensions" not in server.requests[-1].body


def test_openai_known_dims() -> None:
    assert OpenAIEmbedder("text-embedding-3-large", api_key="k").dim == 3072
    assert OpenAIEmbedder("text-embedding-ada-002", api_key="k").dim == 1536
    assert OpenAIEmbedder(api_key="k").dim == 1536


async def test_openai_key_sent_as_header_never_in_errors(server: FakeState, make_openai: Any) -> None:
    emb = make_openai(dim=8, api_key=SECRET, max_retries=1)
    await emb.embed_batch(["a"])
    assert server.requests[-1].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in server.requests[-1].path
    assert SECRET not in repr(emb)

    server.forever = Reply(401, {"error": {"message": f"Incorrect API key provided: {SECRET}."}})
    with pytest.raises(EmbedderError) as info:
        await emb.embed_batch(["a"])
    assert info.value.status_code == 401 and not info.value.retryable
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    assert "Incorrect API key provided" in str(info.value)

    server.forever = Reply(503, {"error": {"message": f"overloaded for key {SECRET}"}})
    with pytest.raises(EmbedderError) as info:
        await emb.embed_batch(["a"])
    assert info.value.retryable and SECRET not in str(info.value)


def test_openai_missing_key_for_official_url() -> None:
    with pytest.raises(ConfigError, match="No key found - set OPENAI_API_KEY or pass api_key="):
        OpenAIEmbedder()
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIEmbedder(base_url="https://api.openai.com/v1/")


async def test_openai_no_key_needed_for_custom_base_url(server: FakeState, make_openai: Any) -> None:
    emb = make_openai("nomic-embed-text")  # e.g. Ollama: no key anywhere
    await emb.embed_batch(["a"])
    assert "authorization" not in server.requests[-1].headers


async def test_openai_reads_env(server: FakeState, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    emb = OpenAIEmbedder("fake-embed", backoff_base=0.0)
    try:
        assert (await emb.embed_batch(["a"])).shape == (1, 8)
    finally:
        await emb.aclose()
    assert server.requests[-1].headers["authorization"] == f"Bearer {SECRET}"


async def test_openai_base64_vectors(server: FakeState, make_openai: Any) -> None:
    server.base64 = True
    out = await make_openai(dim=8).embed_batch(["a", "b"])
    np.testing.assert_allclose(out, expected(["a", "b"], 8), rtol=1e-5, atol=1e-6)


async def test_openai_malformed_response(server: FakeState, make_openai: Any) -> None:
    server.forever = Reply(200, {"data": [{"index": 0, "embedding": [1.0, 2.0]}]})
    with pytest.raises(EmbedderError, match="asked for 2 embeddings, got 1") as info:
        await make_openai(dim=2).embed_batch(["a", "b"])
    assert not info.value.retryable
    server.forever = Reply(200, b"<html>not json</html>")
    with pytest.raises(EmbedderError, match="not JSON"):
        await make_openai(dim=2).embed_batch(["a"])


async def test_openai_timeout_is_retried(server: FakeState, make_openai: Any) -> None:
    server.delay = 2.0
    emb = make_openai(dim=8, timeout=0.2, max_retries=1)
    with pytest.raises(EmbedderError, match="timed out") as info:
        await emb.embed_batch(["a"])
    assert info.value.retryable and info.value.status_code is None
    assert len(server.requests) == 2


async def test_openai_connection_error_is_retried() -> None:
    with socket.socket() as sock:  # a port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    emb = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{port}/v1", dim=4, max_retries=2, backoff_base=0.0)
    try:
        with pytest.raises(EmbedderError, match="connection failed") as info:
            await emb.embed_batch(["a"])
    finally:
        await emb.aclose()
    assert info.value.retryable and info.value.status_code is None


async def test_openai_client_reopens_after_aclose(server: FakeState, make_openai: Any) -> None:
    emb = make_openai(dim=8)
    await emb.embed_batch(["a"])
    await emb.aclose()
    await emb.aclose()  # idempotent
    assert (await emb.embed_batch(["b"])).shape == (1, 8)


def test_openai_bad_arguments() -> None:
    with pytest.raises(ConfigError):
        OpenAIEmbedder(api_key="k", batch_size=0)
    with pytest.raises(ConfigError):
        OpenAIEmbedder(api_key="k", dim=0)


# --------------------------------------------------------------------------- Gemini


async def test_gemini_request_shape_and_normalisation(server: FakeState, make_gemini: Any) -> None:
    emb = make_gemini(dim=8, task_type="retrieval_document")
    assert isinstance(emb, Embedder)
    assert emb.name == "gemini:gemini-embedding-001"
    out = await emb.embed_batch(TEXTS)
    sent = [t or " " for t in TEXTS]
    np.testing.assert_allclose(out, expected(sent, 8), rtol=1e-5, atol=1e-6)
    [req] = server.requests
    assert req.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert req.headers["x-goog-api-key"] == SECRET
    assert SECRET not in req.path
    assert req.body["requests"][0] == {
        "model": "models/gemini-embedding-001",
        "content": {"parts": [{"text": "the cat sat"}]},
        "taskType": "RETRIEVAL_DOCUMENT",
        "outputDimensionality": 8,
    }


async def test_gemini_defaults(server: FakeState, make_gemini: Any) -> None:
    server.dim = 3072
    emb = make_gemini("models/gemini-embedding-001")
    assert emb.dim == 3072
    out = await emb.embed_batch(["a"])
    assert out.shape == (1, 3072)
    req = server.requests[-1].body["requests"][0]
    assert "outputDimensionality" not in req and "taskType" not in req


async def test_gemini_batching(server: FakeState, make_gemini: Any) -> None:
    emb = make_gemini(dim=8, batch_size=2)
    texts = ["a", "b", "c", "d", "e"]
    out = await emb.embed_batch(texts)
    assert len(server.requests) == 3
    assert [[r["content"]["parts"][0]["text"] for r in q.body["requests"]] for q in server.requests] == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]
    np.testing.assert_allclose(out, expected(texts, 8), rtol=1e-5, atol=1e-6)


async def test_gemini_retries_then_succeeds(server: FakeState, make_gemini: Any) -> None:
    busy = Reply(429, {"error": {"code": 429, "message": "Resource exhausted"}}, {"Retry-After": "0"})
    server.script = [busy, busy]
    out = await make_gemini(dim=8, backoff_base=30.0).embed_batch(["a"])
    assert out.shape == (1, 8) and len(server.requests) == 3


async def test_gemini_500_forever(server: FakeState, make_gemini: Any) -> None:
    server.forever = Reply(500, {"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}})
    with pytest.raises(EmbedderError) as info:
        await make_gemini(dim=8, max_retries=1).embed_batch(["a"])
    assert info.value.retryable and info.value.status_code == 500
    assert len(server.requests) == 2
    assert SECRET not in str(info.value)


async def test_gemini_400_message_and_no_key_leak(server: FakeState, make_gemini: Any) -> None:
    server.forever = Reply(
        400,
        {
            "error": {
                "code": 400,
                "message": f"API key not valid. Please pass a valid API key. ({SECRET})",
                "status": "INVALID_ARGUMENT",
            }
        },
    )
    with pytest.raises(EmbedderError, match="API key not valid") as info:
        await make_gemini(dim=8).embed_batch(["a"])
    assert not info.value.retryable and info.value.status_code == 400
    assert SECRET not in str(info.value)
    assert len(server.requests) == 1


async def test_gemini_wrong_dimension(server: FakeState, make_gemini: Any) -> None:
    server.forever = Reply(200, {"embeddings": [{"values": [1.0, 2.0, 3.0]}]})
    with pytest.raises(DimensionMismatchError):
        await make_gemini(dim=8).embed_batch(["a"])


def test_gemini_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        GeminiEmbedder()
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    assert GeminiEmbedder()._api_key == "g-key"
    monkeypatch.setenv("GEMINI_API_KEY", "gem-key")
    assert GeminiEmbedder()._api_key == "gem-key"
    assert "gem-key" not in repr(GeminiEmbedder())


def test_gemini_known_dims() -> None:
    assert GeminiEmbedder(api_key="k").dim == 3072
    assert GeminiEmbedder("text-embedding-004", api_key="k").dim == 768
    assert GeminiEmbedder(api_key="k", dim=256).dim == 256
    assert GeminiEmbedder("some-future-model", api_key="k").dim == 0


# --------------------------------------------------------------------------- httpx optional


def test_missing_httpx_gives_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes `import httpx` fail
    with pytest.raises(ConfigError, match=r"pip install 'memlane\[openai\]'"):
        OpenAIEmbedder(api_key="k")
    with pytest.raises(ConfigError, match=r"pip install 'memlane\[gemini\]'"):
        GeminiEmbedder(api_key="k")


def test_modules_import_without_httpx() -> None:
    code = (
        "import sys; sys.modules['httpx'] = None\n"
        "import memlane.providers.embed.openai, memlane.providers.embed.gemini\n"
        "assert 'memlane.providers._http' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --------------------------------------------------------------------------- _http helpers


def test_backoff_delay() -> None:
    assert backoff_delay(3, base=0.0) == 0.0
    for attempt in range(6):
        full = min(60.0, 0.5 * 2**attempt)
        for _ in range(20):
            assert full / 2 <= backoff_delay(attempt, base=0.5) <= full
    assert backoff_delay(50, base=1.0, cap=10.0) <= 10.0


def test_parse_retry_after() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("0") == 0.0
    assert parse_retry_after(" 2.5 ") == 2.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("soon") is None
    now = time.time()
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30, abs=1.5)
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now=now) == 0.0


def test_redact() -> None:
    assert redact(f"bad key {SECRET}!", [SECRET]) == "bad key ***!"
