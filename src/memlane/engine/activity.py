"""A user's memory over time through the engine: :meth:`ActivityMethods.timeline` (every change
to their memories, newest first, paged by time) and :meth:`ActivityMethods.growth` (memories
added, invalidated and valid per day, week or month), read by the store's
:class:`~memlane.stores.base.ActivityReadable` capability (:mod:`memlane.stores.sql.activity`).
Both read the user's own memories (under ``agent_id`` if given), not the agent's shared ones."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.errors import ConfigError
from memlane.models import Growth, Timeline
from memlane.stores.base import ActivityReadable

__all__ = ["BUCKETS", "ActivityMethods"]

#: The buckets :meth:`ActivityMethods.growth` takes.
BUCKETS = ("day", "week", "month")


class ActivityMethods(EngineState):
    """The engine's methods for a user's memory over time."""

    def _activity_store(self) -> ActivityReadable:
        if not isinstance(self.facts, ActivityReadable):
            raise ConfigError(f"{type(self.facts).__name__} keeps no timeline (a SQLite or PostgreSQL store does)")
        return self.facts

    @opening
    async def timeline(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        limit: int = 50,
        before: datetime | str | None = None,
    ) -> Timeline:
        """Every change to the user's memories (``ADD``, ``UPDATE``, ``DELETE``, ``NONE``: a
        formation that found a fact already known), newest first, each with the text before
        and after, who made it, when it was recorded (``at``) and took effect
        (``effective_at``), and the memory's kind and scope.

        Args:
            agent_id: only the user's memories under this agent namespace (default: all).
            limit: about this many events (1 to 10,000): a page ends after every event of
                its last instant, so it may hold a few more.
            before: only events recorded before this time (a datetime, naive is UTC, or an
                ISO-8601 string): the previous page's ``next_before``.

        Raises:
            InvalidInputError: a bad limit or time.
            ScopeError: a missing or bad ``user_id`` / ``agent_id``.
        """
        user_id = inputs.identifier(user_id, "user_id")
        agent_id = inputs.optional_id(agent_id, "agent_id")
        limit = inputs.integer(limit, "limit", 1, 10_000)
        when = inputs.timestamp(before, "before")
        store = self._activity_store()
        return await store.timeline(self._scope(user_id, agent_id), limit=limit, before=when)

    @opening
    async def growth(
        self, user_id: str, *, bucket: Literal["day", "week", "month"] = "day", agent_id: str | None = None
    ) -> Growth:
        """The user's memories added (by ``formed_at``) and invalidated (by ``invalid_at``) per
        UTC day, week (from Monday) or month, oldest bucket first, from the first change
        through the bucket holding today; each point's ``valid`` counts the memories valid at
        the bucket's end. At most 3,660 points (the latest).

        Raises:
            InvalidInputError: an unknown bucket.
            ScopeError: a missing or bad ``user_id`` / ``agent_id``.
        """
        user_id = inputs.identifier(user_id, "user_id")
        agent_id = inputs.optional_id(agent_id, "agent_id")
        inputs.choice(bucket, "bucket", BUCKETS)
        return await self._activity_store().growth(self._scope(user_id, agent_id), bucket=bucket)
