"""Pseudo-relevance feedback on the keyword side (issue 22, RM3: retrieval/feedback.py and
``Searcher.keyword``): the pure term choice and interpolation, then the engine on SQLite and
PostgreSQL, keyword-only so the vector side cannot move anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane import AsyncMemory
from memlane.models import Candidate
from memlane.retrieval.feedback import expansion_terms, mix
from memlane.retrieval.hybrid import FEEDBACK_DOCS, RetrievalConfig

#: Keyword feedback on, as ``memory.keyword_feedback`` turns it on (it is off by default).
ON = RetrievalConfig(feedback_docs=FEEDBACK_DOCS)

# ----------------------------------------------------------------------------- pure


def test_expansion_terms_leave_out_query_terms_function_words_and_short_words() -> None:
    docs = [("My exercise routine at the gym: kickboxing and skipping rope, ok", 5.0)]
    assert expansion_terms(["exercise", "gym"], docs, terms=10) == ["routine", "kickboxing", "skipping", "rope"]


def test_expansion_terms_follow_the_best_hit_and_stop_at_terms() -> None:
    docs = [("kickboxing kickboxing rope", 9.0), ("piano piano piano lessons", 2.0)]
    # softmax of the scores: the best hit's terms outweigh a hit 7 points lower
    assert expansion_terms([], docs, terms=2) == ["kickboxing", "rope"]
    assert expansion_terms([], docs, terms=1) == ["kickboxing"]
    assert expansion_terms([], docs, terms=0) == []
    assert expansion_terms([], [], terms=5) == []
    # equal scores: the term counts decide
    even = [("kickboxing rope", 1.0), ("piano piano piano piano", 1.0)]
    assert expansion_terms([], even, terms=1) == ["piano"]


def test_expansion_terms_keep_cjk_terms() -> None:
    # one-character CJK terms are words there, not noise (the short-word rule is for ASCII)
    assert "花生" in expansion_terms([], [("我对花生过敏", 1.0)], terms=10)


def test_mix_rescores_first_list_only_in_its_units() -> None:
    first = [Candidate("a", 10.0), Candidate("b", 6.0), Candidate("c", 5.0)]
    second = [Candidate("c", 4.0), Candidate("z", 3.0)]  # z: only the expansion terms match it
    out = mix(first, second, weight=0.5)
    assert [c.fact_id for c in out] == ["c", "a", "b"]  # c: 0.5 * 5 + 0.5 * 4 * 10 / 4 = 7.5
    assert {c.fact_id: c.score for c in out} == {"a": 5.0, "b": 3.0, "c": 7.5}
    assert mix(first, second, weight=0.0) == first  # no weight: the first ranking, same scores
    assert mix(first, [], weight=0.5) == first
    assert mix([], second, weight=0.5) == []


def test_feedback_settings_are_checked() -> None:
    assert not RetrievalConfig().feedback  # off by default (issue 22: it lowered recall@1)
    assert ON.feedback
    assert not ON.model_copy(update={"feedback_terms": 0}).feedback
    assert not ON.model_copy(update={"feedback_weight": 0.0}).feedback
    for bad in ({"feedback_docs": -1}, {"feedback_terms": -1}, {"feedback_weight": 1.5}):
        with pytest.raises(ValueError):
            RetrievalConfig(**bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- engine

ROUTINE = "My exercise routine at the gym: kickboxing and skipping rope"
TONIGHT = "Some exercise tonight: kickboxing, then skipping rope"  # shares the routine's other words
MEMORIES = [
    ROUTINE,
    "The gym near the station closed",
    TONIGHT,
    "An exercise book for school",
    "That was an exercise in patience",
    "Breathing exercise before bed",
    *(
        f"Filler note number {i} about {w}"
        for i, w in enumerate(["tea", "garden", "piano", "river", "market", "letter"])
    ),
]
QUERY = "what is my exercise routine at the gym"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "m.db")


async def _ranking(store: str, configs: list[RetrievalConfig]) -> list[list[tuple[str, float]]]:
    out = []
    async with AsyncMemory(store, embedder=None, sessions="null") as m:
        for text in MEMORIES:
            await m.add(text, user_id="u")
        for cfg in configs:
            m.retrieval = cfg.model_copy(update={"vector_weight": 0.0})
            res = await m.search(QUERY, user_id="u", top_k=20)
            out.append([(h.fact.content, h.keyword_score or 0.0) for h in res.hits])
    return out


async def test_feedback_ranks_up_a_hit_sharing_the_best_hits_words(store: str) -> None:
    # three terms: the routine's own (kickboxing, skipping, rope); with ten, the weaker hits'
    # words (patience, book, bed) come in too and lift those hits as well
    off, on = await _ranking(store, [RetrievalConfig(), ON.model_copy(update={"feedback_terms": 3})])
    rank_off = [t for t, _ in off].index(TONIGHT)
    rank_on = [t for t, _ in on].index(TONIGHT)
    assert rank_on < rank_off, (off, on)
    # the same memories (each matches the query itself: no match, no hit), only reordered
    assert sorted(t for t, _ in on) == sorted(t for t, _ in off)
    assert on[0][0] == off[0][0] == ROUTINE


async def test_each_feedback_setting_at_zero_turns_it_off(store: str) -> None:
    off, *zeros = await _ranking(
        store,
        [
            RetrievalConfig(),
            ON.model_copy(update={"feedback_docs": 0}),
            ON.model_copy(update={"feedback_terms": 0}),
            ON.model_copy(update={"feedback_weight": 0.0}),
        ],
    )
    for ranking in zeros:
        assert ranking == off


async def test_each_feedback_setting_changes_the_scores(store: str) -> None:
    default, *others = await _ranking(
        store,
        [
            ON,
            ON.model_copy(update={"feedback_docs": 1}),
            ON.model_copy(update={"feedback_terms": 1}),
            ON.model_copy(update={"feedback_weight": 0.5}),
        ],
    )
    for ranking in others:
        assert dict(ranking) != dict(default)
