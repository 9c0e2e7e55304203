"""One way to run engine coroutines: :meth:`Memory.run` / :meth:`Memory.arun` on the sync facade,
and :class:`memlane._binding.Binding`, which the agent surface and every adapter use for either
an AsyncMemory or a Memory. From async code the caller's loop is never blocked; from sync code
the call blocks; a sync call on the engine's own loop is a UsageError."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import pytest

import memlane
from memlane import AsyncMemory, InvalidInputError, Memory, UsageError
from memlane._binding import Binding
from memlane.agent.tools import MemoryTools

#: How long a deadlock guard waits before giving up (never reached when the code works).
GUARD_S = 10.0


def _waits_for(flag: threading.Event, seen: list[str]) -> asyncio.Future[str]:
    """A coroutine for the engine's loop that finishes once ``flag`` is set by someone else."""

    async def waiting() -> str:
        seen.append(threading.current_thread().name)
        for _ in range(int(GUARD_S / 0.005)):
            if flag.is_set():
                return "released"
            await asyncio.sleep(0.005)
        return "caller blocked"  # the deadlock guard: the caller's loop never ran its other task

    return waiting()  # type: ignore[return-value]


async def _release_then_await(pending: asyncio.Task[str], flag: threading.Event) -> str:
    await asyncio.sleep(0)  # the task starts handing its coroutine over
    flag.set()  # runs only when the caller's loop is free while the engine works
    return await pending


# --------------------------------------------------------------------------- Memory.run / arun


def test_run_blocks_on_the_loop_thread_and_refuses_its_own_loop(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        m.add("Alice keeps bees", user_id="alice")
        page = m.run(m.engine.list(user_id="alice"))
        assert [f.content for f in page.items] == ["Alice keeps bees"]

        async def nested() -> str:
            assert threading.current_thread().name == "memlane-loop"
            inner = m.engine.stats(user_id="alice")
            with pytest.raises(UsageError, match="own event loop"):
                m.run(inner)  # would wait for itself forever
            return "refused"

        assert m.run(nested()) == "refused"


def test_run_after_close_is_a_usage_error(tmp_path: Path) -> None:
    m = Memory(tmp_path / "m.db", embedder="hash")
    engine = m.engine
    m.close()
    with pytest.raises(UsageError):
        m.run(engine.stats())


async def test_arun_does_not_block_the_callers_loop(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        flag, seen = threading.Event(), []
        pending = asyncio.ensure_future(m.arun(_waits_for(flag, seen)))
        assert await _release_then_await(pending, flag) == "released"
        assert seen == ["memlane-loop"]  # ran on the facade's loop thread, not the caller's


async def test_arun_cancellation_reaches_the_engine_coroutine(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        started, cancelled = threading.Event(), threading.Event()

        async def long_running() -> None:
            started.set()
            try:
                await asyncio.sleep(GUARD_S)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        task = asyncio.ensure_future(m.arun(long_running()))
        assert await asyncio.to_thread(started.wait, GUARD_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(cancelled.wait, GUARD_S)


def test_arun_on_the_loop_thread_awaits_there(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        m.add("Alice keeps bees", user_id="alice")

        async def on_the_loop() -> int:
            page = await m.arun(m.engine.list(user_id="alice"))
            return page.total

        assert m.run(on_the_loop()) == 1


# --------------------------------------------------------------------------- Binding


def test_binding_refuses_what_is_not_a_memory() -> None:
    with pytest.raises(InvalidInputError, match="AsyncMemory or Memory"):
        Binding("memory.db")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="AsyncMemory or Memory"):
        Binding(None)
    assert Binding(None, allow_none=True).engine is None


async def test_binding_over_a_sync_memory_never_blocks_async_callers(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        binding = Binding(m)
        assert binding.is_sync and binding.engine is m.engine
        flag, seen = threading.Event(), []
        pending = asyncio.ensure_future(binding.run(_waits_for(flag, seen)))
        assert await _release_then_await(pending, flag) == "released"
        assert seen == ["memlane-loop"]


def test_binding_over_a_sync_memory_blocks_sync_callers(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash") as m:
        m.add("Alice keeps bees", user_id="alice")
        binding = Binding(m)
        assert binding.run_sync(m.engine.list(user_id="alice")).total == 1
        assert binding.run_sync(m.engine.list(user_id="bob")).total == 0


async def test_binding_over_an_async_memory_from_a_worker_thread(mem: AsyncMemory) -> None:
    """Sync tool functions and LangGraph's sync nodes run on worker threads of an async app:
    their calls go to the loop the memory runs on."""
    await mem.add("Alice keeps bees", user_id="alice")
    binding = Binding(mem)  # made in async code: knows the loop
    loop_thread = threading.current_thread().name

    async def where() -> str:
        return threading.current_thread().name

    assert await asyncio.to_thread(binding.run_sync, where()) == loop_thread
    assert (await asyncio.to_thread(binding.run_sync, mem.list(user_id="alice"))).total == 1
    with pytest.raises(UsageError, match="await the async methods"):
        binding.run_sync(mem.list(user_id="alice"))  # on the memory's own loop: would wait for itself


def test_binding_over_an_async_memory_without_a_running_loop(db_path: Path) -> None:
    binding = Binding(AsyncMemory(db_path, embedder="hash"))

    async def nothing() -> None:
        return None

    with pytest.raises(UsageError, match="await the async methods"):
        binding.run_sync(nothing())


async def test_sync_tools_over_an_async_memory_from_a_worker_thread(mem: AsyncMemory) -> None:
    alice = MemoryTools(mem, user_id="alice")
    bob = MemoryTools(mem, user_id="bob")
    assert (await asyncio.to_thread(alice.remember_sync, "Alice's locker code is 4411"))["status"] == "stored"
    found = await asyncio.to_thread(alice.search_facts_sync, ["locker code"])
    assert [r["content"] for r in found["results"]] == ["Alice's locker code is 4411"]
    assert (await asyncio.to_thread(bob.search_facts_sync, ["locker code"]))["count"] == 0  # never another user's


def test_no_module_reaches_into_the_facades_loop_thread() -> None:
    """Only the facade (sync.py) and the loop thread itself (_portal.py) touch ``._portal``:
    everything else goes through Memory.run / Memory.arun (via Binding)."""
    src = Path(memlane.__file__).parent
    offenders = [
        str(p.relative_to(src))
        for p in sorted(src.rglob("*.py"))
        if p.name not in ("sync.py", "_portal.py") and re.search(r"\._portal\b|LoopThread", p.read_text("utf-8"))
    ]
    assert offenders == []
