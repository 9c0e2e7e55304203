"""Bad input gets a typed error with a clear message and changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memlane import (
    AsyncMemory,
    ConfigError,
    CorruptDatabaseError,
    DimensionMismatchError,
    InvalidInputError,
    MemlaneError,
    Memory,
    ScopeError,
)
from memlane.documents import MAX_DOCUMENT_CHARS
from memlane.providers.embed.hashing import HashEmbedder
from memlane.testing import FlakyEmbedder


async def _count(mem: AsyncMemory, user: str = "u") -> int:
    return (await mem.list(user_id=user, include_invalid=True)).total


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ("", "empty"),
        ("   \n\t ", "empty"),
        ("x" * (MAX_DOCUMENT_CHARS + 1), "limit"),  # longer than a document may be
        (b"\xff\xfe not utf8", "UTF-8"),
        ("lone \ud800 surrogate", "UTF-8"),
        ([], "non-empty"),
        ([{"role": "user"}], "content"),
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": ""}], "empty"),
        ([{"role": "user", "content": "ok", "timestamp": "yesterday-ish"}], "timestamp"),
        ([{"role": "user", "content": "ok", "metadata": "not a dict"}], "metadata"),
        (["plain string in a list"], "dict or Event"),
        ([42], "dict or Event"),
        ([{"role": "user", "content": 42}], "text"),
    ],
)
async def test_bad_add_payloads_change_nothing(mem: AsyncMemory, payload: object, match: str) -> None:
    await mem.add("existing fact", user_id="u")
    with pytest.raises(InvalidInputError, match=match):
        await mem.add(payload, user_id="u", session_id="s")  # type: ignore[arg-type]
    assert await _count(mem) == 1


@pytest.mark.parametrize("user", [None, "", "  ", 5])
async def test_missing_or_blank_user_id(mem: AsyncMemory, user: object) -> None:
    with pytest.raises(ScopeError):
        await mem.add("x", user_id=user)  # type: ignore[arg-type]
    with pytest.raises(ScopeError):
        await mem.search("x", user_id=user)  # type: ignore[arg-type]


async def test_bad_search_arguments(mem: AsyncMemory) -> None:
    with pytest.raises(InvalidInputError):
        await mem.search("", user_id="u")
    with pytest.raises(InvalidInputError):
        await mem.search("x", user_id="u", top_k=0)
    with pytest.raises(InvalidInputError):
        await mem.search([], user_id="u")


async def test_errors_share_one_root(mem: AsyncMemory) -> None:
    with pytest.raises(MemlaneError):
        await mem.add("", user_id="u")


async def test_unknown_embedder_is_a_config_error(db_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown embedder"):
        AsyncMemory(db_path, embedder="word2vec")


async def test_embedder_of_other_dimension_is_refused(db_path: Path) -> None:
    async with AsyncMemory(db_path, embedder="hash:64", sessions="null") as m:
        await m.add("a fact", user_id="u")
    with pytest.raises(DimensionMismatchError, match="64-dimensional"):
        async with AsyncMemory(db_path, embedder="hash:128", sessions="null"):
            pass
    # still intact and usable with the right embedder
    async with AsyncMemory(db_path, embedder="hash:64", sessions="null") as m:
        assert (await m.list(user_id="u")).total == 1


async def test_wrong_dimension_vector_from_embedder(db_path: Path) -> None:
    class Liar(HashEmbedder):
        async def embed_batch(self, texts: list[str]):  # type: ignore[no-untyped-def]
            return (await super().embed_batch(texts))[:, :10]

    async with AsyncMemory(db_path, embedder=Liar(64), sessions="null") as m:
        with pytest.raises(DimensionMismatchError):
            await m.add("text", user_id="u")
        assert (await m.list(user_id="u")).total == 0


def test_garbage_file_is_a_corrupt_database_error(tmp_path: Path) -> None:
    p = tmp_path / "garbage.db"
    p.write_bytes(b"this is not sqlite at all" * 100)
    before = p.read_bytes()
    with pytest.raises(CorruptDatabaseError, match="not a memlane database"):
        Memory(p, embedder=None)  # the sync facade opens in its constructor
    assert p.read_bytes() == before


def test_foreign_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    p = tmp_path / "other.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'x')")
    con.commit()
    con.close()
    before = p.read_bytes()
    with pytest.raises(CorruptDatabaseError, match="another application"):
        Memory(p, embedder=None)
    assert p.read_bytes() == before


async def test_embedder_outage_loses_nothing_and_backfills(db_path: Path) -> None:
    emb = FlakyEmbedder()
    async with AsyncMemory(db_path, embedder=emb, sessions="null") as m:
        emb.failing = True
        [f] = await m.add("the vault code is 9931", user_id="u")  # stored keyword-only
        res = await m.search("vault code", user_id="u", debug=True)  # query embedding fails too
        assert res.hits[0].fact.id == f.id and res.debug is not None and res.debug["vectors_used"] is False
        emb.failing = False
        await m.add("another note", user_id="u")  # triggers the backfill
        assert await m.facts.missing_embeddings() == []
        res = await m.search("vault code", user_id="u", debug=True)
        assert res.hits[0].fact.id == f.id and res.hits[0].vector_rank is not None
