"""KAOS code runs unchanged on memlane's KAOS-named session stores (LocalMemory, RedisMemory,
NullMemory): ``create_session(app_name=, user_id=)`` returns a session id, ``create_event``
builds an event, ``get_session_events`` reads them (``[]`` for an unknown session)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memlane.errors import InvalidInputError
from memlane.models import EventType, Session
from memlane.stores.base import SessionStore
from memlane.stores.local import LocalMemory
from memlane.stores.null import NullMemory


@pytest.fixture(params=["local", "redis"])
async def kaos(request: pytest.FixtureRequest) -> AsyncIterator[LocalMemory]:
    if request.param == "local":
        yield LocalMemory()
        return
    from memlane.stores.redis.sessions import RedisMemory

    store = RedisMemory(redis_url=request.getfixturevalue("redis_url"))
    try:
        yield store  # type: ignore[misc]  # the same KAOS surface
    finally:
        await store.close()


async def test_kaos_session_and_event_methods(kaos: LocalMemory) -> None:
    """The KAOS docs' own calls (kaos-memory.md: Session Management, Event Management)."""
    assert isinstance(kaos, SessionStore)
    session_id = await kaos.create_session(app_name="agent", user_id="user123")
    assert isinstance(session_id, str)
    assert await kaos.get_or_create_session(session_id=session_id, app_name="agent") == session_id  # idempotent
    assert await kaos.get_or_create_session("fresh", "agent", "user123") == "fresh"
    assert (await kaos.get_or_create_session(session_id="fresh", app="agent")).user_ids == ["user123"]
    stored = await kaos.get_session(session_id, app="agent")
    assert stored is not None and stored.app == "agent" and stored.user_ids == ["user123"]
    event = kaos.create_event("user_message", "Hello!", metadata={"source": "api"})
    assert event.type is EventType.USER_MESSAGE and event.metadata == {"source": "api"}
    await kaos.add_event(session_id, event, app="agent")
    await kaos.add_event(session_id, kaos.create_event("agent_response", "Hi."), app="agent")
    all_events = await kaos.get_session_events(session_id, app="agent")
    assert [e.content for e in all_events] == ["Hello!", "Hi."]
    only = await kaos.get_session_events(session_id, event_types=["user_message"], app="agent")
    assert [e.content for e in only] == ["Hello!"]
    assert await kaos.get_session_events("no-such-session") == []
    # positional KAOS form, with a custom id; the default app when app_name is the default
    assert await kaos.create_session("default", "ana", "custom-id") == "custom-id"
    assert (await kaos.get_session("custom-id")).user_ids == ["ana"]  # type: ignore[union-attr]
    # memlane's keyword form still returns the Session
    session = await kaos.create_session(app="agent", user_ids=["bo"], session_id="m1")
    assert isinstance(session, Session) and session.id == "m1"


async def test_kaos_forms_are_checked(kaos: LocalMemory) -> None:
    with pytest.raises(InvalidInputError):
        kaos.create_event("not_a_type", "x")
    with pytest.raises(InvalidInputError):
        kaos.create_event("user_message", "x", metadata=["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):  # the two forms mixed
        await kaos.create_session(app_name="agent", user_id="u", app="other")  # type: ignore[call-overload]
    assert await kaos.list_sessions(app="other") == []
    sid = await kaos.create_session(app_name="agent", user_id="u")
    with pytest.raises(InvalidInputError):  # an existing id is refused, as memlane's form refuses it
        await kaos.create_session(app_name="agent", user_id="u", session_id=sid)


async def test_null_memory_answers_kaos_names_and_keeps_nothing() -> None:
    null = NullMemory()
    assert isinstance(null, SessionStore)
    session_id = await null.create_session(app_name="agent", user_id="user123")
    assert isinstance(session_id, str) and session_id
    event = null.create_event("user_message", "Hello!")
    assert await null.add_event(session_id, event) == event
    assert await null.get_session_events(session_id) == []
    assert await null.get_session(session_id, app="agent") is None
    assert isinstance(await null.create_session(user_ids=["u"]), Session)
