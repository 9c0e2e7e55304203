"""Input of :meth:`memlane.AsyncMemory.add_many`: many ``add`` calls' worth of turns at once.

A bulk import (``memlane import``, a migration from another memory) stores thousands of
sessions. One ``add`` per session pays a transaction, and an embedding call, per session;
``add_many`` takes every session at once, checks them all, then stores them in chunks of
about :data:`CHUNK_ROWS` rows: one transaction and (``embed="now"``) one embedding call per
chunk, across sessions. What it stores is exactly what one ``add`` per batch would store
(the same rows, session positions, neighbour context, history and counters).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from memlane.errors import InvalidInputError
from memlane.ingest.messages import Message
from memlane.inputs import show
from memlane.models import FactKind, ScopeName

#: Rows per transaction (and per embedding call with ``embed="now"``) in ``add_many``: the
#: embedder sorts a call's texts by length and runs them in batches of similar length.
CHUNK_ROWS = 2048


@dataclass(frozen=True)
class AddBatch:
    """One ``add`` call's arguments: the turns of one session (or one text) and their scope.

    ``add_many([AddBatch(msgs, user_id="alice", session_id="s1"), ...])`` stores what
    ``add(msgs, user_id="alice", session_id="s1")`` would, for each batch. A plain dict
    with these keys is accepted too (``{"messages": [...], "user_id": "alice"}``).
    """

    messages: str | Sequence[Message]
    """One text, or chat messages (``{"role", "content", "name"?, "timestamp"?, "metadata"?}``
    dicts or :class:`~memlane.models.Event` objects), as :meth:`~memlane.AsyncMemory.add` takes."""
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    metadata: Mapping[str, Any] | None = None
    scope: ScopeName = "user"
    timestamp: datetime | None = None
    kind: FactKind | None = None


_FIELDS = tuple(f.name for f in fields(AddBatch))


def as_batch(value: object, index: int) -> AddBatch:
    """``value`` (an :class:`AddBatch` or a dict of its fields) as an AddBatch."""
    if isinstance(value, AddBatch):
        return value
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in _FIELDS]
        if unknown:
            raise InvalidInputError(f"batch {index}: unknown key(s) {unknown}; an AddBatch has {list(_FIELDS)}")
        if "messages" not in value:
            raise InvalidInputError(f"batch {index}: no 'messages'")
        return AddBatch(**value)
    raise InvalidInputError(f"batch {index} must be an AddBatch or a dict of its fields, got {show(value)}")


_pause_lock = threading.Lock()
_pauses = 0  # add_many calls running with the collector paused (by the first of them)
_paused_by_us = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the block runs (reference counting
    frees memory as usual), then restored as it was: ``add_many`` allocates several objects
    per turn that all live until it returns, and with the collector on, each full collection
    walked the whole heap again (issue 22: a fifth of keyword-only bulk ingest's CPU).
    Nestable and safe across threads: the collector comes back when the last block ends,
    and only if it was on when the first began."""
    global _pauses, _paused_by_us
    with _pause_lock:
        if _pauses == 0:
            _paused_by_us = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _paused_by_us:
                _paused_by_us = False
                gc.enable()
