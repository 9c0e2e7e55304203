"""Pure helpers over session events: windowing, message mapping, and the input checks
every :class:`~memlane.stores.base.SessionStore` applies. No I/O.

* :func:`window_events` bounds what is replayed to a model (KAOS ``memory_context_limit``,
  Gaia ``sessions.window_turns``).
* :func:`events_to_messages` maps events to ``{role, content, name}`` chat messages
  (KAOS's Pydantic AI bridge, Gaia's ``_events_to_messages``) for memory formation.
* ``check_*`` / :func:`prepare_event` / :func:`event_type_filter` are shared by the stores so
  that every backend accepts and rejects exactly the same input.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from memlane.errors import InvalidInputError
from memlane.models import EVENT_ROLES, AppCount, Directory, Event, EventType, Session, UserActivity

#: Event types that start a user turn (Gaia's window counts these).
TURN_START_TYPES = frozenset({EventType.USER_MESSAGE, EventType.TASK_DELEGATION_RECEIVED})

#: KAOS event-type -> chat role mapping used by :func:`events_to_messages`.
MESSAGE_ROLES: dict[EventType, str] = {
    t: EVENT_ROLES[t]
    for t in (
        EventType.USER_MESSAGE,
        EventType.TASK_DELEGATION_RECEIVED,
        EventType.AGENT_RESPONSE,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
    )
}


# --------------------------------------------------------------------------- windowing


def window_events(events: Sequence[Event], *, last_n: int | None = None, user_turns: int | None = None) -> list[Event]:
    """The tail of ``events`` worth replaying to a model.

    Args:
        events: a session's events, oldest first.
        last_n: keep at most the last ``last_n`` events.
        user_turns: keep the last ``user_turns`` user turns: a turn starts at a
            ``user_message`` or ``task_delegation_received`` event, and everything from the
            oldest kept turn start onwards is returned. With fewer turns than that in
            ``events`` (or none at all) nothing is trimmed.

    Both limits may be given: the shorter window wins. Neither: a copy of ``events``.
    ``0`` gives an empty list.

    Returns:
        A new list (the events themselves are not copied), oldest first.

    Raises:
        InvalidInputError: a negative limit.
    """
    _check_limit("last_n", last_n)
    _check_limit("user_turns", user_turns)
    start = 0
    if user_turns is not None:
        if user_turns == 0:
            return []
        starts = [i for i, e in enumerate(events) if e.type in TURN_START_TYPES]
        if len(starts) >= user_turns:
            start = starts[-user_turns]
    if last_n is not None:
        start = max(start, len(events) - last_n)
    return list(events[start:])


def _check_limit(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{name} must be a non-negative integer or None, got {value!r}")


# --------------------------------------------------------------------------- messages


def events_to_messages(events: Iterable[Event]) -> list[dict[str, str]]:
    """Map events to chat messages ``{"role", "content", "name"}`` (KAOS / Gaia mapping).

    ``user_message`` and ``task_delegation_received`` become ``user``, ``agent_response``
    ``assistant``, ``tool_call`` and ``tool_result`` ``tool``; ``name`` is the event's author.
    Other event types (delegations out, errors) and events without text (see
    :attr:`Event.text`: a string content, or a dict content with a ``"text"`` string) are
    skipped, so a tool event only contributes when it carries text.
    """
    messages: list[dict[str, str]] = []
    for event in events:
        role = MESSAGE_ROLES.get(event.type)
        if role is None:
            continue
        text = event.text
        if not text.strip():
            continue
        messages.append({"role": role, "content": text, "name": event.author})
    return messages


# --------------------------------------------------------------------------- store input checks


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a non-blank string, else raise InvalidInputError."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise InvalidInputError(
            f"session_id must be a non-empty string, got {session_id!r}; "
            "omit it on create_session to get a generated id"
        )
    return session_id


def check_app(app: object) -> str:
    """Return ``app`` if it is a non-blank string, else raise InvalidInputError."""
    if not isinstance(app, str) or not app.strip():
        raise InvalidInputError(f"app must be a non-empty string (default 'default'), got {app!r}")
    return app


def check_user_ids(user_ids: Sequence[str]) -> list[str]:
    """Validated participants, duplicates removed (first occurrence kept)."""
    if isinstance(user_ids, str):
        raise InvalidInputError(f"user_ids must be a list of ids, not a string: pass user_ids=[{user_ids!r}]")
    out: list[str] = []
    for user_id in user_ids:
        if not isinstance(user_id, str) or not user_id.strip():
            raise InvalidInputError(f"each user id must be a non-empty string, got {user_id!r}")
        if user_id not in out:
            out.append(user_id)
    return out


def check_optional_name(name: str, value: object) -> str | None:
    """``agent_id`` / ``channel``: None or a non-blank string."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidInputError(f"{name} must be None or a non-empty string, got {value!r}")
    return value


def check_json(what: str, value: Any) -> str:
    """Serialise ``value`` to JSON text, or raise InvalidInputError naming ``what``."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"{what} must be JSON-serialisable (str, number, bool, None, list, dict): {exc}"
        ) from exc


def new_session(
    *,
    app: str,
    user_ids: Sequence[str],
    agent_id: str | None,
    channel: str | None,
    session_id: str | None,
    state: dict[str, object] | None,
) -> Session:
    """A validated new :class:`Session` (every session store builds sessions here). The state
    is round-tripped through JSON, so the object equals what a later read returns."""
    check_app(app)
    if session_id is not None:
        check_session_id(session_id)
    users = check_user_ids(user_ids)
    check_optional_name("agent_id", agent_id)
    check_optional_name("channel", channel)
    if state is not None and not isinstance(state, dict):
        raise InvalidInputError(f"state must be a dict, got {type(state).__name__}")
    state_copy = json.loads(check_json("session state", state or {}))
    session = Session(app=app, user_ids=users, agent_id=agent_id, channel=channel, state=state_copy)
    if session_id is not None:
        session.id = session_id
    session.created_at = to_utc(session.created_at)
    session.updated_at = session.created_at
    return session


def full_message(max_sessions: int, user_ids: Sequence[str]) -> str:
    """The message of a bounded store's :class:`~memlane.errors.StoreFullError`: full, and no
    stored session belongs only to ``user_ids`` (so making room would evict someone else's)."""
    who = f"user(s) {', '.join(map(repr, user_ids))}" if user_ids else "sessions without users"
    return (
        f"the session store is full ({max_sessions} sessions) and none of them belongs only to {who}:"
        " another user's sessions are never evicted to make room; delete or end sessions, or raise"
        " max_sessions"
    )


def to_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime; a naive datetime is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def prepare_event(event: Event) -> Event:
    """A validated deep copy of ``event`` as a store keeps it: UTC timestamp, JSON payload.

    Raises:
        InvalidInputError: not an Event, an unknown type, a blank id, or a non-JSON payload.
    """
    if not isinstance(event, Event):
        raise InvalidInputError(f"expected an Event, got {type(event).__name__}")
    copy = event.model_copy(deep=True)
    try:
        copy.type = EventType(copy.type)
    except ValueError:
        raise InvalidInputError(
            f"unknown event type {copy.type!r}; use one of {[t.value for t in EventType]}"
        ) from None
    if not isinstance(copy.id, str) or not copy.id.strip():
        raise InvalidInputError(f"event id must be a non-empty string, got {copy.id!r}")
    if not isinstance(copy.author, str):
        raise InvalidInputError(f"event author must be a string, got {copy.author!r}")
    if not isinstance(copy.timestamp, datetime):
        raise InvalidInputError(f"event timestamp must be a datetime, got {copy.timestamp!r}")
    if not isinstance(copy.metadata, dict):
        raise InvalidInputError(f"event metadata must be a dict, got {type(copy.metadata).__name__}")
    copy.timestamp = to_utc(copy.timestamp)
    check_json("event content", copy.content)
    check_json("event metadata", copy.metadata)
    return copy


def event_type_filter(
    event_types: Sequence[EventType | str] | EventType | str | None,
) -> frozenset[EventType] | None:
    """Normalise ``get_events``' type filter: None (no filter) or a set of EventType.

    A single type (string or EventType) is accepted as a one-element filter.

    Raises:
        InvalidInputError: an unknown type name.
    """
    if event_types is None:
        return None
    items: Iterable[EventType | str] = [event_types] if isinstance(event_types, str) else event_types
    out: set[EventType] = set()
    for item in items:
        try:
            out.add(EventType(item))
        except ValueError:
            raise InvalidInputError(f"unknown event type {item!r}; use one of {[t.value for t in EventType]}") from None
    return frozenset(out)


def check_limit(limit: int | None) -> int | None:
    """``get_events``' ``limit``: None (all) or a non-negative int."""
    _check_limit("limit", limit)
    return limit


# --------------------------------------------------------------------------- export


def is_own_event(event: Event, user_id: str) -> bool:
    """The user's own event of a group session: its author or ``metadata["user_id"]`` is the
    user (what ``forget`` erases from a group session)."""
    return event.author == user_id or event.metadata.get("user_id") == user_id


def export_session(session: Session, user_id: str) -> dict[str, Any]:
    """A session as ``export_user`` returns it (JSON data): a session of the user alone whole
    (state and every event); a group session with only the user's own events, without its
    state and the other participants' ids (theirs, not the user's)."""
    group = session.user_ids != [user_id]
    events = [e for e in session.events if not group or is_own_event(e, user_id)]
    out = session.model_dump(mode="json", exclude={"events", "state", "user_ids"} if group else {"events"})
    out["group"] = group
    out["events"] = [e.model_dump(mode="json") for e in events]
    return out


# --------------------------------------------------------------------------- directory


def directory_users(
    sessions: Iterable[Session], *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
) -> list[UserActivity]:
    """The participants of ``sessions`` as :meth:`UserDirectory.directory_users
    <memlane.stores.base.UserDirectory.directory_users>` lists them (for stores that hold
    their sessions as objects: in process, Redis): sessions per user and the latest activity,
    by user id after ``after``, at most ``limit``."""
    found: dict[str, UserActivity] = {}
    for s in sessions:
        if agent_id is not None and s.agent_id != agent_id:
            continue
        for u in dict.fromkeys(s.user_ids):
            if (user_id is not None and u != user_id) or (after is not None and u <= after):
                continue
            row = found.setdefault(u, UserActivity(user_id=u))
            row.sessions += 1
            if row.last_activity is None or s.updated_at > row.last_activity:
                row.last_activity = s.updated_at
    return [found[u] for u in sorted(found)[:limit]]


def directory_apps(sessions: Iterable[Session], *, user_id: str | None) -> Directory:
    """The apps of ``sessions`` with their session counts (with ``user_id``: that user's
    sessions only), as :meth:`UserDirectory.directory <memlane.stores.base.UserDirectory.directory>`
    reports them."""
    apps: dict[str, int] = {}
    for s in sessions:
        if user_id is None or user_id in s.user_ids:
            apps[s.app] = apps.get(s.app, 0) + 1
    return Directory(apps=[AppCount(app=a, sessions=n) for a, n in apps.items()])
