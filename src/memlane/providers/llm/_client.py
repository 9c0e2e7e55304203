"""Plumbing shared by the remote chat clients: settings checks, one httpx client per event
loop, and ``aclose``. Private to :mod:`memlane.providers.llm`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from memlane.errors import ConfigError, InvalidInputError, LLMError, UsageError
from memlane.providers._http import post_json, require_httpx
from memlane.providers.llm.base import ChatMessage
from memlane.providers.llm.limits import GLOBAL_LIMITER, RateLimiter

if TYPE_CHECKING:
    import httpx


_ROLES = ("system", "user", "assistant")


def check_message(message: Any, who: str) -> ChatMessage:
    """The message as a :class:`ChatMessage`, or InvalidInputError saying what a message must be."""
    if (
        not isinstance(message, Mapping)
        or message.get("role") not in _ROLES
        or not isinstance(message.get("content"), str)
    ):
        raise InvalidInputError(
            f"{who}: each message must be {{'role': 'system' | 'user' | 'assistant', 'content': str}}, "
            f"got {message!r:.200}"
        )
    return ChatMessage(role=message["role"], content=message["content"])


class HttpChatClient:
    """Base of ``OpenAIChat``, ``AnthropicChat`` and ``GeminiChat``.

    A client is bound to the event loop it is first used on: using it from another loop that
    is still open raises :class:`~memlane.errors.UsageError` (create one client per loop, or
    ``await aclose()`` first) instead of failing inside httpx.
    """

    name: str
    timeout: float
    max_retries: int
    backoff_base: float
    limiter: RateLimiter

    def _setup_http(
        self, extra: str, *, timeout: float, max_retries: int, backoff_base: float, limiter: RateLimiter | None
    ) -> None:
        self._httpx: ModuleType = require_httpx(extra)
        if max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more, got {max_retries}")
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.limiter = limiter if limiter is not None else GLOBAL_LIMITER
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _get_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is not loop:
            if self._client_loop is not None and not self._client_loop.is_closed():
                raise UsageError(
                    f"{self.name}: this client is already used by another event loop; create one client per "
                    "loop, or await aclose() before using it from a new one"
                )
            self._client = None  # its loop is gone, and its connections with it
        if self._client is None:
            self._client = self._httpx.AsyncClient(timeout=self.timeout)
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (a later call opens a new one)."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.aclose()

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """POST under the shared rate limit, with the client's retries; errors are :class:`LLMError`."""
        async with self.limiter:
            return await post_json(
                self._get_client(),
                url,
                json=body,
                headers=headers,
                max_retries=self.max_retries,
                who=self.name,
                backoff_base=self.backoff_base,
                error_cls=LLMError,
            )
