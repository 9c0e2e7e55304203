"""``memlane bench longmemeval``: the LongMemEval format, the official session-level metrics,
and the CLI, on a small file in the real format (keyword-only so the ranking is known)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memlane.cli.main import main
from memlane.evaluation.longmemeval import dcg, load, parse_date, rank_sessions, scores, session_ranking
from memlane.memory import AsyncMemory

FILLER = [
    ("I cooked pasta with garlic tonight", "Sounds delicious, enjoy it."),
    ("The weather was sunny at the beach", "Great day for a swim."),
    ("I repainted the kitchen walls blue", "Blue kitchens feel calm."),
    ("My cousin visited from Lisbon", "Lovely, family visits are nice."),
    ("I read a novel about pirates", "Adventure stories are fun."),
    ("We adopted a routine of morning jogs", "Healthy habit!"),
]


def _session(user: str, assistant: str = "Noted.", answer: bool = False) -> list[dict[str, Any]]:
    turn: dict[str, Any] = {"role": "user", "content": user}
    if answer:
        turn["has_answer"] = True
    return [turn, {"role": "assistant", "content": assistant}]


def _question(qid: str, qtype: str, question: str, sessions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    for i, (u, a) in enumerate(FILLER):
        sessions[f"{qid}_filler_{i}"] = _session(u, a)
    ids = list(sessions)
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": question,
        "answer": "-",
        "question_date": "2023/06/30 (Fri) 10:00",
        "haystack_session_ids": ids,
        "haystack_dates": [f"2023/05/{i + 1:02d} (Mon) 0{i % 10}:1{i % 6}" for i in range(len(ids))],
        "haystack_sessions": [sessions[i] for i in ids],
        "answer_session_ids": [i for i in ids if i.startswith("answer_")],
    }


def write_data(path: Path) -> None:
    """Five questions; expected keyword-only session rankings in the comments."""
    q1 = _question(
        "q1",
        "single-session-user",
        "Which breed is Biscuit?",
        {
            "answer_q1": _session("Biscuit is a beagle, that breed is so friendly", answer=True),
        },
    )  # ranked: [answer_q1] -> everything 1
    q2 = _question(
        "q2",
        "multi-session",
        "Violin lessons count?",
        {
            "answer_q2_a": _session("My first violin session went well", answer=True),
            "answer_q2_b": _session("My teacher said I improved a lot", answer=True),
            "noise_q2": _session("Violin lessons are pricey: violin lessons weekly"),
        },
    )  # ranked: [noise_q2, answer_q2_a]; answer_q2_b never matches -> any 1, all 0, ndcg 1/2
    q3 = _question(
        "q3",
        "temporal-reasoning",
        "tomato seeds",
        {
            "noise_q3_a": _session("tomato seeds are cheap at the market"),
            "answer_q3": _session("The tomato went into the garden bed", answer=True),
            "noise_q3_b": _session("heirloom tomato seeds from my aunt"),
        },
    )  # ranked: [noise, noise, answer_q3] -> any/all 1, ndcg 1/log2(3)
    q4 = _question(
        "q4",
        "knowledge-update",
        "guitar strings",
        {
            **{f"noise_q4_{i}": _session(f"guitar strings number {i} arrived") for i in range(5)},
            "answer_q4": _session("I switched to a different guitar", answer=True),
        },
    )  # ranked: 5 noise, then answer_q4 at 6 -> @5: 0 0 0; @10: 1 1 1/log2(6)
    q5 = _question(
        "q5_abs",
        "single-session-user",
        "Which breed is Biscuit?",
        {
            "answer_q5": _session("Biscuit is a beagle", answer=True),
        },
    )  # abstention: skipped, as the official scripts do
    path.write_text(json.dumps([q1, q2, q3, q4, q5]))


# hand-computed: (recall_any, recall_all, ndcg) at 5 and 10 per question
EXPECTED = {
    "single-session-user": {5: (1, 1, 1.0), 10: (1, 1, 1.0)},
    "multi-session": {5: (1, 0, 0.5), 10: (1, 0, 0.5)},
    "temporal-reasoning": {5: (1, 1, 1 / math.log2(3)), 10: (1, 1, 1 / math.log2(3))},
    "knowledge-update": {5: (0, 0, 0.0), 10: (1, 1, 1 / math.log2(6))},
}


def _check(row: dict[str, Any], want: dict[int, tuple[float, float, float]]) -> None:
    for k, (any_, all_, ndcg) in want.items():
        assert row[f"recall_any@{k}"] == pytest.approx(any_, abs=1e-4)
        assert row[f"recall_all@{k}"] == pytest.approx(all_, abs=1e-4)
        assert row[f"ndcg@{k}"] == pytest.approx(ndcg, abs=1e-4)


def test_metrics_match_the_official_definitions() -> None:
    # official dcg: rel_1 + sum_{i>=2} rel_i / log2(i): ranks 1 and 2 both weigh 1
    assert dcg([1, 1, 1], 3) == pytest.approx(2 + 1 / math.log2(3))
    assert dcg([], 5) == 0.0
    assert session_ranking(["b", "a", "b", None, "c", "a"]) == ["b", "a", "c"]
    s = scores(["x", "a", "y", "b"], ["a", "b"], 3)
    assert s == {"recall_any@3": 1.0, "recall_all@3": 0.0, "ndcg@3": pytest.approx(1 / 2)}
    s = scores(["x", "a", "y", "b"], ["a", "b"], 4)
    assert s["recall_all@4"] == 1.0 and s["ndcg@4"] == pytest.approx((1 + 1 / 2) / 2)
    assert scores([], ["a"], 5) == {"recall_any@5": 0.0, "recall_all@5": 0.0, "ndcg@5": 0.0}


def test_load_reads_the_format(tmp_path: Path) -> None:
    f = tmp_path / "lme.json"
    write_data(f)
    qs = load(f)
    assert [q.question_id for q in qs] == ["q1", "q2", "q3", "q4", "q5_abs"]
    q2 = qs[1]
    assert q2.answers == ["answer_q2_a", "answer_q2_b"] and not q2.abstention and qs[4].abstention
    assert q2.sessions[0].when == datetime(2023, 5, 1, 0, 10)
    assert q2.question_date == datetime(2023, 6, 30, 10, 0)
    assert q2.turns == 2 * 9
    assert load(f, roles="user")[1].turns == 9
    assert [q.question_id for q in load(f, limit=2)] == ["q1", "q2"]
    assert parse_date("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21)
    assert parse_date("yesterday") is None


async def test_rankings_are_the_designed_ones(tmp_path: Path) -> None:
    """The CLI figures below rest on these rankings (keyword only, so they are exact)."""
    f = tmp_path / "lme.json"
    write_data(f)
    from memlane.evaluation.longmemeval import ingest

    got = {}
    async with AsyncMemory(str(tmp_path / "r.db"), embedder=None, sessions="null") as m:
        for q in load(f)[:4]:
            await ingest(m, q, q.question_id)
            got[q.question_id] = await rank_sessions(m, q.question, q.question_id)
    assert got["q1"] == ["answer_q1"]
    assert got["q2"] == ["noise_q2", "answer_q2_a"]
    assert got["q3"][2] == "answer_q3" and set(got["q3"][:2]) == {"noise_q3_a", "noise_q3_b"}
    assert got["q4"][5] == "answer_q4" and set(got["q4"][:5]) == {f"noise_q4_{i}" for i in range(5)}


def test_cli_scores_every_type_and_overall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "lme.json"
    write_data(f)
    code = main(["bench", "longmemeval", "--data", str(f), "--embedder", "none", "-q", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["questions"] == 5 and out["turns"] == 4 * 2 * 6 + 2 * (1 + 3 + 3 + 6)
    (rep,) = out["results"]
    assert rep["mode"] == "keyword" and rep["questions"] == 4 and rep["skipped"] == 1
    assert set(rep["by_type"]) == set(EXPECTED)
    for qtype, want in EXPECTED.items():
        assert rep["by_type"][qtype]["questions"] == 1
        _check(rep["by_type"][qtype], want)
    overall = {k: tuple(sum(w[k][i] for w in EXPECTED.values()) / 4 for i in range(3)) for k in (5, 10)}
    _check(rep, overall)
    assert rep["recall_all@10"] == 0.75 and rep["ndcg@5"] == pytest.approx(0.5327, abs=1e-4)
    assert rep["search_p50_ms"] > 0


def test_cli_text_table_limit_and_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "lme.json"
    write_data(f)
    code = main(["bench", "longmemeval", "--data", str(f), "--embedder", "none", "-q", "--limit", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "2 questions" in out and "turns/s" in out and "== keyword" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["overall"][1:] == ["2", "1.000", "1.000", "0.500", "0.500", "0.750", "0.750"]
    code = main(["bench", "longmemeval", "--data", str(f), "--embedder", "hash", "-q", "--json", "--limit", "1"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["mode"] for r in rep["results"]] == ["hybrid", "keyword", "vector"]
    code = main(["bench", "longmemeval", "--data", str(f), "--embedder", "none", "-q", "--mode", "vector"])
    assert code == 2 and "needs an embedder" in capsys.readouterr().err


def test_cli_rejects_a_file_not_in_the_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps([{"question_id": "q1", "haystack_session_ids": ["a"], "haystack_dates": []}]))
    code = main(["bench", "longmemeval", "--data", str(f), "--embedder", "none", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "not a LongMemEval-format file" in err and "'q1'" in err
