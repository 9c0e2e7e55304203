"""CPU work off the event loop.

``asyncio.to_thread`` alone is not enough for pure-Python work: the worker thread starts
running while the loop thread is still finishing the step that submitted it, and the two then
contend for the GIL, so that step can stall for tens of milliseconds. The worker first sleeps
briefly (releasing the GIL) so the loop finishes its step, then computes.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

#: How long a CPU job waits before starting (seconds): enough for the loop to finish its step.
HANDOFF_SECONDS = 0.001


def _after_handoff(call: Callable[[], T]) -> T:
    time.sleep(HANDOFF_SECONDS)
    return call()


async def run_cpu(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` in a worker thread without stalling the event loop."""
    return await asyncio.to_thread(_after_handoff, functools.partial(fn, *args, **kwargs))
