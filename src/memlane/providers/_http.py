"""Shared HTTP plumbing for the remote providers: one client base, one retry loop, one error mapping.

Private to :mod:`memlane.providers`. Every remote client (the chat models in
:mod:`memlane.providers.llm` and the embedders in :mod:`memlane.providers.embed`) derives
from :class:`HttpClient`: settings checks, one httpx client per event loop (a client still
used by another open loop raises :class:`~memlane.errors.UsageError` instead of failing
inside httpx), ``aclose``, and every POST under a process-wide
:class:`~memlane.providers.llm.limits.RateLimiter` through :func:`post_json`, which

* retries 408, 429, 5xx, timeouts and connection errors with exponential backoff plus
  jitter (:func:`backoff_delay`), honouring a ``Retry-After`` header when the server sends one;
* raises the caller's :class:`~memlane.errors.ProviderError` subclass with
  ``retryable=True`` and the last status code once the retries are used up;
* raises it with ``retryable=False`` and the server's own error message on any other
  4xx (and on 3xx, which are not followed);
* never puts a credential in a message: the values of the auth headers passed in are
  redacted from anything the server or httpx says.

httpx is an optional extra, so it is imported lazily: :func:`require_httpx` turns a missing
install into a :class:`~memlane.errors.ConfigError` that names the extra to install.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from memlane.errors import ConfigError, ProviderError, UsageError

if TYPE_CHECKING:
    import httpx

    from memlane.providers.llm.limits import RateLimiter

#: Longest wait we accept from a ``Retry-After`` header (and the backoff ceiling).
MAX_DELAY = 60.0

#: Header names whose values are credentials and must never appear in a message.
_SECRET_HEADERS = frozenset({"authorization", "x-goog-api-key", "api-key", "x-api-key"})


def require_httpx(extra: str) -> ModuleType:
    """Import httpx or raise ConfigError naming the optional extra that provides it."""
    try:
        import httpx
    except ImportError as exc:
        raise ConfigError(f"httpx is not installed; pip install 'memlane[{extra}]'") from exc
    return httpx


def is_retryable_status(status: int) -> bool:
    """True for statuses worth retrying: 408 (timeout), 429 (rate limit) and every 5xx."""
    return status in (408, 429) or status >= 500


def backoff_delay(attempt: int, base: float = 0.5, cap: float = MAX_DELAY) -> float:
    """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0).

    Exponential (``base * 2**attempt``, at most ``cap``) with "equal jitter": half of the
    delay is fixed, the other half random, so concurrent clients spread out. ``base <= 0``
    disables waiting (tests).
    """
    if base <= 0:
        return 0.0
    delay = min(cap, base * (2.0**attempt))
    return delay / 2 + random.uniform(0.0, delay / 2)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Parse a ``Retry-After`` header: delta-seconds or an HTTP date; None when absent/invalid."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def _secrets(headers: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    for key, value in headers.items():
        if key.lower() in _SECRET_HEADERS and value:
            found.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() in ("bearer", "basic", "token"):
                found.append(token.strip())
    # longest first, so a full "Bearer sk-..." is replaced before its token
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret in ``text`` with ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def error_message(response: httpx.Response) -> str:
    """The server's own explanation of a failed request, as short plain text.

    Understands the OpenAI / Gemini shape ``{"error": {"message": ...}}``, Ollama's
    ``{"error": "..."}``, vLLM's ``{"message": ...}`` and FastAPI's ``{"detail": ...}``;
    falls back to the start of the body, then to the reason phrase.
    """
    message: str | None = None
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            inner = err.get("message")
            message = str(inner) if inner else str(err)
        elif err:
            message = str(err)
        else:
            for key in ("message", "detail"):
                if body.get(key):
                    message = str(body[key])
                    break
    if not message:
        message = response.text.strip()
    if not message:
        message = response.reason_phrase or "no details"
    message = " ".join(message.split())
    return message if len(message) <= 500 else message[:497] + "..."


def _hint(status: int) -> str:
    if status in (401, 403):
        return " - check the API key and that it may use this model"
    if status == 404:
        return " - check the model name and base_url"
    if status == 413:
        return " - the request is too large; lower batch_size"
    return ""


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    *,
    json: Mapping[str, Any],
    headers: Mapping[str, str],
    max_retries: int,
    who: str,
    backoff_base: float = 0.5,
    error_cls: type[ProviderError] = ProviderError,
) -> dict[str, Any]:
    """POST ``json`` to ``url`` and return the decoded JSON object of a 2xx response.

    Makes at most ``max_retries + 1`` attempts. ``who`` (e.g. ``"openai:text-embedding-3-small"``)
    starts every error message. Errors are raised as ``error_cls``.
    """
    import httpx

    secrets = _secrets(headers)
    last_problem = "no attempt made"
    last_status: int | None = None
    attempts = max(0, max_retries) + 1
    for attempt in range(attempts):
        retry_after: float | None = None
        try:
            response = await client.post(url, json=json, headers=dict(headers))
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise error_cls(
                redact(f"{who}: bad URL {url!r}: {exc} - check base_url", secrets), retryable=False
            ) from None
        except httpx.TimeoutException as exc:
            last_status = None
            last_problem = f"request timed out ({type(exc).__name__})"
        except httpx.TransportError as exc:
            last_status = None
            last_problem = f"connection failed ({type(exc).__name__}: {exc})"
        else:
            status = response.status_code
            if 200 <= status < 300:
                try:
                    data: Any = response.json()
                except ValueError:
                    raise error_cls(
                        f"{who}: HTTP {status} but the body is not JSON - check base_url",
                        status_code=status,
                        retryable=False,
                    ) from None
                if not isinstance(data, dict):
                    raise error_cls(
                        f"{who}: expected a JSON object, got {type(data).__name__} - check base_url",
                        status_code=status,
                        retryable=False,
                    )
                return data
            message = redact(error_message(response), secrets)
            if not is_retryable_status(status):
                raise error_cls(
                    f"{who}: HTTP {status}: {message}{_hint(status)}",
                    status_code=status,
                    retryable=False,
                )
            last_status = status
            last_problem = f"HTTP {status}: {message}"
            retry_after = parse_retry_after(response.headers.get("retry-after"))
        if attempt + 1 >= attempts:
            break
        delay = retry_after if retry_after is not None else backoff_delay(attempt, backoff_base)
        await asyncio.sleep(min(delay, MAX_DELAY))
    raise error_cls(
        redact(
            f"{who}: {last_problem} (gave up after {attempts} attempt{'s' if attempts != 1 else ''}); "
            "the service is busy or unreachable - try again later",
            secrets,
        ),
        status_code=last_status,
        retryable=True,
    )


async def _close_with_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Closes ``client`` when finalised: by :meth:`HttpClient.aclose`, or by its event loop's
    ``shutdown_asyncgens()`` (which ``asyncio.run`` calls before closing the loop), so a client
    left open when its loop ends does not leak its kept-alive connections."""
    try:
        yield
    finally:
        await client.aclose()


class HttpClient:
    """Base of the remote clients: ``OpenAIChat``, ``AnthropicChat``, ``GeminiChat``,
    ``OpenAIEmbedder`` and ``GeminiEmbedder``.

    A client is bound to the event loop it is first used on. Using it from another loop
    while that first loop is still open raises :class:`~memlane.errors.UsageError` (create
    one client per loop, or ``await aclose()`` first); once the first loop is closed (an
    ``asyncio.run`` that ended, a closed ``Memory``) the next loop simply gets a new
    connection pool. Every POST holds a slot of :attr:`limiter` through its retries.
    Subclasses call :meth:`_setup_http` in ``__init__`` and set :attr:`_error_cls`.
    """

    #: The :class:`~memlane.errors.ProviderError` subclass raised for failed requests.
    _error_cls: ClassVar[type[ProviderError]] = ProviderError

    name: str
    timeout: float
    max_retries: int
    backoff_base: float
    limiter: RateLimiter

    def _setup_http(
        self, extra: str, *, timeout: float, max_retries: int, backoff_base: float, limiter: RateLimiter
    ) -> None:
        """Check the common settings; ``extra`` names the optional dependency that installs httpx."""
        self._httpx: ModuleType = require_httpx(extra)
        if max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more, got {max_retries}")
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.limiter = limiter
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._closer: AsyncGenerator[None, None] | None = None

    async def _get_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is not loop:
            if self._client_loop is not None and not self._client_loop.is_closed():
                raise UsageError(
                    f"{self.name}: this client is already used by another event loop; create one client per "
                    "loop, or await aclose() before using it from a new one"
                )
            # its loop is gone: _close_with_loop closed it when that loop shut down
            self._client, self._closer = None, None
        if self._client is None:
            client = self._httpx.AsyncClient(timeout=self.timeout)
            closer = _close_with_loop(client)
            await closer.__anext__()  # now the loop tracks it and finalises it on shutdown
            self._client, self._client_loop, self._closer = client, loop, closer
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (a later call opens a new one).

        From any event loop: a client whose loop has closed was closed with it; one whose
        loop is still running elsewhere is closed on that loop.
        """
        client, loop, closer = self._client, self._client_loop, self._closer
        self._client, self._client_loop, self._closer = None, None, None
        if client is None or closer is None:
            return
        if loop is None or loop is asyncio.get_running_loop():
            await closer.aclose()
        elif not loop.is_closed() and loop.is_running():
            future = asyncio.run_coroutine_threadsafe(closer.aclose(), loop)
            await asyncio.wait_for(asyncio.wrap_future(future), timeout=10.0)

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """POST under :attr:`limiter`, with the client's retries; errors are :attr:`_error_cls`."""
        async with self.limiter:
            return await post_json(
                await self._get_client(),
                url,
                json=body,
                headers=headers,
                max_retries=self.max_retries,
                who=self.name,
                backoff_base=self.backoff_base,
                error_cls=self._error_cls,
            )
