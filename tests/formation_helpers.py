"""A scripted FormationModel for engine tests: per-task queues of answers or exceptions."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from memlane.formation.schemas import (
    ConsolidationInput,
    DedupInput,
    DedupOutput,
    ExtractedFact,
    ExtractionInput,
    ExtractionOutput,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
)
from memlane.providers.llm.base import Usage, UsageMeter


class Brain:
    """FormationModel whose answers tests queue per task.

    ``brain.queue("extract", ["fact a", "fact b"])`` -> next extraction returns those facts.
    An Exception instance in a queue is raised; a callable is called with the input.
    Empty queues give defaults: no facts, ADD for everything, no reflections, a blob that
    lists the reflections, a profile of the facts.
    """

    name = "brain"

    def __init__(self) -> None:
        self.meter = UsageMeter()
        self.queues: dict[str, deque[Any]] = defaultdict(deque)
        self.calls: list[tuple[str, Any]] = []
        self.gate: asyncio.Event | None = None

    def queue(self, task: str, *answers: Any) -> None:
        self.queues[task].extend(answers)

    def count(self, task: str) -> int:
        return sum(1 for t, _ in self.calls if t == task)

    async def _next(self, task: str, inp: Any, default: Callable[[Any], Any]) -> Any:
        self.calls.append((task, inp))
        self.meter.record(self.name, task, Usage(prompt_tokens=10, completion_tokens=5, calls=1))
        answer = self.queues[task].popleft() if self.queues[task] else default
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            answer = answer(inp)
            if asyncio.iscoroutine(answer):
                answer = await answer
        return answer

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionOutput:
        ans = await self._next("extract", inp, lambda _: [])
        if isinstance(ans, ExtractionOutput):
            return ans
        facts = [ExtractedFact(content=f) if isinstance(f, str) else ExtractedFact(**f) for f in ans]
        return ExtractionOutput(facts=facts)

    async def decide(self, inp: DedupInput) -> DedupOutput:
        ans = await self._next("dedup", inp, lambda _: DedupOutput())
        return ans if isinstance(ans, DedupOutput) else DedupOutput.model_validate({"decisions": ans})

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        ans = await self._next("reflect", inp, lambda _: ReflectionOutput())
        return ans if isinstance(ans, ReflectionOutput) else ReflectionOutput.model_validate(ans)

    async def consolidate(self, inp: ConsolidationInput) -> str:
        ans = await self._next(
            "consolidate",
            inp,
            lambda i: "\n".join([f"VERSION: {i.version}", "[NOTES]", *(f"- {r}" for r in i.reflections)]),
        )
        return str(ans)

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput:
        ans = await self._next("profile", inp, lambda i: ProfileOutput(bullets=i.facts[: i.limit]))
        return ans if isinstance(ans, ProfileOutput) else ProfileOutput(bullets=list(ans))

    async def aclose(self) -> None:
        pass
