"""``export_user``: everything memlane holds about a user, and nothing of another user.

The table test lists the SQLite file's tables: each must be exported or have a recorded
reason (memlane.stores.sqlite.export.TABLES), so a new table cannot escape the export.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_erasure import AGENT_CONF, CA, CB, _populate, cfg

from memlane import AsyncMemory, Event, EventType, Memory
from memlane.stores.sqlite.export import EXPORTED, TABLES


async def _group_session(db: Path, open_memory: Callable[..., AsyncMemory] = AsyncMemory) -> None:
    async with open_memory(db, embedder="hash", formation=cfg()) as m:
        await m.sessions.create_session(app="club", user_ids=["ann", "bob"], session_id="grp")
        await m.add_event("grp", Event(type=EventType.USER_MESSAGE, author="ann", content=f"ann here {CA}"), app="club")
        await m.add_event("grp", Event(type=EventType.USER_MESSAGE, author="bob", content=f"bob here {CB}"), app="club")


def _q(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


async def test_every_table_is_exported_or_has_a_reason(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    async with AsyncMemory(db, embedder="hash") as m:
        await m.add("hello", user_id="ann")
    tables = {r[0] for r in _q(db, "SELECT name FROM sqlite_master WHERE type='table'")}
    undecided = tables - set(TABLES)
    assert not undecided, f"tables with no export decision in memlane.stores.sqlite.export.TABLES: {undecided}"
    assert not set(TABLES) - tables, "TABLES names tables the schema does not have"
    # every table with a user_id column holds personal data: it must be exported
    for t in tables:
        cols = {r[1] for r in _q(db, f'PRAGMA table_info("{t}")')}
        if "user_id" in cols or "user_ids" in cols:
            assert TABLES[t] == EXPORTED or t == "context_cache" or t == "applied_batches", t


async def test_export_covers_every_exported_table_and_nothing_of_others(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    await _populate(db)
    await _group_session(db)
    async with AsyncMemory(db, embedder="hash", formation=cfg(**AGENT_CONF)) as m:
        gone = (await m.add(f"Old note {CA}", user_id="ann", agent_id="club"))[0]
        await m.delete(gone.id, user_id="ann", agent_id="club")
        out = await m.export_user("ann")
    text = json.dumps(out)  # JSON data: dumps without a custom encoder
    assert CA in text and CB not in text
    assert out["not_exported"] == []

    facts = {f["id"] for f in out["facts"]}
    assert facts == {r[0] for r in _q(db, "SELECT id FROM facts WHERE user_id='ann'")}
    assert [f["id"] for f in out["facts"] if f["invalid_at"]] == [gone.id]  # deleted facts too
    assert {f["scope"] for f in out["facts"]} >= {"user", "agent"}  # every partition of the user
    hist = sum(len(f["history"]) for f in out["facts"])
    q = "SELECT COUNT(*) FROM history WHERE fact_id IN (SELECT id FROM facts WHERE user_id='ann')"
    assert hist == _q(db, q)[0][0] > 0
    assert {r["id"] for r in out["reflections"]} == {
        r[0] for r in _q(db, "SELECT id FROM reflections WHERE user_id='ann'")
    }
    assert out["reflections"]
    assert {b["id"] for b in out["consolidated"]} == {
        r[0] for r in _q(db, "SELECT id FROM consolidated WHERE user_id='ann'")
    }
    assert out["consolidated"]
    # contributors: every item is exported in full or listed as a reference (without text)
    full = facts | {r["id"] for r in out["reflections"]} | {b["id"] for b in out["consolidated"]}
    refs = {r["id"] for r in out["shared"]}
    contributed = {r[0] for r in _q(db, "SELECT item_id FROM contributors WHERE user_id='ann'")}
    assert contributed and contributed <= full | refs and refs <= contributed
    assert all(set(r) == {"kind", "id", "scope", "agent_id"} for r in out["shared"])
    assert {j["id"] for j in out["jobs"]} == {r[0] for r in _q(db, "SELECT id FROM jobs WHERE user_id='ann'")}
    assert out["jobs"]
    cursors = {(c["app"], c["session_id"]) for c in out["formation_cursors"]}
    assert cursors == {
        (r[0], r[1]) for r in _q(db, "SELECT app, session_id FROM formation_cursors WHERE user_ids LIKE '%\"ann\"%'")
    }
    assert cursors
    sessions = {(s["app"], s["id"]): s for s in out["sessions"]}
    assert set(sessions) == {
        (r[0], r[1]) for r in _q(db, "SELECT app, session_id FROM session_users WHERE user_id='ann'")
    }
    solo = [s for s in out["sessions"] if not s["group"]]
    n_events = _q(
        db,
        "SELECT COUNT(*) FROM events e JOIN sessions s ON s.app=e.app AND s.id=e.session_id"
        " WHERE s.user_ids='[\"ann\"]'",
    )[0][0]
    assert sum(len(s["events"]) for s in solo) == n_events > 0
    grp = sessions[("club", "grp")]
    assert grp["group"] and [e["content"] for e in grp["events"]] == [f"ann here {CA}"]
    assert "user_ids" not in grp and "state" not in grp

    # bob's export holds bob's, not ann's
    async with AsyncMemory(db, embedder="hash", formation=cfg(**AGENT_CONF)) as m:
        bob = json.dumps(await m.export_user("bob"))
    assert CB in bob and CA not in bob


async def test_export_after_forget_is_empty(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    await _populate(db)
    await _group_session(db)
    async with AsyncMemory(db, embedder="hash", formation=cfg(**AGENT_CONF)) as m:
        await m.forget("ann")
        out = await m.export_user("ann")
    for key in (
        "facts",
        "shared_changes",
        "reflections",
        "consolidated",
        "shared",
        "sessions",
        "jobs",
        "formation_cursors",
    ):
        assert out[key] == [], key
    assert CA not in json.dumps(out)


def test_sync_export_with_in_process_sessions(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder="none", sessions="local") as m:
        m.add("I like tea", user_id="ann")
        m.add("I like coffee", user_id="bob")
        m.sessions.create_session(app="a", user_ids=["ann"], session_id="s1")
        m.add_event("s1", Event(content="hi there"), app="a")
        out = m.export_user("ann")
    assert [f["content"] for f in out["facts"]] == ["I like tea"]
    assert [e["content"] for s in out["sessions"] for e in s["events"]] == ["hi there"]
