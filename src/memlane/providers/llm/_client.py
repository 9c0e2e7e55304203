"""What the remote chat clients share beyond :class:`~memlane.providers._http.HttpClient`:
the message check, :class:`~memlane.errors.LLMError` and the LLM limiter. Private to
:mod:`memlane.providers.llm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlane.errors import InvalidInputError, LLMError
from memlane.providers._http import HttpClient
from memlane.providers.llm.base import ChatMessage
from memlane.providers.llm.limits import GLOBAL_LIMITER, RateLimiter

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


class HttpChatClient(HttpClient):
    """Base of ``OpenAIChat``, ``AnthropicChat`` and ``GeminiChat``: :class:`HttpClient` whose
    requests fail with :class:`~memlane.errors.LLMError` and share
    :data:`~memlane.providers.llm.limits.GLOBAL_LIMITER` unless given their own limiter."""

    _error_cls = LLMError

    def _setup_http(
        self, extra: str, *, timeout: float, max_retries: int, backoff_base: float, limiter: RateLimiter | None
    ) -> None:
        super()._setup_http(
            extra,
            timeout=timeout,
            max_retries=max_retries,
            backoff_base=backoff_base,
            limiter=limiter if limiter is not None else GLOBAL_LIMITER,
        )
