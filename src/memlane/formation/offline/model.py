"""``OfflineModel``: the five formation calls, each answered by its rule module and metered."""

from __future__ import annotations

from pydantic import BaseModel

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
    ExtractionOutput,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
)
from memlane.providers.llm.base import Usage, UsageMeter, estimate_tokens


def _usage(inp: BaseModel, out: BaseModel | str) -> Usage:
    text = out if isinstance(out, str) else out.model_dump_json()
    return Usage(prompt_tokens=estimate_tokens(inp.model_dump_json()), completion_tokens=estimate_tokens(text), calls=1)


class OfflineModel:
    """A :class:`~memlane.formation.model.FormationModel` answered by rules: deterministic, no network.

    One call per method is recorded in :attr:`meter` (tokens are estimates of the
    input and output JSON), so benchmarks count calls the same way as for an LLM.
    """

    name: str = "offline"

    def __init__(self, meter: UsageMeter | None = None) -> None:
        self.meter: UsageMeter = meter if meter is not None else UsageMeter()

    async def aclose(self) -> None:
        """Nothing to release."""

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionOutput:
        out = _extract(inp)
        self.meter.record(self.name, "extract", _usage(inp, out))
        return out

    async def decide(self, inp: DedupInput) -> DedupOutput:
        out = DedupOutput(decisions=[_decide_one(item) for item in inp.items])
        self.meter.record(self.name, "dedup", _usage(inp, out))
        return out

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        out = _reflect(inp)
        self.meter.record(self.name, "reflect", _usage(inp, out))
        return out

    async def consolidate(self, inp: ConsolidationInput) -> str:
        out = _consolidate(inp)
        self.meter.record(self.name, "consolidate", _usage(inp, out))
        return out

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput:
        out = _profile(inp)
        self.meter.record(self.name, "profile", _usage(inp, out))
        return out
