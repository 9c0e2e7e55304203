"""Where a tenant of the service lives on a shared PostgreSQL server: a schema of its own.

Pure (no driver import): :func:`tenant_location` is this backend's ``tenant_location`` in its
row of :mod:`memlane.registry`, which :func:`memlane.service.hub.tenant_location` asks.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["tenant_location", "tenant_schema"]

#: PostgreSQL's identifier limit (NAMEDATALEN - 1).
_PG_MAX_IDENT = 63
#: Hex digits of the tenant digest in a schema name (80 bits).
_DIGEST_HEX = 20


def tenant_schema(base: str | None, tenant: str) -> str:
    """The PostgreSQL schema of a (non-default) ``tenant`` whose default tenant uses schema
    ``base`` (None: the connection's default schema).

    ``<base>_t_<readable>_<digest>`` (``t_<readable>_<digest>`` without a base): ``readable`` is
    the tenant name lowercased with every run of other characters than ``a-z0-9`` made one
    ``_`` (for people listing the schemas), cut so the whole name has at most 63 characters;
    ``digest`` is 20 hex digits of SHA-256 over ``base`` and the whole tenant name, so two
    tenants whose readable parts agree (``acme``, ``ACME``, ``acme|x`` vs ``acme_x``) still get
    different schemas. A valid unquoted-style identifier: letters, digits and ``_``, starting
    with a letter or ``_``.
    """
    digest = hashlib.sha256(f"{base or ''}\x1f{tenant}".encode()).hexdigest()[:_DIGEST_HEX]
    readable = re.sub(r"[^a-z0-9]+", "_", tenant.lower()).strip("_")
    head = f"{base}_t_{readable}" if base else f"t_{readable}"
    head = head[: _PG_MAX_IDENT - _DIGEST_HEX - 1].rstrip("_") or "t"
    return f"{head}_{digest}"


def tenant_location(location: str, tenant: str) -> str:
    """``location`` (a ``postgresql://`` URL) as a non-default ``tenant`` uses it: the same
    database, schema :func:`tenant_schema` (the ``schema=`` parameter added or replaced)."""
    parts = urlsplit(location)
    query = parse_qsl(parts.query, keep_blank_values=True)
    base = dict(query).get("schema") or None
    query = [(k, v) for k, v in query if k != "schema"]
    query.append(("schema", tenant_schema(base, tenant)))
    return urlunsplit(parts._replace(query=urlencode(query)))
