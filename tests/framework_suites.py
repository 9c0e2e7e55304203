"""Fetch a framework's own tests from its sdist on PyPI and run them against memlane's adapter.

Nothing of the frameworks' test code is kept in memlane's repository: :func:`sdist_root`
downloads the sdist of the **installed** version with pip (honouring pip's index
configuration), extracts the members the suite needs into a cache under the system's temp
folder (``$MEMLANE_SUITE_CACHE`` overrides it), and :func:`run_suite` runs them in a child
pytest with the suite's swap module and ``memlane_suite`` loaded (see
``tests/framework_swaps/memlane_suite.py``).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SWAPS = Path(__file__).resolve().parent / "framework_swaps"
if str(SWAPS) not in sys.path:
    sys.path.insert(0, str(SWAPS))

from memlane_suite import REPORT_ENV, SWAP_ENV, Suite, installed_version  # noqa: E402

#: The swap modules, one per suite (``tests/framework_swaps/swap_*.py``).
SWAP_MODULES = tuple(sorted(p.stem for p in SWAPS.glob("swap_*.py")))


def suites() -> dict[str, tuple[str, Suite]]:
    """``{suite name: (swap module, Suite)}`` for every swap module."""
    found: dict[str, tuple[str, Suite]] = {}
    for module in SWAP_MODULES:
        suite: Suite = importlib.import_module(module).SUITE
        found[suite.name] = (module, suite)
    return found


def cache_root() -> Path:
    return Path(os.environ.get("MEMLANE_SUITE_CACHE") or Path(tempfile.gettempdir()) / "memlane-framework-suites")


def sdist_root(suite: Suite) -> Path:
    """The extracted test files of the installed version's sdist (downloaded once, then cached)."""
    version = installed_version(suite)
    root = cache_root() / f"{suite.dist}-{version}"
    if (root / ".complete").exists():
        return root
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root()) as scratch:
        download = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                scratch,
                f"{suite.dist}=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        archives = sorted(Path(scratch).glob("*.tar.gz"))
        if download.returncode != 0 or not archives:
            raise RuntimeError(
                f"could not download the sdist of {suite.dist}=={version} from the package index "
                f"(the framework's own tests ship in it): {download.stderr.strip()[-2000:]}"
            )
        staged = Path(scratch) / "suite"
        with tarfile.open(archives[0]) as tar:
            members = []
            for member in tar.getmembers():
                inner = member.name.split("/", 1)[1] if "/" in member.name else ""
                if inner and any(inner.startswith(p) for p in suite.extract):
                    member.name = inner
                    members.append(member)
            tar.extractall(staged, members=members, filter="data")
        (staged / ".complete").write_text(archives[0].name)
        try:
            staged.rename(root)
        except OSError:  # another run extracted it meanwhile
            if not (root / ".complete").exists():
                raise
    return root


@dataclass(frozen=True)
class SuiteRun:
    suite: Suite
    version: str
    returncode: int
    output: str
    report: dict[str, Any]

    @property
    def counts(self) -> Counter[str]:
        counts = Counter(self.report.get("outcomes", {}).values())
        counts["deselected"] = len(self.report.get("deselected", {}))
        return counts

    def summary(self) -> str:
        c = self.counts
        return (
            f"{self.suite.name} ({self.suite.dist} {self.version}): {c['passed']} passed, {c['failed']} failed, "
            f"{c['skipped']} skipped, {c['deselected']} deselected"
        )


def run_suite(module: str, suite: Suite, workdir: Path, *extra: str) -> SuiteRun:
    """Run ``suite``'s tests (the installed version's) with ``module`` swapped in."""
    root = sdist_root(suite)
    report_path = workdir / "report.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SWAPS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[SWAP_ENV], env[REPORT_ENV] = module, str(report_path)
    env["MEMLANE_SUITE_TMP"] = str(workdir / "data")
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *suite.paths,
            "-p",
            "memlane_suite",
            "-p",
            module,
            "-p",
            "no:cacheprovider",
            "-p",
            "no:langsmith_plugin",  # langsmith's pytest plugin (a langgraph dependency): ~1 s of imports, unused
            "--basetemp",
            str(workdir / "basetemp"),
            "--rootdir",
            str(root),
            "-q",
            "--tb=short",
            "-rfE",
            "--no-header",
            "--durations=0",
            "--durations-min=5",
            *extra,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return SuiteRun(suite, installed_version(suite), proc.returncode, proc.stdout + proc.stderr, report)


def clear_cache() -> None:
    shutil.rmtree(cache_root(), ignore_errors=True)
