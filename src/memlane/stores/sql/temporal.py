"""Point-in-time reads, once for every SQL dialect (sans-IO: see :mod:`memlane.stores.sql`).

Memory is bi-temporal (docs/temporal.md):

* **record time** (``as_of``): what memory held at a moment. A fact row holds its current
  text; its ``history`` rows hold every version (``ADD`` and ``UPDATE`` carry the text from
  then on, ``DELETE`` the moment it left memory), each stamped ``at`` when it was recorded.
  :func:`snapshot_in` replays them up to ``as_of``: the scope as it was then, each fact with
  the text, version and ``updated_at`` it had, and ``invalid_at`` only if it was already
  deleted or superseded by then. ``forget`` deletes rows and history alike, so what it erased
  is absent at every ``as_of``.
* **world time** (``valid_at``): what was true then. Each version's history row also holds
  ``effective_at``, when its text became true (the statement's own time: formation takes it
  from the turns' timestamps), and a DELETE's when the fact stopped being true; a version
  holds from its start to the next version's start (or the deletion's). ``valid_at`` picks,
  over the record as of ``as_of`` (now when not given), the version of each fact with
  ``valid_from <= valid_at < invalid_at``.

Cost: two statements (the partitions' fact rows and their history), then a replay in Python
proportional to the scope's rows and history; no index is needed beyond ``facts_partition``
and ``history_fact``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from memlane.models import Fact, FactFilter, Scope, content_hash
from memlane.stores.base import Vector
from memlane.stores.sql.dialect import FACT_COLS, Dialect
from memlane.stores.sql.facts import visible_row
from memlane.stores.sql.stmt import Program, all_rows

__all__ = ["Version", "Versioned", "fact_as_of", "replay", "snapshot_in"]

#: The history events that change what memory holds (NONE and ACCESS rows do not).
_CHANGES = ("ADD", "UPDATE", "DELETE")
_ORDER = {"ADD": 0, "UPDATE": 1, "DELETE": 2}

#: A fact as it was, with its stored vector when asked for and its text then is its text now.
Versioned = tuple[Fact, Vector | None]


@dataclass(frozen=True)
class Version:
    """One recorded change of a fact: ``event`` recorded at ``at`` (record time), taking
    effect at ``effective`` (world time; None on rows older than migration ``bitemporal``),
    ``text`` its new content (ADD/UPDATE)."""

    event: str
    at: datetime
    text: str | None
    effective: datetime | None = None
    old: str | None = None


def replay(
    fact: Fact, versions: Sequence[Version], as_of: datetime | None, valid_at: datetime | None = None
) -> Fact | None:
    """``fact`` (its row as stored now) as memory held it at ``as_of`` (record time; now when
    None): None if it was not recorded yet; else the text, version, ``updated_at`` and world
    interval (``valid_from``, ``invalid_at``) of its last version then, ``invalid_at`` set only
    if it was deleted or superseded by then. With ``valid_at``: the version true in the world
    at that time (``valid_from <= valid_at < invalid_at``, a version ending where the next one
    starts), or None when none was."""
    if len(versions) == 1 and versions[0].event == "ADD" and fact.invalid_at is None:  # most facts
        added = versions[0]
        start = added.effective or fact.valid_from
        if (as_of is not None and added.at > as_of) or (valid_at is not None and valid_at < start):
            return None
        return fact if start == fact.valid_from else fact.model_copy(update={"valid_from": start})
    changes = sorted(versions, key=lambda v: (v.at, _ORDER[v.event]))
    if as_of is not None:
        recorded = next((v.at for v in changes if v.event == "ADD"), fact.formed_at)
        if recorded > as_of:
            return None
        changes = [v for v in changes if v.at <= as_of]
    texts = [v for v in changes if v.event in ("ADD", "UPDATE")]
    if not texts or texts[0].event != "ADD":  # no ADD recorded (an import): the text before any update
        later = next((v for v in versions if v.event == "UPDATE"), None)
        first = fact.content if later is None or later.old is None else later.old
        texts = [Version("ADD", fact.formed_at, first, fact.valid_from), *texts]
    # world starts: an UPDATE without one took effect when recorded; an ADD without one at the
    # fact's first valid_from (older rows: an update did not move it)
    starts = [
        v.effective if v.effective is not None else (fact.valid_from if v.event == "ADD" else v.at) for v in texts
    ]
    deleted = next((v for v in changes if v.event == "DELETE"), None)
    if deleted is not None:
        end: datetime | None = deleted.effective or fact.invalid_at or deleted.at
    elif as_of is None or fact.invalid_at is None:
        end = fact.invalid_at  # as stored (a row stored invalid keeps its invalid_at)
    else:
        end = None
    ends = [*starts[1:], end]
    k = len(texts) - 1
    if valid_at is not None:
        held = [
            i
            for i, (a, b) in enumerate(zip(starts, ends, strict=True))
            if a <= valid_at and (b is None or valid_at < b)
        ]
        if not held:
            return None
        k = held[-1]
    text: str = fact.content if texts[k].text is None else str(texts[k].text)
    same = text == fact.content
    if same and k + 1 == fact.version and starts[k] == fact.valid_from and ends[k] == fact.invalid_at:
        return fact  # as stored now
    return fact.model_copy(
        update={
            "content": text,
            "hash": fact.hash if same else content_hash(text),
            "version": k + 1,
            "updated_at": texts[k].at if k else fact.formed_at,
            "embedding": fact.embedding if same else None,
            "valid_from": starts[k],
            "invalid_at": ends[k],
        }
    )


#: A history row as :func:`_version` reads it.
_HISTORY_COLS = "h.fact_id, h.event, h.new_content, h.at, h.effective_at, h.old_content"


def _version(d: Dialect, r: Sequence[Any]) -> Version:
    return Version(r[1], d.unts(r[3]), d.untext(r[2]), d.unts(r[4]) if r[4] is not None else None, d.untext(r[5]))


def snapshot_in(
    d: Dialect,
    parts: Sequence[str],
    *,
    as_of: datetime | None,
    valid_at: datetime | None,
    filter: FactFilter | None = None,
    include_invalid: bool = False,
    vectors: bool = False,
) -> Program[list[Versioned]]:
    """The facts of ``parts`` (resolved partitions) as of ``as_of`` (record time; now when
    None), newest first (:func:`replay`), without ``embedding``; with ``vectors``, each with
    its stored vector where its text then is its text now (an empty one when it has none
    stored; None for a text that is not stored any more: embed it to compare it). With ``valid_at``: the version of
    each that held in the world then; else those valid as of ``as_of`` (all with
    ``include_invalid``). ``filter`` runs in the query (kind, author, session and metadata
    are the same in every version)."""
    if not parts:
        return []
    where, args = d.in_list("f.partition", parts)
    fsql, fargs = d.filter_sql(filter, "f")
    where += fsql
    args = [*args, *fargs]
    cols = _cols("f", vectors)
    rows = yield from all_rows(f"SELECT {cols} FROM facts f WHERE {where} ORDER BY f.rowid DESC", args)
    if not rows:
        return []
    marks = ", ".join("?" for _ in _CHANGES)
    hist = yield from all_rows(
        f"SELECT {_HISTORY_COLS} FROM history h JOIN facts f ON f.id = h.fact_id"
        f" WHERE {where} AND h.event IN ({marks}) ORDER BY h.at, h.rowid",
        [*args, *_CHANGES],
    )
    events: dict[str, list[Version]] = {}
    for r in hist:
        events.setdefault(d.untext(r[0]) or "", []).append(_version(d, r))
    out: list[Versioned] = []
    for r in rows:
        now = d.fact(r)
        fact = replay(now, events.get(now.id, []), as_of, valid_at)
        if fact is not None and (valid_at is not None or include_invalid or fact.invalid_at is None):
            out.append((fact, _stored(d, r[21]) if vectors and fact.content == now.content else None))
    return out


def _stored(d: Dialect, value: object) -> Vector:
    """A row's stored vector; an empty one when it has none (not embedded yet)."""
    v = d.vector(value)
    return np.zeros(0, dtype=np.float32) if v is None else v


def _cols(alias: str, vectors: bool = True) -> str:
    """:data:`FACT_COLS` of table ``alias`` (the embedding read only with ``vectors``)."""
    cols = [f"{alias}.{c.strip()}" for c in FACT_COLS.split(",")]
    return ", ".join(cols if vectors else [*cols[:-1], "NULL"])


def fact_as_of(
    d: Dialect, fact_id: str, scope: Scope, as_of: datetime | None, valid_at: datetime | None = None
) -> Program[Fact | None]:
    """One fact visible from ``scope`` as memory held it at ``as_of`` and, with ``valid_at``,
    its version true then (None if it was not recorded yet, or no version held then);
    :class:`~memlane.errors.NotFoundError` if ``scope`` does not see it."""
    row = yield from visible_row(d, fact_id, scope)
    fact = d.fact(row, with_embedding=True)
    if as_of is None and valid_at is None:
        return fact
    marks = ", ".join("?" for _ in _CHANGES)
    hist = yield from all_rows(
        f"SELECT {_HISTORY_COLS} FROM history h WHERE h.fact_id=? AND h.event IN ({marks}) ORDER BY h.at, h.rowid",
        (d.text(fact_id), *_CHANGES),
    )
    return replay(fact, [_version(d, r) for r in hist], as_of, valid_at)
