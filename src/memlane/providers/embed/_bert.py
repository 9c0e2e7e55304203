"""A BERT encoder forward pass in plain numpy (float32), plus a safetensors reader.

Private helper of :mod:`memlane.providers.embed.local`; nothing here imports torch.

The arithmetic follows Hugging Face ``BertModel`` in eval mode (no dropout):

* embeddings = LayerNorm(word[ids] + position[0..L) + token_type[0])
* per layer: fused QKV projection, scaled dot-product attention with an additive mask for
  padding, output projection + residual + LayerNorm, feed-forward with GELU + residual +
  LayerNorm.

Speed notes: weights are stored pre-transposed and contiguous (``x @ W`` without a copy),
Q, K and V are one matmul, the 1/sqrt(head_dim) attention scale is folded into the query
weights, and the feed-forward block runs in row chunks so its (rows, intermediate)
activation stays in the CPU cache while the GELU is applied in place.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

_MAX_HEADER = 100 * 1024 * 1024
_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}
# Rows of the feed-forward block processed at once (rows x intermediate floats stay in L2).
_FFN_CHUNK = 256


class SafetensorsError(ValueError):
    """The file is not a valid safetensors file (or holds a dtype we cannot read)."""


def read_safetensors(path: Path, *, skip: tuple[str, ...] = ()) -> dict[str, F32]:
    """Read every floating-point tensor of a ``.safetensors`` file as float32.

    Format: an 8-byte little-endian header length ``n``, ``n`` bytes of JSON mapping each
    tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative
    to the end of the header), then the raw little-endian tensor bytes. F16, BF16 and F64
    are converted to float32; integer tensors (e.g. BERT's ``position_ids`` buffer) and
    names containing any of ``skip`` are left out. The returned arrays are copies, so the
    file is not kept open.
    """
    size = path.stat().st_size
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
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, F32] = {}
    try:
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
                if dtype in {"I64", "I32", "I16", "I8", "U8", "BOOL"}:
                    continue  # integer buffers are not weights
                raise SafetensorsError(f"{path}: tensor {name!r} has unsupported dtype {dtype}")
            np_dtype, itemsize = _DTYPES[dtype]
            count = math.prod(shape)
            if begin < 0 or end - begin != count * itemsize or base + end > size:
                raise SafetensorsError(f"{path}: tensor {name!r} has inconsistent data offsets")
            raw = data[base + begin : base + end].view(np_dtype)
            if dtype == "BF16":  # bfloat16 is the top half of a float32
                arr = (raw.astype(np.uint32) << 16).view(np.float32)
            else:
                arr = raw.astype(np.float32)  # always a copy, detached from the memmap
            out[name] = arr.reshape(shape)
    finally:
        mm = getattr(data, "_mmap", None)
        del data
        if mm is not None:
            mm.close()
    return out


# ---------------------------------------------------------------------------- activations

# Abramowitz & Stegun 7.1.26: |erf(x) - approx| <= 1.5e-7 for all x (float32 eps is 1.2e-7).
_AS_P = np.float32(0.3275911)
_AS_A = tuple(np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))
_SQRT_2_OVER_PI = np.float32(math.sqrt(2.0 / math.pi))
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


def erf(x: F32) -> F32:
    """Vectorised float32 erf (Abramowitz & Stegun 7.1.26, max abs error 1.5e-7)."""
    out = np.abs(x)
    _erf_abs_inplace(out, np.empty_like(out))
    np.copysign(out, x, out=out)
    return out


def _erf_abs_inplace(a: F32, tmp: F32) -> None:
    """Replace ``a`` (which holds |x|) by erf(|x|); ``tmp`` is scratch of the same shape."""
    a5, a4, a3, a2, a1 = _AS_A
    # tmp = exp(-a*a)
    np.multiply(a, a, out=tmp)
    np.negative(tmp, out=tmp)
    np.exp(tmp, out=tmp)
    # a = t = 1 / (1 + p*a)
    np.multiply(a, _AS_P, out=a)
    np.add(a, _ONE, out=a)
    np.reciprocal(a, out=a)
    # tmp *= t * (a1 + t*(a2 + t*(a3 + t*(a4 + t*a5))))
    poly = a * a5
    poly += a4
    poly *= a
    poly += a3
    poly *= a
    poly += a2
    poly *= a
    poly += a1
    poly *= a
    np.multiply(tmp, poly, out=tmp)
    # a = 1 - tmp
    np.subtract(_ONE, tmp, out=a)


def gelu_inplace(h: F32) -> None:
    """Exact (erf) GELU, BERT's ``hidden_act="gelu"``: h * 0.5 * (1 + erf(h / sqrt(2)))."""
    a = np.multiply(h, _INV_SQRT2)
    np.abs(a, out=a)
    tmp = np.empty_like(h)
    _erf_abs_inplace(a, tmp)
    # erf is odd: erf(h/sqrt2) = sign(h) * a; 0.5*(1+erf) = where h<0: 0.5*(1-a) else 0.5*(1+a)
    np.copysign(a, h, out=a)
    a += _ONE
    a *= _HALF
    h *= a


def gelu_tanh_inplace(h: F32) -> None:
    """The tanh approximation of GELU (``gelu_new`` / ``gelu_pytorch_tanh``)."""
    t = h * h
    t *= np.float32(0.044715)
    t += _ONE
    t *= h
    t *= _SQRT_2_OVER_PI
    np.tanh(t, out=t)
    t += _ONE
    t *= _HALF
    h *= t


def relu_inplace(h: F32) -> None:
    np.maximum(h, np.float32(0.0), out=h)


_ACTIVATIONS = {
    "gelu": gelu_inplace,
    "gelu_new": gelu_tanh_inplace,
    "gelu_fast": gelu_tanh_inplace,
    "gelu_pytorch_tanh": gelu_tanh_inplace,
    "relu": relu_inplace,
}
SUPPORTED_ACTIVATIONS = tuple(_ACTIVATIONS)


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
        self.word = get(
            "embeddings.word_embeddings.weight", (t_rows(t, "embeddings.word_embeddings.weight"), d)
        )
        pos = get("embeddings.position_embeddings.weight", (config.max_positions, d))
        tt_name = "embeddings.token_type_embeddings.weight"
        # Single-sentence input: token_type_ids are all 0, so fold that row into positions.
        self.pos_type = pos + t[tt_name][0] if tt_name in t else pos
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
            b_qkv = np.concatenate(
                [q_b, w("attention.self.key.bias", (d,)), w("attention.self.value.bias", (d,))]
            )
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
        d, h = cfg.hidden_size, cfg.num_heads
        dh = d // h
        m = b * seq
        x = self.word[ids.reshape(-1)]  # (M, D) copy
        x.reshape(b, seq, d)[...] += self.pos_type[:seq]
        layer_norm_inplace(x, self.emb_ln_g, self.emb_ln_b, self._eps)
        padded = not bool(mask.all())
        if padded:
            neg = np.where(mask, np.float32(0.0), np.float32(-1e9)).astype(np.float32)
            add_mask = neg[:, None, None, :]  # (B, 1, 1, L)
        for layer in self.layers:
            qkv = x @ layer.w_qkv
            qkv += layer.b_qkv
            qkv5 = qkv.reshape(b, seq, 3, h, dh)
            q = qkv5[:, :, 0].transpose(0, 2, 1, 3)  # (B, H, L, dh)
            k = qkv5[:, :, 1].transpose(0, 2, 3, 1)  # (B, H, dh, L)
            v = qkv5[:, :, 2].transpose(0, 2, 1, 3)  # (B, H, L, dh)
            s = np.matmul(q, k)  # (B, H, L, L), already scaled
            if padded:
                s += add_mask
            s -= s.max(axis=-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=-1, keepdims=True)
            ctx = np.matmul(s, v)  # (B, H, L, dh)
            ctx2 = np.ascontiguousarray(ctx.transpose(0, 2, 1, 3)).reshape(m, d)
            attn = ctx2 @ layer.w_o
            attn += layer.b_o
            attn += x
            layer_norm_inplace(attn, layer.ln1_g, layer.ln1_b, self._eps)
            x = attn
            out = np.empty_like(x)
            for r in range(0, m, _FFN_CHUNK):
                xs = x[r : r + _FFN_CHUNK]
                inter = xs @ layer.w_1
                inter += layer.b_1
                self._act(inter)
                np.matmul(inter, layer.w_2, out=out[r : r + _FFN_CHUNK])
            out += layer.b_2
            out += x
            layer_norm_inplace(out, layer.ln2_g, layer.ln2_b, self._eps)
            x = out
        return x.reshape(b, seq, d)


def t_rows(t: Mapping[str, F32], name: str) -> int:
    arr = t.get(name)
    if arr is None or arr.ndim != 2:
        raise KeyError(f"the weights have no 2-D tensor {name!r}")
    return int(arr.shape[0])


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
        return masked.max(axis=1).astype(np.float32, copy=False)
    if mode == "mean":
        w = mask.astype(np.float32)
        summed = np.einsum("bld,bl->bd", hidden, w)
        counts = np.maximum(w.sum(axis=1, keepdims=True), np.float32(1e-9))
        return (summed / counts).astype(np.float32, copy=False)
    raise ValueError(f"unsupported pooling mode {mode!r}")
