"""The one settings model: :class:`MemlaneSettings`, and the engine arguments it describes.

Sources, lowest to highest precedence::

    defaults  <  YAML file (--config FILE or $MEMLANE_CONFIG)  <  environment variables

The YAML file has Gaia's ``memory:`` and ``sessions:`` blocks plus a ``server:`` block; the
environment has KAOS's names (``MEMORY_ENABLED``, ``MEMORY_TYPE``, ``MEMORY_CONTEXT_LIMIT``,
``MEMORY_MAX_SESSIONS``, ``MEMORY_MAX_SESSION_EVENTS``, ``MEMORY_REDIS_URL``) and ``MEMLANE_*``
for the rest (:data:`ENV_VARS`). ``MEMORY_ENABLED=false`` means what it means in KAOS: no
memory at all, long-term memory off and ``sessions.backend`` ``null`` (no session history);
Gaia's ``memory.enabled: false`` in the file turns off long-term memory only. Secrets
(provider API keys, passwords in URLs) come only from the environment: a config file holding
one is refused. Every value remembers where it came
from (:meth:`MemlaneSettings.source`), which ``memlane config show`` prints.

The library API takes constructor arguments instead; :func:`engine_arguments` maps settings
onto them. This module never imports the engine: :func:`memlane.config.build_memory` (the
edge) and :meth:`AsyncMemory.from_settings <memlane.memory.AsyncMemory.from_settings>` build
one from :func:`engine_arguments`. ``memlane.config`` re-exports every name of this module.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from memlane._env import default_data_dir, default_db_path, env_positive_int, redact_url
from memlane.errors import ConfigError
from memlane.privacy.redaction import RedactionConfig, as_config

if TYPE_CHECKING:
    from memlane.agent.config import RecallConfig
    from memlane.formation.config import FormationConfig
    from memlane.retrieval.hybrid import RetrievalConfig
    from memlane.stores.base import SessionStore

__all__ = [
    "CONFIG_ENV",
    "ENV_VARS",
    "SECRET_ENV_VARS",
    "MemlaneSettings",
    "MemorySettings",
    "ServerSettings",
    "SessionSettings",
    "Settings",
    "default_data_dir",
    "default_db_path",
    "engine_arguments",
    "env_positive_int",
    "formation_config",
    "load_settings",
    "recall_config",
    "redact_url",
    "retrieval_config",
    "session_backend",
]


# ---------------------------------------------------------------------------- the model
class MemorySettings(BaseModel):
    """Gaia's ``memory:`` block: long-term memory."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Run long-term memory at all (off: sessions only, no formation, no profile)."""
    auto_ingest: bool = True
    """Form memories automatically (message triggers and the idle timer)."""
    recall_limit: int = Field(5, ge=1, le=100)
    """Hits ``load_memory`` returns (the agent tools, ``POST /v1/tools/load_memory``)."""
    preload: bool = True
    """Distil the session-start user profile."""
    preload_limit: int = Field(20, ge=1, le=200)
    """Maximum profile bullets."""
    extraction_instructions: str = ""
    """What formation extracts (empty: the built-in default)."""
    keep_user_turns: bool = True
    """A formed session that is cleared (idle, ``/reset``) leaves its user turns in the user's
    long-term memory as verbatim ``message`` memories (off: only the facts formed from them)."""
    review: bool = False
    """Review mode (docs/review.md): formation queues its decided changes as proposals for a
    reviewer instead of storing them (``FormationConfig.review``)."""
    session_summaries: bool = True
    """Keep a summary of each formed one-to-one session (time range, message count, topics) in
    the user's memory, listed by ``memlane summaries`` (off: none are written)."""
    keyword_feedback: bool = False
    """Pseudo-relevance feedback (RM3) on the keyword side of search: each query is searched
    again with terms of its best keyword hits, and the hits are re-scored
    (``RetrievalConfig(feedback_docs=20)``; docs/retrieval.md). Off by default: on LoCoMo it
    lifted recall@10 a little and lowered recall@1, for a second keyword search per query."""
    window_bonus: float = Field(0.0, ge=0.0, le=1.0)
    """Added to the cosine of a memory longer than the embedder reads (embedded in windows)
    before search's floors, so a sentence inside a long note is not lost under the 0.3 floor
    (``RetrievalConfig.window_bonus``; docs/retrieval.md, "Long memories"). 0: off (the
    default); 0.15 measured best on a small LongMemEval long-turn set."""
    llm: str = "offline"
    """Fast formation model: ``offline`` or ``provider:model`` (``openai:gpt-4o-mini``, ...)."""
    strong_llm: str | None = None
    """Model for reflections, consolidation and premium users' profiles (None: ``llm``)."""
    embedder: str = "auto"
    """``auto``, ``local``, ``local:/path``, ``hash``, ``openai:MODEL``, ``gemini:MODEL``, ``none``."""
    store: str = Field(default_factory=lambda: str(default_data_dir() / "memlane.db"))
    """Long-term store: a SQLite file path, ``:memory:`` or a store URL."""
    queue: str | None = None
    """Formation job queue shared by replicas and workers: a Redis URL
    (``redis://127.0.0.1:6379/0?prefix=memlane:``; a password in it only from ``MEMLANE_QUEUE``).
    None: the long-term store's own job table."""
    redact: RedactionConfig | None = None
    """PII redaction before storage (docs/redaction.md): ``{kinds: [email, phone, card, iban,
    ip], mode: mask|hash|drop, patterns: {name: regex}}``, or a list of kinds and regexes;
    None: off. Hash mode's key only from ``MEMLANE_REDACT_KEY`` (else one the store keeps)."""

    @field_validator("redact", mode="before")
    @classmethod
    def _redact(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else as_config(value)


class SessionSettings(BaseModel):
    """Gaia's ``sessions:`` block (short-term memory) with KAOS's session limits."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["sqlite", "local", "null", "redis"] = "sqlite"
    """``sqlite`` (durable, in the store), ``local`` (in-process, bounded), ``null`` (off),
    ``redis`` (shared by replicas, bounded like ``local``; needs ``redis_url``)."""
    window_turns: int = Field(30, ge=1)
    """Recent user turns replayed to the model (``window``; the shorter of this and
    ``context_limit``, when set, wins)."""
    idle_consolidate_minutes: float | None = Field(30.0, gt=0)
    """Silence after which a session is formed and cleared (null: no idle timer)."""
    context_limit: int | None = Field(None, ge=0)
    """KAOS ``memory_context_limit``: events replayed as model history (``window``, the
    pydantic-ai bridge's ``load_history`` / ``run_with_memory``). Unset (null): ``window``
    replays the last ``window_turns`` user turns with no event bound, the pydantic-ai bridge
    KAOS's default of 6 events."""
    max_sessions: int = Field(1000, ge=1)
    """Sessions the ``local`` and ``redis`` backends keep (the oldest 10% are evicted when full)."""
    max_session_events: int = Field(500, ge=1)
    """Events per session the ``local`` and ``redis`` backends keep (the oldest are dropped)."""
    redis_url: str | None = None
    """Redis URL for ``backend: redis`` (a password in it only from ``MEMORY_REDIS_URL``)."""


class ServerSettings(BaseModel):
    """The ``server:`` block: ``memlane serve`` and ``memlane mcp``."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    keys_file: str = Field(default_factory=lambda: str(default_data_dir() / "keys.db"))
    """API keys (hashed); no keys: the server binds loopback only."""
    max_body_bytes: int = Field(1_048_576, ge=1)
    """Largest request body (413 above)."""
    body_timeout: float = Field(30.0, ge=0)
    """Seconds a request body may take to arrive once the server reads it (408 and the
    connection closed after: slow-client protection); 0: no timeout."""
    max_page_size: int = Field(100, ge=1, le=10_000)
    """Largest page a list route returns."""
    rate_limit: int = Field(600, ge=0)
    """Requests per API key per minute (429 with Retry-After above); 0: unlimited."""
    tenants_dir: str = Field(default_factory=lambda: str(default_data_dir() / "tenants"))
    """Where each tenant's own store lives (the ``default`` tenant uses ``memory.store``)."""
    reload_interval: float = Field(1.0, ge=0)
    """Seconds between checks of the config file for edits (hot reload); 0: no reload."""
    formation_worker: bool = True
    """Run queued formation jobs in the server process (a background task per tenant engine).
    Off (``MEMLANE_FORMATION_WORKER=false``, ``memlane serve --no-formation-worker``): the
    server only queues them, durably, for ``memlane worker`` processes (replicas behind a
    load balancer); a call that waits for its job (``form``, ``end_session``) still runs it."""


Source = str
"""``default``, ``file:PATH`` or ``env:NAME``."""


class MemlaneSettings(BaseModel):
    """memlane's whole configuration: ``memory:``, ``sessions:`` and ``server:``.

    Build one with :func:`load_settings` (defaults < YAML < environment, sources tracked) or
    directly (``MemlaneSettings(memory={"llm": "openai:gpt-4o-mini"})``, every value from
    ``default``/code).
    """

    model_config = ConfigDict(extra="forbid")

    memory: MemorySettings = Field(default_factory=MemorySettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)

    _sources: dict[str, Source] = PrivateAttr(default_factory=dict)
    _config_file: str | None = PrivateAttr(default=None)
    _env: Mapping[str, str] | None = PrivateAttr(default=None)
    _overrides: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def overrides(self) -> dict[str, Any]:
        """The command-line values :func:`load_settings` applied over file and environment
        (a reload of the file applies them again)."""
        return dict(self._overrides)

    @property
    def config_file(self) -> str | None:
        """The YAML file read (absolute path), or None."""
        return self._config_file

    def source(self, key: str) -> Source:
        """Where the value at dotted ``key`` (``"memory.llm"``) came from:
        ``default``, ``file:PATH`` or ``env:NAME``."""
        if key not in _FIELDS:
            raise ConfigError(f"unknown setting {key!r}; settings are: {', '.join(_FIELDS)}")
        return self._sources.get(key, "default")

    def get(self, key: str) -> Any:
        """The value at dotted ``key`` (``"sessions.window_turns"``)."""
        if key not in _FIELDS:
            raise ConfigError(f"unknown setting {key!r}; settings are: {', '.join(_FIELDS)}")
        block, name = key.split(".")
        return getattr(getattr(self, block), name)

    def items(self) -> list[tuple[str, Any, Source]]:
        """Every ``(dotted key, value, source)``, in the model's order (values not redacted)."""
        return [(key, self.get(key), self.source(key)) for key in _FIELDS]

    def redacted(self) -> dict[str, Any]:
        """``{"config_file", "values": {key: {"value", "source"}}, "secrets": {NAME: state}}``
        with passwords in URLs masked and secret variables shown only as set / not set."""
        values = {
            key: {"value": redact_url(value) if key in _URL_FIELDS and isinstance(value, str) else value, "source": src}
            for key, value, src in self.items()
        }
        for shown in values.values():  # nested settings (memory.redact) as JSON data, secrets starred
            if isinstance(shown["value"], BaseModel):
                shown["value"] = shown["value"].model_dump(mode="json")
        environ = os.environ if self._env is None else self._env
        secrets = {name: "set (redacted)" if environ.get(name, "").strip() else "not set" for name in SECRET_ENV_VARS}
        return {"config_file": self.config_file, "values": values, "secrets": secrets}


def _field_names() -> tuple[str, ...]:
    out: list[str] = []
    for block, info in MemlaneSettings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        out += [f"{block}.{name}" for name in model.model_fields]
    return tuple(out)


_FIELDS: tuple[str, ...] = _field_names()
_URL_FIELDS = frozenset({"memory.store", "memory.queue", "sessions.redis_url"})
_PATH_FIELDS = frozenset({"memory.store", "server.keys_file", "server.tenants_dir"})

#: The variable naming the YAML file (``--config`` wins over it).
CONFIG_ENV = "MEMLANE_CONFIG"

#: Environment variable -> setting. KAOS's names first, then memlane's own.
ENV_VARS: dict[str, str] = {
    "MEMORY_ENABLED": "memory.enabled",
    "MEMORY_TYPE": "sessions.backend",
    "MEMORY_CONTEXT_LIMIT": "sessions.context_limit",
    "MEMORY_MAX_SESSIONS": "sessions.max_sessions",
    "MEMORY_MAX_SESSION_EVENTS": "sessions.max_session_events",
    "MEMORY_REDIS_URL": "sessions.redis_url",
    "MEMLANE_AUTO_INGEST": "memory.auto_ingest",
    "MEMLANE_RECALL_LIMIT": "memory.recall_limit",
    "MEMLANE_PRELOAD": "memory.preload",
    "MEMLANE_PRELOAD_LIMIT": "memory.preload_limit",
    "MEMLANE_EXTRACTION_INSTRUCTIONS": "memory.extraction_instructions",
    "MEMLANE_KEEP_USER_TURNS": "memory.keep_user_turns",
    "MEMLANE_REVIEW": "memory.review",
    "MEMLANE_SESSION_SUMMARIES": "memory.session_summaries",
    "MEMLANE_KEYWORD_FEEDBACK": "memory.keyword_feedback",
    "MEMLANE_WINDOW_BONUS": "memory.window_bonus",
    "MEMLANE_LLM": "memory.llm",
    "MEMLANE_STRONG_LLM": "memory.strong_llm",
    "MEMLANE_EMBEDDER": "memory.embedder",
    "MEMLANE_DB": "memory.store",
    "MEMLANE_QUEUE": "memory.queue",
    "MEMLANE_REDACT": "memory.redact",
    "MEMLANE_WINDOW_TURNS": "sessions.window_turns",
    "MEMLANE_IDLE_CONSOLIDATE_MINUTES": "sessions.idle_consolidate_minutes",
    "MEMLANE_HOST": "server.host",
    "MEMLANE_PORT": "server.port",
    "MEMLANE_KEYS_FILE": "server.keys_file",
    "MEMLANE_MAX_BODY_BYTES": "server.max_body_bytes",
    "MEMLANE_BODY_TIMEOUT": "server.body_timeout",
    "MEMLANE_MAX_PAGE_SIZE": "server.max_page_size",
    "MEMLANE_RATE_LIMIT": "server.rate_limit",
    "MEMLANE_TENANTS_DIR": "server.tenants_dir",
    "MEMLANE_RELOAD_INTERVAL": "server.reload_interval",
    "MEMLANE_FORMATION_WORKER": "server.formation_worker",
}
_ENV_FOR = {key: name for name, key in ENV_VARS.items()}
_NULLABLE = frozenset(
    {"memory.strong_llm", "memory.queue", "memory.redact", "sessions.idle_consolidate_minutes", "sessions.redis_url"}
)

#: Secrets memlane's providers read from the environment (never from a file); ``config show``
#: says only whether each is set.
SECRET_ENV_VARS: tuple[str, ...] = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OLLAMA_API_KEY",
    "VLLM_API_KEY",
    "LMSTUDIO_API_KEY",
    "LLAMACPP_API_KEY",
    "MEMLANE_REDACT_KEY",
)

_SECRET_KEY = re.compile(
    r"(^|[_-])(api[_-]?key|apikey|password|passwd|pwd|secret|token|credentials?|access[_-]?key|private[_-]?key)($|[_-])",
    re.IGNORECASE,
)


def _has_password(value: str) -> bool:
    return redact_url(value) != value


# ---------------------------------------------------------------------------- loading
class _Yaml:
    """A parsed config file: the data and the line of every key (1-based)."""

    def __init__(self, path: Path) -> None:
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - depends on the install
            from memlane.errors import MissingExtraError

            raise MissingExtraError(
                f"reading {path} needs PyYAML: pip install 'memlane[server]' (or pip install pyyaml)"
            ) from exc
        self.path = path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        self.lines: dict[str, int] = {}
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            self.data: Any = yaml.safe_load(text) if node is not None else None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(f"{where}: not valid YAML: {problem}") from None
        if node is not None:
            self._walk(node, "", yaml)

    def _walk(self, node: Any, prefix: str, yaml: Any) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for key_node, value_node in node.value:
            key = str(key_node.value)
            dotted = f"{prefix}{key}"
            if dotted in self.lines:
                raise ConfigError(f"{self.path}:{key_node.start_mark.line + 1}: {dotted} is set twice")
            self.lines[dotted] = key_node.start_mark.line + 1
            self._walk(value_node, f"{dotted}.", yaml)

    def where(self, dotted: str) -> str:
        line = self.lines.get(dotted)
        return f"{self.path}:{line}" if line is not None else str(self.path)


def _check_file(doc: _Yaml) -> dict[str, Any]:
    """The file's settings as ``{dotted key: value}``; refuses secrets and unknown keys."""
    data = doc.data
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{doc.path}: the config file must be a mapping with memory:, sessions: and server: blocks")
    flat: dict[str, Any] = {}
    _refuse_secrets(doc, data, "")
    blocks = MemlaneSettings.model_fields
    for block, body in data.items():
        if block not in blocks:
            raise ConfigError(
                f"{doc.where(str(block))}: unknown key {block!r}; the top-level blocks are: {', '.join(blocks)}"
            )
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"{doc.where(str(block))}: {block}: must be a mapping of settings")
        known = [k.split(".", 1)[1] for k in _FIELDS if k.startswith(f"{block}.")]
        for name, value in body.items():
            dotted = f"{block}.{name}"
            if dotted not in _FIELDS:
                raise ConfigError(f"{doc.where(dotted)}: unknown key {dotted!r}; {block}: takes {', '.join(known)}")
            flat[dotted] = value
    return flat


def _refuse_secrets(doc: _Yaml, data: Any, prefix: str) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            dotted = f"{prefix}{key}"
            if _SECRET_KEY.search(str(key)):
                raise ConfigError(
                    f"{doc.where(dotted)}: {dotted!r} looks like a secret; secrets are read only from the "
                    "environment (e.g. OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY), never from the "
                    "config file: remove it"
                )
            if dotted == "memory.redact.key":
                raise ConfigError(
                    f"{doc.where(dotted)}: the hash key of memory.redact is a secret, read only from the environment: "
                    "set MEMLANE_REDACT_KEY (or leave it unset: the store then keeps a random key) and remove it"
                )
            _refuse_secrets(doc, value, f"{dotted}.")
    elif isinstance(data, list):
        for item in data:
            _refuse_secrets(doc, item, prefix)
    elif isinstance(data, str) and _has_password(data):
        key = prefix.rstrip(".")
        env = _ENV_FOR.get(key)
        hint = f" (set {env})" if env else ""
        raise ConfigError(
            f"{doc.where(key)}: {key!r} holds a URL with a password; secrets are read only from the environment"
            f"{hint}, never from the config file: remove the password from the file"
        )


def _env_value(key: str, raw: str) -> Any:
    if key in _NULLABLE and raw.strip().lower() in ("none", "null"):
        return None
    if key == "memory.redact":  # a JSON object or list, else kinds separated by commas
        text = raw.strip()
        if text[:1] in "[{":
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"MEMLANE_REDACT is not valid JSON: {exc}") from None
        return True if text.lower() in ("true", "all") else [k.strip() for k in text.split(",") if k.strip()]
    return raw.strip() if key != "memory.extraction_instructions" else raw


def load_settings(
    config: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> MemlaneSettings:
    """The effective settings: defaults < the YAML file < the environment.

    Args:
        config: the YAML file; None: ``$MEMLANE_CONFIG`` if set, else no file.
        env: the environment (default ``os.environ``). Blank variables count as unset.
        overrides: ``{dotted key: value}`` given on the command line (``memlane serve --db``):
            they beat the environment, and their source is ``cli``.

    Raises:
        ConfigError: the file is missing, not YAML, has an unknown key, a secret or a bad
            value; or an environment variable has a bad value. The message names the file
            and line, or the variable.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    file_source = "argument"
    if config is None and environ.get(CONFIG_ENV, "").strip():
        config = environ[CONFIG_ENV].strip()
        file_source = CONFIG_ENV
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    doc: _Yaml | None = None
    path: Path | None = None
    if config is not None:
        if not os.fspath(config).strip():
            raise ConfigError(f"the config file name is empty ({file_source})")
        path = Path(config).expanduser().resolve()
        doc = _Yaml(path)
        for key, value in _check_file(doc).items():
            if key in _PATH_FIELDS and isinstance(value, str):
                value = _relative_to(value, path.parent)
            values[key] = value
            sources[key] = f"file:{path}"
    for name, key in ENV_VARS.items():
        raw = environ.get(name)
        if raw is None or not raw.strip():
            continue
        values[key] = _env_value(key, raw)
        sources[key] = f"env:{name}"
    if _kaos_memory_off(environ):
        # KAOS MEMORY_ENABLED=false is "all memory off": NullMemory, no session history at all
        # (Gaia's memory.enabled: false in the file keeps sessions: long-term memory only is off).
        values["sessions.backend"] = "null"
        sources["sessions.backend"] = "env:MEMORY_ENABLED"
    for key, value in (overrides or {}).items():
        if key not in _FIELDS:
            raise ConfigError(f"unknown setting {key!r}; settings are: {', '.join(_FIELDS)}")
        values[key] = value
        sources[key] = "cli"
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        block, name = key.split(".")
        nested.setdefault(block, {})[name] = value
    try:
        settings = MemlaneSettings.model_validate(nested)
    except ValidationError as exc:
        raise _explain(exc, sources, doc) from None
    settings._sources = sources
    settings._config_file = str(path) if path is not None else None
    settings._env = environ
    settings._overrides = dict(overrides or {})
    return settings


def _kaos_memory_off(environ: Mapping[str, str]) -> bool:
    """``MEMORY_ENABLED`` is set to a false value (a bad value is left to the model's check)."""
    raw = environ.get("MEMORY_ENABLED", "").strip()
    if not raw:
        return False
    from pydantic import TypeAdapter

    try:
        return not TypeAdapter(bool).validate_python(raw)
    except ValidationError:
        return False


def _relative_to(value: str, base: Path) -> str:
    """A bare relative path in the file is relative to the file's folder (URLs, ``:memory:``
    and absolute paths are kept)."""
    if value == ":memory:" or "://" in value:
        return value
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else base / p)


def _explain(exc: ValidationError, sources: dict[str, Source], doc: _Yaml | None) -> ConfigError:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"][:2])
    src = sources.get(key, "default")
    given = err.get("input")
    msg = err["msg"]
    if src == "cli":
        return ConfigError(f"{key}: {msg} (got {given!r})")
    if src.startswith("env:"):
        return ConfigError(f"{src[4:]}={given!r}: {key}: {msg}")
    if src.startswith("file:") and doc is not None:
        return ConfigError(f"{doc.where(key)}: {key}: {msg} (got {given!r})")
    return ConfigError(f"{key}: {msg} (got {given!r})")


# ---------------------------------------------------------------------------- the engine
def formation_config(settings: MemlaneSettings, **overrides: Any) -> FormationConfig:
    """The :class:`~memlane.formation.config.FormationConfig` the settings describe
    (``overrides`` win: the CLI turns background work off)."""
    from memlane.formation.config import FormationConfig

    m, s = settings.memory, settings.sessions
    fields: dict[str, Any] = {
        "enabled": m.enabled,
        "auto_ingest": m.auto_ingest,
        "preload": m.preload,
        "preload_limit": m.preload_limit,
        "extraction_instructions": m.extraction_instructions,
        "keep_user_turns": m.keep_user_turns,
        "review": m.review,
        "session_summaries": m.session_summaries,
        "idle_minutes": s.idle_consolidate_minutes,
        "model": m.llm,
        "strong_model": m.strong_llm,
    }
    fields.update(overrides)
    return FormationConfig(**fields)


def session_backend(settings: MemlaneSettings) -> str | SessionStore:
    """The ``sessions=`` argument for :class:`~memlane.memory.AsyncMemory`.

    ``redis``: ``sessions.redis_url`` with ``sessions.max_sessions`` / ``max_session_events``
    added as URL parameters (parameters the URL already sets win).

    Raises:
        ConfigError: ``redis`` without a URL, or a bad Redis URL.
    """
    s = settings.sessions
    if s.backend == "local":
        from memlane.stores.local import LocalMemory

        return LocalMemory(max_sessions=s.max_sessions, max_session_events=s.max_session_events)
    if s.backend == "redis":
        if not s.redis_url:
            raise ConfigError("sessions.backend redis needs a URL: set MEMORY_REDIS_URL")
        from memlane.stores.redis.url import parse_redis_url, with_params

        given = dict(parse_qsl(urlsplit(s.redis_url).query))
        limits = {"max_sessions": s.max_sessions, "max_session_events": s.max_session_events}
        url = with_params(s.redis_url, **{k: v for k, v in limits.items() if k not in given})
        parse_redis_url(url)  # a bad URL fails here, with the password hidden
        return url
    return s.backend


def engine_arguments(
    settings: MemlaneSettings,
    store: str | os.PathLike[str] | None = None,
    *,
    sessions: str | SessionStore | None = None,
    jobs: str | None = None,
    formation: FormationConfig | None = None,
) -> dict[str, Any]:
    """The constructor arguments of :class:`~memlane.memory.AsyncMemory` (and of the sync
    :class:`~memlane.sync.Memory`) the settings describe; see :func:`memlane.config.build_memory`.

    Raises:
        ConfigError: a setting the engine cannot use.
    """
    m = settings.memory
    return {
        "db": store if store is not None else m.store,
        "embedder": m.embedder,
        "sessions": sessions if sessions is not None else session_backend(settings),
        "jobs": jobs if jobs is not None else m.queue,
        "formation": formation if formation is not None else formation_config(settings),
        "llm": m.llm,
        "strong_llm": m.strong_llm,
        "recall": recall_config(settings),
        "redact": m.redact,
        "retrieval": retrieval_config(settings),
    }


def retrieval_config(settings: MemlaneSettings) -> RetrievalConfig:
    """The :class:`~memlane.retrieval.hybrid.RetrievalConfig` the settings describe: the
    defaults, with ``memory.keyword_feedback`` turning RM3 on and ``memory.window_bonus``."""
    from memlane.retrieval.hybrid import FEEDBACK_DOCS, RetrievalConfig

    return RetrievalConfig(
        feedback_docs=FEEDBACK_DOCS if settings.memory.keyword_feedback else 0,
        window_bonus=settings.memory.window_bonus,
    )


def recall_config(settings: MemlaneSettings) -> RecallConfig:
    """The :class:`~memlane.agent.config.RecallConfig` the settings describe:
    ``memory.recall_limit`` (``load_memory`` hits), ``sessions.window_turns`` and
    ``sessions.context_limit`` (the session window replayed to the model)."""
    from memlane.agent.config import RecallConfig

    s = settings.sessions
    return RecallConfig(
        recall_limit=settings.memory.recall_limit, window_turns=s.window_turns, context_limit=s.context_limit
    )


class Settings(BaseModel):
    """The three CLI settings of the first releases (``MEMLANE_DB``, ``MEMLANE_EMBEDDER``,
    ``MEMLANE_LLM``). Kept for code written against it; new code uses :func:`load_settings`
    (:class:`MemlaneSettings` reads the same variables)."""

    model_config = ConfigDict(extra="forbid")

    db: str = Field(default_factory=default_db_path)
    embedder: str = Field(default_factory=lambda: os.environ.get("MEMLANE_EMBEDDER", "auto"))
    llm: str = Field(default_factory=lambda: os.environ.get("MEMLANE_LLM", "offline"))
