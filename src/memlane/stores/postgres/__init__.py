"""PostgreSQL + pgvector backend: facts, documents, history, reflections, sessions, jobs and
the context cache in one database (or one schema of it), for several replicas and workers.

Its row in :data:`memlane.registry.BACKENDS` (``postgresql``, extra ``postgres``) names
:func:`open_stores` (here: ``postgresql://user@host:5432/db?schema=NAME``, see
:mod:`memlane.stores.postgres.db`), ``sessions.PgSessionStore``, ``tenants.tenant_location`` (a
schema per service tenant), ``transfer.open_side`` (``memlane migrate``), its drivers (psycopg,
psycopg_pool, pgvector) and psycopg's ``OperationalError`` as "server unreachable". Nothing here
imports a driver until a store is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memlane.registry import Stores


async def open_stores(location: str) -> Stores:
    """Connect to the database at ``location``, migrate it, and build the stores on one pool."""
    from memlane.registry import Stores
    from memlane.stores.postgres.context import PgContextCache
    from memlane.stores.postgres.db import PgDatabase
    from memlane.stores.postgres.facts import PgFactStore
    from memlane.stores.postgres.jobs import PgJobStore
    from memlane.stores.postgres.sessions import PgSessionStore

    db = await PgDatabase.open(location)
    db.acquire()  # held until every store below is built
    try:
        facts = await PgFactStore.open(db)
        jobs = PgJobStore(db)
        sessions = PgSessionStore(db)
        contexts = PgContextCache(db)
    finally:
        await db.release()
    return Stores(facts=facts, reflections=facts, jobs=jobs, sessions=sessions, location=location, contexts=contexts)
