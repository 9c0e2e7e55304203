"""Session summaries through the engine: :meth:`SummaryMethods.summaries` lists a user's
formed sessions, summarised (:mod:`memlane.formation.summaries`; docs/summaries.md). The
summaries are memories of the user (``kind="summary"``), so ``search`` finds them, ``get`` /
``history`` / ``delete`` take their ids and ``forget`` erases them with the rest."""

from __future__ import annotations

import builtins
from datetime import date, datetime, timedelta

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.errors import InvalidInputError
from memlane.formation.summaries import SUMMARY_KIND, SessionSummary
from memlane.models import FactFilter

__all__ = ["SummaryMethods"]

_SUMMARIES = FactFilter(kind=SUMMARY_KIND)


def _is_day(value: object) -> bool:
    """A date without a time: a ``date`` or a ``YYYY-MM-DD`` string."""
    if isinstance(value, str):
        return len(value.strip()) == 10
    return isinstance(value, date) and not isinstance(value, datetime)


class SummaryMethods(EngineState):
    """The engine's method for session summaries."""

    @opening
    async def summaries(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        since: datetime | date | str | None = None,
        until: datetime | date | str | None = None,
        limit: int = 100,
    ) -> builtins.list[SessionSummary]:
        """The user's session summaries, the latest session first: "what did we talk about
        last week?" is ``summaries(user_id, since=monday, until=sunday)``.

        Args:
            agent_id: only sessions formed under this agent namespace (default: every agent).
            since: only sessions still going at or after this time (their ``end >= since``);
                a datetime (naive is UTC), a date or an ISO-8601 string.
            until: only sessions begun at or before this time (their ``start <= until``); a
                date alone (``"2026-11-22"``) means the end of that day.
            limit: at most this many summaries (1 to 10,000).

        Raises:
            InvalidInputError: a bad time or limit, or ``since`` after ``until``.
            ScopeError: a missing or bad ``user_id`` / ``agent_id``.
        """
        user_id = inputs.identifier(user_id, "user_id")
        agent_id = inputs.optional_id(agent_id, "agent_id")
        start, end = inputs.timestamp(since, "since"), inputs.timestamp(until, "until")
        if end is not None and _is_day(until):
            end += timedelta(days=1, microseconds=-1)
        if start is not None and end is not None and start > end:
            raise InvalidInputError(f"since ({start.isoformat()}) is after until ({end.isoformat()})")
        limit = inputs.integer(limit, "limit", 1, 10_000)
        scope = self._scope(user_id, agent_id)
        out: builtins.list[SessionSummary] = []
        cursor: str | None = None
        while True:
            page = await self.facts.list_facts(scope, limit=500, cursor=cursor, filter=_SUMMARIES, only="user")
            for fact in page.items:
                s = SessionSummary.from_fact(fact)
                if (start is None or s.end >= start) and (end is None or s.start <= end):
                    out.append(s)
            cursor = page.next_cursor
            if cursor is None:
                break
        out.sort(key=lambda s: (s.end, s.start, s.id), reverse=True)
        return out[:limit]
