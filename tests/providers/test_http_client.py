"""The remote embedders share the chat clients' HTTP base: one client per event loop, and the limiter.

A real keep-alive (HTTP/1.1) server on 127.0.0.1 answers both the OpenAI-compatible and the
Gemini embedding routes and records how many requests it is serving at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from loopback import JsonHandler, Reply, serve
from memlane import Memory
from memlane.errors import EmbedderError, UsageError
from memlane.providers._http import HttpClient
from memlane.providers.embed.gemini import GeminiEmbedder
from memlane.providers.embed.limits import GLOBAL_EMBED_LIMITER, configure_embed_limits
from memlane.providers.embed.openai import OpenAIEmbedder
from memlane.providers.llm.limits import GLOBAL_LIMITER, RateLimiter

DIM = 8


@dataclass
class State:
    url: str = ""
    delay: float = 0.0
    active: int = 0
    most_at_once: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)


class KeepAliveHandler(JsonHandler):
    protocol_version = "HTTP/1.1"  # connections stay open in the client's pool, as with real APIs
    timeout = 1.0  # an idle kept-alive connection ends after this, so the server can shut down

    def do_POST(self) -> None:
        state: State = self.server.state
        body: Any = self.read_json()
        with state.lock:
            state.requests += 1
            state.active += 1
            state.most_at_once = max(state.most_at_once, state.active)
        try:
            if state.delay:
                state.release.wait(state.delay)
            if self.path.endswith("/embeddings"):
                rows = [{"index": i, "embedding": [1.0] + [0.0] * (DIM - 1)} for i in range(len(body["input"]))]
                self._send(Reply(200, {"data": rows}))
            else:
                self._send(
                    Reply(200, {"embeddings": [{"values": [0.0, 1.0] + [0.0] * (DIM - 2)}] * len(body["requests"])})
                )
        finally:
            with state.lock:
                state.active -= 1


@pytest.fixture
def server() -> Iterator[State]:
    state = State()
    with serve(KeepAliveHandler, state) as url:
        state.url = url
        try:
            yield state
        finally:
            state.release.set()


@pytest.fixture(autouse=True)
def restore_limits() -> Iterator[None]:
    before = (GLOBAL_EMBED_LIMITER.max_concurrency, GLOBAL_EMBED_LIMITER.requests_per_minute)
    yield
    configure_embed_limits(max_concurrency=before[0], requests_per_minute=before[1] or 0)


Make = Callable[..., HttpClient]


@pytest.fixture(params=["openai", "gemini"])
def make(request: pytest.FixtureRequest, server: State) -> Make:
    def build(**kw: Any) -> HttpClient:
        kw.setdefault("dim", DIM)
        kw.setdefault("backoff_base", 0.0)
        kw.setdefault("max_retries", 0)
        if request.param == "openai":
            return OpenAIEmbedder("fake-embed", base_url=server.url + "/v1", **kw)
        return GeminiEmbedder("fake-embed", base_url=server.url + "/v1beta", api_key="k-test", **kw)

    return build


def embed(emb: Any, text: str) -> Any:
    return asyncio.run(emb.embed_batch([text]))


def test_embedder_works_on_a_new_event_loop_after_the_old_one_closed(make: Make) -> None:
    emb = make()
    assert embed(emb, "first loop").shape == (1, DIM)
    # the pooled keep-alive connection belongs to the closed loop: a new loop gets a new client
    assert embed(emb, "second loop").shape == (1, DIM)
    assert embed(emb, "third loop").shape == (1, DIM)
    asyncio.run(emb.aclose())


def test_embedder_shared_by_a_sync_memory_and_asyncio_run(make: Make, tmp_path: Path) -> None:
    emb = make()
    with Memory(tmp_path / "m.db", embedder=emb) as m:  # type: ignore[arg-type]
        m.add("the sync facade's loop embeds this", user_id="u")
        with pytest.raises(UsageError, match="one client per loop"):  # its loop is still open
            embed(emb, "from another loop meanwhile")
        assert m.search("facade", user_id="u")
    # Memory closed: its loop is gone, so asyncio.run may use the embedder now
    assert embed(emb, "after the memory closed").shape == (1, DIM)
    asyncio.run(emb.aclose())


def test_embed_calls_share_the_process_wide_limiter_across_loops(make: Make, server: State) -> None:
    assert make().limiter is GLOBAL_EMBED_LIMITER
    configure_embed_limits(max_concurrency=1)
    server.delay = 0.3
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        emb = make()
        try:
            embed(emb, f"text {i}")
            asyncio.run(emb.aclose())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]  # one event loop each
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    assert server.requests == 3
    assert server.most_at_once == 1  # never two requests at once, although three loops asked
    assert GLOBAL_EMBED_LIMITER.in_flight == 0 and GLOBAL_EMBED_LIMITER.waiting == 0


async def test_embedder_takes_its_own_limiter(make: Make, server: State) -> None:
    own = RateLimiter(max_concurrency=1)
    emb = make(limiter=own)
    server.delay = 60.0  # the first request is held until released: no race with the machine's load
    first = asyncio.ensure_future(emb.embed_batch(["a"]))  # type: ignore[attr-defined]
    while own.in_flight == 0:
        await asyncio.sleep(0.01)
    second = asyncio.ensure_future(emb.embed_batch(["b"]))  # type: ignore[attr-defined]
    while own.waiting == 0 and not second.done():
        await asyncio.sleep(0.01)
    assert own.waiting == 1 and GLOBAL_EMBED_LIMITER.in_flight == 0 and GLOBAL_LIMITER.in_flight == 0
    server.release.set()
    await asyncio.gather(first, second)
    assert server.most_at_once == 1
    await emb.aclose()


async def test_embedder_errors_stay_embedder_errors(make: Make, server: State) -> None:
    emb = make(timeout=0.05)
    server.delay = 2.0
    with pytest.raises(EmbedderError, match="timed out"):
        await emb.embed_batch(["slow"])  # type: ignore[attr-defined]
    server.release.set()
    await emb.aclose()
