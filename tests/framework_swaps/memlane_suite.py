"""Run a framework's own test suite against a memlane adapter: the shared pytest plugin.

The harness (``tests/framework_suites.py``) fetches a framework's test files from its sdist on
PyPI and runs them in a child pytest, in the sdist's own folder with its own pytest config,
with two plugins loaded before collection:

* a **swap module** (``swap_*.py`` beside this file) that defines ``SUITE`` (a :class:`Suite`)
  and replaces the framework's built-in implementation by memlane's adapter (e.g.
  ``langgraph.store.memory.InMemoryStore`` becomes a factory of ``MemlaneStore``) before the
  test modules import it; the framework's assertions stay unchanged;
* this plugin, which deselects the tests the suite lists (each with the reason a framework
  user would read in docs/adapters.md) and writes a JSON report of every outcome.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

#: Environment variables the harness sets for the child pytest.
SWAP_ENV, REPORT_ENV = "MEMLANE_SUITE_SWAP", "MEMLANE_SUITE_REPORT"


@dataclass(frozen=True)
class Suite:
    """One framework test suite run against one memlane adapter.

    Attributes:
        name: a short name (``"langgraph-store"``), the harness's test id.
        dist: the PyPI distribution whose sdist ships the tests (``"langgraph-checkpoint"``).
        pinned: the version the deselections were written for (pinned in the ``dev`` extra);
            the harness runs the tests of the *installed* version, so a new release that
            breaks the adapter fails with the framework's own assertion.
        paths: what the child pytest runs, relative to the sdist's root (files or node ids).
        deselected: node id (relative to the sdist's root; a test id without ``[...]`` also
            covers its parametrisations) -> why it does not apply to memlane.
        extract: the sdist members the run needs (prefixes under the sdist's top folder).
        min_passed: fewer passing tests than this fails the run (a swap that silently
            collected nothing must not look green).
    """

    name: str
    dist: str
    pinned: str
    paths: tuple[str, ...]
    deselected: Mapping[str, str] = field(default_factory=dict)
    extract: tuple[str, ...] = ("tests/", "pyproject.toml")
    min_passed: int = 1


def installed_version(suite: Suite) -> str:
    return metadata.version(suite.dist)


def _swap() -> ModuleType:
    return importlib.import_module(os.environ[SWAP_ENV])


def _matches(nodeid: str, key: str) -> bool:
    return nodeid == key or nodeid.startswith(key + "[")


_outcomes: dict[str, str] = {}
_deselected: dict[str, str] = {}
_matched: set[str] = set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite: Suite = _swap().SUITE
    keep, drop = [], []
    for item in items:
        key = next((k for k in suite.deselected if _matches(item.nodeid, k)), None)
        if key is None:
            keep.append(item)
        else:
            drop.append(item)
            _matched.add(key)
            _deselected[item.nodeid] = suite.deselected[key]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and report.outcome == "passed":
        return  # a passing setup or teardown is not an outcome; a failing or skipping one is
    if _outcomes.get(report.nodeid) != "failed":
        _outcomes[report.nodeid] = "xfailed" if hasattr(report, "wasxfail") else report.outcome


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    suite: Suite = _swap().SUITE
    report: dict[str, Any] = {
        "suite": suite.name,
        "version": installed_version(suite),
        "exitstatus": int(exitstatus),
        "outcomes": _outcomes,
        "deselected": _deselected,
        "unmatched": sorted(set(suite.deselected) - _matched),
    }
    Path(path).write_text(json.dumps(report, indent=1, sort_keys=True))
