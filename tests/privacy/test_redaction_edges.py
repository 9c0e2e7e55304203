"""Redaction at the edges: the HTTP API (a real server on loopback: memories, documents,
updates, sessions and their events and state, formation, import, tool calls, the adk-rs
ingest route), MCP (the official client against a ``memlane mcp`` process configured by
``MEMLANE_REDACT``) and the CLI (``memlane add`` / ``search``). Afterwards the database file
holds none of the raw values, and no response returns one."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from canary import BADGE, CARD, CONFIG, EMAIL, IBAN, IP, PHONE, PII, LeakyModel, sqlite_hits

from cli_helpers import run
from memlane.service.app import create_app
from service_server import make_hub, serve

LEAKS = (EMAIL, PHONE, CARD, IBAN, IP, BADGE)


def clean(text: str) -> bool:
    return not any(v.lower() in text.lower() for v in LEAKS)


def test_http_writes_are_redacted(tmp_path: Path) -> None:
    hub = make_hub(tmp_path, redact=CONFIG, llm=LeakyModel())
    with serve(create_app(hub=hub)) as srv:
        c = srv.client
        responses = []

        def ok(r: object) -> None:
            assert r.status_code in (200, 201, 202), r.text  # type: ignore[attr-defined]
            responses.append(r.text)  # type: ignore[attr-defined]

        ok(c.post("/v1/memories", json={"text": PII, "user_id": "zoe"}))
        ok(
            c.post(
                "/v1/memories",
                json={"messages": [{"role": "user", "content": PII, "metadata": {"ip": IP}}], "user_id": "zoe"},
            )
        )
        placeholder = c.post("/v1/memories", json={"text": "placeholder", "user_id": "zoe"}).json()["memories"][0]
        ok(c.patch(f"/v1/memories/{placeholder['id']}", params={"user_id": "zoe"}, json={"text": f"now {PII}"}))
        ok(c.post("/v1/documents", json={"text": PII, "title": f"For {EMAIL}", "user_id": "zoe"}))
        ok(c.post("/v1/sessions", json={"session_id": "s1", "user_ids": ["zoe"], "state": {"mail": EMAIL}}))
        ok(c.post("/v1/sessions/s1/events", json={"type": "user_message", "content": PII, "author": "zoe"}))
        ok(c.post("/v1/sessions/s1/events", json={"type": "agent_response", "content": f"ok {PHONE}", "author": "a"}))
        ok(c.patch("/apps/default/users/zoe/memory", json={"sessionId": "s1"}))
        ok(c.post("/v1/tools/remember", params={"user_id": "zoe"}, json={"fact": f"Zoe's card: {CARD}"}))
        jsonl = json.dumps({"user_id": "zoe", "session_id": "imp", "role": "user", "content": PII})
        ok(c.post("/v1/import", json={"content": jsonl + "\n", "form": True}))
        job = c.post("/v1/sessions/s1/end").json()
        for _ in range(300):  # the formation job runs in the server's background worker
            status = c.get(f"/v1/jobs/{job['job_id']}").json()["status"]
            if status in ("done", "failed"):
                break
            time.sleep(0.1)
        assert status == "done"
        ok(c.get("/v1/memories", params={"user_id": "zoe", "limit": 100}))
        ok(c.get("/v1/sessions/s1"))
        ok(c.get("/memory/events", params={"session_id": "s1"}))
        found = c.post("/v1/search", json={"query": f"mail {EMAIL}", "user_id": "zoe", "mode": "keyword"})
        ok(found)
        assert found.json()["hits"], "a hash token matches the same value in the query"
        assert any("[email:" in r for r in responses)
    assert all(clean(r) for r in responses), [r for r in responses if not clean(r)]
    assert sqlite_hits(tmp_path / "memlane.db") == []


async def test_mcp_tools_are_redacted(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from mcp import ClientSession, StdioServerParameters, stdio_client

    db = tmp_path / "m.db"
    env = {
        "MEMLANE_KEYS_FILE": str(tmp_path / "no-keys.db"),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "MEMLANE_CONFIG": "",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "MEMLANE_REDACT": json.dumps({"mode": "hash", "patterns": {"badge": r"EMP-\d{6}"}}),
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memlane.cli.main", "mcp", "--db", str(db), "--embedder", "hash", "--user", "zoe"],
        env=env,
    )
    with (tmp_path / "stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            stored = await s.call_tool("remember", {"fact": PII})
            found = await s.call_tool("search", {"query": [EMAIL]})
            listed = await s.call_tool("list", {})
    texts = [r.content[0].text for r in (stored, found, listed)]  # type: ignore[union-attr]
    assert "[email:" in texts[0] and "[badge:" in texts[0], texts[0]
    results = json.loads(texts[1])["results"]
    assert results, texts[1]  # the query's token matches the stored one
    assert clean(texts[0]) and clean(texts[2]) and all(clean(r["content"]) for r in results), texts
    assert sqlite_hits(db) == []


def test_cli_follows_memory_redact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = ["--db", str(tmp_path / "cli.db"), "--embedder", "hash", "-q"]
    monkeypatch.setenv("MEMLANE_REDACT", "email,phone,card,iban,ip")
    code, out, err = run(capsys, "add", PII, "-u", "zoe", *db)
    assert code == 0, err
    code, out, err = run(capsys, "search", f"what about {PHONE}", "-u", "zoe", *db)
    assert code == 0, err
    assert "[phone]" in out and "[email]" in out and clean(out.replace(BADGE, "")), out
    hits = sqlite_hits(tmp_path / "cli.db")
    assert hits and all(h.endswith(("emp-884213", "884213")) for h in hits), hits  # only the badge: no pattern


async def test_adk_sessions_and_memory_are_redacted(tmp_path: Path) -> None:
    """Google ADK's session service over a redacting memory: the event (kept whole as JSON in
    ``metadata["adk_event"]``), its state delta (session, ``user:`` and ``app:`` state) and
    ``add_session_to_memory`` store no raw value, and the session reads back redacted."""
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event as AdkEvent
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    from memlane import AsyncMemory
    from memlane.adapters.adk import MemlaneMemoryService, MemlaneSessionService

    db = tmp_path / "adk.db"
    async with AsyncMemory(db, embedder="hash", redact=CONFIG, llm=LeakyModel()) as m:
        sessions, memories = MemlaneSessionService(m), MemlaneMemoryService(m)
        session = await sessions.create_session(app_name="app", user_id="zoe", state={"mail": EMAIL})
        delta = {"card": CARD, "user:phone": PHONE, "app:host": IP}
        event = AdkEvent(
            author="user",
            invocation_id="inv",
            content=types.Content(role="user", parts=[types.Part(text=PII)]),
            actions=EventActions(state_delta=delta),
        )
        await sessions.append_event(session, event)
        reply = types.Content(role="model", parts=[types.Part(text=f"Saved {IBAN}")])
        await sessions.append_event(session, AdkEvent(author="agent", invocation_id="inv", content=reply))
        stored = await sessions.get_session(app_name="app", user_id="zoe", session_id=session.id)
        assert stored is not None
        await memories.add_session_to_memory(stored)
        shown = stored.model_dump_json()
        assert clean(shown) and "[email:" in shown and "[card:" in shown, shown
    assert sqlite_hits(db) == []
