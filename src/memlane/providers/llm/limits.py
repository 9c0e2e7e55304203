"""One process-wide limit on LLM calls: how many run at once and how many start per minute.

Every chat client (:mod:`~memlane.providers.llm.openai`, :mod:`~memlane.providers.llm.anthropic`,
:mod:`~memlane.providers.llm.gemini`) wraps each HTTP call in ``async with GLOBAL_LIMITER:``,
so all of them together, across every :class:`~memlane.AsyncMemory`, ``Memory`` and event
loop in the process, stay under one budget (a call holds its slot through its own retries
and backoff, so a throttled provider is not hammered by the others' calls)::

    configure_llm_limits(max_concurrency=2, requests_per_minute=30)

or, before memlane is imported, ``MEMLANE_LLM_CONCURRENCY=2 MEMLANE_LLM_RPM=30``.
The remote embedders have a limiter of their own (the same class, see
:mod:`memlane.providers.embed.limits`), so a burst of formation calls never holds up the
query embedding of a search.

The limiter is thread-based so one instance serves every event loop (the sync facade runs
its own loop on a background thread): its state is guarded by a :class:`threading.Lock` held
only for a few instructions, and a task that has to wait parks on a future of its *own* loop,
which the releasing task (on whatever loop or thread) resolves with
``call_soon_threadsafe``. Nothing ever blocks an event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from types import TracebackType

from memlane._env import env_positive_int
from memlane.errors import ConfigError

#: Concurrent calls allowed when neither ``configure_llm_limits`` nor ``$MEMLANE_LLM_CONCURRENCY`` says otherwise.
DEFAULT_MAX_CONCURRENCY = 4

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


def _check_concurrency(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_concurrency must be a positive integer, got {value!r}")
    return value


def _check_rpm(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        raise ConfigError(f"requests_per_minute must be a positive number (0 or None: no limit), got {value!r}")
    return float(value) if value > 0 else None


class RateLimiter:
    """A concurrency cap plus an optional start-rate limit, usable from any event loop or thread.

    ``async with limiter:`` waits for one of ``max_concurrency`` slots (first come, first
    served), then, when ``requests_per_minute`` is set, for the next free start time: starts
    are spaced at least ``60 / requests_per_minute`` seconds apart (a token bucket holding
    one token). The slot is held until the block exits; a task cancelled while waiting
    takes nothing.

    Args:
        max_concurrency: calls allowed in flight at once (at least 1).
        requests_per_minute: most calls started per minute; ``None`` or ``0`` for no limit.
    """

    def __init__(
        self, max_concurrency: int = DEFAULT_MAX_CONCURRENCY, requests_per_minute: float | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._max = _check_concurrency(max_concurrency)
        self._rpm = _check_rpm(requests_per_minute)
        self._active = 0
        self._waiters: deque[_Waiter] = deque()
        self._next_start = 0.0  # time.monotonic() before which no call may start

    @classmethod
    def from_env(cls, prefix: str = "MEMLANE_LLM") -> RateLimiter:
        """A limiter configured from ``$<prefix>_CONCURRENCY`` and ``$<prefix>_RPM`` (defaults when unset)."""
        concurrency = env_positive_int(f"{prefix}_CONCURRENCY", DEFAULT_MAX_CONCURRENCY)
        rpm: float | None = None
        raw = os.environ.get(f"{prefix}_RPM", "").strip()
        if raw:
            try:
                rpm = float(raw)
            except ValueError:
                rpm = -1.0
            if rpm != rpm or rpm < 0:
                raise ConfigError(f"{prefix}_RPM must be a number of requests per minute (0: no limit), got {raw!r}")
        return cls(concurrency, rpm)

    def __repr__(self) -> str:
        return (
            f"RateLimiter(max_concurrency={self._max}, requests_per_minute={self._rpm}, "
            f"in_flight={self._active}, waiting={len(self._waiters)})"
        )

    @property
    def max_concurrency(self) -> int:
        """Calls allowed in flight at once."""
        return self._max

    @property
    def requests_per_minute(self) -> float | None:
        """Most calls started per minute (None: no limit)."""
        return self._rpm

    @property
    def in_flight(self) -> int:
        """Slots currently held (can exceed ``max_concurrency`` briefly after it was lowered)."""
        with self._lock:
            return self._active

    @property
    def waiting(self) -> int:
        """Tasks queued for a slot."""
        with self._lock:
            return len(self._waiters)

    def configure(self, *, max_concurrency: int | None = None, requests_per_minute: float | None = None) -> None:
        """Change the limits in place.

        ``None`` leaves a limit as it is; ``requests_per_minute=0`` removes the rate limit.
        Raising ``max_concurrency`` lets queued tasks start at once; lowering it takes effect
        as running calls finish.
        """
        new_max = _check_concurrency(max_concurrency) if max_concurrency is not None else None
        new_rpm = _check_rpm(requests_per_minute) if requests_per_minute is not None else None
        with self._lock:
            if new_max is not None:
                self._max = new_max
            if requests_per_minute is not None:
                self._rpm = new_rpm
                self._next_start = 0.0
            self._fill()

    # ------------------------------------------------------------------ acquire / release

    async def acquire(self) -> None:
        """Wait for a slot (and, with a rate limit, for the next start time). Pair with :meth:`release`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] | None = None
        with self._lock:
            if self._active < self._max and not self._waiters:
                self._active += 1
            else:
                future = loop.create_future()
                self._waiters.append((loop, future))
        if future is not None:
            try:
                await future
            except asyncio.CancelledError:
                self._abandon(loop, future)
                raise
        try:
            await self._pace()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Give a slot back: hand it to the longest-waiting task, or free it."""
        with self._lock:
            if self._active <= self._max:
                while self._waiters:
                    loop, future = self._waiters.popleft()
                    try:
                        loop.call_soon_threadsafe(self._wake, future)
                    except RuntimeError:  # that loop is closed: its task will never run again
                        continue
                    return  # handed over: the number of held slots is unchanged
            self._active -= 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # ------------------------------------------------------------------ internals

    def _fill(self) -> None:
        """Start queued tasks while there are free slots (caller holds the lock)."""
        while self._active < self._max and self._waiters:
            loop, future = self._waiters.popleft()
            try:
                loop.call_soon_threadsafe(self._wake, future)
            except RuntimeError:
                continue
            self._active += 1

    def _wake(self, future: asyncio.Future[None]) -> None:
        """On the waiter's own loop: pass it the slot, or pass the slot on if it was cancelled meanwhile."""
        if future.done():
            self.release()
        else:
            future.set_result(None)

    def _abandon(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
        """A waiting task was cancelled: leave the queue, or give back a slot already handed to it."""
        if future.done() and not future.cancelled():  # woken, then cancelled before it resumed
            self.release()
            return
        # not queued any more means already handed over: _wake (same loop, runs later) passes it on
        with self._lock, contextlib.suppress(ValueError):
            self._waiters.remove((loop, future))

    async def _pace(self) -> None:
        with self._lock:
            if self._rpm is None:
                return
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + 60.0 / self._rpm
        if start > now:
            await asyncio.sleep(start - now)


#: The limiter every LLM client uses unless given its own.
GLOBAL_LIMITER = RateLimiter.from_env()


def configure_llm_limits(
    *, max_concurrency: int | None = None, requests_per_minute: float | None = None
) -> RateLimiter:
    """Set the process-wide LLM limits (``None`` keeps a value; ``requests_per_minute=0`` removes the rate limit).

    Returns :data:`GLOBAL_LIMITER`. The starting values come from ``$MEMLANE_LLM_CONCURRENCY``
    (default 4) and ``$MEMLANE_LLM_RPM`` (default: no rate limit).
    """
    GLOBAL_LIMITER.configure(max_concurrency=max_concurrency, requests_per_minute=requests_per_minute)
    return GLOBAL_LIMITER
