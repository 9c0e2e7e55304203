"""Formation through the real OpenAI-compatible client against a local HTTP server:
structured requests, malformed JSON, 429 storms, timeouts, and a process killed mid-job."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from loopback import serve
from memlane import AsyncMemory, Event, EventType, FormationConfig, FormationError, Memory
from memlane.providers.llm.openai import OpenAIChat

Answer = tuple[int, Any] | Callable[[dict[str, Any]], tuple[int, Any]]


def brain_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A plausible model: answers each formation task by its system prompt."""
    system = body["messages"][0]["content"]
    convo = body["messages"][-1]["content"]
    if system.startswith("You extract FACTS"):
        facts = []
        if "vegetarian" in convo:
            facts.append({"content": "Sam is vegetarian", "scope": "user"})
        if "Lisbon" in convo:
            facts.append({"content": "Sam lives in Lisbon", "scope": "user"})
        out: dict[str, Any] = {"facts": facts}
    elif system.startswith("You keep"):
        out = {"decisions": []}
    elif system.startswith("You form REFLECTIONS"):
        out = {"session": ["Sam talked about food and home"], "user": []}
    elif system.startswith("You consolidate"):
        out = {"content": "VERSION: 1\n[SUMMARY]\n- food and home"}
    else:
        out = {"bullets": ["Sam is vegetarian"]}
    return {"content": json.dumps(out)}


@dataclass
class Server:
    url: str = ""
    script: list[Answer] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            self.requests.append(body)
            answer: Answer | None = self.script.pop(0) if self.script else None
        if answer is None:
            return 200, brain_answer(body)
        return answer(body) if callable(answer) else answer


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
    }


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if state.delay:
                time.sleep(state.delay)
            status, payload = state.next(body)
            data = json.dumps(_completion(payload) if status == 200 else payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if status == 429:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serve(Handler) as url:
        state.url = url + "/v1"
        yield state


def conf(**kw: Any) -> FormationConfig:
    base: dict[str, Any] = {"background": False, "retry_base_seconds": 0, "idle_minutes": None}
    return FormationConfig(**{**base, **kw})


def llm(server: Server, **kw: Any) -> OpenAIChat:
    return OpenAIChat("test-model", base_url=server.url, api_key="sk-test", backoff_base=0, **kw)


async def _session(m: AsyncMemory) -> None:
    await m.sessions.create_session(user_ids=["sam"], session_id="s")
    for text in ("I'm vegetarian", "and I live in Lisbon"):
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
        await m.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))


async def test_session_formed_through_openai_compatible_server(
    server: Server, tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    async with open_memory(tmp_path / "e.db", embedder="hash", llm=llm(server), formation=conf()) as m:
        await _session(m)
        res = await m.end_session("s")
        assert sorted(f.content for f in res.facts) == ["Sam is vegetarian", "Sam lives in Lisbon"]
        assert [r.content for r in res.reflections] == ["Sam talked about food and home"]
        assert [b.version for b in res.consolidated] == [1]
        assert res.usage["extract"] == {"calls": 1, "prompt_tokens": 100, "completion_tokens": 10}
        first = server.requests[0]
        assert first["model"] == "test-model"
        assert first["response_format"]["type"] == "json_schema"
        assert "Sam (user): I'm vegetarian" in first["messages"][-1]["content"]
        assert await m.profile("sam") == "- Sam is vegetarian"
        # the same statements again: the server's dedup call sees both stored facts as candidates
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content="I'm vegetarian, in Lisbon"))
        server.script.append(lambda b: (200, brain_answer(b)))
        server.script.append(
            (
                200,
                {"content": json.dumps({"decisions": [{"index": 0, "event": "NONE"}, {"index": 1, "event": "NONE"}]})},
            )
        )
        res2 = await m.form("s")
        assert [c.event for c in res2.changes] == ["NONE", "NONE"]
        assert (await m.stats(user_id="sam")).valid_facts == 3  # two facts and the session's summary


async def test_malformed_json_keeps_the_job_then_succeeds(
    server: Server, tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    async with open_memory(tmp_path / "bad.db", embedder="hash", llm=llm(server), formation=conf()) as m:
        await _session(m)
        server.script += [(200, {"content": "Sure! Here are the facts: {facts: [oops"}), (200, {"content": "```"})]
        with pytest.raises(FormationError, match="not lost"):
            await m.form("s")
        assert len(server.requests) == 2  # the answer and exactly one corrective retry
        assert "could not be used" in server.requests[1]["messages"][-1]["content"]
        assert (await m.stats(user_id="sam")).valid_facts == 0
        assert await m.reflections("session", user_id="sam", session_id="s") == []
        (job,) = await m.list_jobs()
        assert job.status == "queued" and "OutputParseError" in (job.last_error or "")
        assert await m.run_jobs() == 1
        assert (await m.get_job(job.id)).status == "done"
        assert (await m.stats(user_id="sam")).valid_facts == 3  # two facts and the session's summary


async def test_429_storm_is_ridden_out(server: Server, tmp_path: Path) -> None:
    server.script += [(429, {"error": {"message": "slow down"}})] * 6
    async with AsyncMemory(tmp_path / "r.db", embedder="hash", llm=llm(server, max_retries=3), formation=conf()) as m:
        await _session(m)
        with pytest.raises(FormationError):
            await m.form("s")  # 4 attempts, all 429: the job is kept
        assert (await m.stats(user_id="sam")).valid_facts == 0
        await m.run_jobs()  # two more 429s, then the server recovers
        (job,) = await m.list_jobs()
        assert job.status == "done" and job.attempts == 1
        assert (await m.stats(user_id="sam")).valid_facts == 3  # two facts and the session's summary


async def test_timeout_is_retried(server: Server, tmp_path: Path) -> None:
    server.delay = 0.5
    slow = llm(server, timeout=0.1, max_retries=0)
    async with AsyncMemory(tmp_path / "t.db", embedder="hash", llm=slow, formation=conf()) as m:
        await _session(m)
        with pytest.raises(FormationError, match="timed out"):
            await m.form("s")
        server.delay = 0
        await m.run_jobs()
        assert (await m.stats(user_id="sam")).valid_facts == 3  # two facts and the session's summary


def test_sync_facade_add_infer(server: Server, tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder="hash", llm=llm(server), formation=conf()) as m:
        facts = m.add([{"role": "user", "content": "I'm vegetarian", "name": "Sam"}], user_id="sam", infer=True)
        assert [f.content for f in facts] == ["Sam is vegetarian"]
        job = m.add("I live in Lisbon", user_id="sam", infer=True, wait=False)
        assert m.run_jobs() == 1 and m.get_job(job.id).status == "done"


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from memlane import AsyncMemory, Event, EventType, FormationConfig
    from memlane.providers.llm.openai import OpenAIChat

    async def main():
        llm = OpenAIChat("m", base_url=sys.argv[2], api_key="k", timeout=600, max_retries=0)
        conf = FormationConfig(background=False, idle_minutes=None, lease_seconds=1)
        m = await AsyncMemory(sys.argv[1], embedder="hash", llm=llm, formation=conf).open()
        await m.sessions.create_session(user_ids=["sam"], session_id="s")
        for text in ("I'm vegetarian", "and I live in Lisbon"):
            await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
            await m.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))
        print("formed-start", flush=True)
        await m.form("s")

    asyncio.run(main())
    """
)


async def test_process_killed_mid_formation_loses_nothing(server: Server, tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    hold = threading.Event()

    def stall(body: dict[str, Any]) -> tuple[int, Any]:  # the reflection call hangs until the child is killed
        hold.wait(20)
        return 500, {"error": {"message": "gone"}}

    server.script += [lambda b: (200, brain_answer(b)), stall]
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    child = subprocess.Popen([sys.executable, str(script), str(db), server.url], stdout=subprocess.PIPE, env=env)
    try:
        deadline = time.time() + 30
        while len(server.requests) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(server.requests) == 2, "the child never reached the reflection call"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        hold.set()
        if child.poll() is None:
            child.kill()
        assert child.stdout is not None
        child.stdout.close()
    conn = sqlite3.connect(db)
    status, state = conn.execute("SELECT status, state FROM jobs").fetchone()
    conn.close()
    assert status == "running" and "extracted" in json.loads(state)  # abandoned mid-job, extraction checkpointed
    time.sleep(1.1)  # the dead worker's lease expires
    async with AsyncMemory(db, embedder="hash", llm=llm(server), formation=conf()) as m:
        assert (await m.stats(user_id="sam")).valid_facts == 0  # nothing half-applied
        assert await m.run_jobs() == 1
        (job,) = await m.list_jobs()
        assert job.status == "done"
        assert sorted(f.content for f in (await m.list(user_id="sam")).items if f.kind != "summary") == [
            "Sam is vegetarian",
            "Sam lives in Lisbon",
        ]
        assert len(server.requests) == 3  # the replay reused the checkpointed extraction: only reflect again
        assert await m.sessions.get_session("s") is not None
