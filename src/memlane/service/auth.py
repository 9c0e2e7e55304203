"""Who is calling: API keys bound to a tenant, optionally to a user and to read-only.

* :class:`Principal` — the caller of one request.
* :func:`current_principal` — the FastAPI dependency: the key from ``Authorization: Bearer
  <key>`` or ``X-API-Key: <key>``, checked against the app's :class:`KeyStore`
  (``app.state.keys``), then the key's rate limit (``app.state.rate_limiter``).
* :func:`authorize` — the one rule for user ids and writes every route applies.
* :func:`install_auth` — what ``create_app`` calls: the key store, the limits, the body-size
  middleware.

Rules (DESIGN9): the tenant comes only from the key. No keys configured at all (no key was
ever created) → every request is ``Principal(tenant="default", admin=True)`` and the server
binds to loopback only. Keys configured → a request without a key, or with an unknown or
revoked one, is refused (401 with ``WWW-Authenticate: Bearer``).

The one exception to "the tenant comes from the key": an *admin* key (and the key-less
loopback server, the operator's own) may name another tenant with the
:data:`TENANT_HEADER` header; the request then acts in that tenant, with the key's other
bindings (read-only stays read-only). A non-admin key naming another tenant than its own is
refused (403); naming its own is allowed. The header is read here, once, so no route names a
tenant itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from starlette.requests import HTTPConnection

from memlane import inputs
from memlane.errors import AuthenticationError, PermissionDeniedError, ScopeError
from memlane.models import SCOPE_ALIASES
from memlane.service.hub import DEFAULT_TENANT
from memlane.service.keys import ApiKey, KeyStore, NewKey, default_keys_path
from memlane.service.limits import BodySizeLimit, Limits, RateLimiter

__all__ = [
    "TENANT_HEADER",
    "WWW_AUTHENTICATE",
    "ApiKey",
    "KeyStore",
    "NewKey",
    "Principal",
    "authorize",
    "current_principal",
    "default_keys_path",
    "install_auth",
    "presented_key",
    "requested_tenant",
]

#: The ``WWW-Authenticate`` header value sent with every 401.
WWW_AUTHENTICATE = 'Bearer realm="memlane"'
#: The request header with which an admin key acts in another tenant.
TENANT_HEADER = "X-Memlane-Tenant"


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request.

    Attributes:
        tenant: the app the key is bound to; every read and write of the request stays in it.
        user_id: the one user the key may act for (None: any user of the tenant).
        read_only: the key may not write.
        key_id: the key's public id (None: no keys configured, loopback-only server).
        admin: the key may act in any tenant (:data:`TENANT_HEADER`) and list the tenants
            (True on the key-less loopback server).
    """

    tenant: str
    user_id: str | None = None
    read_only: bool = False
    key_id: str | None = None
    admin: bool = False

    @classmethod
    def of(cls, key: ApiKey) -> Principal:
        """The principal a verified key acts as."""
        return cls(tenant=key.tenant, user_id=key.user_id, read_only=key.read_only, key_id=key.id, admin=key.admin)

    def in_tenant(self, tenant: str) -> Principal:
        """This caller acting in ``tenant`` (:data:`TENANT_HEADER`): itself for its own tenant,
        the same bindings in another tenant for an admin.

        Raises:
            PermissionDeniedError: another tenant for a non-admin key (403).
        """
        if tenant == self.tenant:
            return self
        if not self.admin:
            raise PermissionDeniedError(
                f"API key {self.key_id} is not an admin key: it acts in its own tenant only "
                f"(leave out the {TENANT_HEADER} header, or create an admin key: memlane keys create --admin)"
            )
        return Principal(
            tenant=tenant, user_id=self.user_id, read_only=self.read_only, key_id=self.key_id, admin=self.admin
        )


def requested_tenant(conn: HTTPConnection) -> str | None:
    """The tenant the :data:`TENANT_HEADER` header names (None: no header).

    The header's bytes are read as UTF-8 (a tenant name may hold any character a key's tenant
    may); the name is checked like every tenant name (:func:`memlane.inputs.identifier`), and
    control characters are refused.

    Raises:
        ScopeError: not UTF-8, a control character, blank or too long, or the header given
            several times with different values (400).
    """
    values = conn.headers.getlist(TENANT_HEADER.lower())
    if not values:
        return None
    if len(set(values)) > 1:
        raise ScopeError(f"the request carries several different {TENANT_HEADER} headers; send one")
    try:
        tenant = values[0].encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise ScopeError(f"the {TENANT_HEADER} header is not valid UTF-8") from None
    tenant = inputs.identifier(tenant.strip(), "tenant")
    if any(ord(c) < 32 or ord(c) == 127 for c in tenant):
        raise ScopeError(f"the {TENANT_HEADER} header holds a control character: {tenant!r}")
    return tenant


def presented_key(conn: HTTPConnection) -> str | None:
    """The API key a request carries: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``
    (None: neither header).

    Raises:
        AuthenticationError: an ``Authorization`` header of another scheme, an empty key, or
            headers carrying different keys (``Authorization`` and ``X-API-Key``, or either
            header twice): a request acts for one key, never for "the first one".
    """
    found: list[str] = []
    for header in conn.headers.getlist("authorization"):
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise AuthenticationError("use 'Authorization: Bearer <key>' (or 'X-API-Key: <key>')")
        bearer = value.strip()
        if not bearer:
            raise AuthenticationError("the Authorization header carries no key: 'Authorization: Bearer <key>'")
        found.append(bearer)
    bearers = len(found)
    for header in conn.headers.getlist("x-api-key"):
        api_key = header.strip()
        if not api_key:
            raise AuthenticationError("the X-API-Key header is empty")
        found.append(api_key)
    if len(set(found)) > 1:
        if 0 < bearers < len(found) and len(set(found[:bearers])) == 1 and len(set(found[bearers:])) == 1:
            raise AuthenticationError("Authorization and X-API-Key carry different keys; send one")
        raise AuthenticationError("the request carries several different API keys; send one")
    return found[0] if found else None


async def current_principal(request: HTTPConnection) -> Principal:
    """FastAPI dependency: the caller of this request.

    Uses ``request.app.state.keys`` (a :class:`KeyStore`, or None: no keys) and
    ``request.app.state.rate_limiter`` (a :class:`RateLimiter`, or None: no limit).

    The :data:`TENANT_HEADER` header, when present, moves an admin caller to that tenant
    (:meth:`Principal.in_tenant`), after the key is checked.

    Raises:
        AuthenticationError: keys are configured and the request has none, or an unknown,
            malformed or revoked one (401).
        RateLimitedError: the key used up its requests per minute (429, ``retry_after``).
        ScopeError: a malformed :data:`TENANT_HEADER` (400).
        PermissionDeniedError: a non-admin key naming another tenant (403).
    """
    caller = await _key_principal(request)
    tenant = requested_tenant(request)
    return caller if tenant is None else caller.in_tenant(tenant)


async def _key_principal(request: HTTPConnection) -> Principal:
    """The caller as its key (or the key-less server) makes it, before the tenant header."""
    state = request.app.state
    keys: KeyStore | None = getattr(state, "keys", None)
    if keys is None or not (keys.known_configured or await anyio.to_thread.run_sync(keys.configured)):
        # No keys at all: the server is loopback-only and everyone is the default tenant, as
        # an admin (the operator's own server). The auth headers are not looked at (a key
        # sent anyway has nothing to be checked against).
        return Principal(tenant=DEFAULT_TENANT, admin=True)
    presented = presented_key(request)
    if presented is None:
        raise AuthenticationError(
            "this server requires an API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>' "
            "(create one with: memlane keys create --tenant APP)"
        )
    key = await anyio.to_thread.run_sync(keys.verify, presented)
    if key is None:
        raise AuthenticationError("the API key is not valid (unknown, malformed or revoked)")
    limiter: RateLimiter | None = getattr(state, "rate_limiter", None)
    if limiter is not None:
        limiter.check(key.id)
    return Principal.of(key)


def authorize(p: Principal, *, user_id: str | None, write: bool, scope: str = "user") -> str | None:
    """The one rule for user ids and writes. Returns the user id the request acts for.

    * A read-only key never writes.
    * A user-bound key acts for its user only: a request naming another ``user_id`` is refused,
      one naming none acts for the key's user; it never writes agent-shared memory
      (``scope="agent"``, alias ``shared``). Reading agent-shared memory is allowed.
    * A key bound to no user (or the key-less server) acts for whichever user the request names
      (None stays None: the route decides whether it needs one).

    Args:
        p: the caller.
        user_id: the user the request names (None: none named).
        write: the request changes something.
        scope: the scope written (``user``, ``agent``, ``room`` or an alias); only checked when
            ``write``.

    Raises:
        PermissionDeniedError: not allowed (403).
    """
    if write and p.read_only:
        raise PermissionDeniedError(f"API key {p.key_id} is read-only: it cannot change anything")
    if p.user_id is None:
        return user_id
    if user_id is not None and user_id != p.user_id:
        raise PermissionDeniedError(f"API key {p.key_id} acts for one user only; it cannot act for another user")
    if write and SCOPE_ALIASES.get(scope, scope) == "agent":
        raise PermissionDeniedError(
            f"API key {p.key_id} is bound to a user: it cannot write agent-shared memory (scope='agent')"
        )
    return p.user_id


def install_auth(app: Any, *, keys: KeyStore | None, limits: Limits | None = None) -> None:
    """Wire auth and limits into a FastAPI ``app``: ``app.state.keys``, ``app.state.limits``,
    ``app.state.rate_limiter`` and the :class:`BodySizeLimit` middleware (body size and
    body-read timeout). Call before the app
    starts serving.

    Args:
        keys: the key store (None: no keys, every request is the default tenant).
        limits: body size, page size and rate limits (None: :class:`Limits` defaults).
    """
    limits = limits if limits is not None else Limits()
    app.state.keys = keys
    app.state.limits = limits
    app.state.rate_limiter = RateLimiter(limits.rate_per_minute, limits.rate_burst) if limits.rate_per_minute else None
    if limits.max_body_bytes or limits.body_timeout:
        app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes, timeout=limits.body_timeout)
