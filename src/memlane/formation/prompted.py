""":class:`PromptedModel`: the formation model over any chat LLM.

One :func:`~memlane.providers.llm.parsing.generate` call per step (plus one corrective
retry only when the answer is not the JSON asked for), with the prompts of
:mod:`memlane.formation.prompts`. Every call sends ``max_tokens`` (:data:`DEFAULT_MAX_TOKENS`
per step, or the one cap given), so a model that never stops is cut off. The answers are
tidied here (whitespace, empty items, over-long facts and reflections, lists longer than the
schema's ``maxItems``, the prompts' own example statements handed back as if they had been
said, the consolidated blob's header and word limit); safety checks on dedup decisions are
the pipeline's job.
"""

from __future__ import annotations

import logging
import re

from memlane.errors import ConfigError
from memlane.formation import prompts
from memlane.formation.schemas import (
    MAX_FACT_WORDS,
    MAX_FACTS_PER_CALL,
    MAX_PROFILE_BULLETS,
    MAX_REFLECTION_WORDS,
    MAX_REFLECTIONS_PER_LEVEL,
    ConsolidationInput,
    ConsolidationOutput,
    Decision,
    DedupInput,
    DedupOutput,
    ExtractedFact,
    ExtractionInput,
    ExtractionOutput,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
    Turn,
    word_count,
)
from memlane.providers.llm.base import LLM, UsageMeter
from memlane.providers.llm.parsing import generate

log = logging.getLogger("memlane.formation")

_BULLET = re.compile(r"^(?:[-*•]\s+)+")
_HEADER = re.compile(r"^\W*version\s*:?\s*\d*\W*$", re.IGNORECASE)
_SECTION = re.compile(r"^\s*\[[^\[\]]+\]\s*$")

#: Output cap (tokens) of each formation step when the model is given none; consolidation's
#: grows with the scope's word limit (:func:`consolidation_max_tokens`). The answers need far
#: less (a few hundred tokens); the headroom is for reasoning models, whose thinking tokens
#: count against the same cap (OpenAI ``max_completion_tokens``, Gemini ``maxOutputTokens``).
DEFAULT_MAX_TOKENS: dict[str, int] = {"extract": 4096, "dedup": 4096, "reflect": 4096, "profile": 4096}


def consolidation_max_tokens(word_limit: int) -> int:
    """4096, or more for a blob of ``word_limit`` words in JSON (about 2 tokens a word, plus the wrapping)."""
    return max(4096, 2 * max(word_limit, 0) + 256)


def _said(turns: list[Turn]) -> str:
    return "\n".join(t.text for t in turns)


def _drop_examples(items: list[str], examples: tuple[str, ...], said: str, what: str) -> list[str]:
    kept = []
    for item in items:
        if prompts.is_prompt_example(item, examples, said=said):
            log.debug("dropping a %s that is the prompt's own example: %.80s", what, item)
            continue
        kept.append(item)
    return kept


def _clean(text: str | None) -> str:
    """Strip whitespace and a leading list marker (``- ``, ``* ``, ``• ``)."""
    return _BULLET.sub("", (text or "").strip()).strip()


def _clean_list(items: list[str], *, max_words: int | None = None, what: str = "item") -> list[str]:
    out = []
    for raw in items:
        text = _clean(raw)
        if not text:
            continue
        if max_words is not None and word_count(text) > max_words:
            log.debug("dropping a %s of %d words (> %d): %.80s", what, word_count(text), max_words, text)
            continue
        out.append(text)
    return out


def with_header(content: str, version: int) -> str:
    """``content`` starting with the line ``VERSION: {version}`` (added, or a wrong one fixed)."""
    lines = content.strip().splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines and _HEADER.match(lines[0].strip()):
        lines[0] = f"VERSION: {version}"
    else:
        lines.insert(0, f"VERSION: {version}")
    return "\n".join(line.rstrip() for line in lines)


def _drop_empty_sections(body: list[str]) -> list[str]:
    """``body`` without section headings that have no content line before the next heading."""
    out: list[str] = []
    for i, line in enumerate(body):
        if _SECTION.match(line):
            rest = body[i + 1 :]
            nxt = next((j for j, r in enumerate(rest) if _SECTION.match(r)), len(rest))
            if not any(r.strip() for r in rest[:nxt]):
                continue
        out.append(line)
    return out


def trim_to_words(content: str, word_limit: int) -> str:
    """Cut a ``VERSION:`` blob to at most ``word_limit`` words.

    Whole lines are removed from the end of the lowest section (a section whose lines are
    all gone loses its heading too) until the blob fits; only when a single content line is
    left is it cut at a word boundary. The header line is kept.
    """
    if word_count(content) <= word_limit:
        return content
    lines = content.splitlines()
    header, body = lines[:1], lines[1:]

    def total() -> int:
        return sum(word_count(line) for line in header + body)

    while body and total() > word_limit:
        while body and not body[-1].strip():
            body.pop()
        if not body:
            break
        content_lines = [i for i, line in enumerate(body) if line.strip() and not _SECTION.match(line)]
        if not content_lines:
            body.clear()
            break
        last = content_lines[-1]
        if len(content_lines) == 1:
            room = word_limit - total() + word_count(body[last])
            if room > 0:
                words = body[last].split()
                indent = body[last][: len(body[last]) - len(body[last].lstrip())]
                body[last] = indent + " ".join(words[:room])
                break
        del body[last]
        body = _drop_empty_sections(body)
    out = "\n".join(header + body).rstrip()
    if word_count(out) > word_limit:  # only the header is left and even that is too long
        out = " ".join(out.split()[: max(word_limit, 0)])
    return out


class PromptedModel:
    """A :class:`~memlane.formation.model.FormationModel` over any chat LLM.

    Args:
        llm: the chat model (closed by :meth:`aclose`).
        meter: where the calls' token usage is recorded (a fresh meter when None).
        temperature: sampling temperature of every call (None: the provider's default).
        max_tokens: output cap (tokens) of every call; None: :data:`DEFAULT_MAX_TOKENS` per
            step, and :func:`consolidation_max_tokens` of the scope's word limit.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        meter: UsageMeter | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
    ) -> None:
        if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
            raise ConfigError(f"max_tokens must be a positive integer or None, got {max_tokens!r}")
        self.llm = llm
        self.name: str = llm.name
        self.meter = meter if meter is not None else UsageMeter()
        self.temperature = temperature
        self.max_tokens = max_tokens

    def tokens_for(self, task: str, *, word_limit: int | None = None) -> int:
        """The ``max_tokens`` sent with a call of ``task`` (``extract``, ``dedup``, ``reflect``,
        ``consolidate``, ``profile``)."""
        if self.max_tokens is not None:
            return self.max_tokens
        if task == "consolidate":
            return consolidation_max_tokens(word_limit if word_limit is not None else 1200)
        return DEFAULT_MAX_TOKENS[task]

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionOutput:
        """LLM call 1. Facts over 30 words, of a scope the input does not allow, or copied from
        the prompt's examples are dropped; at most ``MAX_FACTS_PER_CALL`` are kept."""
        out = await generate(
            self.llm,
            prompts.extraction_messages(inp),
            ExtractionOutput,
            task="extract",
            meter=self.meter,
            temperature=self.temperature,
            max_tokens=self.tokens_for("extract"),
        )
        allowed = {s for s, ok in (("user", inp.allow_user_scope), ("agent", inp.allow_agent_scope)) if ok}
        said = _said(inp.conversation)
        facts: list[ExtractedFact] = []
        for fact in out.facts[:MAX_FACTS_PER_CALL]:
            content = _clean(fact.content)
            if not content:
                continue
            if prompts.is_prompt_example(content, prompts.EXTRACTION_EXAMPLES, said=said):
                log.debug("dropping a fact that is the prompt's own example: %.80s", content)
                continue
            if word_count(content) > MAX_FACT_WORDS:
                log.debug("dropping a fact of %d words (> %d): %.80s", word_count(content), MAX_FACT_WORDS, content)
                continue
            if fact.scope not in allowed:
                log.debug("dropping a %s-scoped fact (scope not allowed here): %.80s", fact.scope, content)
                continue
            sources = sorted({i for i in fact.sources if 0 <= i < len(inp.conversation)})
            facts.append(ExtractedFact(content=content, scope=fact.scope, sources=sources))
        return ExtractionOutput(facts=facts)

    async def decide(self, inp: DedupInput) -> DedupOutput:
        """The batched dedup call. Decisions are returned as given (tidied), unchecked."""
        out = await generate(
            self.llm,
            prompts.dedup_messages(inp),
            DedupOutput,
            task="dedup",
            meter=self.meter,
            temperature=self.temperature,
            max_tokens=self.tokens_for("dedup"),
        )
        said = "\n".join(text for item in inp.items for text in (item.content, *(c.content for c in item.candidates)))
        decisions = []
        for d in out.decisions[: max(MAX_FACTS_PER_CALL, len(inp.items))]:
            text = (d.text or "").strip() or None
            if text is not None and prompts.is_prompt_example(text, prompts.DEDUP_EXAMPLES, said=said):
                text = None  # an UPDATE without text keeps the new fact's own text
            fact_id = (d.fact_id or "").strip() or None
            decisions.append(Decision(index=d.index, event=d.event, fact_id=fact_id, text=text))
        return DedupOutput(decisions=decisions)

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        """LLM call 2. Reflections over 35 words, or of a disabled level, are dropped; at most
        ``MAX_REFLECTIONS_PER_LEVEL`` per level are kept."""
        out = await generate(
            self.llm,
            prompts.reflection_messages(inp),
            ReflectionOutput,
            task="reflect",
            meter=self.meter,
            temperature=self.temperature,
            max_tokens=self.tokens_for("reflect"),
        )

        def tidy(items: list[str]) -> list[str]:
            return _clean_list(items, max_words=MAX_REFLECTION_WORDS, what="reflection")[:MAX_REFLECTIONS_PER_LEVEL]

        return ReflectionOutput(
            agent=tidy(out.agent) if inp.agent is not None else [],
            user=tidy(out.user) if inp.user is not None else [],
            session=tidy(out.session),
        )

    async def consolidate(self, inp: ConsolidationInput) -> str:
        """The new blob: starts with ``VERSION: {inp.version}``, at most ``inp.word_limit`` words."""
        out = await generate(
            self.llm,
            prompts.consolidation_messages(inp),
            ConsolidationOutput,
            task="consolidate",
            meter=self.meter,
            temperature=self.temperature,
            max_tokens=self.tokens_for("consolidate", word_limit=inp.word_limit),
        )
        content = with_header(out.content.replace("\r\n", "\n"), inp.version)
        trimmed = trim_to_words(content, inp.word_limit)
        if trimmed != content:
            log.debug(
                "%s consolidation trimmed from %d to %d words (limit %d)",
                inp.scope,
                word_count(content),
                word_count(trimmed),
                inp.word_limit,
            )
        return trimmed

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput:
        """The session-start profile: at most ``inp.limit`` bullets, most important first (the
        prompt's own examples dropped unless a stored fact says them)."""
        out = await generate(
            self.llm,
            prompts.profile_messages(inp),
            ProfileOutput,
            task="profile",
            meter=self.meter,
            temperature=self.temperature,
            max_tokens=self.tokens_for("profile"),
        )
        said = "\n".join([*inp.facts, *inp.items, inp.user_name or ""])
        bullets = _drop_examples(_clean_list(out.bullets), prompts.PROFILE_EXAMPLES, said, "profile bullet")
        return ProfileOutput(bullets=bullets[: max(min(inp.limit, MAX_PROFILE_BULLETS), 0)])

    async def aclose(self) -> None:
        await self.llm.aclose()
