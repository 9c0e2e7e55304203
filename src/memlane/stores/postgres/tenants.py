"""Where a tenant of the service lives on a shared PostgreSQL server: a schema of its own.

:func:`tenant_location` is this backend's ``tenant_location`` in its row of
:mod:`memlane.registry`, which :func:`memlane.service.hub.tenant_location` asks; pure (no
driver import at module level, so the hub can compute places without psycopg).
:func:`tenant_names` is the row's ``tenants``: which tenants have a schema on the server
(``GET /v1/tenants``). A schema name keeps only a lossy readable part of its tenant's name, so
the service records the name in the schema's ``meta`` table (key :data:`memlane.stores.base.TENANT_META_KEY`) when
it opens the tenant's store; a schema is listed when the name it records maps back to it.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["tenant_location", "tenant_names", "tenant_schema"]

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


async def tenant_names(location: str) -> list[str]:
    """The tenants with a schema of their own beside ``location`` (the default tenant's store
    URL), sorted: every schema of the database with a ``meta`` table whose recorded tenant name
    ``n`` gives back that very schema (``tenant_schema(base, n)``). Schemas of other bases (other
    deployments or tests on the same database), ones that record no name (opened by a version
    before names were recorded, until the service opens them again) and ones this role may not
    read are left out. One connection of its own, closed at once.

    Raises:
        ConfigError: a bad location.
    """
    import psycopg
    from psycopg import sql

    from memlane.stores.base import TENANT_META_KEY
    from memlane.stores.postgres.db import parse_pg_location

    url, base, _, _ = parse_pg_location(location)
    names: set[str] = set()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=15) as conn:
        cur = await conn.execute(
            "SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid"
            " WHERE c.relname = 'meta' AND c.relkind IN ('r', 'p') ORDER BY n.nspname"
        )
        for (schema,) in await cur.fetchall():
            if schema == base:
                continue
            query = sql.SQL("SELECT value FROM {}.meta WHERE key = %s").format(sql.Identifier(schema))
            try:
                row = await (await conn.execute(query, (TENANT_META_KEY,))).fetchone()
            except psycopg.Error:  # not ours to read: not listed
                continue
            if row is not None and isinstance(row[0], str) and tenant_schema(base, row[0]) == schema:
                names.add(row[0])
    return sorted(names)
