"""``OfflineModel``: the five formation calls, each answered by its rule module and metered."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

from memlane._cpu import run_cpu
from memlane.formation.offline.claims import _decide_one
from memlane.formation.offline.consolidate import _consolidate
from memlane.formation.offline.extract import _extract
from memlane.formation.offline.profile import _profile
from memlane.formation.offline.reflect import _reflect
from memlane.formation.schemas import (
    ConsolidationInput,
    DedupInput,
    DedupOutput,
    ExtractionInput,
    ExtractionReport,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
    UnreadTurn,
)
from memlane.providers.llm.base import Usage, UsageMeter, estimate_tokens

log = logging.getLogger("memlane.formation.offline")

_In = TypeVar("_In", bound=BaseModel)
_Out = TypeVar("_Out", bound=BaseModel | str)


def _usage(inp: BaseModel, out: BaseModel | str) -> Usage:
    text = out if isinstance(out, str) else out.model_dump_json()
    return Usage(prompt_tokens=estimate_tokens(inp.model_dump_json()), completion_tokens=estimate_tokens(text), calls=1)


def _answer(rules: Callable[[_In], _Out], inp: _In) -> tuple[_Out, Usage]:
    """Run a rule module and estimate the call's tokens (both CPU work, done in a worker thread)."""
    out = rules(inp)
    return out, _usage(inp, out)


def _log_unread(unread: list[UnreadTurn], turns: int) -> None:
    """One line per batch: how many turns were not read, and why (a language other than English: WARNING)."""
    reasons = Counter(u.reason for u in unread)
    foreign = any(u.language for u in unread)
    log.log(
        logging.WARNING if foreign else logging.INFO,
        "memlane: offline formation could not read %d of %d turns (%s)%s",
        len(unread),
        turns,
        ", ".join(f"{reason}: {n}" for reason, n in sorted(reasons.items())),
        "; the offline model reads English only, configure an LLM (FormationConfig.model) for other languages"
        if foreign
        else "",
    )


def _decide(inp: DedupInput) -> DedupOutput:
    return DedupOutput(decisions=[_decide_one(item) for item in inp.items])


class OfflineModel:
    """A :class:`~memlane.formation.model.FormationModel` answered by rules: deterministic, no network.

    One call per method is recorded in :attr:`meter` (tokens are estimates of the
    input and output JSON), so benchmarks count calls the same way as for an LLM.

    The rules are pure CPU work (10-30 ms for a long conversation), so each call runs them
    in a worker thread (``asyncio.to_thread``): the event loop keeps serving other requests
    meanwhile.
    """

    name: str = "offline"

    def __init__(self, meter: UsageMeter | None = None) -> None:
        self.meter: UsageMeter = meter if meter is not None else UsageMeter()

    async def aclose(self) -> None:
        """Nothing to release."""

    async def _call(self, task: str, rules: Callable[[_In], _Out], inp: _In) -> _Out:
        out, usage = await run_cpu(_answer, rules, inp)
        self.meter.record(self.name, task, usage)
        return out

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionReport:
        out = await self._call("extract", _extract, inp)
        if out.unread:
            _log_unread(out.unread, len(inp.conversation))
        return out

    async def decide(self, inp: DedupInput) -> DedupOutput:
        return await self._call("dedup", _decide, inp)

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        return await self._call("reflect", _reflect, inp)

    async def consolidate(self, inp: ConsolidationInput) -> str:
        return await self._call("consolidate", _consolidate, inp)

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput:
        return await self._call("profile", _profile, inp)
