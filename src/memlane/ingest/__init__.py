"""Getting memories in: everything between a caller's input and the rows the stores write.

* :mod:`memlane.ingest.messages` — a text or chat messages become verbatim facts or formation turns;
* :mod:`memlane.ingest.bulk` — ``add_many``'s batches (many ``add`` calls' worth of turns at once);
* :mod:`memlane.ingest.documents` — long content split into ordered, linked fragments (pure);
* :mod:`memlane.ingest.embedding_queue` — the background embedding queue (bulk ingestion without
  waiting for the embedder);
* :mod:`memlane.ingest.importers` — the one import workflow of ``memlane import`` and
  ``POST /v1/import`` (LoCoMo JSON, JSONL of turns).

The first three are pure parts the engine uses; the queue runs beside the engine on its stores;
the importers drive an engine from the outside. Argument validation for every public method
(``memlane.inputs``) stays in the foundation: it is not about ingest alone. This package's
``__init__`` imports nothing, so each module sits in its own layer (tests/architecture/test_import_graph.py).
"""
