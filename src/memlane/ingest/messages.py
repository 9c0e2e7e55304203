"""Input normalisation for ``add``: a text or chat messages become verbatim :class:`Fact` rows
(``infer=False``) or formation :class:`Turn`\\s (``infer=True``). Every message is checked
(typed errors name the message index); nothing here does I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from memlane import inputs
from memlane.errors import InvalidInputError
from memlane.formation.schemas import Turn
from memlane.ingest.documents import MAX_DOCUMENT_CHARS
from memlane.models import (
    Event,
    Fact,
    FactKind,
    FactScope,
    checked_fact,
    content_hash,
    message_role,
    new_id,
    utcnow,
)

#: A chat message: ``{"role", "content", "name"?, "timestamp"?, "metadata"?, "id"?}`` or an Event.
Message = Mapping[str, Any] | Event
#: Most messages accepted by one ``add`` call.
MAX_BATCH = 10_000
#: The fields :func:`message_fact` sets (the others keep their defaults): its facts'
#: ``model_fields_set``, as if they had been validated from these keyword arguments.
MESSAGE_FIELDS = frozenset(
    {
        "content",
        "scope",
        "user_id",
        "agent_id",
        "session_id",
        "kind",
        "author",
        "occurred_at",
        "source_event_ids",
        "metadata",
        "hash",
    }
)


def message_key(session_id: str | None, author: str | None, when: datetime | None, text: str) -> str:
    """Idempotency key of a verbatim turn: the same turn re-sent is not stored twice,
    while a repeated "thanks" at another time is a new memory."""
    return content_hash(f"{session_id}\x1f{author}\x1f{when.isoformat() if when else ''}\x1f{text}")


def _checked_messages(messages: object) -> Sequence[Message]:
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes) or not messages:
        raise InvalidInputError("messages must be a non-empty text or list of messages")
    if len(messages) > MAX_BATCH:
        raise InvalidInputError(f"{len(messages)} messages in one call; the limit is {MAX_BATCH}")
    for i, m in enumerate(messages):
        if isinstance(m, str):
            raise InvalidInputError(f"message {i} must be a dict or Event, got str")
    return messages


def message_fact(
    m: Message,
    i: int,
    *,
    scope: FactScope,
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
    metadata: dict[str, Any],
    now: datetime | None = None,
) -> Fact:
    """One chat message as a verbatim memory (``kind="message"``) keeping author, time and id.
    ``now``: the time it is stored (``formed_at``, ``updated_at``, and ``valid_from`` of a
    message without a time); one call's messages share one.

    Every value is checked here (typed errors name the message), so the :class:`Fact` is
    built without running pydantic's validation again (:func:`memlane.models.checked_fact`;
    bulk ingest builds one per turn)."""
    when: datetime | None
    meta = metadata
    if isinstance(m, dict) or (not isinstance(m, Event) and isinstance(m, Mapping)):
        if "content" not in m:
            raise InvalidInputError(f"message {i} has no 'content'")
        text = inputs.clean_text(m["content"], f"message {i}", max_chars=MAX_DOCUMENT_CHARS)
        author = str(m.get("name") or m.get("role") or "user")
        when = inputs.timestamp(m.get("timestamp"), f"message {i} timestamp")
        src = [str(m["id"])] if m.get("id") else []
        extra = m.get("metadata")
        if extra is not None:
            meta = {**meta, **inputs.metadata(extra, f"message {i} metadata")}
    elif isinstance(m, Event):
        text = inputs.clean_text(m.text, f"message {i}", max_chars=MAX_DOCUMENT_CHARS)
        author, when, src = m.author, inputs.timestamp(m.timestamp, f"message {i} timestamp"), [m.id]
    else:
        raise InvalidInputError(f"message {i} must be a dict or Event, got {type(m).__name__}")
    if scope not in ("user", "agent", "room"):  # what validation would refuse (callers pass a checked one)
        raise InvalidInputError(f"scope must be 'user', 'agent' or 'room', got {scope!r}")
    at = utcnow() if now is None else now
    return checked_fact(
        {
            "id": new_id(),
            "content": text,
            "hash": message_key(session_id, author, when, text),
            "embedding": None,
            "scope": scope,
            "agent_id": agent_id,
            "user_id": user_id,
            "session_id": session_id,
            "kind": "message",
            "author": author,
            "seq": None,
            "occurred_at": when,
            "formed_at": at,
            "updated_at": at,
            "access_count": 0,
            "version": 1,
            "source_event_ids": src,
            "valid_from": when or at,
            "invalid_at": None,
            "metadata": dict(meta),
        },
        MESSAGE_FIELDS,
    )


def to_facts(
    messages: str | bytes | Sequence[Message],
    *,
    scope: FactScope,
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
    metadata: dict[str, Any],
    timestamp: datetime | None,
    kind: FactKind | None = None,
) -> list[Fact]:
    """``add``'s input as verbatim rows: a text is one ``fact``, each message one ``message``
    (or each of ``kind`` when given: ``description``, ``custom``, ...)."""
    if isinstance(messages, str | bytes):
        text = inputs.clean_text(messages, "text", max_chars=MAX_DOCUMENT_CHARS)
        # the kind is part of the identity: the same words as a fact and as a description are two memories
        key = text if kind in (None, "fact") else f"{kind}\x1f{text}"
        return [
            Fact(
                content=text,
                scope=scope,
                user_id=user_id,
                agent_id=agent_id,
                session_id=session_id,
                kind=kind or "fact",
                occurred_at=timestamp,
                metadata=metadata,
                hash=content_hash(key),
            )
        ]
    now = utcnow()
    facts = [
        message_fact(
            m, i, scope=scope, user_id=user_id, agent_id=agent_id, session_id=session_id, metadata=metadata, now=now
        )
        for i, m in enumerate(_checked_messages(messages))
    ]
    if kind not in (None, "message"):
        facts = [f.model_copy(update={"kind": kind, "hash": content_hash(f"{kind}\x1f{f.hash}")}) for f in facts]
    return facts


def to_turns(
    messages: str | bytes | Sequence[Message], facts: Sequence[Fact], *, timestamp: datetime | None
) -> list[Turn]:
    """``add(infer=True)``'s input as the conversation formation extracts facts from: a text is
    one user turn; messages become turns from their checked ``facts`` (see :func:`to_facts`)."""
    if isinstance(messages, str | bytes):
        return [Turn(role="user", author="user", text=inputs.clean_text(messages, "text"), at=timestamp)]
    return [
        Turn(
            role=message_role(m.role if isinstance(m, Event) else m.get("role", "user")),
            author=f.author or "user",
            text=f.content,
            at=f.occurred_at,
            event_id=f.source_event_ids[0] if f.source_event_ids else None,
        )
        for m, f in zip(messages, facts, strict=True)
    ]
