"""Whose memory the agent surface reads and writes (:class:`Identity`), and the engine it runs
on: :class:`~memlane._binding.Binding` (re-exported here) runs the agent surface's coroutines
for an :class:`~memlane.AsyncMemory` or the sync :class:`~memlane.Memory` facade.
"""

from __future__ import annotations

from memlane import inputs
from memlane._binding import Binding as Binding
from memlane._binding import MemoryLike as MemoryLike
from memlane.models import agent_namespace


class Identity:
    """Whose memory the agent surface reads and writes: fixed by the app, never by the model."""

    def __init__(self, user_id: str, agent_id: str | None, session_id: str | None, app: str) -> None:
        self.user_id = inputs.identifier(user_id, "user_id")
        self.agent_id = inputs.optional_id(agent_id, "agent_id")
        self.session_id = inputs.optional_id(session_id, "session_id")
        self.app = inputs.identifier(app, "app")
        #: The agent namespace memories of this app / agent live under (as formation writes them).
        self.namespace = agent_namespace(self.app, self.agent_id)

    def __repr__(self) -> str:
        return (
            f"Identity(user_id={self.user_id!r}, agent_id={self.agent_id!r}, session_id={self.session_id!r}, "
            f"app={self.app!r})"
        )
