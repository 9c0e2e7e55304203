"""Consolidation on demand and the blob's versions (issue 21): ``consolidate(scope, ...)`` merges
the pending reflections now, below the threshold, as a durable ``consolidate`` job (queued,
then done and pollable); every put of a blob writes its version in the same transaction, read
back newest first by ``consolidated_history``; ``forget`` erases the user's versions and those of
an agent blob their words went into; ``export_user`` includes them. The tests taking the ``mem``
fixture run here on a SQLite file and, imported by tests/engine/test_engine_backends.py, on
PostgreSQL and on PostgreSQL with Redis sessions and queue."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memlane import AsyncMemory, ConsolidatedVersion, Job, Memory
from memlane.errors import InvalidInputError, ScopeError
from memlane.formation.runner import FormationResult
from memlane.models import ConsolidatedMemory, Reflection, utcnow


async def _reflect(mem: AsyncMemory, text: str, **ids: str) -> None:
    scope = "agent" if "user_id" not in ids else "session" if "session_id" in ids else "user"
    await mem.reflection_store.put_reflection(Reflection(content=text, scope=scope, **ids))  # type: ignore[arg-type]


async def test_two_consolidations_give_versions_one_and_two(mem: AsyncMemory) -> None:
    assert await mem.consolidated_history("user", user_id="sam") == []
    await _reflect(mem, "Sam keeps bees.", user_id="sam")
    first = await mem.consolidate("user", user_id="sam")
    assert isinstance(first, FormationResult) and first.reason == "consolidate"
    assert [b.version for b in first.consolidated] == [1]  # one reflection: below the threshold (4)
    await _reflect(mem, "Sam moved to Porto.", user_id="sam")
    second = await mem.consolidate("user", user_id="sam")
    assert isinstance(second, FormationResult) and second.consolidated[0].version == 2
    history = await mem.consolidated_history("user", user_id="sam")
    assert all(isinstance(v, ConsolidatedVersion) for v in history)
    assert [v.version for v in history] == [2, 1]
    assert "Sam keeps bees." in history[1].content and "Porto" not in history[1].content
    assert "Sam keeps bees." in history[0].content and "Porto" in history[0].content
    current = await mem.consolidated("user", user_id="sam")
    assert current is not None and history[0].content == current.consolidated_content
    assert history[0].consolidated_at == current.last_consolidated_at and history[0].word_limit == 300
    assert history[0].word_count == len(current.consolidated_content.split())
    assert [v.version for v in await mem.consolidated_history("user", user_id="sam", limit=1)] == [2]
    # nothing pending: the job runs and says so, and no version is written
    third = await mem.consolidate("user", user_id="sam")
    assert isinstance(third, FormationResult) and third.consolidated == [] and third.skipped
    assert len(await mem.consolidated_history("user", user_id="sam")) == 2
    # other scopes have their own histories
    assert await mem.consolidated_history("user", user_id="bob") == []
    assert await mem.consolidated_history("agent", agent_id="gaia") == []


async def test_a_queued_consolidation_is_a_durable_job(mem: AsyncMemory) -> None:
    await _reflect(mem, "Users like short answers.", agent_id="gaia")
    job = await mem.consolidate("agent", agent_id="gaia", wait=False)
    assert isinstance(job, Job) and job.kind == "consolidate" and job.status in ("queued", "running", "done")
    # run here, unless the engine's background worker claimed it first (then wait for that worker:
    # run_jobs only runs queued jobs, and reading right after it saw "running")
    await mem.run_jobs()
    await mem.formation.wait_for(job, timeout=60)
    done = await mem.get_job(job.id)
    assert done.kind == "consolidate" and done.status == "done" and done.user_id is None
    assert done.result is not None and done.result["consolidated"][0]["version"] == 1
    assert [v.version for v in await mem.consolidated_history("agent", agent_id="gaia")] == [1]
    assert job.id in {j.id for j in await mem.list_jobs(status="done")}


async def test_forget_erases_the_users_versions_and_export_includes_them(mem: AsyncMemory) -> None:
    for who in ("sam", "bob"):
        await _reflect(mem, f"{who} keeps bees.", user_id=who)
        await mem.consolidate("user", user_id=who)
        await _reflect(mem, f"{who} moved.", user_id=who)
        await mem.consolidate("user", user_id=who)
    await _reflect(mem, "Sam asked about Porto.", user_id="sam", session_id="s1")
    await mem.consolidate("session", user_id="sam", session_id="s1")
    exported = (await mem.export_user("sam"))["consolidated_versions"]
    assert sorted((v["scope"], v["version"]) for v in exported) == [("session", 1), ("user", 1), ("user", 2)]
    assert all(v["user_id"] == "sam" and "content" in v and "consolidated_at" in v for v in exported)
    await mem.forget("sam")
    assert await mem.consolidated_history("user", user_id="sam") == []
    assert await mem.consolidated_history("session", user_id="sam", session_id="s1") == []
    assert [v.version for v in await mem.consolidated_history("user", user_id="bob")] == [2, 1]
    assert (await mem.export_user("sam"))["consolidated_versions"] == []


async def test_a_cleared_sessions_versions_go_with_it(mem: AsyncMemory) -> None:
    await _reflect(mem, "Sam asked about Porto.", user_id="sam", session_id="s1")
    await mem.consolidate("session", user_id="sam", session_id="s1")
    await mem.reflection_store.clear_session_memory(agent_id=None, user_id="sam", session_id="s1")
    assert await mem.consolidated_history("session", user_id="sam", session_id="s1") == []


async def test_an_unconditional_put_of_the_same_version_replaces_its_row(mem: AsyncMemory) -> None:
    blob = ConsolidatedMemory(scope="user", user_id="sam", consolidated_content="VERSION: 1\nA", word_limit=300)
    blob.version, blob.last_consolidated_at = 1, utcnow()
    await mem.reflection_store.put_consolidated(blob)
    await mem.reflection_store.put_consolidated(blob.model_copy(update={"consolidated_content": "VERSION: 1\nB"}))
    assert [v.content for v in await mem.consolidated_history("user", user_id="sam")] == ["VERSION: 1\nB"]


async def test_bad_input_is_refused_and_queues_nothing(mem: AsyncMemory) -> None:
    with pytest.raises(ScopeError):
        await mem.consolidate("user")
    with pytest.raises(InvalidInputError):
        await mem.consolidate("galaxy", user_id="sam")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await mem.consolidate("user", user_id="sam", wait="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await mem.consolidated_history("user", user_id="sam", limit=0)
    assert await mem.list_jobs() == []


def test_the_sync_facade_consolidates_and_reads_versions(tmp_path: Path) -> None:
    async def seed() -> None:
        async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="sqlite") as a:
            await _reflect(a, "Sam keeps bees.", user_id="sam")

    asyncio.run(seed())
    with Memory(tmp_path / "m.db", embedder="hash", sessions="sqlite") as m:
        assert m.consolidated_history("user", user_id="sam") == []
        done = m.consolidate("user", user_id="sam")
        assert isinstance(done, FormationResult) and done.consolidated[0].version == 1
        assert [v.version for v in m.consolidated_history("user", user_id="sam")] == [1]
        queued = m.consolidate("user", user_id="sam", wait=False)
        assert isinstance(queued, Job) and queued.kind == "consolidate"
