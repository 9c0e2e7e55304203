"""A BERT encoder forward pass in plain numpy (float32), plus a safetensors reader.

Private helper of :mod:`memlane.providers.embed.local`; nothing here imports torch.

The arithmetic follows Hugging Face ``BertModel`` in eval mode (no dropout):

* embeddings = LayerNorm(word[ids] + position[0..L) + token_type[0])
* per layer: fused QKV projection, scaled dot-product attention with an additive mask for
  padding, output projection + residual + LayerNorm, feed-forward with GELU + residual +
  LayerNorm.

Speed notes: weights are stored pre-transposed and contiguous (``x @ W`` without a copy),
Q, K and V are one matmul, the 1/sqrt(head_dim) attention scale is folded into the query
weights, every buffer of a forward pass is allocated once and reused by all layers, the
matmuls run over all rows of the batch at once (OpenBLAS repacks the weight matrix on every
call, so fewer, taller matmuls are faster), and the GELU (about 20 numpy passes) runs in
place over row chunks small enough to stay in the CPU cache.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

_MAX_HEADER = 100 * 1024 * 1024
_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}
_INT_DTYPES = {"I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"}
# Rows of the feed-forward activation processed at once, so its scratch stays in cache.
_ACT_CHUNK = 64
# OpenBLAS (numpy's BLAS) multiplies matrices with M*N*K <= 100**3 by a "small matrix"
# kernel that skips packing the operands. For a short query (a few rows) packing the weight
# matrix dominates, so _matmul cuts the weights into column blocks under that size.
_SMALL_MNK = 1_000_000
_SMALL_ROWS = 16
_SMALL_MIN_COLS = 48


class SafetensorsError(ValueError):
    """The file is not a valid safetensors file (or holds a dtype we cannot read)."""


def read_safetensors(path: Path, *, skip: tuple[str, ...] = ()) -> dict[str, F32]:
    """Read every floating-point tensor of a ``.safetensors`` file as float32.

    Format: an 8-byte little-endian header length ``n``, ``n`` bytes of JSON mapping each
    tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative
    to the end of the header), then the raw little-endian tensor bytes. F16, BF16 and F64
    are converted to float32; integer tensors (e.g. BERT's ``position_ids`` buffer) and
    names containing any of ``skip`` are left out. Each tensor is read straight into its
    own array, so the file is not kept open or mapped afterwards.
    """
    size = path.stat().st_size
    out: dict[str, F32] = {}
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path} is too short to be a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER or 8 + n > size:
            raise SafetensorsError(f"{path} has an invalid safetensors header length ({n})")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SafetensorsError(f"{path} has a malformed safetensors header: {exc}") from exc
        if not isinstance(header, dict):
            raise SafetensorsError(f"{path} has a malformed safetensors header")
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__" or any(s in name for s in skip):
                continue
            try:
                dtype = str(info["dtype"])
                shape = tuple(int(d) for d in info["shape"])
                begin, end = (int(o) for o in info["data_offsets"])
            except (KeyError, TypeError, ValueError) as exc:
                raise SafetensorsError(f"{path}: bad header entry for {name!r}") from exc
            if dtype not in _DTYPES:
                if dtype in _INT_DTYPES:
                    continue  # integer buffers are not weights
                raise SafetensorsError(f"{path}: tensor {name!r} has unsupported dtype {dtype}")
            np_dtype, itemsize = _DTYPES[dtype]
            count = math.prod(shape)
            if begin < 0 or end - begin != count * itemsize or base + end > size:
                raise SafetensorsError(f"{path}: tensor {name!r} has inconsistent data offsets")
            raw = np.empty(count, dtype=np_dtype)
            f.seek(base + begin)
            if f.readinto(raw.view(np.uint8).data) != end - begin:
                raise SafetensorsError(f"{path}: tensor {name!r} is truncated")
            if dtype == "BF16":  # bfloat16 is the top half of a float32
                arr = (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
            else:
                arr = raw.astype(np.float32, copy=False)
            out[name] = arr.reshape(shape)
    return out


# ---------------------------------------------------------------------------- activations

# GELU(x) = x * Phi(x) = relu(x) - 0.5 * |x| * erfc(|x| / sqrt(2)), with erfc from
# Abramowitz & Stegun 7.1.26: erfc(z) = t * P(t) * exp(-z*z), t = 1 / (1 + p*z), whose error
# is at most 1.5e-7 (float32 epsilon is 1.2e-7). Written as in-place passes over buffers
# that the caller keeps in cache; |x| is clamped to 10 so exp() never produces denormals
# (0.5 * 10 * erfc(10 / sqrt(2)) < 1e-22, far below float32 resolution of the result).
_AS_P = np.float32(0.3275911 / math.sqrt(2.0))  # p / sqrt(2): t from |x| directly
_AS_HALF_A = tuple(np.float32(0.5 * a) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
_SQRT_2_OVER_PI = np.float32(math.sqrt(2.0 / math.pi))
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_CLAMP = np.float32(10.0)
_MINUS_HALF = np.float32(-0.5)


def gelu_inplace(x: F32, a: F32, t: F32, e: F32) -> None:
    """Exact (erf) GELU in place, BERT's ``hidden_act="gelu"``; max abs error ~5e-7.

    ``a``, ``t`` and ``e`` are scratch arrays of ``x``'s shape.
    """
    a1, a2, a3, a4, a5 = _AS_HALF_A
    np.abs(x, out=a)
    np.minimum(a, _CLAMP, out=a)
    np.multiply(a, _AS_P, out=t)
    t += _ONE
    np.reciprocal(t, out=t)
    np.multiply(t, a5, out=e)  # e = 0.5 * t * P(t) by Horner's rule
    e += a4
    e *= t
    e += a3
    e *= t
    e += a2
    e *= t
    e += a1
    e *= t
    np.multiply(a, _MINUS_HALF, out=t)  # t = exp(-|x|^2 / 2)
    t *= a
    np.exp(t, out=t)
    e *= t
    e *= a
    np.maximum(x, _ZERO, out=x)
    x -= e


def gelu_tanh_inplace(x: F32, a: F32, t: F32, e: F32) -> None:
    """The tanh approximation of GELU (``gelu_new`` / ``gelu_pytorch_tanh``)."""
    del a, e
    np.multiply(x, x, out=t)
    t *= np.float32(0.044715)
    t += _ONE
    t *= x
    t *= _SQRT_2_OVER_PI
    np.tanh(t, out=t)
    t += _ONE
    t *= _HALF
    x *= t


def relu_inplace(x: F32, a: F32, t: F32, e: F32) -> None:
    del a, t, e
    np.maximum(x, _ZERO, out=x)


def gelu(x: npt.ArrayLike) -> F32:
    """Exact GELU of any array (convenience wrapper, used by the tests)."""
    out = np.array(x, dtype=np.float32)
    gelu_inplace(out, np.empty_like(out), np.empty_like(out), np.empty_like(out))
    return out


_ACTIVATIONS: dict[str, Callable[[F32, F32, F32, F32], None]] = {
    "gelu": gelu_inplace,
    "gelu_new": gelu_tanh_inplace,
    "gelu_fast": gelu_tanh_inplace,
    "gelu_pytorch_tanh": gelu_tanh_inplace,
    "relu": relu_inplace,
}
SUPPORTED_ACTIVATIONS = tuple(_ACTIVATIONS)


def _matmul(x: F32, w: F32, out: F32) -> None:
    """``out[...] = x @ w``; for a few rows, in column blocks that OpenBLAS runs unpacked."""
    m, k = x.shape
    n = w.shape[1]
    cols = (_SMALL_MNK // max(1, m * k)) // 16 * 16
    if m > _SMALL_ROWS or m * k * n <= _SMALL_MNK or cols < _SMALL_MIN_COLS:
        np.matmul(x, w, out=out)
        return
    for j in range(0, n, cols):
        np.matmul(x, w[:, j : j + cols], out=out[:, j : j + cols])


def layer_norm_inplace(x: F32, gamma: F32, beta: F32, eps: np.float32) -> None:
    """LayerNorm over the last axis of a 2-D array, in place (biased variance, as torch)."""
    mean = x.mean(axis=-1, keepdims=True)
    x -= mean
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var *= np.float32(1.0 / x.shape[-1])
    var += eps
    np.sqrt(var, out=var)
    x /= var
    x *= gamma
    x += beta


# ---------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class BertConfig:
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    eps: float
    hidden_act: str
    vocab_size: int

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> BertConfig:
        return cls(
            hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            intermediate_size=int(cfg["intermediate_size"]),
            max_positions=int(cfg.get("max_position_embeddings", 512)),
            eps=float(cfg.get("layer_norm_eps", 1e-12)),
            hidden_act=str(cfg.get("hidden_act", "gelu")),
            vocab_size=int(cfg["vocab_size"]),
        )


@dataclass(frozen=True)
class _Layer:
    w_qkv: F32  # (D, 3D), query part pre-scaled by 1/sqrt(head_dim)
    b_qkv: F32  # (3D,)
    w_o: F32  # (D, D)
    b_o: F32
    ln1_g: F32
    ln1_b: F32
    w_1: F32  # (D, I)
    b_1: F32
    w_2: F32  # (I, D)
    b_2: F32
    ln2_g: F32
    ln2_b: F32


class BertEncoder:
    """BERT encoder weights plus a thread-safe numpy forward pass.

    ``forward`` keeps no state between calls, so several threads may run it at once on
    different batches (numpy releases the GIL inside matmuls and large ufunc loops).
    """

    def __init__(self, config: BertConfig, tensors: Mapping[str, F32]) -> None:
        if config.hidden_size % config.num_heads:
            raise ValueError("hidden_size is not a multiple of num_attention_heads")
        if config.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {config.hidden_act!r}")
        self.config = config
        self._act = _ACTIVATIONS[config.hidden_act]
        self._eps = np.float32(config.eps)
        t = _strip_prefix(tensors)

        def get(name: str, shape: tuple[int, ...]) -> F32:
            arr = t.get(name)
            if arr is None and name.endswith(".weight") and "LayerNorm" in name:
                arr = t.get(name[: -len("weight")] + "gamma")
            if arr is None and name.endswith(".bias") and "LayerNorm" in name:
                arr = t.get(name[: -len("bias")] + "beta")
            if arr is None:
                raise KeyError(f"the weights have no tensor {name!r}")
            if arr.shape != shape:
                raise ValueError(f"tensor {name!r} has shape {arr.shape}, expected {shape}")
            return np.ascontiguousarray(arr, dtype=np.float32)

        d, i = config.hidden_size, config.intermediate_size
        self.word = get("embeddings.word_embeddings.weight", (config.vocab_size, d))
        pos = get("embeddings.position_embeddings.weight", (config.max_positions, d))
        tt_name = "embeddings.token_type_embeddings.weight"
        # Single-sentence input: token_type_ids are all 0, so fold that row into positions.
        self.pos_type = pos + get(tt_name, (t[tt_name].shape[0], d))[0] if tt_name in t else pos
        self.emb_ln_g = get("embeddings.LayerNorm.weight", (d,))
        self.emb_ln_b = get("embeddings.LayerNorm.bias", (d,))
        scale = np.float32(1.0 / math.sqrt(d // config.num_heads))
        layers = []
        for n in range(config.num_layers):
            p = f"encoder.layer.{n}."

            def w(name: str, shape: tuple[int, ...], p: str = p) -> F32:
                return get(p + name, shape)

            q_w = w("attention.self.query.weight", (d, d)) * scale
            q_b = w("attention.self.query.bias", (d,)) * scale
            k_w = w("attention.self.key.weight", (d, d))
            v_w = w("attention.self.value.weight", (d, d))
            w_qkv = np.ascontiguousarray(np.concatenate([q_w, k_w, v_w], axis=0).T)
            b_qkv = np.concatenate([q_b, w("attention.self.key.bias", (d,)), w("attention.self.value.bias", (d,))])
            layers.append(
                _Layer(
                    w_qkv=w_qkv,
                    b_qkv=b_qkv,
                    w_o=np.ascontiguousarray(w("attention.output.dense.weight", (d, d)).T),
                    b_o=w("attention.output.dense.bias", (d,)),
                    ln1_g=w("attention.output.LayerNorm.weight", (d,)),
                    ln1_b=w("attention.output.LayerNorm.bias", (d,)),
                    w_1=np.ascontiguousarray(w("intermediate.dense.weight", (i, d)).T),
                    b_1=w("intermediate.dense.bias", (i,)),
                    w_2=np.ascontiguousarray(w("output.dense.weight", (d, i)).T),
                    b_2=w("output.dense.bias", (d,)),
                    ln2_g=w("output.LayerNorm.weight", (d,)),
                    ln2_b=w("output.LayerNorm.bias", (d,)),
                )
            )
        self.layers = tuple(layers)

    def forward(self, ids: I64, mask: npt.NDArray[np.bool_]) -> F32:
        """Hidden states of the last layer, float32 ``(B, L, D)``.

        ``ids`` is ``(B, L)`` token ids padded on the right; ``mask`` is True on real
        tokens. Rows of padding positions hold unspecified values.
        """
        cfg = self.config
        b, seq = ids.shape
        if seq > cfg.max_positions:
            raise ValueError(f"sequence of {seq} tokens exceeds max_position_embeddings")
        d, h, inter_size = cfg.hidden_size, cfg.num_heads, cfg.intermediate_size
        dh = d // h
        m = b * seq
        # Workspace, allocated once per call and reused by every layer.
        x = self.word[ids.reshape(-1)]  # (M, D), a copy
        x.reshape(b, seq, d)[...] += self.pos_type[:seq]
        layer_norm_inplace(x, self.emb_ln_g, self.emb_ln_b, self._eps)
        y = np.empty_like(x)
        qkv = np.empty((m, 3 * d), dtype=np.float32)
        # Attention scores are kept transposed, [b, h, key, query]: the softmax then reduces
        # over axis -2, which numpy vectorises across queries (a max over a short last axis
        # is several times slower).
        scores_t = np.empty((b, h, seq, seq), dtype=np.float32)
        ctx = np.empty((b, h, seq, dh), dtype=np.float32)
        ctx_t = ctx.transpose(0, 2, 1, 3)  # (B, L, H, dh) view
        merged = np.empty((b, seq, h, dh), dtype=np.float32)
        inter = np.empty((m, inter_size), dtype=np.float32)
        chunk = min(m, _ACT_CHUNK)
        scratch = [np.empty((chunk, inter_size), dtype=np.float32) for _ in range(3)]
        col = np.empty((b, h, 1, seq), dtype=np.float32)
        qkv5 = qkv.reshape(b, seq, 3, h, dh)
        q_t = qkv5[:, :, 0].transpose(0, 2, 3, 1)  # (B, H, dh, L)
        k = qkv5[:, :, 1].transpose(0, 2, 1, 3)  # (B, H, L, dh)
        v = qkv5[:, :, 2].transpose(0, 2, 1, 3)  # (B, H, L, dh)
        add_mask = None
        if not bool(mask.all()):  # padded keys get -1e9 before the softmax
            add_mask = np.where(mask, _ZERO, np.float32(-1e9)).astype(np.float32)[:, None, :, None]
        for layer in self.layers:
            # self-attention
            _matmul(x, layer.w_qkv, qkv)
            qkv += layer.b_qkv
            np.matmul(k, q_t, out=scores_t)  # already scaled by 1/sqrt(dh) via w_qkv
            if add_mask is not None:
                scores_t += add_mask
            np.max(scores_t, axis=-2, keepdims=True, out=col)
            scores_t -= col
            np.exp(scores_t, out=scores_t)
            np.sum(scores_t, axis=-2, keepdims=True, out=col)
            scores_t /= col
            np.matmul(scores_t.transpose(0, 1, 3, 2), v, out=ctx)
            np.copyto(merged, ctx_t)
            _matmul(merged.reshape(m, d), layer.w_o, y)
            y += layer.b_o
            y += x
            layer_norm_inplace(y, layer.ln1_g, layer.ln1_b, self._eps)
            x, y = y, x
            # feed-forward: big matmuls over all rows, activation in cache-sized row chunks
            _matmul(x, layer.w_1, inter)
            for r in range(0, m, chunk):
                n = min(chunk, m - r)
                rows = inter[r : r + n]
                rows += layer.b_1
                a, t, e = (s[:n] for s in scratch)
                self._act(rows, a, t, e)
            _matmul(inter, layer.w_2, y)
            y += layer.b_2
            y += x
            layer_norm_inplace(y, layer.ln2_g, layer.ln2_b, self._eps)
            x, y = y, x
        return x.reshape(b, seq, d)


def _strip_prefix(tensors: Mapping[str, F32]) -> dict[str, F32]:
    """Accept both ``embeddings.…`` and ``bert.embeddings.…`` (BertForX checkpoints)."""
    for prefix in ("bert.", "model."):
        if any(k.startswith(prefix + "embeddings.") for k in tensors):
            return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    return dict(tensors)


def pool(hidden: F32, mask: npt.NDArray[np.bool_], mode: str) -> F32:
    """Pool ``(B, L, D)`` hidden states to ``(B, D)`` over real tokens: mean, cls or max."""
    if mode == "cls":
        return np.ascontiguousarray(hidden[:, 0, :])
    if mode == "max":
        masked = np.where(mask[:, :, None], hidden, np.float32(-np.inf))
        maxed: F32 = masked.max(axis=1).astype(np.float32, copy=False)
        return maxed
    if mode == "mean":
        w = mask.astype(np.float32)
        summed = np.einsum("bld,bl->bd", hidden, w)
        counts = np.maximum(w.sum(axis=1, keepdims=True), np.float32(1e-9))
        mean: F32 = (summed / counts).astype(np.float32, copy=False)
        return mean
    raise ValueError(f"unsupported pooling mode {mode!r}")
