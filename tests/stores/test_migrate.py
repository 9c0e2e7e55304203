"""``memlane migrate``: a SQLite store copied into PostgreSQL and back is the same store, table by
table and search by search; an interrupted copy resumes without duplicates; bad URLs, a foreign
target and another embedder are refused with clear errors. Real SQLite files, real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from formation_helpers import Brain
from memlane import AsyncMemory, Event, EventType, FormationConfig
from memlane.errors import ConfigError, ConflictError, DimensionMismatchError, InvalidInputError, NotFoundError
from memlane.retrieval.hybrid import RetrievalConfig
from memlane.transfer import TABLES, migrate

FORMATION = FormationConfig(background=False, idle_minutes=None, agent_memory=True)
#: Queries the round-tripped stores must answer alike: (user, agent, query).
QUERIES = [
    ("alice", None, "hiking mountains"),
    ("alice", None, "what did I note"),
    ("alice", "helper", "standup meeting time"),
    ("bob", None, "tea or coffee"),
    ("carol", None, "where is the cabin"),
    ("sam", None, "vegetarian food"),
    ("alice", None, "guide installation steps"),
]


async def _populate(db: Path) -> None:
    """A store with a row in every copied table: verbatim memories (metadata, unicode, a date,
    an update, a deletion), agent-shared memory, a document and its fragments, chat messages
    with neighbours, a formed conversation (facts, reflections, consolidated memory, a done
    job, an applied batch, a cursor), a queued job and review-queue proposals."""
    brain = Brain()
    brain.queue(
        "extract",
        [
            {"content": "Sam is vegetarian", "scope": "user"},
            {"content": "Answers in Portuguese are welcome", "scope": "agent"},
        ],
    )
    brain.queue(
        "reflect",
        {
            "agent": ["users ask about food"],
            "user": ["Sam likes short answers"],
            "session": ["Sam talked about food and family"],
        },
    )
    async with AsyncMemory(db, embedder="hash", formation=FORMATION, llm=brain) as m:
        when = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
        await m.add(
            "I like hiking in the mountains ☃", user_id="alice", metadata={"topic": "travel", "n": 1}, timestamp=when
        )
        await m.add("Bob prefers tea over coffee", user_id="bob", metadata={"z": [1, 2], "a": {"b": None}})
        # a memory longer than its windows: vectors in fact_windows (issue 22)
        m.retrieval = RetrievalConfig(embed_window_size=100)
        await m.add(" ".join(f"trail{i} summit{i}" for i in range(40)), user_id="alice")
        m.retrieval = RetrievalConfig()
        await m.link_identity("sms", "+15550100", "bob")  # the identity map
        await m.link_identity("télégramme", "bøb", "bob")
        # PostgreSQL text cannot hold NUL: the copy encodes it (and the codec's escape) and back
        await m.add("a NUL \x00 here and the escape \U0010fffe there", user_id="n\x00ul", metadata={"k\x00": "v\x00"})
        await m.add("The team standup is at 9am", user_id="alice", agent_id="helper", scope="agent")
        note = await m.add("a temporary note", user_id="alice")
        assert isinstance(note, list)
        await m.update(note[0].id, "an updated note about the garden", user_id="alice")
        gone = await m.add("something to delete", user_id="alice")
        assert isinstance(gone, list)
        await m.delete(gone[0].id, user_id="alice")
        # the review queue: one proposal approved (its fact and history are copied too), one pending
        approved = await m.propose("Alice reviews pull requests", user_id="alice", reason="said so")
        await m.review(approved.id, edit="Alice reviews pull requests on Fridays", reviewer="kim")
        await m.propose("a pending ☃ change", user_id="alice", action="update", target_id=note[0].id)
        await m.add_document(
            "# Guide\n\nInstallation steps: unpack, configure, run.\n\n" + "More words. " * 50,
            title="guide",
            user_id="alice",
        )
        chat = [
            {"role": "user", "content": "We rented a cabin by the lake"},
            {"role": "assistant", "content": "Which lake?"},
            {"role": "user", "content": "Lake Tahoe, the cabin is on the north shore"},
        ]
        await m.add(chat, user_id="carol", session_id="trip")
        for sid, user in (("s1", "sam"), ("s2", "sam")):
            await m.sessions.create_session(
                user_ids=[user], session_id=sid, agent_id="helper", state={"ü": 1, "a": "b"}
            )
            for text in ("I'm vegetarian", "I live in Lisbon", "my sister is called Ana"):
                await m.add_event(
                    sid,
                    Event(
                        type=EventType.USER_MESSAGE, author="Sam", content=text, metadata={"client": "cli", "ß": True}
                    ),
                )
                await m.add_event(sid, Event(type=EventType.AGENT_RESPONSE, author="bot", content="Noted."))
        await m.end_session("s1")  # formed now: facts, reflections, consolidated, applied batch, done job
        await m.form("s2", wait=False)  # stays queued


def _snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every copied table (and the keyword index, and meta) as comparable rows: JSON parsed
    (PostgreSQL's jsonb does not keep key order), SQLite's implicit session rowid left out (only
    a tie-break of equal timestamps)."""
    con = sqlite3.connect(db)
    try:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for t in TABLES:
            cols = (["rowid"] if t.rowid == "both" else []) + list(t.cols)
            rows = con.execute(f"SELECT {', '.join(cols)} FROM {t.name} ORDER BY {', '.join(t.pk)}").fetchall()
            out[t.name] = [
                tuple(json.loads(v) if c in t.json and isinstance(v, str) else v for c, v in zip(cols, r, strict=True))
                for r in rows
            ]
        out["facts_fts"] = con.execute(
            "SELECT rowid, part, author, text, ctx, date FROM facts_fts ORDER BY rowid"
        ).fetchall()
        out["meta"] = con.execute("SELECT key, value FROM meta WHERE key NOT LIKE 'migrate:%' ORDER BY key").fetchall()
        return out
    finally:
        con.close()


async def _answers(url: str, retrieval: RetrievalConfig | None = None) -> list[list[tuple[str, float]]]:
    async with AsyncMemory(url, embedder="hash", formation=FORMATION, retrieval=retrieval) as m:
        out = []
        for user, agent, query in QUERIES:
            res = await m.search(query, user_id=user, agent_id=agent, top_k=5)
            out.append([(h.fact.id, round(h.score, 6)) for h in res.hits])
        return out


def test_sqlite_to_postgresql_and_back_is_the_same_store(tmp_path: Path, pg_url: str) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    asyncio.run(_populate(a))
    before = _snapshot(a)
    assert all(before[t.name] for t in TABLES), [t.name for t in TABLES if not before[t.name]]
    assert any(r[4] for r in before["facts_fts"]), "some fact has neighbour context"

    there = asyncio.run(migrate(str(a), pg_url, batch_size=3))
    assert there.ok, there.problems
    assert there.embedder == "hash:256" and there.dim == 256
    assert {t.name: t.copied for t in there.tables} == {t.name: len(before[t.name]) for t in TABLES}
    back = asyncio.run(migrate(pg_url, str(b), batch_size=4))
    assert back.ok, back.problems
    after = _snapshot(b)
    for name, rows in before.items():
        assert after[name] == rows, name

    # search: the round-tripped SQLite answers exactly as the original (ids and scores) ...
    assert asyncio.run(_answers(str(b))) == asyncio.run(_answers(str(a)))
    # ... and PostgreSQL finds the same facts by vector (same vectors, same cosine scores) ...
    vector_only = RetrievalConfig(keyword_weight=0, vector_weight=1)
    on_pg, on_sqlite = asyncio.run(_answers(pg_url, vector_only)), asyncio.run(_answers(str(a), vector_only))
    assert [[i for i, _ in hits] for hits in on_pg] == [[i for i, _ in hits] for hits in on_sqlite]
    # ... and by keyword (its own ranking function, the same matches)
    keyword_only = RetrievalConfig(keyword_weight=1, vector_weight=0)
    kw_pg, kw_sqlite = asyncio.run(_answers(pg_url, keyword_only)), asyncio.run(_answers(str(a), keyword_only))
    assert [{i for i, _ in hits} for hits in kw_pg] == [{i for i, _ in hits} for hits in kw_sqlite]
    assert all(kw_sqlite[:4]) and all(kw_sqlite[5:])

    # the PostgreSQL copy is a working store: new rows get new ids after the copied ones
    async def write_more() -> None:
        async with AsyncMemory(pg_url, embedder="hash", formation=FORMATION) as m:
            added = await m.add("a new memory after the move", user_id="alice")
            assert isinstance(added, list)
            hits = await m.search("new memory after the move", user_id="alice")
            assert hits.hits[0].fact.id == added[0].id
            await m.sessions.create_session(user_ids=["dan"], session_id="later")
            await m.add_event("later", Event(type=EventType.USER_MESSAGE, author="dan", content="hi"))

    asyncio.run(write_more())


class Interrupt(Exception):
    pass


def _stop_at(table: str, batch: int) -> Any:
    """An ``after_batch`` hook that interrupts the copy after ``batch`` batches of ``table``."""

    def hook(name: str, batches: int) -> None:
        if name == table and batches == batch:
            raise Interrupt(f"stopped after {table} batch {batch}")

    return hook


def _hnsw(url: str) -> list[str]:
    import psycopg

    from memlane.stores.postgres.db import parse_pg_location

    base, schema, _, _ = parse_pg_location(url)
    with psycopg.connect(base) as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexdef ILIKE '%% USING hnsw %%'", (schema,)
        ).fetchall()
    return [r[0] for r in rows]


def _pg_meta(url: str, key: str) -> str | None:
    import psycopg
    from psycopg import sql

    from memlane.stores.postgres.db import parse_pg_location

    base, schema, _, _ = parse_pg_location(url)
    with psycopg.connect(base) as conn:
        query = sql.SQL("SELECT value FROM {}.meta WHERE key = %s").format(sql.Identifier(schema or "public"))
        row = conn.execute(query, (key,)).fetchone()
    return row[0] if row else None


@pytest.mark.parametrize("direction", ["to_pg", "to_sqlite"])
def test_an_interrupted_copy_resumes_without_duplicates(tmp_path: Path, pg_url: str, direction: str) -> None:
    a = tmp_path / "a.db"
    asyncio.run(_populate(a))
    if direction == "to_pg":
        source, target = str(a), pg_url
    else:  # fill PostgreSQL first, then copy it into a new SQLite file
        assert asyncio.run(migrate(str(a), pg_url)).ok
        source, target = pg_url, str(tmp_path / "b.db")
    total = {t.name: n for t, n in zip(TABLES, map(len, _snapshot(a).values()), strict=False)}
    with pytest.raises(Interrupt):  # mid-facts: sessions, users and events are through
        asyncio.run(migrate(source, target, batch_size=2, after_batch=_stop_at("facts", 3)))
    if direction == "to_pg":  # the HNSW index is rebuilt after the facts: gone for now, its definition kept
        # (fact_windows' own index is dropped when its table's rows come, after the facts)
        assert _hnsw(pg_url) == ["fact_windows_hnsw"] and _pg_meta(pg_url, "migrate:index:facts_embedding_hnsw")
    batches: dict[str, int] = {}
    first = asyncio.run(migrate(source, target, batch_size=2, after_batch=lambda t, n: batches.__setitem__(t, n)))
    # resumed: the tables done before are not read again, facts continue after their 3rd batch
    assert "sessions" not in batches and "events" not in batches
    assert batches["facts"] == -(-(total["facts"] - 6) // 2)
    assert first.ok, first.problems
    resumed = [t.name for t in first.tables if t.resumed]
    assert resumed and resumed[0] == "sessions", resumed
    # every row was inserted exactly once over the two runs (counts equal; nothing doubled)
    assert {t.name: t.target_rows for t in first.tables} == total
    assert sum(t.copied for t in first.tables) < sum(total.values())
    if direction == "to_sqlite":
        assert _snapshot(Path(target)) == _snapshot(a)
    assert sorted(_hnsw(pg_url)) == ["fact_windows_hnsw", "facts_embedding_hnsw"]
    assert not _pg_meta(pg_url, "migrate:index:facts_embedding_hnsw")
    assert not _pg_meta(pg_url, "migrate:index:fact_windows_hnsw")
    # a third run copies nothing; --restart scans again and still copies nothing
    again = asyncio.run(migrate(source, target))
    assert again.ok and sum(t.copied for t in again.tables) == 0
    rescan = asyncio.run(migrate(source, target, restart=True))
    assert rescan.ok and sum(t.copied for t in rescan.tables) == 0 and not any(t.resumed for t in rescan.tables)


def test_refusals_are_clear_and_change_nothing(tmp_path: Path, pg_url: str) -> None:
    a, other = tmp_path / "a.db", tmp_path / "other.db"
    asyncio.run(_populate(a))

    async def put(db: Path | str, text: str, embedder: str = "hash") -> None:
        async with AsyncMemory(db, embedder=embedder, formation=FORMATION) as m:
            await m.add(text, user_id="zed")

    with pytest.raises(ConfigError, match="Redis holds sessions"):
        asyncio.run(migrate("redis://127.0.0.1:6379/0", str(other)))
    with pytest.raises(ConfigError, match="unknown store URL scheme 'mysql'"):
        asyncio.run(migrate(str(a), "mysql://x/y"))
    with pytest.raises(NotFoundError, match="does not exist"):
        asyncio.run(migrate(str(tmp_path / "missing.db"), str(other)))
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(InvalidInputError, match="in memory"):
        asyncio.run(migrate(":memory:", str(other)))
    with pytest.raises(InvalidInputError, match="same store"):
        asyncio.run(migrate(str(a), f"sqlite:///{a}"))
    with pytest.raises(ConfigError, match="cannot connect to PostgreSQL"):
        asyncio.run(migrate(str(a), "postgresql://nobody@127.0.0.1:1/nothing"))

    # a target holding someone else's data: refused (nothing written), merged with force
    asyncio.run(put(other, "zed's own memory"))
    snap = _snapshot(other)
    with pytest.raises(ConflictError, match="already holds data"):
        asyncio.run(migrate(str(a), str(other)))
    assert _snapshot(other) == snap
    merged = asyncio.run(migrate(str(a), str(other), force=True))
    facts = next(t for t in merged.tables if t.name == "facts")
    assert facts.target_rows == facts.source_rows + 1 and not merged.ok  # merged: counts say so
    assert any("facts:" in p for p in merged.problems)

    # another embedder on the target: refused before any row is copied
    asyncio.run(put(pg_url, "zed again", embedder="hash:64"))
    with pytest.raises(DimensionMismatchError, match="64-dimensional"):
        asyncio.run(migrate(str(a), pg_url, force=True))


def test_memlane_migrate_command(tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from memlane.cli.main import main

    a = tmp_path / "a.db"
    asyncio.run(_populate(a))
    assert main(["migrate", "--from", str(a), "--to", pg_url, "--batch-size", "5"]) == 0
    out = capsys.readouterr().out
    assert "embedder: hash:256 (256 dimensions)" in out and "verified: every table" in out
    assert main(["migrate", "--from", pg_url, "--to", str(tmp_path / "b.db"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and {t["table"] for t in report["tables"]} == {t.name for t in TABLES}
    assert main(["migrate", "--from", "redis://x", "--to", str(tmp_path / "c.db")]) == 2
    assert "memlane: error: Redis holds sessions" in capsys.readouterr().err
    assert main(["migrate", "--from", str(a), "--to", str(tmp_path / "b.db")]) == 2
    err = capsys.readouterr().err
    assert "already holds data" in err and "--force" in err
