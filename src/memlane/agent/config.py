"""How much a turn gets back by default: :class:`RecallConfig`.

Three numbers bound what an agent's model sees of memory on each turn, and every surface reads
them from the engine (``AsyncMemory(recall=RecallConfig(...))``; the settings'
``memory.recall_limit``, ``sessions.window_turns`` and ``sessions.context_limit`` /
``MEMORY_CONTEXT_LIMIT`` through :func:`memlane.config.build_memory`):

* ``recall_limit``: the hits ``load_memory`` returns (:class:`memlane.agent.tools.MemoryTools`,
  ``POST /v1/tools/load_memory``);
* ``window_turns`` and ``context_limit``: the session tail replayed to the model
  (:meth:`memlane.AsyncMemory.window`, the pydantic-ai bridge's ``load_history`` and
  ``run_with_memory``): the last ``window_turns`` user turns (Gaia) and at most
  ``context_limit`` events (KAOS); the shorter window wins. ``context_limit`` unset (None)
  keeps each surface's own seed default: ``window()`` replays Gaia's 30 user turns with no event
  bound, the pydantic-ai bridge (KAOS's runtime) KAOS's 6 events; set, it bounds both.

An explicit argument to one of those calls still wins over the engine's value.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CONFIGURED", "CONTEXT_LIMIT", "RECALL_LIMIT", "WINDOW_TURNS", "Configured", "RecallConfig"]

#: Gaia ``memory.recall_limit``: hits ``load_memory`` returns.
RECALL_LIMIT: Final = 5
#: Gaia ``sessions.window_turns``: user turns replayed to the model.
WINDOW_TURNS: Final = 30
#: KAOS ``MEMORY_CONTEXT_LIMIT``: events replayed to the model.
CONTEXT_LIMIT: Final = 6


class Configured(enum.Enum):
    """The type of :data:`CONFIGURED`."""

    CONFIGURED = "configured"

    def __repr__(self) -> str:
        return "CONFIGURED"


#: A default meaning "the engine's :class:`RecallConfig` value" (None already means "no bound").
CONFIGURED: Final = Configured.CONFIGURED

ConfiguredInt = int | None | Literal[Configured.CONFIGURED]
"""A limit argument: a number, None (no bound), or :data:`CONFIGURED`."""


class RecallConfig(BaseModel):
    """What a turn recalls by default (see the module docstring). Defaults are Gaia's and KAOS's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recall_limit: int = Field(RECALL_LIMIT, ge=1, le=100)
    """Hits ``load_memory`` returns (Gaia ``memory.recall_limit``, 5)."""
    window_turns: int | None = Field(WINDOW_TURNS, ge=0)
    """User turns replayed (Gaia ``sessions.window_turns``, 30); None: no turn bound."""
    context_limit: int | None = Field(None, ge=0)
    """Events replayed (KAOS ``MEMORY_CONTEXT_LIMIT``). None (unset): ``window()`` has no event
    bound (Gaia's user-turn window alone) and the pydantic-ai bridge replays KAOS's
    :data:`CONTEXT_LIMIT` (6)."""
