"""Redis locations: ``redis://[:password@]host:port/db?prefix=...&ttl=...&max_sessions=...``.

A memlane Redis URL is a redis-py URL (``redis://``, ``rediss://`` for TLS, ``unix://``) plus
memlane's own query parameters, which are taken out before the URL reaches redis-py:

* ``prefix`` (default ``memlane:``): every key the stores write starts with it, so several
  deployments (or tenants, see :func:`tenant_url`) share one Redis without seeing each other;
* ``ttl``: seconds a session lives after its last activity (sessions only; none by default);
* ``max_sessions`` (default 1000) and ``max_session_events`` (default 500): the
  ``LocalSessionStore`` bounds, applied by the Redis session store the same way.

Any other query parameter (``socket_timeout``, ``ssl_cert_reqs``, ...) is redis-py's and is
passed on. Error messages never show a password (see :func:`memlane._env.redact_url`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from memlane._env import redact_url
from memlane.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_SESSION_EVENTS",
    "DEFAULT_PREFIX",
    "RedisLocation",
    "encode_part",
    "parse_redis_url",
    "redact",
    "tenant_url",
    "with_params",
    "with_prefix",
]

DEFAULT_PREFIX = "memlane:"
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_MAX_SESSION_EVENTS = 500
SCHEMES = ("redis", "rediss", "unix")
#: memlane's own query parameters (everything else goes to redis-py).
MEMLANE_PARAMS = ("prefix", "ttl", "max_sessions", "max_session_events")


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    return redact_url(url)


def encode_part(value: str) -> str:
    """One key component (an app name, a session id, a user id): percent-encoded so that it
    never contains ``:``. Keys join components with ``:``, so two different ids can never
    produce the same key (the encoding is injective)."""
    return quote(value, safe="")


@dataclass(frozen=True)
class RedisLocation:
    """A parsed memlane Redis URL."""

    url: str
    """The URL for redis-py (memlane's parameters removed; password kept)."""
    prefix: str = DEFAULT_PREFIX
    """Prepended to every key."""
    ttl: float | None = None
    """Seconds a session lives after its last activity; None: until deleted or evicted."""
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_session_events: int = DEFAULT_MAX_SESSION_EVENTS

    @property
    def redacted(self) -> str:
        """The redis-py URL without its password, for messages."""
        return redact(self.url)


def parse_redis_url(url: str) -> RedisLocation:
    """Split a memlane Redis URL into the redis-py URL and memlane's parameters.

    Raises:
        ConfigError: not a ``redis://`` / ``rediss://`` / ``unix://`` URL, a bad port or db
            number, or a bad ``prefix`` / ``ttl`` / ``max_sessions`` / ``max_session_events``.
            The message shows the URL with its password masked.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"a Redis URL must be a non-empty string such as redis://127.0.0.1:6379/0, got {url!r}")
    text = url.strip()
    shown = redact(text)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {shown}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigError(f"a Redis URL starts with redis://, rediss:// or unix://, got {shown}")
    if scheme != "unix":
        if not parts.hostname:
            raise ConfigError(f"the Redis URL {shown} names no host (redis://HOST:6379/0)")
        if port is not None and port < 1:
            raise ConfigError(f"the Redis URL {shown} has a bad port {port}")
        db = parts.path.strip("/")
        if db and not (db.isdigit() and db.isascii()):
            raise ConfigError(f"the Redis URL {shown} has a bad database number {db!r} (redis://host:6379/0)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    mine: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in query:
        if name in MEMLANE_PARAMS:
            if name in mine:
                raise ConfigError(f"the Redis URL {shown} sets {name} twice")
            mine[name] = value
        else:
            rest.append((name, value))
    prefix = mine.get("prefix", DEFAULT_PREFIX)
    if not prefix or any(c.isspace() or not c.isprintable() for c in prefix):
        raise ConfigError(
            f"prefix in the Redis URL {shown} must be non-empty, without spaces or control characters, got {prefix!r}"
        )
    ttl: float | None = None
    if mine.get("ttl", "").strip().lower() not in ("", "none", "null"):
        raw = mine["ttl"]
        try:
            ttl = float(raw)
        except ValueError:
            ttl = math.nan
        if not math.isfinite(ttl) or ttl <= 0:
            raise ConfigError(f"ttl in the Redis URL {shown} must be a positive number of seconds, got {raw!r}")
    limits = {}
    for name, default in (("max_sessions", DEFAULT_MAX_SESSIONS), ("max_session_events", DEFAULT_MAX_SESSION_EVENTS)):
        raw = mine.get(name, "").strip()
        if not raw:
            limits[name] = default
            continue
        if not (raw.isdigit() and raw.isascii()) or int(raw) < 1:
            raise ConfigError(f"{name} in the Redis URL {shown} must be an integer >= 1, got {raw!r}")
        limits[name] = int(raw)
    clean = urlunsplit(parts._replace(query=urlencode(rest)))
    return RedisLocation(
        url=clean,
        prefix=prefix,
        ttl=ttl,
        max_sessions=limits["max_sessions"],
        max_session_events=limits["max_session_events"],
    )


def with_params(url: str, **params: object) -> str:
    """``url`` with query parameters set (replaced when present; ``None`` removes one)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    query += [(k, str(v)) for k, v in params.items() if v is not None]
    return urlunsplit(parts._replace(query=urlencode(query)))


def with_prefix(url: str, prefix: str) -> str:
    """``url`` with its key prefix replaced by ``prefix`` (validated like :func:`parse_redis_url`)."""
    out = with_params(url, prefix=prefix)
    parse_redis_url(out)
    return out


def tenant_url(url: str, tenant: str) -> str:
    """A URL for one tenant: the same Redis, the prefix ``{prefix}tenant:{tenant}:`` (the
    tenant name percent-encoded). The stores never write keys beginning with ``tenant:``
    under a prefix, and an encoded name has no ``:``, so tenants' keys and the base prefix's
    keys never collide."""
    if not isinstance(tenant, str) or not tenant:
        raise ConfigError(f"a tenant name must be a non-empty string, got {tenant!r}")
    base = parse_redis_url(url).prefix
    return with_prefix(url, f"{base}tenant:{encode_part(tenant)}:")
