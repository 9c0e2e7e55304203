"""The :class:`FormationModel` contract: the five judgement calls memory formation needs.

Two families implement it:

* :class:`~memlane.formation.prompted.PromptedModel` wraps any chat :class:`~memlane.providers.llm.base.LLM`
  (OpenAI-compatible, Anthropic, Gemini, scripted) with Eden/Gaia-style prompts;
* :class:`~memlane.formation.offline.OfflineModel` (``"offline"``) answers by rules, with no
  model and no network.

The pipeline (``pipeline.py``) owns everything else: embedding, candidate search, guards
against unsafe decisions, atomic writes, retries.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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
from memlane.providers.llm.base import UsageMeter


@runtime_checkable
class FormationModel(Protocol):
    """One call per method (LLM call 1, the dedup call, LLM call 2, consolidation, profile).

    Implementations record each call in ``meter`` under the task names ``extract``,
    ``dedup``, ``reflect``, ``consolidate``, ``profile``. Failures raise
    :class:`~memlane.errors.ProviderError` (the formation job is then retried).
    """

    name: str
    meter: UsageMeter

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionOutput: ...

    async def decide(self, inp: DedupInput) -> DedupOutput: ...

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput: ...

    async def consolidate(self, inp: ConsolidationInput) -> str: ...

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput: ...

    async def aclose(self) -> None: ...
