"""What both Redis stores share: opening a client, running Lua scripts, decoding replies,
turning redis-py's errors into memlane's, and exact microsecond timestamps."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
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


async def connect(location: RedisLocation) -> Redis:
    """A client for ``location`` that answered a PING.

    Raises:
        ConfigError: redis-py refuses the URL or one of its parameters.
        StorageError: the server cannot be reached.
    """
    try:
        client = Redis.from_url(location.url)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"bad Redis URL {location.redacted}: {exc}") from None
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

    def register(self, source: str) -> AsyncScript:
        return self.client.register_script(source)

    async def run(self, script: AsyncScript, *args: object) -> Any:
        self.check_open()
        try:
            return await script(keys=[], args=[a if isinstance(a, str | bytes) else str(a) for a in args])
        except RedisError as exc:
            raise StorageError(f"{self.what}: Redis failed: {exc}") from exc

    async def call(self, *command: object) -> Any:
        """One plain command."""
        self.check_open()
        try:
            return await self.client.execute_command(*command)  # type: ignore[no-untyped-call]
        except RedisError as exc:
            raise StorageError(f"{self.what}: Redis failed: {exc}") from exc

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
