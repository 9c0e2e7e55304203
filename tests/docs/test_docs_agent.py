"""The agent-surface how-tos run as written and print what they show.

Every ```python block of docs/agent.md, docs/state.md and docs/adapters.md (the Google ADK block
has its own test in test_adapter_adk.py) runs as a script in a fresh directory, twice in a row
(the second run reuses the first one's database file), and its output must be its ``# ->``
comments; state.md's quick start must print the ```text block under it (its clock line aside).
docs/example.md's commands run the example as written: its offline transcript is replayed
through stdin and the replies must be the ones shown.

(docs/tools.md: test_tools.py; docs/documents.md: test_documents_eliza.py; README.md:
test_readme.py.)"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_EXPECT = re.compile(r"#\s*->\s?(?P<line>.*)$")


def _blocks(page: str, lang: str = "python") -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [m["body"] for m in _BLOCK.finditer(text) if m["lang"] == lang]


def _expected(body: str) -> list[str]:
    return [m["line"].rstrip() for m in map(_EXPECT.search, body.splitlines()) if m]


def _run_script(body: str, cwd: Path) -> list[str]:
    script = cwd / "snippet.py"
    script.write_text(body, encoding="utf-8")
    env = {**os.environ, "HOME": str(cwd), "MEMLANE_DB": str(cwd / "default.db")}
    run = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return [line.rstrip() for line in run.stdout.splitlines()]


def _cases() -> list[pytest.ParameterSet]:
    cases = []
    for page in ("agent.md", "state.md", "adapters.md"):
        for index, body in enumerate(_blocks(page)):
            if "google.adk" in body:
                continue  # test_adapter_adk.py::test_docs_adk_snippet_runs_twice
            cases.append(pytest.param(page, index, id=f"{page}-{index}"))
    return cases


@pytest.mark.parametrize(("page", "index"), _cases())
def test_python_blocks_print_what_they_show(tmp_path: Path, page: str, index: int) -> None:
    body = _blocks(page)[index]
    expected = _expected(body)
    for attempt in ("first run", "second run"):
        out = _run_script(body, tmp_path)
        if page == "state.md" and index == 0:  # shown in the ```text block that follows
            shown = _blocks(page, "text")[0].rstrip("\n").splitlines()
            assert out[0].startswith("Current time: ") and shown[0].startswith("Current time: ")
            assert out[1:] == shown[1:], attempt
        else:
            assert expected, f"{page} block {index} shows no output (# -> comments)"
            assert out == expected, attempt


def test_every_block_of_the_pages_is_covered() -> None:
    """A new python block lands in the parametrization above (the ADK one has its own test)."""
    assert len(_blocks("agent.md")) == 2
    assert len(_blocks("state.md")) == 3
    assert len(_cases()) == 2 + 3 + len(_blocks("adapters.md")) - 1


# --------------------------------------------------------------------------- docs/example.md


def _example_env(tmp_path: Path) -> dict[str, str]:
    """``python`` on PATH is this interpreter; ``examples/`` is reachable from the cwd (as in a
    clone); no chat endpoint configured (offline)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "OPENAI_"))}
    return {
        **env,
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "HOME": str(tmp_path),
        "MEMLANE_CACHE_DIR": os.environ["MEMLANE_CACHE_DIR"],  # the run's built ONNX graphs (conftest)
    }


def test_example_offline_transcript_is_what_the_agent_prints(tmp_path: Path) -> None:
    command = next(b for b in _blocks("example.md", "bash") if "--user sam" in b and "printf" not in b).strip()
    assert command == "python examples/chat_agent.py --db chat.db --user sam"
    transcript = _blocks("example.md", "text")[0].rstrip("\n").splitlines()
    said = [line.removeprefix("you> ") for line in transcript if line.startswith("you> ")]
    shown = [line for line in transcript if not line.startswith("you> ")]  # stdin is not a tty: no prompts
    run = subprocess.run(
        shlex.split(command),
        input="".join(f"{line}\n" for line in said),
        cwd=tmp_path,
        env=_example_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.rstrip("\n").splitlines() == shown


def test_example_piped_command_runs_as_written(tmp_path: Path) -> None:
    command = next(b for b in _blocks("example.md", "bash") if "printf" in b)
    run = subprocess.run(
        ["bash", "-c", command],
        cwd=tmp_path,
        env=_example_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[1:] == [
        "bot> Got it, I'll remember that.",
        "bot> From what I remember: I am allergic to peanuts",
        "bot> What I have stored about you (1):",
        "1. I am allergic to peanuts (just now)",
    ]
