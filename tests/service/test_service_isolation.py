"""Property: over HTTP and MCP, every read path returns only what the visibility rules allow.

Two tenants (each its own store), two users each (ids that collide under naive schemes). Per
hypothesis example, random writes (a memory, or a session event) by a user-bound key or a
tenant-wide key naming the user, each carrying a unique token. Then every reader (each user's
bound key, and the tenant-wide key naming that user) asks every read route: memories list (all
pages) and get, search, context, profile, export, sessions list + events, KAOS
``/memory/events`` and ``/memory/sessions``, the tools route (``search_facts``,
``load_memory``) and, over a real ``memlane mcp --transport http`` process on the same files,
the MCP tools ``search``, ``list``, ``context`` and ``profile``. A reader must see exactly its
own (tenant, user)'s tokens where the route lists everything (list, export, session events)
and never another's anywhere. The property itself lives in ``isolation_property.py``
(tests/service/test_scaleout.py runs it on two replicas over PostgreSQL and Redis).

A sibling property (own store) covers document fragments and a fragment's document, formation
jobs (list and get), ``GET /v1/embeddings`` (per tenant store) and MCP over stdio
(``memlane mcp --transport stdio --user U``, tenant ``default``).

The first property runs twice: sessions in the SQLite file, and in a capped in-process store
(KAOS ``LocalMemory``, 40 sessions: eviction pressure), where it first tries the reported
attacks (isolation_property.ATTACKS).

CI: 2 generated examples per world (plus the 6 attacks in the capped one) and 4 for the
sibling property; ``MEMLANE_ISOLATION_LONG=1`` for 60 each; ``MEMLANE_ISOLATION_OPS=N`` runs
the first property until N requests per world were made (``MEMLANE_ISOLATION_REPORT=path``
records the counts per surface; docs/reliability.md has the long run's).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp import ClientSession

from isolation_property import (
    LONG,
    OPS,
    TENANTS,
    USERS,
    World,
    Write,
    _client,
    _tokens,
    attacks,
    examples,
    report,
    run_example,
    writes_strategy,
)
from service_server import ServiceServer, make_hub, serve


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The in-process session store's cap in the ``local`` world (small: eviction pressure).
LOCAL_MAX_SESSIONS = 40


@pytest.fixture(scope="module", params=["sqlite", "local"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Sessions in the SQLite file, or in a capped in-process store (KAOS ``LocalMemory``)."""
    from memlane import AsyncMemory
    from memlane.config import load_settings
    from memlane.service.app import create_app
    from memlane.service.hub import MemoryHub
    from memlane.service.keys import KeyStore
    from memlane.stores.local import LocalMemory

    tmp = tmp_path_factory.mktemp("iso")
    OPS.clear()
    local: dict[str, LocalMemory] = {}  # one capped store per tenant (kept if the hub reopens an engine)

    def engine(location: str) -> AsyncMemory:
        if request.param == "sqlite":
            return AsyncMemory(location, embedder="hash", sessions="sqlite")
        store = local.setdefault(location, LocalMemory(max_sessions=LOCAL_MAX_SESSIONS))
        return AsyncMemory(location, embedder="hash", sessions=store)

    with KeyStore(tmp / "keys.db") as keys:
        bound = {(t, u): keys.create(t, user_id=u).secret for t in TENANTS for u in USERS}
        wide = {t: keys.create(t).secret for t in TENANTS}
        port = _free_port()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "MEMORY_"))},
            "MEMLANE_KEYS_FILE": str(tmp / "keys.db"),
            "XDG_DATA_HOME": str(tmp / "xdg"),
        }
        log = (tmp / "mcp.log").open("wb")
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
                str(tmp / "memlane.db"),
                "--tenants-dir",
                str(tmp / "tenants"),
                "--embedder",
                "hash",
                "--llm",
                "offline",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            _wait_port(port, proc, tmp / "mcp.log")
            hub = MemoryHub(engine, str(tmp / "memlane.db"), tmp / "tenants")
            app = create_app(load_settings(env={"MEMLANE_RATE_LIMIT": "0"}), hub=hub, keys=keys)
            with serve(app) as srv:
                yield World(srv, f"http://127.0.0.1:{port}/mcp", bound, wide, capped=request.param == "local")
                report(f"test_service_isolation[{request.param}]")
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    import socket

    deadline = time.monotonic() + 60  # readiness wait, not a timing assertion
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"memlane mcp exited {proc.returncode}: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError("memlane mcp did not start") from None
            time.sleep(0.05)


@settings(
    max_examples=examples(60 if LONG else 2),
    deadline=None,
    phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else []),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writes=writes_strategy)
@attacks
def test_every_http_and_mcp_read_path_shows_only_the_readers_memory(world: World, writes: list[Write]) -> None:
    run_example(world, writes)


# =========================================================================== documents, jobs, embeddings, stdio
# A sibling property over the read paths the first one does not cover: document fragments and a
# fragment's document, formation jobs (list and get), the embedding queue's counts (one per
# tenant store) and MCP over stdio (``memlane mcp --transport stdio --user U``: one process per
# user, always tenant ``default``, kept open across examples). Its own store and server.

TENANTS2 = ("default", "acme")
#: memory kinds written by the second property: a document, ``add(infer=True)`` (a job), a
#: session event then ``form`` (a job), a JSONL import (queued embeddings).
KINDS2 = ("document", "infer", "form", "import")

Write2 = tuple[str, str, str, bool]  # tenant, user, kind, by the tenant-wide key

writes2_strategy = st.lists(
    st.tuples(st.sampled_from(TENANTS2), st.sampled_from(USERS), st.sampled_from(KINDS2), st.booleans()),
    min_size=1,
    max_size=5,
)


@dataclass
class World2:
    http: ServiceServer
    bound: dict[tuple[str, str], str]
    wide: dict[str, str]
    stdio: dict[str, ClientSession]  # user -> an MCP session over stdio (tenant default)
    portal: Any
    imported: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TENANTS2, 0))  # tenant -> turns
    counter: Iterator[int] = field(default_factory=itertools.count)


@asynccontextmanager
async def _stdio(tmp: Path, user: str, errlog: Any) -> AsyncIterator[ClientSession]:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "memlane.cli.main",
            "mcp",
            "--transport",
            "stdio",
            "--user",
            user,
            "--db",
            str(tmp / "memlane.db"),
            "--embedder",
            "hash",
            "--llm",
            "offline",
        ],
        env={"XDG_DATA_HOME": str(tmp / "xdg")},
    )
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def world2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World2]:
    from contextlib import ExitStack

    from anyio.from_thread import start_blocking_portal

    from memlane.config import load_settings
    from memlane.service.app import create_app
    from memlane.service.keys import KeyStore

    tmp = tmp_path_factory.mktemp("iso2")
    with ExitStack() as stack:
        keys = stack.enter_context(KeyStore(tmp / "keys.db"))
        bound = {(t, u): keys.create(t, user_id=u).secret for t in TENANTS2 for u in USERS}
        wide = {t: keys.create(t).secret for t in TENANTS2}
        app = create_app(load_settings(env={"MEMLANE_RATE_LIMIT": "0"}), hub=make_hub(tmp), keys=keys)
        srv = stack.enter_context(serve(app))
        portal = stack.enter_context(start_blocking_portal())
        errlog = stack.enter_context((tmp / "stdio.log").open("w"))
        stdio = {u: stack.enter_context(portal.wrap_async_context_manager(_stdio(tmp, u, errlog))) for u in USERS}
        yield World2(srv, bound, wide, stdio, portal)


def _write2(world: World2, ex: int, writes: list[Write2]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Do the writes; returns token -> owner and id (document or job) -> token."""
    owners: dict[str, tuple[str, str]] = {}
    ids: dict[str, str] = {}
    for n, (tenant, user, kind, wide) in enumerate(writes):
        token = f"zq{ex}t{n}"
        owners[token] = (tenant, user)
        key = world.wide[tenant] if wide else world.bound[(tenant, user)]
        named = {"user_id": user} if wide else {}
        sid = f"d{ex}n{n}"
        with _client(world, key) as c:
            if kind == "document":
                text = "\n\n".join(f"## Part {i}\n\n{token} " + "tea and biscuits " * 400 for i in range(3))
                r = c.post("/v1/documents", json={"text": f"zq{ex} {text}", "title": token, **named})
                assert r.status_code == 201, r.text
                ids[r.json()["id"]] = token
            elif kind == "infer":
                r = c.post("/v1/memories", json={"text": f"zq{ex} {token} likes tea", "infer": True, **named})
                assert r.status_code == 202, r.text
                ids[r.json()["job_id"]] = token
            elif kind == "form":
                r = c.post("/v1/sessions", json={"session_id": sid, "user_ids": [user]})
                assert r.status_code == 201, r.text
                r = c.post(f"/v1/sessions/{sid}/events", json={"content": f"zq{ex} {token} likes coffee"})
                assert r.status_code == 201, r.text
                r = c.post(f"/v1/sessions/{sid}/form")
                assert r.status_code == 202, r.text
                ids[r.json()["job_id"]] = token
            else:
                line = {"user_id": user, "session_id": sid, "role": "user", "content": f"zq{ex} {token} likes tea"}
                r = c.post("/v1/import", json={"content": json.dumps(line)})
                assert r.status_code == 202, r.text
                world.imported[tenant] += 1
    return owners, ids


def _fragment_ids(world: World2, owners: dict[str, tuple[str, str]], ids: dict[str, str]) -> dict[str, str]:
    """fragment id -> document id, read by each document's owner (it must see every fragment)."""
    out: dict[str, str] = {}
    for doc, token in ids.items():
        tenant, user = owners[token]
        with _client(world, world.bound[(tenant, user)]) as c:
            r = c.get(f"/v1/documents/{doc}/fragments")
            if r.status_code == 404:
                continue  # a job id, not a document
            assert r.status_code == 200, r.text
            frags = r.json()["fragments"]
            assert frags and all(f["kind"] == "fragment" for f in frags), (doc, token, r.text[:300])
            assert token in frags[0]["content"], (doc, token, r.text[:300])
            out |= {f["id"]: doc for f in frags}
    return out


def _http_reads2(
    world: World2, ex: int, key: str, user: str | None, ids: dict[str, str], frags: dict[str, str]
) -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, Any]]:
    """route -> tokens seen, route -> ids seen (documents, fragments, jobs), and the embedding counts."""
    named = {"user_id": user} if user else {}
    routes = ("document fragments", "fragment document", "jobs list", "job get")
    seen: dict[str, set[str]] = {r: set() for r in routes}
    seen_ids: dict[str, set[str]] = {r: set() for r in routes}
    known = set(ids) | set(frags)

    def note(route: str, r: httpx.Response, asked: str | None = None) -> None:
        """A 404 names the id asked for: only the other ids in it count."""
        seen[route] |= _tokens(r.text, ex)
        seen_ids[route] |= {i for i in known if i in r.text} - ({asked} if r.status_code == 404 else set())

    with _client(world, key) as c:
        for doc in ids:
            r = c.get(f"/v1/documents/{doc}/fragments", params=named)
            assert r.status_code in (200, 404), r.text
            note("document fragments", r, doc)
        for frag in frags:
            r = c.get(f"/v1/fragments/{frag}/document", params=named)
            assert r.status_code in (200, 404), r.text
            note("fragment document", r, frag)
        r = c.get("/v1/jobs", params={"limit": 100})
        assert r.status_code == 200, r.text
        note("jobs list", r)
        for job in ids:
            r = c.get(f"/v1/jobs/{job}")
            assert r.status_code in (200, 404), r.text
            note("job get", r, job)
        r = c.get("/v1/embeddings")
        assert r.status_code == 200, r.text
        counts = r.json()
    return seen, seen_ids, counts


async def _mcp_reads_on(session: ClientSession, ex: int) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for tool, args in (
        ("search", {"query": f"zq{ex}", "top_k": 50}),
        ("list", {"limit": 100}),
        ("context", {}),
        ("profile", {}),
    ):
        result = await session.call_tool(tool, args)
        assert not result.is_error, (tool, result)
        seen[f"mcp stdio {tool}"] = _tokens(" ".join(getattr(c, "text", "") for c in result.content), ex)
    return seen


#: Job routes take no user: a tenant-wide key sees every job of its tenant.
TENANT_LEVEL2 = {"jobs list", "job get"}


def _check2(world: World2, ex: int, owners: dict[str, tuple[str, str]], ids: dict[str, str]) -> None:
    frags = _fragment_ids(world, owners, ids)
    docs = set(frags.values())
    owner_of = {i: owners[t] for i, t in ids.items()} | {f: owners[ids[d]] for f, d in frags.items()}
    for tenant in TENANTS2:
        for user in USERS:
            mine = {t for t, o in owners.items() if o == (tenant, user)}
            tenants = {t for t, o in owners.items() if o[0] == tenant}
            my_ids = {i for i, o in owner_of.items() if o == (tenant, user)}
            tenant_ids = {i for i, o in owner_of.items() if o[0] == tenant}
            counts: list[dict[str, Any]] = []
            for reader, key, named in (
                ("bound key", world.bound[(tenant, user)], None),
                ("tenant key naming the user", world.wide[tenant], user),
            ):
                seen, seen_ids, progress = _http_reads2(world, ex, key, named, ids, frags)
                counts.append(progress)
                if reader == "bound key" and tenant == "default":
                    seen |= world.portal.call(_mcp_reads_on, world.stdio[user], ex)
                for route, tokens in seen.items():
                    wide = reader != "bound key" and route in TENANT_LEVEL2
                    allowed, allowed_ids = (tenants, tenant_ids) if wide else (mine, my_ids)
                    who = f"{reader} of {(tenant, user)}"
                    assert tokens <= allowed, f"{who} saw others' {tokens - allowed} via {route}"
                    leaked = seen_ids.get(route, set()) - allowed_ids
                    assert not leaked, f"{who} saw others' ids {leaked} via {route}"
                # complete: the reader's own documents, fragments and jobs are all readable
                my_docs = docs & my_ids
                assert {f for f, d in frags.items() if d in my_docs} <= seen_ids["document fragments"], reader
                assert my_docs <= seen_ids["fragment document"], reader
                my_jobs = my_ids - docs - frags.keys()
                assert my_jobs <= seen_ids["job get"] & seen_ids["jobs list"], reader
            # the embedding queue is the tenant store's: both readers see the same counts, and
            # they count this tenant's imported turns only (hash embedder: nothing else is queued)
            totals = [p["queued"] + p["done"] for p in counts]
            assert totals == [world.imported[tenant]] * 2, (tenant, user, counts, world.imported)


@settings(
    max_examples=60 if LONG else 4,
    deadline=None,
    phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else []),
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writes=writes2_strategy)
def test_document_job_embedding_and_stdio_reads_show_only_the_readers_memory(
    world2: World2, writes: list[Write2]
) -> None:
    ex = next(world2.counter)
    owners, ids = _write2(world2, ex, writes)
    _check2(world2, ex, owners, ids)
