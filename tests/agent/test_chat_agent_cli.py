"""examples/chat_agent.py's command line as a new user meets it: --help, bad option values, a bad
--db, a missing httpx, a chat endpoint that is down or misspelled. Each is a one-line message
and an exit status, never a traceback; nothing is written for a refused start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat_agent.py"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "OPENAI_"))}
    # MEMLANE_CACHE_DIR: the run's built ONNX graphs (conftest), not a rebuild in each fresh HOME
    return {**env, "HOME": str(tmp_path), "MEMLANE_CACHE_DIR": os.environ["MEMLANE_CACHE_DIR"], **extra}


def agent(
    tmp_path: Path, *args: str, stdin: str = "hello\n/memory\n", env: dict[str, str] | None = None, pre: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run the example; ``pre`` is Python run first in the same process (to hide a package)."""
    if pre:
        launch = f"{pre}\nimport runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')"
        cmd = [sys.executable, "-c", launch, str(EXAMPLE), *args]
    else:
        cmd = [sys.executable, str(EXAMPLE), *args]
    return subprocess.run(
        cmd,
        input=stdin,
        cwd=tmp_path,
        env=env if env is not None else _env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_help_lists_options_defaults_and_environment(tmp_path: Path) -> None:
    run = agent(tmp_path, "--help", env=_env(tmp_path, COLUMNS="200"))  # one option per line
    assert run.returncode == 0, run.stderr
    for text in ("--db", "--user", "--embedder", "(default: 1500)", "(default: 30.0)", "(default: 512)"):
        assert text in run.stdout
    for var in ("MEMLANE_CHAT_BASE_URL", "MEMLANE_CHAT_MODEL", "MEMLANE_CHAT_API_KEY", "pip install 'memlane[openai]'"):
        assert var in run.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "0"], "argument --budget: must be greater than 0, got '0'"),
        (["--budget", "-5"], "argument --budget: must be greater than 0, got '-5'"),
        (["--idle-minutes", "abc"], "argument --idle-minutes: expected a number, got 'abc'"),
        (["--idle-minutes", "-1"], "argument --idle-minutes: must be greater than 0, got '-1'"),
        (["--reply-max-tokens", "1.5"], "argument --reply-max-tokens: expected an integer, got '1.5'"),
        (["--formation-max-tokens", "0"], "argument --formation-max-tokens: must be greater than 0, got '0'"),
        (["--user", ""], "argument --user: must not be empty"),
        (["--user", "  "], "argument --user: must not be empty"),
    ],
)
def test_bad_option_values_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    run = agent(tmp_path, "--db", "chat.db", "--embedder", "hash", *args)
    assert run.returncode == 2
    assert run.stderr.rstrip().splitlines()[-1] == f"chat_agent.py: error: {message}"
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert not (tmp_path / "chat.db").exists()


def test_bad_db_and_embedder_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database, just notes\n" * 100)
    (tmp_path / "a-file").write_text("x")
    cases = [
        (["--db", str(tmp_path)], "is a directory, not a database file"),
        (["--db", "notes.txt"], "notes.txt is not a memlane database"),
        (["--db", "a-file/chat.db"], "cannot open the database a-file/chat.db"),
        (["--db", "chat.db", "--embedder", "bogus"], "unknown embedder 'bogus'"),
    ]
    for args, message in cases:
        run = agent(tmp_path, "--embedder", "hash", *args)
        assert run.returncode == 1, (args, run.stderr)
        assert "Traceback" not in run.stderr, run.stderr
        last = run.stderr.rstrip().splitlines()[-1]
        assert last.startswith("chat_agent.py: error: ") and message in last, last
        assert run.stdout == ""
    assert (tmp_path / "notes.txt").read_text() == "not a database, just notes\n" * 100  # untouched
    assert not (tmp_path / "chat.db").exists()


def test_endpoint_without_httpx_names_the_extra(tmp_path: Path) -> None:
    env = _env(tmp_path, MEMLANE_CHAT_BASE_URL="http://127.0.0.1:9/v1")
    run = agent(
        tmp_path, "--db", "chat.db", "--embedder", "hash", env=env, pre="import sys; sys.modules['httpx'] = None"
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert "needs httpx: pip install 'memlane[openai]'" in run.stderr


def test_misspelled_base_url_is_refused_at_start(tmp_path: Path) -> None:
    run = agent(tmp_path, "--db", "chat.db", env=_env(tmp_path, MEMLANE_CHAT_BASE_URL="localhost:8080/v1"))
    assert run.returncode == 1
    assert "MEMLANE_CHAT_BASE_URL must be an http:// or https:// URL" in run.stderr and "Traceback" not in run.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there any more


def test_unreachable_endpoint_answers_each_turn_with_a_clear_error(tmp_path: Path) -> None:
    port = _closed_port()
    env = _env(tmp_path, MEMLANE_CHAT_BASE_URL=f"http://127.0.0.1:{port}/v1", MEMLANE_CHAT_MODEL="m")
    run = agent(
        tmp_path,
        "--db",
        "chat.db",
        "--embedder",
        "hash",
        "--formation",
        "offline",
        "--user",
        "sam",
        stdin="hello\nWhat am I allergic to?\n/remember I am allergic to peanuts\n/memory\n",
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    replies = [line for line in run.stdout.splitlines() if line.startswith("bot> ")]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    for reply in replies[:2]:
        assert reply.startswith(f"bot> [error] RuntimeError: cannot reach the chat endpoint {url} (Connect")
        assert reply.endswith("is the server running? check MEMLANE_CHAT_BASE_URL")
    # slash commands never need the model: they still work
    assert replies[2:] == ["bot> Got it, I'll remember that.", "bot> What I have stored about you (1):"]
