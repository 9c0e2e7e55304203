"""The engine's parts (issue 19): typed status reports that still read as the dicts they were,
and context assembly from stores alone (no AsyncMemory)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from memlane import AsyncMemory
from memlane.engine.context import ContextQuery, LocalContextCache, WindowQuery, build_context, read_window
from memlane.engine.status import ConsolidationStatus, EmbeddingProgress, MemoryStats, ScopeStats
from memlane.models import Event, EventType


def test_embedding_progress_reads_as_its_old_dict() -> None:
    p = EmbeddingProgress(high=1, low=2, queued=3, done=4)
    # the keys and their order of the dict it replaces: the JSON of GET /v1/embeddings
    assert list(p.model_dump()) == ["high", "normal", "low", "queued", "done", "failed", "last_error", "idle"]
    assert p["queued"] == 3 and p.get("missing", 7) == 7 and "done" in p and "nope" not in p
    assert dict(p) == p.model_dump() and list(p) == list(p.keys()) and len(p) == 8
    assert dict(p.items())["low"] == 2 and list(p.values())[:3] == [1, 0, 2]
    with pytest.raises(KeyError):
        p["nope"]


def test_status_reports_keep_eden_keys() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    c = ConsolidationStatus(
        buffer_size=2,
        threshold=4,
        needs_consolidation=False,
        word_limit=300,
        current_word_count=0,
        version=0,
        last_consolidated_at=when,
    )
    assert list(c.model_dump()) == [
        "buffer_size",
        "threshold",
        "needs_consolidation",
        "word_limit",
        "current_word_count",
        "version",
        "last_consolidated_at",
    ]
    s = MemoryStats(
        scopes={
            "user": ScopeStats(
                consolidated_words=0,
                version=1,
                reflections=2,
                unabsorbed=1,
                last_reflection_at=None,
                last_consolidated_at=None,
            )
        },
        facts=3,
        valid_facts=2,
        jobs={"done": 1},
        usage={},
    )
    assert s["scopes"]["user"]["unabsorbed"] == 1 and s["jobs"] == {"done": 1}
    assert list(s.model_dump()) == ["scopes", "facts", "valid_facts", "jobs", "usage"]


async def test_context_and_window_from_stores_alone(tmp_path: Path) -> None:
    """build_context and read_window take stores (the engine only opens them here)."""
    async with AsyncMemory(tmp_path / "c.db", embedder=None) as m:
        await m.add("Ann's cat is called Miso", user_id="ann")
        await m.sessions.create_session(user_ids=["ann"], session_id="s1")
        for text in ("hi", "hello", "how are you"):
            await m.sessions.add_event("s1", Event(type=EventType.USER_MESSAGE, author="ann", content=text))
        facts, reflections, sessions = m.facts, m.reflection_store, m.sessions
        want = await m.context(user_id="ann", profile=False)
        window = await m.window("s1", user_turns=2)

    async def no_profile(user_id: str, agent_id: str | None) -> str | None:
        raise AssertionError("profile=False must not distil a profile")

    async with AsyncMemory(tmp_path / "c.db", embedder=None) as m2:
        q = ContextQuery.checked(user_id="ann", profile=False)
        text = await build_context(m2.facts, m2.reflection_store, LocalContextCache(), no_profile, q)
        assert text == want and "Miso" in text
        events = await read_window(m2.sessions, WindowQuery.checked(m2.recall_config, "s1", user_turns=2))
        assert [e.content for e in events] == [e.content for e in window] == ["hello", "how are you"]
    assert facts is not None and reflections is not None and sessions is not None
