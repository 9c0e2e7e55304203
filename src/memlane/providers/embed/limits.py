"""One process-wide limit on remote embedding calls: how many run at once and how many start per minute.

``OpenAIEmbedder`` and ``GeminiEmbedder`` wrap each HTTP request in ``async with
GLOBAL_EMBED_LIMITER:`` (unless given ``limiter=``), so all of them together, across every
``AsyncMemory``, ``Memory`` and event loop in the process, stay under one budget::

    configure_embed_limits(max_concurrency=2, requests_per_minute=300)

or, before memlane is imported, ``MEMLANE_EMBED_CONCURRENCY=2 MEMLANE_EMBED_RPM=300``
(defaults: 4 at once, no rate limit). It is a :class:`~memlane.providers.llm.limits.RateLimiter`
separate from the chat models' :data:`~memlane.providers.llm.limits.GLOBAL_LIMITER`: providers
meter embeddings apart from chat, and a search's query embedding should not queue behind slow
formation calls. To put both under one budget, pass ``limiter=GLOBAL_LIMITER`` to the embedder.
"""

from __future__ import annotations

from memlane.providers.llm.limits import RateLimiter

#: The limiter every remote embedder uses unless given its own.
GLOBAL_EMBED_LIMITER = RateLimiter.from_env("MEMLANE_EMBED")


def configure_embed_limits(
    *, max_concurrency: int | None = None, requests_per_minute: float | None = None
) -> RateLimiter:
    """Set the process-wide embedding limits (``None`` keeps a value; ``requests_per_minute=0`` removes the rate limit).

    Returns :data:`GLOBAL_EMBED_LIMITER`. The starting values come from
    ``$MEMLANE_EMBED_CONCURRENCY`` (default 4) and ``$MEMLANE_EMBED_RPM`` (default: no rate limit).
    """
    GLOBAL_EMBED_LIMITER.configure(max_concurrency=max_concurrency, requests_per_minute=requests_per_minute)
    return GLOBAL_EMBED_LIMITER
