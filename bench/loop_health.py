"""How long memlane's steps hold the event loop: the slowest callbacks, in milliseconds.

Run::

    .venv/bin/python bench/loop_health.py                    # hash and local embedders, 3 rounds
    .venv/bin/python bench/loop_health.py --embedders hash --rounds 5

A duration depends on the machine's load and CPU, so the unit test
(tests/architecture/test_loop_health.py) asserts the mechanism instead (no blocking call on the loop's
thread, a bounded amount of work per iteration of the loop); this script measures what that
means in time. The loop runs in asyncio debug mode with ``slow_callback_duration = 0``, so
asyncio logs ``Executing <Task ...> took 0.012 seconds`` for every callback (one step of a
task, between two awaits); the script keeps the slowest callback of each operation (every
operation runs as a task named after it). Debug mode's own cost (a traceback recorded for
every handle) is removed, as in production.

Scenario per round, on a new user of one SQLite file: ``add`` one text, ``add`` six messages,
two searches, a session of 30 user turns (three sentences each) with agent replies,
``form`` and ``end_session``; then a new memory on a new file: constructor, ``open``, first
``add`` and ``search``, ``close``. The first round is a warm-up (imports, model load) and is
not reported. Prints, per embedder and operation, the slowest callback over the rounds (max)
and the median of each round's slowest (p50), and writes ``bench/results/loop_health.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import statistics
import sys
import tempfile
import traceback
from collections import defaultdict
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from memlane import AsyncMemory, FormationConfig
from memlane.models import Event, EventType

T = TypeVar("T")
TURNS = 30
TEMPLATES = [
    "I'm vegetarian and I live in {city} with my partner {name} and our dog Rex.",
    "Last week I started learning {hobby}; my teacher is called {name}.",
    "My sister {name} moved to {city} in 2021 and works as an architect.",
    "We are planning a camping trip near {city} in August, and I'll bring my {hobby} gear.",
]
NAMES = ["Ana", "Rui", "Lena", "Omar", "Yuki"]
CITIES = ["Porto", "Madrid", "Paris", "Rome", "Oslo"]
HOBBIES = ["guitar", "chess", "pottery", "yoga", "tennis"]


def line(i: int) -> str:
    return TEMPLATES[i % len(TEMPLATES)].format(
        name=NAMES[i % len(NAMES)], city=CITIES[(i // 2) % len(CITIES)], hobby=HOBBIES[(i // 3) % len(HOBBIES)]
    )


class _Callbacks(logging.Handler):
    """Collects ``(task name, seconds)`` from asyncio's "Executing ... took" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        took = re.search(r" took ([0-9.]+) seconds", message)
        if message.startswith("Executing ") and took:
            name = re.search(r"name='([^']*)'", message)
            label = re.sub(r"-[0-9a-f]{32}$", "", name.group(1)) if name else "other"  # memlane-lease-<job>
            self.seen.append((label, float(took.group(1))))


@contextmanager
def timed_callbacks(loop: asyncio.AbstractEventLoop) -> Iterator[list[tuple[str, float]]]:
    handler = _Callbacks()
    logger = logging.getLogger("asyncio")
    level, duration = logger.level, loop.slow_callback_duration
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    extract = asyncio.format_helpers.extract_stack
    asyncio.format_helpers.extract_stack = lambda *a, **k: traceback.StackSummary()  # type: ignore[assignment]
    loop.set_debug(True)
    loop.slow_callback_duration = 0.0
    try:
        yield handler.seen
    finally:
        asyncio.format_helpers.extract_stack = extract  # type: ignore[assignment]
        loop.slow_callback_duration = duration  # the step ending the watch is not reported
        loop.set_debug(False)
        logger.setLevel(level)
        logger.removeHandler(handler)


async def step(label: str, work: Awaitable[T]) -> T:
    async def run() -> T:
        return await work

    return await asyncio.create_task(run(), name=label)


def formation() -> FormationConfig:
    return FormationConfig(background=False, idle_minutes=None, auto_ingest=False, retry_base_seconds=0)


async def scenario(m: AsyncMemory, folder: Path, embedder: str, n: int) -> None:
    user = f"user{n}"
    await step("add one", m.add(line(n), user_id=user))
    await step("add six", m.add([{"role": "user", "content": line(n + k)} for k in range(6)], user_id=user))
    await step("search", m.search(f"where does {NAMES[n % len(NAMES)]} live?", user_id=user))
    await step("search top 5", m.search("what does sam eat", user_id=user, top_k=5))
    await step("create session", m.sessions.create_session(user_ids=[user], session_id=user))
    for i in range(TURNS):
        text = " ".join(line(3 * i + k) for k in range(3))
        await step("add_event", m.add_event(user, Event(type=EventType.USER_MESSAGE, author="Sam", content=text)))
        await step("add_event", m.add_event(user, Event(type=EventType.AGENT_RESPONSE, author="bot", content="Ok")))
    await step("form", m.form(user))
    await step("end_session", m.end_session(user))

    async def construct() -> AsyncMemory:
        return AsyncMemory(folder / f"open{n}.db", embedder=embedder, formation=formation())

    fresh = await step("construct", construct())
    await step("open", fresh.open())
    await step("first add", fresh.add(line(n), user_id="sam"))
    await step("first search", fresh.search("where does sam live", user_id="sam"))
    await step("close", fresh.close())


async def measure(embedder: str, rounds: int) -> dict[str, dict[str, float]]:
    worst: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="memlane-loop-") as tmp:
        folder = Path(tmp)
        async with AsyncMemory(folder / "m.db", embedder=embedder, formation=formation()) as m:
            await scenario(m, folder, embedder, 0)  # warm-up
            for n in range(1, rounds + 1):
                with timed_callbacks(asyncio.get_running_loop()) as seen:
                    await asyncio.sleep(0)
                    await scenario(m, folder, embedder, n)
                    await asyncio.sleep(0)
                per_op: dict[str, float] = defaultdict(float)
                for name, seconds in seen:
                    if not name.startswith("Task-"):
                        per_op[name] = max(per_op[name], seconds)
                for name, seconds in per_op.items():
                    worst[name].append(seconds)
    return {
        name: {"max_ms": round(1000 * max(v), 2), "p50_ms": round(1000 * statistics.median(v), 2)}
        for name, v in sorted(worst.items())
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embedders", default="hash,local", help="comma-separated (default: hash,local)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "loop_health.json")
    args = ap.parse_args()
    results = {e: asyncio.run(measure(e, args.rounds)) for e in args.embedders.split(",")}
    print("| embedder | operation | slowest callback max (ms) | p50 of rounds (ms) |")
    print("|---|---|---:|---:|")
    for embedder, ops in results.items():
        for name, r in ops.items():
            print(f"| {embedder} | {name} | {r['max_ms']} | {r['p50_ms']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rounds": args.rounds, "results": results}, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
