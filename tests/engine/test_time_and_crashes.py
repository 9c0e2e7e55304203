"""Time, crashes and processes: mixed naive/aware timestamps, deterministic job failures,
lease heartbeats and bounded waits (with a real SIGKILLed child), ``Memory`` after
``os.fork()``, and keeping or clearing idle sessions."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from formation_helpers import Brain
from memlane import AsyncMemory, Event, EventType, Memory
from memlane.errors import (
    ConflictError,
    FormationError,
    FormationTimeoutError,
    LLMError,
    NotFoundError,
    OutputParseError,
    StorageError,
    UsageError,
)
from memlane.formation.config import FormationConfig
from memlane.models import ConsolidatedMemory, Fact, Job, Reflection

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def cfg(**kw: Any) -> FormationConfig:
    base: dict[str, Any] = {"background": False, "retry_base_seconds": 0, "idle_minutes": None}
    base.update(kw)
    return FormationConfig(**base)


def user(text: str, **kw: Any) -> Event:
    return Event(type=EventType.USER_MESSAGE, author="Sam", content=text, **kw)


def agent(text: str) -> Event:
    return Event(type=EventType.AGENT_RESPONSE, author="bot", content=text)


# --------------------------------------------------------------------------- timestamps


def test_every_model_timestamp_is_utc_aware() -> None:
    naive = datetime(2024, 1, 1, 12, 0)
    plus2 = datetime(2024, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    for value in (naive, plus2):
        assert Event(timestamp=value).timestamp == datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
        fact = Fact(
            content="x", occurred_at=value, formed_at=value, updated_at=value, valid_from=value, invalid_at=value
        )
        for when in (fact.occurred_at, fact.formed_at, fact.updated_at, fact.valid_from, fact.invalid_at):
            assert when is not None and when.tzinfo is UTC and when.hour == 12
        assert Reflection(content="r", scope="user", formed_at=value).formed_at.tzinfo is UTC
        blob = ConsolidatedMemory(scope="user", word_limit=10, last_consolidated_at=value)
        assert blob.last_consolidated_at is not None and blob.last_consolidated_at.tzinfo is UTC
        job = Job(kind="form", key="k", next_run_at=value, created_at=value, updated_at=value)
        assert {job.next_run_at.tzinfo, job.created_at.tzinfo, job.updated_at.tzinfo} == {UTC}
    # JSON round trip (how job payloads travel) keeps them aware
    assert Event.model_validate_json(Event(timestamp=naive).model_dump_json()).timestamp.tzinfo is UTC


def test_a_timestamp_outside_utc_range_is_a_validation_error() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="outside the datetimes UTC can express"):
        Event(timestamp=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))))


async def test_naive_and_aware_timestamps_in_one_batch_form(tmp_path: Path) -> None:
    """A fact citing a naive and an aware message used to raise TypeError inside the job
    (``max`` over mixed datetimes), retried until ``failed``."""
    brain = Brain()
    brain.queue("extract", [{"content": "Sam is vegetarian", "sources": [0, 1]}])
    async with AsyncMemory(tmp_path / "tz.db", embedder="hash", llm=brain, formation=cfg()) as m:
        facts = await m.add(
            [
                {"role": "user", "content": "I'm vegetarian", "timestamp": datetime(2024, 1, 1, 10, 0)},
                {"role": "user", "content": "no meat for me", "timestamp": "2024-01-02T12:00:00+02:00"},
            ],
            user_id="sam",
            infer=True,
        )
        assert [f.content for f in facts] == ["Sam is vegetarian"]
        assert facts[0].occurred_at == datetime(2024, 1, 2, 10, 0, tzinfo=UTC)
        (job,) = await m.list_jobs()
        assert job.status == "done" and job.attempts == 0


async def test_verbatim_timestamps_come_back_utc_aware(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "v.db", embedder="hash", formation=cfg()) as m:
        await m.add("naive note", user_id="sam", timestamp=datetime(2024, 1, 1, 9, 0))
        await m.add("aware note", user_id="sam", timestamp=datetime(2024, 1, 1, 9, 0, tzinfo=UTC))
        items = (await m.list(user_id="sam")).items
        assert len(items) == 2
        assert all(f.occurred_at is not None and f.occurred_at.tzinfo is UTC for f in items)
        assert sorted(f.occurred_at for f in items if f.occurred_at)  # comparable


# --------------------------------------------------------------------------- deterministic failures


@pytest.mark.parametrize(
    "error",
    [TypeError("unsupported operand"), KeyError("speaker"), ValueError("bad date"), AttributeError("no .text")],
    ids=lambda e: type(e).__name__,
)
async def test_deterministic_error_fails_the_job_at_once(tmp_path: Path, error: Exception) -> None:
    brain = Brain()
    brain.queue("extract", error)
    async with AsyncMemory(tmp_path / "p.db", embedder="hash", llm=brain, formation=cfg(max_attempts=8)) as m:
        with pytest.raises(FormationError, match=f"permanently.*{type(error).__name__}") as info:
            await m.add("I'm a nurse", user_id="sam", infer=True)
        (job,) = await m.list_jobs()
        assert job.id in str(info.value)
        assert job.status == "failed" and job.attempts == 1  # not 8 attempts with backoff
        assert (job.last_error or "").startswith(type(error).__name__)
        assert await m.run_jobs() == 0  # nothing left to burn retries on
        brain.queue("extract", ["Sam is a nurse"])  # the bug is fixed: retry by hand
        await m.retry_job(job.id)
        assert await m.run_jobs() == 1
        assert (await m.get_job(job.id)).status == "done"
        assert [f.content for f in (await m.list(user_id="sam")).items] == ["Sam is a nurse"]


async def test_invalid_model_output_fails_the_job_at_once(tmp_path: Path) -> None:
    brain = Brain()
    brain.queue("extract", [{"content": None}])  # pydantic ValidationError: bad data, not bad luck
    async with AsyncMemory(tmp_path / "v.db", embedder="hash", llm=brain, formation=cfg()) as m:
        job = await m.add("hi", user_id="sam", infer=True, wait=False)
        assert await m.run_jobs() == 1
        failed = await m.get_job(job.id)
        assert failed.status == "failed" and failed.attempts == 1 and "ValidationError" in (failed.last_error or "")


@pytest.mark.parametrize(
    "error",
    [
        LLMError("503 from the provider", retryable=True),
        OutputParseError("not JSON after the corrective retry"),
        StorageError("database is locked"),
        ConflictError("changed under us"),
        ConnectionResetError("reset by peer"),
        TimeoutError("read timed out"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_transient_error_is_retried(tmp_path: Path, error: Exception) -> None:
    brain = Brain()
    brain.queue("extract", error)
    async with AsyncMemory(tmp_path / "t.db", embedder="hash", llm=brain, formation=cfg()) as m:
        job = await m.add("hi", user_id="sam", infer=True, wait=False)
        await m.run_jobs(max_jobs=1)
        retried = await m.get_job(job.id)
        assert retried.status == "queued" and retried.attempts == 1


async def test_not_found_during_formation_is_permanent(tmp_path: Path) -> None:
    brain = Brain()
    brain.queue("extract", NotFoundError("no fact 'x'"))
    async with AsyncMemory(tmp_path / "n.db", embedder="hash", llm=brain, formation=cfg()) as m:
        job = await m.add("hi", user_id="sam", infer=True, wait=False)
        await m.run_jobs()
        assert (await m.get_job(job.id)).status == "failed"


# --------------------------------------------------------------------------- leases, heartbeat, bounded waits

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[2])
    from formation_helpers import Brain
    from memlane import AsyncMemory, Event, EventType, FormationConfig

    async def main():
        brain = Brain()
        brain.queue("extract", ["Sam is vegetarian"])
        brain.queue("reflect", lambda inp: asyncio.sleep(3600))  # hangs until the process is killed
        conf = FormationConfig(background=False, idle_minutes=None, lease_seconds=float(sys.argv[3]))
        async with AsyncMemory(sys.argv[1], embedder="hash", llm=brain, formation=conf) as m:
            await m.sessions.create_session(user_ids=["sam"], session_id="s")
            for text in ("I'm vegetarian", "and I live in Lisbon"):
                await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
                await m.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))
            await m.form("s")

    asyncio.run(main())
    """
)


def _job_row(db: Path) -> tuple[str, str, str | None, str | None] | None:
    conn = sqlite3.connect(db, timeout=10)
    try:
        return conn.execute("SELECT id, status, state, lease_until FROM jobs ORDER BY created_at LIMIT 1").fetchone()
    except sqlite3.OperationalError:  # not created yet
        return None
    finally:
        conn.close()


async def test_live_holder_keeps_its_lease_and_a_killed_one_is_taken_over_in_seconds(tmp_path: Path) -> None:
    db = tmp_path / "lease.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    lease = 1.5
    child = subprocess.Popen([sys.executable, str(script), str(db), str(TESTS), str(lease)], env=env)
    try:
        deadline = time.monotonic() + 30
        row = None
        while time.monotonic() < deadline:  # the child is inside the (hanging) reflection call
            row = _job_row(db)
            if row is not None and row[1] == "running" and "decisions" in json.loads(row[2] or "{}"):
                break
            await asyncio.sleep(0.05)
        assert row is not None and row[1] == "running", "the child never started its formation job"
        child_job = row[0]

        # alive and busy for more than two lease periods: the heartbeat keeps the lease
        await asyncio.sleep(2 * lease)
        row = _job_row(db)
        assert row is not None and row[1] == "running" and row[3] is not None
        assert datetime.fromisoformat(row[3]) > datetime.now(UTC), "the live worker's lease was not renewed"

        # a wait on the busy session is bounded and says what it waits for
        async with AsyncMemory(db, embedder="hash", llm=Brain(), formation=cfg(wait_timeout_seconds=0.5)) as m:
            with pytest.raises(FormationTimeoutError) as info:  # bounded by wait_timeout_seconds
                await m.form("s")
            err = info.value
            assert err.status == "queued" and err.job_id in str(err) and child_job in str(err)
            assert "running" in str(err)

        child.send_signal(signal.SIGKILL)
        child.wait(10)

        # the dead holder stops renewing: the next form() takes the job over once its lease
        # (1.5 s) has lapsed and completes within its 30 s wait (a lease that did not lapse, or
        # the 300 s default, would be FormationTimeoutError); no duration is asserted
        brain = Brain()
        brain.queue("extract", ["Sam is vegetarian", "Sam lives in Lisbon"])
        async with AsyncMemory(db, embedder="hash", llm=brain, formation=cfg(wait_timeout_seconds=30)) as m:
            result = await m.form("s")
            assert sorted(f.content for f in result.facts) == ["Sam is vegetarian", "Sam lives in Lisbon"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


async def test_wait_timeout_releases_the_job_it_was_running(tmp_path: Path) -> None:
    brain = Brain()
    brain.queue("extract", lambda inp: asyncio.sleep(3600))
    async with AsyncMemory(tmp_path / "w.db", embedder="hash", llm=brain, formation=cfg(wait_timeout_seconds=0.3)) as m:
        with pytest.raises(FormationTimeoutError, match=r"did not finish within 0\.3 s") as info:
            await m.add("I'm a nurse", user_id="sam", infer=True)
        job = await m.get_job(info.value.job_id)
        assert job.status == "queued" and job.attempts == 0  # kept, not counted as a failure
        brain.queue("extract", ["Sam is a nurse"])
        assert await m.run_jobs() == 1
        assert (await m.get_job(job.id)).status == "done"


# --------------------------------------------------------------------------- fork


def test_memory_used_after_fork_raises_instead_of_hanging(tmp_path: Path) -> None:
    with Memory(tmp_path / "fork.db", embedder="hash", formation=cfg()) as m:
        m.add("the parent wrote this", user_id="u")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            code = 9
            try:
                signal.alarm(10)  # a hang ends in SIGALRM, never in a stuck test run
                try:
                    m.search("parent", user_id="u")
                    code = 1  # worked?! (it cannot: the loop thread does not exist here)
                except UsageError as exc:
                    code = 0 if f"process {os.getppid()}" in str(exc) and "after fork" in str(exc) else 2
                m.close()  # closing the inherited handle is harmless
                with Memory(tmp_path / "child.db", embedder="hash", formation=cfg()) as fresh:
                    fresh.add("a new Memory works", user_id="u")
                    if len(fresh.list(user_id="u").items) != 1:
                        code = 3
            except BaseException:
                code = 4
            os._exit(code)
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        assert status is not None
        assert os.WIFEXITED(status), f"child killed by signal {os.WTERMSIG(status)} (hung on the inherited Memory)"
        assert os.WEXITSTATUS(status) == 0, f"child exit code {os.WEXITSTATUS(status)}"
        assert [f.content for f in m.list(user_id="u").items] == ["the parent wrote this"]  # parent unaffected


# --------------------------------------------------------------------------- idle sessions: clear or keep


@pytest.mark.parametrize("clear", [True, False])
async def test_idle_session_is_formed_then_cleared_or_kept(tmp_path: Path, clear: bool) -> None:
    brain = Brain()
    brain.queue("extract", ["Sam is vegetarian"])
    conf = cfg(idle_minutes=0.002, clear_on_idle=clear)  # 0.12 s of silence
    async with AsyncMemory(tmp_path / "idle.db", embedder="hash", llm=brain, formation=conf) as m:
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        for i in range(2):
            await m.add_event("s", user(f"I'm vegetarian, part {i}"))
            await m.add_event("s", agent("Noted."))
        await asyncio.sleep(0.3)
        await m.sweep_idle()
        assert await m.run_jobs() >= 1
        assert [f.content for f in (await m.list(user_id="sam", kind="fact")).items] == ["Sam is vegetarian"]
        kept = await m.sessions.get_session("s")
        said = [f.content for f in (await m.list(user_id="sam", kind="message")).items]
        if clear:  # the session goes; what the user said stays (FormationConfig.keep_user_turns)
            assert kept is None
            assert sorted(said) == ["I'm vegetarian, part 0", "I'm vegetarian, part 1"]
        else:
            assert said == []
            assert kept is not None and len(kept.events) == 4
            await m.sweep_idle()  # already formed: nothing new, nothing lost
            await m.run_jobs()
            assert await m.sessions.get_session("s") is not None
            assert brain.count("extract") == 1


def test_async_memory_used_after_fork_raises(tmp_path: Path) -> None:
    """The async engine too: its SQLite connections must not be used from a forked child."""
    import asyncio
    import os

    from memlane import AsyncMemory, UsageError

    async def parent() -> None:
        m = await AsyncMemory(tmp_path / "f.db", embedder=None, sessions="null").open()
        await m.add("before fork", user_id="u")
        pid = os.fork()
        if pid == 0:  # child: a fresh loop, the parent's engine
            signal.alarm(20)  # a regression must fail, never hang the suite
            code = 3
            try:
                asyncio.run(m.search("fork", user_id="u"))
            except UsageError as exc:
                code = 0 if "after fork" in str(exc) else 4
            except BaseException:
                code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert len((await m.search("fork", user_id="u")).hits) == 1
        await m.close()

    asyncio.run(parent())
