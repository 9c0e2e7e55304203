"""Pure retrieval logic: query parsing, RRF, score fusion, the vector index."""

from __future__ import annotations

import numpy as np
import pytest

from memlane.models import Candidate
from memlane.retrieval.fusion import rrf
from memlane.retrieval.hybrid import RetrievalConfig, fuse
from memlane.retrieval.text import STOPWORDS, date_words, parse_query, query_terms
from memlane.stores.sqlite.fts import fts_or_query
from memlane.stores.sqlite.vector import VectorIndex


def test_stopwords_removed_from_queries_only_when_something_is_left() -> None:
    assert 170 <= len(STOPWORDS) <= 190
    assert query_terms("When did Caroline go to the LGBTQ support group?") == [
        "caroline",
        "go",
        "lgbtq",
        "support",
        "group",
    ]
    assert query_terms("who am I") == ["who", "am", "i"]


def test_fts_query_quotes_everything() -> None:
    assert fts_or_query(['a"b', "near", "OR"]) == '"a""b" OR "near" OR "OR"'


def test_named_author_is_boosted_unless_all_are_named() -> None:
    q = parse_query("What did Melanie paint?", ["Melanie", "Caroline"])
    assert q.boost_authors == ("Melanie",)
    assert parse_query("Did Melanie meet Caroline?", ["Melanie", "Caroline"]).boost_authors == ()
    assert parse_query("what happened", ["Melanie"]).boost_authors == ()


def test_date_words() -> None:
    from datetime import datetime

    assert date_words(datetime(2023, 5, 8)) == "8 May 2023 Monday"
    assert date_words(None) == ""


def test_rrf_formula_weights_and_depth() -> None:
    out = rrf({"a": [("x", 9), ("y", 8)], "b": [("y", 0.9), ("z", 0.5)]}, weights={"b": 0.5}, k=60)
    scores = {f.key: f.score for f in out}
    assert scores["y"] == pytest.approx(1 / 62 + 0.5 / 61)
    assert scores["x"] == pytest.approx(1 / 61)
    assert [f.key for f in out] == ["y", "x", "z"]
    assert {f.key for f in rrf({"a": [("x", 1), ("y", 1)]}, depth=1)} == {"x"}


def test_thresholds_filter() -> None:
    kw = [Candidate("a", 3.0), Candidate("b", 1.0)]
    vec = [Candidate("c", 0.9), Candidate("d", 0.2)]
    cfg = RetrievalConfig(min_keyword_score=1.5, min_vector_score=0.5)
    assert {f.key for f in fuse([kw], [vec], cfg, top_k=10)} == {"a", "c"}
    eden = RetrievalConfig.strict()
    assert eden.min_rrf_score == 0.015 and eden.min_vector_score == 0.65


def test_score_fusion_prefers_agreement() -> None:
    kw = [Candidate("a", 10.0), Candidate("b", 9.0)]
    vec = [Candidate("b", 0.9), Candidate("c", 0.8), Candidate("a", 0.1)]
    out = fuse([kw], [vec], RetrievalConfig(fusion="score", vector_weight=0.5, min_vector_score=None), top_k=3)
    assert [f.key for f in out] == ["b", "a", "c"]
    assert out[0].score == pytest.approx(0.9 + 0.5 * 0.9)


@pytest.mark.parametrize("exact_max", [10_000, 0])
def test_vector_index_finds_nearest(exact_max: int) -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(size=(3000, 64)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    idx = VectorIndex(64, exact_max=exact_max, rescore=300)
    idx.append([str(i) for i in range(2000)], [None] * 2000, m[:2000])
    idx.append([str(i) for i in range(2000, 3000)], ["s"] * 1000, m[2000:])
    assert len(idx) == 3000
    hits = 0
    for i in rng.choice(3000, 50, replace=False):
        q = m[i] + 0.05 * rng.normal(size=64).astype(np.float32)
        rows, scores = idx.search(q / np.linalg.norm(q), 5)
        assert list(scores) == sorted(scores, reverse=True)
        hits += int(rows[0] == i)
    assert hits >= 48  # approximate path must still find the near-duplicate
    rows, _ = idx.search(m[10], 5, session_id="s")
    assert len(rows) == 5 and all(r >= 2000 for r in rows)


def test_retrieval_is_pure_no_store_imports() -> None:
    """retrieval/ is pure logic: it imports nothing from stores/ (SQLite pieces live there)."""
    import ast
    from pathlib import Path

    import memlane.retrieval

    root = Path(memlane.retrieval.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("memlane.stores"), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("memlane.stores") for a in node.names), path.name
