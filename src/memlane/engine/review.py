"""The review queue, human in the loop (docs/review.md): ``propose`` a change to long-term
memory, list the ``proposals``, and ``review`` one: an approval applies it through formation's
write path (core policy, history with the reviewer as the actor), a rejection only records the
decision, and a proposal whose target changed since it was made is marked ``stale``, not applied.
Formation in review mode (``FormationConfig.review`` / ``review_agents``) queues its decisions
here instead of applying them.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.errors import ConfigError, EmbedderError, InvalidInputError, NotFoundError
from memlane.inputs import clean_text
from memlane.models import (
    PROPOSAL_ACTIONS,
    PROPOSAL_STATUSES,
    Proposal,
    ProposalAction,
    ScopeName,
)
from memlane.stores.base import ProposalStore
from memlane.stores.sql.proposals import planned_fact

__all__ = ["MAX_REASON_CHARS", "ReviewMethods"]

#: The longest ``reason`` a proposal takes.
MAX_REASON_CHARS = 2_000


class ReviewMethods(EngineState):
    """The engine's review-queue methods: ``propose``, ``proposals``, ``get_proposal``, ``review``."""

    def _proposal_store(self) -> ProposalStore:
        if not isinstance(self.facts, ProposalStore):
            raise ConfigError(f"{type(self.facts).__name__} has no review queue (a SQLite or PostgreSQL store has)")
        return self.facts

    @opening
    async def propose(
        self,
        text: str | None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        action: ProposalAction = "add",
        target_id: str | None = None,
        reason: str | None = None,
        scope: ScopeName = "user",
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        origin: str = "api",
    ) -> Proposal:
        """Queue a change to long-term memory for a reviewer (:meth:`review`); nothing is stored
        in memory until it is approved.

        Args:
            text: ``add``: the fact to store; ``update``: the target's new text; ``delete``:
                None to remove the target, or the statement that replaces it (stored as a new
                fact when approved, as formation's DELETE does).
            user_id: the user it is about (required for ``scope="user"``).
            agent_id: the agent namespace (required for ``scope="agent"``).
            action: ``"add"``, ``"update"`` or ``"delete"``.
            target_id: the fact an ``update`` / ``delete`` changes; it must be visible from
                ``user_id`` / ``agent_id`` (``session_id``: a room's), and the proposal takes its
                scope. Its version is recorded: if it changes before the review, the proposal
                goes ``stale``.
            reason: why, for the reviewer.
            scope: an ``add``'s scope: ``"user"`` or ``"agent"`` (elizaOS ``private`` / ``shared``).
            session_id: the source session (an ``add``), or the room of a room memory target.
            metadata: stored on the fact an approved ``add`` creates.
            origin: recorded in the proposal's ``provenance`` (``api``, ``tool``, ...).

        Raises:
            InvalidInputError: a bad action, text, reason or scope; text missing for ``add`` /
                ``update``; a target given to ``add`` or missing for ``update`` / ``delete``; a
                document or a deleted fact as target.
            ScopeError: missing user_id / agent_id for the scope.
            NotFoundError: the target is not visible from these ids.
        """
        inputs.choice(action, "action", PROPOSAL_ACTIONS)
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        target_id = inputs.optional_id(target_id, "target_id", error=InvalidInputError)
        fact_scope = inputs.fact_scope(scope)
        if fact_scope == "room":
            raise InvalidInputError("a proposal adds to scope 'user' or 'agent' (a room memory's change names it)")
        # redacted as add() redacts (AsyncMemory(redact=...)): nothing unredacted waits in the queue
        if text is not None or action != "delete":
            text = clean_text(self._writer.redact_text(text), "text")
        if reason is not None:
            reason = clean_text(self._writer.redact_text(reason), "reason", max_chars=MAX_REASON_CHARS)
        meta = self._writer.redact_data(inputs.metadata(metadata)) if metadata is not None else {}
        origin = inputs.identifier(origin, "origin", error=InvalidInputError)
        store = self._proposal_store()
        fields: dict[str, Any] = {"scope": fact_scope, "user_id": user_id, "agent_id": agent_id}
        fields["session_id"] = session_id
        if action == "add":
            if target_id is not None:
                raise InvalidInputError("an 'add' proposal has no target_id (use action='update' or 'delete')")
        else:
            if target_id is None:
                raise InvalidInputError(f"a {action!r} proposal needs target_id: the fact it changes")
            target = await self.facts.get_fact(target_id, self._scope(user_id, agent_id, session_id))
            if target is None:
                raise NotFoundError(f"no fact {target_id!r} in this scope")
            if target.invalid_at is not None:
                raise InvalidInputError(f"fact {target_id!r} was deleted; propose an 'add' instead")
            if target.kind in ("document", "fragment"):
                raise InvalidInputError(f"{target_id!r} is a {target.kind}; documents are not changed by review")
            fields = {
                "scope": target.scope,
                "user_id": target.user_id if target.scope == "user" else user_id,
                "agent_id": target.agent_id,
                "session_id": target.session_id if target.scope == "room" else None,
            }
        proposal = Proposal(
            action=action,
            text=text,
            target_id=target_id,
            reason=reason,
            provenance={"origin": origin},
            metadata=meta,
            **fields,
        )
        _ = planned_fact(proposal, text or "-").partition  # a scope without its id: ScopeError, nothing queued
        return (await store.put_proposals([proposal]))[0]

    @opening
    async def proposals(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        status: str | None = "pending",
        limit: int = 50,
    ) -> builtins.list[Proposal]:
        """Proposals, newest first: a user's (under every agent), an agent's (about every one of
        its users, and its shared memory), or a user's under one agent.

        Args:
            status: ``"pending"`` (default), ``"approved"``, ``"rejected"``, ``"stale"``, or None
                for every status.
            limit: at most this many (1..10,000).

        Raises:
            ScopeError: neither ``user_id`` nor ``agent_id`` given.
        """
        user_id, agent_id, _ = inputs.scope_ids(user_id, agent_id)
        inputs.optional_choice(status, "status", PROPOSAL_STATUSES)
        limit = inputs.integer(limit, "limit", 1, 10_000)
        return await self._proposal_store().list_proposals(
            user_id=user_id, agent_id=agent_id, status=status, limit=limit
        )

    @opening
    async def get_proposal(
        self, proposal_id: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> Proposal:
        """One proposal; with ``user_id`` / ``agent_id``, only if it is theirs (else NotFoundError)."""
        proposal_id = inputs.identifier(proposal_id, "proposal_id", error=InvalidInputError)
        user_id, agent_id, _ = inputs.scope_ids(user_id, agent_id)
        p = await self._proposal_store().get_proposal(proposal_id)
        if (
            p is None
            or (user_id is not None and p.user_id != user_id)
            or (agent_id is not None and p.agent_id != agent_id)
        ):
            raise NotFoundError(f"no proposal {proposal_id!r}")
        return p

    @opening
    async def review(
        self,
        proposal_id: str,
        *,
        approve: bool = True,
        edit: str | None = None,
        reviewer: str = "reviewer",
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Proposal:
        """Approve or reject a pending proposal.

        An approval applies it in one transaction through formation's write path:
        :func:`memlane.policy.resolve_change` decides it against the memory as it is now (an
        ``add`` of a text already stored is ``NONE``), and the history rows name ``reviewer`` as
        the actor. If the target of an ``update`` / ``delete`` changed or was deleted since the
        proposal was made, nothing is applied and the proposal is returned ``stale``.

        Args:
            approve: True applies, False rejects.
            edit: approve this text instead of the proposed one (kept in ``text``; the proposed
                one in ``edited_from``).
            reviewer: who decides (the history's actor and the proposal's ``reviewer``).
            user_id / agent_id: only a proposal of theirs (else NotFoundError): a user-bound
                caller reviews its own user's proposals only.

        Returns:
            The decided proposal: ``approved`` (``result_id``: the fact stored or changed,
            ``result_event``: what policy did), ``rejected`` or ``stale``.

        Raises:
            NotFoundError: no such proposal (for these ids).
            ConflictError: it was reviewed already.
            InvalidInputError: a bad flag, edit or reviewer; an edit on a rejection.
        """
        approve = inputs.flag(approve, "approve")
        reviewer = inputs.identifier(reviewer, "reviewer", error=InvalidInputError)
        if edit is not None:
            if not approve:
                raise InvalidInputError("edit is the text to approve: it has no meaning with approve=False")
            edit = clean_text(self._writer.redact_text(edit), "edit")
        p = await self.get_proposal(proposal_id, user_id=user_id, agent_id=agent_id)
        text = edit if edit is not None else p.text
        vector = None
        if approve and text and p.status == "pending":
            try:
                vectors = await self._embeddings.embed([text])
            except EmbedderError:
                vectors = None
                self._embeddings.pending = True
            vector = vectors[0] if vectors is not None else None
        return await self._proposal_store().review_proposal(
            p.id, approve=approve, reviewer=reviewer, edit=edit, vector=vector
        )
