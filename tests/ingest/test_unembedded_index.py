"""Migration 0006: the embedding queue's idle scan (facts still without a vector) reads the partial
index ``facts_unembedded`` instead of scanning every fact. The query checked is the one the store
really runs, captured from SQLite's trace."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory

INDEX = "facts_unembedded"


def _capture_sql(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement any new SQLite connection runs (bound values expanded)."""
    statements: list[str] = []
    connect: Callable[..., sqlite3.Connection] = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    return statements


def _plan(path: Path, sql: str) -> str:
    con = sqlite3.connect(path)
    try:
        return " | ".join(row[3] for row in con.execute(f"EXPLAIN QUERY PLAN {sql}"))
    finally:
        con.close()


async def _facts_without_vectors(path: Path, n: int) -> list[str]:
    async with AsyncMemory(path, embedder=None, sessions="null") as m:  # no embedder: no vectors
        ids = [(await m.add(f"note number {i}", user_id="u"))[0].id for i in range(n)]
        await m.delete(ids[0], user_id="u")
    return ids


async def test_the_idle_scan_reads_the_partial_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.db"
    ids = await _facts_without_vectors(path, 40)
    statements = _capture_sql(monkeypatch)
    async with AsyncMemory(path, embedder="hash", sessions="null") as m:
        missing = await m.facts.missing_embeddings(limit=5)
    assert [fid for fid, _ in missing] == ids[1:6]  # oldest first, the deleted one left out
    scans = [s for s in statements if "embedding IS NULL" in s and "ORDER BY rowid" in s and " IN (" not in s]
    assert scans, statements
    for sql in scans:
        plan = _plan(path, sql)
        assert f"USING INDEX {INDEX}" in plan or f"USING COVERING INDEX {INDEX}" in plan, plan


async def test_the_index_holds_only_valid_facts_without_vectors(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    await _facts_without_vectors(path, 10)
    con = sqlite3.connect(path)
    count = f"SELECT COUNT(*) FROM facts INDEXED BY {INDEX} WHERE embedding IS NULL AND invalid_at IS NULL"
    try:
        assert con.execute(count).fetchone()[0] == 9
    finally:
        con.close()
    async with AsyncMemory(path, embedder="hash", sessions="null") as m:
        progress = await m.drain_embeddings()
        assert progress["idle"] and await m.facts.missing_embeddings(limit=100) == []
    con = sqlite3.connect(path)
    try:
        assert con.execute(count).fetchone()[0] == 0
    finally:
        con.close()


async def test_an_older_file_gets_the_index(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = await _facts_without_vectors(path, 5)
    con = sqlite3.connect(path)
    with con:  # the file as 0005 left it
        con.execute(f"DROP INDEX {INDEX}")
        con.execute("DELETE FROM _migrations WHERE name = '0006_unembedded_index'")
    con.close()
    async with AsyncMemory(path, embedder="hash", sessions="null") as m:
        assert [fid for fid, _ in await m.facts.missing_embeddings(limit=10)] == ids[1:]
        await m.drain_embeddings()
        assert (await m.search("note number 3", user_id="u")).hits[0].vector_rank is not None
    con = sqlite3.connect(path)
    try:
        sql = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (INDEX,)).fetchone()[0]
    finally:
        con.close()
    assert "WHERE embedding IS NULL AND invalid_at IS NULL" in sql
