"""Property: whatever users write, no read path returns another user's (or agent's) memory.

The visibility model (``memlane.models.Scope``): ``user_id`` alone reads all of that user's
own memories, under every agent; ``user_id`` + ``agent_id`` reads only the user's memories
under that agent. Ids are adversarial: separators, control characters, unicode, long. Every write names the same
session id (``"s"``): session ids collide across users and agents.

``MEMLANE_ISOLATION_OPS=N`` runs examples until N engine calls were made (the long run of
docs/reliability.md; ``MEMLANE_ISOLATION_REPORT=path`` appends the count as a JSON line).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import AsyncMemory, NotFoundError

#: Ids chosen to collide under naive key schemes: the old bare ``\x1f`` join, ``|``, ``%``.
USERS = ["alice", "bob", "y\x1fz", "z", "a|b", "a%7Cb", "ü" * 40, "\x00"]
APPS = [None, "app1", "x", "x\x1fy", "b|c", "\u200bapp"]
WORDS = ["red", "green", "blue", "apple", "pear", "train", "boat", "cat", "dog", "sun"]

writes = st.lists(
    st.tuples(
        st.sampled_from(USERS),
        st.sampled_from(APPS),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
        st.booleans(),  # as a chat message (True) or a plain fact
    ),
    min_size=1,
    max_size=25,
)
reads = st.lists(
    st.tuples(st.sampled_from(USERS), st.sampled_from(APPS), st.sampled_from(WORDS)), min_size=1, max_size=8
)


#: Engine calls made by the property (the long run counts them).
CALLS = [0]
TARGET_OPS = int(os.environ.get("MEMLANE_ISOLATION_OPS") or 0)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    path = os.environ.get("MEMLANE_ISOLATION_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"test": "test_isolation (Python engine, SQLite)", "ops": {"python": CALLS[0]}}) + "\n")


def _visible(owner: tuple[str, str | None], user: str, app: str | None) -> bool:
    return owner[0] == user and (app is None or owner[1] == app)


async def _scenario(
    path: Path, w: list[tuple[str, str | None, str, bool]], r: list[tuple[str, str | None, str]]
) -> None:
    async with AsyncMemory(path, embedder="hash:64", sessions="local") as m:
        owner: dict[str, tuple[str, str | None]] = {}
        for user, app, text, as_msg in w:
            payload = [{"role": "user", "content": text}] if as_msg else text
            CALLS[0] += 1
            for f in await m.add(payload, user_id=user, agent_id=app, session_id="s"):  # type: ignore[arg-type]
                owner[f.id] = (user, app)
        for user, app, q in r:
            res = await m.search([q, "and " + q], user_id=user, agent_id=app, top_k=50)
            for h in res.hits:
                assert _visible(owner[h.fact.id], user, app)
                assert h.fact.user_id == user and (app is None or h.fact.agent_id == app)
            CALLS[0] += 2
            page = await m.list(user_id=user, agent_id=app, limit=1000, include_invalid=True)
            assert all(_visible(owner[f.id], user, app) for f in page.items)
            assert page.total == sum(1 for o in owner.values() if _visible(o, user, app))
            for fid, o in owner.items():
                if not _visible(o, user, app):
                    CALLS[0] += 1
                    try:
                        await m.get(fid, user_id=user, agent_id=app)
                    except NotFoundError:
                        continue
                    raise AssertionError("read another scope's fact")


@settings(  # a long run: enough examples for TARGET_OPS calls (about 25 each; the rest return at once)
    max_examples=TARGET_OPS // 10 + 1 if TARGET_OPS else 40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(writes, reads)
def test_no_read_crosses_scopes(
    w: list[tuple[str, str | None, str, bool]], r: list[tuple[str, str | None, str]]
) -> None:
    if TARGET_OPS and CALLS[0] >= TARGET_OPS:
        return
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(_scenario(Path(d) / "iso.db", w, r))


async def test_separator_in_ids_does_not_leak(tmp_path: Path, open_memory: Callable[..., AsyncMemory]) -> None:
    """The reproduction from the attack report: ids containing the old separator."""
    async with open_memory(tmp_path / "sep.db", embedder="hash:64", sessions="null") as m:
        await m.add("victim secret zebra", user_id="y\x1fz", agent_id="x")
        assert (await m.search("zebra", user_id="z", agent_id="x\x1fy")).hits == []
        assert (await m.list(user_id="z", agent_id="x\x1fy")).total == 0
        assert len((await m.search("zebra", user_id="y\x1fz", agent_id="x")).hits) == 1
