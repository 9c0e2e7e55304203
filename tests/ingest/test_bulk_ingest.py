"""Bulk ingest: ``add_many`` stores exactly what one ``add`` per batch stores (rows, session
positions, neighbour context, history, counters), embeds across sessions in one call per
chunk, queues deferred vectors in big batches, and a process killed during a deferred bulk
ingest loses no vector and duplicates no row. Real SQLite files throughout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memlane import AddBatch, AsyncMemory, InvalidInputError, Memory
from memlane.cli.main import main as cli_main
from memlane.embedding_queue import DEFAULT_BATCH_SIZE
from memlane.providers.embed.base import Matrix
from memlane.providers.embed.hashing import HashEmbedder
from memlane.retrieval.context import neighbour_context
from memlane.stores.sql.store import SqlFactStore

T0 = datetime(2024, 5, 8, 13, 56, tzinfo=UTC)


class Recording:
    """The "hash" embedder, recording the size of every call."""

    def __init__(self, dim: int = 64) -> None:
        self.inner = HashEmbedder(dim)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.calls: list[int] = []

    async def embed_batch(self, texts: list[str]) -> Matrix:
        self.calls.append(len(texts))
        return await self.inner.embed_batch(texts)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _turns(user: str, session: int, n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "role": "Ann" if i % 2 == 0 else "Bob",
            "content": f"{user} session {session} turn {i}: talk about pottery, hiking and book {i * 7 % 13}",
            "timestamp": T0 + timedelta(days=session, minutes=i),
            "metadata": {"dia_id": f"D{session}:{i}"},
        }
        for i in range(start, start + n)
    ]


def _scenario() -> tuple[list[AddBatch], list[AddBatch]]:
    """(written first with add, then the bulk part): several users and sessions, a session
    continued by the bulk part (stored neighbours' context changes), identical turns inside a
    batch and across batches, a plain fact, a long text (a document and its fragments), a
    shared agent memory and a room memory."""
    first = [
        AddBatch(_turns("ann", 1, 6), user_id="ann", session_id="ann:s1"),
        AddBatch("Ann is vegetarian", user_id="ann"),
    ]
    bulk = [AddBatch(_turns(u, s, 5 + s), user_id=u, session_id=f"{u}:s{s}") for u in ("ann", "bob") for s in (2, 3)]
    bulk += [
        AddBatch(_turns("ann", 1, 4, start=6), user_id="ann", session_id="ann:s1"),  # continues a stored session
        AddBatch(_turns("ann", 2, 3), user_id="ann", session_id="ann:s2"),  # identical to stored turns: no new rows
        AddBatch(
            [{"role": "user", "content": "same words"}, {"role": "user", "content": "same words"}],
            user_id="cy",
            session_id="cy:s1",
        ),
        AddBatch("Ann is vegetarian", user_id="ann"),  # already stored
        AddBatch("word " * 2000, user_id="bob", metadata={"source": "notes"}),  # a document + fragments
        AddBatch("The office closes at 6 pm", agent_id="bot", scope="agent"),
        AddBatch([{"role": "user", "content": "room chatter"}], agent_id="bot", session_id="room-1", scope="room"),
        {"messages": "a dict works too", "user_id": "dee", "kind": "description"},
    ]
    return first, bulk


def _dump(path: Path) -> dict[str, Any]:
    """Everything add writes, with random ids and clock times replaced by row numbers."""
    c = sqlite3.connect(path)
    rowid = {fid: r for fid, r in c.execute("SELECT id, rowid FROM facts")}
    facts = []
    for row in c.execute(
        "SELECT rowid, partition, content, hash, scope, agent_id, user_id, session_id, kind, author, seq,"
        " occurred_at, access_count, version, source_event_ids, invalid_at, metadata, embedding FROM facts"
        " ORDER BY rowid"
    ):
        meta = json.loads(row[16])
        if "document_id" in meta:
            meta["document_id"] = rowid[meta["document_id"]]
        facts.append((*row[:16], meta, row[17]))
    out = {
        "facts": facts,
        "fts": c.execute("SELECT rowid, part, author, text, ctx, date FROM facts_fts ORDER BY rowid").fetchall(),
        # (not the vector caches' backfill counter: it counts the background queue's batches)
        "partitions": c.execute("SELECT partition, token, appends, changes FROM partitions ORDER BY 1").fetchall(),
        "authors": c.execute("SELECT * FROM authors ORDER BY 1, 2").fetchall(),
        "history": sorted(
            (rowid[r[0]], *r[1:])
            for r in c.execute("SELECT fact_id, user_id, event, old_content, new_content, actor FROM history")
        ),
    }
    c.close()
    return out


async def _write(path: Path | str, embedder: Any, bulk_call: bool, embed: str = "now") -> list[list[tuple[Any, ...]]]:
    first, bulk = _scenario()
    async with AsyncMemory(path, embedder=embedder, sessions="null") as m:
        for b in first:
            await m.add(b.messages, user_id=b.user_id, session_id=b.session_id)
        if bulk_call:
            stored = await m.add_many(bulk, embed=embed)  # type: ignore[arg-type]
        else:
            stored = []
            for b in bulk:
                b = b if isinstance(b, AddBatch) else AddBatch(**b)
                stored.append(
                    await m.add(
                        b.messages,
                        user_id=b.user_id,
                        agent_id=b.agent_id,
                        session_id=b.session_id,
                        metadata=b.metadata,
                        scope=b.scope,
                        kind=b.kind,
                        embed=embed,  # type: ignore[arg-type]
                    )
                )
        await m.drain_embeddings()
    return [[(f.content, f.seq, f.kind, f.author, f.session_id) for f in batch] for batch in stored]


@pytest.mark.parametrize("embedder", [None, "hash"])
async def test_add_many_stores_what_one_add_per_batch_stores(tmp_path: Path, embedder: str | None) -> None:
    one_by_one = await _write(tmp_path / "add.db", embedder, bulk_call=False)
    bulk = await _write(tmp_path / "bulk.db", embedder, bulk_call=True)
    assert bulk == one_by_one  # the same facts returned per batch, in input order
    a, b = _dump(tmp_path / "add.db"), _dump(tmp_path / "bulk.db")
    assert len(a["facts"]) == 49
    for table in a:
        assert a[table] == b[table], table
    if embedder is not None:
        assert all(row[-1] is not None for row in b["facts"])


async def test_the_fallback_for_stores_without_groups_stores_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store without ``put_fact_groups`` (a store of another author) gets one ``put_facts``
    per batch."""
    await _write(tmp_path / "add.db", "hash", bulk_call=False)
    monkeypatch.delattr(SqlFactStore, "put_fact_groups")  # SQLite and PostgreSQL inherit it
    await _write(tmp_path / "bulk.db", "hash", bulk_call=True)
    assert _dump(tmp_path / "add.db") == _dump(tmp_path / "bulk.db")


async def test_deferred_bulk_stores_the_same_and_every_row_gets_its_vector(tmp_path: Path) -> None:
    await _write(tmp_path / "add.db", "hash", bulk_call=False)
    await _write(tmp_path / "bulk.db", "hash", bulk_call=True, embed="low")
    assert _dump(tmp_path / "add.db") == _dump(tmp_path / "bulk.db")


async def test_add_many_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    """PostgreSQL's ``put_fact_groups`` (the core's, one transaction) stores the same facts."""
    expected = await _write(tmp_path / "add.db", "hash", bulk_call=False)
    assert await _write(pg_url, "hash", bulk_call=True) == expected


def test_neighbour_context_is_the_sessions_valid_neighbours(tmp_path: Path) -> None:
    """Independent of how rows were written: each turn's ``ctx`` is its session's valid
    neighbours' text, also for stored turns next to turns a later ``add_many`` appended."""
    with Memory(tmp_path / "m.db", embedder=None, sessions="null") as m:
        m.add(_turns("ann", 1, 5), user_id="ann", session_id="s1")
        m.add_many([AddBatch(_turns("ann", 1, 4, start=5), user_id="ann", session_id="s1")] * 2)
        victim = m.add_many([AddBatch(_turns("ann", 1, 3, start=9), user_id="ann", session_id="s1")])[0][1]
        m.delete(victim.id, user_id="ann")
    c = sqlite3.connect(tmp_path / "m.db")
    rows = c.execute(
        "SELECT f.seq, f.content, x.ctx FROM facts f JOIN facts_fts x ON x.rowid = f.rowid"
        " WHERE f.invalid_at IS NULL ORDER BY f.seq"
    ).fetchall()
    assert [r[0] for r in rows] == [s for s in range(12) if s != 10]
    by_seq = {seq: text for seq, text, _ in rows}
    for seq, _, ctx in rows:
        assert ctx == neighbour_context(by_seq, seq), seq  # ASCII: stored as is


async def test_embed_now_is_one_call_per_chunk_across_sessions(tmp_path: Path) -> None:
    emb = Recording()
    batches = [AddBatch(_turns("u", s, 10), user_id="u", session_id=f"s{s}") for s in range(50)]
    async with AsyncMemory(tmp_path / "m.db", embedder=emb, sessions="null") as m:
        stored = await m.add_many(batches)
        assert emb.calls == [500]  # one call for 50 sessions
        assert [len(b) for b in stored] == [10] * 50
        again = await m.add_many(batches)  # idempotent
        assert [[f.id for f in b] for b in again] == [[f.id for f in b] for b in stored]
        assert (await m.stats(user_id="u")).facts == 500


async def test_deferred_backlog_is_embedded_in_big_batches(tmp_path: Path) -> None:
    emb = Recording()
    batches = [AddBatch(_turns("u", s, 10), user_id="u", session_id=f"s{s}") for s in range(60)]
    async with AsyncMemory(tmp_path / "m.db", embedder=emb, sessions="null") as m:
        await m.add_many(batches, embed="low")
        hits = await m.search("pottery", user_id="u", top_k=3)  # keyword-searchable before vectors
        assert hits.hits
        done = await m.drain_embeddings()
        assert done["done"] == 600 and done["idle"]
    # the query's own embedding is one call of 1; the 600 stored rows go in one call, not 10 of 64
    assert sorted(emb.calls, reverse=True)[0] == 600 > DEFAULT_BATCH_SIZE


async def test_a_bad_batch_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    batches: list[Any] = [AddBatch(_turns("u", s, 3), user_id="u", session_id=f"s{s}") for s in range(3)]
    batches.insert(2, AddBatch([{"role": "user", "content": "  "}], user_id="u", session_id="s9"))
    async with AsyncMemory(tmp_path / "m.db", embedder=None, sessions="null") as m:
        with pytest.raises(InvalidInputError, match=r"^batch 2: "):
            await m.add_many(batches)
        with pytest.raises(InvalidInputError, match=r"batch 0: unknown key"):
            await m.add_many([{"messages": "x", "user": "u"}])
        with pytest.raises(InvalidInputError, match=r"batch 1 must be an AddBatch"):
            await m.add_many([AddBatch("fine", user_id="u"), "not a batch"])
        assert (await m.stats()).facts == 0


def _tiny_jsonl(path: Path, sessions: int, turns: int) -> None:
    with path.open("w") as fh:
        for s in range(sessions):
            for t in _turns("u", s, turns):
                row = {
                    "user_id": "u",
                    "session_id": f"s{s}",
                    "role": t["role"],
                    "content": t["content"],
                    "timestamp": t["timestamp"].isoformat(),
                }
                fh.write(json.dumps(row) + "\n")


@pytest.mark.parametrize("embed", ["now", "deferred"])
def test_cli_import_embeds_every_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str], embed: str) -> None:
    data = tmp_path / "turns.jsonl"
    _tiny_jsonl(data, sessions=30, turns=12)
    db = tmp_path / "cli.db"
    assert cli_main(["import", str(data), "--embed", embed, "--db", str(db), "--embedder", "hash", "-q"]) == 0
    out = capsys.readouterr().out
    assert "imported 360 turns (jsonl)" in out
    assert ("embedded 360 turns" in out) == (embed == "deferred")
    c = sqlite3.connect(db)
    assert c.execute("SELECT COUNT(*), COUNT(embedding), COUNT(DISTINCT hash) FROM facts").fetchone() == (360, 360, 360)


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from memlane import AddBatch, Memory
    from memlane.providers.embed.hashing import HashEmbedder

    class Slow(HashEmbedder):
        # the hash embedder taking 1 s per call: the queue is still busy when the process is killed
        async def embed_batch(self, texts):
            await asyncio.sleep(1.0)
            return await super().embed_batch(texts)

    db, sessions = sys.argv[1], int(sys.argv[2])
    with Memory(db, embedder=Slow(64), sessions="null") as m:
        for k in range(0, sessions, 10):
            m.add_many([AddBatch([{"role": "user", "content": f"session {s} turn {t} about kilns"}
                                  for t in range(30)], user_id="u", session_id=f"s{s}")
                        for s in range(k, k + 10)], embed="low")
            print(f"stored {k + 10}", flush=True)
        m.drain_embeddings()
        print("drained", flush=True)
    """
)


def _counts(db: Path) -> tuple[int, int, int]:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT COUNT(*), COUNT(embedding), COUNT(DISTINCT partition || hash) FROM facts").fetchone()
    finally:
        c.close()


def test_killed_during_deferred_bulk_ingest_loses_no_vector(tmp_path: Path) -> None:
    db, script = tmp_path / "crash.db", tmp_path / "child.py"
    script.write_text(CHILD)
    sessions = 60  # 1,800 turns in 6 add_many calls of 300
    child = subprocess.Popen(
        [sys.executable, str(script), str(db), str(sessions)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    try:
        seen = [child.stdout.readline().strip() for _ in range(2)]
        assert seen == ["stored 10", "stored 20"]
        os.kill(child.pid, signal.SIGKILL)  # mid-ingest: the third add_many is running, vectors are queued
    finally:
        child.kill()
        child.wait(30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    rows, with_vectors, distinct = _counts(db)
    assert 600 <= rows < 1800 and rows % 300 == 0  # whole add_many calls only (one transaction each)
    assert with_vectors < rows, "the kill should leave rows without vectors"
    assert distinct == rows
    # Reopened: the queue's worker finds the rows left without vectors and embeds them all.
    emb = HashEmbedder(64)
    with Memory(db, embedder=emb, sessions="null") as m:
        m.drain_embeddings()
    assert _counts(db) == (rows, rows, rows)
    # The import run again: the stored turns are found (not duplicated), the rest is added.
    with Memory(db, embedder=emb, sessions="null") as m:
        m.add_many(
            [
                AddBatch(
                    [{"role": "user", "content": f"session {s} turn {t} about kilns"} for t in range(30)],
                    user_id="u",
                    session_id=f"s{s}",
                )
                for s in range(sessions)
            ],
            embed="low",
        )
        m.drain_embeddings()
    assert _counts(db) == (1800, 1800, 1800)
    c = sqlite3.connect(db)
    texts, blobs = zip(*c.execute("SELECT content, embedding FROM facts ORDER BY rowid").fetchall(), strict=True)
    c.close()
    expected = asyncio.run(emb.embed_batch(list(texts)))
    got = np.stack([np.frombuffer(b, dtype=np.float32) for b in blobs])
    assert np.allclose(got, np.asarray(expected, dtype=np.float32), atol=1e-6)  # each row has its own text's vector
