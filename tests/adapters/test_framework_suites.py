"""The frameworks' own test suites, run against memlane's adapters (issue 18).

Each suite's test files come from the framework's sdist on PyPI at test time (never copied
here), at the installed version; its swap module (``tests/framework_swaps/swap_*.py``) puts
memlane's adapter in place of the built-in implementation and lists the deselected tests with
their reasons, which docs/adapters.md repeats for framework users. A failure shows the
framework's own assertion.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from framework_suites import run_suite, suites

DOCS = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
SUITES = suites()


@pytest.mark.parametrize("name", sorted(SUITES))
def test_framework_suite_passes_against_the_adapter(name: str, tmp_path: Path) -> None:
    module, suite = SUITES[name]
    run = run_suite(module, suite, tmp_path)
    print(run.summary())
    tail = "\n".join(run.output.splitlines()[-150:])
    assert run.report, f"{name}: the child pytest wrote no report (rc {run.returncode}):\n{tail}"
    assert not run.report["unmatched"], (
        f"{name}: deselections that match no test of {suite.dist} {run.version} (renamed or removed upstream? "
        f"update tests/framework_swaps/{module}.py and docs/adapters.md): {run.report['unmatched']}"
    )
    assert run.returncode == 0, f"{run.summary()}\n{tail}"
    assert run.counts["failed"] == 0
    assert run.counts["passed"] >= suite.min_passed, f"{run.summary()}: fewer than {suite.min_passed} passed"


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_deselection_is_documented(name: str) -> None:
    """docs/adapters.md names each deselected test, so a framework user can read why."""
    _, suite = SUITES[name]
    text = DOCS.read_text()
    missing = [key for key in suite.deselected if key.rsplit("::", 1)[-1] not in text]
    assert not missing, f"docs/adapters.md does not mention these deselected {suite.dist} tests: {missing}"
    assert suite.pinned in text, f"docs/adapters.md does not name the pinned {suite.dist} version {suite.pinned}"


def test_reading_the_suites_swaps_nothing_in_this_process() -> None:
    """A swap applies only in the child pytest that loads it as a plugin: reading the suite
    definitions here must leave the frameworks' own classes in place for memlane's other tests."""
    import agents
    import langgraph.store.memory

    suites()
    assert langgraph.store.memory.InMemoryStore.__module__ == "langgraph.store.memory"
    assert agents.SQLiteSession.__module__.startswith("agents.")
