"""The directory through the engine: which users, agents and apps a memory holds data of.

:meth:`DirectoryMethods.users` pages the users (from the memories' partitions and the
sessions' participants: a user with sessions only is listed), :meth:`DirectoryMethods.directory`
lists the agents and apps. Both are operators' reads of ids and counts, never content (the web
inspector's lists, ``GET /v1/users`` and ``GET /v1/agents``). Each store that can answer
(:class:`~memlane.stores.base.UserDirectory`: the SQL stores, the in-process and Redis session
stores) reports what it holds; the counts are added up here.
"""

from __future__ import annotations

import base64
import binascii

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.errors import InvalidInputError
from memlane.models import AgentCount, AppCount, Directory, UserActivity, UserPage
from memlane.stores.base import UserDirectory

__all__ = ["DirectoryMethods", "decode_cursor", "encode_cursor"]

#: Longest page of users.
MAX_USERS_PAGE = 10_000


def encode_cursor(user_id: str) -> str:
    """The cursor of the page after ``user_id`` (opaque to callers: pass it back unchanged)."""
    return base64.urlsafe_b64encode(user_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    """The user id a cursor of :func:`encode_cursor` continues after (None: the first page).

    Raises:
        InvalidInputError: not such a cursor.
    """
    if cursor is None or cursor == "":
        return None
    bad = InvalidInputError(f"invalid cursor {inputs.show(cursor)}: pass back a page's next_cursor unchanged")
    if not isinstance(cursor, str) or not cursor.isascii() or len(cursor) > 4 * inputs.MAX_ID_CHARS:
        raise bad
    try:
        user_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        raise bad from None
    if encode_cursor(user_id) != cursor:  # one spelling per cursor
        raise bad
    return user_id


class DirectoryMethods(EngineState):
    """The engine's directory: its users, agents and apps, with counts."""

    def _directory_stores(self) -> list[UserDirectory]:
        found: list[UserDirectory] = []
        for store in (self.facts, self.sessions):
            if isinstance(store, UserDirectory) and all(store is not s for s in found):
                found.append(store)
        return found

    @opening
    async def users(
        self,
        agent_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        *,
        user_id: str | None = None,
    ) -> UserPage:
        """The users this memory holds data of, sorted by user id, a page at a time: those with
        memories of their own (user scope) and those taking part in sessions (a user with
        sessions only is listed), each with its memories (all and valid), its sessions and its
        last activity (the latest change of its memories or sessions). Ids and counts only.

        Args:
            agent_id: only users with memories or sessions under this agent (their counts under
                it).
            limit: users per page (1 to 10,000).
            cursor: a page's ``next_cursor``, for the page after it (None: the first page).
            user_id: only this user (a list of one, or empty when it holds nothing): what a
                user-bound API key sees.

        Returns:
            the page; its ``next_cursor`` is None on the last page.

        Raises:
            InvalidInputError: a bad ``limit`` or ``cursor``.
            ScopeError: a bad ``agent_id`` or ``user_id``.
        """
        agent_id = inputs.optional_id(agent_id, "agent_id")
        user_id = inputs.optional_id(user_id, "user_id")
        limit = inputs.integer(limit, "limit", 1, MAX_USERS_PAGE)
        after = decode_cursor(cursor)
        merged: dict[str, UserActivity] = {}
        for store in self._directory_stores():
            # each store's first limit + 1 users: a user on the merged page ranks no lower in any store
            rows = await store.directory_users(agent_id=agent_id, user_id=user_id, after=after, limit=limit + 1)
            for row in rows:
                have = merged.get(row.user_id)
                if have is None:
                    merged[row.user_id] = row.model_copy()
                    continue
                have.facts += row.facts
                have.valid_facts += row.valid_facts
                have.sessions += row.sessions
                if row.last_activity is not None and (
                    have.last_activity is None or row.last_activity > have.last_activity
                ):
                    have.last_activity = row.last_activity
        ordered = sorted(merged)
        page = [merged[u] for u in ordered[:limit]]
        more = len(ordered) > limit
        return UserPage(users=page, next_cursor=encode_cursor(page[-1].user_id) if more and page else None)

    @opening
    async def directory(self, *, user_id: str | None = None) -> Directory:
        """The agents (with their memories: their users' and their shared ones) and the apps
        (with their sessions) this memory holds, each sorted by name. Ids and counts only.

        Args:
            user_id: only the agents and apps holding this user's data, counting that user's
                memories and sessions: what a user-bound API key sees.

        Raises:
            ScopeError: a bad ``user_id``.
        """
        user_id = inputs.optional_id(user_id, "user_id")
        agents: dict[str, int] = {}
        apps: dict[str, int] = {}
        for store in self._directory_stores():
            found = await store.directory(user_id=user_id)
            for a in found.agents:
                agents[a.agent_id] = agents.get(a.agent_id, 0) + a.facts
            for p in found.apps:
                apps[p.app] = apps.get(p.app, 0) + p.sessions
        return Directory(
            agents=[AgentCount(agent_id=a, facts=agents[a]) for a in sorted(agents)],
            apps=[AppCount(app=p, sessions=apps[p]) for p in sorted(apps)],
        )
