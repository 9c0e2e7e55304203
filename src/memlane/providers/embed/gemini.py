"""Embeddings from the Google Gemini API (``models/<model>:batchEmbedContents``).

::

    GeminiEmbedder()                                  # gemini-embedding-001, 3072 dims
    GeminiEmbedder(dim=768, task_type="RETRIEVAL_DOCUMENT")

The key comes from ``api_key=``, ``$GEMINI_API_KEY`` or ``$GOOGLE_API_KEY`` and is sent in the
``x-goog-api-key`` header (never in the URL). Needs the ``gemini`` extra
(``pip install 'memlane[gemini]'``), which only installs httpx; importing this module never
fails without it, creating an embedder does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from memlane.errors import ConfigError, DimensionMismatchError, EmbedderError
from memlane.providers._http import HttpClient
from memlane.providers.embed.base import Matrix, check_matrix, normalize
from memlane.providers.embed.limits import GLOBAL_EMBED_LIMITER

if TYPE_CHECKING:
    from memlane.providers.llm.limits import RateLimiter

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"

#: Default output sizes of Gemini embedding models.
KNOWN_DIMS: dict[str, int] = {
    "gemini-embedding-001": 3072,
    "text-embedding-004": 768,
    "embedding-001": 768,
}


class GeminiEmbedder(HttpClient):
    """Embedder for the Gemini API.

    Args:
        model: model name, with or without the ``models/`` prefix.
        api_key: default ``$GEMINI_API_KEY``, then ``$GOOGLE_API_KEY``.
        base_url: API root.
        dim: when given it is sent as ``outputDimensionality`` (truncated vectors; memlane
            re-normalises them). When None: the model's default size (3072 for
            gemini-embedding-001); for an unknown model ``dim`` is ``0`` until the first
            successful :meth:`embed_batch` sets it.
        task_type: optional ``taskType`` such as ``RETRIEVAL_DOCUMENT``,
            ``RETRIEVAL_QUERY``, ``SEMANTIC_SIMILARITY``.
        batch_size: texts per request (the API accepts at most 100).
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
        model: str = "gemini-embedding-001",
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        dim: int | None = None,
        task_type: str | None = None,
        batch_size: int = 100,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._setup_http(
            "gemini",
            timeout=timeout,
            max_retries=max_retries,
            backoff_base=backoff_base,
            limiter=limiter if limiter is not None else GLOBAL_EMBED_LIMITER,
        )
        model = model.removeprefix("models/")
        if not model:
            raise ConfigError("GeminiEmbedder needs a model name, e.g. 'gemini-embedding-001'")
        if dim is not None and dim < 1:
            raise ConfigError(f"dim must be a positive integer, got {dim}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        key = api_key if api_key is not None else os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        if not key:
            raise ConfigError("No key found - set GEMINI_API_KEY (or GOOGLE_API_KEY) or pass api_key=")
        self._api_key = key

        self.model = model
        self.name = f"gemini:{model}"
        #: what the model reads, in characters (2,048 tokens at ~3 characters each): longer texts
        #: are embedded in windows (:mod:`memlane.providers.embed.windows`)
        self.max_input_chars = 6_000
        self.base_url = base_url.rstrip("/")
        self._output_dim = dim
        self.dim: int = dim if dim is not None else KNOWN_DIMS.get(model, 0)
        self.task_type = task_type.upper() if task_type else None
        self.batch_size = batch_size

    def __repr__(self) -> str:  # never show the key
        return f"GeminiEmbedder(model={self.model!r}, dim={self.dim}, task_type={self.task_type!r})"

    async def embed_batch(self, texts: list[str]) -> Matrix:
        """Embed ``texts`` in requests of ``batch_size``; float32 ``(n, dim)``, rows normalised.

        Empty strings (rejected by the API) are sent as a single space.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [await self._embed_one(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    async def _embed_one(self, texts: list[str]) -> Matrix:
        requests: list[dict[str, Any]] = []
        for text in texts:
            req: dict[str, Any] = {
                "model": f"models/{self.model}",
                "content": {"parts": [{"text": text or " "}]},
            }
            if self.task_type:
                req["taskType"] = self.task_type
            if self._output_dim is not None:
                req["outputDimensionality"] = self._output_dim
            requests.append(req)
        data = await self._post(
            f"{self.base_url}/models/{self.model}:batchEmbedContents",
            {"requests": requests},
            {"Content-Type": "application/json", "x-goog-api-key": self._api_key},
        )
        matrix = self._parse(data, len(texts))
        if self.dim == 0 and matrix.shape[1] > 0:  # unknown model: the first answer fixes it
            self.dim = int(matrix.shape[1])
        check_matrix(matrix, len(texts), self.dim, self.name)
        return normalize(matrix)

    def _parse(self, data: dict[str, Any], n: int) -> Matrix:
        items = data.get("embeddings")
        if not isinstance(items, list):
            raise EmbedderError(f"{self.name}: response has no 'embeddings' list - check base_url", retryable=False)
        if len(items) != n:
            raise EmbedderError(f"{self.name}: asked for {n} embeddings, got {len(items)}", retryable=False)
        try:
            rows = [np.asarray(item["values"], dtype=np.float32) for item in items]
        except (TypeError, ValueError, KeyError) as exc:
            raise EmbedderError(f"{self.name}: malformed embeddings in response ({exc})", retryable=False) from None
        if any(r.ndim != 1 for r in rows):
            raise EmbedderError(f"{self.name}: an embedding is not a flat list of numbers", retryable=False)
        lengths = {len(r) for r in rows}
        if len(lengths) > 1:
            raise DimensionMismatchError(
                f"{self.name} returned vectors of different sizes {sorted(lengths)}",
                expected=self.dim or None,
            )
        return np.stack(rows)
