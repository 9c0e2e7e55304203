"""``RetrievalConfig.window_bonus`` (issue 22): a memory embedded in windows (longer than the
encoder reads) has its cosine raised by the bonus before the floors and fusion, so a sentence
diluted in a long memory's window is not lost under the 0.3 floor; short memories are
untouched. SQLite (candidates without rows: read for the bonus) and PostgreSQL (candidates
with their rows)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_embed_windows import FILLER, LONG, POSITIONS, QUERY, note

from memlane import AsyncMemory
from memlane.retrieval.hybrid import RetrievalConfig


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "m.db")


async def test_long_memories_get_the_bonus_and_short_ones_do_not(location: str) -> None:
    # the hash embedder cut in windows of 200 characters: LONG (~1,300) is windowed
    m = await AsyncMemory(location, embedder="hash", retrieval=RetrievalConfig(embed_window_size=200)).open()
    try:
        [long] = await m.add(LONG, user_id="u")
        short = [f for s in ("alpha1 beta1 gamma1 here", "alpha2 beta2 and more") for f in await m.add(s, user_id="u")]
        query = "alpha1 beta1 gamma1 alpha2 beta2"

        async def scores(bonus: float) -> dict[str, float]:
            m.retrieval = RetrievalConfig(embed_window_size=200, window_bonus=bonus)
            hits = (await m.search(query, user_id="u", mode="vector", top_k=10, match_threshold=-1.0)).hits
            return {h.fact.id: h.vector_score for h in hits if h.vector_score is not None}

        off, on = await scores(0.0), await scores(0.25)
        assert set(off) == set(on) == {long.id, *(f.id for f in short)}
        assert on[long.id] == pytest.approx(off[long.id] + 0.25)
        assert all(on[f.id] == pytest.approx(off[f.id]) for f in short)
        # the bonus follows the window settings: with windows off no memory is long
        m.retrieval = RetrievalConfig(embed_windows=False, window_bonus=0.25)
        hits = (await m.search(query, user_id="u", mode="vector", top_k=10, match_threshold=-1.0)).hits
        assert {h.fact.id: h.vector_score for h in hits}[long.id] == pytest.approx(off[long.id])
    finally:
        await m.close()


async def test_rows_are_read_only_with_the_bonus_on(tmp_path: Path) -> None:
    m = await AsyncMemory(
        str(tmp_path / "m.db"), embedder="hash", retrieval=RetrievalConfig(embed_window_size=200)
    ).open()
    try:
        await m.add(LONG, user_id="u")
        await m.add("alpha1 beta1 gamma1 here", user_id="u")
        reads: list[int] = []
        get_facts = m.facts.get_facts

        async def counting(ids, *a, **kw):  # type: ignore[no-untyped-def]
            reads.append(len(ids))
            return await get_facts(ids, *a, **kw)

        m.facts.get_facts = counting  # type: ignore[method-assign]
        m.retrieval = RetrievalConfig(embed_window_size=200)
        await m.search("alpha1 beta1", user_id="u", mode="vector", top_k=1)
        assert all(n <= 1 for n in reads)  # off: at most the one hit's row
        reads.clear()
        m.retrieval = RetrievalConfig(embed_window_size=200, window_bonus=0.1)
        await m.search("alpha1 beta1", user_id="u", mode="vector", top_k=1)
        # on: both candidates' rows read once for their texts, and reused for the hit
        assert reads == [2]
    finally:
        await m.close()


@pytest.mark.needs_model
async def test_a_paraphrase_finds_long_notes_it_missed_under_the_floor(location: str) -> None:
    """The issue's example: the sentence's best window scores about 0.05-0.2 against the
    paraphrase, under the 0.3 floor; with the bonus the notes holding it at the start and at
    the end are hits, and notes without it (cosine about -0.1) still are not."""
    m = await AsyncMemory(location, embedder="local").open()
    try:
        needles = {pos: (await m.add(note(pos, seed=pos), user_id="u"))[0].id for pos in POSITIONS}
        plain = {(await m.add(note(None, seed=100 + j), user_id="u"))[0].id for j in range(5)}
        for s in FILLER:
            await m.add(s, user_id="u")
        found: dict[float, set[str]] = {}
        for bonus in (0.0, 0.2):
            m.retrieval = RetrievalConfig(window_bonus=bonus)
            for mode in ("vector", "hybrid"):
                hits = (await m.search(QUERY, user_id="u", mode=mode, top_k=20)).hits  # type: ignore[arg-type]
                found.setdefault(bonus, set()).update(h.fact.id for h in hits)
    finally:
        await m.close()
    assert not found[0.0] & set(needles.values())  # lost under the floor
    assert {needles[0], needles[POSITIONS[-1]]} <= found[0.2]
    assert not found[0.2] & plain  # no match, no hit
