"""Migrations bring older database files forward without losing or exposing memory."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memlane import AsyncMemory
from memlane.stores.sqlite.fts import partition_token


def _old_key(scope: str, agent: str | None, user: str | None) -> str:
    """The pre-0003 partition key: ids joined by a bare \\x1f."""
    return f"a\x1f{agent}" if scope == "agent" else f"u\x1f{agent or ''}\x1f{user}"


def _downgrade_to_0002(path: Path) -> None:
    con = sqlite3.connect(path)
    with con:
        for rowid, scope, agent, user in con.execute("SELECT rowid, scope, agent_id, user_id FROM facts").fetchall():
            old = _old_key(scope, agent, user)
            con.execute("UPDATE facts SET partition=? WHERE rowid=?", (old, rowid))
            con.execute("UPDATE facts_fts SET part=? WHERE rowid=?", (partition_token(old), rowid))
        con.execute("DELETE FROM partitions")
        con.execute("INSERT INTO partitions (partition, token) SELECT DISTINCT partition, '' FROM facts")
        authors = con.execute(
            "SELECT f.partition, a.author FROM authors a JOIN facts f ON f.author = a.author"
        ).fetchall()
        con.execute("DELETE FROM authors")
        con.executemany("INSERT OR IGNORE INTO authors VALUES (?, ?)", authors)
        con.execute("DELETE FROM _migrations WHERE name = '0003_partition_keys'")
    con.close()


async def test_0003_rekeys_partitions_of_an_old_file(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with AsyncMemory(path, embedder="hash:64", sessions="null") as m:
        await m.add([{"role": "user", "name": "Sam", "content": "Sam plays the oboe"}], user_id="sam", session_id="s")
        await m.add("Sam's oboe teacher is Ida", user_id="sam", agent_id="coach")
        await m.add("The coach's oboe room is B2", agent_id="coach", scope="agent")
    _downgrade_to_0002(path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT COUNT(*) FROM facts WHERE partition LIKE 'u' || char(31) || '%'").fetchone()[0] == 2
    con.close()
    async with AsyncMemory(path, embedder="hash:64", sessions="null") as m:
        mine = {h.fact.content for h in (await m.search("oboe", user_id="sam")).hits}
        assert mine == {"Sam plays the oboe", "Sam's oboe teacher is Ida"}
        coach = {h.fact.content for h in (await m.search("oboe", user_id="sam", agent_id="coach")).hits}
        assert coach == {"Sam's oboe teacher is Ida", "The coach's oboe room is B2"}
        assert (await m.search("oboe", user_id="ida")).hits == []
        res = await m.search("what does Sam play", user_id="sam", debug=True)
        assert res.hits[0].fact.content == "Sam plays the oboe"
    con = sqlite3.connect(path)
    keys = {r[0] for r in con.execute("SELECT partition FROM partitions")}
    assert keys == {"u|sam|", "u|sam|coach", "a|coach"}
    assert con.execute("SELECT COUNT(*) FROM facts WHERE instr(partition, char(31))").fetchone()[0] == 0


async def test_sessions_by_id_in_every_app_read_an_index(tmp_path: Path) -> None:
    """``sessions_with_id`` (the service's room check for a user-bound key) finds the sessions
    of one id across apps through the ``sessions_id`` index (0009), not a scan of the table."""
    path = tmp_path / "m.db"
    async with AsyncMemory(path, embedder="hash", sessions="sqlite") as m:
        for app in ("hotel", "other"):
            await m.sessions.create_session(session_id="S", user_ids=["bob"], app=app)
        await m.sessions.create_session(session_id="T", user_ids=["bob"], app="hotel")
        assert [s.app for s in await m.sessions.sessions_with_id("S")] == ["hotel", "other"]
    con = sqlite3.connect(path)
    try:
        plan = con.execute("EXPLAIN QUERY PLAN SELECT * FROM sessions WHERE id = ? ORDER BY app", ("S",)).fetchall()
    finally:
        con.close()
    details = " ".join(str(row[-1]) for row in plan)
    assert "INDEX sessions_id" in details and "SCAN sessions" not in details, details


SHARED_TABLES = [
    "sessions",
    "facts",
    "authors",
    "history",
    "reflections",
    "contributors",
    "jobs",
    "formation_cursors",
    "context_cache",
    "consolidated_versions",
]


@pytest.mark.parametrize("name", SHARED_TABLES)
def test_both_backends_create_the_shared_tables_from_one_definition(name: str, tmp_path: Path) -> None:
    """SQLite and PostgreSQL build these tables from memlane.stores.sql.schema (the same text
    but for the column types), each statement exactly once; a new SQLite file keeps that text."""
    from memlane.stores.postgres import migrations as pg_migrations
    from memlane.stores.sql import schema
    from memlane.stores.sqlite import migrations as sqlite_migrations
    from memlane.stores.sqlite.db import Database

    extra = (pg_migrations._KEYWORD_COLUMNS,) if name == "facts" else ()
    for migrations, stmts in (
        (sqlite_migrations, getattr(schema, name)(schema.SQLITE_TYPES)),
        (pg_migrations, getattr(schema, name)(schema.PG_TYPES, *extra)),
    ):
        steps = [s for _, ss in migrations.MIGRATIONS for s in ss if isinstance(s, str)]
        for stmt in stmts:
            assert steps.count(stmt) == 1, stmt
    db = Database(tmp_path / "fresh.db").open_sync()
    try:
        stored = {r[0] for r in db.connection().execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")}
    finally:
        db.close_sync()
    for stmt in getattr(schema, name)(schema.SQLITE_TYPES):
        # (a later ALTER TABLE ... ADD COLUMN rewrites the facts and history tables' stored text)
        assert stmt in stored or stmt.startswith(("CREATE TABLE facts", "CREATE TABLE history")), stmt


async def _a_blob_at_version_two(location: str) -> None:
    from memlane.models import Reflection

    async with AsyncMemory(location, embedder="hash:64", sessions="sqlite") as m:
        for text in ("Sam keeps bees.", "Sam moved to Porto."):
            await m.reflection_store.put_reflection(Reflection(content=text, scope="user", user_id="sam"))
            await m.consolidate("user", user_id="sam")


async def _history_after_upgrade(location: str) -> list[tuple[int, str]]:
    async with AsyncMemory(location, embedder="hash:64", sessions="sqlite") as m:
        blob = await m.consolidated("user", user_id="sam")
        assert blob is not None and blob.version == 2
        found = [(v.version, v.content) for v in await m.consolidated_history("user", user_id="sam")]
        assert found == [(2, blob.consolidated_content)]
        assert "Porto" in found[0][1]
        return found


async def test_consolidated_versions_of_an_old_sqlite_file_start_at_the_current_blob(tmp_path: Path) -> None:
    """A file from before 0013 (no versions table) gets it on open, each stored blob's current
    version as its first row; consolidations then add theirs."""
    path = tmp_path / "old.db"
    await _a_blob_at_version_two(str(path))
    con = sqlite3.connect(path)
    with con:
        con.execute("DROP TABLE consolidated_versions")
        con.execute("DELETE FROM _migrations WHERE name = '0013_consolidated_versions'")
    con.close()
    await _history_after_upgrade(str(path))
    con = sqlite3.connect(path)
    names = [r[0] for r in con.execute("SELECT name FROM _migrations")]
    con.close()
    assert "0013_consolidated_versions" in names


async def test_consolidated_versions_of_an_old_postgresql_schema_start_at_the_current_blob(pg_url: str) -> None:
    """The same on PostgreSQL (0010)."""
    from memlane.stores.postgres.db import PgDatabase

    await _a_blob_at_version_two(pg_url)
    db = await PgDatabase.open(pg_url)
    try:
        async with db.connection() as conn:
            await conn.execute("DROP TABLE consolidated_versions")
            await conn.execute("DELETE FROM schema_migrations WHERE name = '0010_consolidated_versions'")
    finally:
        db.acquire()
        await db.release()
    await _history_after_upgrade(pg_url)
