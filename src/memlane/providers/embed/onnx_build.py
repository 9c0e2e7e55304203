"""Build (and cache) an ONNX graph of a BERT encoder from its safetensors weights.

Private helper of :mod:`memlane.providers.embed.local`. The graph is written with the
``onnx`` package's helper API (no torch, no download) and computes exactly what
:class:`memlane.providers.embed._bert.BertEncoder` computes in numpy:

* inputs ``input_ids`` and ``attention_mask``, int64 ``(batch, seq)``: both axes dynamic,
  ids padded on the right, mask 1 on real tokens;
* output ``last_hidden_state``, float32 ``(batch, seq, hidden)``; pooling and L2
  normalisation stay in numpy (:func:`_bert.pool`), shared with the numpy backend.

Only standard ONNX operators (opset 17: LayerNormalization, Erf, MatMul, Softmax, ...) are
used; onnxruntime's own graph optimiser fuses them into its contrib kernels (LayerNorm, Gelu,
SkipLayerNorm, ...) when the session is created. The 1/sqrt(head_dim) attention scale is
folded into the query weights and Q, K and V are one matrix product, as in the numpy encoder.

Cache: ``$MEMLANE_CACHE_DIR/onnx/`` or ``~/.cache/memlane/onnx/`` (``$XDG_CACHE_HOME`` is
honoured), one file per weights SHA-256, precision and builder version, written atomically
(temporary file + ``os.replace``), so concurrent processes never read a half-written file.
The int8 file is made from the cached fp32 file by onnxruntime's dynamic quantisation
(int8 weights of the matrix products, activations quantised per call; the embedding tables,
LayerNorms and softmax stay float32).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import tempfile
import threading
import weakref
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane._native import onnxruntime_blocked
from memlane.providers.embed import _bert

log = logging.getLogger("memlane")

#: Bumped whenever the graph changes, so older cached files are not used (2: GELU written
#: with a division by sqrt(2), the form onnxruntime fuses into one Gelu kernel).
BUILD_VERSION = 2
OPSET = 17
PRECISIONS = ("fp32", "int8")
ENV_CACHE_DIR = "MEMLANE_CACHE_DIR"
#: Builds done by this process (tests check that a cached file is reused).
build_count = 0

# Sessions shared by the encoders of one process, per (cached file, threads), while any
# encoder holds them: a second Memory with the local embedder opens no new session (about
# 0.3-0.8 s and the weights' memory each). run() is thread-safe, so sharing is safe.
_shared_sessions: weakref.WeakValueDictionary[tuple[str, int], Any] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def forget_sessions() -> None:
    """Stop sharing the sessions opened so far (the next encoders open the cached file again)."""
    with _shared_lock:
        _shared_sessions.clear()


#: Node-name infix of the matrix products with a weight (the ones int8 quantises).
WEIGHT_MATMUL = "weight_matmul_"

_GELU_EXACT = {"gelu"}
_GELU_TANH = {"gelu_new", "gelu_fast", "gelu_pytorch_tanh"}


def cache_dir() -> Path:
    """``$MEMLANE_CACHE_DIR/onnx``, else ``$XDG_CACHE_HOME/memlane/onnx``, else ``~/.cache/memlane/onnx``."""
    root = os.environ.get(ENV_CACHE_DIR)
    if root:
        return Path(root).expanduser() / "onnx"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "memlane" / "onnx"


def cache_path(weights_sha256: str, precision: str, directory: Path | None = None) -> Path:
    """Where the graph of the weights with this digest is cached, for ``precision``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return (directory or cache_dir()) / f"bert-{weights_sha256.lower()}-v{BUILD_VERSION}-{precision}.onnx"


def metadata(weights_sha256: str, precision: str) -> dict[str, str]:
    """The metadata written into (and checked on) a cached model."""
    return {
        "memlane.builder": f"onnx_build/{BUILD_VERSION}",
        "memlane.weights_sha256": weights_sha256.lower(),
        "memlane.precision": precision,
    }


# ---------------------------------------------------------------------------- the graph


class _Graph:
    """Collects nodes and initialisers with unique names."""

    def __init__(self) -> None:
        import onnx

        self.onnx = onnx
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: list[str], node: str | None = None, **attrs: Any) -> str:
        self._n += 1
        out = f"{op_type.lower()}_{self._n}"
        node_name = node or f"n{self._n}_{op_type}"
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, [out], name=node_name, **attrs))
        return out


def build_model(config: _bert.BertConfig, tensors: Mapping[str, _bert.F32], *, doc: str = "") -> Any:
    """The float32 ``onnx.ModelProto`` of the BERT encoder with these weights.

    ``tensors`` are the float32 weights as :func:`_bert.read_safetensors` returns them (with
    or without a ``bert.`` prefix). Raises ``KeyError`` / ``ValueError`` for missing or
    misshapen tensors (the same checks as the numpy encoder, which does the weight layout).
    """
    import onnx
    from onnx import TensorProto, helper

    enc = _bert.BertEncoder(config, tensors)  # validates shapes, folds scale, fuses QKV
    act = config.hidden_act
    d, h = config.hidden_size, config.num_heads
    dh = d // h
    g = _Graph()

    word = g.const("word_embeddings", enc.word)
    pos = g.const("position_type_embeddings", enc.pos_type)
    eps = float(config.eps)

    # embeddings: word[ids] + (position + token_type 0)[0..seq)
    ids_shape = g.op("Shape", ["input_ids"])
    seq_len = g.op("Gather", [ids_shape, g.const("one_i64", [1], np.int64)], axis=0)  # (1,)
    zero = g.const("zero_i64", [0], np.int64)
    pos_rows = g.op("Slice", [pos, zero, seq_len, zero])  # (seq, D)
    x = g.op("Gather", [word, "input_ids"], axis=0)  # (B, seq, D)
    x = g.op("Add", [x, pos_rows])
    x = g.op(
        "LayerNormalization",
        [x, g.const("emb_ln_g", enc.emb_ln_g), g.const("emb_ln_b", enc.emb_ln_b)],
        axis=-1,
        epsilon=eps,
    )

    # additive attention mask (B, 1, 1, seq): 0 on real tokens, -1e9 on padding (as numpy)
    mask_f = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask_f = g.op("Unsqueeze", [mask_f, g.const("mask_axes", [1, 2], np.int64)])
    inv = g.op("Sub", [g.const("one_f", 1.0), mask_f])
    add_mask = g.op("Mul", [inv, g.const("neg_big", -1e9)])

    heads_shape = g.const("heads_shape", [0, 0, h, dh], np.int64)
    merge_shape = g.const("merge_shape", [0, 0, d], np.int64)
    split_sizes = g.const("qkv_split", [d, d, d], np.int64)
    half = g.const("half", 0.5)
    one = g.const("one", 1.0)
    sqrt2 = g.const("sqrt2", math.sqrt(2.0))

    for n, layer in enumerate(enc.layers):
        p = f"l{n}_"
        qkv = g.op("MatMul", [x, g.const(p + "w_qkv", layer.w_qkv)], node=p + WEIGHT_MATMUL + "qkv")
        qkv = g.op("Add", [qkv, g.const(p + "b_qkv", layer.b_qkv)])
        split = helper.make_node("Split", [qkv, split_sizes], [p + "q", p + "k", p + "v"], name=f"{p}split", axis=-1)
        g.nodes.append(split)
        q = g.op("Transpose", [g.op("Reshape", [p + "q", heads_shape])], perm=[0, 2, 1, 3])  # (B,H,L,dh)
        k = g.op("Transpose", [g.op("Reshape", [p + "k", heads_shape])], perm=[0, 2, 3, 1])  # (B,H,dh,L)
        v = g.op("Transpose", [g.op("Reshape", [p + "v", heads_shape])], perm=[0, 2, 1, 3])  # (B,H,L,dh)
        scores = g.op("MatMul", [q, k])  # scale already folded into the query weights
        scores = g.op("Add", [scores, add_mask])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("MatMul", [probs, v])  # (B,H,L,dh)
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        y = g.op("MatMul", [ctx, g.const(p + "w_o", layer.w_o)], node=p + WEIGHT_MATMUL + "o")
        y = g.op("Add", [y, g.const(p + "b_o", layer.b_o)])
        y = g.op("Add", [y, x])
        x = g.op(
            "LayerNormalization",
            [y, g.const(p + "ln1_g", layer.ln1_g), g.const(p + "ln1_b", layer.ln1_b)],
            axis=-1,
            epsilon=eps,
        )
        inter = g.op("MatMul", [x, g.const(p + "w_1", layer.w_1)], node=p + WEIGHT_MATMUL + "ffn1")
        inter = g.op("Add", [inter, g.const(p + "b_1", layer.b_1)])
        if act in _GELU_EXACT:  # x * 0.5 * (1 + erf(x / sqrt(2))): the pattern ORT fuses to Gelu
            # (a Div: onnxruntime's GeluFusion does not match a Mul by 1/sqrt(2), which left
            # Erf, Mul and Add as five passes over the (tokens x 1,536) activations)
            e = g.op("Erf", [g.op("Div", [inter, sqrt2])])
            inter = g.op("Mul", [g.op("Mul", [inter, g.op("Add", [e, one])]), half])
        elif act in _GELU_TANH:
            cube = g.op("Mul", [g.op("Mul", [inter, inter]), inter])
            inner = g.op("Add", [inter, g.op("Mul", [cube, g.const(p + "c0", 0.044715)])])
            t = g.op("Tanh", [g.op("Mul", [inner, g.const(p + "c1", math.sqrt(2.0 / math.pi))])])
            inter = g.op("Mul", [g.op("Mul", [inter, half]), g.op("Add", [t, one])])
        elif act == "relu":
            inter = g.op("Relu", [inter])
        else:  # pragma: no cover - LocalEmbedder refuses other activations first
            raise ValueError(f"unsupported hidden_act {act!r}")
        y = g.op("MatMul", [inter, g.const(p + "w_2", layer.w_2)], node=p + WEIGHT_MATMUL + "ffn2")
        y = g.op("Add", [y, g.const(p + "b_2", layer.b_2)])
        y = g.op("Add", [y, x])
        x = g.op(
            "LayerNormalization",
            [y, g.const(p + "ln2_g", layer.ln2_g), g.const(p + "ln2_b", layer.ln2_b)],
            axis=-1,
            epsilon=eps,
        )
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
    ]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", d])]
    graph = helper.make_graph(g.nodes, "memlane_bert_encoder", inputs, outputs, initializer=g.inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="memlane",
        doc_string=doc or "BERT encoder built by memlane from safetensors weights",
    )
    model.ir_version = 8  # readable by onnxruntime >= 1.10
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------- the cache


def _set_metadata(model: Any, meta: Mapping[str, str]) -> None:
    from onnx import helper

    del model.metadata_props[:]
    helper.set_model_props(model, dict(meta))


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # a cache others may read, not a secret (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_fp32(path: Path, config: _bert.BertConfig, tensors: Mapping[str, _bert.F32], weights_sha256: str) -> None:
    """Build the fp32 graph and write it to ``path`` atomically."""
    global build_count
    model = build_model(config, tensors)
    _set_metadata(model, metadata(weights_sha256, "fp32"))
    _atomic_write(path, model.SerializeToString())
    build_count += 1
    log.info("memlane: built the ONNX encoder %s", path)


class _DropQuantHint(logging.Filter):
    """Drops onnxruntime.quantization's root-logger advice to run its pre-processing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def write_int8(path: Path, fp32_path: Path, weights_sha256: str) -> None:
    """Quantise the cached fp32 graph and write it to ``path`` atomically.

    Dynamic quantisation of the matrix products with a weight: int8 weights with one scale
    per output column (per-channel; one scale per matrix measured cosine 0.96 against fp32,
    per-channel 0.993), uint8 activations quantised per call. The attention products
    (activation x activation), embeddings, LayerNorms and softmax stay float32.
    """
    global build_count
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    fp32 = onnx.load(str(fp32_path))
    weight_nodes = [n.name for n in fp32.graph.node if n.op_type == "MatMul" and WEIGHT_MATMUL in n.name]
    del fp32
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    hint = _DropQuantHint()
    root = logging.getLogger()
    root.addFilter(hint)
    try:
        quantize_dynamic(
            fp32_path,
            tmp,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=weight_nodes,
            per_channel=True,
            reduce_range=False,
            weight_type=QuantType.QInt8,
        )
        model = onnx.load(tmp)
        _set_metadata(model, metadata(weights_sha256, "int8"))
        _atomic_write(path, model.SerializeToString())
    finally:
        root.removeFilter(hint)
        with suppress(OSError):
            os.unlink(tmp)
    build_count += 1
    log.info("memlane: built the int8 ONNX encoder %s", path)


# ---------------------------------------------------------------------------- running it


def available() -> str | None:
    """``None`` when onnxruntime imports and onnx is installed, else why not."""
    blocked = onnxruntime_blocked()
    if blocked is not None:
        return blocked
    try:
        import onnxruntime  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    try:  # onnx is only imported to build a graph (it takes ~0.3 s to import)
        found = importlib.util.find_spec("onnx") is not None
    except (ImportError, ValueError, AttributeError):  # e.g. sys.modules["onnx"] = None
        found = False
    return None if found else "No module named 'onnx'"


#: onnxruntime's session entry for exact (non-saturating) int8 matrix products on every x86 CPU.
X64_QUANT_PRECISION = "session.x64quantprecision"

#: onnxruntime graph fusions the sessions leave out: its fused SkipLayerNormalization kernel
#: (residual Add + LayerNormalization in one) measured 1.2x slower per int8 encoder pass than the
#: Add and LayerNormalization it replaces (onnxruntime 1.32; docs/benchmarks.md, "Issue 22:
#: ingest with embeddings"). The same arithmetic, rounded in another order.
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)

# A one-node int8 graph probing the default (u8s8) integer matrix product of this CPU:
# ``y = a @ b`` with ``a`` dynamically quantised (all ones: uint8 255, scale 1/255) and ``b`` a
# 32 x 8 int8 matrix of 127 (scale 1). Exact: y = 32 * 127 = 4064 in every cell. A kernel that
# adds pairs of u8 x s8 products in 16 bits (AVX2 / AVX-512 without VNNI: vpmaddubsw) saturates
# each pair at 32,767 (exact: 64,770), so y is about half. Built with the ``onnx`` helper API
# (``tests/providers/test_embed_onnx.py`` rebuilds it and compares), kept as bytes so that
# opening the encoder does not import ``onnx`` (~0.3 s).
_PROBE_K = 32
_PROBE_MODEL = (
    b'\x08\x08\x12\x07memlane:\xde\x03\nF\n\x01a\n\x01b\n\x07b_scale\n\x0cb_zero_point\x12\x01y"\x15'
    b"DynamicQuantizeMatMul:\rcom.microsoft\x12\nu8s8_probe*\x8c\x02\x08 \x08\x08\x10\x03B\x01bJ\x80\x02"
    + b"\x7f" * 256
    + b"*/\x08\x08\x10\x01B\x07b_scaleJ "
    + b"\x00\x00\x80?" * 8
    + b"*\x1c\x08\x08\x10\x03B\x0cb_zero_pointJ\x08"
    + b"\x00" * 8
    + b"Z\x14\n\x01a\x12\x0f\n\r\x08\x01\x12\t\n\x03\x12\x01m\n\x02\x08 b\x14\n\x01y\x12\x0f\n\r\x08\x01\x12\t"
    b"\n\x03\x12\x01m\n\x02\x08\x08B\x04\n\x00\x10\x11B\x11\n\rcom.microsoft\x10\x01"
)
_u8s8_exact: bool | None = None
_probe_lock = threading.Lock()


def probe_u8s8(entry: str | None = None) -> npt.NDArray[np.float32]:
    """Run the probe graph (``entry``: a value for :data:`X64_QUANT_PRECISION`, else unset)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if entry is not None:
        opts.add_session_config_entry(X64_QUANT_PRECISION, entry)
    session = ort.InferenceSession(_PROBE_MODEL, opts, providers=["CPUExecutionProvider"])
    (out,) = session.run(["y"], {"a": np.ones((4, _PROBE_K), dtype=np.float32)})
    result: npt.NDArray[np.float32] = out
    return result


def u8s8_products_exact() -> bool:
    """Whether onnxruntime's default int8 matrix product is exact on this CPU (probed once per process).

    True with VNNI (AVX-512 VNNI, AVX-VNNI) and on non-x86 CPUs; False where it saturates (AVX2,
    AVX-512 without VNNI), and when the probe cannot run (the safe answer: the sessions then ask
    for the exact kernel).
    """
    global _u8s8_exact
    with _probe_lock:
        if _u8s8_exact is None:
            try:
                out = probe_u8s8()
                _u8s8_exact = bool(np.allclose(out, _PROBE_K * 127.0, rtol=1e-4))
            except Exception as exc:  # an onnxruntime without the contrib operator, say
                log.debug("memlane: int8 probe failed (%s); asking for exact int8 products", exc)
                _u8s8_exact = False
        return _u8s8_exact


class OnnxEncoder:
    """The BERT encoder run by onnxruntime; same ``forward(ids, mask)`` as :class:`_bert.BertEncoder`.

    The graph file is found in (or built into) the cache on the first :meth:`forward`, not
    before. One ORT session per thread count (``intra_op_num_threads``), created on first
    use; ``run`` is thread-safe, so several worker threads may share the 1-thread session.
    Sessions run sequentially (``inter_op_num_threads=1``), with every graph optimisation
    on and without spinning worker threads (on a busy machine a spinning pool waits for
    threads that are not running, the problem described in :mod:`memlane.providers._blas`).
    """

    def __init__(
        self,
        config: _bert.BertConfig,
        weights_file: Path,
        weights_sha256: str,
        precision: str,
        directory: Path | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.config = config
        self.weights_file = weights_file
        self.weights_sha256 = weights_sha256.lower()
        self.precision = precision
        self.path = cache_path(self.weights_sha256, precision, directory)
        self._sessions: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._in_memory: bytes | None = None  # the serialised graph, when the cache is not writable

    def _open(self, path: Path | bytes, precision: str, threads: int) -> Any:
        """An ORT session on ``path`` (or a serialised model); raises when it is missing, unreadable or not ours."""
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        # int8 on x86 without VNNI (AVX2, AVX-512 without VNNI): ORT's default u8s8 kernel adds
        # pairs of products in 16 bits, which saturates (min cosine to fp32 0.9695 on an AVX2-only
        # EPYC, 0.974 with VNNI). This entry makes ORT use u8u8 products instead, whose integer sums
        # are exact, so an int8 vector does not depend on the instruction set. It is set only where
        # the probe saw the default kernel saturate: with VNNI the default is already exact (the
        # same vectors bit for bit) and the entry measured 1.6x slower there (docs/benchmarks.md).
        if precision == "int8" and not u8s8_products_exact():
            opts.add_session_config_entry(X64_QUANT_PRECISION, "1")
        model = path if isinstance(path, bytes) else str(path)
        session = ort.InferenceSession(
            model, opts, providers=["CPUExecutionProvider"], disabled_optimizers=list(DISABLED_OPTIMIZERS)
        )
        meta = dict(session.get_modelmeta().custom_metadata_map)
        expected = metadata(self.weights_sha256, precision)
        if any(meta.get(k) != v for k, v in expected.items()):
            raise ValueError(f"{self.path.name} was not built for these weights / this precision")
        return session

    def _load_or_build(self, threads: int) -> Any:
        """Open the cached file; (re)build it when missing or unreadable, then open it.

        When the cache directory cannot be written (a read-only home, say), the graph is
        built in a temporary directory and kept in memory for this encoder's sessions.
        """
        if self._in_memory is not None:
            return self._open(self._in_memory, self.precision, threads)
        try:
            return self._open(self.path, self.precision, threads)
        except Exception as exc:
            if self.path.exists():
                log.warning("memlane: rebuilding the ONNX encoder cache %s (%s)", self.path, exc)
        try:
            self._build(self.path)
        except OSError as exc:
            log.warning(
                "memlane: cannot write the ONNX encoder cache in %s (%s); building it in memory for this "
                "process (set $%s to a writable folder)",
                self.path.parent,
                exc,
                ENV_CACHE_DIR,
            )
            with tempfile.TemporaryDirectory(prefix="memlane-onnx-") as tmp:
                private = Path(tmp) / self.path.name
                self._build(private)
                self._in_memory = private.read_bytes()
            return self._open(self._in_memory, self.precision, threads)
        return self._open(self.path, self.precision, threads)

    def _build(self, path: Path) -> None:
        if self.precision == "int8":
            fp32 = cache_path(self.weights_sha256, "fp32", path.parent)
            try:
                self._open(fp32, "fp32", 1)
            except Exception:
                self._build_fp32(fp32)
            write_int8(path, fp32, self.weights_sha256)
        else:
            self._build_fp32(path)

    def _build_fp32(self, path: Path) -> None:
        tensors = _bert.read_safetensors(self.weights_file, skip=("pooler.",))
        write_fp32(path, self.config, tensors, self.weights_sha256)

    def session(self, threads: int = 1) -> Any:
        """The session with ``threads`` intra-op threads (loading or building the graph first)."""
        session = self._sessions.get(threads)
        if session is not None:
            return session
        with self._lock:
            session = self._sessions.get(threads)
            if session is None:
                key = (str(self.path), threads)
                with _shared_lock:
                    session = _shared_sessions.get(key)
                if session is None:
                    session = self._load_or_build(threads)
                    if self._in_memory is None:
                        with _shared_lock:
                            _shared_sessions[key] = session
                self._sessions[threads] = session
            return session

    def forward(self, ids: _bert.I64, mask: npt.NDArray[np.bool_], threads: int = 1) -> _bert.F32:
        """Hidden states of the last layer, float32 ``(B, L, D)`` (see :meth:`_bert.BertEncoder.forward`)."""
        if ids.shape[1] > self.config.max_positions:
            raise ValueError(f"sequence of {ids.shape[1]} tokens exceeds max_position_embeddings")
        feeds = {"input_ids": np.ascontiguousarray(ids, dtype=np.int64), "attention_mask": mask.astype(np.int64)}
        (hidden,) = self.session(threads).run(["last_hidden_state"], feeds)
        out: _bert.F32 = hidden
        return out

    def close(self) -> None:
        with self._lock:
            self._sessions.clear()
