"""Redaction's proof: canary PII written through every write path of the Python API (``add``,
``add_many``, ``add_document``, ``update``, ``add(infer=True)``'s queued job, session events
and state, formation with a model that adds PII of its own: facts, reflections, consolidated
blobs, the profile and the cached context; the kept user turns of a reset; an import) on a
SQLite file, PostgreSQL, and PostgreSQL with Redis sessions and job queue. Afterwards no raw
value is anywhere the backend keeps data (files' bytes, every table, every Redis key). The same
writes without redaction leave the values there, so the scan does see them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from canary import (
    BADGE,
    CARD,
    CONFIG,
    EMAIL,
    IBAN,
    IP,
    NEEDLES,
    PHONE,
    PII,
    LeakyModel,
    pg_hits,
    redis_hits,
    sqlite_hits,
)

from memlane import AddBatch, AsyncMemory, Event, EventType
from memlane.ingest.importers import keep_sessions, read_plan, store_turns


@dataclass(frozen=True)
class Backend:
    name: str
    db: str
    sessions: str
    jobs: str | None = None
    redis: str | None = None

    def memory(self, **kw: Any) -> AsyncMemory:
        return AsyncMemory(self.db, embedder="hash", sessions=self.sessions, jobs=self.jobs, **kw)

    def hits(self) -> list[str]:
        found = pg_hits(self.db) if self.db.startswith("postgresql://") else sqlite_hits(Path(self.db))
        return found + (redis_hits(self.redis) if self.redis else [])


@pytest.fixture(params=["sqlite", "pg", "pg+redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "m.db"), "sqlite")
    pg: str = request.getfixturevalue("pg_url")
    if request.param == "pg":
        return Backend("pg", pg, "sqlite")  # the store's own session and job tables
    redis: str = request.getfixturevalue("redis_url")
    return Backend("pg+redis", pg, redis, redis, redis)


async def write_everywhere(m: AsyncMemory, tmp_path: Path) -> None:
    """The canary through every write path of the engine."""
    await m.add(PII, user_id="zoe")
    await m.add(
        [{"role": "user", "content": PII, "metadata": {"contact": EMAIL}}],
        user_id="zoe",
        session_id="chat-1",
        metadata={"phone": PHONE},
    )
    await m.add_many([AddBatch([{"role": "user", "content": f"again: {PII}"}], user_id="zoe", session_id="bulk-1")])
    await m.add_document(
        f"# Contacts\n\n{PII}\n\nMore text about the quartet rehearsal.",
        title=f"Notes for {EMAIL}",
        source=f"http://{IP}/notes",
        user_id="zoe",
        metadata={"iban": IBAN},
    )
    temp = (await m.add("a placeholder", user_id="zoe"))[0]
    await m.update(temp.id, f"updated: {PII}", user_id="zoe")
    job = await m.add([{"role": "user", "content": f"My card is {CARD}"}], user_id="zoe", infer=True, wait=False)
    assert job.id  # queued (payload stored) before it runs
    await m.run_jobs()

    await m.sessions.create_session(session_id="s1", user_ids=["zoe"], state={"email": EMAIL, "badge": BADGE})
    await m.add_event("s1", Event(content=PII, author="zoe", metadata={"ip": IP}))
    await m.add_event("s1", Event(type=EventType.AGENT_RESPONSE, author="bot", content={"text": f"Noted {PHONE}"}))
    await m.end_session("s1")  # formation: facts, reflections, consolidation (the model leaks PII)
    assert await m.profile("zoe")
    assert "<MemoryContext>" in await m.context(user_id="zoe", session_id="s1")

    await m.sessions.create_session(session_id="s2", user_ids=["zoe"])
    await m.add_event("s2", Event(content=f"I moved; my new number is {PHONE}", author="zoe"))
    await m.reset_session("s2")  # the user's turns are kept as memories

    lines = [
        {"user_id": "zoe", "session_id": "imported", "role": "user", "content": PII},
        {"user_id": "zoe", "session_id": "imported", "role": "assistant", "content": f"Mail sent to {EMAIL}"},
    ]
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    plan = read_plan(path)
    await store_turns(m, plan, embed="now")
    await keep_sessions(m, plan)


async def test_no_raw_pii_reaches_any_store(backend: Backend, tmp_path: Path) -> None:
    model = LeakyModel()
    async with backend.memory(redact=CONFIG, llm=model) as m:
        await write_everywhere(m, tmp_path)
        assert await m.profile("zoe", items=[f"call {PHONE} about {IBAN}"])
        sent = [i for inp in model.profile_inputs for i in [*inp.items, *inp.facts]]
        assert sent and not any(v in i for v in (PHONE, IBAN, EMAIL) for i in sent), sent  # the model saw tokens
        stored = [f.content for f in (await m.list(user_id="zoe", limit=200)).items]
        blobs = [await m.consolidated("session", user_id="zoe", session_id="s1")]
        reflections = await m.reflections("user", user_id="zoe")
        # what was stored is the redacted text: tokens where the values were
        assert any("[email:" in t and "[badge:" in t and "[iban:" in t for t in stored), stored
        assert any("[card:" in t for t in stored) and any("[phone:" in t for t in stored)
        assert any("[email:" in r.content for r in reflections), reflections
        assert blobs[0] is not None and "[iban:" in blobs[0].consolidated_content
        # hash mode: the same value is the same token, so a search for it finds its memories
        hits = (await m.search(f"what is {EMAIL}", user_id="zoe", mode="keyword")).hits
        assert hits and all(EMAIL not in h.fact.content for h in hits)
    assert backend.hits() == []


async def test_the_scan_finds_values_written_without_redaction(backend: Backend, tmp_path: Path) -> None:
    async with backend.memory(llm=LeakyModel()) as m:
        await write_everywhere(m, tmp_path)
    found = backend.hits()
    for needle in (EMAIL, PHONE, CARD, IBAN.lower(), IP, BADGE.lower()):
        assert any(h.endswith(f": {needle}") for h in found), (needle, found)
    if backend.redis:
        assert any(h.startswith("redis ") for h in found)
    assert set(NEEDLES) >= {h.rsplit(": ", 1)[1] for h in found}
