"""memlane's import graph: no circle, and arrows point down the layers (issue 19).

The graph is read from the source with ``ast``: module-level imports and imports inside
functions both count (a lazy import is still a dependency); imports under
``if TYPE_CHECKING:`` do not (they never run). An arrow ``a -> b`` means module ``a`` imports
module ``b`` (``from pkg import name`` points at ``pkg.name`` when that is a module, else at
``pkg``).

Layers, lowest first (a module may import its own layer and the layers below it):

1. foundation: errors, models, inputs, the leaf helpers (``_env``, ``_cpu``, ``_native``,
   ``_portal``) and the pure settings objects (``formation.config``, ``agent.config``);
2. parts: retrieval, PII redaction (``privacy/``), providers, policy, session windows, ``ingest/`` (documents, messages,
   bulk), the formation models and prompts;
3. stores: ``stores/`` (transfer: ``memlane migrate``'s copy), the registry;
4. settings: the settings model and the engine arguments it describes;
5. engine parts: formation pipeline and runner, ``engine/`` (search orchestration:
   ``engine/search.py``), the embedding queue (``ingest/embedding_queue.py``);
6. engine: ``memory.py`` (``AsyncMemory``);
7. facade and integrations: ``sync.py``, ``agent/``, ``adapters/``, importers
   (``ingest/importers.py``), evaluation,
   the package root, ``memlane.testing``, ``memlane.compat`` (the seeds' names);

8. edges: ``config.py`` (engines built from settings), ``service/``, ``cli/``, the dev server.

The modules that moved into rooms (``memlane.search``, ``memlane.transfer``, ``memlane.messages``,
...) stay importable under their old names (a module aliasing the moved one), each in its
moved module's layer.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "memlane.errors",
            "memlane.models",
            "memlane.inputs",
            "memlane._env",
            "memlane._cpu",
            "memlane._native",
            "memlane._portal",
            "memlane.formation.config",
            "memlane.formation.names",
            "memlane.agent.config",
        ),
    ),
    (
        "parts",
        (
            "memlane.retrieval",
            "memlane.privacy",
            "memlane.providers",
            "memlane.policy",
            "memlane.sessions",
            "memlane.documents",
            "memlane.messages",
            "memlane.bulk",
            "memlane.ingest",
            "memlane.formation",
            "memlane.evaluation._files",
        ),
    ),
    ("stores", ("memlane.stores", "memlane.registry", "memlane.transfer")),
    ("settings", ("memlane.settings",)),
    (
        "engine parts",
        (
            "memlane.formation.pipeline",
            "memlane.formation.runner",
            "memlane.search",
            "memlane.embedding_queue",
            "memlane.ingest.embedding_queue",
            "memlane.engine",
        ),
    ),
    ("engine", ("memlane.memory",)),
    (
        "facade",
        (
            "memlane.sync",
            "memlane._binding",
            "memlane.agent",
            "memlane.adapters",
            "memlane.importers",
            "memlane.ingest.importers",
            "memlane.evaluation",
            "memlane.testing",
            "memlane.compat",
        ),
    ),
    ("edges", ("memlane.config", "memlane.service", "memlane.cli", "memlane.devserver")),
)
#: The package root (``memlane/__init__.py``, the public API) is in the facade layer; named
#: apart because its name is every module's prefix.
ROOT_LAYER = "facade"

#: Arrows from a lower layer up to a higher one that are allowed, each with its reason.
#: At most two; today none.
ALLOWED_UPWARD: Mapping[tuple[str, str], str] = {}


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package: dotted name -> file (a package is its ``__init__``)."""
    out: dict[str, Path] = {}
    for path in (src / "memlane").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, source: str, known: Iterable[str], *, package: bool = False) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in ``source`` but
    under ``if TYPE_CHECKING:``."""
    known = set(known)
    pkg = name if package else name.rpartition(".")[0]
    out: set[str] = set()

    def nearest(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_one(stmt)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.update(t for a in node.names if (t := nearest(a.name)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                full = f"{module}.{a.name}"
                target = full if full in known else nearest(module)
                if target:
                    out.add(target)
        visit(node)

    visit(ast.parse(source))
    out.discard(name)
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    mods = modules(src)
    return {
        name: imports_of(name, path.read_text(encoding="utf-8"), mods, package=path.name == "__init__.py")
        for name, path in mods.items()
    }


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the longest prefix naming ``module`` (None: unplaced)."""
    if module == "memlane":
        return [name for name, _ in LAYERS].index(ROOT_LAYER)
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def upward(graph: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """Arrows from a module to one in a higher layer."""
    out = []
    for a, targets in graph.items():
        for b in targets:
            la, lb = layer_of(a), layer_of(b)
            if la is not None and lb is not None and lb > la:
                out.append((a, b))
    return sorted(out)


# ---------------------------------------------------------------------------- memlane itself


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in modules() if layer_of(m) is None)
    assert not unplaced, f"place these modules in a layer of tests/architecture/test_import_graph.py LAYERS: {unplaced}"


def test_no_import_circle() -> None:
    assert cycles(import_graph()) == []


def test_arrows_point_down_the_layers() -> None:
    assert len(ALLOWED_UPWARD) <= 2, "issue 19: at most two arrows from a lower layer up to a higher one"
    found = upward(import_graph())
    shown = [f"{a} ({LAYERS[layer_of(a) or 0][0]}) -> {b} ({LAYERS[layer_of(b) or 0][0]})" for a, b in found]
    assert set(found) <= set(ALLOWED_UPWARD), "upward imports:\n" + "\n".join(shown)
    stale = set(ALLOWED_UPWARD) - set(found)
    assert not stale, f"allowed upward arrows that no longer exist (remove them): {sorted(stale)}"


def test_leaf_and_settings_modules_stay_low() -> None:
    """The modules every layer may use import nothing above them: the leaf helpers import
    only errors, and the settings never import the engine."""
    graph = import_graph()
    assert graph["memlane._env"] <= {"memlane.errors"}
    assert "memlane.memory" not in graph["memlane.settings"]
    assert "memlane.memory" not in graph["memlane.engine.context"]
    assert "memlane.config" not in graph["memlane.memory"]


# ---------------------------------------------------------------------------- the checker


def test_imports_of_counts_function_imports_and_skips_type_checking() -> None:
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        from memlane import models
        from . import inputs
        if TYPE_CHECKING:
            from memlane.memory import AsyncMemory
        else:
            import memlane.errors

        def later():
            from memlane.sync import Memory
            return Memory
        """
    )
    known = {"memlane", "memlane.models", "memlane.inputs", "memlane.memory", "memlane.errors", "memlane.sync"}
    assert imports_of("memlane.search", source, known) == {
        "memlane.models",
        "memlane.inputs",
        "memlane.errors",
        "memlane.sync",
    }


def test_checker_finds_a_circle_and_an_upward_arrow() -> None:
    graph = {
        "memlane.memory": {"memlane.settings"},
        "memlane.settings": {"memlane.memory"},  # a circle, and settings -> engine is upward
        "memlane.errors": set(),
    }
    assert cycles(graph) == [["memlane.memory", "memlane.settings"]]
    assert upward(graph) == [("memlane.settings", "memlane.memory")]
    assert upward({"memlane.stores.redis.url": {"memlane.config"}}) == [("memlane.stores.redis.url", "memlane.config")]
