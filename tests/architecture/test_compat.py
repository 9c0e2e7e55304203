"""The seeds' names (memlane.compat, docs/compat.md): every alias is what the table says, at its
old place and in ``memlane.compat``; every memlane name in the table exists; the doc is the
table; and the engine's stores are named for what they hold (``memory.stores``)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import memlane.compat as compat
from memlane import AsyncMemory, RetrievalConfig
from memlane.compat import NAMES, SeedName, markdown_table, resolve
from memlane.config import load_settings
from memlane.stores.kaos import KaosNames

ROOT = Path(__file__).resolve().parents[2]


def _row(name: str) -> SeedName:
    [row] = [n for n in NAMES if n.name == name]
    return row


def _python_names(row: SeedName) -> list[str]:
    return [part for part in row.memlane.split(", ") if part.startswith("memlane.")]


def _setting(path: str) -> Any:
    value: Any = load_settings(env={}).model_dump()
    for key in path.split("."):
        value = value[key]
    return value


def test_every_seed_has_rows_and_the_doc_is_the_table() -> None:
    assert {n.seed for n in NAMES} == {"Gaia", "Eden", "KAOS", "elizaOS", "adk-rs"}
    assert len({(n.seed, n.name) for n in NAMES}) == len(NAMES)
    doc = (ROOT / "docs" / "compat.md").read_text(encoding="utf-8")
    assert markdown_table() in doc, "docs/compat.md: paste memlane.compat.markdown_table() under 'The table'"


@pytest.mark.parametrize("row", NAMES, ids=lambda n: f"{n.seed}:{n.name}")
def test_memlane_names_exist(row: SeedName) -> None:
    """A Python name resolves; a dotted settings name (``memory.enabled``) is a setting."""
    names = _python_names(row)
    for name in names:
        resolve(name)
    settings = [p for p in row.memlane.split(", ") if not p.startswith("memlane.") and "=" not in p]
    for path in settings:
        _setting(path)
    assert names or settings or "=" in row.memlane, f"{row.memlane!r} names nothing the test can check"


@pytest.mark.parametrize("row", [n for n in NAMES if n.aliases], ids=lambda n: f"{n.seed}:{n.name}")
def test_aliases_are_what_the_table_says(row: SeedName) -> None:
    [new] = _python_names(row)
    target = resolve(new)
    found = [resolve(a) for a in row.aliases]
    if row.relation == "same":
        assert all(alias is target for alias in found)
    elif row.relation == "subclass":
        first = found[0]
        assert all(alias is first for alias in found), "compat and the old place give one class"
        assert issubclass(first, target) and issubclass(first, KaosNames)
        for method in ("create_session", "get_or_create_session", "create_event", "get_session_events"):
            assert inspect.getattr_static(first, method) is KaosNames.__dict__[method]
    elif row.relation == "method":
        [alias] = found
        name = row.aliases[0].rpartition(".")[2]
        assert alias is KaosNames.__dict__[name]
        for cls in (compat.LocalMemory, compat.NullMemory, compat.RedisMemory):
            assert inspect.getattr_static(cls, name) is alias
    elif row.relation == "module":
        [old] = found
        assert old is not target and old.__all__
        for name in old.__all__:
            assert getattr(old, name) is getattr(target, name)
    else:  # pragma: no cover - a row with aliases has a relation
        pytest.fail(f"{row.name}: aliases with relation {row.relation!r}")


def test_the_aliases_the_issue_names() -> None:
    """Old spellings users import still work, each the same object as memlane's name."""
    from memlane.service.routes import kaos, session_log
    from memlane.stores.local import LocalMemory, LocalSessionStore
    from memlane.stores.null import NullMemory, NullSessionStore
    from memlane.stores.redis.sessions import RedisMemory, RedisSessionStore

    assert compat.LocalMemory is LocalMemory and issubclass(LocalMemory, LocalSessionStore)
    assert compat.NullMemory is NullMemory and issubclass(NullMemory, NullSessionStore)
    assert compat.RedisMemory is RedisMemory and issubclass(RedisMemory, RedisSessionStore)
    assert kaos.router is session_log.router
    assert inspect.getattr_static(RetrievalConfig, "eden") is inspect.getattr_static(RetrievalConfig, "strict")
    assert RetrievalConfig.eden() == RetrievalConfig.strict() != RetrievalConfig()
    assert _row("LocalMemory").relation == "subclass" and _row("RedisMemory").relation == "subclass"
    with pytest.raises(AttributeError):
        compat.NoSuchName  # noqa: B018


def test_the_app_serves_the_session_log_under_kaos_urls() -> None:
    from memlane.service.app import ROUTERS, create_app

    assert "session_log" in ROUTERS and "kaos" not in ROUTERS
    schema = create_app().openapi()
    assert schema["paths"]["/memory/events"]["get"]["operationId"] == "kaos_memory_events"  # unchanged
    assert schema["paths"]["/memory/sessions"]["get"]["operationId"] == "kaos_memory_sessions"


def test_importing_compat_loads_no_redis() -> None:
    code = (
        "import sys, memlane.compat\n"
        "loaded = [m for m in sys.modules if m == 'redis' or m.startswith(('redis.', 'memlane.stores.redis'))]\n"
        "assert not loaded, loaded\n"
        "memlane.compat.RedisMemory\n"
        "assert 'memlane.stores.redis.sessions' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_resolve_reads_classmethods_statically_and_reports_missing_names() -> None:
    assert isinstance(resolve("memlane.RetrievalConfig.strict"), classmethod)
    assert resolve("memlane.agent.config.RecallConfig.window_turns").default == 30
    with pytest.raises(AttributeError):
        resolve("memlane.RetrievalConfig.no_such_method")
    with pytest.raises(ImportError):
        resolve("no_such_package.thing")


async def test_memory_stores_are_named_for_what_they_hold(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash") as memory:
        stores = memory.stores
        assert stores.facts is memory.facts and stores.jobs is memory.jobs
        assert stores.sessions is memory.sessions and stores.contexts is memory.contexts
        assert stores.reflections is memory.reflection_store
        assert callable(memory.reflections)  # the method listing reflections keeps its name
