"""Running engine coroutines for whichever memory an integration was given: the one helper
the agent surface (:mod:`memlane.agent`) and the framework adapters (:mod:`memlane.adapters`)
share.

The engine, :class:`~memlane.AsyncMemory`, lives on one event loop: the application's own for
an ``AsyncMemory``, the facade's private loop thread for a sync :class:`~memlane.Memory`.
:class:`Binding` runs a coroutine of that engine on that loop:

* from async code (:meth:`Binding.run`): an ``AsyncMemory``'s coroutine is awaited directly; a
  ``Memory``'s is handed to its loop thread with :meth:`Memory.arun`, which never blocks the
  caller's loop (cancelling the caller cancels the coroutine);
* from sync code (:meth:`Binding.run_sync`): a ``Memory``'s coroutine blocks on its loop thread
  (:meth:`Memory.run`); an ``AsyncMemory``'s is handed to the loop the binding last saw it used
  on, from another thread while that loop runs (sync tool functions and LangGraph's sync nodes
  run on worker threads of an async app). A sync call made on the engine's own loop would wait
  for itself forever: it raises :class:`~memlane.errors.UsageError` instead.

Nothing here reaches into the facade: :meth:`Memory.run` / :meth:`Memory.arun` are the public
way onto its loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from memlane import inputs
from memlane.errors import ConfigError, InvalidInputError, UsageError
from memlane.memory import AsyncMemory
from memlane.sync import Memory

T = TypeVar("T")

#: What the agent surface and the adapters accept as their memory.
MemoryLike = AsyncMemory | Memory

#: The default :class:`UsageError` text of a sync call that cannot run.
SYNC_HINT = (
    "this blocking call needs the sync memlane.Memory, or an AsyncMemory whose event loop runs in another thread; "
    "on that loop, in async code, await the async methods instead"
)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Binding:
    """One memory (or none), and how to run its engine's coroutines (see the module docstring).

    Args:
        memory: an :class:`AsyncMemory`, a sync :class:`Memory`, or (``allow_none``) None:
            memory off.
        allow_none: accept None (the agent surface: tools that do nothing without memory).
        who: names the caller in the error for a wrong ``memory``.
        sync_hint: the :class:`UsageError` text of a sync call that cannot run.
    """

    def __init__(
        self, memory: MemoryLike | None, *, allow_none: bool = False, who: str = "memory", sync_hint: str = SYNC_HINT
    ) -> None:
        self.engine: AsyncMemory | None
        self.memory = memory
        self._facade: Memory | None = None
        if memory is None and allow_none:
            self.engine = None
        elif isinstance(memory, Memory):
            self.engine, self._facade = memory.engine, memory
        elif isinstance(memory, AsyncMemory):
            self.engine = memory
        else:
            accepted = (
                "a memlane AsyncMemory, a memlane Memory or None" if allow_none else "a memlane AsyncMemory or Memory"
            )
            raise InvalidInputError(f"{who} must be {accepted}, got {inputs.show(memory)}")
        self._sync_hint = sync_hint
        #: The loop an AsyncMemory was last used on (made in async code, or seen by :meth:`run`).
        self._loop: asyncio.AbstractEventLoop | None = _running_loop() if self._facade is None else None

    @property
    def is_sync(self) -> bool:
        """True for a sync :class:`Memory` (its engine runs on the facade's loop thread)."""
        return self._facade is not None

    def require(self, what: str) -> AsyncMemory:
        """The engine, or a :class:`ConfigError` naming ``what`` needed it."""
        if self.engine is None:
            raise ConfigError(
                f"{what} needs a memory service, and none is configured (built with memory=None): pass an "
                "AsyncMemory or Memory"
            )
        return self.engine

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the engine's loop, from async code, without blocking the caller's loop."""
        if self._facade is not None:
            return await self._facade.arun(coro)
        if self.engine is not None:
            self._loop = asyncio.get_running_loop()
        return await coro

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Block on ``coro`` on the engine's loop (sync callers). With no memory at all, ``coro``
        must not need a loop (it is stepped here once)."""
        if self.engine is None:
            try:
                coro.send(None)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            coro.close()
            raise UsageError("this call needs an event loop; await its async form instead")
        if self._facade is not None:
            return self._facade.run(coro)
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running() or _running_loop() is loop:
            coro.close()
            raise UsageError(self._sync_hint)
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
