"""Service limits: request body size (413), page sizes, and a rate limit per API key (429).

* :class:`Limits` — the numbers (from the settings' ``server:`` block, or defaults).
* :class:`BodySizeLimit` — a pure ASGI middleware: a ``Content-Length`` over the limit is
  refused before anything is read; a body without one (chunked) is counted as it streams and
  refused as soon as it passes the limit, so a huge body is never held in memory. A body that
  has not fully arrived ``body_timeout`` seconds after the app started reading it (a client that
  announced more than it sends, or trickles it) is answered 408 and the connection closed.
* :class:`RateLimiter` — a token bucket per key id: ``rate_per_minute`` requests a minute on
  average, bursts up to ``rate_burst``; over it, :class:`~memlane.errors.RateLimitedError`
  with ``retry_after`` (the ``Retry-After`` header).
* :func:`page_size` — the page size a listing route uses: the caller's ``limit`` checked
  against the cap, or the route's default.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memlane import inputs
from memlane.errors import ConfigError, RateLimitedError

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_PAGE_SIZE",
    "DEFAULT_RATE_PER_MINUTE",
    "BodySizeLimit",
    "Limits",
    "RateLimiter",
    "page_size",
]

#: Largest request body accepted by default: 1 MiB (settings ``server.max_body_bytes``).
DEFAULT_MAX_BODY_BYTES = 1_048_576
#: Seconds a request body may take to arrive once the app reads it (settings ``server.body_timeout``).
DEFAULT_BODY_TIMEOUT = 30.0
#: Largest page a listing returns by default (settings ``server.max_page_size``).
DEFAULT_MAX_PAGE_SIZE = 100
#: The page size of a listing given no ``limit`` (and no route default).
DEFAULT_PAGE_SIZE = 50
#: Requests a minute per API key by default (settings ``server.rate_limit``).
DEFAULT_RATE_PER_MINUTE = 600

#: ``settings.server`` attribute -> :class:`Limits` field.
_SETTING_NAMES = {
    "max_body_bytes": "max_body_bytes",
    "max_page_size": "max_page_size",
    "default_page_size": "default_page_size",
    "rate_limit": "rate_per_minute",
    "rate_burst": "rate_burst",
    "body_timeout": "body_timeout",
}


@dataclass(frozen=True, slots=True)
class Limits:
    """The service's limits.

    Attributes:
        max_body_bytes: largest request body in bytes (0: no limit).
        max_page_size: largest ``limit`` a listing accepts.
        default_page_size: the page size when a listing is given no ``limit``.
        rate_per_minute: requests a minute per API key (0: no rate limit). Requests on a
            key-less (loopback-only) server are not rate limited.
        rate_burst: requests a key may send at once before the rate applies (None: one
            minute's worth, ``rate_per_minute``).
        body_timeout: seconds the whole request body may take to arrive once the app starts
            reading it; slower, it is answered 408 ``request_timeout`` and the connection is
            closed (slow-client protection; 0: no timeout).
    """

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_page_size: int = DEFAULT_MAX_PAGE_SIZE
    default_page_size: int = DEFAULT_PAGE_SIZE
    rate_per_minute: int = DEFAULT_RATE_PER_MINUTE
    rate_burst: int | None = None
    body_timeout: float = DEFAULT_BODY_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_page_size", "default_page_size", "rate_per_minute"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"server limit {name} must be a whole number >= 0, got {value!r}")
        if self.max_page_size < 1 or not 1 <= self.default_page_size <= self.max_page_size:
            raise ConfigError(
                f"server limits: need 1 <= default_page_size ({self.default_page_size}) <= "
                f"max_page_size ({self.max_page_size})"
            )
        burst = self.rate_burst
        if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 1):
            raise ConfigError(f"server limit rate_burst must be a whole number >= 1, got {burst!r}")
        timeout = self.body_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 <= timeout < math.inf:
            raise ConfigError(f"server limit body_timeout must be a number of seconds >= 0, got {timeout!r}")

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        """The limits in ``settings.server`` (:class:`memlane.config.ServerSettings`:
        ``max_body_bytes``, ``max_page_size``, ``rate_limit`` (requests a minute per key),
        ``body_timeout`` and, if present, ``default_page_size`` and ``rate_burst``); a missing or
        None one keeps its default."""
        server = getattr(settings, "server", None)
        values: dict[str, Any] = {}
        for setting, name in _SETTING_NAMES.items():
            value = getattr(server, setting, None)
            if value is not None:
                values[name] = value
        if "default_page_size" not in values and "max_page_size" in values:
            values["default_page_size"] = min(DEFAULT_PAGE_SIZE, values["max_page_size"])
        return cls(**values)


def page_size(conn: HTTPConnection | Limits | None, limit: int | None, *, default: int | None = None) -> int:
    """The page size of a listing: ``limit`` when given (1..the cap), else ``default`` (or the
    configured default page size), never above the cap.

    Args:
        conn: the request (its ``app.state.limits`` are used), or the :class:`Limits` directly
            (None: the defaults).
        limit: the caller's ``limit`` (None: not given).
        default: the route's own default page size.

    Raises:
        InvalidInputError: ``limit`` is not a whole number from 1 to the cap (400).
    """
    limits = conn if isinstance(conn, Limits) else getattr(getattr(conn, "app", None), "state", None)
    if not isinstance(limits, Limits):
        limits = getattr(limits, "limits", None)
    if not isinstance(limits, Limits):
        limits = Limits()
    if limit is None:
        return min(default if default is not None else limits.default_page_size, limits.max_page_size)
    return inputs.integer(limit, "limit", 1, limits.max_page_size)


class RateLimiter:
    """A token bucket per key id: ``per_minute`` requests a minute, bursts up to ``burst``.

    Args:
        per_minute: the sustained rate (>= 1).
        burst: the bucket's size (None: ``per_minute``).
        clock: seconds, monotonic (tests pass a fake clock).
    """

    def __init__(
        self, per_minute: int, burst: int | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if per_minute < 1:
            raise ConfigError(f"rate_per_minute must be >= 1, got {per_minute}")
        self.per_minute = per_minute
        self.burst = float(burst if burst is not None else per_minute)
        self._rate = per_minute / 60.0  # tokens a second
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def check(self, key: str) -> None:
        """Take one request from ``key``'s bucket.

        Raises:
            RateLimitedError: the bucket is empty; ``retry_after`` is the whole seconds until
                it holds a request again.
        """
        with self._lock:
            now = self._clock()
            tokens, at = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self._rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                wait = max(1, math.ceil((1.0 - tokens) / self._rate))
                raise RateLimitedError(
                    f"rate limit: {self.per_minute} requests a minute for this API key; retry in {wait} s",
                    retry_after=wait,
                )
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > 10_000:
                self._prune(now)

    def _prune(self, now: float) -> None:
        full = [k for k, (tokens, at) in self._buckets.items() if tokens + (now - at) * self._rate >= self.burst]
        for k in full:
            del self._buckets[k]


class _BodyTooLarge(Exception):
    """Raised from the wrapped ``receive`` when the streamed body passes the limit."""


class _BodyTimeout(Exception):
    """Raised from the wrapped ``receive`` when the body did not arrive in time."""


class BodySizeLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with 413
    ``{"error": {"code": "payload_too_large", ...}}``, and bodies slower than ``timeout``
    seconds with 408 ``{"error": {"code": "request_timeout", ...}}``.

    A ``Content-Length`` over the limit is answered before the body is read. Otherwise the body
    is counted as the app reads it; past the limit the read fails, whatever the app was
    answering is dropped and the 413 goes out instead (nothing the app did with a partial body
    is acknowledged; routes read the whole body before acting). The same holds for a body that
    has not fully arrived ``timeout`` seconds after the app's first read (e.g. a
    ``Content-Length: 100`` with 12 bytes sent): 408, and the connection is closed.

    Args:
        max_bytes: the largest body (0: no limit).
        timeout: seconds for the whole body (0 or None: no timeout).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (self.max_bytes or self.timeout):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and self.max_bytes:
                try:
                    length = int(value)
                except ValueError:
                    length = -1  # the server rejects a bad Content-Length itself
                if length > self.max_bytes:
                    await self._refuse(send, 413)
                    return
        received = 0
        refused: int | None = None  # the status that replaces the app's answer
        body_done = False
        deadline: float | None = None
        started = False

        async def limited_receive() -> Message:
            nonlocal received, refused, body_done, deadline
            if refused is not None:
                raise _BodyTooLarge if refused == 413 else _BodyTimeout
            if body_done or self.timeout is None:
                message = await receive()  # after the body: e.g. waiting for the disconnect
            else:
                if deadline is None:
                    deadline = anyio.current_time() + self.timeout
                with anyio.move_on_after(deadline - anyio.current_time()) as waited:
                    message = await receive()
                if waited.cancelled_caught:
                    refused = 408
                    raise _BodyTimeout
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if not message.get("more_body", False):
                    body_done = True
                if self.max_bytes and received > self.max_bytes:
                    refused = 413
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused is not None and not started:
                return  # the app's answer to a cut-off body is replaced by the 413 / 408
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if refused is None or started:
                raise
        if refused is not None and not started:
            await self._refuse(send, refused)

    async def _refuse(self, send: Send, status: int) -> None:
        if status == 413:
            error = {
                "code": "payload_too_large",
                "message": f"the request body is larger than this server's limit of {self.max_bytes} bytes",
                "limit": self.max_bytes,
            }
        else:
            error = {
                "code": "request_timeout",
                "message": f"the request body did not arrive within {self.timeout:g} s (it is shorter than its "
                "Content-Length, or too slow); the connection is closed",
                "timeout": self.timeout,
            }
        body = json.dumps({"error": error}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
