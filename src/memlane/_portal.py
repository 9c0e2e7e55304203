"""A private event loop on a daemon thread, for the sync facade (anyio's blocking portal
idea): sync callers submit coroutines and block on the result. The caller's own event loop,
if any, is never touched."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from memlane.errors import UsageError

T = TypeVar("T")


class LoopThread:
    """Runs one event loop forever on a background thread until :meth:`stop`."""

    def __init__(self, name: str = "memlane-loop") -> None:
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

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the private loop and return its result (exceptions propagate)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise UsageError("the sync memlane API was called from its own event loop; use AsyncMemory")
        if self._loop.is_closed():
            coro.close()
            raise UsageError("this Memory is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def stop(self) -> None:
        """Stop the loop and join the thread (idempotent)."""
        if self._loop.is_closed() or not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
