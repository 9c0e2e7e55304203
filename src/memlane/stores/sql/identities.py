"""The identity map, once for every SQL dialect (sans-IO: see :mod:`memlane.stores.sql`):
``(channel, sender) -> user_id`` in the ``identities`` table.

A sender on a channel is one user. Linking it again to the same user changes nothing;
linking it to another user is a :class:`~memlane.errors.ConflictError` (unlink it first), so
a person's channel never moves to someone else's memory by a race or a typo. ``forget``
deletes the user's links in its own transaction (:mod:`memlane.stores.sql.erasure`).
"""

from __future__ import annotations

from datetime import datetime

from memlane.errors import ConflictError
from memlane.models import Identity
from memlane.stores.sql.dialect import Dialect
from memlane.stores.sql.stmt import Program, Row, Stmt, all_rows, count, one

__all__ = ["identities_of", "link", "purge_identities", "resolve", "unlink"]

_COLUMNS = "channel, sender, user_id, linked_at"


def _identity(d: Dialect, row: Row) -> Identity:
    channel, sender, user_id = (d.untext(v) or "" for v in row[:3])
    return Identity(channel=channel, sender=sender, user_id=user_id, linked_at=d.unts(row[3]))


def link(d: Dialect, channel: str, sender: str, user_id: str, at: datetime) -> Program[Identity]:
    """Link ``(channel, sender)`` to ``user_id``; the stored link (the first one when it was
    already linked to the user). ConflictError when it is linked to another user."""
    key = (d.text(channel), d.text(sender))
    yield Stmt(
        f"INSERT INTO identities ({_COLUMNS}) VALUES (?, ?, ?, ?) ON CONFLICT (channel, sender) DO NOTHING",
        (*key, d.text(user_id), d.ts(at)),
    )
    row = yield from one(f"SELECT {_COLUMNS} FROM identities WHERE channel=? AND sender=?", key)
    assert row is not None  # inserted, or there before (a delete would wait for this transaction)
    found = _identity(d, row)
    if found.user_id != user_id:
        raise ConflictError(
            f"({channel!r}, {sender!r}) is already linked to another user; unlink it first "
            "(unlink_identity / memlane identity unlink) to link it to this one"
        )
    return found


def unlink(d: Dialect, channel: str, sender: str, user_id: str | None = None) -> Program[bool]:
    """Remove the link of ``(channel, sender)`` (only if it is ``user_id``'s, when given);
    True when one was removed."""
    where, args = "channel=? AND sender=?", [d.text(channel), d.text(sender)]
    if user_id is not None:
        where, args = where + " AND user_id=?", [*args, d.text(user_id)]
    return (yield from count(f"DELETE FROM identities WHERE {where}", args)) > 0


def resolve(d: Dialect, channel: str, sender: str) -> Program[Identity | None]:
    """The link of ``(channel, sender)``, or None."""
    row = yield from one(
        f"SELECT {_COLUMNS} FROM identities WHERE channel=? AND sender=?", (d.text(channel), d.text(sender))
    )
    return None if row is None else _identity(d, row)


def identities_of(d: Dialect, user_id: str) -> Program[list[Identity]]:
    """The user's links, by channel then sender."""
    rows = yield from all_rows(f"SELECT {_COLUMNS} FROM identities WHERE user_id=?", (d.text(user_id),))
    return sorted((_identity(d, r) for r in rows), key=lambda i: (i.channel, i.sender))  # one order on every backend


def purge_identities(d: Dialect, user_id: str) -> Program[int]:
    """Delete the user's links (``forget``); how many."""
    return (yield from count("DELETE FROM identities WHERE user_id=?", (d.text(user_id),)))
