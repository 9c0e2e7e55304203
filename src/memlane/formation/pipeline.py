"""The formation pipeline: small typed steps, each testable alone.

::

    turns ─► 1 extract (fast model, no memory context) ─► candidate search (one batched embed,
          concurrent vector search per fact, same scope, limit 5, cosine >= 0.7)
          ─► 2 decide (ONE batched call: ADD / UPDATE / DELETE / NONE) ─► guard ─► FactChange plan
          ─► 3 reflect (tier model; sees memory context + the new facts; agent → user → session)
          ─► apply (one transaction, exactly once per job) ─► 4 consolidate scopes concurrently
    5 profile: at session start, the user's facts ─► <= 20 importance-ranked bullets

The pipeline holds no state of its own: the job runner (``runner.py``) checkpoints each
model step's output in the job row, so a replay after a crash calls no model twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from memlane._cpu import run_cpu
from memlane.errors import ConfigError, ProviderError
from memlane.formation.config import FormationConfig, ReflectionScopeName
from memlane.formation.model import FormationModel
from memlane.formation.prompts import DEFAULT_EXTRACTION_INSTRUCTIONS
from memlane.formation.schemas import (
    MAX_FACT_WORDS,
    MAX_REFLECTION_WORDS,
    ConsolidationInput,
    Decision,
    DedupInput,
    DedupItem,
    ExistingFact,
    ExtractedFact,
    ExtractionInput,
    ExtractionReport,
    ProfileInput,
    ReflectionInput,
    ScopeMemory,
    Turn,
    UnreadTurn,
    word_count,
)
from memlane.formation.summaries import SUMMARY_KIND, session_topics, summary_metadata, summary_text
from memlane.ingest.messages import message_fact
from memlane.models import (
    TEXT_EVENT_TYPES,
    ConsolidatedMemory,
    Event,
    Fact,
    FactFilter,
    PartitionFilter,
    Proposal,
    ProposalAction,
    Reflection,
    Scope,
    agent_partition,
    content_hash,
    new_id,
    user_partition,
    utcnow,
)
from memlane.providers.embed.base import Matrix
from memlane.retrieval.text import parse_query, query_terms
from memlane.stores.base import AppliedChange, FactChange, FactStore, ProposalStore, ReflectionStore, TemporalReadable

log = logging.getLogger("memlane.formation")

EmbedFn = Callable[[list[str]], Awaitable[Matrix | None]]

#: Dedup candidates and the profile read extracted facts only, never verbatim turns.
FACTS_ONLY = FactFilter(kind="fact")


@dataclass(frozen=True)
class Target:
    """Whose memory a formation writes: derived from the session (or the ``add`` call)."""

    session_id: str | None
    user_id: str | None
    """The single user (None in group sessions and agent-only writes)."""
    agent_ns: str | None
    """The agent / app namespace facts are stored under."""
    is_group: bool = False
    tier: int = 0
    user_name: str | None = None
    agent_name: str | None = None
    force_scope: Literal["user", "agent"] | None = None
    """``add(infer=True, scope=...)``: every fact goes to this scope."""
    metadata: tuple[tuple[str, Any], ...] = ()
    """Stored on every fact formed (``add(..., metadata=...)``)."""


def fact_scopes(target: Target, config: FormationConfig) -> tuple[bool, bool]:
    """(user scope allowed, agent scope allowed). Group sessions never write user memory."""
    user_ok = bool(config.user_memory and target.user_id and not target.is_group)
    agent_ok = bool(config.agent_memory and target.agent_ns)
    if target.force_scope == "user":
        return bool(target.user_id), False
    if target.force_scope == "agent":
        return False, bool(target.agent_ns)
    return user_ok, agent_ok


def reflection_scopes(target: Target, config: FormationConfig) -> list[ReflectionScopeName]:
    """Scopes reflections are formed for, broadest first. Session is always on (with a session)."""
    user_ok, agent_ok = fact_scopes(target, config)
    out: list[ReflectionScopeName] = []
    if agent_ok:
        out.append("agent")
    if user_ok:
        out.append("user")
    if target.session_id:
        out.append("session")
    return out


def scope_key(target: Target, scope: ReflectionScopeName) -> dict[str, str | None]:
    """The (agent_id, user_id, session_id) a scope's reflections and blob are keyed by."""
    if scope == "agent":
        return {"agent_id": target.agent_ns, "user_id": None, "session_id": None}
    if scope == "user":
        return {"agent_id": target.agent_ns, "user_id": target.user_id, "session_id": None}
    return {"agent_id": target.agent_ns, "user_id": target.user_id, "session_id": target.session_id}


def clip_words(text: str, limit: int) -> str:
    """Keep whole lines while within ``limit`` words; then cut the last line's words."""
    out: list[str] = []
    used = 0
    for line in text.splitlines():
        n = word_count(line)
        if used + n <= limit:
            out.append(line)
            used += n
            continue
        room = limit - used
        if room > 0:
            out.append(" ".join(line.split()[:room]))
        break
    return "\n".join(out).strip()


def ensure_blob(text: str, version: int, limit: int) -> str:
    """Start the blob with ``VERSION: n`` (replacing a wrong one) and keep it within ``limit`` words."""
    lines = text.strip().splitlines()
    if lines and lines[0].strip().upper().startswith("VERSION"):
        lines = lines[1:]
    body = "\n".join(lines).strip()
    return clip_words(f"VERSION: {version}\n{body}".strip(), limit)


def attribute_sources(fact: str, turns: Sequence[Turn]) -> list[int]:
    """Turns a fact most likely came from, by shared content words (latest turn wins ties)."""
    want = set(query_terms(fact))
    best, picks = 0, []
    for i, t in enumerate(turns):
        overlap = len(want & set(query_terms(t.text)))
        if overlap > best:
            best, picks = overlap, [i]
        elif overlap == best and overlap > 0:
            picks.append(i)
    return picks[-1:] if picks else []


class Pipeline:
    """The five steps over one fact store, one embed function and two models.

    Args:
        facts: where facts, reflections and blobs live.
        embed: batch embedding (``None`` result: no embedder; keyword candidates are used).
        config: thresholds and switches.
        fast: extraction and dedup model (and everything for free-tier users).
        strong: reflections / consolidation / profile model for premium tiers (None: ``fast``).
    """

    def __init__(
        self,
        *,
        facts: FactStore,
        reflections: ReflectionStore | None = None,
        embed: EmbedFn,
        config: FormationConfig,
        fast: FormationModel,
        strong: FormationModel | None = None,
    ) -> None:
        self.facts = facts
        # The SQLite store implements both protocols on one file.
        self.reflections: ReflectionStore = reflections if reflections is not None else facts  # type: ignore[assignment]
        self.embed = embed
        self.config = config
        self.fast = fast
        self.strong = strong or fast

    def model_for(self, tier: int) -> FormationModel:
        """Eden's tier rule: premium users get the strong model for reflections and consolidation."""
        return self.strong if tier >= self.config.premium_tier else self.fast

    # ------------------------------------------------------------------ 1. extraction
    async def extract(
        self, target: Target, turns: Sequence[Turn], *, unread: list[UnreadTurn] | None = None
    ) -> list[ExtractedFact]:
        """LLM call 1: standalone facts (<= 30 words) in allowed scopes, unique by text.

        ``unread``, when given, receives the turns the model reports it could not read
        (the offline model: another language, or no pattern matched)."""
        user_ok, agent_ok = fact_scopes(target, self.config)
        if not turns or not (user_ok or agent_ok):
            return []
        out = await self.fast.extract_facts(
            ExtractionInput(
                conversation=list(turns),
                instructions=self.config.extraction_instructions.strip() or DEFAULT_EXTRACTION_INSTRUCTIONS,
                user_name=target.user_name,
                agent_name=target.agent_name,
                allow_user_scope=user_ok,
                allow_agent_scope=agent_ok,
            )
        )
        if unread is not None and isinstance(out, ExtractionReport):
            unread.extend(u for u in out.unread if 0 <= u.index < len(turns))
        # Off the loop: guessing sources by word overlap costs facts x turns.
        return await run_cpu(self._clean_extracted, out.facts, turns, user_ok, agent_ok)

    @staticmethod
    def _clean_extracted(
        extracted: Sequence[ExtractedFact], turns: Sequence[Turn], user_ok: bool, agent_ok: bool
    ) -> list[ExtractedFact]:
        seen: set[str] = set()
        facts: list[ExtractedFact] = []
        for f in extracted:
            text = " ".join(f.content.split())
            if not text or word_count(text) > MAX_FACT_WORDS:
                log.debug("dropping extracted fact (empty or over %d words): %r", MAX_FACT_WORDS, text)
                continue
            scope = f.scope
            if scope == "user" and not user_ok:
                scope = "agent"
            if scope == "agent" and not agent_ok:
                scope = "user"
            if (scope == "user" and not user_ok) or (scope == "agent" and not agent_ok):
                continue
            h = content_hash(text.lower())
            if h in seen:
                continue
            seen.add(h)
            sources = [i for i in f.sources if 0 <= i < len(turns)] or attribute_sources(text, turns)
            facts.append(ExtractedFact(content=text, scope=scope, sources=sources))
        return facts

    def partition(self, target: Target, scope: str) -> str:
        if scope == "agent":
            assert target.agent_ns is not None
            return agent_partition(target.agent_ns)
        assert target.user_id is not None
        return user_partition(target.user_id, target.agent_ns)

    def _scope_obj(self, target: Target, scope: str) -> Scope:
        if scope == "agent":
            return Scope(agent_id=target.agent_ns)
        return Scope(user_id=target.user_id, agent_id=target.agent_ns)

    # ------------------------------------------------------------------ 2. dedup
    async def find_candidates(
        self, target: Target, facts: Sequence[ExtractedFact]
    ) -> tuple[Matrix | None, list[list[ExistingFact]]]:
        """One batched embed call, then one search per fact, concurrently, in the fact's own scope:
        up to ``dedup_limit`` stored facts, those with cosine >= ``dedup_threshold`` first, then
        keyword (BM25) matches with ``similarity`` 0. Verbatim turns are never candidates."""
        if not facts:
            return None, []
        vectors = await self.embed([f.content for f in facts])
        if not self.config.dedup:
            return vectors, [[] for _ in facts]
        cfg = self.config

        async def similar(i: int) -> list[ExistingFact]:
            f = facts[i]
            part = self.partition(target, f.scope)
            scope = self._scope_obj(target, f.scope)
            sims: dict[str, float] = {}
            if vectors is not None:
                vec = await self.facts.vector_search(
                    PartitionFilter(exact=(part,)), vectors[i], limit=cfg.dedup_limit * 4, filter=FACTS_ONLY
                )
                sims = {c.fact_id: c.score for c in vec if c.score >= cfg.dedup_threshold}
            # Keyword matches fill the remaining slots: a contradiction ("moved to Porto" vs
            # "lives in Lisbon") often shares the subject and little else, so its cosine is low.
            kw = await self.facts.keyword_search(
                PartitionFilter(exact=(part,)),
                parse_query(f.content).terms,
                limit=cfg.dedup_limit * 4,
                filter=FACTS_ONLY,
            )
            order = list(sims) + [c.fact_id for c in kw if c.fact_id not in sims]
            found = await self.facts.get_facts(order, scope)
            out: list[ExistingFact] = []
            for fid in order:
                fact = found.get(fid)
                if fact is None or fact.kind != "fact" or not fact.is_valid or fact.partition != part:
                    continue
                out.append(
                    ExistingFact(id=fact.id, content=fact.content, similarity=round(float(sims.get(fid, 0.0)), 4))
                )
                if len(out) == cfg.dedup_limit:
                    break
            return out

        return vectors, list(await asyncio.gather(*(similar(i) for i in range(len(facts)))))

    async def decide(self, facts: Sequence[ExtractedFact], candidates: Sequence[list[ExistingFact]]) -> list[Decision]:
        """ONE batched model call for every fact that has candidates; the rest are ADD."""
        items = [
            DedupItem(index=i, content=f.content, candidates=c)
            for i, (f, c) in enumerate(zip(facts, candidates, strict=True))
            if c
        ]
        decided: dict[int, Decision] = {}
        if items:
            out = await self.fast.decide(DedupInput(items=items))
            for d in out.decisions:
                decided.setdefault(d.index, d)
        return [decided.get(i) or Decision(index=i, event="ADD") for i in range(len(facts))]

    def plan(
        self,
        target: Target,
        facts: Sequence[ExtractedFact],
        vectors: Matrix | None,
        candidates: Sequence[list[ExistingFact]],
        decisions: Sequence[Decision],
        turns: Sequence[Turn],
        *,
        job_key: str,
    ) -> list[FactChange]:
        """Turn decisions into safe changes. Guards (mem0 #1674 / #4536 and scope safety):
        a decision may only touch one of its own candidates; an identical fact is NONE,
        never DELETE; UPDATE without text keeps the new fact's text; unknown -> ADD."""
        changes: list[FactChange] = []
        for i, f in enumerate(facts):
            d = decisions[i] if i < len(decisions) else Decision(index=i, event="ADD")
            allowed = {c.id: c for c in candidates[i]} if i < len(candidates) else {}
            part = self.partition(target, f.scope)
            src = [turns[j] for j in f.sources if 0 <= j < len(turns)]
            fact = Fact(
                content=f.content,
                hash=content_hash(f.content),
                scope=f.scope,
                # on an agent fact: the contributor, so forget(user) can erase it
                user_id=target.user_id,
                agent_id=target.agent_ns,
                session_id=target.session_id,
                kind="fact",
                occurred_at=max((t.at for t in src if t.at), default=None),
                source_event_ids=[t.event_id for t in src if t.event_id],
                metadata={**dict(target.metadata), "source": "formation", "job": job_key},
            )
            vec = vectors[i] if vectors is not None else None
            event = d.event
            target_id = d.fact_id if d.fact_id in allowed else None
            if event != "ADD" and target_id is None:
                event = "ADD"  # a decision about a fact it was not shown: never act on it
            if target_id is not None and content_hash(allowed[target_id].content) == fact.hash:
                event = "NONE"  # identical text: a duplicate, never a deletion
            if event == "UPDATE":
                text = " ".join((d.text or f.content).split())
                if word_count(text) > MAX_FACT_WORDS:
                    text = f.content
                same = text == f.content
                changes.append(
                    FactChange("UPDATE", part, fact=fact, target_id=target_id, text=text, vector=vec if same else None)
                )
            elif event == "DELETE":
                changes.append(FactChange("DELETE", part, fact=fact, target_id=target_id, vector=vec))
            elif event == "NONE":
                changes.append(FactChange("NONE", part, fact=fact, target_id=target_id))
            else:
                changes.append(FactChange("ADD", part, fact=fact, vector=vec))
        return changes

    async def keep_user_turns(self, target: Target, events: Sequence[Event], *, app: str) -> list[Fact]:
        """A cleared session's user turns as verbatim ``message`` memories in the user's scope
        (``FormationConfig.keep_user_turns``): author, time, session id and source event id
        kept, ``metadata["source"] = "session"``. Idempotent (a turn's key is its session,
        author, time and text): a replayed job stores nothing twice. Nothing in a group session
        or with user memory off; returns the memories holding the turns."""
        user_ok, _ = fact_scopes(target, self.config)
        if not (self.config.keep_user_turns and user_ok and target.session_id):
            return []
        said = [e for e in events if e.role == "user" and e.type in TEXT_EVENT_TYPES and e.text.strip()]
        if not said:
            return []
        rows = [
            message_fact(
                e,
                i,
                scope="user",
                user_id=target.user_id,
                agent_id=target.agent_ns,
                session_id=target.session_id,
                metadata={"source": "session", "app": app},
            )
            for i, e in enumerate(said)
        ]
        vectors = await self.embed([r.content for r in rows])
        return [f for f, _ in await self.facts.put_facts(rows, vectors, actor="formation")]

    async def summarize(
        self,
        target: Target,
        turns: Sequence[Turn],
        reflections: Sequence[Reflection],
        *,
        app: str,
        session_created: datetime,
        job_key: str,
    ) -> FactChange | None:
        """The session's summary as a change of the formation batch
        (``FormationConfig.session_summaries``; :mod:`memlane.formation.summaries`): ``turns``
        are the session's messages formed so far, ``reflections`` this batch's. ADD the first
        time; UPDATE (text, time range, count and topics; version + 1) the summary of the same
        session (its id and creation time) after that. None in a group session, with user
        memory off, or without turns."""
        user_ok, _ = fact_scopes(target, self.config)
        if not (self.config.session_summaries and user_ok and target.session_id and turns):
            return None
        assert target.user_id is not None and target.session_id is not None
        times = [t.at for t in turns if t.at is not None]
        start, end = (min(times), max(times)) if times else (session_created, utcnow())
        key = scope_key(target, "session")
        earlier = await self.reflections.list_reflections(scope="session", absorbed=None, **key)
        notes = [r.content for r in earlier] + [r.content for r in reflections if r.scope == "session"]
        topics = await run_cpu(session_topics, turns)
        text = summary_text(
            start=start, end=end, message_count=len(turns), topics=topics, notes=notes, agent_name=target.agent_name
        )
        meta = summary_metadata(
            session_id=target.session_id,
            app=app,
            session_created=session_created,
            start=start,
            end=end,
            message_count=len(turns),
            topics=topics,
            job=job_key,
        )
        part = user_partition(target.user_id, target.agent_ns)
        found = await self.facts.list_facts(
            Scope(user_id=target.user_id, agent_id=target.agent_ns),
            limit=10,
            filter=FactFilter(
                kind=SUMMARY_KIND,
                session_id=target.session_id,
                metadata=(("session_created", meta["session_created"]),),
            ),
            only="user",
        )
        existing = next((f for f in found.items if f.partition == part), None)
        fact = Fact(
            content=text,
            hash=content_hash(text),
            scope="user",
            user_id=target.user_id,
            agent_id=target.agent_ns,
            session_id=target.session_id,
            kind=SUMMARY_KIND,
            occurred_at=end,
            metadata=meta,
        )
        vectors = await self.embed([text])
        vec = vectors[0] if vectors is not None else None
        if existing is None:
            return FactChange("ADD", part, fact=fact, vector=vec)
        return FactChange("UPDATE", part, fact=fact, target_id=existing.id, text=text, vector=vec, metadata=meta)

    async def embed_updates(self, changes: Sequence[FactChange]) -> None:
        """Embed merged UPDATE texts (one call) so the updated facts stay vector-searchable."""
        todo = [c for c in changes if c.event == "UPDATE" and c.vector is None and c.text]
        if not todo:
            return
        vecs = await self.embed([c.text or "" for c in todo])
        if vecs is not None:
            for c, v in zip(todo, vecs, strict=True):
                c.vector = v

    async def propose_changes(self, changes: Sequence[FactChange], *, job_key: str) -> list[Proposal]:
        """Review mode: queue a batch's ADD / UPDATE / DELETE changes as proposals (NONE changes
        nothing, so it is dropped). Each proposal's id is derived from the job and the change's
        position: a replayed job queues nothing twice."""
        store = self.facts
        if not isinstance(store, ProposalStore):
            raise ConfigError(f"review mode needs a store with a review queue; {type(store).__name__} has none")
        actions: dict[str, ProposalAction] = {"ADD": "add", "UPDATE": "update", "DELETE": "delete"}
        out: list[Proposal] = []
        for i, ch in enumerate(changes):
            f = ch.fact
            if ch.event == "NONE" or f is None:
                continue
            text = ch.text if ch.event == "UPDATE" and ch.text else f.content
            why = f"formation decided {ch.event}" + (f" from: {f.content}" if text != f.content else "")
            provenance: dict[str, Any] = {"origin": "formation", "job": job_key, "source_event_ids": f.source_event_ids}
            if f.occurred_at is not None:
                provenance["occurred_at"] = f.occurred_at.isoformat()
            out.append(
                Proposal(
                    id=hashlib.md5(f"{job_key}\x1f{i}".encode()).hexdigest(),
                    action=actions[ch.event],
                    text=text,
                    target_id=ch.target_id if ch.event != "ADD" else None,
                    reason=why,
                    provenance=provenance,
                    scope=f.scope,
                    user_id=f.user_id,
                    agent_id=f.agent_id,
                    session_id=f.session_id,
                    metadata=f.metadata,
                )
            )
        return await store.put_proposals(out, missing="add")

    async def apply(
        self, changes: Sequence[FactChange], reflections: Sequence[Reflection], *, key: str
    ) -> list[AppliedChange]:
        """All of a batch's changes and reflections in one transaction, exactly once per key."""
        return await self.facts.apply_changes(changes, reflections, key=key, actor="formation")

    # ------------------------------------------------------------------ 3. reflections
    async def scope_memory(self, target: Target, scope: ReflectionScopeName) -> ScopeMemory:
        key = scope_key(target, scope)
        blob = await self.reflections.get_consolidated(scope=scope, **key)
        pending = await self.reflections.list_reflections(scope=scope, absorbed=False, **key)
        return ScopeMemory(consolidated=blob.consolidated_content if blob else "", recent=[r.content for r in pending])

    async def reflect(self, target: Target, turns: Sequence[Turn], new_facts: Sequence[str]) -> list[Reflection]:
        """LLM call 2: hierarchical reflections (agent → user → session), <= 35 words each."""
        scopes = reflection_scopes(target, self.config)
        if not turns or not scopes:
            return []
        mem = {s: await self.scope_memory(target, s) for s in scopes}
        out = await self.model_for(target.tier).reflect(
            ReflectionInput(
                conversation=list(turns),
                new_facts=list(new_facts),
                agent=mem.get("agent"),
                user=mem.get("user"),
                session=mem.get("session", ScopeMemory()),
                user_name=target.user_name,
                agent_name=target.agent_name,
            )
        )
        result: list[Reflection] = []
        seen: set[str] = set()
        for scope in scopes:
            for text in getattr(out, scope):
                text = " ".join(str(text).split())
                if not text or word_count(text) > MAX_REFLECTION_WORDS or text.lower() in seen:
                    continue
                seen.add(text.lower())
                key = scope_key(target, scope)
                result.append(
                    Reflection(
                        content=text,
                        scope=scope,
                        agent_id=key["agent_id"],
                        user_id=key["user_id"],
                        session_id=target.session_id,
                        source_user_ids=[target.user_id] if target.user_id else [],
                    )
                )
        return result

    # ------------------------------------------------------------------ 4. consolidation
    async def consolidate(self, target: Target, *, force: bool = False) -> list[ConsolidatedMemory]:
        """Merge each scope's unabsorbed reflections into its blob once they reach the scope's
        threshold (``force``: whenever there are any). Scopes run concurrently."""
        scopes = reflection_scopes(target, self.config)
        results = await asyncio.gather(
            *(self.consolidate_scope(target, s, force=force) for s in scopes), return_exceptions=True
        )
        done: list[ConsolidatedMemory] = []
        errors: list[BaseException] = []
        for r in results:
            if isinstance(r, BaseException):
                errors.append(r)
            elif r is not None:
                done.append(r)
        if errors:
            raise errors[0]
        return done

    async def consolidate_scope(
        self, target: Target, scope: ReflectionScopeName, *, force: bool = False
    ) -> ConsolidatedMemory | None:
        key = scope_key(target, scope)
        pending = await self.reflections.list_reflections(scope=scope, absorbed=False, **key)
        threshold = self.config.consolidation_threshold[scope]
        if not pending or (not force and len(pending) < threshold):
            return None
        blob = await self.reflections.get_consolidated(scope=scope, **key)
        current_version = blob.version if blob else 0
        limit = self.config.word_limit[scope]
        text = await self.model_for(target.tier).consolidate(
            ConsolidationInput(
                scope=scope,
                current=blob.consolidated_content if blob else "",
                version=current_version + 1,
                reflections=[r.content for r in pending],
                word_limit=limit,
            )
        )
        new = ConsolidatedMemory(
            id=blob.id if blob else new_id(),
            scope=scope,
            consolidated_content=ensure_blob(text, current_version + 1, limit),
            word_limit=limit,
            version=current_version + 1,
            unabsorbed_ids=[],
            last_consolidated_at=utcnow(),
            **key,
        )
        return await self.reflections.put_consolidated(new, [r.id for r in pending], expected_version=current_version)

    # ------------------------------------------------------------------ 5. profile
    async def profile(
        self,
        user_id: str,
        agent_ns: str | None,
        *,
        items: Sequence[str] = (),
        tier: int = 0,
        user_name: str | None = None,
        as_of: datetime | None = None,
    ) -> str | None:
        """Gaia's session-start profile: <= ``preload_limit`` importance-ranked bullets, or None
        when memory is off or the user has nothing. Falls back to the raw fact list if the call
        fails. ``as_of``: from the user's facts as memory held them then."""
        cfg = self.config
        if not cfg.enabled or not cfg.preload:
            return None
        facts = await self.user_facts(user_id, agent_ns, as_of=as_of)
        if not facts and not items:
            return None
        try:
            out = await self.model_for(tier).distill_profile(
                ProfileInput(facts=facts, items=list(items), limit=cfg.preload_limit, user_name=user_name)
            )
            bullets = [" ".join(b.split()).lstrip("-• ").strip() for b in out.bullets]
            bullets = [b for b in bullets if b][: cfg.preload_limit]
        except (ProviderError, ValueError) as exc:
            log.warning("memlane: profile distillation failed (%s); using the raw fact list", exc)
            bullets = []
        if not bullets:
            bullets = (facts + [f"Working on: {i}" for i in items])[: cfg.preload_limit]
        return "\n".join(f"- {b}" for b in bullets)

    async def user_facts(
        self, user_id: str, agent_ns: str | None, *, limit: int = 500, as_of: datetime | None = None
    ) -> list[str]:
        """The user's own valid facts (not verbatim turns), newest first: under ``agent_ns``
        when given, else under every agent (the ``kind`` filter runs in the store's query);
        with ``as_of``, those valid then, as they were then."""
        scope = Scope(user_id=user_id, agent_id=agent_ns)
        part = user_partition(user_id, agent_ns) if agent_ns is not None else None
        if as_of is not None and isinstance(self.facts, TemporalReadable):
            snap = await self.facts.snapshot(scope, as_of=as_of, valid_at=None, filter=FACTS_ONLY)
            return [f.content for f, _ in snap if part is None or f.partition == part][:limit]
        out: list[str] = []
        cursor: str | None = None
        while len(out) < limit:
            page = await self.facts.list_facts(scope, limit=min(500, limit), cursor=cursor, filter=FACTS_ONLY)
            out.extend(f.content for f in page.items if part is None or f.partition == part)
            cursor = page.next_cursor
            if cursor is None:
                break
        return out[:limit]
