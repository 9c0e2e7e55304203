"""The isolation property over HTTP (and MCP): shared by tests/test_service_isolation.py (one
in-process server on SQLite files) and tests/test_scaleout.py (two ``memlane serve`` replicas
on one PostgreSQL and one Redis, written through one and read through the other).

Two tenants (each its own store), two users each (ids that collide under naive schemes). Per
example, random writes (a memory, or a session event) by a user-bound key or a tenant-wide key
naming the user, each carrying a unique token; then every reader (each user's bound key, and
the tenant-wide key naming that user) asks every read route, and, when the world has an MCP
URL, the MCP tools ``search``, ``list``, ``context`` and ``profile``. A reader must see exactly
its own (tenant, user)'s tokens where the route lists everything (list, export, session
events) and never another's anywhere. :func:`run_example` is one example.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from hypothesis import strategies as st
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

LONG = os.environ.get("MEMLANE_ISOLATION_LONG") == "1"
TENANTS = ("acme", "acme|x")
USERS = ("alice", "alice|x")
TOKEN = re.compile(r"zq\d+t\d+")


@dataclass
class World:
    http: Any  # takes the writes: anything with new_client(headers=...)
    mcp_url: str | None  # None: no MCP reads
    bound: dict[tuple[str, str], str]  # (tenant, user) -> user-bound key
    wide: dict[str, str]  # tenant -> tenant-wide key
    counter: Iterator[int] = field(default_factory=itertools.count)
    reader: Any = None
    """The server the reads go to (None: ``http``, which takes the writes); anything with
    ``new_client(headers=...)`` returning an :class:`httpx.Client`."""

    @property
    def reads(self) -> Any:
        return self.reader if self.reader is not None else self.http


# --------------------------------------------------------------------------- writes

Write = tuple[str, str, str, bool]  # tenant, user, what ("memory" | "event"), by the tenant-wide key

writes_strategy = st.lists(
    st.tuples(st.sampled_from(TENANTS), st.sampled_from(USERS), st.sampled_from(("memory", "event")), st.booleans()),
    min_size=1,
    max_size=6,
)


def _client(world: Any, key: str, server: Any = None) -> httpx.Client:
    """A client with ``key`` for ``server`` (default: ``world.http``)."""
    return (server or world.http).new_client(headers={"Authorization": f"Bearer {key}"})


def _write(world: World, ex: int, writes: list[Write]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Do the writes; returns token -> owner and memory id -> token."""
    owners: dict[str, tuple[str, str]] = {}
    ids: dict[str, str] = {}
    for n, (tenant, user, what, wide) in enumerate(writes):
        token = f"zq{ex}t{n}"
        owners[token] = (tenant, user)
        key = world.wide[tenant] if wide else world.bound[(tenant, user)]
        named = {"user_id": user} if wide else {}
        with _client(world, key) as c:
            if what == "memory":
                r = c.post("/v1/memories", json={"text": f"zq{ex} {token} likes tea", **named})
                assert r.status_code == 201, r.text
                ids[r.json()["memories"][0]["id"]] = token
            else:
                sid = f"s{ex}n{n}"
                r = c.post("/v1/sessions", json={"session_id": sid, "user_ids": [user]})
                assert r.status_code == 201, r.text
                r = c.post(f"/v1/sessions/{sid}/events", json={"content": f"zq{ex} {token} said hi"})
                assert r.status_code == 201, r.text
    return owners, ids


# --------------------------------------------------------------------------- reads


def _tokens(text: str, ex: int) -> set[str]:
    return {t for t in TOKEN.findall(text) if t.startswith(f"zq{ex}t")}


def _http_reads(world: World, ex: int, key: str, user: str | None, ids: dict[str, str]) -> dict[str, set[str]]:
    """route -> the tokens of example ``ex`` it returned to ``key`` (naming ``user`` if given)."""
    named = {"user_id": user} if user else {}
    seen: dict[str, set[str]] = {}
    with _client(world, key, world.reads) as c:

        def get(route: str, path: str, **kw: Any) -> None:
            r = c.get(path, **kw)
            assert r.status_code == 200, (route, r.status_code, r.text)
            seen[route] = seen.get(route, set()) | _tokens(r.text, ex)

        cursor: str | None = None
        while True:  # every page
            r = c.get("/v1/memories", params={**named, "limit": 100, **({"cursor": cursor} if cursor else {})})
            assert r.status_code == 200, r.text
            seen["list"] = seen.get("list", set()) | _tokens(r.text, ex)
            cursor = r.json()["next_cursor"]
            if not cursor:
                break
        for mid in ids:
            r = c.get(f"/v1/memories/{mid}", params=named)
            assert r.status_code in (200, 404), r.text
            if r.status_code == 200:
                seen["get"] = seen.get("get", set()) | _tokens(r.text, ex)
            r = c.get(f"/v1/memories/{mid}/history", params=named)
            assert r.status_code in (200, 404), r.text
            seen["history"] = seen.get("history", set()) | _tokens(r.text, ex)
        r = c.post("/v1/search", json={"query": f"zq{ex}", "top_k": 100, **named})
        assert r.status_code == 200, r.text
        seen["search"] = _tokens(r.text, ex)
        get("context", "/v1/context", params=named)
        get("profile", "/v1/profile", params=named)
        get("stats", "/v1/stats", params=named)
        get("consolidation", "/v1/consolidation-status", params=named)
        if user or key:
            who = user or _key_user(world, key)
            get("export", f"/v1/users/{quote(who, safe='')}/export")
        get("sessions", "/v1/sessions", params=named)
        get("kaos sessions", "/memory/sessions")
        for n in range(6):
            sid = f"s{ex}n{n}"
            r = c.get(f"/v1/sessions/{sid}/events")
            assert r.status_code in (200, 403, 404), r.text
            seen["session events"] = seen.get("session events", set()) | _tokens(r.text, ex)
            r = c.get("/memory/events", params={"session_id": sid})
            assert r.status_code in (200, 403, 404), r.text
            seen["kaos events"] = seen.get("kaos events", set()) | _tokens(r.text, ex)
        r = c.post("/v1/tools/search_facts", params=named, json={"query": [f"zq{ex}"], "top_k": 50})
        assert r.status_code == 200, r.text
        seen["tool search_facts"] = _tokens(r.text, ex)
        r = c.post("/v1/tools/load_memory", params=named, json={"query": f"zq{ex}"})
        assert r.status_code == 200, r.text
        seen["tool load_memory"] = _tokens(r.text, ex)
    return seen


def _key_user(world: World, key: str) -> str:
    return next(u for (_, u), k in world.bound.items() if k == key)


@asynccontextmanager
async def _mcp(url: str, key: str) -> AsyncIterator[ClientSession]:
    import httpx as httpx2

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def _mcp_reads(url: str, key: str, ex: int) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    async with _mcp(url, key) as s:
        for tool, args in (
            ("search", {"query": f"zq{ex}", "top_k": 50}),
            ("list", {"limit": 100}),
            ("context", {}),
            ("profile", {}),
        ):
            result = await s.call_tool(tool, args)
            assert not result.is_error, (tool, result)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            seen[f"mcp {tool}"] = _tokens(text, ex)
    return seen


#: Routes that list everything a reader may see of this example (the rest may show a subset).
COMPLETE = {"list", "export", "mcp list"}
#: Routes that take no user: a tenant-wide key reads them for the whole tenant (every session of
#: the tenant); a user-bound key only for the sessions its user takes part in.
TENANT_LEVEL = {"session events", "kaos events", "kaos sessions"}


def _check(world: World, ex: int, owners: dict[str, tuple[str, str]], ids: dict[str, str]) -> None:
    for tenant in TENANTS:
        for user in USERS:
            mine = {t for t, o in owners.items() if o == (tenant, user)}
            tenants = {t for t, o in owners.items() if o[0] == tenant}
            memories = {t for t in mine if t in ids.values()}
            views = {
                "bound key": _http_reads(world, ex, world.bound[(tenant, user)], None, ids),
                "tenant key naming the user": _http_reads(world, ex, world.wide[tenant], user, ids),
            }
            if world.mcp_url is not None:
                views["bound key"] |= anyio.run(_mcp_reads, world.mcp_url, world.bound[(tenant, user)], ex)
            for reader, seen in views.items():
                for route, tokens in seen.items():
                    allowed = tenants if reader != "bound key" and route in TENANT_LEVEL else mine
                    assert tokens <= allowed, f"{reader} of {(tenant, user)} saw others' {tokens - allowed} via {route}"
                for route in COMPLETE & seen.keys():
                    assert memories <= seen[route], f"{reader} of {(tenant, user)}: {route} misses {memories}"
                assert {t for t in mine if t not in memories} <= seen["session events"] | seen["export"]


def run_example(world: World, writes: list[Write]) -> None:
    """One example of the property: ``writes`` through ``world.http``, every read through
    ``world.reads`` (and MCP)."""
    ex = next(world.counter)
    owners, ids = _write(world, ex, writes)
    _check(world, ex, owners, ids)
