"""The ``memlane`` command line, run in-process (and once as the installed script)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlane.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> list[str]:
    return ["--db", str(tmp_path / "cli.db"), "--embedder", "hash", "-q"]


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)  # type: ignore[arg-type]


def test_every_command_has_help_and_docs(capsys: pytest.CaptureFixture[str]) -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    for cmd in _commands():
        with pytest.raises(SystemExit) as exc:
            main([cmd, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: memlane " + cmd)
        assert f"memlane {cmd}" in docs, f"docs/cli.md does not document `memlane {cmd}`"
    assert set(_commands()) >= {"add", "search", "list", "history", "forget", "sessions", "stats", "import", "bench"}


def test_installed_script_help() -> None:
    out = subprocess.run([sys.executable, "-m", "memlane.cli.main", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in _commands():
        assert cmd in out.stdout


def test_add_search_list_history_delete(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    code, out, _ = run(capsys, "add", "Hana's passport number is X123", "-u", "hana", *db)
    assert code == 0
    fid = re.search(r"added (\w+)", out).group(1)  # type: ignore[union-attr]
    code, out, _ = run(capsys, "search", "passport number", "-u", "hana", "--json", *db)
    assert json.loads(out)["hits"][0]["fact"]["id"] == fid
    code, out, _ = run(capsys, "search", "passport", "-u", "someone-else", *db)
    assert "no matches" in out
    code, out, _ = run(capsys, "list", "-u", "hana", *db)
    assert fid in out and "1 of 1" in out
    assert run(capsys, "delete", fid, "-u", "hana", *db)[0] == 0
    code, out, _ = run(capsys, "history", fid, "-u", "hana", *db)
    assert "ADD" in out and "DELETE" in out


def test_errors_are_clear_and_exit_2(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    code, _, err = run(capsys, "add", "   ", "-u", "x", *db)
    assert code == 2 and "error: text is empty" in err
    code, _, err = run(capsys, "search", "q", *db)
    assert code == 2 and "search needs -u USER" in err


def test_forget_needs_confirmation(capsys: pytest.CaptureFixture[str], db: list[str], monkeypatch) -> None:  # type: ignore[no-untyped-def]
    run(capsys, "add", "ivan likes chess", "-u", "ivan", *db)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, _, err = run(capsys, "forget", "ivan", *db)
    assert code == 2 and "--yes" in err
    code, out, _ = run(capsys, "forget", "ivan", "--yes", *db)
    assert code == 0 and "erased" in out
    assert "0 of 0" in run(capsys, "list", "-u", "ivan", *db)[1]


def test_import_jsonl_then_sessions_and_stats(
    capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path
) -> None:
    f = tmp_path / "turns.jsonl"
    rows = [
        {
            "user_id": "kim",
            "session_id": "k1",
            "role": "user",
            "content": "My cat is called Miso",
            "timestamp": "2024-05-01T10:00:00+00:00",
        },
        {"user_id": "kim", "session_id": "k1", "role": "assistant", "content": "Cute name!"},
        {"user_id": "lee", "session_id": "l1", "role": "user", "content": "I work at the bakery"},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    code, out, _ = run(capsys, "import", str(f), *db)
    assert code == 0 and "imported 3 turns (jsonl)" in out
    code, out, _ = run(capsys, "search", "what is my cat called", "-u", "kim", "--json", *db)
    hits = json.loads(out)["hits"]
    assert hits[0]["fact"]["content"] == "My cat is called Miso" and hits[0]["fact"]["author"] == "user"
    code, out, _ = run(capsys, "stats", "--json", *db)
    assert json.loads(out)["facts"] == 3
    code, out, _ = run(capsys, "sessions", *db)
    assert code == 0


def test_import_rejects_bad_jsonl_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path
) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"user_id": "a", "content": "fine"}\n{not json}\n')
    code, _, err = run(capsys, "import", str(f), *db)
    assert code == 2 and "bad.jsonl:2" in err
    assert not Path(db[1]).exists()  # not even an empty database was created


def _tiny_locomo(path: Path) -> None:
    conv = {
        "speaker_a": "Ann",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I started pottery classes last week!"},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice, what did you make?"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "A blue bowl for my mum", "blip_caption": "a photo of a bowl"},
        ],
        "session_2_date_time": "10:00 am on 9 June, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "I ran a marathon in Boston"},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "Wow, how long did it take?"},
        ],
    }
    qa = [
        {"question": "What did Ann make in pottery class?", "answer": "a bowl", "evidence": ["D1:3"], "category": 1},
        {"question": "Where did Ben run a marathon?", "answer": "Boston", "evidence": ["D2:1"], "category": 4},
        {"question": "unanswerable", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
    ]
    path.write_text(json.dumps([{"sample_id": "conv-x", "conversation": conv, "qa": qa}]))


def test_bench_locomo_prints_the_readme_metrics(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    _tiny_locomo(data)
    code, out, _ = run(capsys, "bench", "locomo", "--data", str(data), "--embedder", "hash", "-q", "--json")
    assert code == 0
    rep = json.loads(out)
    assert rep["turns"] == 5
    modes = {r["mode"]: r for r in rep["results"]}
    assert set(modes) == {"hybrid", "keyword", "vector"}
    for r in modes.values():
        assert r["questions"] == 2  # category 5 excluded
        assert {
            "recall@1",
            "recall@5",
            "recall@10",
            "hit@1",
            "hit@5",
            "hit@10",
            "search_p50_ms",
            "search_p95_ms",
        } <= set(r)
    assert modes["keyword"]["recall@5"] == 1.0
    code, out, _ = run(capsys, "bench", "locomo", "--data", str(data), "--embedder", "none", "-q")
    assert code == 0 and "keyword" in out and "turns/s" in out


def test_import_locomo(capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    _tiny_locomo(data)
    code, out, _ = run(capsys, "import", str(data), *db)
    assert code == 0 and "imported 5 turns (locomo)" in out
    code, out, _ = run(capsys, "search", "pottery bowl", "-u", "conv-x", "--json", *db)
    assert "[shares a photo of a bowl]" in json.loads(out)["hits"][0]["fact"]["content"]


def test_formation_commands_offline(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    sample = str(ROOT / "examples" / "sample_conversation.jsonl")
    code, out, _ = run(capsys, "import", sample, "--form", "--llm", "offline", *db)
    assert code == 0 and "imported 25 turns" in out
    assert re.search(r"formed \d+ fact changes, \d+ reflections, \d+ consolidations from 4 sessions", out)
    code, out, _ = run(capsys, "list", "-u", "sam", *db)
    assert "Sam is vegetarian" in out and "Grace is Sam's girlfriend" in out
    code, out, _ = run(capsys, "reflections", "-u", "sam", "-s", "s1", *db)
    assert code == 0 and "== session memory" in out and "VERSION: 1" in out
    code, out, _ = run(capsys, "profile", "-u", "sam", *db)
    assert code == 0 and "- Sam is vegetarian" in out
    code, out, _ = run(capsys, "profile", "-u", "nobody", *db)
    assert "no profile" in out
    # a contradiction of a stored fact is an UPDATE, with the old text shown
    code, out, _ = run(capsys, "add", "--infer", "My sister Mia moved to Faro", "-u", "sam", *db)
    assert code == 0 and out.startswith("UPDATE") and "was: Sam's sister Mia lives in Porto" in out
    code, out, _ = run(capsys, "add", "--infer", "thanks, that's all", "-u", "sam", *db)
    assert "no facts" in out
    code, out, _ = run(capsys, "jobs", *db)
    assert out.count(" done ") == 6 and "infer" in out
    code, out, _ = run(capsys, "jobs", "--json", *db)
    assert {j["status"] for j in json.loads(out)} == {"done"}


def test_form_and_sweep_commands(capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path) -> None:
    from memlane import Event, EventType, FormationConfig, Memory

    conf = FormationConfig(background=False, idle_minutes=None)
    with Memory(db[1], embedder="hash", formation=conf) as m:
        for sid in ("a", "b"):
            m.sessions.create_session(user_ids=["sam"], session_id=sid)
            m.add_event(sid, Event(type=EventType.USER_MESSAGE, author="Sam", content="I live in Lisbon."))
            m.add_event(sid, Event(type=EventType.AGENT_RESPONSE, author="bot", content="Nice."))
    code, out, _ = run(capsys, "form", "a", "--reset", *db)
    assert code == 0 and "ADD" in out and "Sam lives in Lisbon" in out and "session cleared" in out
    code, out, _ = run(capsys, "sessions", *db)
    assert "a " not in out and out.startswith("b ")
    code, out, _ = run(capsys, "sweep", "--idle-minutes", "0.0001", *db)
    assert code == 0 and "1 idle session(s) queued, 1 job(s) run" in out
    code, _, err = run(capsys, "form", "missing", *db)
    assert code == 2 and "no session" in err


@pytest.mark.parametrize("keep", [False, True])
def test_forget_keep_shared(capsys: pytest.CaptureFixture[str], db: list[str], keep: bool) -> None:
    run(capsys, "add", "ivan likes chess", "-u", "ivan", *db)
    run(capsys, "add", "the club opens at nine", "-u", "ivan", "-a", "club", "--shared", *db)
    code, out, _ = run(capsys, "forget", "ivan", "--yes", *(["--keep-shared"] if keep else []), *db)
    assert code == 0 and "erased" in out
    _, out, _ = run(capsys, "search", "club opens", "-a", "club", *db)
    assert ("the club opens at nine" in out) is keep
    assert "0 of 0" in run(capsys, "list", "-u", "ivan", *db)[1]
