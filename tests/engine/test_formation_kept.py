"""What formation keeps: a superseded value never comes back through a re-confirmation (NONE),
and a formed and cleared session leaves the user's own words in long-term memory.

The engine tests here take the ``mem`` fixture, so tests/engine/test_engine_backends.py runs them on
SQLite, PostgreSQL and PostgreSQL + Redis as well.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memlane import AsyncMemory, Event, EventType, FormationConfig, FormationError
from memlane.formation.offline.claims import _decide_one
from memlane.formation.runner import FormationResult
from memlane.formation.schemas import DedupItem, ExistingFact
from memlane.models import Fact, content_hash
from memlane.policy import resolve_change
from memlane.stores.base import FactChange

OLD = "Sam's email is sam@example.org"
NEW = "Sam's email is sam@new.example"


async def _valid_texts(mem: AsyncMemory, user_id: str) -> list[str]:
    return sorted(f.content for f in (await mem.list(user_id=user_id, kind="fact")).items)


async def test_a_superseded_value_added_again_never_outlives_a_newer_statement(mem: AsyncMemory) -> None:
    """README block 1 then block 2, twice: the old e-mail, added back by hand after the new one
    replaced it, is retired when the new e-mail is said again (it was a NONE that left both)."""
    await mem.add(OLD, user_id="sam")
    first = await mem.add("My email is now sam@new.example", user_id="sam", infer=True)
    assert [f.content for f in first] == [NEW]  # UPDATE of the old fact
    again = await mem.add(OLD, user_id="sam")  # the superseded value, stored again verbatim
    assert await _valid_texts(mem, "sam") == sorted([OLD, NEW])
    await mem.add("My email is now sam@new.example", user_id="sam", infer=True)
    assert await _valid_texts(mem, "sam") == [NEW]
    profile = await mem.profile("sam")
    assert profile is not None and "sam@new.example" in profile and "sam@example.org" not in profile
    events = [h.event for h in await mem.history(again[0].id, user_id="sam")]
    assert events == ["ADD", "DELETE"]


async def test_a_plain_repeat_is_still_none(mem: AsyncMemory) -> None:
    """Nothing else changes: saying the current value again stores nothing and retires nothing."""
    await mem.add("My email is sam@new.example", user_id="sam", infer=True)
    assert await mem.add("My email is sam@new.example", user_id="sam", infer=True) == []
    assert await _valid_texts(mem, "sam") == [NEW]


def test_offline_decision_retires_the_contradicted_candidate_next_to_a_duplicate() -> None:
    item = DedupItem(
        index=0,
        content=NEW,
        candidates=[ExistingFact(id="same", content=NEW), ExistingFact(id="old", content=OLD)],
    )
    d = _decide_one(item)
    assert (d.event, d.fact_id) == ("DELETE", "old")
    alone = DedupItem(index=0, content=NEW, candidates=[ExistingFact(id="same", content=NEW)])
    assert (_decide_one(alone).event, _decide_one(alone).fact_id) == ("NONE", "same")


def _fact(fid: str, text: str) -> Fact:
    return Fact(id=fid, content=text, hash=content_hash(text), scope="user", user_id="sam", kind="fact")


def test_policy_retires_only_a_replacement_never_a_merge() -> None:
    same, old = _fact("same", NEW), _fact("old", OLD)
    stored = {same.hash: same}
    new = _fact("n", NEW)
    delete = resolve_change(FactChange("DELETE", "u|sam|", fact=new, target_id="old"), old, stored.get)
    assert (delete.action, delete.existing, delete.retired) == ("retire", same, old)
    update = resolve_change(FactChange("UPDATE", "u|sam|", fact=new, target_id="old", text=NEW), old, stored.get)
    assert update.action == "retire"
    merged = "Sam's email is sam@new.example, also sam@example.org for work"
    merge = resolve_change(FactChange("UPDATE", "u|sam|", fact=new, target_id="old", text=merged), old, stored.get)
    assert (merge.action, merge.existing) == ("none", same)  # a merge keeps its target's words
    on_same = resolve_change(FactChange("DELETE", "u|sam|", fact=new, target_id="same"), same, stored.get)
    assert (on_same.action, on_same.existing) == ("none", same)


# --------------------------------------------------------------------------- nothing said is lost

SECRET = "My secret project codename is BLUEFALCON"


async def _chat(mem: AsyncMemory, sid: str, users: list[str]) -> Event:
    await mem.sessions.get_or_create_session(session_id=sid, user_ids=users)
    said = await mem.add_event(sid, Event(type=EventType.USER_MESSAGE, author="Sam", content=SECRET))
    await mem.add_event(sid, Event(type=EventType.AGENT_RESPONSE, author="gaia", content="BLUEFALCON, noted."))
    return said


async def test_a_cleared_session_keeps_what_the_user_said(mem: AsyncMemory) -> None:
    """The offline model extracts nothing from the codename; once the session is formed and
    cleared, the user's turn is still found, with its provenance; the agent's turn is not kept."""
    said = await _chat(mem, "s1", ["sam"])
    res = await mem.reset_session("s1")
    assert isinstance(res, FormationResult) and res.cleared
    assert not any("BLUEFALCON" in f.content for f in res.facts)  # an extraction miss
    assert await mem.sessions.get_session("s1") is None
    hits = [h for h in (await mem.search("BLUEFALCON", user_id="sam")).hits if h.fact.kind != "summary"]
    assert [h.fact.content for h in hits] == [SECRET]
    kept = hits[0].fact
    assert res.kept == [kept.id]
    assert (kept.kind, kept.scope, kept.user_id, kept.session_id) == ("message", "user", "sam", "s1")
    assert kept.author == "Sam"
    assert kept.source_event_ids == [said.id] and kept.metadata["source"] == "session"
    assert (await mem.search("BLUEFALCON", user_id="kai")).hits == []


async def test_a_replayed_clear_keeps_each_turn_once(mem: AsyncMemory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job dies after keeping the turns and before the session is deleted; its replay keeps
    them again (idempotent) and then clears the session."""
    await _chat(mem, "s1", ["sam"])
    sessions = mem.formation.sessions
    real = sessions.delete_session
    calls = 0

    async def fail_once(session_id: str, *, app: str = "default") -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("killed before the session was deleted")
        return await real(session_id, app=app)

    monkeypatch.setattr(sessions, "delete_session", fail_once)
    with pytest.raises(FormationError):
        await mem.reset_session("s1")
    assert [f.content for f in (await mem.list(user_id="sam", kind="message")).items] == [SECRET]
    (failed,) = await mem.list_jobs(status="failed")
    res = await mem.formation.wait_for(await mem.retry_job(failed.id))
    assert res.cleared and calls == 2
    assert [f.content for f in (await mem.list(user_id="sam", kind="message")).items] == [SECRET]
    assert await mem.sessions.get_session("s1") is None


async def test_a_group_session_keeps_no_users_turns(mem: AsyncMemory) -> None:
    await _chat(mem, "room", ["sam", "kai"])
    res = await mem.reset_session("room")
    assert isinstance(res, FormationResult) and res.cleared and res.kept == []
    for user in ("sam", "kai"):
        assert (await mem.list(user_id=user)).items == []


async def test_keep_user_turns_off_keeps_nothing(tmp_path: Path) -> None:
    conf = FormationConfig(keep_user_turns=False, session_summaries=False, background=False, idle_minutes=None)
    async with AsyncMemory(tmp_path / "off.db", embedder="hash", formation=conf) as m:
        await _chat(m, "s1", ["sam"])
        res = await m.reset_session("s1")
        assert isinstance(res, FormationResult) and res.cleared and res.kept == []
        assert (await m.list(user_id="sam", kind="message")).items == []
        assert (await m.search("BLUEFALCON", user_id="sam")).hits == []


async def test_end_session_then_the_idle_sweep_keeps_the_turns(tmp_path: Path) -> None:
    """The issue's path: end_session forms (nothing extracted), the idle sweep later clears the
    session; the codename is still found."""
    # 60 ms of silence; no session summary (it would quote the codename: docs/summaries.md)
    conf = FormationConfig(background=False, idle_minutes=0.001, session_summaries=False)
    async with AsyncMemory(tmp_path / "idle.db", embedder="hash", formation=conf) as m:
        said = await _chat(m, "s1", ["sam"])
        await m.end_session("s1")
        assert (await m.search("BLUEFALCON", user_id="sam")).hits == []  # the session still holds it
        await asyncio.sleep(0.1)
        (job,) = await m.sweep_idle()
        await m.run_jobs()
        done = await m.get_job(job.id)
        assert done.result is not None and done.result["cleared"] and done.result["skipped"] == "nothing new to form"
        assert await m.sessions.get_session("s1") is None
        hits = (await m.search("BLUEFALCON", user_id="sam")).hits
        assert [(h.fact.content, h.fact.source_event_ids) for h in hits] == [(SECRET, [said.id])]
