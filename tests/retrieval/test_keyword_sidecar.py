"""The postings index of large partitions (stores/sqlite/keyword_sidecar.py) against FTS5's
exact bm25 ranking, on real SQLite files.

The store gets ``keyword_index_min=100`` so test-sized partitions are "large". Every answer is
compared with ``KeywordIndex.exact`` (FTS5's ``bm25()`` over every match): the same scores to
1e-9 and the same rows above the ``limit``-th score (rows tied with it may differ).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memlane.errors import ConfigError
from memlane.models import Candidate, Fact, FactFilter, Scope
from memlane.stores.sqlite.facts import SqliteFactStore
from memlane.stores.sqlite.keyword import KeywordIndex
from memlane.stores.sqlite.keyword_sidecar import (
    DEFAULT_MIN_ROWS,
    KeywordSidecars,
    Postings,
    index_min_rows,
    tokenize_rows,
)

COMMON = ["coffee", "morning", "walking", "friend"]
MID = ["garden", "piano", "river", "market", "letters", "bicycle"]
RARE = ["zeppelin", "quokka", "marzipan"]
FILLER = ["the", "a", "today", "with", "and", "again", "nice", "walks", "walked", "gardens"]
#: query terms: porter stems several of them to one token ("walking", "walks" -> "walk")
VOCAB = COMMON + MID + RARE + ["walks", "gardening", "rivers", "missing"]


def _text(rng: random.Random) -> str:
    words = [w for w in COMMON if rng.random() < 0.5]
    words += [w for w in MID if rng.random() < 0.15]
    words += [w for w in RARE if rng.random() < 0.03]
    words += rng.sample(FILLER, rng.randint(1, 5))
    rng.shuffle(words)
    return " ".join(words)


def _facts(user: str, n: int, seed: int, start: int = 0) -> list[Fact]:
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
        for i in range(start, start + n)
    ]


async def _open(path: Path, **kw: object) -> SqliteFactStore:
    return await SqliteFactStore.open(path, keyword_index_min=100, **kw)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteFactStore]:
    s = await _open(tmp_path / "kw.db")
    await s.put_facts(_facts("u1", 300, 1), None)
    await s.put_facts(_facts("u2", 200, 2), None)
    await s.put_facts(_facts("u3", 30, 3), None)  # under keyword_index_min
    yield s
    await s.close()


def _pf(user: str):  # type: ignore[no-untyped-def]
    return Scope(user_id=user).partition_filter()


def _exact(store: SqliteFactStore, user: str, terms: list[str]) -> list[tuple[str, float, str | None]]:
    c = store.database.connection()
    ki: KeywordIndex = store._keyword  # type: ignore[attr-defined]
    parts = store._partitions(c, _pf(user))
    return ki.exact(c, parts, terms, limit=10**6)


def _ids(store: SqliteFactStore, user: str) -> set[str]:
    c = store.database.connection()
    (part,) = store._partitions(c, _pf(user))
    return {r[0] for r in c.execute("SELECT id FROM facts WHERE partition=?", (part,))}


def _same_top(got: list[Candidate], full: list[tuple[str, float, str | None]], limit: int) -> None:
    """``got`` is FTS5's top ``limit`` up to ties: same scores, same rows above the cut."""
    want = full[:limit]
    assert [round(c.score, 9) for c in got] == [round(r[1], 9) for r in want]
    if want:
        cut = want[-1][1]
        assert {c.fact_id for c in got if c.score > cut + 1e-9} == {r[0] for r in want if r[1] > cut + 1e-9}
    exact = {r[0]: r[1] for r in full}
    for c in got:
        assert c.score == pytest.approx(exact[c.fact_id], abs=1e-9)


async def _ready(store: SqliteFactStore, user: str) -> None:
    """Search once (queues the build), wait for the builder."""
    await store.keyword_search(_pf(user), ["coffee"], limit=1)
    assert store.keyword_sidecars.wait_idle(30)


async def test_indexed_search_equals_fts5_on_random_queries(store: SqliteFactStore) -> None:
    sc = store.keyword_sidecars
    await _ready(store, "u1")
    await _ready(store, "u2")
    assert sc.builds == 2
    rng = random.Random(7)
    served = sc.served
    for _ in range(60):
        user = rng.choice(["u1", "u2"])
        terms = rng.sample(VOCAB, rng.randint(1, 5))
        limit = rng.choice([1, 3, 10, 20, 50])
        got = await store.keyword_search(_pf(user), terms, limit=limit)
        _same_top(got, _exact(store, user, terms), limit)
        assert {c.fact_id for c in got} <= _ids(store, user)  # never another user's row
    assert sc.served == served + 60  # every one of them through the index


async def test_single_partition_file_uses_the_index_document_frequencies(tmp_path: Path) -> None:
    s = await _open(tmp_path / "one.db")
    try:
        await s.put_facts(_facts("solo", 400, 11), None)
        await _ready(s, "solo")
        rng = random.Random(3)
        for _ in range(30):
            terms = rng.sample(VOCAB, rng.randint(1, 4))
            got = await s.keyword_search(_pf("solo"), terms, limit=10)
            _same_top(got, _exact(s, "solo", terms), 10)
        assert s.keyword_sidecars.served == 30
    finally:
        await s.close()


async def test_small_partitions_keep_the_fts5_path(store: SqliteFactStore) -> None:
    got = await store.keyword_search(_pf("u3"), ["coffee", "garden"], limit=5)
    assert store.keyword_sidecars.builds == 0 and store.keyword_sidecars.served == 0
    _same_top(got, _exact(store, "u3", ["coffee", "garden"]), 5)


async def test_appended_rows_are_searched_as_a_delta(store: SqliteFactStore) -> None:
    sc = store.keyword_sidecars
    await _ready(store, "u1")
    # a new turn in an existing session (its neighbours' ctx changes) and a new session
    new = _facts("u1", 12, 99, start=300)  # 300-309 join session s29, 310-311 start s30
    new[0] = new[0].model_copy(update={"content": "zeppelin quokka brandnewword"})
    await store.put_facts(new, None)
    for terms in (["brandnewword"], ["zeppelin", "coffee"], ["walking", "garden", "quokka"]):
        got = await store.keyword_search(_pf("u1"), terms, limit=10)
        _same_top(got, _exact(store, "u1", terms), 10)
    assert sc.builds == 1 and sc.delta_builds == 1  # no rebuild: one delta, reused
    got = await store.keyword_search(_pf("u1"), ["brandnewword"], limit=3)
    assert [c.fact_id for c in got] == [new[0].id]


async def test_a_large_delta_is_rebuilt_not_tokenized_on_the_search_path(store: SqliteFactStore) -> None:
    sc = store.keyword_sidecars
    await _ready(store, "u1")
    sc.rebuild_fraction = 0.01  # 3 rows of u1's 300
    served = sc.served
    await store.put_facts(_facts("u1", 12, 98, start=400), None)
    got = await store.keyword_search(_pf("u1"), ["coffee", "garden"], limit=10)
    _same_top(got, _exact(store, "u1", ["coffee", "garden"]), 10)
    assert sc.served == served and sc.delta_builds == 0  # FTS5 answered; no delta tokenized
    assert sc.wait_idle(30)
    assert sc.builds == 2  # rebuilt in the background
    got = await store.keyword_search(_pf("u1"), ["coffee", "garden"], limit=10)
    _same_top(got, _exact(store, "u1", ["coffee", "garden"]), 10)
    assert sc.served == served + 1


async def test_updates_deletes_and_forget_never_return_old_text(store: SqliteFactStore) -> None:
    sc = store.keyword_sidecars
    await _ready(store, "u1")
    facts = (await store.list_facts(Scope(user_id="u1"), limit=500)).items
    target = next(f for f in facts if "coffee" in f.content)
    await store.update_fact(target.id, Scope(user_id="u1"), "oolong instead", None)
    got = await store.keyword_search(_pf("u1"), ["coffee"], limit=500)
    assert target.id not in {c.fact_id for c in got}
    _same_top(got, _exact(store, "u1", ["coffee"]), 500)
    assert store.keyword_sidecars.wait_idle(30)
    got = await store.keyword_search(_pf("u1"), ["oolong"], limit=5)
    assert got[0].fact_id == target.id  # (its neighbours hold it in their context)
    _same_top(got, _exact(store, "u1", ["oolong"]), 5)
    assert sc.builds == 2  # the edit made the index unprovable: rebuilt, not patched

    gone = next(f for f in facts if "morning" in f.content and f.id != target.id)
    await store.invalidate_fact(gone.id, Scope(user_id="u1"))
    got = await store.keyword_search(_pf("u1"), ["morning"], limit=500)
    assert gone.id not in {c.fact_id for c in got}
    _same_top(got, _exact(store, "u1", ["morning"]), 500)

    await _ready(store, "u2")
    files = store.keyword_sidecars.files
    assert files is not None and files.path("u|u1|").exists()
    await store.purge_user("u1")
    assert not files.path("u|u1|").exists()  # forget leaves none of u1's words on disk
    assert store.keyword_sidecars.get(store._partitions(store.database.connection(), _pf("u2"))[0]) is not None
    assert await store.keyword_search(_pf("u1"), ["coffee", "morning"], limit=10) == []


async def test_filters_and_phrases_take_the_fts5_path(store: SqliteFactStore) -> None:
    sc = store.keyword_sidecars
    await _ready(store, "u1")
    served = sc.served
    flt = FactFilter(kind="message")
    got = await store.keyword_search(_pf("u1"), ["coffee", "garden"], limit=10, filter=flt)
    assert got and all(
        f.kind == "message" for f in (await store.get_facts([c.fact_id for c in got], Scope(user_id="u1"))).values()
    )
    await store.keyword_search(_pf("u1"), ["coffee_garden"], limit=10)  # FTS5 reads a phrase
    assert sc.served == served


async def test_the_setting_turns_the_index_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = await SqliteFactStore.open(tmp_path / "off.db", keyword_index_min=0)
    try:
        await s.put_facts(_facts("u1", 150, 1), None)
        got = await s.keyword_search(_pf("u1"), ["coffee", "zeppelin"], limit=10)
        s.keyword_sidecars.wait_idle(30)
        assert s.keyword_sidecars.builds == 0 and s.keyword_sidecars.served == 0
        _same_top(got, _exact(s, "u1", ["coffee", "zeppelin"]), 10)
    finally:
        await s.close()
    monkeypatch.setenv("MEMLANE_KEYWORD_INDEX_MIN", "off")
    assert index_min_rows() == 0
    monkeypatch.setenv("MEMLANE_KEYWORD_INDEX_MIN", "5000")
    assert index_min_rows() == 5000
    s = await SqliteFactStore.open(tmp_path / "env.db")
    assert s.keyword_index_min == 5000
    await s.close()
    monkeypatch.setenv("MEMLANE_KEYWORD_INDEX_MIN", "many")
    with pytest.raises(ConfigError):
        index_min_rows()
    monkeypatch.delenv("MEMLANE_KEYWORD_INDEX_MIN")
    assert index_min_rows() == DEFAULT_MIN_ROWS


def test_tokenize_rows_counts_columns_and_lengths() -> None:
    p: Postings = tokenize_rows([(5, "Walking walks", "walked dog", "8 May"), (9, "dog", None, "")])
    walk = p.terms["walk"]
    lo, hi = int(p.offsets[walk]), int(p.offsets[walk + 1])
    assert p.docs[lo:hi].tolist() == [0] and p.tf[lo:hi].tolist() == [[2, 1, 0]]
    dog = p.terms["dog"]
    assert p.docs[p.offsets[dog] : p.offsets[dog + 1]].tolist() == [0, 1]
    assert p.doclen.tolist() == [7.0, 2.0]  # the partition token counts, as in FTS5
    assert p.rowids.tolist() == [5, 9]


def test_query_tokens_are_fts5_tokens() -> None:
    sc = KeywordSidecars(100, background=False, connect=lambda: None)  # type: ignore[arg-type,return-value]
    assert sc.tokens("Running") == ("run",)
    assert sc.tokens("coffee_garden") == ("coffe", "garden")
    assert sc.tokens("Café") == ("cafe",)


async def test_the_sidecar_file_is_reused_and_a_stale_or_damaged_one_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "side.db"
    s = await _open(path)
    await s.put_facts(_facts("u1", 200, 1), None)
    await _ready(s, "u1")
    assert s.keyword_sidecars.builds == 1
    files = s.keyword_sidecars.files
    assert files is not None
    file = files.path("u|u1|")
    assert file.exists()
    await s.close()

    async def reopen() -> SqliteFactStore:
        s = await _open(path)
        await _ready(s, "u1")
        for terms in (["coffee", "zeppelin"], ["walking", "garden"], ["piano"]):
            got = await s.keyword_search(_pf("u1"), terms, limit=10)
            _same_top(got, _exact(s, "u1", terms), 10)
        assert s.keyword_sidecars.served == 3
        return s

    s = await reopen()  # a new process: the file is loaded, not rebuilt
    assert (s.keyword_sidecars.loads, s.keyword_sidecars.builds) == (1, 0)
    await s.close()

    s = await SqliteFactStore.open(path, keyword_index_min=0)  # an edit the file never saw
    fact = (await s.list_facts(Scope(user_id="u1"), limit=1)).items[0]
    await s.update_fact(fact.id, Scope(user_id="u1"), "zeppelin piano", None)
    await s.close()
    s = await reopen()
    assert (s.keyword_sidecars.loads, s.keyword_sidecars.builds) == (0, 1)
    await s.close()

    file.write_bytes(file.read_bytes()[:1000])  # damaged
    s = await reopen()
    assert (s.keyword_sidecars.loads, s.keyword_sidecars.builds) == (0, 1)
    assert file.stat().st_size > 1000  # written again
    await s.close()


def _dense_bm25(p: Postings, toks: list[str], dfs: list[int], n: int, avgdl: float, w: tuple[float, float, float]):  # type: ignore[no-untyped-def]
    import math

    import numpy as np

    scores = np.zeros(p.rows)
    hit = np.zeros(p.rows, dtype=bool)
    for tok, df in zip(toks, dfs, strict=True):
        s = p.terms.get(tok)
        if s is None:
            continue
        lo, hi = int(p.offsets[s]), int(p.offsets[s + 1])
        docs = p.docs[lo:hi]
        f = p.tf[lo:hi] @ np.asarray(w)
        idf = max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6) if n - df + 0.5 > df + 0.5 else 1e-6
        scores[docs] += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * p.doclen[docs] / avgdl))
        hit[docs] = True
    return scores, hit


@pytest.mark.parametrize("drift", [1.0, 1.3, 0.7])
def test_impact_search_equals_a_dense_scoring(drift: float) -> None:
    """The two-round impact search returns the brute-force top k (every row scored), also
    when the average row length moved since the impact order was taken."""
    from memlane.stores.sqlite.keyword_sidecar import bm25_top, order_by_impact

    rng = random.Random(13)
    vocab = [f"w{i}" for i in range(300)]
    weights_z = [1.0 / (i + 1) ** 1.1 for i in range(300)]
    rows = [
        (
            i + 1,
            " ".join(rng.choices(vocab, weights_z, k=rng.randint(3, 25))),
            " ".join(rng.choices(vocab, weights_z, k=rng.randint(0, 30))),
            "",
        )
        for i in range(3000)
    ]
    p = tokenize_rows(rows)
    avgdl0 = float(p.doclen.mean())
    w = (1.0, 0.5, 1.0)
    order_by_impact(p, w, avgdl0)
    avgdl = avgdl0 * drift
    for _ in range(80):
        toks = rng.sample(vocab[:120], rng.randint(1, 5))
        dfs = [p.df(t) for t in toks]
        limit = rng.choice([1, 5, 10, 20, 50])
        got = bm25_top(p, toks, dfs, total_rows=p.rows, avgdl=avgdl, weights=w, limit=limit)
        scores, hit = _dense_bm25(p, toks, dfs, p.rows, avgdl, w)
        ranked = sorted((-scores[i], i) for i in range(p.rows) if hit[i])[:limit]
        want = [-s for s, _ in ranked]
        assert [round(s, 9) for _, s in got] == [round(s, 9) for s in want], (toks, limit)
        cut = want[-1] if want else 0.0
        top = {int(p.rowids[i]) for s, i in ranked if -s > cut + 1e-9}
        assert top <= {r for r, _ in got}


async def test_close_does_not_wait_for_a_build_nor_save_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from memlane.stores.sqlite import keyword_sidecar as ks

    s = await _open(tmp_path / "close.db")
    await s.put_facts(_facts("u1", 150, 1), None)
    entered, release = threading.Event(), threading.Event()
    real = ks.postings_of

    def slow(*args: object, **kw: object) -> Postings:
        entered.set()
        release.wait(30)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ks, "postings_of", slow)
    await s.keyword_search(_pf("u1"), ["coffee"], limit=3)  # queues the build
    sc = s.keyword_sidecars
    assert entered.wait(30)
    thread = sc._thread
    await s.close()  # returns while the build is still running
    assert thread is not None and thread.is_alive()
    release.set()
    thread.join(30)
    assert sc.files is not None and not sc.files.path("u|u1|").exists()  # a closed store saves nothing
