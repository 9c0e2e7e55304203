"""Memory formation end to end: dedup events, batching, scopes, reflections, consolidation,
profile, triggers, idle lifecycle, durable jobs and faults (with a scripted model)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formation_helpers import Brain
from memlane import AsyncMemory, Event, EventType, FormationError
from memlane.errors import EmbedderError, LLMError, UsageError
from memlane.formation.config import FormationConfig
from memlane.formation.schemas import DedupInput, ReflectionOutput
from memlane.models import utcnow
from memlane.providers.embed.hashing import HashEmbedder


class CountingEmbedder(HashEmbedder):
    """Hash embedder that counts calls and can be told to fail."""

    def __init__(self) -> None:
        super().__init__(dim=256)
        self.calls: list[int] = []
        self.fail = 0

    async def embed_batch(self, texts: list[str]) -> Any:
        self.calls.append(len(texts))
        if self.fail:
            self.fail -= 1
            raise EmbedderError("embedder down", retryable=True)
        return await super().embed_batch(texts)


def cfg(**kw: Any) -> FormationConfig:
    base: dict[str, Any] = {"background": False, "retry_base_seconds": 0, "idle_minutes": None}
    base.update(kw)
    return FormationConfig(**base)


@pytest.fixture
async def brain_mem(tmp_path: Path) -> AsyncIterator[tuple[AsyncMemory, Brain, CountingEmbedder]]:
    brain, emb = Brain(), CountingEmbedder()
    # the hash embedder's cosines run lower than a real model's: 0.5 keeps "likes"/"dislikes" pairs candidates
    m = await AsyncMemory(tmp_path / "f.db", embedder=emb, llm=brain, formation=cfg(dedup_threshold=0.5)).open()
    try:
        yield m, brain, emb
    finally:
        await m.close()


def user(text: str) -> Event:
    return Event(type=EventType.USER_MESSAGE, author="Sam", content=text)


def agent(text: str) -> Event:
    return Event(type=EventType.AGENT_RESPONSE, author="bot", content=text)


async def chat(m: AsyncMemory, sid: str, n_pairs: int, *, app: str = "default", tier: int | None = None) -> None:
    for i in range(n_pairs):
        await m.add_event(sid, user(f"user message {i}"), app=app, tier=tier)
        await m.add_event(sid, agent(f"agent reply {i}"), app=app, tier=tier)


# --------------------------------------------------------------------------- dedup


async def test_dedup_add_update_delete_none(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, _ = brain_mem
    brain.queue("extract", ["Sam's email is sam@old.com", "Sam likes pizza"])
    added = await m.add("my email is sam@old.com and I like pizza", user_id="sam", infer=True)
    assert sorted(f.content for f in added) == ["Sam likes pizza", "Sam's email is sam@old.com"]
    email = next(f for f in added if "email" in f.content)
    pizza = next(f for f in added if "pizza" in f.content)

    # identical re-add: the model even says DELETE -> NONE, nothing deleted, nothing added (mem0 #1674/#4536)
    brain.queue("extract", ["Sam likes pizza"])
    brain.queue("dedup", [{"index": 0, "event": "DELETE", "fact_id": pizza.id}])
    assert await m.add("I like pizza", user_id="sam", infer=True) == []
    assert (await m.get(pizza.id, user_id="sam")).is_valid
    assert [h.event for h in await m.history(pizza.id, user_id="sam")] == ["ADD", "NONE"]

    # new email: UPDATE with merged text, version 2, old text in history
    brain.queue("extract", ["Sam's email is sam@new.com"])
    brain.queue("dedup", [{"index": 0, "event": "UPDATE", "fact_id": email.id, "text": "Sam's email is sam@new.com"}])
    (updated,) = await m.add("my email is now sam@new.com", user_id="sam", infer=True)
    assert updated.id == email.id and updated.version == 2 and updated.content == "Sam's email is sam@new.com"
    hist = await m.history(email.id, user_id="sam")
    assert [(h.event, h.old_content, h.new_content, h.actor) for h in hist][-1] == (
        "UPDATE",
        "Sam's email is sam@old.com",
        "Sam's email is sam@new.com",
        "formation",
    )

    # contradiction: DELETE invalidates the old fact (kept, invalid_at set) and stores the new one
    brain.queue("extract", ["Sam dislikes pizza"])
    brain.queue("dedup", [{"index": 0, "event": "DELETE", "fact_id": pizza.id}])
    (new,) = await m.add("I don't like pizza any more", user_id="sam", infer=True)
    assert new.content == "Sam dislikes pizza"
    old = await m.get(pizza.id, user_id="sam")
    assert old.invalid_at is not None
    assert [h.event for h in await m.history(pizza.id, user_id="sam")] == ["ADD", "NONE", "DELETE"]
    found = await m.search("pizza", user_id="sam")
    assert [h.fact.content for h in found.hits] == ["Sam dislikes pizza"]


async def test_decision_about_an_unseen_fact_is_add(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, _ = brain_mem
    other = (await m.add("Kai's email is kai@x.com", user_id="kai"))[0]
    mine = (await m.add("Sam's email is sam@x.com", user_id="sam"))[0]
    brain.queue("extract", ["Sam's email is sam@y.com"])
    # the model points at another user's fact and at a made-up id: both ignored -> ADD
    brain.queue(
        "dedup",
        [{"index": 0, "event": "DELETE", "fact_id": other.id}, {"index": 0, "event": "UPDATE", "fact_id": "nope"}],
    )
    out = await m.add("my email is sam@y.com", user_id="sam", infer=True)
    assert [f.content for f in out] == ["Sam's email is sam@y.com"]
    assert (await m.get(other.id, user_id="kai")).is_valid
    assert (await m.get(mine.id, user_id="sam")).is_valid


async def test_one_embed_and_one_dedup_call_per_batch(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, emb = brain_mem
    brain.queue("extract", ["Sam lives in Lisbon", "Sam works at Acme", "Sam has a dog named Rex"])
    await m.add("intro", user_id="sam", infer=True)
    assert brain.count("dedup") == 0  # nothing similar stored yet: no dedup call at all
    emb.calls.clear()
    brain.queue("extract", ["Sam lives in Porto", "Sam works at Acme Corp", "Sam has a dog named Rex", "Sam is 34"])
    await m.add("update", user_id="sam", infer=True)
    assert emb.calls == [4]  # one batched embedding call for all new facts
    assert brain.count("dedup") == 1  # ONE decision call for every fact with candidates
    dedup_inp = brain.calls[-1][1]
    assert isinstance(dedup_inp, DedupInput)
    assert dedup_inp.items and all(len(it.candidates) <= 5 for it in dedup_inp.items)
    threshold = m.formation_config.dedup_threshold
    for it in dedup_inp.items:  # vector candidates (cosine >= threshold) first, then keyword-only ones (0)
        sims = [c.similarity for c in it.candidates]
        assert all(s >= threshold or s == 0.0 for s in sims) and sims == sorted(sims, key=lambda s: s == 0.0)
    rex = next(it for it in dedup_inp.items if it.content == "Sam has a dog named Rex")
    assert rex.candidates[0].content == "Sam has a dog named Rex" and rex.candidates[0].similarity > 0.99


def test_defaults_are_eden_and_gaia_constants() -> None:
    c = FormationConfig()
    assert (c.dedup, c.dedup_limit, c.dedup_threshold) == (True, 5, 0.7)
    assert (c.message_interval, c.token_interval, c.min_messages) == (45, 1500, 4)
    assert c.consolidation_threshold == {"agent": 10, "user": 4, "session": 4}
    assert c.word_limit == {"agent": 1200, "user": 300, "session": 200}
    assert (c.idle_minutes, c.preload_limit, c.model) == (30.0, 20, "offline")


async def test_dedup_candidates_stay_in_scope(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, _ = brain_mem
    await m.add("Sam is vegetarian", user_id="kai")  # same text, another user
    await m.add("Sam is vegetarian", user_id="sam", scope="user")
    brain.queue("extract", ["Sam is vegetarian"])
    await m.add("I'm vegetarian", user_id="sam", infer=True)
    (inp,) = [i for t, i in brain.calls if t == "dedup"]
    ids = {c.id for it in inp.items for c in it.candidates}
    kai_ids = {f.id for f in (await m.list(user_id="kai")).items}
    assert ids and not ids & kai_ids


async def test_dedup_off_adds_everything_without_a_dedup_call(tmp_path: Path) -> None:
    brain = Brain()
    async with AsyncMemory(tmp_path / "d.db", embedder="hash", llm=brain, formation=cfg(dedup=False)) as m:
        brain.queue("extract", ["Sam lives in Lisbon"], ["Sam lives in Lisbon now"])
        await m.add("a", user_id="sam", infer=True)
        await m.add("b", user_id="sam", infer=True)
        assert brain.count("dedup") == 0
        assert (await m.stats(user_id="sam")).valid_facts == 2


async def test_infer_without_wait_returns_a_durable_job(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, _ = brain_mem
    brain.queue("extract", ["Sam is a nurse"])
    job = await m.add(
        [{"role": "user", "content": "I'm a nurse"}], user_id="sam", infer=True, wait=False, metadata={"src": "crm"}
    )
    assert (await m.get_job(job.id)).status == "queued"
    assert await m.run_jobs() == 1
    done = await m.get_job(job.id)
    assert done.status == "done" and done.result is not None
    assert [c["event"] for c in done.result["changes"]] == ["ADD"]
    assert done.result["usage"]["extract"]["calls"] == 1
    (fact,) = (await m.list(user_id="sam")).items
    assert fact.metadata["src"] == "crm" and fact.metadata["source"] == "formation"
    with pytest.raises(UsageError):
        await m.add("x", user_id="sam", wait=False)


# --------------------------------------------------------------------------- sessions, reflections, consolidation


async def test_session_formation_reflections_and_consolidation(
    brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder],
) -> None:
    m, brain, _ = brain_mem
    await m.sessions.create_session(user_ids=["sam"], session_id="s1")
    await chat(m, "s1", 3)
    said = await m.add_event("s1", user("by the way, I'm vegetarian"))
    brain.queue("extract", ["Sam is vegetarian"])
    brain.queue("reflect", {"user": ["Sam prefers short answers"], "session": ["Planning a dinner", "Needs recipes"]})
    res = await m.form("s1")
    assert not isinstance(res, type(None))
    assert [c.event for c in res.changes] == ["ADD"] and res.turns == 7
    (fact,) = res.facts
    assert fact.source_event_ids == [said.id] and fact.kind == "fact"  # provenance: the turn it came from
    # the reflection call saw the facts just formed and the (empty) memory context
    refl_inp = next(i for t, i in brain.calls if t == "reflect")
    assert refl_inp.new_facts == ["Sam is vegetarian"] and refl_inp.user is not None and refl_inp.agent is None
    assert len(await m.reflections("session", user_id="sam", session_id="s1")) == 2
    status = await m.get_consolidation_status(user_id="sam", session_id="s1")
    assert status["session"]["buffer_size"] == 2 and status["session"]["threshold"] == 4
    assert not status["session"]["needs_consolidation"]

    # two more session reflections reach the threshold (4): consolidated in the same job
    await chat(m, "s1", 2)
    brain.queue("reflect", {"session": ["Chose pasta", "Shopping list done"]})
    res2 = await m.form("s1")
    assert res2.turns == 4  # only the new messages
    assert [b.scope for b in res2.consolidated] == ["session"]
    blob = await m.consolidated("session", user_id="sam", session_id="s1")
    assert blob is not None and blob.version == 1 and blob.consolidated_content.startswith("VERSION: 1")
    assert "Chose pasta" in blob.consolidated_content
    assert await m.reflections("session", user_id="sam", session_id="s1", absorbed=False) == []
    stats = await m.get_memory_stats(user_id="sam", session_id="s1")
    assert stats["scopes"]["session"]["version"] == 1 and stats["scopes"]["user"]["unabsorbed"] == 1


async def test_consolidation_respects_word_limit_and_versions(tmp_path: Path) -> None:
    brain = Brain()
    conf = cfg(
        word_limit={"agent": 1200, "user": 300, "session": 20},
        consolidation_threshold={"agent": 10, "user": 4, "session": 1},
    )
    async with AsyncMemory(tmp_path / "w.db", embedder="hash", llm=brain, formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        for v in (1, 2):
            await chat(m, "s", 2)
            brain.queue("reflect", {"session": [f"round {v}"]})
            brain.queue("consolidate", "VERSION: 99\n" + "word " * 200)  # wrong header, far too long
            await m.form("s")
            blob = await m.consolidated("session", user_id="sam", session_id="s")
            assert blob is not None and blob.version == v
            assert blob.consolidated_content.startswith(f"VERSION: {v}")
            assert len(blob.consolidated_content.split()) <= 20
        # consolidation saw the previous blob and the version to write
        inp = [i for t, i in brain.calls if t == "consolidate"][-1]
        assert inp.version == 2 and inp.current.startswith("VERSION: 1") and inp.word_limit == 20


async def test_scopes_consolidate_concurrently(tmp_path: Path) -> None:
    brain = Brain()
    started: list[str] = []
    both = asyncio.Event()

    async def slow(inp: Any) -> str:
        started.append(inp.scope)
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)  # deadlocks unless both scopes run at once
        return f"VERSION: {inp.version}\n- merged"

    conf = cfg(consolidation_threshold={"agent": 10, "user": 1, "session": 1})
    async with AsyncMemory(tmp_path / "c.db", embedder="hash", llm=brain, formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await chat(m, "s", 2)
        brain.queue("reflect", {"user": ["likes tea"], "session": ["talked about tea"]})
        brain.queue("consolidate", slow, slow)
        res = await m.form("s")
        assert sorted(b.scope for b in res.consolidated) == ["session", "user"]


async def test_group_session_never_writes_user_memory(tmp_path: Path) -> None:
    brain = Brain()
    conf = cfg(agent_memory=True)
    async with AsyncMemory(tmp_path / "g.db", embedder="hash", llm=brain, formation=conf) as m:
        await m.sessions.create_session(app="club", user_ids=["ann", "bob"], session_id="g")
        await chat(m, "g", 2, app="club")
        brain.queue("extract", [{"content": "Ann is allergic to nuts", "scope": "user"}])
        brain.queue("reflect", {"agent": ["Club meets Fridays"], "user": ["leak"], "session": ["Planning an event"]})
        res = await m.form("g", app="club")
        inp = next(i for t, i in brain.calls if t == "extract")
        assert inp.allow_user_scope is False and inp.allow_agent_scope is True
        assert [c.fact.scope for c in res.changes] == ["agent"]
        assert {r.scope for r in res.reflections} == {"agent", "session"}
        for uid in ("ann", "bob"):
            assert (await m.list(user_id=uid)).total == 0
            assert await m.reflections("user", user_id=uid, agent_id="club") == []


async def test_group_session_without_agent_memory_keeps_session_reflections_only(tmp_path: Path) -> None:
    brain = Brain()
    async with AsyncMemory(tmp_path / "g2.db", embedder="hash", llm=brain, formation=cfg()) as m:
        await m.sessions.create_session(app="club", user_ids=["ann", "bob"], session_id="g")
        await chat(m, "g", 2, app="club")
        brain.queue("reflect", {"session": ["Planning an event"], "user": ["leak"]})
        res = await m.form("g", app="club")
        assert brain.count("extract") == 0 and res.changes == []
        assert [r.scope for r in res.reflections] == ["session"]


async def test_premium_tier_uses_the_strong_model(tmp_path: Path) -> None:
    fast, strong = Brain(), Brain()
    async with AsyncMemory(tmp_path / "t.db", embedder="hash", llm=fast, strong_llm=strong, formation=cfg()) as m:
        for sid, tier in (("free", 0), ("pro", 1)):
            await m.sessions.create_session(user_ids=[sid], session_id=sid)
            await chat(m, sid, 2, tier=tier)
            await m.form(sid)
        assert fast.count("extract") == 2 and strong.count("extract") == 0  # extraction: always fast
        assert fast.count("reflect") == 1 and strong.count("reflect") == 1


# --------------------------------------------------------------------------- profile


async def test_profile(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, _ = brain_mem
    assert await m.profile("sam") is None and brain.count("profile") == 0  # nothing stored: no call
    await m.add("Sam is vegetarian", user_id="sam")
    await m.add([{"role": "user", "content": "raw turn"}], user_id="sam", session_id="s")
    brain.queue("profile", ["Name: Sam", "Vegetarian"])
    assert await m.profile("sam", items=["Kitchen remodel"]) == "- Name: Sam\n- Vegetarian"
    inp = [i for t, i in brain.calls if t == "profile"][-1]
    assert inp.facts == ["Sam is vegetarian"] and inp.items == ["Kitchen remodel"] and inp.limit == 20
    brain.queue("profile", LLMError("down", retryable=True))
    assert await m.profile("sam") == "- Sam is vegetarian"  # falls back to the raw facts


async def test_profile_off_when_memory_disabled(tmp_path: Path) -> None:
    brain = Brain()
    async with AsyncMemory(tmp_path / "p.db", embedder="hash", llm=brain, formation=cfg(preload=False)) as m:
        await m.add("Sam is vegetarian", user_id="sam")
        assert await m.profile("sam") is None and brain.count("profile") == 0


# --------------------------------------------------------------------------- triggers and lifecycle


async def test_message_trigger_and_minimum(tmp_path: Path) -> None:
    brain = Brain()
    conf = cfg(message_interval=6, min_messages=4)
    async with AsyncMemory(tmp_path / "tr.db", embedder="hash", llm=brain, formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await chat(m, "s", 2)
        await m.add_event("s", user("third question"))
        assert await m.list_jobs() == []  # 5 messages: not yet
        await m.add_event("s", user("fourth question"))
        assert await m.list_jobs() == []  # 6 messages, but a user message: formation waits for the agent
        await m.add_event("s", agent("answer"))
        (job,) = await m.list_jobs()
        assert job.payload["reason"] == "trigger"
        await m.run_jobs()
        assert (await m.get_job(job.id)).result["turns"] == 7  # type: ignore[index]
        await chat(m, "s", 2)
        assert len(await m.list_jobs()) == 1  # counters restarted after the trigger


async def test_token_trigger(tmp_path: Path) -> None:
    conf = cfg(message_interval=1000, token_interval=100, min_messages=4)
    async with AsyncMemory(tmp_path / "tok.db", embedder="hash", llm=Brain(), formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        long = "word " * 200  # ~250 tokens x 1.0
        await m.add_event("s", user(long))
        await m.add_event("s", agent("ok"))
        assert await m.list_jobs() == []  # tokens are over, but fewer than 4 messages
        await m.add_event("s", user("and"))
        await m.add_event("s", agent("ok"))
        assert len(await m.list_jobs()) == 1


async def test_idle_timer_forms_then_clears(tmp_path: Path) -> None:
    brain = Brain()
    conf = cfg(idle_minutes=1.5 / 60, background=True)  # 1.5 s
    async with AsyncMemory(tmp_path / "idle.db", embedder="hash", llm=brain, formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="sam:cli")
        brain.queue("extract", ["Sam is vegetarian"])
        await chat(m, "sam:cli", 2)
        loop = asyncio.get_running_loop()
        timers = m.formation._timers
        first = timers[("default", "sam:cli")]
        assert first.when() - loop.time() <= 1.5  # armed for idle_minutes after the last event
        await asyncio.sleep(0.01)
        await m.add_event("sam:cli", user("still here"))  # re-arms the timer
        # asserted on the timer, not by sleeping against it (a loaded machine would race the 1.5 s)
        again = timers[("default", "sam:cli")]
        assert first.cancelled() and again is not first and again.when() > first.when()
        for _ in range(600):  # a bound against a hang, not a duration the test asserts
            if await m.sessions.get_session("sam:cli") is None:
                break
            await asyncio.sleep(0.05)
        assert await m.sessions.get_session("sam:cli") is None  # formed, then cleared
        assert [f.content for f in (await m.list(user_id="sam", kind="fact")).items] == ["Sam is vegetarian"]
        (job,) = await m.list_jobs(status="done")
        assert job.payload["reason"] == "idle" and job.result and job.result["cleared"] is True


async def test_idle_with_too_few_messages_keeps_the_session(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "few.db", embedder="hash", llm=Brain(), formation=cfg(idle_minutes=1)) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await m.add_event("s", user("hi"))
        await m.add_event("s", agent("hello"))
        _age_cursors(m.db_path, minutes=5)
        (job,) = await m.sweep_idle()
        await m.run_jobs()
        done = await m.get_job(job.id)
        assert done.result and done.result["skipped"].startswith("only 2 new messages")
        assert await m.sessions.get_session("s") is not None  # nothing lost


def _age_cursors(db: str, *, minutes: float) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE formation_cursors SET last_activity_at=?", ((utcnow() - timedelta(minutes=minutes)).isoformat(),)
        )
    conn.close()


async def test_startup_sweep_forms_sessions_that_went_idle_while_down(tmp_path: Path) -> None:
    db = tmp_path / "sweep.db"
    brain = Brain()
    async with AsyncMemory(db, embedder="hash", llm=brain, formation=cfg(idle_minutes=30)) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await chat(m, "s", 2)
    _age_cursors(str(db), minutes=31)  # the process was down for half an hour
    brain.queue("extract", ["Sam is vegetarian"])
    conf = cfg(idle_minutes=30, background=True)
    async with AsyncMemory(db, embedder="hash", llm=brain, formation=conf) as m:
        for _ in range(100):
            if await m.sessions.get_session("s") is None:
                break
            await asyncio.sleep(0.05)
        assert await m.sessions.get_session("s") is None
        assert (await m.list(user_id="sam", kind="fact")).items[0].content == "Sam is vegetarian"


async def test_reset_forms_then_clears_and_end_session_consolidates(tmp_path: Path) -> None:
    brain = Brain()
    async with AsyncMemory(tmp_path / "r.db", embedder="hash", llm=brain, formation=cfg()) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="a")
        await m.add_event("a", user("I'm vegetarian"))  # one message: reset forms anyway (explicit)
        brain.queue("extract", ["Sam is vegetarian"])
        brain.queue("reflect", {"session": ["Sam mentioned being vegetarian"]})
        res = await m.reset_session("a")
        assert res.cleared and [c.event for c in res.changes] == ["ADD"]
        assert [b.scope for b in res.consolidated] == ["session"]  # consolidated before the clear
        assert await m.sessions.get_session("a") is None
        # the cleared session's own memory went with it; the user's facts stay
        assert await m.consolidated("session", user_id="sam", session_id="a") is None
        assert await m.reflections("session", user_id="sam", session_id="a") == []
        # the fact, and the user's turn kept verbatim (FormationConfig.keep_user_turns)
        # and the session's summary (FormationConfig.session_summaries), which outlives it
        assert [f.kind for f in (await m.list(user_id="sam")).items] == ["message", "summary", "fact"]

        await m.sessions.create_session(user_ids=["sam"], session_id="b")
        await chat(m, "b", 2)
        brain.queue("reflect", {"session": ["one reflection"]})
        res = await m.end_session("b")
        assert [b.scope for b in res.consolidated] == ["session"]  # forced below the threshold
        assert await m.sessions.get_session("b") is not None


# --------------------------------------------------------------------------- faults


async def test_model_failure_keeps_the_job_and_replays_from_checkpoint(
    brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder],
) -> None:
    m, brain, _ = brain_mem
    await m.sessions.create_session(user_ids=["sam"], session_id="s")
    await chat(m, "s", 2)
    brain.queue("extract", ["Sam is vegetarian"])
    brain.queue("reflect", LLMError("503", retryable=True))
    with pytest.raises(FormationError, match="kept"):
        await m.form("s")
    assert (await m.stats(user_id="sam")).valid_facts == 0  # nothing half-applied
    (job,) = await m.list_jobs()
    assert job.status == "queued" and job.attempts == 1 and "extracted" in job.state
    brain.queue("reflect", {"session": ["talked about food"]})
    assert await m.run_jobs() == 1
    assert brain.count("extract") == 1  # the replay reused the checkpointed extraction
    assert (await m.get_job(job.id)).status == "done"
    assert [f.content for f in (await m.list(user_id="sam")).items if f.kind != "summary"] == ["Sam is vegetarian"]
    assert await m.sessions.get_session("s") is not None


async def test_embedder_failure_mid_batch_is_retried(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, emb = brain_mem
    brain.queue("extract", ["Sam lives in Lisbon", "Sam is 34"])
    emb.fail = 1
    job = await m.add("hi", user_id="sam", infer=True, wait=False)
    await m.run_jobs(max_jobs=1)
    failed = await m.get_job(job.id)
    assert failed.status == "queued" and failed.attempts == 1 and "embedder down" in (failed.last_error or "")
    assert (await m.stats(user_id="sam")).valid_facts == 0
    await m.run_jobs()
    assert (await m.get_job(job.id)).status == "done"
    assert (await m.stats(user_id="sam")).valid_facts == 2
    assert brain.count("extract") == 1


async def test_job_gives_up_after_max_attempts_and_can_be_retried(tmp_path: Path) -> None:
    brain = Brain()
    async with AsyncMemory(tmp_path / "max.db", embedder="hash", llm=brain, formation=cfg(max_attempts=2)) as m:
        brain.queue("extract", LLMError("429", retryable=True), LLMError("429", retryable=True))
        job = await m.add("I'm a nurse", user_id="sam", infer=True, wait=False)
        await m.run_jobs()
        assert (await m.get_job(job.id)).status == "failed"
        assert job.payload["turns"][0]["text"] == "I'm a nurse"  # the input is kept in the job
        brain.queue("extract", ["Sam is a nurse"])
        await m.retry_job(job.id)
        await m.run_jobs()
        assert (await m.get_job(job.id)).status == "done"


async def test_apply_is_exactly_once_per_key(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    from memlane.models import Fact
    from memlane.stores.base import FactChange

    m, _, _ = brain_mem
    fact = Fact(content="Sam is 34", user_id="sam")
    change = FactChange("ADD", fact.partition, fact=fact, vector=np.ones(256, dtype=np.float32) / 16)
    first = await m.facts.apply_changes([change], key="job:x")
    second = await m.facts.apply_changes([change], key="job:x")
    assert [a.event for a in first] == [a.event for a in second] == ["ADD"]
    assert (await m.stats(user_id="sam")).facts == 1


async def test_forget_purges_jobs(brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder]) -> None:
    m, brain, _ = brain_mem
    brain.queue("extract", ["Sam is a nurse"])
    await m.add("I'm a nurse", user_id="sam", infer=True)
    await m.add("pending", user_id="sam", infer=True, wait=False)
    await m.forget("sam")
    assert await m.list_jobs() == []
    conn = sqlite3.connect(m.db_path)
    assert conn.execute("SELECT COUNT(*) FROM applied_batches").fetchone()[0] == 0
    conn.close()


async def test_reflection_output_levels_disabled_are_dropped(tmp_path: Path) -> None:
    brain = Brain()
    async with AsyncMemory(tmp_path / "lv.db", embedder="hash", llm=brain, formation=cfg(user_memory=False)) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await chat(m, "s", 2)
        brain.queue("reflect", ReflectionOutput(agent=["x"], user=["y"], session=["z"]))
        res = await m.form("s")
        assert [r.scope for r in res.reflections] == ["session"]


async def test_extraction_sees_both_sides_and_the_steering_instructions(tmp_path: Path) -> None:
    from memlane.formation.prompts import DEFAULT_EXTRACTION_INSTRUCTIONS

    brain = Brain()
    custom = "Only extract facts about the user's pets."
    async with AsyncMemory(tmp_path / "st.db", embedder="hash", llm=brain, formation=cfg()) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await chat(m, "s", 2)
        await m.form("s")
        inp = next(i for t, i in brain.calls if t == "extract")
        assert [t.role for t in inp.conversation] == ["user", "assistant"] * 2
        assert inp.instructions == DEFAULT_EXTRACTION_INSTRUCTIONS
    async with AsyncMemory(
        tmp_path / "st2.db", embedder="hash", llm=brain, formation=cfg(extraction_instructions=custom)
    ) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        await chat(m, "s", 2)
        await m.form("s")
        assert [i for t, i in brain.calls if t == "extract"][-1].instructions == custom


async def test_facts_are_keyed_by_the_canonical_user_across_channels(tmp_path: Path) -> None:
    from memlane import session_key

    async with AsyncMemory(tmp_path / "ch.db", embedder="hash", formation=cfg()) as m:  # offline model
        for channel, text in (("telegram", "I'm vegetarian."), ("whatsapp", "I live in Lisbon.")):
            sid = session_key("sam", channel)
            await m.sessions.create_session(user_ids=["sam"], session_id=sid, channel=channel)
            await m.add_event(sid, Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
            await m.end_session(sid)
        facts = sorted(f.content for f in (await m.list(user_id="sam")).items if f.kind != "summary")
        assert facts == ["Sam is vegetarian", "Sam lives in Lisbon"]
        assert await m.profile("sam") is not None


STATEMENTS = [
    "I'm vegetarian.",
    "I live in Lisbon.",
    "I work at Acme.",
    "My dog is named Rex.",
    "I'm allergic to nuts.",
]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(["ann", "bob", "cy", "group"]), st.sampled_from(STATEMENTS)), min_size=1, max_size=8
    )
)
async def test_formation_never_leaks_between_users(tmp_path_factory: pytest.TempPathFactory, plan: list[Any]) -> None:
    """Whatever is said where, a user's facts come only from that user's own 1:1 sessions,
    and group sessions write no user memory."""
    db = tmp_path_factory.mktemp("iso") / "iso.db"
    async with AsyncMemory(db, embedder="hash", formation=cfg(agent_memory=True)) as m:
        said: dict[str, set[str]] = {}
        for i, (who, text) in enumerate(plan):
            sid = f"s{i}"
            users = ["ann", "bob", "cy"] if who == "group" else [who]
            await m.sessions.create_session(app="club", user_ids=users, session_id=sid)
            ev = await m.add_event(
                sid, Event(type=EventType.USER_MESSAGE, author=who.title(), content=text), app="club"
            )
            said.setdefault(who, set()).add(ev.id)
            await m.end_session(sid, app="club")
        for uid in ("ann", "bob", "cy"):
            own = [f for f in (await m.list(user_id=uid, agent_id="club", limit=100)).items if f.scope == "user"]
            for f in own:
                assert f.user_id == uid and set(f.source_event_ids) <= said.get(uid, set())
            assert await m.reflections("user", user_id=uid, agent_id="club") is not None
            for r in await m.reflections("user", user_id=uid, agent_id="club"):
                assert r.session_id is not None and r.session_id in {
                    f"s{i}" for i, (w, _) in enumerate(plan) if w == uid
                }


async def test_update_merges_provenance_and_turns_never_crowd_out_candidates(
    brain_mem: tuple[AsyncMemory, Brain, CountingEmbedder],
) -> None:
    m, brain, _ = brain_mem
    a = Event(type=EventType.USER_MESSAGE, author="Sam", content="I live in Lisbon")
    brain.queue("extract", ["Sam lives in Lisbon"])
    (lisbon,) = await m.add([a], user_id="sam", infer=True)
    assert lisbon.source_event_ids == [a.id]
    # 40 verbatim turns that look more like the new fact than the stored fact does
    await m.add([{"role": "user", "content": f"Sam lives in Porto now, post {i}"} for i in range(40)], user_id="sam")
    b = Event(type=EventType.USER_MESSAGE, author="Sam", content="I moved, I live in Porto")
    brain.queue("extract", ["Sam lives in Porto"])
    brain.queue("dedup", [{"index": 0, "event": "UPDATE", "fact_id": lisbon.id, "text": "Sam lives in Porto"}])
    (porto,) = await m.add([b], user_id="sam", infer=True)
    dedup_inp = [i for t, i in brain.calls if t == "dedup"][-1]
    assert [c.id for c in dedup_inp.items[0].candidates] == [lisbon.id]  # only facts are candidates
    assert porto.id == lisbon.id and porto.source_event_ids == [a.id, b.id]
    assert porto.occurred_at is not None and porto.occurred_at >= lisbon.occurred_at  # type: ignore[operator]


def test_trigger_weights_are_edens() -> None:
    from memlane.formation.runner import event_weight

    text = "x" * 450
    assert event_weight(user(text)) == (1, 100.0)  # user characters x1.0, 4.5 per token
    assert event_weight(agent(text)) == (1, pytest.approx(20.0))  # agent x0.2
    tool = Event(type=EventType.TOOL_RESULT, author="search", content="y" * 450)
    assert event_weight(tool) == (1, 50.0)  # tool x0.5
    assert event_weight(Event(type=EventType.ERROR, content="boom")) == (0, 0.0)
    assert event_weight(user("   ")) == (0, 0.0)


async def test_two_workers_on_one_file_run_each_job_once(tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    brain = Brain()
    brain.queue("extract", *([f"Sam has fact number {i}"] for i in range(6)))
    a = AsyncMemory(db, embedder="hash", llm=brain, formation=cfg())
    b = AsyncMemory(db, embedder="hash", llm=brain, formation=cfg())
    try:
        jobs = [await a.add(f"statement {i}", user_id=f"u{i}", infer=True, wait=False) for i in range(6)]
        ran = await asyncio.gather(a.run_jobs(), b.run_jobs())
        assert sum(ran) == 6 and brain.count("extract") == 6
        assert {(await a.get_job(j.id)).status for j in jobs} == {"done"}
        assert sum([(await a.stats(user_id=f"u{i}")).valid_facts for i in range(6)]) == 6
    finally:
        await a.close()
        await b.close()


async def test_events_written_to_the_session_store_are_formed_once(tmp_path: Path) -> None:
    """Events added through memory.sessions (bypassing the triggers) are formed once: a second
    end_session finds nothing new instead of re-forming the whole session."""
    from memlane import Event, EventType

    async with AsyncMemory(tmp_path / "raw.db", embedder="hash", llm="offline") as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        for text in ("I'm vegetarian.", "I live in Lisbon.", "My sister is Ana."):
            await m.sessions.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
            await m.sessions.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))
        first = await m.end_session("s")
        assert first.turns == 6
        before = len(await m.reflections("session", user_id="sam", session_id="s"))
        second = await m.end_session("s")
        assert second.turns == 0
        assert len(await m.reflections("session", user_id="sam", session_id="s")) == before
