"""SQLite backends: one WAL database file for sessions and long-term memory.

Its row in :data:`memlane.registry.BACKENDS` (``sqlite``) names :func:`open_stores` (here),
``sessions.SqliteSessionStore`` (``sessions="sqlite:///other.db"``) and ``transfer.open_side``
(``memlane migrate``); the driver is the standard library's ``sqlite3``. Each service tenant
gets a file of its own (no ``tenant_location``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memlane.registry import Stores


async def open_stores(location: str) -> Stores:
    """Open (create, migrate) the file at ``location`` (a path or ``:memory:``) on a worker
    thread and build the fact, reflection and job stores on it, plus the SQLite session store
    for ``sessions="sqlite"`` (the same file)."""
    from memlane.registry import Stores
    from memlane.stores.sqlite.context import SqliteContextCache
    from memlane.stores.sqlite.db import Database
    from memlane.stores.sqlite.facts import SqliteFactStore
    from memlane.stores.sqlite.jobs import SqliteJobStore
    from memlane.stores.sqlite.sessions import SqliteSessionStore

    db = Database(location)
    try:
        await asyncio.to_thread(db.open_sync)
    except BaseException:
        db.close_sync()
        raise
    db.acquire()  # held until every store built below is built, then released
    try:
        facts = await SqliteFactStore.open(db)
        jobs = SqliteJobStore(db)
        sessions = SqliteSessionStore(db)
    finally:
        db.release_sync()
    return Stores(
        facts=facts,
        reflections=facts,
        jobs=jobs,
        sessions=sessions,
        location=location,
        contexts=SqliteContextCache(db),
    )
