"""Keyword top-k (stores/sqlite/keyword.py) against FTS5's exact bm25 ranking, on real SQLite files.

The store's ``KeywordIndex`` gets a tiny budget here, so a handful of rows already makes a
term "common" and the split path (``E``, then ``E AND C``) runs on test-sized data.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memlane.models import Fact, FactFilter, Scope
from memlane.stores.sqlite.facts import SqliteFactStore
from memlane.stores.sqlite.fts import fts_or_query
from memlane.stores.sqlite.keyword import KeywordIndex

WEIGHTS = (0.0, 0.0, 1.0, 0.5, 1.0)
COMMON = ["coffee", "morning", "walk", "friend"]  # in most rows
MID = ["garden", "piano", "river", "market", "letter", "bicycle"]  # in some rows
RARE = ["zeppelin", "quokka", "marzipan"]  # in a few rows


def _text(rng: random.Random) -> str:
    words = [w for w in COMMON if rng.random() < 0.6]
    words += [w for w in MID if rng.random() < 0.12]
    words += [w for w in RARE if rng.random() < 0.03]
    words += rng.sample(["the", "a", "today", "with", "and", "again", "nice"], 3)
    rng.shuffle(words)
    return " ".join(words) or "nothing"


def _facts(user: str, n: int, seed: int) -> list[Fact]:
    rng = random.Random(seed)
    return [
        Fact(
            content=_text(rng),
            user_id=user,
            session_id=f"{user}:s{i // 10}",
            kind="message" if i % 3 else "fact",
            author="alice" if i % 2 else "bob",
            seq=i % 10 if i % 3 else None,
            hash=f"{user}-{i}",
        )
        for i in range(n)
    ]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteFactStore]:
    s = await SqliteFactStore.open(tmp_path / "kw.db")
    await s.put_facts(_facts("u1", 400, 1), None)
    await s.put_facts(_facts("u2", 400, 2), None)
    s._keyword = KeywordIndex(weights=WEIGHTS, budget=25, split_min_rows=100)  # type: ignore[attr-defined]
    yield s
    await s.close()


def _ki(store: SqliteFactStore) -> KeywordIndex:
    ki = store._keyword  # type: ignore[attr-defined]
    assert isinstance(ki, KeywordIndex)
    return ki


def _parts(store: SqliteFactStore, user: str) -> list[str]:
    return store._partitions(store.database.connection(), Scope(user_id=user).partition_filter())


QUERIES = [
    ["coffee", "garden", "zeppelin"],
    ["morning", "walk", "piano", "quokka"],
    ["friend", "river", "market"],
    ["coffee", "morning", "letter", "marzipan", "bicycle"],
    ["walk", "bicycle"],
]


def _reference(store: SqliteFactStore, user: str, terms: list[str], limit: int, flt: FactFilter | None = None):
    """FTS5's exact ranking restricted to rows that match an essential term: what the split
    path must return exactly (rows matching only common terms are its one approximation)."""
    from memlane.stores.sqlite.facts import _filter_sql

    c = store.database.connection()
    ki = _ki(store)
    parts = _parts(store, user)
    fsql, fargs = _filter_sql(flt, "f")
    essential, common = ki.split(c, terms)
    full = ki.exact(c, parts, terms, limit=10**6, fsql=fsql, fargs=fargs)
    sql = "SELECT rowid FROM facts_fts WHERE facts_fts MATCH ?"
    match_e = {r[0] for r in c.execute(sql, (fts_or_query(essential),))}
    rowid = {fid: r for fid, r in c.execute("SELECT id, rowid FROM facts")}
    return [r for r in full if rowid[r[0]] in match_e][:limit], full, essential, common


async def test_split_path_returns_the_exact_top_k_of_rows_with_an_essential_term(store: SqliteFactStore) -> None:
    split_seen = 0
    for terms in QUERIES:
        want, full, _, common = _reference(store, "u1", terms, 10)
        split_seen += bool(common)
        got = await store.keyword_search(Scope(user_id="u1").partition_filter(), terms, limit=10)
        assert [c.fact_id for c in got] == [r[0] for r in want], terms
        exact = {r[0]: r[1] for r in full}
        for c in got:  # FTS5's own bm25 of the whole query, as the exact path reports it
            assert c.score == pytest.approx(exact[c.fact_id], abs=1e-9)
    assert split_seen >= 3  # the data exercises the E / E AND C path


async def test_top_k_equals_exact_when_the_best_rows_hold_a_rare_term(store: SqliteFactStore) -> None:
    # Rows with "zeppelin" (rare, high IDF) outrank every row with only common words.
    terms = ["coffee", "morning", "zeppelin"]
    _, full, essential, common = _reference(store, "u1", terms, 5)
    assert essential == ["zeppelin"] and set(common) == {"coffee", "morning"}
    got = await store.keyword_search(Scope(user_id="u1").partition_filter(), terms, limit=3)
    assert [(c.fact_id, round(c.score, 9)) for c in got] == [(r[0], round(r[1], 9)) for r in full[:3]]


async def test_random_queries_match_the_reference(store: SqliteFactStore) -> None:
    rng = random.Random(5)
    vocab = COMMON + MID + RARE
    for _ in range(40):
        terms = rng.sample(vocab, rng.randint(1, 5))
        limit = rng.choice([1, 3, 10, 20])
        want, _, _, _ = _reference(store, "u1", terms, limit)
        got = await store.keyword_search(Scope(user_id="u1").partition_filter(), terms, limit=limit)
        assert [c.fact_id for c in got] == [r[0] for r in want], (terms, limit)


async def test_filters_apply_on_the_split_path(store: SqliteFactStore) -> None:
    flt = FactFilter(kind="message", author="alice")
    terms = ["coffee", "garden", "piano", "walk"]
    want, _, _, common = _reference(store, "u1", terms, 10, flt)
    assert common
    got = await store.keyword_search(Scope(user_id="u1").partition_filter(), terms, limit=10, filter=flt)
    assert got and [c.fact_id for c in got] == [r[0] for r in want]
    facts = await store.get_facts([c.fact_id for c in got], Scope(user_id="u1"))
    assert len(facts) == len(got) and all(f.kind == "message" and f.author == "alice" for f in facts.values())
    assert all(c.author == "alice" for c in got)


async def test_no_cross_user_results(store: SqliteFactStore) -> None:
    mine = {f.hash for f in _facts("u1", 400, 1)}
    for terms in QUERIES:
        for user in ("u1", "u2"):
            got = await store.keyword_search(Scope(user_id=user).partition_filter(), terms, limit=50)
            assert got
            facts = await store.get_facts([c.fact_id for c in got], Scope(user_id=user))
            assert len(facts) == len(got)  # every id is visible in the searcher's own scope
            assert all((f.hash in mine) == (user == "u1") for f in facts.values())
    # a user with no memories finds nothing, though the words are in the file
    assert await store.keyword_search(Scope(user_id="u3").partition_filter(), ["coffee", "zeppelin"], limit=5) == []


async def test_single_partition_file_leaves_out_the_partition_phrase(tmp_path: Path) -> None:
    store = await SqliteFactStore.open(tmp_path / "one.db")
    try:
        await store.put_facts(_facts("u1", 300, 3), None)
        store._keyword = KeywordIndex(weights=WEIGHTS, budget=25, split_min_rows=100)  # type: ignore[attr-defined]
        c = store.database.connection()
        parts = _parts(store, "u1")
        assert KeywordIndex._whole_file(c, parts)
        for terms in QUERIES:
            want, _, _, _ = _reference(store, "u1", terms, 10)
            got = await store.keyword_search(Scope(user_id="u1").partition_filter(), terms, limit=10)
            assert [x.fact_id for x in got] == [r[0] for r in want]
        # a second user: the phrase is needed again, and each sees only their own rows
        await store.put_facts(_facts("u2", 50, 4), None)
        assert not KeywordIndex._whole_file(c, parts)
        got = await store.keyword_search(Scope(user_id="u2").partition_filter(), ["coffee", "garden"], limit=100)
        assert got and len(await store.get_facts([x.fact_id for x in got], Scope(user_id="u2"))) == len(got)
    finally:
        await store.close()


async def test_single_term_all_common_and_no_match(store: SqliteFactStore) -> None:
    pf = Scope(user_id="u1").partition_filter()
    c = store.database.connection()
    ki = _ki(store)
    # single term: one FTS5 query, the exact ranking
    got = await store.keyword_search(pf, ["garden"], limit=7)
    want = ki.exact(c, _parts(store, "u1"), ["garden"], limit=7)
    assert [(x.fact_id, round(x.score, 9)) for x in got] == [(r[0], round(r[1], 9)) for r in want]
    # all terms common: the rarest one is essential, the others rescore its rows
    essential, common = ki.split(c, ["coffee", "morning", "walk"])
    assert len(essential) == 1 and len(common) == 2
    want2, _, _, _ = _reference(store, "u1", ["coffee", "morning", "walk"], 10)
    got2 = await store.keyword_search(pf, ["coffee", "morning", "walk"], limit=10)
    assert [x.fact_id for x in got2] == [r[0] for r in want2] and len(got2) == 10
    # no match: unknown words alone, and mixed with known ones
    assert await store.keyword_search(pf, ["xylophonist", "qwertyuiop"], limit=5) == []
    mixed = await store.keyword_search(pf, ["xylophonist", "zeppelin"], limit=5)
    assert [x.fact_id for x in mixed] == [r[0] for r in ki.exact(c, _parts(store, "u1"), ["zeppelin"], limit=5)]


async def test_document_frequency_cache_follows_growth(store: SqliteFactStore) -> None:
    c = store.database.connection()
    ki = _ki(store)
    rows = ki.table_rows(c)
    assert rows == 800
    before = ki.doc_freq(c, "zeppelin", rows)
    await store.put_facts([Fact(content=f"zeppelin ride {i}", user_id="u1", hash=f"z{i}") for i in range(30)], None)
    rows2 = ki.table_rows(c)
    assert rows2 == 830
    assert ki.doc_freq(c, "zeppelin", rows2) == before + 30  # moved by more than the tolerance: recounted
