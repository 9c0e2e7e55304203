"""The review queue, once for every SQL dialect (sans-IO: see :mod:`memlane.stores.sql`).

A proposal is a planned ADD / UPDATE / DELETE of a fact kept in the ``proposals`` table until a
reviewer decides. :func:`review_proposal` applies an approved one in one transaction, through
the same write path as formation (:func:`memlane.stores.sql.facts.apply_changes`, so
:func:`memlane.policy.resolve_change` decides it and history records the reviewer as the
actor), after checking, under the target's locks, that the target is still the version the
proposal was made against: a target changed or deleted since makes the proposal ``stale``, and
nothing is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memlane.errors import ConflictError, NotFoundError
from memlane.models import Fact, Proposal, content_hash, utcnow
from memlane.stores.base import FactChange, Vector
from memlane.stores.sql.dialect import FACT_COLS, Dialect
from memlane.stores.sql.facts import apply_changes, invalidate_row
from memlane.stores.sql.stmt import Program, Row, Stmt, all_rows, count, one, run_all

__all__ = [
    "PROPOSAL_COLS",
    "export_proposals",
    "get_proposal",
    "insert_proposals",
    "list_proposals",
    "planned_fact",
    "purge_proposals",
    "review_proposal",
]

#: Columns of a proposal row, in the order :func:`_proposal` reads them.
PROPOSAL_COLS = (
    "id, action, text, target_id, target_version, reason, provenance, scope, user_id, agent_id, session_id,"
    " metadata, status, created_at, reviewed_at, reviewer, result_id, result_event, edited_from"
)


def _proposal(d: Dialect, r: Row) -> Proposal:
    return Proposal(
        id=d.untext(r[0]) or "",
        action=r[1],
        text=d.untext(r[2]),
        target_id=d.untext(r[3]),
        target_version=r[4],
        reason=d.untext(r[5]),
        provenance=d.unjson(r[6]) or {},
        scope=r[7],
        user_id=d.untext(r[8]),
        agent_id=d.untext(r[9]),
        session_id=d.untext(r[10]),
        metadata=d.unjson(r[11]) or {},
        status=r[12],
        created_at=d.unts(r[13]),
        reviewed_at=d.unts(r[14]) if r[14] is not None else None,
        reviewer=d.untext(r[15]),
        result_id=d.untext(r[16]),
        result_event=r[17],
        edited_from=d.untext(r[18]),
    )


def planned_fact(p: Proposal, text: str) -> Fact:
    """The fact an approval of ``p`` stores (or merges into its target), holding ``text``."""
    when = p.provenance.get("occurred_at")
    return Fact(
        content=text,
        hash=content_hash(text),
        scope=p.scope,
        user_id=p.user_id,
        agent_id=p.agent_id,
        session_id=p.session_id,
        kind="fact",
        occurred_at=datetime.fromisoformat(when) if isinstance(when, str) else None,
        source_event_ids=[str(x) for x in p.provenance.get("source_event_ids") or []],
        metadata={**p.metadata, "proposal": p.id},
    )


def _target(d: Dialect, p: Proposal, part: str, *, lock: bool) -> Program[Row | None]:
    """The proposal's target if it is a valid fact in ``part``, else None."""
    row = yield from one(
        f"SELECT {FACT_COLS} FROM facts WHERE id=? AND partition=?{d.for_update if lock else ''}",
        (d.text(p.target_id), part),
    )
    if row is None or row[19] is not None:
        return None
    return tuple(row)


def insert_proposals(d: Dialect, proposals: Sequence[Proposal], *, missing: str = "raise") -> Program[list[Proposal]]:
    """Queue proposals (a known id changes nothing: a replayed formation job queues each once).
    An ``update`` / ``delete`` records its target's current version; a target that is not a
    valid fact in the proposal's partition raises :class:`NotFoundError`, or, with
    ``missing="add"`` (formation: the target went since the decision), the proposal becomes an
    ``add`` of its text (dropped when it has none). Returns the stored proposals."""
    out: list[Proposal] = []
    for p in proposals:
        if p.target_id is not None and p.action != "add":
            part = planned_fact(p, p.text or "-").partition
            row = yield from _target(d, p, part, lock=False)
            if row is None:
                if missing != "add":
                    raise NotFoundError(f"no fact {p.target_id!r} in this scope to {p.action}")
                if not p.text:
                    continue
                p = p.model_copy(update={"action": "add", "target_id": None, "target_version": None})
            else:
                p = p.model_copy(update={"target_version": int(row[16])})
        else:
            planned_fact(p, p.text or "-").partition  # noqa: B018  (validates the scope fields)
        yield Stmt(
            f"INSERT INTO proposals ({PROPOSAL_COLS}) VALUES ({','.join('?' * 19)}) ON CONFLICT (id) DO NOTHING",
            _args(d, p),
        )
        stored = yield from get_proposal(d, p.id)
        assert stored is not None
        out.append(stored)
    return out


def _args(d: Dialect, p: Proposal) -> tuple[Any, ...]:
    return (
        d.text(p.id),
        p.action,
        d.text(p.text),
        d.text(p.target_id),
        p.target_version,
        d.text(p.reason),
        d.json(p.provenance),
        p.scope,
        d.text(p.user_id),
        d.text(p.agent_id),
        d.text(p.session_id),
        d.json(p.metadata),
        p.status,
        d.ts(p.created_at),
        d.ts(p.reviewed_at),
        d.text(p.reviewer),
        d.text(p.result_id),
        p.result_event,
        d.text(p.edited_from),
    )


def get_proposal(d: Dialect, proposal_id: str, *, lock: bool = False) -> Program[Proposal | None]:
    """One proposal by id, or None."""
    row = yield from one(
        f"SELECT {PROPOSAL_COLS} FROM proposals WHERE id=?{d.for_update if lock else ''}", (d.text(proposal_id),)
    )
    return _proposal(d, row) if row is not None else None


def list_proposals(
    d: Dialect, *, user_id: str | None, agent_id: str | None, status: str | None, limit: int
) -> Program[list[Proposal]]:
    """Proposals of a user (every agent), of an agent (every user), or of a user under an
    agent; newest first; ``status`` narrows them."""
    conds: list[str] = []
    args: list[Any] = []
    if user_id is not None:
        conds.append("user_id=?")
        args.append(d.text(user_id))
    if agent_id is not None:
        conds.append("agent_id=?")
        args.append(d.text(agent_id))
    if status is not None:
        conds.append("status=?")
        args.append(status)
    assert conds, "a proposal listing names a user or an agent"
    rows = yield from all_rows(
        f"SELECT {PROPOSAL_COLS} FROM proposals WHERE {' AND '.join(conds)} ORDER BY created_at DESC, id LIMIT ?",
        (*args, limit),
    )
    return [_proposal(d, r) for r in rows]


def _decide(d: Dialect, p: Proposal, **update: Any) -> Program[Proposal]:
    done = p.model_copy(update={"reviewed_at": utcnow(), **update})
    yield Stmt(
        "UPDATE proposals SET status=?, text=?, reviewed_at=?, reviewer=?, result_id=?, result_event=?,"
        " edited_from=? WHERE id=?",
        (
            done.status,
            d.text(done.text),
            d.ts(done.reviewed_at),
            d.text(done.reviewer),
            d.text(done.result_id),
            done.result_event,
            d.text(done.edited_from),
            d.text(done.id),
        ),
    )
    return done


def review_proposal(
    d: Dialect,
    proposal_id: str,
    *,
    approve: bool,
    reviewer: str,
    edit: str | None = None,
    vector: Vector | None = None,
) -> Program[Proposal]:
    """Decide a pending proposal (see the module docstring). ``edit``: the text to apply instead
    of the proposed one; ``vector``: the applied text's embedding. Returns the decided proposal
    (``stale`` when its target changed or went since it was proposed).

    Raises:
        NotFoundError: no such proposal.
        ConflictError: it was decided already.
    """
    p = yield from get_proposal(d, proposal_id, lock=True)
    if p is None:
        raise NotFoundError(f"no proposal {proposal_id!r}")
    if p.status != "pending":
        raise ConflictError(f"proposal {proposal_id!r} was already reviewed: it is {p.status}")
    if not approve:
        return (yield from _decide(d, p, status="rejected", reviewer=reviewer))
    text = edit if edit is not None else p.text
    edited_from = p.text if edit is not None and edit != p.text else None
    part = planned_fact(p, text or "-").partition
    yield from run_all(d.lock_partitions([part]))
    row: Row | None = None
    if p.action != "add":
        row = yield from _target(d, p, part, lock=True)
        if row is None or int(row[16]) != p.target_version:
            return (yield from _decide(d, p, status="stale", reviewer=reviewer))
    if p.action == "delete" and not text:  # a removal: no new statement for policy to weigh
        assert row is not None
        gone = yield from invalidate_row(d, row, reviewer)
        return (
            yield from _decide(
                d, p, status="approved", reviewer=reviewer, result_id=gone.id, result_event="DELETE", text=text
            )
        )
    assert text is not None
    fact = planned_fact(p, text)
    event = {"add": "ADD", "update": "UPDATE", "delete": "DELETE"}[p.action]
    change = FactChange(event, part, fact=fact, target_id=p.target_id, text=text if event == "UPDATE" else None)  # type: ignore[arg-type]
    change.vector = vector
    applied = yield from apply_changes(d, [change], [], key=f"proposal:{p.id}", actor=reviewer)
    return (
        yield from _decide(
            d,
            p,
            status="approved",
            reviewer=reviewer,
            text=text,
            edited_from=edited_from,
            result_id=applied[0].fact.id,
            result_event=applied[0].event,
        )
    )


def purge_proposals(d: Dialect, user_id: str) -> Program[int]:
    """For ``forget``: delete the user's proposals; rows removed."""
    return (yield from count("DELETE FROM proposals WHERE user_id=?", (d.text(user_id),)))


def export_proposals(d: Dialect, user_id: str) -> Program[list[dict[str, Any]]]:
    """The user's proposals as JSON data, oldest first (``export_user``'s ``proposals``)."""
    rows = yield from all_rows(
        f"SELECT {PROPOSAL_COLS} FROM proposals WHERE user_id=? ORDER BY created_at, id", (d.text(user_id),)
    )
    return [_proposal(d, r).model_dump(mode="json") for r in rows]
