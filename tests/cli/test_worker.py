"""``memlane worker`` as a real process on real SQLite files: it drains jobs an engine queued,
two workers on one file run each job once, the idle sweep forms silent sessions, and SIGTERM
during a job (a slow OpenAI-compatible model on loopback) releases it for a later worker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from loopback import serve
from memlane import AsyncMemory, Event, EventType, FormationConfig
from memlane.models import Job

QUEUE_ONLY = FormationConfig(background=False, idle_minutes=None)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker process: no memlane settings from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "MEMORY_", "OPENAI_"))}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"), **extra)
    return env


def _worker(tmp_path: Path, db: Path, *args: str, **env: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "memlane.cli.main",
        "worker",
        "--db",
        str(db),
        "--embedder",
        "hash",
        "--tenants-dir",
        str(tmp_path / "tenants"),
        *args,
    ]


async def _queue_sessions(db: Path, users: list[str], *, formation: FormationConfig = QUEUE_ONLY) -> list[Job]:
    """One short conversation per user, each ended without waiting: a queued job per session."""
    jobs = []
    async with AsyncMemory(db, embedder="hash", formation=formation) as m:
        for user in users:
            sid = f"s-{user}"
            await m.sessions.create_session(user_ids=[user], session_id=sid)
            for text in (f"I'm vegetarian, says {user}", f"I live in Lisbon, says {user}"):
                await m.add_event(sid, Event(type=EventType.USER_MESSAGE, author=user, content=text))
                await m.add_event(sid, Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))
            job = await m.end_session(sid, wait=False)
            assert isinstance(job, Job)
            jobs.append(job)
    return jobs


def _rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def _job_lines(out: str) -> dict[str, list[str]]:
    """Job id -> the outcomes logged for it (JSON lines)."""
    seen: dict[str, list[str]] = {}
    for line in out.splitlines():
        rec = json.loads(line)
        if "job" in rec:
            seen.setdefault(rec["job"], []).append(rec["outcome"])
    return seen


def test_worker_once_drains_the_queued_jobs_of_each_tenant(tmp_path: Path) -> None:
    db, acme = tmp_path / "m.db", tmp_path / "tenants" / "acme.db"
    acme.parent.mkdir()
    jobs = asyncio.run(_queue_sessions(db, ["sam", "kim"]))
    acme_jobs = asyncio.run(_queue_sessions(acme, ["ann"]))
    cmd = _worker(tmp_path, db, "--once", "--tenant", "default", "--tenant", "acme")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3  # one line per job
    for job in jobs:
        assert any(job.id in line and "[default]" in line and "form(end) done" in line for line in lines), lines
    assert any(acme_jobs[0].id in line and "[acme]" in line and "done" in line for line in lines), lines
    assert "3 done, 0 failed" in proc.stderr
    assert _rows(db, "SELECT status, count(*) FROM jobs GROUP BY status") == [("done", 2)]
    assert _rows(acme, "SELECT status, count(*) FROM jobs GROUP BY status") == [("done", 1)]
    facts = {r[0] for r in _rows(db, "SELECT content FROM facts WHERE invalid_at IS NULL")}
    assert any("kim" in f.lower() for f in facts) and any("sam" in f.lower() for f in facts), facts
    # nothing left: a second run does nothing and says so
    again = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    assert again.returncode == 0 and again.stdout == ""


def test_two_workers_on_one_file_run_each_job_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    users = [f"user{i:02d}" for i in range(16)]
    jobs = asyncio.run(_queue_sessions(db, users))
    cmd = [*_worker(tmp_path, db, "--once", "--concurrency", "2"), "--json"]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    per_worker = [_job_lines(out) for out, _ in outs]
    ran = [job for lines in per_worker for job, outcomes in lines.items() for o in outcomes if o == "done"]
    assert sorted(ran) == sorted(j.id for j in jobs)  # every job once, by one worker
    assert _rows(db, "SELECT status, count(*) FROM jobs GROUP BY status") == [("done", len(jobs))]
    # the formed batches were applied once each: one applied batch per job, one ADD per fact
    assert _rows(db, "SELECT count(*) FROM applied_batches")[0][0] == len(jobs)
    adds = _rows(db, "SELECT fact_id, count(*) FROM history WHERE event='ADD' GROUP BY fact_id HAVING count(*) > 1")
    assert adds == []
    per_user = _rows(db, "SELECT user_id, count(*) FROM facts WHERE invalid_at IS NULL GROUP BY user_id")
    assert len(per_user) == len(users) and len({n for _, n in per_user}) == 1, per_user


def test_worker_sweeps_idle_sessions_into_memory(tmp_path: Path) -> None:
    db = tmp_path / "m.db"

    async def talk() -> None:
        async with AsyncMemory(db, embedder="hash", formation=QUEUE_ONLY) as m:
            await m.sessions.create_session(user_ids=["sam"], session_id="quiet")
            for text in ("I'm vegetarian", "I live in Lisbon"):
                await m.add_event("quiet", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
                await m.add_event("quiet", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))

    asyncio.run(talk())
    assert _rows(db, "SELECT count(*) FROM jobs") == [(0,)]
    time.sleep(0.1)  # > the 0.001 minutes of silence below
    env = _env(tmp_path, MEMLANE_IDLE_CONSOLIDATE_MINUTES="0.001")
    proc = subprocess.run(_worker(tmp_path, db, "--once"), capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "queued idle formation for 1 session(s)" in proc.stdout
    assert "form(idle) done" in proc.stdout and "session cleared" in proc.stdout, proc.stdout
    assert _rows(db, "SELECT count(*) FROM sessions") == [(0,)]  # formed, then cleared (Gaia's idle rule)
    facts = sorted(r[0] for r in _rows(db, "SELECT content FROM facts WHERE invalid_at IS NULL"))
    assert len(facts) >= 1 and any("Lisbon" in f for f in facts), facts


# ---------------------------------------------------------------------------- SIGTERM mid-job
@dataclass
class SlowModel:
    """An OpenAI-compatible chat endpoint whose answers wait until ``go`` is set."""

    url: str = ""
    go: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    requests: int = 0


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    system, convo = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You extract FACTS"):
        out: dict[str, Any] = {
            "facts": [{"content": "Sam is vegetarian", "scope": "user"}] if "vegetarian" in convo else []
        }
    elif system.startswith("You keep"):
        out = {"decisions": []}
    elif system.startswith("You form REFLECTIONS"):
        out = {"session": ["Sam talked about food"], "user": []}
    elif system.startswith("You consolidate"):
        out = {"content": "VERSION: 1\n[SUMMARY]\n- food"}
    else:
        out = {"bullets": ["Sam is vegetarian"]}
    return {
        "choices": [{"message": {"role": "assistant", "content": json.dumps(out)}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


@pytest.fixture
def slow_model() -> Iterator[SlowModel]:
    state = SlowModel()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests += 1
            state.entered.set()
            state.go.wait(60)
            data = json.dumps(_answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serve(Handler) as url:
        state.url = url + "/v1"
        try:
            yield state
        finally:
            state.go.set()  # never leave a handler thread waiting


def test_sigterm_releases_the_running_job_and_a_later_worker_completes_it(
    tmp_path: Path, slow_model: SlowModel
) -> None:
    db = tmp_path / "m.db"
    (job,) = asyncio.run(_queue_sessions(db, ["sam"]))
    env = _env(tmp_path, OPENAI_BASE_URL=slow_model.url, OPENAI_API_KEY="sk-test")
    cmd = [*_worker(tmp_path, db, "--llm", "openai:test-model", "--poll", "0.05"), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert slow_model.entered.wait(60), "the worker never called the model"
        running = _rows(db, "SELECT status, worker, attempts FROM jobs WHERE id=?", job.id)
        assert running[0][0] == "running" and running[0][1] and running[0][2] == 0
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert _job_lines(out) == {job.id: ["released"]}
    # given back, not failed: queued again, attempt not counted, no lease, nothing applied
    assert _rows(db, "SELECT status, attempts, lease_until FROM jobs WHERE id=?", job.id) == [("queued", 0, None)]
    assert _rows(db, "SELECT count(*) FROM applied_batches") == [(0,)]

    slow_model.go.set()  # the model answers at once from now on
    done = subprocess.run([*cmd, "--once"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _job_lines(done.stdout) == {job.id: ["done"]}
    assert _rows(db, "SELECT status, attempts FROM jobs WHERE id=?", job.id) == [("done", 0)]
    facts = "SELECT content FROM facts WHERE invalid_at IS NULL AND kind <> 'summary'"  # and the session's summary
    assert _rows(db, facts) == [("Sam is vegetarian",)]
    assert _rows(db, "SELECT count(*) FROM facts WHERE invalid_at IS NULL AND kind = 'summary'") == [(1,)]
    assert _rows(db, "SELECT count(*) FROM applied_batches") == [(1,)]


def test_worker_help_and_bad_options(tmp_path: Path) -> None:
    from memlane.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["worker", "--concurrency", "0"])
    assert exc.value.code == 2
    helptext = subprocess.run(
        [sys.executable, "-m", "memlane.cli.main", "worker", "--help"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    ).stdout
    for option in ("--concurrency", "--once", "--tenant", "--queue", "SIGTERM"):
        assert option in helptext


def test_worker_on_postgresql_with_a_redis_queue(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    """--db postgresql://... --queue redis://...: the jobs an engine queued in Redis are run
    against the PostgreSQL store (the sessions in the store too)."""

    async def queue() -> list[Job]:
        jobs = []
        async with AsyncMemory(pg_url, embedder="hash", jobs=redis_url, formation=QUEUE_ONLY) as m:
            for user in ("sam", "kim"):
                await m.sessions.create_session(user_ids=[user], session_id=f"s-{user}")
                for text in (f"I'm vegetarian, says {user}", f"I live in Lisbon, says {user}"):
                    await m.add_event(f"s-{user}", Event(type=EventType.USER_MESSAGE, author=user, content=text))
                    await m.add_event(f"s-{user}", Event(type=EventType.AGENT_RESPONSE, author="bot", content="ok"))
                job = await m.end_session(f"s-{user}", wait=False)
                assert isinstance(job, Job)
                jobs.append(job)
        return jobs

    async def after(ids: list[str]) -> tuple[list[str], list[str]]:
        async with AsyncMemory(pg_url, embedder="hash", jobs=redis_url, formation=QUEUE_ONLY) as m:
            statuses = [(await m.get_job(i)).status for i in ids]
            facts = [f.content for u in ("sam", "kim") for f in (await m.list(user_id=u)).items]
            return statuses, facts

    jobs = asyncio.run(queue())
    cmd = [
        sys.executable,
        "-m",
        "memlane.cli.main",
        "worker",
        "--db",
        pg_url,
        "--queue",
        redis_url,
        "--embedder",
        "hash",
        "--once",
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert _job_lines(proc.stdout) == {j.id: ["done"] for j in jobs}
    statuses, facts = asyncio.run(after([j.id for j in jobs]))
    assert statuses == ["done", "done"]
    assert any("sam" in f.lower() for f in facts) and any("kim" in f.lower() for f in facts), facts


def test_two_workers_on_postgresql_and_redis_run_each_job_exactly_once(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Two workers x concurrency 2 on one Redis queue and one PostgreSQL store: every job is
    run by one worker once, and its batch is applied once."""
    users = [f"user{i:02d}" for i in range(12)]

    async def queue() -> list[Job]:
        jobs = []
        async with AsyncMemory(pg_url, embedder="hash", jobs=redis_url, formation=QUEUE_ONLY) as m:
            for user in users:
                await m.sessions.create_session(user_ids=[user], session_id=f"s-{user}")
                for text in (f"I'm vegetarian, says {user}", f"I live in Lisbon, says {user}"):
                    await m.add_event(f"s-{user}", Event(type=EventType.USER_MESSAGE, author=user, content=text))
                    await m.add_event(f"s-{user}", Event(type=EventType.AGENT_RESPONSE, author="bot", content="ok"))
                job = await m.end_session(f"s-{user}", wait=False)
                assert isinstance(job, Job)
                jobs.append(job)
        return jobs

    async def store_rows() -> tuple[list[str], int, int, list[int]]:
        async with AsyncMemory(pg_url, embedder="hash", jobs=redis_url, formation=QUEUE_ONLY) as m:
            statuses = [(await m.get_job(j.id)).status for j in jobs]
            db = m.facts.db  # type: ignore[attr-defined]
            async with db.connection() as conn:
                applied = (await (await conn.execute("SELECT count(*) FROM applied_batches")).fetchone())[0]
                doubled = (
                    await (
                        await conn.execute(
                            "SELECT count(*) FROM (SELECT fact_id FROM history WHERE event='ADD' GROUP BY fact_id"
                            " HAVING count(*) > 1) d"
                        )
                    ).fetchone()
                )[0]
                per_user = [
                    r[0]
                    for r in await (
                        await conn.execute("SELECT count(*) FROM facts WHERE invalid_at IS NULL GROUP BY user_id")
                    ).fetchall()
                ]
            return statuses, applied, doubled, per_user

    jobs = asyncio.run(queue())
    cmd = [
        sys.executable,
        "-m",
        "memlane.cli.main",
        "worker",
        "--db",
        pg_url,
        "--queue",
        redis_url,
        "--embedder",
        "hash",
        "--once",
        "--concurrency",
        "2",
        "--json",
    ]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    ran = [job for out, _ in outs for job, outcomes in _job_lines(out).items() for o in outcomes if o == "done"]
    assert sorted(ran) == sorted(j.id for j in jobs)
    statuses, applied, doubled, per_user = asyncio.run(store_rows())
    assert statuses == ["done"] * len(jobs) and applied == len(jobs) and doubled == 0
    assert len(per_user) == len(users) and len(set(per_user)) == 1, per_user
