"""A backend is one folder plus one registry row: nothing else imports a backend or a driver.

Outside ``memlane/stores/`` and ``memlane/registry.py`` no module of ``src/memlane`` imports a
backend package (``memlane.stores.sqlite``, ``memlane.stores.postgres``, ``memlane.stores.redis``:
the packages of :data:`memlane.registry.BACKENDS`) or a storage driver (each row's
``drivers``: ``sqlite3``, ``psycopg``, ``psycopg_pool``, ``pgvector``, ``redis``). Inside
``stores/``, a backend folder imports no other backend's folder or drivers, and the shared
modules (``stores/base.py``, ``stores/transfer.py``, ...) import none at all. The rest of
memlane asks the registry: tenant locations, the ``memlane migrate`` sides and the drivers'
connection errors come from the rows.

Every form counts: ``import x``, ``from x import y``, ``from memlane.stores import sqlite``,
relative imports, imports under ``if TYPE_CHECKING:`` and inside functions, and
``importlib.import_module("x")`` / ``__import__("x")`` with a literal name.

Not drivers: numpy, and usearch (the ANN index the SQLite vector cache builds; it is loaded by
``memlane/_native.py``, which orders it after onnxruntime for the whole process because their
C++ runtimes clash, not by any store protocol). pgserver is not imported at all
(``memlane/devserver.py`` only finds it and runs its binaries).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from memlane.registry import BACKENDS

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = SRC / "memlane"

#: The backends' folders as packages (the in-process session stores are single modules of
#: ``memlane.stores`` itself, not folders).
BACKEND_PACKAGES: dict[str, str] = {b.package: b.name for b in BACKENDS if b.package != "memlane.stores"}
#: Driver top-level package -> the backend whose folder may import it.
DRIVERS: dict[str, str] = {d: b.name for b in BACKENDS for d in b.drivers}

#: The imports allowed outside ``stores/`` and ``registry.py``: (importing module, imported
#: backend package or driver) -> why. Keep this short; each entry is a debt or a real need.
ALLOWED: dict[tuple[str, str], str] = {
    ("memlane.service.keys", "sqlite3"): (
        "the service's API keys file is a small SQLite database of its own, read on every request "
        "whatever the memory backend; it holds no memory, so it is no store behind the registry"
    ),
    ("memlane.config", "memlane.stores.redis.url"): (
        "settings check sessions.redis_url (its syntax, the session limits as URL parameters) when "
        "they are loaded; a pure module of the Redis folder, no driver"
    ),
    ("memlane.settings", "memlane.stores.redis.url"): "the same settings check, where issue 19 part 4 moves it",
}


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    imported: str
    why: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.imported} ({self.why})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The names one AST node imports, dotted in full (``from a import b``: ``a.b``, which is
    module ``a.b`` or a name inside ``a``: either way inside ``a``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base]) if base else ".".join(package)
        return [f"{base}.{a.name}" for a in node.names]
    if isinstance(node, ast.Call) and node.args:
        func, first = node.func, node.args[0]
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and isinstance(first, ast.Constant) and isinstance(first.value, str):
            return [first.value]
    return []


def _owner(name: str) -> tuple[str, str] | None:
    """``(what it is, backend)`` when ``name`` is (inside) a backend package or a driver."""
    for package, backend in BACKEND_PACKAGES.items():
        if name == package or name.startswith(package + "."):
            return package, backend
    top = name.partition(".")[0]
    if top in DRIVERS:
        return top, DRIVERS[top]
    return None


def check_source(source: str, module: str, *, is_package: bool = False) -> list[Violation]:
    """The forbidden imports in one module's source (``module``: its dotted name)."""
    found: dict[tuple[int, str], Violation] = {}
    home = next((b for p, b in BACKEND_PACKAGES.items() if module == p or module.startswith(p + ".")), None)
    for node in ast.walk(ast.parse(source)):
        if module == "memlane.registry":
            break
        for name in _imported(node, module, is_package):
            hit = _owner(name)
            if hit is None or _allowed(module, name):
                continue
            target, backend = hit
            if backend == home:
                continue
            if home is not None:
                why = f"the {home} backend's folder reaches into the {backend} backend's"
            elif module == "memlane.stores" or module.startswith("memlane.stores."):
                why = "a module shared by the backends names one of them"
            else:
                why = "outside stores/ and registry.py: ask memlane.registry instead"
            found.setdefault((getattr(node, "lineno", 0), target), Violation(module, node.lineno, target, why))
    return list(found.values())


def _allowed(module: str, name: str) -> bool:
    return any(module == m and (name == i or name.startswith(i + ".")) for m, i in ALLOWED)


def check_tree(root: Path = ROOT) -> list[Violation]:
    out: list[Violation] = []
    for path in sorted(root.rglob("*.py")):
        out += check_source(path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py")
    return out


def test_no_module_outside_stores_and_the_registry_imports_a_backend_or_a_driver() -> None:
    violations = check_tree()
    assert not violations, "\n".join(map(str, violations))


#: Run in a fresh interpreter: the service, the CLI and migrate imported, a SQLite memory used,
#: a tenant located, an error mapped; then the modules of PostgreSQL and Redis loaded so far.
_USES_SQLITE_ONLY = """
import sys
import memlane.cli.main, memlane.service.app, memlane.transfer
from memlane import Memory
from memlane.service.errors import status_and_code
from memlane.service.hub import tenant_store

with Memory(sys.argv[1], embedder="hash") as m:
    m.add("Sam likes figs", user_id="sam")
    assert m.search("figs", user_id="sam")
tenant_store(sys.argv[1], sys.argv[2], "acme")
status_and_code(ValueError("x"))
other = ("psycopg", "psycopg_pool", "pgvector", "redis", "memlane.stores.postgres", "memlane.stores.redis")
print(sorted(m for m in sys.modules if m in other or m.startswith(tuple(o + "." for o in other))))
"""


def test_a_sqlite_user_imports_no_other_backend_nor_its_driver(tmp_path: Path) -> None:
    """The rows are imported lazily: the core install works without the postgres/redis extras."""
    out = subprocess.run(
        [sys.executable, "-c", _USES_SQLITE_ONLY, str(tmp_path / "m.db"), str(tmp_path / "tenants")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_rows_name_real_folders_and_their_drivers() -> None:
    for b in BACKENDS:
        if b.package == "memlane.stores":
            continue
        folder = SRC.joinpath(*b.package.split("."))
        assert (folder / "__init__.py").is_file(), b
        for entry in (b.stores, b.sessions, b.jobs, b.tenant_location, b.tenants, b.transfer):
            if entry is not None:
                module = entry.rpartition(":")[0]
                assert module == "" or (folder / f"{module.replace('.', '/')}.py").is_file(), (b.name, entry)
        assert {package for package, _ in b.unavailable} <= set(b.drivers), b.name
    # every folder under stores/ is some row's package (a new backend folder needs its row)
    folders = {f"memlane.stores.{p.parent.name}" for p in (ROOT / "stores").glob("*/__init__.py")}
    assert set(BACKEND_PACKAGES) <= folders
    assert {"memlane.stores.sqlite", "memlane.stores.postgres", "memlane.stores.redis"} <= set(BACKEND_PACKAGES)
    assert {"sqlite3", "psycopg", "psycopg_pool", "pgvector", "redis"} <= set(DRIVERS)


def test_every_allowed_import_names_a_backend_or_a_driver() -> None:
    for (_module, imported), why in ALLOWED.items():
        assert _owner(imported) is not None, imported
        assert why.strip()


BAD = [
    ("memlane.service.app", "import psycopg\n"),
    ("memlane.service.app", "from psycopg_pool import AsyncConnectionPool\n"),
    ("memlane.memory", "from memlane.stores.sqlite.db import Database\n"),
    ("memlane.memory", "from memlane.stores import postgres\n"),
    ("memlane.memory", "import memlane.stores.redis.sessions as rs\n"),
    ("memlane.cli.worker_cmd", "def f():\n    import redis.asyncio\n"),
    ("memlane.agent.context", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pgvector\n"),
    ("memlane.agent.context", "import importlib\nimportlib.import_module('memlane.stores.sqlite.facts')\n"),
    ("memlane.agent.context", "__import__('sqlite3')\n"),
    ("memlane.service.routes.memories", "from ...stores.sqlite import open_stores\n"),
    ("memlane.stores.base", "import psycopg\n"),  # shared by the backends
    ("memlane.stores.sqlite.facts", "from memlane.stores.postgres.rows import enc\n"),  # another backend
    ("memlane.stores.redis.jobs", "import sqlite3\n"),  # another backend's driver
    ("memlane.config", "from memlane.stores.redis.sessions import RedisSessionStore\n"),  # not the allowed module
    ("memlane.config", "from memlane.stores.redis import sessions, url\n"),  # url is allowed, sessions not
]


@pytest.mark.parametrize(("module", "source"), BAD)
def test_the_check_finds_a_new_forbidden_import(module: str, source: str) -> None:
    assert len(check_source(textwrap.dedent(source), module)) == 1


GOOD = [
    ("memlane.registry", "import importlib\nfrom memlane.stores.postgres import open_stores\n"),
    ("memlane.stores.postgres.transfer", "from psycopg import sql\nfrom memlane.stores.postgres import db\n"),
    ("memlane.stores.postgres.transfer", "from memlane.stores.transfer import TABLES\n"),
    ("memlane.stores.sqlite.db", "import sqlite3\nfrom . import fts\n"),
    ("memlane.service.keys", "import sqlite3\n"),  # allowed, with its reason
    ("memlane.config", "from memlane.stores.redis import url\nfrom memlane.stores.redis.url import with_params\n"),
    ("memlane.transfer", "from memlane.registry import BACKENDS\nfrom memlane.stores.transfer import TABLES\n"),
    ("memlane.memory", "from memlane.stores.base import FactStore\nfrom memlane.stores.local import LocalMemory\n"),
    ("memlane.service.app", "import redisx\nimport sqlite3x\n"),  # names that only start like a driver
]


@pytest.mark.parametrize(("module", "source"), GOOD)
def test_the_check_lets_the_seam_be(module: str, source: str) -> None:
    assert check_source(source, module) == []


def test_a_forbidden_module_in_a_tree_is_found(tmp_path: Path) -> None:
    """The whole walk, on a copy with one new module that imports a driver."""
    pkg = tmp_path / "memlane"
    (pkg / "service").mkdir(parents=True)
    (pkg / "stores" / "postgres").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "service" / "__init__.py").write_text("")
    (pkg / "service" / "fine.py").write_text("from memlane.registry import backend_of\n")
    (pkg / "service" / "sneaky.py").write_text("async def f():\n    from psycopg import errors\n")
    (pkg / "stores" / "postgres" / "db.py").write_text("import psycopg\n")
    found = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(tmp_path).with_suffix("")
        found += check_source(path.read_text(), ".".join(rel.parts))
    assert [(v.module, v.imported) for v in found] == [("memlane.service.sneaky", "psycopg")]
