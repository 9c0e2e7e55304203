"""Property: whatever users write, no read path returns another user's (or app's) memory."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import AsyncMemory, NotFoundError

USERS = ["alice", "bob", "carol"]
APPS = [None, "app1"]
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


async def _scenario(
    path: Path, w: list[tuple[str, str | None, str, bool]], r: list[tuple[str, str | None, str]]
) -> None:
    async with AsyncMemory(path, embedder="hash:64", sessions="local") as m:
        owner: dict[str, tuple[str, str | None]] = {}
        for user, app, text, as_msg in w:
            payload = [{"role": "user", "content": text}] if as_msg else text
            for f in await m.add(payload, user_id=user, agent_id=app, session_id=f"{user}-s"):  # type: ignore[arg-type]
                owner[f.id] = (user, app)
        for user, app, q in r:
            res = await m.search([q, "and " + q], user_id=user, agent_id=app, top_k=50)
            for h in res.hits:
                assert owner[h.fact.id] == (user, app)
                assert h.fact.user_id == user and h.fact.agent_id == app
            page = await m.list(user_id=user, agent_id=app, limit=1000, include_invalid=True)
            assert all(owner[f.id] == (user, app) for f in page.items)
            assert page.total == sum(1 for o in owner.values() if o == (user, app))
            for fid, o in owner.items():
                if o != (user, app):
                    try:
                        await m.get(fid, user_id=user, agent_id=app)
                    except NotFoundError:
                        continue
                    raise AssertionError("read another scope's fact")
            adk = await m.search_memory(app or "default", user, q)
            texts = {h.content for h in adk.memories}
            mine = set()
            for f in (await m.list(user_id=user, agent_id=app, limit=1000)).items:
                mine.add(f.content)
            assert texts <= mine


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes, reads)
def test_no_read_crosses_scopes(
    w: list[tuple[str, str | None, str, bool]], r: list[tuple[str, str | None, str]]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(_scenario(Path(d) / "iso.db", w, r))
