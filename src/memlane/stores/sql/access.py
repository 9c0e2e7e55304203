"""Access counts off the search path (issue 19), once for every SQL backend.

``record_access`` (called by a search with its hits) adds one increment per fact to a ledger
of pending increments and returns: the search does not wait for the ``UPDATE``. A background
task writes them after :data:`ACCESS_FLUSH_DELAY_S`, every increment that came meanwhile
(from any number of searches) in one write (the backend's :meth:`AccessCounts._write_access`:
a fact searched three times gains 3 in one statement).

The ledger is kept per database location and shared by every store of this process on it
(two engines on one file or schema share one), so a read returning ``access_count`` through
any of them sees every search that returned before it: ``get_fact`` and ``get_facts`` first
write what is pending for the facts they return and wait for those facts' writes in flight;
``list_facts`` and ``export_user`` do so for every fact. Another process sees the counts
once the background write committed (:data:`ACCESS_FLUSH_DELAY_S` plus the write).
``close()`` writes what is pending. A search's own hits carry the count as it was stored
when the search read them (searches whose write is pending are not in it).

A failed write is logged and its increments dropped: an access count is a statistic, never
worth failing a search or a read (nor retrying against a database that is down).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence

__all__ = ["ACCESS_FLUSH_DELAY_S", "AccessCounts", "pending_access"]

log = logging.getLogger("memlane")

#: How long the background write waits after the first pending increment, so that the
#: searches meanwhile share one write.
ACCESS_FLUSH_DELAY_S = 0.05


class _Ledger:
    """Increments of one database location not yet written, and the writes in flight (a
    future per fact of each write, set when that fact's increment committed or failed)."""

    __slots__ = ("inflight", "pending")

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()
        self.inflight: dict[str, set[cf.Future[None]]] = {}


_LOCK = threading.Lock()  # stores on several event loops (sync facades) may share a location
_LEDGERS: dict[Hashable, _Ledger] = {}


def pending_access(key: Hashable) -> dict[str, int]:
    """Increments not yet handed to a write at database location ``key`` (diagnostics, tests)."""
    with _LOCK:
        ledger = _LEDGERS.get(key)
        return dict(ledger.pending) if ledger is not None else {}


def _forget_if_idle(key: Hashable, ledger: _Ledger) -> None:
    """Drop an empty ledger (callers hold ``_LOCK``)."""
    if not ledger.pending and not ledger.inflight and _LEDGERS.get(key) is ledger:
        del _LEDGERS[key]


class AccessCounts(ABC):
    """The access-count ledger of a store (a mixin of :class:`~memlane.stores.sql.store.SqlFactStore`)."""

    # ------------------------------------------------------------------ what a backend supplies
    @property
    @abstractmethod
    def _access_key(self) -> Hashable:
        """The database location (stores of this process on one location share increments)."""

    @abstractmethod
    async def _write_access(self, counts: dict[str, int], done: Callable[[Iterable[str]], None]) -> None:
        """Add ``counts[fact_id]`` to each fact's ``access_count`` (a fact gone is skipped),
        calling ``done(fact_ids)`` as each fact's increment commits. It must never wait on a
        row lock while holding another (a writer may hold that one and want this one)."""

    # ------------------------------------------------------------------ the ledger
    async def record_access(self, fact_ids: Sequence[str]) -> None:
        """Count one access of each fact (once however often it appears): written in the
        background, coalesced with other searches' (see the module docstring)."""
        ids = list(dict.fromkeys(fact_ids))
        if not ids or self.__dict__.get("_access_closed"):
            return
        loop = asyncio.get_running_loop()
        with _LOCK:
            ledger = _LEDGERS.setdefault(self._access_key, _Ledger())
            ledger.pending.update(ids)
            if self.__dict__.get("_access_task") is None:
                self.__dict__["_access_task"] = loop.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        """The background write: wait to coalesce, write everything pending, again while more came."""
        while True:
            self.__dict__["_access_sleeping"] = True
            try:
                await asyncio.sleep(ACCESS_FLUSH_DELAY_S)
            finally:
                self.__dict__["_access_sleeping"] = False
            await self.settle_access()
            with _LOCK:
                ledger = _LEDGERS.get(self._access_key)
                if ledger is None or not ledger.pending:
                    self.__dict__["_access_task"] = None
                    return

    async def settle_access(self, fact_ids: Sequence[str] | None = None) -> None:
        """Write the pending increments of ``fact_ids`` (every fact when None) and wait for
        their writes in flight, so that a read after this sees them. Never raises for a
        failed write (logged)."""
        key = self._access_key
        with _LOCK:
            ledger = _LEDGERS.get(key)
            if ledger is None:
                return
            if fact_ids is None:
                counts = dict(ledger.pending)
                ledger.pending.clear()
                waits = {f for fs in ledger.inflight.values() for f in fs}
            else:
                counts = {i: ledger.pending.pop(i) for i in dict.fromkeys(fact_ids) if i in ledger.pending}
                waits = {f for i in fact_ids for f in ledger.inflight.get(i, ())}
            mine: dict[str, cf.Future[None]] = {i: cf.Future() for i in counts}
            for i, fut in mine.items():
                ledger.inflight.setdefault(i, set()).add(fut)
            if not counts and not waits:
                _forget_if_idle(key, ledger)
                return

        def done(ids: Iterable[str]) -> None:
            with _LOCK:
                for i in ids:
                    fut = mine.pop(i, None)
                    if fut is None:
                        continue
                    held = ledger.inflight.get(i)
                    if held is not None:
                        held.discard(fut)
                        if not held:
                            del ledger.inflight[i]
                    fut.set_result(None)
                _forget_if_idle(key, ledger)

        try:
            if counts:
                await self._write_access(counts, done)
        except Exception as exc:  # a statistic: logged, never raised into a search or a read
            log.warning("memlane: writing %d access count(s) failed (%s); they are dropped", len(counts), exc)
        finally:
            done(list(mine))
        for fut in waits:
            await asyncio.wrap_future(fut)

    async def _close_access(self) -> None:
        """On ``close()``: stop the background task and write what is pending."""
        self.__dict__["_access_closed"] = True
        task: asyncio.Task[None] | None = self.__dict__.get("_access_task")
        if task is not None and not task.done():
            if self.__dict__.get("_access_sleeping"):
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.__dict__["_access_task"] = None
        await self.settle_access()
