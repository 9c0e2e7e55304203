"""The long-term memory algorithms written once, for every SQL backend (a sans-IO core).

Like h11 for HTTP, this package performs no I/O: each algorithm is a generator that yields
:class:`~memlane.stores.sql.stmt.Stmt` objects (SQL text with ``?`` placeholders and its
arguments) and receives each statement's rows back. A backend drives the generator inside
its own transaction: SQLite synchronously inside ``Database.run(op)`` on its thread
(:func:`memlane.stores.sqlite.dialect.run`), PostgreSQL with ``await conn.execute(...)``
(:func:`memlane.stores.postgres.dialect.run`). What differs between backends is a
:class:`~memlane.stores.sql.dialect.Dialect`: how values are stored (ISO text or timestamps,
JSON text or jsonb, NUL-safe text), IN-lists, the partition lock, and the keyword index and
vector column writes (an FTS5 row or tsvector columns; a BLOB or a pgvector value).

* :mod:`.stmt`: :class:`Stmt`, the ``Program`` type and the helpers algorithms yield from.
* :mod:`.dialect`: the :class:`Dialect` base class (what a backend supplies).
* :mod:`.facts`: facts, history, the apply-changes loop, update / invalidate, neighbour context.
* :mod:`.reads`, :mod:`.erasure`, :mod:`.reflections`: list/get/history reads, forget's order,
  stamps and consolidation versioning; :mod:`.store`: ``SqlFactStore``, the protocol methods once.
* :mod:`.sessions`, :mod:`.jobs`: ``SqlSessionStore`` and ``SqlJobStore`` (leases, heartbeats, retries).
* :mod:`.schema`: the tables both backends share, with the column types as parameters.
"""
