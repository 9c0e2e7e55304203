"""The directory reads, once for every SQL dialect (sans-IO: see :mod:`memlane.stores.sql`):
which users, agents and apps a store holds data of, with counts.

Operators' reads (the web inspector's lists, ``AsyncMemory.users`` / ``directory``): they
return ids and numbers, never content, and read across partitions as ``stats()`` does for the
whole store. Users are paged by id (keyset: ``user_id > after``, byte order, which is Python's
code-point order of the ids), so the engine can merge the fact store's and the session store's
pages; a page groups the rows of the users after the cursor (an inspector's read, not a hot
path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlane.models import AgentCount, AppCount, Directory, UserActivity
from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.stmt import Program, all_rows

if TYPE_CHECKING:  # sessions.py imports this module
    from memlane.stores.sql.sessions import SessionDialect

__all__ = ["fact_directory", "fact_users", "session_directory", "session_users"]


def _user_where(
    column: str, byte_order: str, text: Any, user_id: str | None, after: str | None
) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if user_id is not None:
        where.append(f"{column} = ?")
        args.append(text(user_id))
    if after is not None:
        where.append(f"{column}{byte_order} > ?")
        args.append(text(after))
    return where, args


def fact_users(
    d: Dialect, *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
) -> Program[list[UserActivity]]:
    """The users of the user scope's memories after ``after`` (see
    :meth:`memlane.stores.base.UserDirectory.directory_users`): memories, valid ones, the
    latest ``updated_at``."""
    where, args = _user_where("user_id", d.byte_order, d.text, user_id, after)
    where.insert(0, "scope = 'user' AND user_id IS NOT NULL")
    if agent_id is not None:
        where.append("agent_id = ?")
        args.append(d.text(agent_id))
    rows = yield from all_rows(
        "SELECT user_id, COUNT(*), COALESCE(SUM(CASE WHEN invalid_at IS NULL THEN 1 ELSE 0 END), 0), MAX(updated_at)"
        f" FROM facts WHERE {' AND '.join(where)} GROUP BY user_id ORDER BY user_id{d.byte_order} LIMIT ?",
        (*args, limit),
    )
    return [
        UserActivity(
            user_id=d.untext(r[0]) or "",
            facts=int(r[1]),
            valid_facts=int(r[2]),
            last_activity=None if r[3] is None else d.unts(r[3]),
        )
        for r in rows
    ]


def fact_directory(d: Dialect, *, user_id: str | None) -> Program[Directory]:
    """The agents of the store's memories (every scope: a user's under the agent, the agent's
    shared ones, its rooms'), or with ``user_id`` the agents of that user's own memories."""
    if user_id is None:
        rows = yield from all_rows("SELECT agent_id, COUNT(*) FROM facts WHERE agent_id IS NOT NULL GROUP BY agent_id")
    else:
        rows = yield from all_rows(
            "SELECT agent_id, COUNT(*) FROM facts WHERE user_id = ? AND scope = 'user' AND agent_id IS NOT NULL"
            " GROUP BY agent_id",
            (d.text(user_id),),
        )
    agents = [AgentCount(agent_id=d.untext(r[0]) or "", facts=int(r[1])) for r in rows]
    return Directory(agents=[a for a in agents if a.agent_id])


def session_users(
    d: SessionDialect, *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
) -> Program[list[UserActivity]]:
    """The participants of the store's sessions after ``after``: sessions (every app), the
    latest session activity (``updated_at``)."""
    where, args = _user_where("u.user_id", d.byte_order, d.text, user_id, after)
    if agent_id is not None:
        where.append("s.agent_id = ?")
        args.append(d.text(agent_id))
    cond = f" WHERE {' AND '.join(where)}" if where else ""
    rows = yield from all_rows(
        "SELECT u.user_id, COUNT(*), MAX(s.updated_at) FROM session_users u"
        f" JOIN sessions s ON s.app = u.app AND s.id = u.session_id{cond}"
        f" GROUP BY u.user_id ORDER BY u.user_id{d.byte_order} LIMIT ?",
        (*args, limit),
    )
    return [
        UserActivity(
            user_id=d.untext(r[0]) or "", sessions=int(r[1]), last_activity=None if r[2] is None else d.unts(r[2])
        )
        for r in rows
    ]


def session_directory(d: SessionDialect, *, user_id: str | None) -> Program[Directory]:
    """The apps of the store's sessions, or with ``user_id`` those holding that user's
    sessions (counting those)."""
    if user_id is None:
        rows = yield from all_rows("SELECT app, COUNT(*) FROM sessions GROUP BY app")
    else:
        rows = yield from all_rows(
            "SELECT app, COUNT(*) FROM session_users WHERE user_id = ? GROUP BY app", (d.text(user_id),)
        )
    return Directory(apps=[AppCount(app=d.untext(r[0]) or "", sessions=int(r[1])) for r in rows])
