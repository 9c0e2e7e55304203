"""The engine's parts: what :class:`memlane.memory.AsyncMemory` delegates to.

Each module takes stores (and the engine's embedding call where it needs one), never the
engine itself, so the import graph points one way: ``memory.py`` imports these, and none of
them imports ``memory.py``.

* :mod:`memlane.engine.context` — the ``<MemoryContext>`` block and the session replay.
"""
