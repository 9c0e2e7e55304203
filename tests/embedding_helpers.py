"""Embedding-queue test helpers shared by the queue tests and the agent-attack tests."""

from __future__ import annotations

import asyncio

from memlane import AsyncMemory
from memlane.errors import EmbedderError
from memlane.providers.embed.base import Matrix
from memlane.providers.embed.hashing import HashEmbedder
from memlane.retrieval.hybrid import RetrievalConfig


class Recording:
    """The "hash" embedder, recording every batch; optionally held at a gate, or failing."""

    def __init__(self, *, gated: bool = False, failures: int = 0) -> None:
        self.inner = HashEmbedder(64)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.calls: list[list[str]] = []
        self.started = asyncio.Event()  # set on the first call
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.failures = failures

    async def embed_batch(self, texts: list[str]) -> Matrix:
        self.started.set()
        await self.gate.wait()
        if self.failures > 0:
            self.failures -= 1
            raise EmbedderError("embedding service unavailable (test)")
        self.calls.append(list(texts))
        return await self.inner.embed_batch(texts)

    async def aclose(self) -> None:
        await self.inner.aclose()


KEYWORD_ONLY = RetrievalConfig(vector_weight=0.0)  # searches that never call the (blocked) embedder


async def stored_vector(m: AsyncMemory, fact_id: str, user_id: str) -> list[float] | None:
    return (await m.facts.get_fact(fact_id, m._scope(user_id, None))).embedding  # type: ignore[union-attr]
