"""Opening an engine's parts: the stores (through :mod:`memlane.registry`, by URL), the
session store and job queue asked for, the embedder and the formation models, on worker
threads. Whatever was opened is closed again when a later step fails."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from memlane.engine.context import LocalContextCache
from memlane.engine.redaction import RedactingModel, RedactingSessions, open_redactor
from memlane.formation.config import FormationConfig
from memlane.formation.model import FormationModel
from memlane.privacy.redaction import RedactionConfig, Redactor
from memlane.providers.embed.base import Embedder
from memlane.providers.llm.base import LLM, UsageMeter
from memlane.registry import (
    Stores,
    make_embedder,
    make_formation_model,
    open_job_store,
    open_session_store,
    open_stores,
)
from memlane.stores.base import ContextCache, FactStore, JobStore, ReflectionStore, SessionStore

__all__ = ["Parts", "close_stores", "open_parts"]


@dataclass
class Parts:
    """What :func:`open_parts` opened."""

    facts: FactStore
    reflections: ReflectionStore
    jobs: JobStore
    sessions: SessionStore
    contexts: ContextCache
    embedder: Embedder | None
    fast: FormationModel
    strong: FormationModel | None
    redactor: Redactor | None = None


async def close_stores(stores: Stores) -> None:
    """Close every store a backend opened."""
    await stores.jobs.close()
    if stores.sessions is not None:
        await stores.sessions.close()
    if stores.reflections is not stores.facts:  # type: ignore[comparison-overlap]
        await stores.reflections.close()
    await stores.facts.close()


async def open_parts(
    db: str | os.PathLike[str],
    *,
    embedder: str | Embedder | None,
    sessions: str | SessionStore,
    jobs: str | JobStore | None,
    formation: FormationConfig,
    llm: str | LLM | FormationModel | None,
    strong_llm: str | LLM | FormationModel | None,
    redact: RedactionConfig | None = None,
) -> Parts:
    """Open the long-term store at ``db`` and the rest of the engine's parts (the arguments
    of :class:`~memlane.memory.AsyncMemory`)."""
    cfg = formation
    stores = await open_stores(db)
    opened: list[SessionStore | JobStore] = []  # closed again if opening fails
    try:
        session_store = await open_session_store(sessions, stores)
        if isinstance(sessions, str):
            opened.append(session_store)
        job_store = await open_job_store(jobs, stores)
        if isinstance(jobs, str):
            opened.append(job_store)
        redactor = await open_redactor(redact, stores.facts)  # may read (or keep) the hash key
        made = await asyncio.to_thread(make_embedder, embedder)  # may read model files
        # An embedder that learns its dimension from its first call (an OpenAI-compatible
        # server with an unknown model reports dim 0) is bound on that first call instead.
        if made is not None and made.dim > 0:
            await stores.facts.bind_embedder(made.name, made.dim)
        fast = make_formation_model(
            llm if llm is not None else cfg.model, meter=UsageMeter(), max_tokens=cfg.max_tokens
        )
        strong_spec = strong_llm if strong_llm is not None else cfg.strong_model
        strong = (
            make_formation_model(strong_spec, meter=fast.meter, max_tokens=cfg.max_tokens)
            if strong_spec is not None
            else None
        )
    except BaseException:
        for own in opened:
            if own is not stores.sessions and own is not stores.jobs:
                await own.close()
        await close_stores(stores)
        raise
    if stores.sessions is not None and stores.sessions is not session_store:
        await stores.sessions.close()  # the backend's own session store is not the one used
    if job_store is not stores.jobs:
        await stores.jobs.close()  # nor its own job table
    contexts = stores.contexts if stores.contexts is not None else LocalContextCache()
    if redactor is not None:  # events, session state and formation output are redacted on their way in
        session_store = RedactingSessions(session_store, redactor)
        fast = RedactingModel(fast, redactor)
        strong = RedactingModel(strong, redactor) if strong is not None else None
    return Parts(stores.facts, stores.reflections, job_store, session_store, contexts, made, fast, strong, redactor)
