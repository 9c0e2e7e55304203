"""``memlane`` on bad input and hostile environments: one clear line and a non-zero exit,
never a traceback; ``import`` is all-or-nothing and idempotent.

Read-only cases run the CLI as a real process: the tests run as root, which ``chmod 444``
does not stop, so the process drops the capabilities that let root ignore file modes
(``setpriv``), or runs in a private mount namespace where the directory is a read-only
bind mount (``unshare -m``). Each is skipped where the tool or the privilege is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import memlane
from cli_helpers import one_line_error, run
from memlane.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SRC = str(Path(memlane.__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": SRC, "MEMLANE_DB": "/nonexistent-dir/never-used.db"}
CLI = [sys.executable, "-m", "memlane.cli.main"]


def stats(capsys: pytest.CaptureFixture[str], db: list[str]) -> dict[str, object]:
    if not Path(db[1]).exists():  # nothing was ever written (stats refuses to create the file)
        return {"facts": 0}
    code, out, err = run(capsys, "stats", "--json", *db)
    assert code == 0, err
    data: dict[str, object] = json.loads(out)
    return data


# ---------------------------------------------------------------------------- bad --db paths
@pytest.mark.parametrize("where", ["empty", "directory", "proc"])
def test_bad_db_path_is_one_clear_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str) -> None:
    path = {"empty": "", "directory": str(tmp_path), "proc": "/proc/nope/m.db"}[where]
    for argv in (["search", "anything", "-u", "u1"], ["add", "some text", "-u", "u1"]):
        code, _, err = run(capsys, *argv, "--db", path, "--embedder", "hash", "-q")
        assert code == 2
        line = one_line_error(err)
        assert {"empty": "empty", "directory": "is a directory", "proc": "/proc/nope"}[where] in line
        assert "not a memlane database" not in line


# ---------------------------------------------------------------------------- read-only databases
def _can(cmd: list[str]) -> bool:
    if shutil.which(cmd[0]) is None:
        return False
    return subprocess.run([*cmd, "true"], capture_output=True).returncode == 0


#: Runs a command without the capabilities that let root write a file it may not write.
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def _seed(db_file: Path) -> None:
    code = main(["add", "the lighthouse keeper paints boats", "-u", "u1", "--db", str(db_file), "--embedder", "hash"])
    assert code == 0


def test_read_only_file_serves_reads_and_refuses_writes(tmp_path: Path) -> None:
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not _can(NO_DAC):
            pytest.skip("setpriv cannot drop capabilities here")
        prefix = NO_DAC
    db_file = tmp_path / "ro.db"
    _seed(db_file)
    db_file.chmod(0o444)
    common = ["--db", str(db_file), "--embedder", "hash", "-q"]

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, *CLI, *argv, *common], capture_output=True, text=True, env=ENV, timeout=60)

    for argv in (["search", "lighthouse boats", "-u", "u1"], ["stats", "--json"]):
        res = cli(*argv)
        assert res.returncode == 0 and res.stderr == "", (argv, res.stderr)
        assert "lighthouse keeper" in res.stdout or json.loads(res.stdout)["facts"] == 1
    res = cli("add", "a new memory", "-u", "u1")
    assert res.returncode == 2
    assert "database is read-only" in one_line_error(res.stderr)
    assert os.stat(db_file).st_mode & 0o777 == 0o444


def test_read_only_filesystem_is_not_reported_as_foreign(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not _can(["unshare", "-m"]):
        pytest.skip("needs root and unshare -m for a read-only bind mount")
    ro = tmp_path / "rofs"
    ro.mkdir()
    _seed(ro / "m.db")
    cli = " ".join(CLI)
    common = f"--db {ro}/m.db --embedder hash -q"
    script = (
        f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} || exit 99\n"
        f"touch {ro}/probe 2>/dev/null && exit 98\n"
        f"{cli} search 'lighthouse boats' -u u1 {common} > {tmp_path}/search.out 2> {tmp_path}/search.err\n"
        f"echo $? > {tmp_path}/search.rc\n"
        f"{cli} add 'new text' -u u1 {common} 2> {tmp_path}/add.err\n"
        f"echo $? > {tmp_path}/add.rc\n"
        f"{cli} add 'new text' -u u1 --db {ro}/new.db --embedder hash -q 2> {tmp_path}/new.err\n"
        f"echo $? > {tmp_path}/new.rc\n"
    )
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], env=ENV, capture_output=True, text=True, timeout=120)
    if res.returncode == 99:
        pytest.skip(f"cannot make a read-only bind mount here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr

    def read(name: str) -> str:
        return (tmp_path / name).read_text()

    assert read("search.rc").strip() == "0", read("search.err")
    assert "lighthouse keeper" in read("search.out")
    assert read("add.rc").strip() == "2"
    line = one_line_error(read("add.err"))
    assert "database is read-only" in line and "not a memlane database" not in line
    assert read("new.rc").strip() == "2"
    assert "not writable" in one_line_error(read("new.err"))


# ---------------------------------------------------------------------------- arguments
def test_sweep_rejects_non_positive_idle_minutes(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    for bad in ("0", "-5", "nan"):
        with pytest.raises(SystemExit) as exc:
            main(["sweep", "--idle-minutes", bad, *db])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--idle-minutes" in err and "Traceback" not in err


def test_db_option_before_the_subcommand(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(tmp_path / "front.db")
    code, out, err = run(capsys, "--db", path, "--embedder", "hash", "-q", "add", "Oslo has a fjord", "-u", "ola")
    assert code == 0, err
    assert (tmp_path / "front.db").exists()
    code, out, _ = run(capsys, "search", "fjord", "-u", "ola", "--db", path, "--embedder", "hash", "-q")
    assert "Oslo has a fjord" in out
    code, out, _ = run(capsys, "--db", path, "--embedder", "hash", "list", "-u", "ola")
    assert "Oslo has a fjord" in out
    # after the subcommand wins over before it
    code, out, _ = run(
        capsys, "--db", str(tmp_path / "other.db"), "--embedder", "hash", "stats", "--db", path, "--json"
    )
    assert json.loads(out)["facts"] == 1


def test_sessions_unknown_id_fails(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    assert run(capsys, "add", "something", "-u", "u1", *db)[0] == 0
    code, out, err = run(capsys, "sessions", "nope", *db)
    assert code == 2 and out == ""
    assert "no session 'nope'" in one_line_error(err)
    code, out, err = run(capsys, "sessions", "nope", "--json", *db)
    assert code == 2 and out == ""


# ---------------------------------------------------------------------------- bench --data
@pytest.mark.parametrize(
    "content",
    [b'{"a": 1}', b"[1, 2, 3]", b'[{"sample_id": "x"}]', b"not json at all", b"\xff\xfe[", b""],
    ids=["object", "numbers", "no-conversation", "not-json", "not-utf8", "empty"],
)
def test_bench_locomo_rejects_a_non_locomo_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes
) -> None:
    data = tmp_path / "data.json"
    data.write_bytes(content)
    code, _, err = run(capsys, "bench", "locomo", "--data", str(data), "--embedder", "none", "-q")
    assert code == 2
    assert "LoCoMo" in one_line_error(err)


def test_bench_locomo_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "bench", "locomo", "--data", str(tmp_path / "nope.json"), "--embedder", "none")
    assert code == 2 and "nope.json" in one_line_error(err)


# ---------------------------------------------------------------------------- import
def test_import_rejects_non_conversation_files(
    capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path
) -> None:
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1,2,3]")
    code, _, err = run(capsys, "import", str(numbers), *db)
    assert code == 2 and "numbers.json" in one_line_error(err)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"user_id": "a", "content": "fine"}\n{"user_id": "a", "content": "caf\xe9"}\n')
    code, _, err = run(capsys, "import", str(binary), *db)
    assert code == 2
    line = one_line_error(err)
    assert "binary.jsonl:2" in line and "UTF-8" in line
    assert stats(capsys, db)["facts"] == 0


def _rows(n: int) -> list[str]:
    return [
        json.dumps({"user_id": f"u{i % 3}", "session_id": f"s{i // 10}", "role": "user", "content": f"turn {i}"})
        for i in range(n)
    ]


def test_import_is_all_or_nothing_and_names_the_line(
    capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*_rows(30), json.dumps({"user_id": "u1", "session_id": "s9", "content": "  "})]) + "\n")
    code, _, err = run(capsys, "import", str(bad), *db)
    assert code == 2
    assert stats(capsys, db)["facts"] == 0
    line = one_line_error(err)
    assert "bad.jsonl:31" in line and "empty" in line and "message 0" not in line
    # what only the engine rejects (a lone surrogate) is caught before anything is written too
    bad.write_text("\n".join([*_rows(30), '{"user_id": "u1", "content": "half \\ud800 a pair"}']) + "\n")
    code, _, err = run(capsys, "import", str(bad), *db)
    assert code == 2 and "bad.jsonl:31" in one_line_error(err)
    assert stats(capsys, db)["facts"] == 0
    # blank lines are skipped, not errors
    ok = tmp_path / "ok.jsonl"
    ok.write_text("\n" + "\n\n".join(_rows(30)) + "\n\n   \n")
    code, out, err = run(capsys, "import", str(ok), *db)
    assert code == 0, err
    assert "imported 30 turns" in out
    assert stats(capsys, db)["facts"] == 30


def _events(capsys: pytest.CaptureFixture[str], db: list[str]) -> dict[str, list[str]]:
    """Every session's event ids, through the CLI."""
    code, out, err = run(capsys, "sessions", "--json", *db)
    assert code == 0, err
    ids = {}
    for s in json.loads(out):
        code, out, err = run(capsys, "sessions", s["id"], "--json", *db)
        ids[s["id"]] = [e["id"] for e in json.loads(out)]
    return ids


def test_import_form_twice_changes_nothing(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    sample = str(ROOT / "examples" / "sample_conversation.jsonl")
    code, out, err = run(capsys, "import", sample, "--form", "--llm", "offline", *db)
    assert code == 0, err
    first, events = stats(capsys, db), _events(capsys, db)
    assert sum(len(v) for v in events.values()) == 25
    code, out, err = run(capsys, "import", sample, "--form", "--llm", "offline", *db)
    assert code == 0, err
    assert "formed 0 fact changes, 0 reflections, 0 consolidations" in out
    assert _events(capsys, db) == events
    assert stats(capsys, db) == first


def test_import_form_of_a_long_session_leaves_no_job_behind(
    capsys: pytest.CaptureFixture[str], db: list[str], tmp_path: Path
) -> None:
    """More turns than the message trigger (45): the import forms them itself, explicitly, and
    no trigger job is left queued in the user's database."""
    f = tmp_path / "long.jsonl"
    rows = [
        {
            "user_id": "zed",
            "session_id": "z1",
            "role": "assistant" if i % 2 else "user",
            "content": "Nice!" if i % 2 else f"I visited city number {i} last year.",
        }
        for i in range(60)
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run(capsys, "import", str(f), "--form", "--llm", "offline", *db)
    assert code == 0, err
    code, out, err = run(capsys, "jobs", "--json", *db)
    assert [(j["status"], j["payload"]["reason"]) for j in json.loads(out)] == [("done", "end")]


# ---------------------------------------------------------------------------- broken pipe
def test_broken_pipe_exits_quietly(tmp_path: Path) -> None:
    from memlane import Event, FormationConfig, Memory

    path = tmp_path / "pipe.db"
    with Memory(path, embedder="hash", formation=FormationConfig(background=False, idle_minutes=None)) as m:
        m.sessions.create_session(user_ids=["u1"], session_id="s1")
        for i in range(400):  # ~100 kB of output: more than a pipe holds
            m.sessions.add_event("s1", Event(author="u1", content=f"line {i} " + "x" * 240))
    proc = subprocess.Popen(
        [*CLI, "sessions", "s1", "--db", str(path), "--embedder", "hash", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert b"line 0" in proc.stdout.readline()  # like `| head -1`: read a line, then hang up
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141  # as if killed by SIGPIPE, like other Unix tools
    assert err == ""
