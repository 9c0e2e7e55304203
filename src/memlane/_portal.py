"""A private event loop on a daemon thread, for the sync facade (anyio's blocking portal
idea): sync callers submit coroutines and block on the result. The caller's own event loop,
if any, is never touched.

``os.fork()`` copies the process but not its threads: in a child the loop thread does not
exist, and a call would wait for it forever. The portal remembers the process that created
it and refuses calls from any other with a :class:`~memlane.errors.UsageError`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from memlane.errors import UsageError

T = TypeVar("T")


class Meanwhile(Protocol):
    """Work the calling thread does while the loop runs its coroutine (:meth:`LoopThread.call`)."""

    def run(self) -> None: ...

    def close(self) -> None: ...


class LoopThread:
    """Runs one event loop forever on a background thread until :meth:`stop`."""

    def __init__(self, name: str = "memlane-loop") -> None:
        self.pid = os.getpid()
        #: A :meth:`call` with a timeout did not finish: the loop is blocked, do not join it.
        self.stuck = False
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        try:
            self._loop.run_forever()
        finally:  # still on this thread: the caller's own loop (if any) is never used
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def forked(self) -> bool:
        """True in a process forked after this portal was created (its loop thread is not here)."""
        return os.getpid() != self.pid

    def call(
        self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None, meanwhile: Meanwhile | None = None
    ) -> T:
        """Run ``coro`` on the private loop and return its result (exceptions propagate).
        With ``timeout``, a coroutine still running after that many seconds is cancelled,
        :attr:`stuck` is set and TimeoutError raised (used only at interpreter exit).
        ``meanwhile``: work for this thread while the loop runs ``coro`` (``run()``, then
        ``close()`` once ``coro`` is done or was not started)."""
        try:
            return self._call(coro, timeout, meanwhile)
        finally:
            if meanwhile is not None:
                meanwhile.close()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None, meanwhile: Meanwhile | None) -> T:
        if self.forked:
            coro.close()
            raise UsageError(
                f"this Memory was created in process {self.pid}; this is process {os.getpid()}, forked from it, "
                "where its event-loop thread does not exist. Create a new Memory after fork (or before it in "
                "each worker, e.g. in a post-fork hook)"
            )
        if threading.current_thread() is self._thread:
            coro.close()
            raise UsageError("the sync memlane API was called from its own event loop; use AsyncMemory")
        if self._loop.is_closed():
            coro.close()
            raise UsageError("this Memory is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        if meanwhile is not None:
            meanwhile.run()
        if timeout is None:
            return future.result()
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self.stuck = True
            raise TimeoutError(f"the memlane loop did not finish within {timeout:g} s") from None

    async def call_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the private loop from another event loop without blocking it: an
        async framework (an ADK ``Runner``) driving a sync ``Memory``'s engine. Cancelling the
        caller cancels ``coro``. Called on the private loop itself, ``coro`` is awaited there."""
        if self.forked or self._loop.is_closed():
            coro.close()
            raise UsageError("this Memory is closed, or was created in another process; create a new Memory")
        if threading.current_thread() is self._thread:  # already on the engine's loop: nothing to hand over
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent; nothing to do in a forked child)."""
        if self.forked or self._loop.is_closed() or not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
