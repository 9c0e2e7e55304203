"""One error shape everywhere (issue 17, section 5): ``{"error": {"code", "message"}}``.

* ``/v1/tools/{name}``: the model's mistakes come back (200) as ``{"error": {"code", "message"}}``
  like every other error of the HTTP API (it used ``{"error": {"type"}}``).
* MCP tool errors (stdio and streamable HTTP share the server): the text is the same JSON,
  with a stable code, and never pydantic's raw text with its input values and
  ``https://errors.pydantic.dev`` links.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory
from memlane.agent.tools import MemoryTools
from memlane.service.app import create_app
from service_server import make_hub, serve

mcp = pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402


def _is_error_shape(body: Any, code: str) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert set(error) >= {"code", "message"} and "type" not in error, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]


async def test_memory_tools_mistakes_use_the_error_code(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", sessions="null") as m:
        tools = MemoryTools(m, user_id="alice")
        _is_error_shape(await tools.call("nope", {}), "unknown_tool")
        _is_error_shape(await tools.call("search_facts", {"query": ["x"], "user_id": "bob"}), "invalid_arguments")


def test_http_tool_errors_have_the_api_error_shape(tmp_path: Path) -> None:
    with serve(create_app(hub=make_hub(tmp_path))) as srv:
        r = srv.client.post("/v1/tools/search_facts", params={"user_id": "alice"}, json={"query": []})
        assert r.status_code == 200
        _is_error_shape(r.json(), "invalid_arguments")
        r = srv.client.post("/v1/tools/remember", params={"user_id": "alice"}, json={"fact": "x", "user_id": "bob"})
        _is_error_shape(r.json(), "invalid_arguments")
        # the rest of the API: the same keys
        r = srv.client.post("/v1/tools/remember", json={"fact": "x"})  # no user
        assert r.status_code == 400
        _is_error_shape(r.json(), "invalid_scope")


BAD_CALLS: list[tuple[str, dict[str, Any], str, str]] = [
    ("search", {"query": []}, "invalid_arguments", "query"),
    ("search", {"query": "tea", "user_id": "bob"}, "invalid_arguments", "user_id"),
    ("search", {"query": "tea", "top_k": 0}, "invalid_arguments", "top_k"),
    ("remember", {}, "invalid_arguments", "fact"),
    ("remember", {"fact": ["a"]}, "invalid_arguments", "fact"),
    ("list", {"kind": "secret"}, "invalid_arguments", "kind"),
    ("list", {"cursor": "not-a-cursor"}, "invalid_arguments", "cursor"),
    ("delete", {"memory_id": "no-such-memory"}, "not_found", "no memory"),
    ("profile", {"items": "not a list"}, "invalid_arguments", "items"),
    ("no_such_tool", {}, "unknown_tool", "no_such_tool"),
]


async def test_mcp_tool_errors_are_json_in_the_error_shape(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "memlane.cli.main",
            "mcp",
            "--user",
            "alice",
            "--db",
            str(tmp_path / "m.db"),
            "--embedder",
            "hash",
            "--llm",
            "offline",
        ],
        env={
            "MEMLANE_KEYS_FILE": str(tmp_path / "keys.db"),
            "XDG_DATA_HOME": str(tmp_path / "xdg"),
            "MEMLANE_CONFIG": "",
            "PATH": "/usr/bin:/bin",
        },
    )
    with (tmp_path / "stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for name, args, code, mentions in BAD_CALLS:
                result = await session.call_tool(name, args)
                assert result.is_error, (name, args)
                text = result.content[0].text  # type: ignore[union-attr]
                assert "pydantic" not in text and "https://" not in text and "validation error" not in text, text
                body = json.loads(text)
                _is_error_shape(body, code)
                assert mentions in body["error"]["message"], (name, args, body)
