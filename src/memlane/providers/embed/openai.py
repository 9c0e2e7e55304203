"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint.

Works with OpenAI itself and with local servers that speak the same API (Ollama, vLLM,
LM Studio, llama.cpp server ...), which need no key::

    OpenAIEmbedder()                                          # OpenAI, key from OPENAI_API_KEY
    OpenAIEmbedder("nomic-embed-text", base_url="http://localhost:11434/v1")   # Ollama

Needs the ``openai`` extra (``pip install 'memlane[openai]'``), which only installs httpx;
importing this module never fails without it, creating an embedder does.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import numpy as np

from memlane.errors import ConfigError, DimensionMismatchError, EmbedderError
from memlane.providers._http import HttpClient
from memlane.providers.embed.base import Matrix, check_matrix, normalize
from memlane.providers.embed.limits import GLOBAL_EMBED_LIMITER

if TYPE_CHECKING:
    from memlane.providers.llm.limits import RateLimiter

DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: Native output sizes of OpenAI's embedding models.
KNOWN_DIMS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def _is_official(base_url: str) -> bool:
    return (urlparse(base_url).hostname or "").lower() == "api.openai.com"


class OpenAIEmbedder(HttpClient):
    """Embedder for the OpenAI embeddings API and compatible servers.

    Args:
        model: model name sent to the server.
        base_url: API root (``.../v1``); default ``$OPENAI_BASE_URL`` or the OpenAI API.
        api_key: bearer key; default ``$OPENAI_API_KEY``. Only required for the official
            OpenAI URL; other servers are called without an ``Authorization`` header.
        dim: vector size. For ``text-embedding-3-*`` models an explicit ``dim`` is sent as
            ``dimensions`` (server-side shortening); for other models it only declares
            what the server returns. When ``dim`` is None the size is known for OpenAI's own
            models; for any other model ``dim`` is ``0`` until the first successful
            :meth:`embed_batch`, which sets it to the size the server returned (later calls
            are checked against it).
        batch_size: texts per request.
        timeout: seconds per HTTP request.
        max_retries: retries after the first attempt on 429, 5xx, timeouts and connection
            errors (exponential backoff with jitter, ``Retry-After`` honoured).
        backoff_base: first backoff delay in seconds (0 disables waiting; for tests).
        limiter: concurrency / rate limit shared with other clients; default
            :data:`~memlane.providers.embed.limits.GLOBAL_EMBED_LIMITER`.

    Like the chat clients, an embedder belongs to the event loop it is first used on while
    that loop is open (see :class:`~memlane.providers._http.HttpClient`).
    """

    _error_cls = EmbedderError

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = 128,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._setup_http(
            "openai",
            timeout=timeout,
            max_retries=max_retries,
            backoff_base=backoff_base,
            limiter=limiter if limiter is not None else GLOBAL_EMBED_LIMITER,
        )
        if not model:
            raise ConfigError("OpenAIEmbedder needs a model name, e.g. 'text-embedding-3-small'")
        if dim is not None and dim < 1:
            raise ConfigError(f"dim must be a positive integer, got {dim}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")

        base = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = base.rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._api_key = key or None
        if self._api_key is None and _is_official(self.base_url):
            raise ConfigError("No key found - set OPENAI_API_KEY or pass api_key=")

        self.model = model
        self.name = f"openai:{model}"
        #: what the model reads, in characters (8,191 tokens at ~3 characters each): longer texts
        #: are embedded in windows (:mod:`memlane.providers.embed.windows`)
        self.max_input_chars = 24_000
        short = model.rsplit("/", 1)[-1]  # "openai/text-embedding-3-small" on routers
        self._send_dimensions = dim is not None and short.startswith("text-embedding-3")
        self.dim: int = dim if dim is not None else KNOWN_DIMS.get(short, 0)
        self.batch_size = batch_size

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r}, dim={self.dim})"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def embed_batch(self, texts: list[str]) -> Matrix:
        """Embed ``texts`` in requests of ``batch_size``; float32 ``(n, dim)``, rows normalised.

        Empty strings (rejected by the OpenAI API) are sent as a single space.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [await self._embed_one(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    async def _embed_one(self, texts: list[str]) -> Matrix:
        body: dict[str, Any] = {
            "model": self.model,
            "input": [t if t else " " for t in texts],
            "encoding_format": "float",
        }
        if self._send_dimensions:
            body["dimensions"] = self.dim
        data = await self._post(f"{self.base_url}/embeddings", body, self._headers())
        matrix = self._parse(data, len(texts))
        if self.dim == 0 and matrix.shape[1] > 0:  # unknown model: the first answer fixes it
            self.dim = int(matrix.shape[1])
        check_matrix(matrix, len(texts), self.dim, self.name)
        return normalize(matrix)

    def _parse(self, data: dict[str, Any], n: int) -> Matrix:
        items = data.get("data")
        if not isinstance(items, list):
            raise EmbedderError(f"{self.name}: response has no 'data' list - check base_url", retryable=False)
        if len(items) != n:
            raise EmbedderError(f"{self.name}: asked for {n} embeddings, got {len(items)}", retryable=False)
        slots: list[np.ndarray[Any, np.dtype[np.float32]] | None] = [None] * n
        try:
            for pos, item in enumerate(items):
                index = int(item.get("index", pos))
                if not 0 <= index < n or slots[index] is not None:
                    raise ValueError(f"bad or repeated index {index}")
                slots[index] = self._vector(item)
        except (TypeError, ValueError, AttributeError, KeyError, binascii.Error) as exc:
            raise EmbedderError(f"{self.name}: malformed embeddings in response ({exc})", retryable=False) from None
        rows = [r for r in slots if r is not None]
        lengths = {len(r) for r in rows}
        if len(lengths) > 1:
            raise DimensionMismatchError(
                f"{self.name} returned vectors of different sizes {sorted(lengths)}",
                expected=self.dim or None,
            )
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)

    @staticmethod
    def _vector(item: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
        emb = item["embedding"]
        if isinstance(emb, str):  # servers that ignore encoding_format and send base64
            return np.frombuffer(base64.b64decode(emb), dtype="<f4").astype(np.float32)
        vec = np.asarray(emb, dtype=np.float32)
        if vec.ndim != 1:
            raise ValueError("an embedding is not a flat list of numbers")
        return vec
