"""What both Redis stores share: opening a client, running Lua scripts, decoding replies,
turning redis-py's errors into memlane's, and exact microsecond timestamps.

A Redis restart costs no failed call once the server is back: the client checks a pooled
connection as it leaves the pool (a connection the server closed is reconnected first; redis-py
skips that check when its maintenance notifications are on, so :func:`client_for` turns them
off), and a read (:meth:`ScriptRunner.call`, a script registered ``idempotent=True``) that still
meets a dropped connection is tried once more on a fresh one, after the pool's idle connections
are dropped. A write is never re-sent: if the connection drops while it runs, it fails with a
:class:`~memlane.errors.StorageError` (503) and may or may not have been applied.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from memlane.errors import ConfigError, StorageError
from memlane.stores.redis.url import RedisLocation

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Lua: the server's clock in whole microseconds, as a number (exact in a double until 2255).
LUA_NOW = """
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function us(x) return string.format('%.0f', x) end
"""


def client_for(location: RedisLocation) -> Redis:
    """A (not yet connected) client for ``location`` whose pool checks each connection as it
    leaves the pool: redis-py's maintenance notifications (a Redis Enterprise feature memlane
    does not use) are turned off, because with them on redis-py hands out a pooled connection
    the server has closed (after a restart) without looking at it first.

    Raises:
        ConfigError: redis-py refuses the URL or one of its parameters.
    """
    options: dict[str, Any] = {}
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # redis-py < 7: no maintenance notifications, the check is always made
        pass
    else:
        options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    try:
        return Redis.from_url(location.url, **options)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"bad Redis URL {location.redacted}: {exc}") from None


async def connect(location: RedisLocation) -> Redis:
    """A client for ``location`` (:func:`client_for`) that answered a PING.

    Raises:
        ConfigError: redis-py refuses the URL or one of its parameters.
        StorageError: the server cannot be reached.
    """
    client = client_for(location)
    try:
        await client.ping()
    except TypeError as exc:  # an unknown query parameter reaches the connection class
        await client.aclose()
        raise ConfigError(f"bad Redis URL {location.redacted}: {exc}") from None
    except RedisError as exc:
        await client.aclose()
        raise StorageError(f"cannot reach Redis at {location.redacted}: {exc}") from None
    return client


def text(value: Any) -> str:
    """A reply as ``str`` (clients with or without ``decode_responses``)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def opt_text(value: Any) -> str | None:
    """``text(value)``, None for a missing value."""
    return None if value is None else text(value)


def pairs(reply: Sequence[Any]) -> dict[str, str]:
    """An ``HGETALL``-style flat ``[field, value, ...]`` reply as a dict of strings."""
    return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply), 2)}


def to_us(when: datetime) -> int:
    """Microseconds since the epoch, exactly."""
    delta = when.astimezone(UTC) - EPOCH if when.tzinfo is not None else when.replace(tzinfo=UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(value: str | int) -> datetime:
    """The aware UTC datetime of a microsecond count."""
    return EPOCH + timedelta(microseconds=int(value))


class ScriptRunner:
    """Registers Lua scripts on a client and runs them, mapping redis-py errors to StorageError."""

    def __init__(self, client: Redis, what: str) -> None:
        self.client = client
        self.what = what
        self.closed = False
        self.retried = 0
        """Reads tried again on a fresh connection after a dropped one (a count)."""
        self._idempotent: set[int] = set()

    def register(self, source: str, *, idempotent: bool = False) -> AsyncScript:
        """A Lua script; ``idempotent``: running it twice does what running it once does (a
        read), so a dropped connection is retried once."""
        script = self.client.register_script(source)
        if idempotent:
            self._idempotent.add(id(script))
        return script

    async def run(self, script: AsyncScript, *args: object) -> Any:
        self.check_open()
        argv = [a if isinstance(a, str | bytes) else str(a) for a in args]
        return await self._attempt(lambda: script(keys=[], args=argv), retry=id(script) in self._idempotent)

    async def call(self, *command: object) -> Any:
        """One plain read command (retried once on a fresh connection after a dropped one)."""
        self.check_open()
        return await self._attempt(lambda: self.client.execute_command(*command), retry=True)  # type: ignore[no-untyped-call]

    async def _attempt(self, send: Callable[[], Awaitable[Any]], *, retry: bool) -> Any:
        try:
            return await send()
        except RedisConnectionError as exc:
            if not retry:
                raise StorageError(f"{self.what}: Redis failed: {exc}") from exc
            error: RedisError = exc
        except RedisError as exc:
            raise StorageError(f"{self.what}: Redis failed: {exc}") from exc
        # The connection was dropped (a restart): the idle ones are as old, drop them too.
        self.retried += 1
        try:
            await self.client.connection_pool.disconnect(inuse_connections=False)
            return await send()
        except RedisError as exc:
            raise StorageError(
                f"{self.what}: Redis failed: {exc} (and before, on an older connection: {error})"
            ) from exc

    def check_open(self) -> None:
        if self.closed:
            raise StorageError(f"this {self.what} is closed; open a new one")


class RedisStore:
    """What both Redis stores share: a script runner on a client, closed with the store when
    the store opened it (``open``); the data stays in Redis."""

    _redis: ScriptRunner
    _owns_client: bool

    async def close(self) -> None:
        """Close the client if this store opened it (idempotent); the data stays in Redis."""
        if self._redis.closed:
            return
        self._redis.closed = True
        if self._owns_client:
            await self._redis.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
