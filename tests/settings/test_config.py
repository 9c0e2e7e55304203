"""The one settings model: defaults < YAML file < environment, sources, secrets, errors, the
engine mapping, and ``memlane config show`` (run as a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memlane.cli.main import main
from memlane.config import (
    ENV_VARS,
    SECRET_ENV_VARS,
    MemlaneSettings,
    build_memory,
    formation_config,
    load_settings,
    redact_url,
)
from memlane.errors import ConfigError
from memlane.models import Event
from memlane.stores.local import LocalMemory
from memlane.stores.null import NullMemory


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return tmp_path / "memlane.yaml"


# ---------------------------------------------------------------------------- defaults, precedence
def test_defaults_are_gaias_and_kaoss() -> None:
    s = load_settings(env={})
    m, ss, srv = s.memory, s.sessions, s.server
    assert (m.enabled, m.auto_ingest, m.recall_limit, m.preload, m.preload_limit) == (True, True, 5, True, 20)
    assert (m.extraction_instructions, m.llm, m.strong_llm, m.embedder) == ("", "offline", None, "auto")
    assert ss.backend == "sqlite"
    assert (ss.window_turns, ss.idle_consolidate_minutes, ss.context_limit) == (30, 30.0, None)
    assert (ss.max_sessions, ss.max_session_events, ss.redis_url) == (1000, 500, None)
    assert (srv.host, srv.port, srv.rate_limit) == ("127.0.0.1", 8000, 600)
    assert s.config_file is None
    assert {src for _, _, src in s.items()} == {"default"}


def test_file_overrides_defaults_and_env_overrides_file(cfg: Path) -> None:
    write(cfg, "memory:\n  recall_limit: 7\n  llm: ollama:llama3.1\nsessions:\n  context_limit: 3\n")
    s = load_settings(cfg, env={"MEMORY_CONTEXT_LIMIT": "9"})
    assert s.memory.recall_limit == 7
    assert s.source("memory.recall_limit") == f"file:{cfg}"
    assert s.memory.llm == "ollama:llama3.1"
    assert s.sessions.context_limit == 9  # env beats the file
    assert s.source("sessions.context_limit") == "env:MEMORY_CONTEXT_LIMIT"
    assert s.memory.preload_limit == 20
    assert s.source("memory.preload_limit") == "default"
    assert s.config_file == str(cfg)


def test_memlane_config_names_the_file_and_an_argument_wins(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "memory:\n  recall_limit: 11\n")
    b = write(tmp_path / "b.yaml", "memory:\n  recall_limit: 12\n")
    assert load_settings(env={"MEMLANE_CONFIG": str(a)}).memory.recall_limit == 11
    assert load_settings(b, env={"MEMLANE_CONFIG": str(a)}).memory.recall_limit == 12


def test_blank_variables_count_as_unset(cfg: Path) -> None:
    write(cfg, "memory:\n  llm: ollama:x\n")
    s = load_settings(cfg, env={"MEMLANE_LLM": "  ", "MEMLANE_CONFIG": ""})
    assert s.memory.llm == "ollama:x"


KAOS = [
    ("MEMORY_ENABLED", "false", "memory.enabled", False),
    ("MEMORY_TYPE", "local", "sessions.backend", "local"),
    ("MEMORY_TYPE", "redis", "sessions.backend", "redis"),
    ("MEMORY_CONTEXT_LIMIT", "12", "sessions.context_limit", 12),
    ("MEMORY_MAX_SESSIONS", "50", "sessions.max_sessions", 50),
    ("MEMORY_MAX_SESSION_EVENTS", "40", "sessions.max_session_events", 40),
    ("MEMORY_REDIS_URL", "redis://localhost:6379/2", "sessions.redis_url", "redis://localhost:6379/2"),
]


@pytest.mark.parametrize(("name", "raw", "key", "value"), KAOS)
def test_every_kaos_variable(cfg: Path, name: str, raw: str, key: str, value: Any) -> None:
    # The file sets something else for the same key: the variable must win.
    block, field = key.split(".")
    other = {"memory.enabled": "true", "sessions.backend": "null", "sessions.redis_url": "redis://other:1/0"}
    write(cfg, f"{block}:\n  {field}: {other.get(key, '1')}\n")
    s = load_settings(cfg, env={name: raw})
    assert s.get(key) == value
    assert s.source(key) == f"env:{name}"


SAMPLES: dict[str, str] = {
    "memory.enabled": "off",
    "memory.auto_ingest": "no",
    "memory.recall_limit": "8",
    "memory.preload": "0",
    "memory.preload_limit": "9",
    "memory.extraction_instructions": "Only food preferences.",
    "memory.keep_user_turns": "false",
    "memory.review": "true",
    "memory.session_summaries": "false",
    "memory.keyword_feedback": "true",
    "memory.window_bonus": "0.15",
    "memory.llm": "openai:gpt-4o-mini",
    "memory.strong_llm": "openai:gpt-4o",
    "memory.embedder": "hash",
    "memory.store": "/tmp/x/memlane.db",
    "memory.queue": "redis://q:6379/0",
    "memory.redact": "email,phone",
    "sessions.backend": "null",
    "sessions.window_turns": "10",
    "sessions.idle_consolidate_minutes": "2.5",
    "sessions.context_limit": "4",
    "sessions.max_sessions": "3",
    "sessions.max_session_events": "2",
    "sessions.redis_url": "redis://h:6379/1",
    "server.host": "0.0.0.0",
    "server.port": "9001",
    "server.keys_file": "/tmp/x/keys.db",
    "server.max_body_bytes": "2048",
    "server.body_timeout": "2.5",
    "server.max_page_size": "25",
    "server.rate_limit": "0",
    "server.tenants_dir": "/tmp/x/tenants",
    "server.reload_interval": "0.5",
    "server.formation_worker": "false",
}


@pytest.mark.parametrize("name", sorted(ENV_VARS))
def test_every_variable_sets_its_setting(name: str) -> None:
    key = ENV_VARS[name]
    s = load_settings(env={name: SAMPLES[key]})
    assert s.source(key) == f"env:{name}"
    assert s.get(key) != load_settings(env={}).get(key)


def test_every_setting_has_a_variable() -> None:
    keys = [k for k, _, _ in load_settings(env={}).items()]
    assert sorted(ENV_VARS.values()) == sorted(keys) == sorted(SAMPLES)


def test_existing_memlane_variables_keep_working() -> None:
    s = load_settings(env={"MEMLANE_DB": "/tmp/m.db", "MEMLANE_EMBEDDER": "hash", "MEMLANE_LLM": "ollama:q"})
    assert (s.memory.store, s.memory.embedder, s.memory.llm) == ("/tmp/m.db", "hash", "ollama:q")


def test_none_disables_nullable_settings() -> None:
    s = load_settings(env={"MEMLANE_IDLE_CONSOLIDATE_MINUTES": "none"})
    assert s.sessions.idle_consolidate_minutes is None


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("MEMORY_CONTEXT_LIMIT", "six"),
        ("MEMORY_MAX_SESSIONS", "0"),
        ("MEMORY_TYPE", "postgres"),
        ("MEMORY_ENABLED", "maybe"),
        ("MEMLANE_PORT", "70000"),
    ],
)
def test_a_bad_variable_is_named(name: str, raw: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(env={name: raw})
    assert str(exc.value).startswith(f"{name}={raw!r}: {ENV_VARS[name]}")


def test_relative_paths_in_the_file_are_relative_to_the_file(tmp_path: Path) -> None:
    sub = tmp_path / "etc"
    sub.mkdir()
    cfg = write(sub / "m.yaml", "memory:\n  store: data/m.db\nserver:\n  tenants_dir: t\n  keys_file: /abs/k.json\n")
    s = load_settings(cfg, env={})
    assert s.memory.store == str(sub / "data" / "m.db")
    assert s.server.tenants_dir == str(sub / "t")
    assert s.server.keys_file == "/abs/k.json"
    assert load_settings(write(cfg, "memory:\n  store: ':memory:'\n"), env={}).memory.store == ":memory:"


def test_empty_file_and_empty_blocks_are_defaults(cfg: Path) -> None:
    assert load_settings(write(cfg, ""), env={}).memory.recall_limit == 5
    assert load_settings(write(cfg, "memory:\nsessions:\n"), env={}).sessions.window_turns == 30


# ---------------------------------------------------------------------------- YAML errors
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory:\n  recall_limit: 5\n  recal_limit: 6\n", ":3: unknown key 'memory.recal_limit'"),
        ("memory:\n  enabled: true\nsesions:\n  window_turns: 3\n", ":3: unknown key 'sesions'"),
        ("sessions:\n  window_turns: many\n", ":2: sessions.window_turns: Input should be a valid integer"),
        ("sessions:\n  backend: postgres\n", ":2: sessions.backend: Input should be"),
        ("memory:\n  recall_limit: 0\n", ":2: memory.recall_limit: Input should be greater than or equal to 1"),
        ("memory:\n  llm: a\n  llm: b\n", ":3: memory.llm is set twice"),
        ("memory: [1, 2]\n", ":1: memory: must be a mapping"),
        ("- memory\n", "must be a mapping with memory:, sessions: and server: blocks"),
        ("memory:\n  llm: 'open\n", "not valid YAML"),
    ],
)
def test_yaml_errors_name_the_file_and_line(cfg: Path, text: str, expected: str) -> None:
    write(cfg, text)
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg, env={})
    assert str(exc.value).startswith(str(cfg))
    assert expected in str(exc.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.yaml", env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(env={"MEMLANE_CONFIG": str(tmp_path / "nope.yaml")})


# ---------------------------------------------------------------------------- secrets
@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("memory:\n  llm: openai:gpt-4o-mini\n  api_key: sk-live-123\n", 3, "memory.api_key"),
        ("openai_api_key: sk-live-123\n", 1, "openai_api_key"),
        ("sessions:\n  redis_password: hunter2\n", 2, "sessions.redis_password"),
        ("server:\n  token: abc\n", 2, "server.token"),
        ("memory:\n  llm:\n    provider: openai\n    secret: x\n", 4, "memory.llm.secret"),
    ],
)
def test_secret_keys_in_yaml_are_refused(cfg: Path, text: str, line: int, key: str) -> None:
    write(cfg, text)
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg, env={})
    msg = str(exc.value)
    assert msg.startswith(f"{cfg}:{line}: {key!r} looks like a secret")
    assert "only from the environment" in msg
    assert "sk-live-123" not in msg and "hunter2" not in msg


@pytest.mark.parametrize(
    ("text", "env_name"),
    [
        ("sessions:\n  redis_url: redis://:hunter2@cache:6379/0\n", "MEMORY_REDIS_URL"),
        ("memory:\n  store: postgresql://app:hunter2@db/memlane\n", "MEMLANE_DB"),
    ],
)
def test_passwords_in_yaml_urls_are_refused(cfg: Path, text: str, env_name: str) -> None:
    write(cfg, text)
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg, env={})
    msg = str(exc.value)
    assert msg.startswith(f"{cfg}:2:") and "URL with a password" in msg and env_name in msg
    assert "hunter2" not in msg


def test_a_url_without_password_is_fine_in_yaml_and_a_password_is_fine_in_env(cfg: Path) -> None:
    write(cfg, "sessions:\n  redis_url: redis://cache:6379/0\n")
    assert load_settings(cfg, env={}).sessions.redis_url == "redis://cache:6379/0"
    s = load_settings(cfg, env={"MEMORY_REDIS_URL": "redis://u:hunter2@cache:6379/0"})
    assert s.sessions.redis_url == "redis://u:hunter2@cache:6379/0"
    shown = json.dumps(s.redacted())
    assert "hunter2" not in shown and "redis://u:***@cache:6379/0" in shown


def test_redact_url() -> None:
    assert redact_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("redis://:pw@h:port/0") == "redis://:***@h:port/0"  # a bad port still hides the password
    assert redact_url("postgresql://app:pw@db/x?sslmode=require") == "postgresql://app:***@db/x?sslmode=require"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert redact_url("/var/lib/memlane.db") == "/var/lib/memlane.db"


def test_redacted_view_lists_secret_variables_without_values() -> None:
    s = load_settings(env={"OPENAI_API_KEY": "sk-live-123"})
    shown = s.redacted()
    assert shown["secrets"]["OPENAI_API_KEY"] == "set (redacted)"
    assert shown["secrets"]["ANTHROPIC_API_KEY"] == "not set"
    assert set(shown["secrets"]) == set(SECRET_ENV_VARS)
    assert "sk-live-123" not in json.dumps(shown)


# ---------------------------------------------------------------------------- the engine
def test_formation_config_maps_the_settings() -> None:
    s = MemlaneSettings.model_validate(
        {
            "memory": {
                "enabled": False,
                "auto_ingest": False,
                "preload": False,
                "preload_limit": 7,
                "extraction_instructions": "Only names.",
                "llm": "ollama:llama3.1",
                "strong_llm": "ollama:qwen3",
            },
            "sessions": {"idle_consolidate_minutes": 2.5},
        }
    )
    f = formation_config(s)
    assert (f.enabled, f.auto_ingest, f.preload, f.preload_limit) == (False, False, False, 7)
    assert (f.extraction_instructions, f.idle_minutes) == ("Only names.", 2.5)
    assert (f.model, f.strong_model) == ("ollama:llama3.1", "ollama:qwen3")
    assert formation_config(s, background=False).background is False


async def test_build_memory_maps_store_embedder_and_sessions(tmp_path: Path) -> None:
    s = load_settings(
        env={
            "MEMLANE_DB": str(tmp_path / "a.db"),
            "MEMLANE_EMBEDDER": "hash",
            "MEMORY_TYPE": "local",
            "MEMORY_MAX_SESSIONS": "3",
            "MEMORY_MAX_SESSION_EVENTS": "2",
            "MEMLANE_PRELOAD_LIMIT": "4",
        }
    )
    async with build_memory(s) as m:
        assert m.db_path == str(tmp_path / "a.db")
        assert m.formation_config.preload_limit == 4
        assert m.embedder is not None and m.embedder.name.startswith("hash")
        assert isinstance(m.sessions, LocalMemory)
        assert (m.sessions.max_sessions, m.sessions.max_session_events) == (3, 2)
        await m.sessions.create_session(session_id="s1", user_ids=["alice"])
        for i in range(3):
            await m.add_event("s1", Event(content=f"turn {i}"))
        got = await m.sessions.get_session("s1")
        assert got is not None and [e.content for e in got.events] == ["turn 1", "turn 2"]
    assert (tmp_path / "a.db").exists()
    other = tmp_path / "b.db"
    async with build_memory(s, store=other) as m:
        assert m.db_path == str(other)


async def test_build_memory_null_and_sqlite_sessions(tmp_path: Path) -> None:
    s = load_settings(env={"MEMLANE_DB": str(tmp_path / "a.db"), "MEMLANE_EMBEDDER": "none", "MEMORY_TYPE": "null"})
    async with build_memory(s) as m:
        assert isinstance(m.sessions, NullMemory)
    s = load_settings(env={"MEMLANE_DB": str(tmp_path / "a.db"), "MEMLANE_EMBEDDER": "none"})
    async with build_memory(s) as m:
        assert type(m.sessions).__name__ == "SqliteSessionStore"


def test_redis_sessions_get_the_local_bounds_as_url_parameters() -> None:
    from memlane.config import session_backend
    from memlane.stores.redis.url import parse_redis_url

    env = {"MEMORY_TYPE": "redis", "MEMORY_REDIS_URL": "redis://:hunter2@localhost:6379/0?prefix=app:"}
    s = load_settings(env={**env, "MEMORY_MAX_SESSIONS": "50", "MEMORY_MAX_SESSION_EVENTS": "40"})
    url = session_backend(s)
    assert isinstance(url, str)
    loc = parse_redis_url(url)
    assert (loc.prefix, loc.max_sessions, loc.max_session_events) == ("app:", 50, 40)
    assert loc.url.startswith("redis://:hunter2@localhost:6379/0")
    # a bound the URL sets itself wins over the setting
    s = load_settings(env={**env, "MEMORY_REDIS_URL": env["MEMORY_REDIS_URL"] + "&max_sessions=7"})
    url = session_backend(s)
    assert isinstance(url, str) and parse_redis_url(url).max_sessions == 7


def test_redis_sessions_need_a_good_url() -> None:
    with pytest.raises(ConfigError, match="needs a URL: set MEMORY_REDIS_URL"):
        build_memory(load_settings(env={"MEMORY_TYPE": "redis"}))
    bad = load_settings(env={"MEMORY_TYPE": "redis", "MEMORY_REDIS_URL": "redis://:hunter2@h:6379/0?ttl=-1"})
    with pytest.raises(ConfigError, match="ttl") as exc:
        build_memory(bad)
    assert "hunter2" not in str(exc.value) and "***" in str(exc.value)


def test_memory_queue_is_the_job_queue_and_keeps_its_password_in_the_environment(cfg: Path) -> None:
    s = load_settings(env={"MEMLANE_QUEUE": "redis://:hunter2@q:6379/0?prefix=jobs:"})
    assert s.memory.queue == "redis://:hunter2@q:6379/0?prefix=jobs:"
    assert "hunter2" not in json.dumps(s.redacted())
    assert build_memory(s)._jobs_spec == "redis://:hunter2@q:6379/0?prefix=jobs:"
    assert build_memory(load_settings(env={}))._jobs_spec is None
    write(cfg, "memory:\n  queue: redis://:hunter2@q:6379/0\n")
    with pytest.raises(ConfigError, match="MEMLANE_QUEUE"):
        load_settings(cfg, env={})


def test_bad_provider_names_fail_when_building() -> None:
    with pytest.raises(ConfigError):
        build_memory(load_settings(env={"MEMLANE_EMBEDDER": "nonsense:thing"}))


async def test_memory_isolation_holds_on_a_settings_built_engine(tmp_path: Path) -> None:
    s = load_settings(env={"MEMLANE_DB": str(tmp_path / "a.db"), "MEMLANE_EMBEDDER": "hash"})
    async with build_memory(s) as m:
        await m.add("I am vegetarian", user_id="alice")
        res = await m.search("vegetarian", user_id="bob")
        assert res.hits == []
        assert [h.fact.content for h in (await m.search("vegetarian", user_id="alice")).hits] == ["I am vegetarian"]


# ---------------------------------------------------------------------------- the CLI
def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not (k.startswith(("MEMLANE_", "MEMORY_")) or k in SECRET_ENV_VARS)}
    return subprocess.run(
        [sys.executable, "-m", "memlane.cli.main", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def test_config_show_redacts_secrets_and_names_sources(cfg: Path) -> None:
    write(cfg, "memory:\n  recall_limit: 9\n  llm: openai:gpt-4o-mini\nsessions:\n  backend: local\n")
    env = {
        "OPENAI_API_KEY": "sk-live-SECRET123",
        "MEMORY_REDIS_URL": "redis://user:hunter2@cache:6379/0",
        "MEMORY_CONTEXT_LIMIT": "8",
    }
    out = cli("config", "show", "--config", str(cfg), env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "sk-live-SECRET123" not in text and "hunter2" not in text
    assert f"config file: {cfg}" in text
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert lines["memory.recall_limit"][1:] == ["9", f"file:{cfg}"]
    assert lines["sessions.context_limit"][1:] == ["8", "env:MEMORY_CONTEXT_LIMIT"]
    assert lines["sessions.redis_url"][1:] == ["redis://user:***@cache:6379/0", "env:MEMORY_REDIS_URL"]
    assert lines["memory.preload_limit"][1:] == ["20", "default"]
    assert lines["OPENAI_API_KEY"][1:] == ["set", "(redacted)"]
    assert lines["ANTHROPIC_API_KEY"][1:] == ["not", "set"]

    js = cli("config", "show", "--json", env={**env, "MEMLANE_CONFIG": str(cfg)})
    assert js.returncode == 0, js.stderr
    assert "sk-live-SECRET123" not in js.stdout and "hunter2" not in js.stdout
    data = json.loads(js.stdout)
    assert data["config_file"] == str(cfg)
    assert data["values"]["sessions.backend"] == {"value": "local", "source": f"file:{cfg}"}
    assert data["values"]["sessions.redis_url"]["value"] == "redis://user:***@cache:6379/0"
    assert data["secrets"]["OPENAI_API_KEY"] == "set (redacted)"


def test_config_show_without_a_file() -> None:
    out = cli("config", "show")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("config file: none")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory:\n  api_key: sk-live-SECRET123\n", ":2: 'memory.api_key' looks like a secret"),
        ("memory:\n  bogus: 1\n", ":2: unknown key 'memory.bogus'"),
    ],
)
def test_config_errors_are_one_line(cfg: Path, text: str, expected: str) -> None:
    write(cfg, text)
    for args in (("config", "show", "--config", str(cfg)), ("--config", str(cfg), "stats")):
        out = cli(*args)
        assert out.returncode == 2
        assert out.stdout == ""
        assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"memlane: error: {cfg}{expected}")
        assert "sk-live-SECRET123" not in out.stderr


def test_a_bad_variable_is_one_line_in_the_cli() -> None:
    out = cli("config", "show", env={"MEMORY_CONTEXT_LIMIT": "lots"})
    assert out.returncode == 2
    assert out.stderr.startswith("memlane: error: MEMORY_CONTEXT_LIMIT='lots': sessions.context_limit")


def test_config_help() -> None:
    out = cli("config", "show", "--help")
    assert out.returncode == 0
    assert "usage: memlane config show" in out.stdout and "--config FILE" in out.stdout and "--json" in out.stdout


def test_the_cli_reads_its_defaults_from_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("MEMLANE_CONFIG", raising=False)
    cfg = write(tmp_path / "m.yaml", "memory:\n  store: from-file.db\n  embedder: hash\n")
    assert main(["--config", str(cfg), "-q", "add", "I like tea", "-u", "alice"]) == 0
    assert (tmp_path / "from-file.db").exists()
    capsys.readouterr()
    assert main(["search", "tea", "-u", "alice", "--config", str(cfg), "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [h["fact"]["content"] for h in hits] == ["I like tea"]
    assert main(["search", "tea", "-u", "bob", "--config", str(cfg), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hits"] == []
    # an explicit --db still wins over the file
    assert (
        main(["--config", str(cfg), "-q", "--db", str(tmp_path / "flag.db"), "add", "I like coffee", "-u", "al"]) == 0
    )
    assert (tmp_path / "flag.db").exists()


# ---------------------------------------------------------------------------- the docs
DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_documented_reference_is_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    text = DOC.read_text(encoding="utf-8")
    reference = re.findall(r"```yaml\n(.*?)```", text, re.S)[0]
    s = load_settings(write(tmp_path / "ref.yaml", reference), env={})
    defaults = load_settings(env={})
    assert [(k, v) for k, v, _ in s.items()] == [(k, v) for k, v, _ in defaults.items()]
    for name in ENV_VARS:
        assert f"| `{name}` | `{ENV_VARS[name]}`" in text, name


def test_overrides_beat_the_environment_and_are_checked(cfg: Path) -> None:
    s = load_settings(env={"MEMLANE_LLM": "ollama:a"}, overrides={"memory.llm": "ollama:b"})
    assert (s.memory.llm, s.source("memory.llm"), s.overrides) == ("ollama:b", "cli", {"memory.llm": "ollama:b"})
    with pytest.raises(ConfigError, match=r"unknown setting 'memory\.nope'"):
        load_settings(env={}, overrides={"memory.nope": 1})
    with pytest.raises(ConfigError, match=r"server\.port"):
        load_settings(env={}, overrides={"server.port": -1})
