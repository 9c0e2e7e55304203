"""``memlane mcp`` through the OFFICIAL ``mcp`` client package, against real server processes:
stdio (the client spawns ``python -m memlane.cli.main mcp``) and streamable HTTP (a server
process on a free loopback port, API keys from a real key file).

Every tool is exercised; isolation: another user's session (stdio: another ``--user``; HTTP:
another user's key, another tenant's key) never sees or deletes the first user's memories; a
missing or wrong key is refused (401); a read-only key cannot write; bad tool arguments come
back as MCP tool errors (``isError``) and the server keeps serving.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

mcp = pytest.importorskip("mcp")
httpx2 = pytest.importorskip("httpx2")

from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.types import CallToolResult  # noqa: E402

from memlane import AsyncMemory  # noqa: E402
from memlane.engine.context import estimate_tokens  # noqa: E402
from memlane.service.keys import KeyStore  # noqa: E402

TOOLS = ["search", "remember", "list", "delete", "context", "profile"]
ENGINE_ARGS = ["--embedder", "hash", "--llm", "offline"]


def _env(tmp: Path) -> dict[str, str]:
    # nothing from the developer's environment or data dir: keys, config and data under tmp;
    # PYTHONPATH kept, so the server runs the code under test (a git worktree's src)
    env = {"MEMLANE_KEYS_FILE": str(tmp / "no-keys.db"), "XDG_DATA_HOME": str(tmp / "xdg"), "MEMLANE_CONFIG": ""}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def data(result: CallToolResult) -> dict[str, Any]:
    """A successful tool result's JSON (text and structured content agree)."""
    assert not result.is_error, result.content
    text = result.content[0].text  # type: ignore[union-attr]
    parsed: dict[str, Any] = json.loads(text)
    assert parsed == result.structured_content
    return parsed


def error_text(result: CallToolResult) -> str:
    """A tool error's message."""
    assert result.is_error, result
    return str(result.content[0].text)  # type: ignore[union-attr]


@asynccontextmanager
async def stdio_session(tmp: Path, db: Path, *args: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with a ``memlane mcp`` process the client spawned."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memlane.cli.main", "mcp", "--db", str(db), *ENGINE_ARGS, *args],
        env=_env(tmp),
    )
    with (tmp / "stdio-stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


# ---------------------------------------------------------------------------- stdio
async def test_stdio_every_tool(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with stdio_session(tmp_path, db, "--user", "alice") as s:
        listed = (await s.list_tools()).tools
        assert [t.name for t in listed] == TOOLS
        for tool in listed:
            schema = tool.input_schema
            assert tool.description and len(tool.description) > 40
            assert schema["additionalProperties"] is False
            assert not {"user_id", "user", "agent_id", "tenant"} & set(schema["properties"])
        by_name = {t.name: t for t in listed}
        assert by_name["remember"].input_schema["required"] == ["fact"]
        assert by_name["delete"].input_schema["required"] == ["memory_id"]
        assert by_name["search"].input_schema["properties"]["top_k"]["maximum"] == 50
        assert by_name["search"].annotations is not None and by_name["search"].annotations.read_only_hint
        assert by_name["delete"].annotations is not None and by_name["delete"].annotations.destructive_hint

        stored = data(await s.call_tool("remember", {"fact": "Alice plays the cello in a quartet"}))
        assert stored["status"] == "stored"
        other = data(await s.call_tool("remember", {"fact": "Alice's sister Ana lives in Lisbon"}))

        found = data(await s.call_tool("search", {"query": ["cello"], "top_k": 5}))
        assert found["results"][0]["id"] == stored["id"]
        assert found["results"][0]["content"] == "Alice plays the cello in a quartet"
        assert data(await s.call_tool("search", {"query": "Lisbon"}))["results"][0]["id"] == other["id"]

        page = data(await s.call_tool("list", {"limit": 1}))
        assert page["total"] == 2 and page["count"] == 1 and page["next_cursor"]
        rest = data(await s.call_tool("list", {"limit": 1, "cursor": page["next_cursor"]}))
        assert {page["memories"][0]["id"], rest["memories"][0]["id"]} == {stored["id"], other["id"]}
        assert data(await s.call_tool("list", {"kind": "message"}))["total"] == 0

        block = data(await s.call_tool("context", {}))
        context = block["context"]
        assert context.startswith("<MemoryContext>") and "cello" in context
        assert block["tokens"] == estimate_tokens(context) and block["budget_tokens"] is None
        profile = data(await s.call_tool("profile", {"items": ["quartet rehearsal"]}))["profile"]
        assert "cello" in profile and "quartet rehearsal" in profile

        gone = data(await s.call_tool("delete", {"memory_id": stored["id"]}))
        assert gone == {"status": "deleted", "id": stored["id"], "content": "Alice plays the cello in a quartet"}
        assert data(await s.call_tool("search", {"query": ["cello"]}))["results"] == []
        assert "already deleted" in error_text(await s.call_tool("delete", {"memory_id": stored["id"]}))
        assert data(await s.call_tool("list", {}))["total"] == 1

    # what the tools wrote is memlane's own memory of alice (and the delete is a soft delete)
    async with AsyncMemory(db, embedder="hash", sessions="null") as m:
        live = (await m.list(user_id="alice")).items
        assert [f.id for f in live] == [other["id"]]
        assert (await m.get(stored["id"], user_id="alice")).invalid_at is not None
        assert (await m.list(user_id="bob")).total == 0


async def test_stdio_users_are_isolated(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with stdio_session(tmp_path, db, "--user", "alice", "--agent", "bot") as alice:
        secret = data(await alice.call_tool("remember", {"fact": "Alice's locker code is 4471"}))
    async with AsyncMemory(db, embedder="hash", sessions="null") as m:  # the agent's shared memory
        shared = (await m.add("The bot's office opens at 9", user_id="alice", agent_id="bot", scope="agent"))[0]

    async with stdio_session(tmp_path, db, "--user", "bob", "--agent", "bot") as bob:
        assert data(await bob.call_tool("search", {"query": ["locker code 4471", "Alice"]}))["results"] == []
        listed = data(await bob.call_tool("list", {"limit": 100}))
        assert [r["id"] for r in listed["memories"]] == [shared.id]  # only the agent's shared memory
        assert "4471" not in data(await bob.call_tool("context", {}))["context"]
        assert "4471" not in (data(await bob.call_tool("profile", {}))["profile"] or "")
        refused = error_text(await bob.call_tool("delete", {"memory_id": secret["id"]}))
        assert "no memory" in refused
        # no argument can name another user: it is refused, not ignored
        assert "user_id" in error_text(await bob.call_tool("search", {"query": ["locker"], "user_id": "alice"}))
        assert "user_id" in error_text(await bob.call_tool("list", {"user_id": "alice"}))

    async with stdio_session(tmp_path, db, "--user", "alice", "--agent", "bot") as alice:
        # the agent's shared memory is read by alice but not deleted through her tools
        assert "shared by the agent" in error_text(await alice.call_tool("delete", {"memory_id": shared.id}))
        ids = [r["id"] for r in data(await alice.call_tool("list", {}))["memories"]]
        assert set(ids) == {secret["id"], shared.id}
        assert data(await alice.call_tool("search", {"query": ["locker code"]}))["results"][0]["id"] == secret["id"]


async def test_stdio_reads_the_config_file(tmp_path: Path) -> None:
    store = tmp_path / "from-config.db"
    config = tmp_path / "memlane.yaml"
    config.write_text(f"memory:\n  store: {store}\n  embedder: hash\n  llm: offline\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memlane.cli.main", "mcp", "--config", str(config), "--user", "dora"],
        env=_env(tmp_path),
    )
    with (tmp_path / "stdio-stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            stored = data(await s.call_tool("remember", {"fact": "Dora keeps bees"}))
    async with AsyncMemory(store, embedder="hash", sessions="null") as m:
        assert [f.id for f in (await m.list(user_id="dora")).items] == [stored["id"]]


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("search", {}, "query"),
    ("search", {"query": []}, "query"),
    ("search", {"query": ["a", "b", "c", "d"]}, "query"),
    ("search", {"query": ["x" * 1001]}, "query"),
    ("search", {"query": "tea", "top_k": 0}, "top_k"),
    ("search", {"query": "tea", "top_k": 51}, "top_k"),
    ("search", {"query": "tea", "top_k": "many"}, "top_k"),
    ("search", {"query": 42}, "query"),
    ("search", {"query": "   "}, "query"),
    ("search", {"query": "tea", "agent_id": "other"}, "agent_id"),
    ("remember", {}, "fact"),
    ("remember", {"fact": ""}, "fact"),
    ("remember", {"fact": "\u200b\u200b"}, "fact"),
    ("remember", {"fact": "x" * 4001}, "fact"),
    ("remember", {"fact": ["a"]}, "fact"),
    ("remember", {"fact": "ok", "scope": "agent"}, "scope"),
    ("list", {"limit": 0}, "limit"),
    ("list", {"limit": 101}, "limit"),
    ("list", {"cursor": "not-a-cursor"}, "cursor"),
    ("list", {"kind": "secret"}, "kind"),
    ("delete", {}, "memory_id"),
    ("delete", {"memory_id": ""}, "memory_id"),
    ("delete", {"memory_id": "no-such-memory"}, "no memory"),
    ("context", {"budget_tokens": 0}, "budget_tokens"),
    ("context", {"session_id": "s1"}, "session_id"),
    ("profile", {"items": "not a list"}, "items"),
    ("profile", {"items": [""]}, "items"),
    ("profile", {"items": ["x"] * 21}, "items"),
    ("no_such_tool", {}, "no_such_tool"),
]


async def test_stdio_bad_arguments_are_tool_errors(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with stdio_session(tmp_path, db, "--user", "alice") as s:
        kept = data(await s.call_tool("remember", {"fact": "Alice drinks green tea"}))
        for name, args, mentions in BAD_CALLS:
            result = await s.call_tool(name, args)
            assert result.is_error, (name, args, result)
            assert mentions in error_text(result), (name, args, error_text(result))
        # nothing changed, and the server still serves
        listed = data(await s.call_tool("list", {}))
        assert [r["id"] for r in listed["memories"]] == [kept["id"]]
        assert data(await s.call_tool("search", {"query": "green tea"}))["count"] == 1


def test_cli_refuses_to_start_without_a_user(tmp_path: Path) -> None:
    env = _env(tmp_path) | {"PATH": "/usr/bin:/bin"}
    base = [sys.executable, "-m", "memlane.cli.main", "mcp", "--db", str(tmp_path / "m.db"), *ENGINE_ARGS]
    done = subprocess.run(base, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "--user" in done.stderr
    done = subprocess.run([*base, "--user", " "], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "user_id" in done.stderr
    # no keys: loopback only, a public interface is refused before anything is served
    done = subprocess.run(
        [*base, "--transport", "http", "--user", "alice", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "loopback" in done.stderr


# ---------------------------------------------------------------------------- streamable HTTP
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class HttpServer:
    url: str
    keys: dict[str, str]
    tmp: Path
    proc: subprocess.Popen[bytes]


@dataclass
class _Started:
    proc: subprocess.Popen[bytes]
    url: str


def _start(tmp: Path, *args: str, keys_file: Path) -> _Started:
    port = _free_port()
    env = _env(tmp) | {"MEMLANE_KEYS_FILE": str(keys_file), "PATH": "/usr/bin:/bin"}
    with (tmp / f"http-{port}.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memlane.cli.main",
                "mcp",
                "--transport",
                "http",
                "--port",
                str(port),
                "--db",
                str(tmp / "default.db"),
                "--tenants-dir",
                str(tmp / "tenants"),
                *ENGINE_ARGS,
                *args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 60  # readiness wait, not a timing assertion
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {(tmp / f'http-{port}.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("the MCP HTTP server did not start") from None
            time.sleep(0.05)
    return _Started(proc, f"http://127.0.0.1:{port}/mcp")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    tmp = tmp_path_factory.mktemp("mcp-http")
    store = KeyStore(tmp / "keys.db")
    keys = {
        "alice": store.create("acme", user_id="alice").secret,
        "bob": store.create("acme", user_id="bob").secret,
        "alice_other_tenant": store.create("globex", user_id="alice").secret,
        "alice_read_only": store.create("acme", user_id="alice", read_only=True).secret,
        "tenant_wide": store.create("acme").secret,
    }
    revoked = store.create("acme", user_id="alice")
    store.revoke(revoked.key.id)
    keys["revoked"] = revoked.secret
    started = _start(tmp, keys_file=tmp / "keys.db")
    try:
        yield HttpServer(started.url, keys, tmp, started.proc)
    finally:
        _stop(started.proc)


@asynccontextmanager
async def http_session(url: str, key: str | None) -> AsyncIterator[ClientSession]:
    """An initialized MCP session over streamable HTTP, sending ``key`` as the bearer token."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


async def test_http_every_tool_scoped_by_key(http_server: HttpServer) -> None:
    url, keys = http_server.url, http_server.keys
    async with http_session(url, keys["alice"]) as s:
        assert [t.name for t in (await s.list_tools()).tools] == TOOLS
        fact = data(await s.call_tool("remember", {"fact": "Alice's passport expires in March"}))
        extra = data(await s.call_tool("remember", {"fact": "Alice is allergic to peanuts"}))
        assert data(await s.call_tool("search", {"query": ["passport"]}))["results"][0]["id"] == fact["id"]
        assert data(await s.call_tool("list", {}))["total"] == 2
        assert "passport" in data(await s.call_tool("context", {"budget_tokens": 2000}))["context"]
        assert "peanuts" in data(await s.call_tool("profile", {}))["profile"]
        assert data(await s.call_tool("delete", {"memory_id": extra["id"]}))["status"] == "deleted"
        assert data(await s.call_tool("list", {}))["total"] == 1
        assert "user_id" in error_text(await s.call_tool("list", {"user_id": "bob"}))
        assert error_text(await s.call_tool("search", {"query": []}))

    # the key's tenant is the store: acme's own file, nothing in the default store
    async with AsyncMemory(http_server.tmp / "tenants" / "acme.db", embedder="hash", sessions="null") as m:
        assert [f.id for f in (await m.list(user_id="alice")).items] == [fact["id"]]
    assert not (http_server.tmp / "default.db").exists()

    async with http_session(url, keys["bob"]) as bob:  # same tenant, another user
        assert data(await bob.call_tool("search", {"query": ["passport", "Alice"]}))["results"] == []
        assert data(await bob.call_tool("list", {}))["total"] == 0
        assert "passport" not in data(await bob.call_tool("context", {}))["context"]
        assert data(await bob.call_tool("profile", {}))["profile"] is None
        assert "no memory" in error_text(await bob.call_tool("delete", {"memory_id": fact["id"]}))

    async with http_session(url, keys["alice_other_tenant"]) as other:  # same user name, another tenant
        assert data(await other.call_tool("search", {"query": ["passport"]}))["results"] == []
        assert data(await other.call_tool("list", {}))["total"] == 0
        assert "no memory" in error_text(await other.call_tool("delete", {"memory_id": fact["id"]}))

    async with http_session(url, keys["alice_read_only"]) as ro:  # reads alice's memory, never writes
        assert data(await ro.call_tool("search", {"query": ["passport"]}))["results"][0]["id"] == fact["id"]
        assert "read-only" in error_text(await ro.call_tool("remember", {"fact": "Alice moved to Porto"}))
        assert "read-only" in error_text(await ro.call_tool("delete", {"memory_id": fact["id"]}))

    async with http_session(url, keys["tenant_wide"]) as wide:  # no user to scope to
        assert "not bound to a user" in error_text(await wide.call_tool("search", {"query": ["passport"]}))
        assert "not bound to a user" in error_text(await wide.call_tool("remember", {"fact": "x"}))

    async with http_session(url, keys["alice"]) as s:  # nothing above changed alice's memory
        assert [r["id"] for r in data(await s.call_tool("list", {}))["memories"]] == [fact["id"]]


@pytest.mark.parametrize("key", [None, "revoked", "ml_0123456789abcdef_wrong", "not-a-key"])
async def test_http_missing_or_bad_key_is_refused(http_server: HttpServer, key: str | None) -> None:
    token = http_server.keys.get(key, key) if key is not None else None
    with pytest.raises(BaseException) as caught:
        async with http_session(http_server.url, token) as s:
            await s.list_tools()
    # the client reports the refused initialize as an MCP error (the raw exchange below shows the 401)
    assert any(isinstance(leaf, MCPError) for leaf in _leaves(caught.value)), caught.value
    # the raw exchange: 401 with a Bearer challenge before any MCP message is read
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    r = httpx.post(http_server.url, json=body, headers=headers, timeout=30)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")


async def test_http_session_cannot_be_taken_over_with_another_key(http_server: HttpServer) -> None:
    keys = http_server.keys
    async with http_session(http_server.url, keys["alice"]) as s:
        data(await s.call_tool("remember", {"fact": "Alice's bank PIN hint: the cat"}))
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    r = httpx.post(http_server.url, json=init, headers=headers | {"Authorization": f"Bearer {keys['alice']}"})
    assert r.status_code == 200
    session_id = r.headers["mcp-session-id"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list", "arguments": {}}}
    hijack = httpx.post(
        http_server.url,
        json=call,
        headers=headers
        | {
            "Authorization": f"Bearer {keys['bob']}",
            "mcp-session-id": session_id,
            "mcp-protocol-version": "2025-06-18",
        },
    )
    assert hijack.status_code in (403, 404), hijack.text
    assert "PIN" not in hijack.text


async def test_http_without_keys_is_loopback_for_the_configured_user(tmp_path: Path) -> None:
    started = _start(tmp_path, "--user", "carol", keys_file=tmp_path / "absent-keys.db")
    try:
        log = next(tmp_path.glob("http-*.log"))
        async with http_session(started.url, None) as s:
            stored = data(await s.call_tool("remember", {"fact": "Carol bikes to work"}))
            assert data(await s.call_tool("search", {"query": "bikes"}))["results"][0]["id"] == stored["id"]
        assert "no API keys: loopback only" in log.read_text()
    finally:
        _stop(started.proc)
    async with AsyncMemory(tmp_path / "default.db", embedder="hash", sessions="null") as m:
        assert [f.content for f in (await m.list(user_id="carol")).items] == ["Carol bikes to work"]
    assert not (tmp_path / "absent-keys.db").exists()  # a key-less server creates no key file


# ---------------------------------------------------------------------------- docs/mcp.md
def test_docs_python_block_runs_as_written(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "mcp.md").read_text()
    section = doc.split("## From Python", 1)[1]
    program = section.split("```python\n", 1)[1].split("```", 1)[0]
    expected = section.split("Output:\n\n```\n", 1)[1].split("```", 1)[0]
    env = _env(tmp_path) | {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
