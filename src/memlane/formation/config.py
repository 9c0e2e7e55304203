"""Memory-formation settings. Defaults are Eden memory v2's and Gaia's production constants."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ReflectionScopeName = Literal["agent", "user", "session"]


def _per_scope(agent: int, user: int, session: int) -> dict[ReflectionScopeName, int]:
    return {"agent": agent, "user": user, "session": session}


class FormationConfig(BaseModel):
    """How and when conversations become facts, reflections and consolidated blobs.

    Models are ``provider:model`` names (``openai:gpt-4o-mini``, ``ollama:llama3.1``,
    ``anthropic:claude-3-5-haiku-latest``, ``gemini:gemini-2.5-flash``) or ``offline``
    (rules, no network; the default so memlane works with zero configuration).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Master switch (Gaia ``memory.enabled``): off means sessions only, no formation, no profile."""
    auto_ingest: bool = True
    """Form memories automatically (triggers and idle timer). Off: only explicit ``form`` calls."""

    # ---- models (Eden: fast model for extraction + dedup; tier model for reflections)
    model: str = "offline"
    """Fast model: fact extraction, dedup decisions, and everything for free-tier users."""
    strong_model: str | None = None
    """Model for reflections, consolidation and the profile of users at ``premium_tier`` or above
    (Eden: flash for free users, pro for premium). None: ``model`` for everyone."""
    premium_tier: int = 1
    """Users with ``tier >= premium_tier`` get ``strong_model``."""

    max_tokens: int | None = Field(None, ge=1)
    """Output cap (tokens) sent with every call of a prompted model (a ``provider:model`` name);
    None: 4096 per call (consolidation: 2 x the scope's word limit + 256 when that is more).
    Reasoning models count their thinking against this cap: keep it generous for them."""

    # ---- extraction
    extraction_instructions: str = ""
    """Override what is extracted (Gaia ``memory.extraction_instructions``; empty = built-in default)."""

    # ---- dedup (Eden FACTS_DEDUP_*)
    dedup: bool = True
    dedup_limit: int = Field(5, ge=1, le=50)
    """Similar existing facts retrieved per new fact."""
    dedup_threshold: float = Field(0.7, ge=-1.0, le=1.0)
    """Minimum cosine similarity for a dedup candidate."""

    # ---- review mode (docs/review.md)
    review: bool = False
    """Review mode: formation's decided ADD / UPDATE / DELETE changes (sessions and
    ``add(infer=True)``) are queued as proposals for a reviewer (``AsyncMemory.review``) instead
    of being applied; NONE decisions are dropped. Reflections, consolidation and kept user turns
    still run."""
    review_agents: dict[str, bool] = Field(default_factory=dict)
    """Review mode per agent namespace (a session's ``agent_id``, else its app; ``add``'s
    ``agent_id``), overriding :attr:`review`: ``{"support-bot": True}`` reviews that agent's
    formation only, ``{"internal": False}`` exempts one agent when ``review`` is on."""

    def reviews(self, agent_ns: str | None) -> bool:
        """Whether formation under this agent namespace queues its decisions for review."""
        if agent_ns is not None and agent_ns in self.review_agents:
            return self.review_agents[agent_ns]
        return self.review

    # ---- scopes (Eden agent toggles)
    user_memory: bool = True
    """User-scoped facts and reflections (always off in group sessions)."""
    agent_memory: bool = False
    """Agent-scoped facts and reflections (shared by every user of the agent)."""

    # ---- triggers (Eden MEMORY_FORMATION_*)
    message_interval: int = Field(45, ge=1)
    """Form after this many messages (user, agent and tool events) since the last formation..."""
    token_interval: float = Field(1500, gt=0)
    """...or this many weighted tokens (Eden: user characters x1.0, agent x0.2, tool x0.5, 4.5 per token)."""
    min_messages: int = Field(4, ge=1)
    """Never form a session with fewer messages than this (Eden NEVER_FORM_MEMORIES_LESS_THAN_N_MESSAGES)."""
    idle_minutes: float | None = Field(30.0, gt=0)
    """Gaia ``sessions.idle_consolidate_minutes``: after this much silence the session is formed
    and cleared. None disables the idle timer and the startup sweep."""
    clear_on_idle: bool = True
    """Delete the session after idle formation (Gaia); False keeps it (Eden's cold-session style)."""
    keep_user_turns: bool = True
    """When a formed session is cleared (idle, ``reset_session`` / ``/reset``), keep its user turns
    as verbatim ``message`` memories in the user's scope (author, time, session and source event
    id kept; stored once however often the job runs), so nothing the user said is lost to an
    extraction the model missed. Group sessions never write user memory. False: a cleared session
    leaves only the facts and reflections formed from it."""
    session_summaries: bool = True
    """Keep a summary of each formed one-to-one session in the user's memory (a ``summary``
    memory: time range, message count, topics and the session's reflections; updated by each
    later formation of the session; docs/summaries.md). False: no summaries are written."""

    # ---- consolidation (Eden thresholds / word limits)
    consolidation_threshold: dict[ReflectionScopeName, int] = Field(default_factory=lambda: _per_scope(10, 4, 4))
    """Consolidate a scope once it has this many unabsorbed reflections."""
    word_limit: dict[ReflectionScopeName, int] = Field(default_factory=lambda: _per_scope(1200, 300, 200))
    """Word limit of each scope's consolidated blob."""

    # ---- profile (Gaia memory.preload*)
    preload: bool = True
    """Distil a user profile at session start."""
    preload_limit: int = Field(20, ge=1, le=200)
    """Maximum profile bullets."""

    # ---- jobs
    max_attempts: int = Field(8, ge=1)
    """Attempts before a job is marked ``failed`` (it can still be retried by hand)."""
    retry_base_seconds: float = Field(5.0, ge=0)
    """First retry delay; doubles per attempt (with jitter), capped by ``retry_max_seconds``."""
    retry_max_seconds: float = Field(600.0, ge=0)
    lease_seconds: float = Field(30.0, gt=0)
    """A running job's lease. The worker renews it every ``lease_seconds / 3`` while the job
    runs (heartbeat); a job whose holder stopped renewing (the process died) is claimed again
    once its lease expires, so a dead worker is detected within this many seconds."""
    wait_timeout_seconds: float | None = Field(600.0, gt=0)
    """How long ``form``, ``end_session``, ``reset_session`` and ``add(infer=True)`` wait for
    their job before raising :class:`~memlane.errors.FormationTimeoutError` (the job is kept
    and finishes later). None waits without a limit."""
    background: bool = True
    """Run queued jobs on a background task of the engine's event loop."""
