"""Session summaries (docs/summaries.md): a formed one-to-one session leaves a ``summary`` memory
in the user's memory (time range, message count, topics), listed by ``summaries()`` and found by
search, updated (versioned) by later formations of the session, erased by ``forget``.

The tests taking the ``mem`` fixture run here on a SQLite file and, imported by
tests/engine/test_engine_backends.py, on PostgreSQL and on PostgreSQL with Redis sessions and queue.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from memlane import AsyncMemory, Event, EventType, FormationConfig, FormationError, Memory, SessionSummary
from memlane.errors import InvalidInputError, ScopeError
from memlane.formation.runner import FormationResult
from memlane.formation.schemas import Turn
from memlane.formation.summaries import session_topics, summary_text

WEDNESDAY = datetime(2026, 11, 18, 19, 0, tzinfo=UTC)
TALK = [
    "I'm planning a hiking trip to Porto with my sister Ana.",
    "Porto has lovely trails. Do you need a route?",
    "Yes please, and I need a light camera for the hiking trip.",
    "A small mirrorless camera suits a hiking trip.",
]
MORE = ["Should I pack a rain jacket for Porto in December?", "Yes, December in Porto is rainy."]


async def _say(mem: AsyncMemory, sid: str, texts: list[str], start: datetime, *, app: str = "default") -> None:
    for i, text in enumerate(texts):
        kind = EventType.USER_MESSAGE if i % 2 == 0 else EventType.AGENT_RESPONSE
        author = "Sam" if i % 2 == 0 else "gaia"
        event = Event(type=kind, author=author, content=text, timestamp=start + timedelta(minutes=i))
        await mem.add_event(sid, event, app=app)


async def _formed(
    mem: AsyncMemory, sid: str = "s1", texts: list[str] = TALK, users: tuple[str, ...] = ("sam",)
) -> FormationResult:
    await mem.sessions.get_or_create_session(session_id=sid, user_ids=list(users))
    await _say(mem, sid, texts, WEDNESDAY)
    res = await mem.form(sid)
    assert isinstance(res, FormationResult)
    return res


async def test_a_formed_session_is_summarised_listed_by_period_and_found_by_its_date(mem: AsyncMemory) -> None:
    res = await _formed(mem)
    (summary,) = await mem.summaries("sam")
    assert isinstance(summary, SessionSummary)
    assert (summary.session_id, summary.app, summary.user_id, summary.agent_id) == ("s1", "default", "sam", None)
    assert (summary.start, summary.end) == (WEDNESDAY, WEDNESDAY + timedelta(minutes=3))
    assert summary.message_count == 4 and summary.version == 1
    assert summary.topics == ["hiking", "trip", "Porto", "Ana", "camera"]
    assert "Wednesday 18 November 2026" in summary.text and "Porto" in summary.text
    # the job's result names it apart from the facts it formed
    assert res.summary is not None and res.summary.id == summary.id and res.summary.kind == "summary"
    assert summary.id not in {c.fact.id for c in res.changes}
    # the memory behind it: the user's, its time the session's end, the same data in metadata
    fact = await mem.get(summary.id, user_id="sam")
    assert (fact.kind, fact.scope, fact.session_id, fact.occurred_at) == ("summary", "user", "s1", summary.end)
    assert fact.metadata["message_count"] == 4 and fact.metadata["topics"] == summary.topics

    # "what did we talk about last week?": the week of 16-22 November, and not the next one
    assert [s.id for s in await mem.summaries("sam", since="2026-11-16", until="2026-11-22")] == [summary.id]
    assert [s.id for s in await mem.summaries("sam", since=date(2026, 11, 16), until=date(2026, 11, 18))] == [
        summary.id
    ]
    assert await mem.summaries("sam", since="2026-11-23") == []
    assert await mem.summaries("sam", until="2026-11-17") == []
    # through search: the date's words (the keyword index's date column) and the topics
    hits = (await mem.search("what did we talk about on 18 November 2026?", user_id="sam")).hits
    assert hits[0].fact.id == summary.id
    only = await mem.search("Wednesday November 2026", user_id="sam", filters={"kind": "summary"})
    assert [h.fact.id for h in only.hits] == [summary.id]
    assert [f.id for f in (await mem.list(user_id="sam", kind="summary")).items] == [summary.id]
    # another user's memory holds none of it
    assert await mem.summaries("kai") == []
    assert (await mem.search("what did we talk about on 18 November 2026?", user_id="kai")).hits == []


async def test_a_later_formation_updates_the_same_summary_versioned(mem: AsyncMemory) -> None:
    first = (await _formed(mem)).summary
    assert first is not None
    await _say(mem, "s1", MORE, WEDNESDAY + timedelta(days=1))
    res = await mem.form("s1")
    assert isinstance(res, FormationResult) and res.summary is not None
    (summary,) = await mem.summaries("sam")
    assert summary.id == first.id == res.summary.id
    assert summary.version == 2 and summary.message_count == 6
    assert (summary.start, summary.end) == (WEDNESDAY, WEDNESDAY + timedelta(days=1, minutes=1))
    assert "December" in summary.topics and "Thursday 19 November 2026" in summary.text
    fact = await mem.get(summary.id, user_id="sam")
    assert fact.metadata["message_count"] == 6 and fact.metadata["end"] == summary.end.isoformat()
    assert fact.metadata["job"] == res.job_id
    history = await mem.history(summary.id, user_id="sam")
    assert [h.event for h in history] == ["ADD", "UPDATE"]
    assert history[1].old_content == first.content and history[1].new_content == summary.text
    # the session now spans two days: both weeks' days list it
    assert [s.id for s in await mem.summaries("sam", since="2026-11-19", until="2026-11-19")] == [summary.id]
    assert (await mem.search("19 November 2026", user_id="sam", filters={"kind": "summary"})).hits


async def test_a_cleared_session_keeps_its_summary_and_the_next_one_under_its_id_gets_its_own(
    mem: AsyncMemory,
) -> None:
    await mem.sessions.get_or_create_session(session_id="sam:cli", user_ids=["sam"])
    await _say(mem, "sam:cli", TALK, WEDNESDAY)
    res = await mem.reset_session("sam:cli")
    assert isinstance(res, FormationResult) and res.cleared and res.summary is not None
    assert await mem.sessions.get_session("sam:cli") is None
    assert [s.id for s in await mem.summaries("sam")] == [res.summary.id]
    # Gaia's stable key: the same id, a new conversation a week later
    await mem.sessions.get_or_create_session(session_id="sam:cli", user_ids=["sam"])
    await _say(mem, "sam:cli", MORE, WEDNESDAY + timedelta(days=7))
    again = await mem.form("sam:cli")
    assert isinstance(again, FormationResult) and again.summary is not None
    later, earlier = await mem.summaries("sam")
    assert earlier.id == res.summary.id and later.id == again.summary.id != earlier.id
    assert (earlier.version, later.version, later.message_count) == (1, 1, 2)
    assert await mem.summaries("sam", since="2026-11-23") == [later]


async def test_forget_erases_the_summaries(mem: AsyncMemory) -> None:
    await _formed(mem)
    await _formed(mem, "s2", users=("kai",))
    assert len(await mem.summaries("sam")) == 1
    await mem.forget("sam")
    assert await mem.summaries("sam") == []
    assert (await mem.search("Porto hiking trip", user_id="sam")).hits == []
    assert [s.session_id for s in await mem.summaries("kai")] == ["s2"]


async def test_a_group_session_writes_no_summary(mem: AsyncMemory) -> None:
    res = await _formed(mem, "room", users=("sam", "kai"))
    assert res.summary is None
    assert await mem.summaries("sam") == [] and await mem.summaries("kai") == []


async def test_a_replayed_job_writes_the_summary_once(mem: AsyncMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job dies after its batch (summary included) was applied; its replay applies nothing
    again and still reports the summary."""
    await mem.sessions.get_or_create_session(session_id="s1", user_ids=["sam"])
    await _say(mem, "s1", TALK, WEDNESDAY)
    pipeline = mem.formation.pipeline
    real = pipeline.consolidate
    calls = 0

    async def fail_once(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("killed after the batch was applied")
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "consolidate", fail_once)
    with pytest.raises(FormationError):
        await mem.form("s1")
    (summary,) = await mem.summaries("sam")  # applied with the batch
    (failed,) = await mem.list_jobs(status="failed")
    res = await mem.formation.wait_for(await mem.retry_job(failed.id))
    assert calls == 2 and res.summary is not None and res.summary.id == summary.id
    assert [(s.id, s.version) for s in await mem.summaries("sam")] == [(summary.id, 1)]
    assert [h.event for h in await mem.history(summary.id, user_id="sam")] == ["ADD"]


async def test_summaries_of_one_agent(mem: AsyncMemory) -> None:
    await mem.sessions.get_or_create_session(session_id="s1", user_ids=["sam"], agent_id="gaia")
    await _say(mem, "s1", TALK, WEDNESDAY)
    await mem.form("s1")
    (summary,) = await mem.summaries("sam")
    assert summary.agent_id == "gaia"
    assert await mem.summaries("sam", agent_id="gaia") == [summary]
    assert await mem.summaries("sam", agent_id="other") == []


async def test_bad_arguments_are_refused(mem: AsyncMemory) -> None:
    with pytest.raises(InvalidInputError, match=r"since .* is after until"):
        await mem.summaries("sam", since="2026-11-22", until="2026-11-16")
    with pytest.raises(InvalidInputError, match="since must be a datetime"):
        await mem.summaries("sam", since="last week")
    with pytest.raises(InvalidInputError, match="limit"):
        await mem.summaries("sam", limit=0)
    with pytest.raises(ScopeError):
        await mem.summaries("")


async def test_limit_keeps_the_latest_sessions(mem: AsyncMemory) -> None:
    for day in range(3):
        sid = f"d{day}"
        await mem.sessions.get_or_create_session(session_id=sid, user_ids=["sam"])
        await _say(mem, sid, TALK, WEDNESDAY + timedelta(days=day))
        await mem.form(sid)
    assert [s.session_id for s in await mem.summaries("sam")] == ["d2", "d1", "d0"]
    assert [s.session_id for s in await mem.summaries("sam", limit=2)] == ["d2", "d1"]


# --------------------------------------------------------------------------- the setting, the sync facade


async def test_session_summaries_off_writes_none(tmp_path: Path) -> None:
    conf = FormationConfig(session_summaries=False, background=False, idle_minutes=None)
    async with AsyncMemory(tmp_path / "off.db", embedder="hash", formation=conf) as m:
        res = await _formed(m)
        assert res.summary is None and res.facts  # formed, facts and all, without a summary
        assert await m.summaries("sam") == []
        assert (await m.list(user_id="sam", kind="summary")).items == []


def test_the_sync_facade_lists_them(tmp_path: Path) -> None:
    with Memory(tmp_path / "sync.db", embedder="hash") as m:
        m.sessions.create_session(session_id="s1", user_ids=["sam"])
        for i, text in enumerate(TALK):
            kind = EventType.USER_MESSAGE if i % 2 == 0 else EventType.AGENT_RESPONSE
            m.add_event("s1", Event(type=kind, content=text, timestamp=WEDNESDAY + timedelta(minutes=i)))
        m.form("s1")
        assert [s.message_count for s in m.summaries("sam", since=WEDNESDAY, until=WEDNESDAY)] == [4]


# --------------------------------------------------------------------------- topics and text (pure)


def _turns(*said: tuple[str, str]) -> list[Turn]:
    return [Turn(role="user" if who == "u" else "assistant", author=who, text=text) for who, text in said]


def test_topics_count_content_words_and_leave_out_chat() -> None:
    turns = _turns(
        ("u", "Thanks! I really want to learn sourdough baking. My starter smells sour."),
        ("a", "Great, sourdough starters need feeding. Keep the starter warm."),
        ("u", "Okay. Is rye flour good for the starter? Maybe I'll ask Maria, she bakes."),
    )
    topics = session_topics(turns)
    assert topics == ["starter", "sourdough", "Maria", "learn", "baking"]
    assert session_topics(turns) == topics  # deterministic
    assert not {"thanks", "really", "want", "okay", "maybe", "great"} & {t.lower() for t in topics}
    # the speakers' own names are not topics; a word said once by the agent weighs half the user's
    named = _turns(("Sam", "Sam here: I love Lisbon."), ("gaia", "gaia likes Porto."))
    assert session_topics(named) == ["Lisbon", "Porto"]
    assert session_topics([]) == []


def test_summary_text_states_the_period_count_topics_and_the_latest_notes() -> None:
    one_day = summary_text(
        start=WEDNESDAY, end=WEDNESDAY + timedelta(minutes=5), message_count=1, topics=["Porto"], agent_name="gaia"
    )
    assert one_day == (
        "Conversation with gaia on Wednesday 18 November 2026, 19:00-19:05 UTC (1 message). Topics talked about: Porto."
    )
    notes = [f"note {i} " + "word " * 40 for i in range(5)]
    two_days = summary_text(start=WEDNESDAY, end=WEDNESDAY + timedelta(days=1), message_count=9, topics=[], notes=notes)
    assert two_days.startswith("Conversation from Wednesday 18 November 2026 19:00 to Thursday 19 November 2026")
    assert "note 4" in two_days and "note 2" in two_days and "note 1" not in two_days  # 150 words, the latest
