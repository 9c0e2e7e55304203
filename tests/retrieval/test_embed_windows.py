"""Every character of a long memory on the vector side (issue 22): texts longer than the
encoder reads are embedded in windows, the windows' vectors are stored with the fact (SQLite
and PostgreSQL, through the SQL core), replaced on update, erased by forget, backfilled, copied
by ``memlane migrate``, counted by ``check()``, and vector search scores a memory by its best
window, returning it once."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memlane import AsyncMemory
from memlane.errors import EmbedderError
from memlane.providers.embed.base import Matrix
from memlane.providers.embed.hashing import HashEmbedder
from memlane.providers.embed.windows import Windowing, char_spans, extra_windows, window_limit
from memlane.retrieval.hybrid import RetrievalConfig
from memlane.stores.sql.stmt import EXEC, Program, Stmt, one

#: The issue's example: the query shares no word with the sentence it should find.
QUERY = "which nut is my kid allergic to"
NEEDLE = "My daughter was diagnosed with a severe peanut allergy last spring."
FILLER = [
    "The quarterly budget review covered travel costs and the new office lease.",
    "Marketing asked for two more weeks to finish the campaign slides.",
    "We agreed to move the standup to ten thirty on Tuesdays and Thursdays.",
    "The server migration is scheduled for the first weekend of next month.",
    "Legal reviewed the vendor contract and flagged the indemnity clause.",
    "Hiring for the data engineering role is still open after three interviews.",
    "The design team presented mockups for the onboarding flow.",
    "Customer support volume dropped eight percent after the help center update.",
]
#: Where the sentence is put in a 3,950-character note: start, ~1,000, ~2,000, ~3,000, end.
POSITIONS = [0, 1000, 2000, 3000, 3950]


def note(pos: int | None, seed: int, total: int = 3950) -> str:
    """A meeting note of ``total`` characters, with :data:`NEEDLE` starting at the sentence
    boundary before ``pos`` (at the very end for ``pos >= total``), or without it (None)."""
    rnd = random.Random(seed)
    parts: list[str] = []
    while sum(len(s) + 1 for s in parts) < total:
        parts.append(rnd.choice(FILLER))
    text = " ".join(parts)[: total - len(NEEDLE) - 1]
    text = text[: text.rfind(". ") + 1]
    if pos is None:
        return text
    cut = 0 if pos == 0 else len(text) + 1 if pos >= len(text) else text.rfind(". ", 0, pos) + 2
    return (text[:cut] + NEEDLE + " " + text[cut:]).strip()


async def _count(m: AsyncMemory, sql: str, args: tuple[Any, ...] = ()) -> int:
    """One count through the store's own SQL runner (either backend)."""

    def program() -> Program[int]:
        row = yield from one(sql, args)
        assert row is not None
        return int(row[0])

    return await m.facts._query(program())  # type: ignore[attr-defined]


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "m.db")


# ---------------------------------------------------------------------------- windows of a text
def test_char_spans_cover_the_text_in_overlapping_windows() -> None:
    text = " ".join(f"word{i}" for i in range(400))
    spans = char_spans(text, 200, 50)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(b - a <= 200 for a, b in spans)
    assert all(spans[i + 1][0] < spans[i][1] for i in range(len(spans) - 1))  # they overlap
    covered = np.zeros(len(text), dtype=bool)
    for a, b in spans:
        covered[a:b] = True
    assert covered.all()
    assert char_spans("short", 200, 50) == [(0, 5)]


def test_short_texts_and_embedders_without_a_limit_get_no_windows() -> None:
    hashing = HashEmbedder(32)
    assert window_limit(hashing, Windowing()) is None  # reads everything
    assert extra_windows(hashing, ["x " * 3000], Windowing()) == [[]]
    sized = Windowing(size=100)
    assert window_limit(hashing, sized) == ("chars", 100)
    assert extra_windows(hashing, ["a short turn"], sized) == [[]]
    assert len(extra_windows(hashing, ["word " * 100], sized)[0]) >= 4
    assert window_limit(hashing, Windowing(enabled=False, size=100)) is None


@pytest.mark.needs_model
def test_minilm_windows_are_at_most_what_it_reads() -> None:
    from memlane.providers.embed.local import LocalEmbedder

    e = LocalEmbedder()
    assert e.max_input_tokens == e.max_seq_length - 2
    text = note(2000, seed=1)
    [spans] = e.window_spans([text], e.max_input_tokens, e.max_input_tokens // 4)
    assert len(spans) > 1 and spans[0][0] == 0 and spans[-1][1] == len(text)
    for a, b in spans:
        assert len(e.tokenize([text[a:b]])[0]) <= e.max_seq_length  # [CLS] + window + [SEP], untruncated
        assert len(e._tokenizer.encode(text[a:b], add_special_tokens=False).ids) <= e.max_input_tokens
    assert all(spans[i + 1][0] < spans[i][1] for i in range(len(spans) - 1))
    assert e.window_spans(["a short turn"], 254, 63) == [[(0, 12)]]


# ---------------------------------------------------------------------------- search (MiniLM)
async def _needle_ranks(m: AsyncMemory, user: str, windows: bool, *, document: bool) -> dict[int, int | None]:
    m.retrieval = RetrievalConfig(embed_windows=windows)
    if True:
        ids: dict[int, str] = {}
        for pos in POSITIONS:
            text = note(pos, seed=pos)
            if document:
                doc = await m.add_document(text, title=f"minutes {pos}", user_id=user)
                ids[pos] = doc.id  # its fragment (one: ~1,000 tokens) is what search finds
            else:
                ids[pos] = (await m.add(text, user_id=user))[0].id
        for j in range(5):  # long notes without the sentence
            plain = note(None, seed=100 + j)
            if document:
                await m.add_document(plain, title=f"plain {j}", user_id=user)
            else:
                await m.add(plain, user_id=user)
        for s in FILLER:  # short turns
            await m.add(s, user_id=user)
        # vector mode; every cosine kept (a sentence diluted in a 254-token window scores under
        # the default 0.3 floor, as it does at the start of a note today: docs/retrieval.md)
        found = await m.search(QUERY, user_id=user, mode="vector", top_k=20, match_threshold=-1.0)
        # a fragment stands for its document (metadata.document_id)
        order = [h.fact.metadata.get("document_id", h.fact.id) if document else h.fact.id for h in found.hits]
        assert len(order) == len(set(order))  # each memory once, by its best window
        return {pos: order.index(fid) if fid in order else None for pos, fid in ids.items()}


@pytest.mark.needs_model
@pytest.mark.parametrize("document", [False, True], ids=["message", "fragment"])
async def test_a_sentence_anywhere_in_a_long_memory_is_found_by_a_paraphrase(location: str, document: bool) -> None:
    m = await AsyncMemory(location, embedder="local").open()
    try:
        ranks = await _needle_ranks(m, "on", True, document=document)
        # without windows the vector holds the first ~1,000 characters only: later sentences are lost
        ranks_off = await _needle_ranks(m, "off", False, document=document)
    finally:
        await m.close()
    # the five notes holding the sentence are the five best, wherever it is in them
    assert all(r is not None and r < len(POSITIONS) for r in ranks.values()), ranks
    assert any(r is None or r >= len(POSITIONS) for p, r in ranks_off.items() if p >= 2000), ranks_off


# ---------------------------------------------------------------------------- storage (hash embedder)
LONG = " ".join(f"alpha{i} beta{i} gamma{i}" for i in range(60))  # ~1,300 characters


@pytest.fixture
def windowed() -> Callable[..., AsyncMemory]:
    def make(location: str, size: int | None = 200, **kw: Any) -> AsyncMemory:
        cfg = RetrievalConfig(embed_window_size=size, **kw)
        return AsyncMemory(location, embedder=kw.pop("embedder", "hash"), retrieval=cfg)

    return make


async def test_windows_are_stored_replaced_and_erased_with_their_fact(
    location: str, windowed: Callable[..., AsyncMemory]
) -> None:
    m = await windowed(location).open()
    try:
        [short] = await m.add("a short chat turn", user_id="u")
        [long] = await m.add(LONG, user_id="u")
        await m.add(LONG.replace("alpha", "delta"), user_id="other")
        spans = char_spans(LONG, 200, 50)
        rows = "SELECT count(*) FROM fact_windows WHERE fact_id = ?"
        assert await _count(m, rows, (short.id,)) == 0  # short memories keep one vector
        assert await _count(m, rows, (long.id,)) == len(spans) - 1  # window 0 is facts.embedding
        # the memory is found once, by a word only its last window holds
        hits = (await m.search("alpha59 beta59 gamma59", user_id="u", mode="vector")).hits
        assert [h.fact.id for h in hits].count(long.id) == 1 and hits[0].fact.id == long.id
        assert (await m.check()).ok
        # update: the old text's windows go, the new text's come
        await m.update(long.id, "now a short text", user_id="u")
        assert await _count(m, rows, (long.id,)) == 0
        await m.update(long.id, LONG.replace("alpha", "omega"), user_id="u")
        assert await _count(m, rows, (long.id,)) == len(char_spans(LONG.replace("alpha", "omega"), 200, 50)) - 1
        # forget: none of the user's window vectors stays
        await m.forget(user_id="u")
        assert await _count(m, rows, (long.id,)) == 0
        assert await _count(m, "SELECT count(*) FROM fact_windows") > 0  # the other user's stay
        assert (await m.check()).ok
    finally:
        await m.close()


async def test_check_counts_window_vectors_of_no_fact(location: str, windowed: Callable[..., AsyncMemory]) -> None:
    m = await windowed(location).open()
    try:
        await m.add(LONG, user_id="u")

        def orphan() -> Program[None]:
            yield Stmt("UPDATE fact_windows SET fact_id = 'gone' WHERE win = 1", (), EXEC)

        await m.facts._transact(orphan())  # type: ignore[attr-defined]
        report = await m.check()
        assert not report.ok and any("fact_windows belong to no fact" in p for p in report.problems)
    finally:
        await m.close()


async def test_window_settings_change_what_is_stored(location: str, windowed: Callable[..., AsyncMemory]) -> None:
    m = await windowed(location, size=100).open()
    try:
        [a] = await m.add(LONG, user_id="u")
        m.retrieval = RetrievalConfig(embed_window_size=400)
        [b] = await m.add(LONG + " more", user_id="u")
        m.retrieval = RetrievalConfig(embed_windows=False, embed_window_size=100)
        [c] = await m.add(LONG + " again", user_id="u")
        rows = "SELECT count(*) FROM fact_windows WHERE fact_id = ?"
        counts = [await _count(m, rows, (f.id,)) for f in (a, b, c)]
        assert tuple(counts) == (
            len(char_spans(LONG, 100, 25)) - 1,
            len(char_spans(LONG + " more", 400, 100)) - 1,
            0,
        )
    finally:
        await m.close()


class _Flaky(HashEmbedder):
    """The hash embedder, failing while ``down``."""

    down = True

    async def embed_batch(self, texts: list[str]) -> Matrix:
        if self.down:
            raise EmbedderError("down", retryable=True)
        return await super().embed_batch(texts)


async def test_backfill_and_the_queue_write_the_windows(location: str) -> None:
    flaky = _Flaky(64)
    m = await AsyncMemory(location, embedder=flaky, retrieval=RetrievalConfig(embed_window_size=200)).open()
    try:
        [first] = await m.add(LONG, user_id="u")  # stored keyword-only: never lost
        rows = "SELECT count(*) FROM fact_windows WHERE fact_id = ?"
        assert await _count(m, rows, (first.id,)) == 0
        flaky.down = False
        assert await m.backfill_embeddings() >= 1
        assert await _count(m, rows, (first.id,)) == len(char_spans(LONG, 200, 50)) - 1
        [queued] = await m.add(LONG.replace("alpha", "zeta"), user_id="u", embed="low")
        await m.drain_embeddings()
        assert await _count(m, rows, (queued.id,)) == len(char_spans(LONG.replace("alpha", "zeta"), 200, 50)) - 1
        hits = (await m.search("zeta59 beta59 gamma59", user_id="u", mode="vector")).hits
        assert hits and hits[0].fact.id == queued.id
    finally:
        await m.close()


async def test_migrate_copies_the_windows(tmp_path: Path, pg_url: str, windowed: Callable[..., AsyncMemory]) -> None:
    from memlane.stores.transfer import migrate

    src = str(tmp_path / "src.db")
    m = await windowed(src).open()
    try:
        [long] = await m.add(LONG, user_id="u")
    finally:
        await m.close()
    await migrate(src, pg_url)
    back = str(tmp_path / "back.db")
    await migrate(pg_url, back)
    want = len(char_spans(LONG, 200, 50)) - 1
    for where in (pg_url, back):
        t = await windowed(where).open()
        try:
            assert await _count(t, "SELECT count(*) FROM fact_windows WHERE fact_id = ?", (long.id,)) == want
            hits = (await t.search("alpha59 beta59 gamma59", user_id="u", mode="vector")).hits
            assert hits and hits[0].fact.id == long.id
            assert (await t.check()).ok
        finally:
            await t.close()
