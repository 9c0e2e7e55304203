"""A core install (``pip install memlane``, no extras): importing a framework adapter fails with
a :class:`~memlane.errors.MissingExtraError` (a memlane ``ConfigError`` and an ``ImportError``)
naming ``pip install 'memlane[EXTRA]'``, while the agent surface (``memlane.agent.*``) works and
never imports a framework.

Every framework is installed here, so a missing one is simulated in a child process by putting
``None`` into ``sys.modules`` for it (``import langgraph`` then raises ``ModuleNotFoundError``,
exactly as when the package is absent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: (adapter module, the framework module it imports first, memlane's extra)
ADAPTERS = [
    ("adk", "google.adk", "adk"),
    ("langgraph", "langgraph", "langgraph"),
    ("openai_agents", "agents", "openai-agents"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
]

#: Everything a core install lacks: the four frameworks (and what they bring), the optional
#: extras' packages (tokenizers, threadpoolctl, onnx and onnxruntime for MiniLM, httpx for remote
#: providers, tqdm).
NOT_IN_CORE = [
    "google.adk",
    "google.genai",
    "langgraph",
    "langchain_core",
    "agents",
    "openai",
    "pydantic_ai",
    "tokenizers",
    "httpx",
    "tqdm",
    "threadpoolctl",
    "onnx",
    "onnxruntime",
]


def _child(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "MEMLANE_DB": str(tmp_path / "m.db")}
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(("adapter", "framework", "extra"), ADAPTERS)
def test_adapter_without_its_extra_names_the_pip_command(
    tmp_path: Path, adapter: str, framework: str, extra: str
) -> None:
    run = _child(
        f"""
        import json, sys
        sys.modules[{framework!r}] = None  # the framework is not installed
        from memlane.errors import ConfigError, MemlaneError, MissingExtraError
        try:
            import memlane.adapters.{adapter}
        except ImportError as exc:
            print(json.dumps({{
                "type": type(exc).__name__,
                "memlane": isinstance(exc, MemlaneError),
                "config": isinstance(exc, ConfigError),
                "message": str(exc),
                "name": exc.name,
                "left_in_sys_modules": "memlane.adapters.{adapter}" in sys.modules,
            }}))
        else:
            print(json.dumps({{"type": None}}))
        """,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["type"] == "MissingExtraError", got
    assert got["memlane"] and got["config"]
    assert f"pip install 'memlane[{extra}]'" in got["message"]
    assert f"memlane.adapters.{adapter} needs " in got["message"]
    assert got["name"].startswith(framework)  # ImportError.name: the (sub)module that failed
    assert not got["left_in_sys_modules"]  # installing the extra and importing again works


def test_missing_extra_error_is_a_config_error_and_an_import_error() -> None:
    from memlane import MissingExtraError
    from memlane.errors import ConfigError

    exc = MissingExtraError("memlane.adapters.x needs X: pip install 'memlane[x]'", name="x")
    assert isinstance(exc, ConfigError) and isinstance(exc, ImportError)
    assert str(exc) == "memlane.adapters.x needs X: pip install 'memlane[x]'" and exc.name == "x"


_AGENT_FLOW = """
    import json, sys
    BLOCKED = {blocked!r}
    for name in BLOCKED:
        sys.modules[name] = None

    from memlane import Memory
    from memlane.agent import (MemoryTools, StateMessage, SyncStateComposer, handle_command_sync,
                               memory_tools, provision, resolve_contact_sync)
    import memlane.agent.commands, memlane.agent.contacts, memlane.agent.context
    import memlane.agent.state, memlane.agent.tools

    out = {{}}
    with Memory("core.db", embedder={embedder!r}) as m:
        tools = MemoryTools(m, user_id="ana", agent_id="chef", session_id="ana:cli")
        out["schemas"] = [len(tools.schemas(f)) for f in ("openai", "openai_responses", "anthropic", "gemini")]
        tools.remember_sync("Ana is allergic to peanuts")
        out["command"] = handle_command_sync(m, "/remember Ana's oven is a Bosch", user_id="ana", agent_id="chef").text
        out["found"] = [r["content"] for r in tools.search_facts_sync(["peanuts"], top_k=3)["results"]]
        out["loaded"] = [x["content"] for x in tools.load_memory_sync("oven")["memories"]]
        out["preload"] = tools.preload_memory_sync("peanuts", "SYSTEM")
        out["context"] = m.context(user_id="ana", agent_id="chef", profile=False)
        out["state"] = SyncStateComposer(m).compose_state(StateMessage("hi", user_id="ana"), only=["profile"]).text
        m.add("My girlfriend is Dana, her number is +1 555 0100", user_id="ana")
        out["contact"] = resolve_contact_sync(m, "my girlfriend", user_id="ana").address
        out["provisioned"] = len(provision([], memory_tools(m, user_id="ana", enabled=True), format="openai"))
        # another user of the same file sees none of it
        bob = MemoryTools(m, user_id="bob", agent_id="chef")
        out["bob_found"] = bob.search_facts_sync(["peanuts", "oven"], top_k=5)["results"]
        out["bob_memory"] = handle_command_sync(m, "/memory", user_id="bob", agent_id="chef").text
        out["bob_context"] = m.context(user_id="bob", agent_id="chef", profile=False)
        m.sessions.get_or_create_session(session_id="ana:cli", user_ids=["ana"])
        out["window"] = len(m.window("ana:cli"))
    FRAMEWORKS = ("google.adk", "google.genai", "langgraph", "langchain_core", "agents", "openai", "pydantic_ai")
    out["imported"] = sorted(n for n in FRAMEWORKS if sys.modules.get(n) is not None)
    print(json.dumps(out))
"""


@pytest.mark.parametrize(
    ("blocked", "embedder"),
    [
        pytest.param(NOT_IN_CORE, "hash", id="core-install-hash"),
        pytest.param(NOT_IN_CORE, "auto", id="core-install-auto-keyword-only"),
        pytest.param([], "hash", id="everything-installed"),
    ],
)
def test_agent_surface_works_on_a_core_install_and_imports_no_framework(
    tmp_path: Path, blocked: list[str], embedder: str
) -> None:
    run = _child(_AGENT_FLOW.format(blocked=blocked, embedder=embedder), tmp_path)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["imported"] == []  # memlane.agent.* never imports an agent framework
    assert out["schemas"] == [3, 3, 3, 1]
    assert out["command"] == "Got it, I'll remember that."
    assert out["found"][0] == "Ana is allergic to peanuts"
    assert out["loaded"] == ["Ana's oven is a Bosch"]
    assert out["preload"].startswith("SYSTEM\n\nRelevant prior context:\n- Ana is allergic to peanuts")
    assert "- [user] Ana is allergic to peanuts (just now)" in out["context"]
    assert "Ana is allergic to peanuts" in out["state"] and "<USER_PROFILE>" in out["state"]
    assert out["contact"] == "+15550100"
    assert out["provisioned"] == 3
    assert out["bob_found"] == [] and out["bob_context"] == ""
    assert "peanuts" not in out["bob_memory"] and "Bosch" not in out["bob_memory"]
    assert out["window"] == 0
    if embedder == "auto" and blocked:  # no tokenizers: keyword-only, one warning on stderr
        assert "search is keyword-only" in run.stderr
