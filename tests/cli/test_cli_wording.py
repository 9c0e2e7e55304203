"""What a new user read from ``memlane``: read-only commands that created a database, user stats
of zero, "imported"/"added" when nothing was, Python argument names in errors, ``history``
that needed ``-u``, ``keys create --help`` listing engine options, and ``import`` that kept
no sessions for ``memlane form`` to find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_line_error, run
from memlane.cli.main import NEEDS_DB, build_parser

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "examples" / "sample_conversation.jsonl")


# ---------------------------------------------------------------------------- no database created
READ_ONLY = {
    "search": ["search", "tea", "-u", "u1"],
    "list": ["list", "-u", "u1"],
    "history": ["history", "f1"],
    "delete": ["delete", "f1", "-u", "u1"],
    "stats": ["stats"],
    "reflections": ["reflections", "-u", "u1"],
    "profile": ["profile", "-u", "u1"],
    "summaries": ["summaries", "u1"],
    "consolidate": ["consolidate", "user", "-u", "u1"],
    "proposals": ["proposals", "-u", "u1"],
    "review": ["review", "p1"],
    "sessions": ["sessions"],
    "form": ["form", "s1"],
    "sweep": ["sweep"],
    "jobs": ["jobs"],
    "forget": ["forget", "u1", "--yes"],
}


@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_read_only_commands_never_create_a_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    missing = tmp_path / "missing" / "dir" / "x.db"
    code, out, err = run(capsys, "--db", str(missing), "--embedder", "hash", *READ_ONLY[command])
    assert code == 2 and out == ""
    line = one_line_error(err)
    assert f"no database at {missing}" in line and f"memlane {command} never creates one" in line
    assert not (tmp_path / "missing").exists()  # no folders, no 245 KB file


def test_every_read_only_command_is_covered() -> None:
    assert set(NEEDS_DB) <= set(READ_ONLY)


def test_commands_that_store_still_create_the_database(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "new" / "m.db"
    code, out, err = run(capsys, "add", "I like tea", "-u", "u1", "--db", str(path), "--embedder", "hash")
    assert code == 0, err
    assert path.exists() and out.startswith("added ")


# ---------------------------------------------------------------------------- stats -u
def test_user_stats_count_the_users_sessions_events_and_blobs(
    capsys: pytest.CaptureFixture[str], db: list[str]
) -> None:
    code, _, err = run(capsys, "import", SAMPLE, "--form", "--llm", "offline", *db)
    assert code == 0, err
    counts = {}
    for who in ([], ["-u", "sam"], ["-u", "kai"]):
        code, out, err = run(capsys, "stats", "--json", *who, *db)
        assert code == 0, err
        counts[tuple(who)] = json.loads(out)
    whole, sam, kai = counts[()], counts[("-u", "sam")], counts[("-u", "kai")]
    assert (sam["sessions"], sam["events"]) == (3, 22)  # examples/sample_conversation.jsonl
    assert (kai["sessions"], kai["events"]) == (1, 3)
    assert sam["consolidated"] > 0 and kai["consolidated"] > 0
    for key in ("sessions", "events", "consolidated", "facts"):
        assert sam[key] + kai[key] == whole[key], key


# ---------------------------------------------------------------------------- what was (not) added
def test_reimport_says_nothing_new(capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "import", SAMPLE, *db)
    assert code == 0, err
    assert "imported 25 turns (jsonl)" in out
    code, out, err = run(capsys, "import", SAMPLE, *db)
    assert code == 0, err
    assert "imported" not in out and "nothing new: all 25 turns (jsonl) were already in" in out
    # one new turn among known ones
    more = tmp_path / "more.jsonl"
    extra = {"user_id": "sam", "session_id": "s9", "role": "user", "content": "I adopted a cat named Pixel."}
    more.write_text(Path(SAMPLE).read_text() + json.dumps(extra) + "\n")
    code, out, err = run(capsys, "import", str(more), *db)
    assert code == 0, err
    assert "imported 1 new turns (jsonl)" in out and "25 were already there" in out


def test_adding_the_same_text_twice_says_already_stored(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    code, first, _ = run(capsys, "add", "I like green tea", "-u", "u1", *db)
    assert code == 0 and first.startswith("added ")
    fact_id = first.split()[1]
    code, second, _ = run(capsys, "add", "I like green tea", "-u", "u1", *db)
    assert code == 0 and second.strip() == f"already stored {fact_id} (nothing added)"
    code, third, _ = run(capsys, "add", "I like green tea", "-u", "u2", *db)  # another user: new
    assert code == 0 and third.startswith("added ") and fact_id not in third


# ---------------------------------------------------------------------------- CLI words, not Python's
@pytest.mark.parametrize(
    "argv, says",
    [
        (["add", "I like tea"], "add needs -u USER"),
        (["add", "Office in Paris", "--shared"], "add --shared needs -a AGENT"),
        (["search", "tea"], "search needs -u USER"),
        (["list"], "list needs -u USER"),
        (["profile"], "profile needs -u USER"),
    ],
)
def test_a_missing_user_is_said_in_cli_words(
    capsys: pytest.CaptureFixture[str], db: list[str], argv: list[str], says: str
) -> None:
    assert run(capsys, "add", "seed", "-u", "u0", *db)[0] == 0
    code, _, err = run(capsys, *argv, *db)
    line = one_line_error(err)
    assert code == 2 and says in line
    assert "user_id=" not in line and "pass " not in line


def test_history_and_delete_find_a_fact_by_its_id_alone(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    code, out, _ = run(capsys, "add", "I live in Lisbon", "-u", "sam", "-a", "bot", *db)
    assert code == 0
    fact_id = out.split()[1]
    code, out, err = run(capsys, "history", fact_id, "--json", *db)
    assert code == 0, err
    assert [r["event"] for r in json.loads(out)] == ["ADD"]
    code, out, err = run(capsys, "delete", fact_id, *db)
    assert code == 0 and f"deleted {fact_id}" in out, err
    code, out, _ = run(capsys, "history", fact_id, "--json", *db)
    assert [r["event"] for r in json.loads(out)] == ["ADD", "DELETE"]
    code, _, err = run(capsys, "history", "no-such-fact", *db)
    assert code == 2 and "no fact 'no-such-fact'" in one_line_error(err)
    # -u still scopes: another user's id is not found through it
    code, _, err = run(capsys, "history", fact_id, "-u", "kai", *db)
    assert code == 2


def test_keys_create_help_lists_only_what_applies(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["keys", "create", "--help"])
    text = capsys.readouterr().out
    assert "--tenant" in text and "--keys-file" in text
    for engine_option in ("--embedder", "--llm", "--db"):
        assert engine_option not in text, engine_option


# ---------------------------------------------------------------------------- import, then form
def test_import_keeps_sessions_that_form_then_forms(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    code, out, err = run(capsys, "import", SAMPLE, *db)
    assert code == 0, err
    assert "form one with memlane form SESSION_ID" in out
    code, out, err = run(capsys, "sessions", "--json", *db)
    assert sorted(s["id"] for s in json.loads(out)) == ["k1", "s1", "s2", "s3"]
    code, out, err = run(capsys, "form", "s1", "--llm", "offline", *db)
    assert code == 0, err
    assert "no session" not in err and "ADD" in out
    # importing again adds no event twice, and says so
    code, out, err = run(capsys, "import", SAMPLE, *db)
    assert code == 0 and "nothing new" in out and "form one with" not in out
