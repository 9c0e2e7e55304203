"""What a new user hit outside the CLI: a ``Page`` that iterated as pydantic field pairs, a
script ending without ``close()`` that printed a worker error and left a job ``running``, and
``bench/peers.py`` defaults that named one machine's folders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from memlane import Memory
from memlane.formation.config import FormationConfig

ROOT = Path(__file__).resolve().parents[2]
QUIET = FormationConfig(background=False, idle_minutes=None)


# ---------------------------------------------------------------------------- Page
def test_page_iterates_and_counts_its_items(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hash", formation=QUIET) as m:
        for text in ("I like tea", "I live in Lisbon", "I run on Sundays"):
            m.add(text, user_id="u1")
        page = m.list(user_id="u1", limit=2)
        assert [f.content for f in page] == [f.content for f in page.items]
        assert all(isinstance(f.content, str) for f in page)  # not ('items', [...]) pairs
        assert len(page) == 2 and page.total == 3  # len counts this page; total the listing
        assert page[0].id == page.items[0].id
        assert len(m.list(user_id="nobody")) == 0
        assert page.model_dump()["total"] == 3  # the model itself is unchanged


# ---------------------------------------------------------------------------- exit without close()
SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, threading
    sys.path.insert(0, sys.argv[2])
    from formation_helpers import Brain
    from memlane import Memory

    started = threading.Event()

    async def never_answers(_inp):
        started.set()
        await asyncio.sleep(3600)  # the job is mid-formation when the script ends

    brain = Brain()
    brain.queue("extract", never_answers)
    m = Memory(sys.argv[1], embedder="hash", llm=brain)
    first = m.add("I love hiking in the Alps", user_id="u1", infer=True, wait=False)
    second = m.add("I drink green tea", user_id="u1", infer=True, wait=False)
    m.start()
    assert started.wait(120), "the worker never started the first job"
    print(first.id, second.id)
    # no m.close(): the interpreter exits with the worker running a job and one queued
    """
)


def test_script_ending_without_close_is_quiet_and_loses_nothing(tmp_path: Path) -> None:
    script = tmp_path / "noclose.py"
    script.write_text(SCRIPT)
    db = tmp_path / "m.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(db), str(ROOT / "tests")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no "formation worker error (cannot schedule new futures ...)"
    first, second = proc.stdout.split()
    with Memory(db, embedder="hash", formation=QUIET) as m:
        # The started job was handed back to the queue (not left "running" until its lease
        # expires), the other is still queued: both run in the next process.
        assert {j.id: j.status for j in m.list_jobs()} == {first: "queued", second: "queued"}
        assert m.run_jobs() == 2
        assert {m.get_job(first).status, m.get_job(second).status} == {"done"}


# ---------------------------------------------------------------------------- bench/peers.py
def test_peers_defaults_follow_the_checkout_and_the_system_temp(tmp_path: Path) -> None:
    # A checkout somewhere else, and another temp folder: the defaults follow both.
    bench = tmp_path / "clone" / "bench"
    bench.mkdir(parents=True)
    shutil.copy(ROOT / "bench" / "peers.py", bench / "peers.py")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "COLUMNS": "1000"}
    proc = subprocess.run(
        [sys.executable, str(bench / "peers.py"), "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    defaults = dict(re.findall(r"--(data|venv|workdir) \S+ .*: (\S+)\)", proc.stdout))
    assert defaults == {
        "data": str(tmp_path / "shared" / "bench" / "locomo" / "locomo_dev.json"),
        "venv": str(temp / "mem0-venv"),
        "workdir": str(temp / "memlane-peers"),
    }, proc.stdout
