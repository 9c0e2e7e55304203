"""The engine's parts: what :class:`memlane.memory.AsyncMemory` is built from.

Store-level functions take stores (and the engine's embedding call where they need one),
never the engine; the engine's public methods for each concept are a small method group
beside them (``DocumentMethods``, ...) that ``AsyncMemory`` inherits, reading its state
through :class:`memlane.engine.base.EngineState`. None of these modules imports ``memory.py``.

* :mod:`memlane.engine.base` — the state the method groups read, and ``opening``;
* :mod:`memlane.engine.opening` — opening the stores, embedder and models;
* :mod:`memlane.engine.writes` — the write path of ``add`` / ``add_many``;
* :mod:`memlane.engine.context` — the ``<MemoryContext>`` block and the session replay;
* :mod:`memlane.engine.documents` — documents and their fragments;
* :mod:`memlane.engine.embeddings` — the embedding lifecycle: backfill, the background
  queue's progress, drain;
* :mod:`memlane.engine.privacy` — ``forget`` and ``export_user``;
* :mod:`memlane.engine.status` — the typed status reports (consolidation, memory stats,
  embedding progress);
* :mod:`memlane.engine.formation` — session events, forming, jobs, profile, reflections.
"""
