"""Core policy for applying a formation batch: the ADD / UPDATE / DELETE / NONE rules.

mem0's decision step can name the wrong fact, an invented id, or delete a fact it is
re-adding. These rules guard against that, once, for every backend: a store reads the
state inside its transaction and calls :func:`resolve_change`, then performs the action.

Rules, in order:
  0. A new fact whose text is already stored valid in the partition, planned as a DELETE of
     another valid fact or an UPDATE of it to the new fact's own text (the model saw the
     duplicate and a contradiction, e.g. an old e-mail added again after it was superseded):
     the contradicted fact is invalidated (``retire``) and the identical one stays. The new
     statement is the latest word: an old value never outlives it.
  1. Otherwise a new fact whose text is already stored valid in the partition is NONE (never
     a deletion of the identical fact).
  2. UPDATE of a valid target in the same partition changes its text, unless another valid
     fact already holds that text; then the new fact falls through to ADD.
  3. NONE on a valid target records a NONE history row on it.
  4. DELETE of a valid target invalidates it, then stores the new fact.
  5. Anything else (no target, a target outside the partition or already invalid, an
     invented id) stores the new fact: ADD.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from memlane.errors import InvalidInputError
from memlane.models import Fact, content_hash

if TYPE_CHECKING:
    from memlane.stores.base import FactChange

Action = Literal["none", "update", "delete", "retire", "add"]


@dataclass(frozen=True)
class Resolution:
    """What to do with one change: ``action`` and the fact it concerns."""

    action: Action
    existing: Fact | None = None
    """``none`` / ``retire``: the fact the NONE is recorded on (the identical, current one);
    ``update`` / ``delete``: the target."""
    text: str | None = None
    """``update``: the target's new text."""
    retired: Fact | None = None
    """``retire``: the contradicted fact to invalidate (nothing new is stored)."""


def resolve_change(change: FactChange, target: Fact | None, lookup: Callable[[str], Fact | None]) -> Resolution:
    """Decide one change.

    Args:
        change: the planned change.
        target: ``change.target_id``'s fact if it is valid and in ``change.partition``, else None.
        lookup: content hash -> the valid fact with that hash in ``change.partition``, or None.
    """
    new = change.fact
    if new is not None:
        same = lookup(new.hash or content_hash(new.content))
        if same is not None:
            if target is not None and target.id != same.id and _replaces(change, same):
                return Resolution("retire", same, retired=target)
            return Resolution("none", same)
    if change.event == "UPDATE" and target is not None:
        text = change.text or (new.content if new is not None else None)
        if text:
            clash = lookup(content_hash(text))
            if clash is None or clash.id == target.id:
                return Resolution("update", target, text)
    if change.event == "NONE" and target is not None:
        return Resolution("none", target)
    if new is None:
        raise InvalidInputError(f"{change.event} change without a fact to store")
    if change.event == "DELETE" and target is not None:
        return Resolution("delete", target)
    return Resolution("add")


def _replaces(change: FactChange, same: Fact) -> bool:
    """The change would make its target say what ``same`` says: a DELETE (the new fact replaces
    the target) or an UPDATE to the new fact's own text. An UPDATE that merges other words in
    (its text is not the duplicate's) is not a replacement: retiring its target would lose them."""
    if change.event == "DELETE":
        return True
    return change.event == "UPDATE" and (change.text is None or content_hash(change.text) == same.hash)


def merge_provenance(updated: Fact, new: Fact) -> tuple[list[str], datetime | None]:
    """An UPDATE merges the new fact in: its source events join the old ones, its time wins."""
    sources = list(dict.fromkeys([*updated.source_event_ids, *new.source_event_ids]))
    when = max((t for t in (updated.occurred_at, new.occurred_at) if t is not None), default=None)
    return sources, when
