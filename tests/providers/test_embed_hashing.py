"""HashEmbedder: deterministic feature hashing."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from memlane.errors import ConfigError, InvalidInputError
from memlane.providers.embed.base import Embedder
from memlane.providers.embed.hashing import HashEmbedder

TEXTS = [
    "The cat sat on the mat.",
    "Alice prefers dark roast coffee in the morning",
    "Straße, café, naïve — ünïcödé Wörter",
    "数据库 连接 失败",
    "x",
]


def test_protocol_and_name() -> None:
    emb = HashEmbedder(64)
    assert isinstance(emb, Embedder)
    assert emb.name == "hash:64" and emb.dim == 64
    assert HashEmbedder().dim == 256


@pytest.mark.parametrize("dim", [1, 7, 64, 384])
def test_dim_respected_and_rows_normalised(dim: int) -> None:
    out = HashEmbedder(dim).embed_sync(TEXTS)
    assert out.shape == (len(TEXTS), dim) and out.dtype == np.float32
    norms = np.linalg.norm(out, axis=1)
    if dim == 1:  # one bucket: each row is +1, -1 or (features cancelled) 0
        assert set(np.round(out[:, 0], 5)) <= {1.0, -1.0, 0.0}
    else:
        np.testing.assert_allclose(norms, 1.0, rtol=1e-5)


def test_deterministic_across_instances_and_calls() -> None:
    a, b = HashEmbedder(128), HashEmbedder(128)
    first = a.embed_sync(TEXTS)
    np.testing.assert_array_equal(first, b.embed_sync(TEXTS))
    np.testing.assert_array_equal(first, a.embed_sync(TEXTS))  # warm cache, same result
    # order and batch composition do not matter
    np.testing.assert_array_equal(b.embed_sync(TEXTS[::-1])[::-1], first)
    np.testing.assert_array_equal(b.embed_sync([TEXTS[1]])[0], first[1])


def test_deterministic_across_processes() -> None:
    """No salted hash(): another interpreter (different PYTHONHASHSEED) agrees."""
    code = (
        "from memlane.providers.embed.hashing import HashEmbedder\n"
        "import json; print(json.dumps(HashEmbedder(16).embed_sync(['hello world foo']).tolist()))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            timeout=60,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    here = HashEmbedder(16).embed_sync(["hello world foo"])
    np.testing.assert_array_equal(np.asarray(json.loads(outs.pop()), dtype=np.float32), here)


def test_same_text_same_vector_case_insensitive() -> None:
    emb = HashEmbedder()
    out = emb.embed_sync(["Hello, World!", "hello world", "hello world"])
    np.testing.assert_array_equal(out[1], out[2])
    np.testing.assert_allclose(out[0], out[1], atol=1e-7)  # case and punctuation ignored


def test_similar_texts_are_closer_than_unrelated() -> None:
    emb = HashEmbedder(256)
    base, near, inflected, far = emb.embed_sync(
        [
            "the user likes hiking in the mountains",
            "the user likes hiking in the alps",
            "users liked hikes in mountainous places",
            "quarterly tax filing deadline for corporations",
        ]
    )
    assert base @ near > base @ far + 0.3
    assert base @ inflected > base @ far  # character trigrams catch shared word pieces
    assert abs(base @ far) < 0.3


def test_word_order_matters_a_little() -> None:
    emb = HashEmbedder(256)
    a, b, c = emb.embed_sync(["dog bites man", "man bites dog", "dog bites man"])
    assert a @ c == pytest.approx(1.0, abs=1e-6)
    assert 0.5 < a @ b < 0.999  # same words, different bigrams


def test_empty_text_is_zero_vector() -> None:
    out = HashEmbedder(32).embed_sync(["", "   ", "!!! ...", "word"])
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out[:3], np.zeros((3, 32), dtype=np.float32))
    assert np.linalg.norm(out[3]) == pytest.approx(1.0, rel=1e-5)


def test_empty_batch() -> None:
    out = HashEmbedder(32).embed_sync([])
    assert out.shape == (0, 32) and out.dtype == np.float32


def test_large_batch_is_chunked_consistently() -> None:
    emb = HashEmbedder(32)
    texts = [f"item {i} of the list number {i % 97}" for i in range(10_000)]
    out = emb.embed_sync(texts)
    assert out.shape == (10_000, 32)
    np.testing.assert_array_equal(out[9_999], HashEmbedder(32).embed_sync([texts[9_999]])[0])


async def test_async_embed_batch_matches_sync() -> None:
    emb = HashEmbedder(64)
    out = await emb.embed_batch(TEXTS)
    np.testing.assert_array_equal(out, HashEmbedder(64).embed_sync(TEXTS))
    await emb.aclose()


def test_bad_arguments() -> None:
    for dim in (0, -1, True, 2.5):
        with pytest.raises(ConfigError):
            HashEmbedder(dim)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        HashEmbedder().embed_sync(["ok", None])  # type: ignore[list-item]
