"""The always-in-context memory block (Eden's ``<MemoryContext>``) and the windowed replay of a
session, for an engine: ``assemble_context(memory, ...)``, ``replay_window(memory, ...)``.

The assembly itself takes stores and lives in :mod:`memlane.engine.context` (the module
docstring there describes the block, its budget and its cache); its names are re-exported
here. The engine's own :meth:`~memlane.memory.AsyncMemory.context` and
:meth:`~memlane.memory.AsyncMemory.window` are the same calls.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from memlane.agent.config import CONFIGURED, ConfiguredInt
from memlane.engine.context import (
    CONTEXT_TTL,
    FACTS_FIFO_LIMIT,
    FACTS_FIFO_MAX_AGE,
    MAX_BUDGET_TOKENS,
    MAX_WORD_CUT,
    WINDOW_USER_TURNS,
    ContextQuery,
    LocalContextCache,
    ProfileOf,
    WindowQuery,
    build_context,
    escape_memory_text,
    estimate_tokens,
    format_age,
    pack,
    read_window,
)
from memlane.memory import AsyncMemory
from memlane.models import Event
from memlane.sessions import events_to_messages

__all__ = [
    "CONTEXT_TTL",
    "FACTS_FIFO_LIMIT",
    "FACTS_FIFO_MAX_AGE",
    "MAX_BUDGET_TOKENS",
    "MAX_WORD_CUT",
    "WINDOW_USER_TURNS",
    "LocalContextCache",
    "assemble_context",
    "escape_memory_text",
    "estimate_tokens",
    "format_age",
    "pack",
    "replay_messages",
    "replay_window",
]


async def assemble_context(
    memory: AsyncMemory,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    agent_id: str | None = None,
    budget_tokens: int | None = None,
    profile: bool = True,
    facts_limit: int = FACTS_FIFO_LIMIT,
    now: datetime | None = None,
    use_cache: bool = True,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """The ``<MemoryContext>`` block for a turn of ``session_id`` with ``user_id`` (and agent).

    Args:
        memory: the engine.
        session_id: the conversation (adds ``<SessionMemory>``).
        user_id: the user being talked to (adds ``<USER_PROFILE>``, ``<UserMemory>`` and
            the user's facts).
        agent_id: the agent / app namespace (adds ``<AgentMemory>`` and its shared facts;
            the user's memories under that agent only).
        budget_tokens: an upper bound on the whole block's tokens (see
            :mod:`memlane.engine.context`).
        profile: include Gaia's distilled ``<USER_PROFILE>`` (one model call, cached).
        facts_limit: recent facts to show (Eden's FIFO, default 40; 0 for none).
        now: the current time (ages and the 7-day window; tests).
        use_cache: reuse an entry of the last 5 minutes built from unchanged memory.
        count_tokens: a tokenizer's counter for the budget (default: 4 characters a token).

    Returns:
        The XML text, or ``""`` when there is nothing to show (or the budget cannot hold even
        one line).

    Raises:
        ScopeError: none of ``session_id``, ``user_id``, ``agent_id``.
        InvalidInputError: a bad id, budget or limit.
    """
    q = ContextQuery.checked(
        session_id=session_id,
        user_id=user_id,
        agent_id=agent_id,
        budget_tokens=budget_tokens,
        profile=profile,
        facts_limit=facts_limit,
        now=now,
        use_cache=use_cache,
        count_tokens=count_tokens,
    )
    await memory.open()
    return await build_context(memory.facts, memory.reflection_store, memory.contexts, _profile_of(memory), q)


def _profile_of(memory: AsyncMemory) -> ProfileOf:
    async def profile_of(user_id: str, agent_id: str | None) -> str | None:
        return await memory.profile(user_id, agent_id=agent_id)

    return profile_of


async def replay_window(
    memory: AsyncMemory,
    session_id: str,
    *,
    app: str = "default",
    user_turns: ConfiguredInt = CONFIGURED,
    last_n: ConfiguredInt = CONFIGURED,
) -> list[Event]:
    """The tail of a session to replay to the model: the last ``user_turns`` user turns (Gaia)
    with everything after them, and at most the last ``last_n`` events (KAOS
    ``memory_context_limit``). The shorter window wins; oldest first. By default both come from
    ``memory.recall_config`` (``window_turns``, 30; ``context_limit``, no event bound unless
    set); None lifts a bound.

    Raises:
        NotFoundError: no such session.
    """
    q = WindowQuery.checked(memory.recall_config, session_id, app=app, user_turns=user_turns, last_n=last_n)
    await memory.open()
    return await read_window(memory.sessions, q)


async def replay_messages(
    memory: AsyncMemory,
    session_id: str,
    *,
    app: str = "default",
    user_turns: ConfiguredInt = CONFIGURED,
    last_n: ConfiguredInt = CONFIGURED,
) -> list[dict[str, str]]:
    """:func:`replay_window` as chat messages (``{"role", "content", "name"}``)."""
    events = await replay_window(memory, session_id, app=app, user_turns=user_turns, last_n=last_n)
    return events_to_messages(events)
