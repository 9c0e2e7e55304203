"""Who is calling: API keys bound to a tenant, optionally to a user and to read-only.

Skeleton (issue 9): the :class:`Principal` shape and the :func:`authorize` rule the routes
use. The key store, hashing, the FastAPI dependency and rate limits land with the auth work.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request.

    Attributes:
        tenant: the app the key is bound to; every read and write of the request stays in it.
        user_id: the one user the key may act for (None: any user of the tenant).
        read_only: the key may not write.
        key_id: the key's public id (None: no keys configured, loopback-only server).
    """

    tenant: str
    user_id: str | None = None
    read_only: bool = False
    key_id: str | None = None
