"""One engine for the agent surface, whether the app holds an :class:`~memlane.AsyncMemory` or
the sync :class:`~memlane.Memory` facade.

The engine lives on one event loop: the caller's for an ``AsyncMemory``, the facade's private
loop thread for a ``Memory``. :class:`Binding` runs the agent surface's coroutines on that
loop: awaited directly, or handed to the facade's loop thread (from async code through a
worker thread, so the caller's loop is never blocked; from sync code by blocking on it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from memlane import inputs
from memlane._portal import LoopThread
from memlane.errors import ConfigError, InvalidInputError, UsageError
from memlane.memory import AsyncMemory
from memlane.models import agent_namespace
from memlane.sync import Memory

T = TypeVar("T")

#: What the agent surface accepts as its memory service.
MemoryLike = AsyncMemory | Memory


class Binding:
    """The engine (or None: memory off) and, for a sync facade, the loop thread it runs on."""

    def __init__(self, memory: MemoryLike | None) -> None:
        self.engine: AsyncMemory | None
        self.portal: LoopThread | None
        if memory is None:
            self.engine, self.portal = None, None
        elif isinstance(memory, Memory):
            self.engine, self.portal = memory.engine, memory._portal
        elif isinstance(memory, AsyncMemory):
            self.engine, self.portal = memory, None
        else:
            raise InvalidInputError(
                f"memory must be a memlane AsyncMemory, a memlane Memory or None, got {inputs.show(memory)}"
            )

    def require(self, what: str) -> AsyncMemory:
        """The engine, or a :class:`ConfigError` naming ``what`` needed it."""
        if self.engine is None:
            raise ConfigError(
                f"{what} needs a memory service, and none is configured (built with memory=None): pass an "
                "AsyncMemory or Memory"
            )
        return self.engine

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the engine's loop."""
        if self.portal is None:
            return await coro
        return await asyncio.to_thread(self.portal.call, coro)

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Block on ``coro`` on the sync facade's loop thread (sync callers only). With no
        memory service at all, ``coro`` must not need a loop (it is stepped here once)."""
        if self.engine is None:
            try:
                coro.send(None)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            coro.close()
            raise UsageError("this call needs an event loop; await its async form instead")
        if self.portal is None:
            coro.close()
            raise UsageError(
                "the *_sync methods need the sync memlane.Memory; with an AsyncMemory await the async methods"
            )
        return self.portal.call(coro)


class Identity:
    """Whose memory the agent surface reads and writes: fixed by the app, never by the model."""

    def __init__(self, user_id: str, agent_id: str | None, session_id: str | None, app: str) -> None:
        self.user_id = inputs.identifier(user_id, "user_id")
        self.agent_id = inputs.optional_id(agent_id, "agent_id")
        self.session_id = inputs.optional_id(session_id, "session_id")
        self.app = inputs.identifier(app, "app")
        #: The agent namespace memories of this app / agent live under (as formation writes them).
        self.namespace = agent_namespace(self.app, self.agent_id)

    def __repr__(self) -> str:
        return (
            f"Identity(user_id={self.user_id!r}, agent_id={self.agent_id!r}, session_id={self.session_id!r}, "
            f"app={self.app!r})"
        )
