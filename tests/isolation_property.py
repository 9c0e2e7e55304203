"""The isolation property over HTTP (and MCP): shared by tests/service/test_service_isolation.py (one
in-process server on SQLite files, sessions in SQLite or in a capped in-process store) and
tests/service/test_scaleout.py (two ``memlane serve`` replicas on one PostgreSQL and one Redis, written
through one and read through the other).

Two tenants (each its own store), two users each (ids that collide under naive schemes). Per
example, random writes by a user-bound key or a tenant-wide key naming the user, each carrying
a unique token:

* ``memory``: a memory;
* ``event``: a session event, in a session id drawn from a small pool shared by every user of
  the example, in app ``default`` or ``other`` (session ids collide across users and apps: a
  user-bound key writing into another user's session must get 404);
* ``import``: ``POST /v1/import`` with ``form: true`` into a pool session (or the default
  ``{user}:import``): 409 when the session exists and the user is not in it, else 202;
* ``room``: a room memory (agent ``concierge``, a pool session id, either app), by the
  tenant-wide key;
* ``reset``: the owner of a pool session resets it (formation job, then the session is
  deleted, so a later write in the example may reuse its id for another user; where no worker
  serves the tenants' queues the owner deletes it after queueing the job);
* ``flood``: the user creates :data:`FLOOD` sessions (eviction pressure where the session
  store is capped: only the user's own sessions may go, or 507);
* ``identity``: the user links a sender of a small pool shared by every user and both tenants
  of the example (``/v1/identities``: 201, or 409 when another user of the tenant holds it),
  then writes a memory naming that sender instead of a user: it is the holder's memory
  (a user-bound key naming another user's sender gets 404, as for an unknown one);
* ``proposal``: the user proposes a memory to the review queue (``POST /v1/proposals``), and,
  in pool slot 0, approves it (``POST /v1/proposals/{id}/review``).

Then every reader (each user's bound key, and the tenant-wide key naming that user) asks every
read route (memories, search, context, profile, stats, export, session summaries, the users and
agents lists (a user-bound key lists its own user only), sessions and events of every
pool session in both apps, KAOS routes, the tools, room reads naming each pool session in each
app, formation jobs list and get, the review queue: ``GET /v1/proposals`` and each proposal by id,
where a user-bound key's review of another user's or tenant's proposal must answer 404) and,
when the world has an MCP URL, the MCP tools ``search``,
``list``, ``context`` and ``profile``. A reader must see exactly its own (tenant, user)'s
tokens where the route lists everything (list, export, session events) and never another's
anywhere; every reader lists exactly its own user's links of the example and resolves a pool
sender only when it is linked to that user in that tenant (a tenant-wide key: to whoever holds
it in its tenant; never a link of the other tenant); a room's tokens only when the reader's
user takes part in every session carrying the room's id (or the reader is tenant-wide); a job
only when its user took part in the session when it was queued; and every acknowledged event of
a user who neither reset nor flooded in the example is still in that user's sessions (another
user's flood never evicts it).
:func:`run_example` is one example. :data:`OPS` counts the requests per surface (HTTP, tools,
MCP); ``MEMLANE_ISOLATION_OPS=N`` makes the tests run examples until N requests were made
(``MEMLANE_ISOLATION_REPORT=path`` appends the counts as a JSON line).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from hypothesis import example
from hypothesis import strategies as st
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

LONG = os.environ.get("MEMLANE_ISOLATION_LONG") == "1"
#: Run examples until this many requests were made (0: the fixed number of examples).
TARGET_OPS = int(os.environ.get("MEMLANE_ISOLATION_OPS") or 0)
TENANTS = ("acme", "acme|x")
USERS = ("alice", "alice|x")
TOKEN = re.compile(r"zq\d+t\d+")
APPS = ("default", "other")
SLOTS = 2  # pool session ids per example: s{ex}k0, s{ex}k1 (shared by every user: they collide)
AGENT = "concierge"
#: Sessions a ``flood`` write creates.
FLOOD = 12
#: Requests made, per surface: ``http``, ``tools`` (``/v1/tools/*``), ``mcp``.
OPS: Counter[str] = Counter()


#: Fewer requests than one example makes (about 330): a long run's ``max_examples`` bound.
MIN_OPS_PER_EXAMPLE = 250


def examples(fixed: int) -> int:
    """``max_examples`` for a property: ``fixed``, or, when ``MEMLANE_ISOLATION_OPS`` asks for a
    number of requests, enough examples to make them (each example checks :func:`done` first,
    so the few left over once the count is reached do nothing)."""
    return TARGET_OPS // MIN_OPS_PER_EXAMPLE + 1 if TARGET_OPS else fixed


def done() -> bool:
    """True once ``MEMLANE_ISOLATION_OPS`` requests were made (the remaining examples are skipped)."""
    return bool(TARGET_OPS) and sum(OPS.values()) >= TARGET_OPS


def report(name: str) -> None:
    """Append the counts of the world that ends to ``MEMLANE_ISOLATION_REPORT`` (a JSON line),
    if set, and start counting again for the next world."""
    path = os.environ.get("MEMLANE_ISOLATION_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"test": name, "ops": dict(OPS), "total": sum(OPS.values())}) + "\n")
    OPS.clear()


def _count(request: httpx.Request) -> None:
    OPS["tools" if request.url.path.startswith("/v1/tools/") else "http"] += 1


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

    capped: bool = False
    """The session store evicts (in-process or Redis ``max_sessions``): a user's own new
    session may evict that user's oldest ones."""
    forms: bool = True
    """Formation jobs of the tenants run (False: nothing serves their queues, so a ``reset``
    write deletes the session itself instead of waiting for its job)."""

    @property
    def reads(self) -> Any:
        return self.reader if self.reader is not None else self.http


# --------------------------------------------------------------------------- writes

#: tenant, user, what, by the tenant-wide key, pool slot (``SLOTS`` = the default import id), app
Write = tuple[str, str, str, bool, int, str]
KINDS = ("memory", "event", "event", "import", "room", "reset", "flood", "identity", "proposal")

writes_strategy = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        st.sampled_from(USERS),
        st.sampled_from(KINDS),
        st.booleans(),
        st.integers(0, SLOTS),
        st.sampled_from(APPS),
    ),
    min_size=1,
    max_size=6,
)


#: The reported attacks, as explicit examples (every run in a capped world tries them first; the
#: uncapped SQLite world skips them, tests/service/test_service_user_isolation.py has each on SQLite,
#: the identity one is in tests/service/test_service_identity.py):
#: an import into
#: another user's session; a job read after its session id was reused; a room read through a
#: session of the same id in another app; one user's floods evicting another's session (in a
#: capped store: 4 x FLOOD sessions); a sender one user linked, claimed by another user of the
#: tenant (bound key: 409, then 404 writing through it; tenant-wide key: 409, and what it writes
#: through the sender is the holder's) and linked in the other tenant (its own map);
#: pending and approved proposals of users and tenants whose ids collide (another user's or
#: tenant's must be unreadable and unreviewable).
ATTACKS: list[list[Write]] = [
    [("acme", "alice", "event", False, 0, "default"), ("acme", "alice|x", "import", False, 0, "default")],
    [
        ("acme", "alice", "event", False, 0, "default"),
        ("acme", "alice", "reset", False, 0, "default"),
        ("acme", "alice|x", "event", False, 0, "default"),
    ],
    [
        ("acme", "alice", "event", False, 1, "default"),
        ("acme", "alice", "room", True, 1, "default"),
        ("acme", "alice|x", "event", False, 1, "other"),
    ],
    [("acme", "alice", "event", False, 0, "default")] + [("acme", "alice|x", "flood", False, 0, "default")] * 4,
    [
        ("acme", "alice", "identity", False, 0, "default"),
        ("acme", "alice|x", "identity", False, 0, "default"),
        ("acme|x", "alice|x", "identity", True, 0, "default"),
        ("acme", "alice|x", "identity", True, 0, "default"),
    ],
    [
        ("acme", "alice", "proposal", False, 1, "default"),
        ("acme", "alice|x", "proposal", True, 0, "default"),
        ("acme|x", "alice", "proposal", False, 1, "default"),
    ],
]


def attacks(test: Any) -> Any:
    """Decorate a ``@given(writes=writes_strategy)`` test with :data:`ATTACKS` as explicit examples."""
    for writes in reversed(ATTACKS):
        test = example(writes=writes)(test)
    return test


@dataclass
class Outcome:
    """What the writes of one example left: who owns each token, which memory ids hold which
    token, the rooms' tokens, the jobs' participants, the acknowledged events."""

    writes: list[Write] = field(default_factory=list)

    owners: dict[str, tuple[str, str]] = field(default_factory=dict)  # token -> (tenant, user)
    ids: dict[str, str] = field(default_factory=dict)  # memory id -> token
    rooms: dict[str, tuple[str, str]] = field(default_factory=dict)  # token -> (tenant, room id)
    jobs: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)  # id -> (tenant, participants)
    events: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # acknowledged token -> tenant, app, sid
    links: dict[tuple[str, str], str] = field(default_factory=dict)  # (tenant, pool sender) -> its user
    proposals: dict[str, str] = field(default_factory=dict)  # proposal id -> token
    """Acknowledged session events that must still be there at the end: the user's own reset
    and (where the store is capped) the user's own later session creations may remove theirs."""

    def forget(self, tenant: str, user: str, where: tuple[str, str, str] | None = None) -> None:
        """The user's events (in ``where`` only, if given) need not survive the example."""
        for token, at in list(self.events.items()):
            if self.owners[token] == (tenant, user) and (where is None or at == where):
                del self.events[token]


def _client(world: Any, key: str, server: Any = None) -> httpx.Client:
    """A client with ``key`` for ``server`` (default: ``world.http``); its requests are counted."""
    return (server or world.http).new_client(  # type: ignore[no-any-return]
        headers={"Authorization": f"Bearer {key}"}, event_hooks={"request": [_count]}
    )


def _sid(ex: int, slot: int) -> str:
    return f"s{ex}k{slot}"


def _sender(ex: int, slot: int) -> str:
    """A pool sender of example ``ex`` (on channel ``sms``): shared by every user and tenant."""
    return f"+1{ex:04d}{slot}"


def _participants(world: World, tenant: str, sid: str, app: str) -> list[str] | None:
    """The session's participants as the tenant-wide key sees them (None: no such session)."""
    with _client(world, world.wide[tenant]) as c:
        r = c.get(f"/v1/sessions/{quote(sid, safe='')}", params={"app": app})
        assert r.status_code in (200, 404), r.text
        return r.json()["user_ids"] if r.status_code == 200 else None


def _wait_job(c: httpx.Client, job_id: str) -> None:
    for _ in range(3000):  # readiness wait, not a timing assertion
        r = c.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("done", "failed"):
            return
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} did not finish")


def _write(world: World, ex: int, writes: list[Write]) -> Outcome:
    """Do the writes, checking each answer against the rules; returns what they left."""
    out = Outcome(writes=writes)
    for n, (tenant, user, what, wide, slot, app) in enumerate(writes):
        token = f"zq{ex}t{n}"
        key = world.wide[tenant] if wide else world.bound[(tenant, user)]
        named = {"user_id": user} if wide else {}
        sid = _sid(ex, min(slot, SLOTS - 1))
        with _client(world, key) as c:
            if what == "memory":
                out.owners[token] = (tenant, user)
                r = c.post("/v1/memories", json={"text": f"zq{ex} {token} likes tea", **named})
                assert r.status_code == 201, r.text
                out.ids[r.json()["memories"][0]["id"]] = token
            elif what == "event":
                r = c.post("/v1/sessions", json={"session_id": sid, "app": app, "user_ids": [user]})
                assert r.status_code in (201, 409, 507), r.text
                if r.status_code == 201 and world.capped:
                    out.forget(tenant, user)  # a new session may evict the user's own oldest
                users = [user] if r.status_code == 201 else _participants(world, tenant, sid, app)
                if users is None:
                    continue  # 507: the store is full of other users' sessions; nothing changed
                if user not in users and wide:
                    continue  # a tenant-wide key may write anywhere in its tenant: not an attack
                r = c.post(
                    f"/v1/sessions/{sid}/events", params={"app": app}, json={"content": f"zq{ex} {token} said hi"}
                )
                if user not in users:  # bob's bound key into alice's session
                    assert r.status_code == 404, r.text
                    continue
                assert r.status_code == 201, r.text
                out.owners[token] = (tenant, user)
                out.events[token] = (tenant, app, sid)
            elif what == "import":
                isid = sid if slot < SLOTS else f"{user}:import"
                line = {"user_id": user, "role": "user", "content": f"zq{ex} {token} my passport is 4711"}
                if slot < SLOTS:
                    line["session_id"] = isid
                users = _participants(world, tenant, isid, "default")
                if users is None and world.capped:
                    out.forget(tenant, user)
                r = c.post("/v1/import", json={"content": json.dumps(line), "form": True})
                if users is not None and user not in users:
                    assert r.status_code == 409, r.text
                    continue
                assert r.status_code in (202, 507), r.text
                if r.status_code == 202:
                    out.owners[token] = (tenant, user)
                    out.events[token] = (tenant, "default", isid)
                    out.jobs |= {j: (tenant, frozenset([user])) for j in r.json()["jobs"]}
            elif what == "room":
                with _client(world, world.wide[tenant]) as w:
                    r = w.post(
                        "/v1/memories",
                        json={
                            "text": f"zq{ex} {token} room towels",
                            "scope": "room",
                            "agent_id": AGENT,
                            "session_id": sid,
                            "app": app,
                        },
                    )
                assert r.status_code == 201, r.text
                out.rooms[token] = (tenant, sid)
            elif what == "reset":
                users = _participants(world, tenant, sid, app)
                if users is None or user not in users:
                    continue
                r = c.post(f"/v1/sessions/{sid}/reset", params={"app": app})
                assert r.status_code == 202, r.text
                out.jobs[r.json()["job_id"]] = (tenant, frozenset(users))
                out.forget(tenant, user, (tenant, app, sid))
                if world.forms:
                    _wait_job(c, r.json()["job_id"])
                else:  # the job stays queued: delete the session, so that its id may be reused
                    r = c.delete(f"/v1/sessions/{sid}", params={"app": app})
                    assert r.status_code == 204, r.text
            elif what == "identity":
                sms = {"channel": "sms", "sender": _sender(ex, min(slot, SLOTS - 1))}
                holder = out.links.setdefault((tenant, sms["sender"]), user)
                r = c.post("/v1/identities", json={**sms, **named})
                assert r.status_code == (201 if holder == user else 409), r.text
                r = c.post("/v1/memories", json={"text": f"zq{ex} {token} wrote by sms", **sms})
                if holder != user and not wide:  # bob's bound key naming alice's sender
                    assert r.status_code == 404, r.text
                    continue
                assert r.status_code == 201 and r.json()["memories"][0]["user_id"] == holder, r.text
                out.owners[token] = (tenant, holder)  # a tenant-wide key writes for the sender's user
                out.ids[r.json()["memories"][0]["id"]] = token
            elif what == "proposal":
                r = c.post("/v1/proposals", json={"text": f"zq{ex} {token} likes jam", "reason": token, **named})
                assert r.status_code == 201, r.text
                out.owners[token] = (tenant, user)
                out.proposals[r.json()["id"]] = token
                if slot == 0:
                    r = c.post(f"/v1/proposals/{r.json()['id']}/review", json={"reviewer": "iso"})
                    assert r.status_code == 200 and r.json()["status"] == "approved", r.text
            else:  # flood
                if world.capped:
                    out.forget(tenant, user)
                for i in range(FLOOD):
                    r = c.post("/v1/sessions", json={"session_id": f"f{ex}n{n}i{i}", "user_ids": [user]})
                    assert r.status_code in (201, 507), r.text
    return out


# --------------------------------------------------------------------------- reads


def _tokens(text: str, ex: int) -> set[str]:
    return {t for t in TOKEN.findall(text) if t.startswith(f"zq{ex}t")}


def _http_reads(
    world: World, ex: int, key: str, user: str | None, out: Outcome
) -> tuple[dict[str, set[str]], set[str]]:
    """route -> the tokens of example ``ex`` it returned to ``key`` (naming ``user`` if given),
    and the ids of the example's formation jobs the key was shown."""
    ids = out.ids
    named = {"user_id": user} if user else {}
    seen: dict[str, set[str]] = {}
    jobs: set[str] = set()
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
        then = {"as_of": "2999-01-01T00:00:00Z"}  # point-in-time reads (docs/temporal.md): the same walls
        get("list as_of", "/v1/memories", params={**named, "limit": 100, "include_invalid": True, **then})
        get("list valid_at", "/v1/memories", params={**named, "limit": 100, "valid_at": then["as_of"]})
        for mid in ids:
            r = c.get(f"/v1/memories/{mid}", params={**named, **then})
            assert r.status_code in (200, 404), r.text
            seen["get as_of"] = seen.get("get as_of", set()) | _tokens(r.text, ex)
        r = c.post("/v1/search", params=then, json={"query": f"zq{ex}", "top_k": 100, **named})
        assert r.status_code == 200, r.text
        seen["search as_of"] = _tokens(r.text, ex)
        get("context as_of", "/v1/context", params={**named, **then})
        get("context", "/v1/context", params=named)
        get("profile", "/v1/profile", params=named)
        get("stats", "/v1/stats", params=named)
        get("consolidation", "/v1/consolidation-status", params=named)
        # the directory (ids and counts, no tokens): a user-bound key lists its own user only,
        # and no other user's id anywhere in the users or agents lists
        if not user:
            own = _key_user(world, key)
            r = c.get("/v1/users", params={"limit": 100})
            assert r.status_code == 200, r.text
            assert {u["user_id"] for u in r.json()["users"]} <= {own}, r.text
            r = c.get("/v1/agents")
            assert r.status_code == 200, r.text
            names = {a["agent_id"] for a in r.json()["agents"]} | {a["app"] for a in r.json()["apps"]}
            assert not names & (set(USERS) - {own}), r.text
        get("documents", "/v1/documents", params={**named, "limit": 100})
        get("reflections", "/v1/reflections", params=named)
        get("consolidated", "/v1/consolidated", params=named)
        get("consolidated history", "/v1/consolidated/history", params=named)
        if user or key:
            who = user or _key_user(world, key)
            get("export", f"/v1/users/{quote(who, safe='')}/export")
            get("summaries", f"/v1/users/{quote(who, safe='')}/summaries")
            get("timeline", f"/v1/users/{quote(who, safe='')}/timeline", params={"limit": 100})
            get("growth", f"/v1/users/{quote(who, safe='')}/growth")
        get("sessions", "/v1/sessions", params=named)
        for app in APPS:
            get("kaos sessions", "/memory/sessions", params={"app": app})
            for sid in [_sid(ex, k) for k in range(SLOTS)] + (
                [f"{u}:import" for u in USERS] if app == "default" else []
            ):
                r = c.get(f"/v1/sessions/{quote(sid, safe='')}/events", params={"app": app})
                assert r.status_code in (200, 403, 404), r.text
                seen["session events"] = seen.get("session events", set()) | _tokens(r.text, ex)
                r = c.get("/memory/events", params={"session_id": sid, "app": app})
                assert r.status_code in (200, 403, 404), r.text
                seen["kaos events"] = seen.get("kaos events", set()) | _tokens(r.text, ex)
                if sid.endswith(":import"):
                    continue
                room = {**named, "agent_id": AGENT, "session_id": sid, "app": app}
                r = c.get("/v1/memories", params={**room, "limit": 100})
                assert r.status_code in (200, 404), r.text
                seen["room list"] = seen.get("room list", set()) | _tokens(r.text, ex)
                r = c.post("/v1/search", json={"query": f"zq{ex} towels", "top_k": 50, **room})
                assert r.status_code in (200, 404), r.text
                seen["room search"] = seen.get("room search", set()) | _tokens(r.text, ex)
                r = c.post("/v1/tools/load_memory", params=room, json={"query": f"zq{ex} towels"})
                assert r.status_code in (200, 404), r.text
                seen["room tool"] = seen.get("room tool", set()) | _tokens(r.text, ex)
        r = c.get("/v1/jobs", params={"limit": 100})
        assert r.status_code == 200, r.text
        seen["jobs list"] = _tokens(r.text, ex)
        jobs |= {j["id"] for j in r.json()["jobs"]} & out.jobs.keys()
        for job in out.jobs:
            r = c.get(f"/v1/jobs/{job}")
            assert r.status_code in (200, 404), r.text
            seen["job get"] = seen.get("job get", set()) | _tokens(r.text, ex)
            if r.status_code == 200:
                jobs.add(job)
        r = c.get("/v1/proposals", params={**named, "status": "all", "limit": 100})
        assert r.status_code == 200, r.text
        seen["proposals"] = _tokens(r.text, ex)
        for pid in out.proposals:
            r = c.get(f"/v1/proposals/{pid}")
            assert r.status_code in (200, 404), r.text
            seen["proposal get"] = seen.get("proposal get", set()) | _tokens(r.text, ex)
            if user is None and r.status_code == 404:  # a bound key reviewing another's: 404, nothing changes
                r = c.post(f"/v1/proposals/{pid}/review", json={"approve": False})
                assert r.status_code == 404, r.text
                seen["proposal review"] = seen.get("proposal review", set()) | _tokens(r.text, ex)
        r = c.post("/v1/tools/search_facts", params=named, json={"query": [f"zq{ex}"], "top_k": 50})
        assert r.status_code == 200, r.text
        seen["tool search_facts"] = _tokens(r.text, ex)
        r = c.post("/v1/tools/load_memory", params=named, json={"query": f"zq{ex}"})
        assert r.status_code == 200, r.text
        seen["tool load_memory"] = _tokens(r.text, ex)
    return seen, jobs


def _identity_reads(world: World, ex: int, key: str, tenant: str, user: str, wide: bool, out: Outcome) -> None:
    """The reader lists exactly its user's links of the example, and resolves each pool sender
    only as the rules allow."""
    named = {"user_id": user} if wide else {}
    with _client(world, key, world.reads) as c:
        r = c.get("/v1/identities", params=named)
        assert r.status_code == 200, r.text
        listed = {i["sender"] for i in r.json()["identities"] if i["sender"].startswith(f"+1{ex:04d}")}
        mine = {s for (t, s), u in out.links.items() if (t, u) == (tenant, user)}
        assert listed == mine, f"{(tenant, user)} {'wide' if wide else 'bound'} lists {listed}, links {mine}"
        for slot in range(SLOTS):
            sender = _sender(ex, slot)
            holder = out.links.get((tenant, sender))
            r = c.get("/v1/identities/resolve", params={"channel": "sms", "sender": sender})
            if holder is not None and (wide or holder == user):
                assert r.status_code == 200 and r.json()["user_id"] == holder, (tenant, user, sender, r.text)
            else:
                assert r.status_code == 404, (tenant, user, sender, holder, r.text)


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
#: Routes that take no user: a tenant-wide key reads them for the whole tenant (every session
#: and job of the tenant, every room); a user-bound key only for the sessions its user takes
#: part in (rooms: in every session carrying the room's id; jobs: when the job was queued).
TENANT_LEVEL = {
    "session events",
    "kaos events",
    "kaos sessions",
    "jobs list",
    "job get",
    "room list",
    "room search",
    "room tool",
    "proposal get",  # a proposal by id: a tenant-wide key reads any of its tenant's
}


def _room_members(world: World, tenant: str, sid: str) -> set[str]:
    """The users a user-bound key of whom may read room ``sid``: those in every session of that
    id, in every app (none when no session has the id)."""
    found = [u for u in (_participants(world, tenant, sid, app) for app in APPS) if u is not None]
    return set.intersection(*(set(u) for u in found)) if found else set()


def _check(world: World, ex: int, out: Outcome) -> None:
    owners, ids = out.owners, out.ids
    members = {(t, sid): _room_members(world, t, sid) for t in TENANTS for sid in {s for _, s in out.rooms.values()}}
    for tenant in TENANTS:
        for user in USERS:
            mine = {t for t, o in owners.items() if o == (tenant, user)}
            tenants = {t for t, o in owners.items() if o[0] == tenant} | {
                t for t, (rt, _) in out.rooms.items() if rt == tenant
            }
            rooms = {t for t, (rt, sid) in out.rooms.items() if rt == tenant and user in members[(rt, sid)]}
            memories = {t for t in mine if t in ids.values()}
            views = {
                "bound key": _http_reads(world, ex, world.bound[(tenant, user)], None, out),
                "tenant key naming the user": _http_reads(world, ex, world.wide[tenant], user, out),
            }
            _identity_reads(world, ex, world.bound[(tenant, user)], tenant, user, False, out)
            _identity_reads(world, ex, world.wide[tenant], tenant, user, True, out)
            if world.mcp_url is not None:
                OPS["mcp"] += 5  # initialize + four tools
                views["bound key"][0].update(anyio.run(_mcp_reads, world.mcp_url, world.bound[(tenant, user)], ex))
            for reader, (seen, jobs) in views.items():
                wide = reader != "bound key"
                for route, tokens in seen.items():
                    allowed = tenants if wide and route in TENANT_LEVEL else mine | rooms
                    assert tokens <= allowed, (
                        f"{reader} of {(tenant, user)} saw others' {tokens - allowed} via {route}: "
                        f"{ {t: owners.get(t) or out.rooms.get(t) for t in tokens - allowed} } writes {out.writes}"
                    )
                my_jobs = {j for j, (t, users) in out.jobs.items() if t == tenant and (wide or user in users)}
                assert jobs <= my_jobs, f"{reader} of {(tenant, user)} saw others' jobs {jobs - my_jobs}"
                for route in COMPLETE & seen.keys():
                    assert memories <= seen[route], f"{reader} of {(tenant, user)}: {route} misses {memories}"
                proposed = {t for t in mine if t in out.proposals.values()}
                for route in ("proposals", "export"):
                    assert proposed <= seen[route], f"{reader} of {(tenant, user)}: {route} misses {proposed}"
                kept = {t for t in out.events if owners[t] == (tenant, user)}
                lost = kept - (seen["session events"] | seen["export"])
                assert not lost, f"{reader} of {(tenant, user)}: acknowledged events {lost} are gone"


def run_example(world: World, writes: list[Write]) -> None:
    """One example of the property: ``writes`` through ``world.http``, every read through
    ``world.reads`` (and MCP)."""
    if done() or (writes in ATTACKS and not world.capped):
        return
    ex = next(world.counter)
    _check(world, ex, _write(world, ex, writes))
    path = os.environ.get("MEMLANE_ISOLATION_REPORT")
    if path:  # the counts so far, for a long run stopped before its end
        with open(f"{path}.progress", "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"examples": ex + 1, "ops": dict(OPS), "total": sum(OPS.values())}) + "\n")
