"""The review queue (docs/review.md): proposals wait, an approval applies them through formation's
write path with the reviewer in history, a rejection changes nothing, a changed target makes a
proposal stale, formation in review mode queues instead of applying, and proposals stay with
their user (listing, review, forget, export). tests/engine/test_engine_backends.py re-runs these
on PostgreSQL and PostgreSQL + Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memlane import AsyncMemory, Event, EventType
from memlane.errors import ConflictError, InvalidInputError, NotFoundError, ScopeError
from memlane.formation.config import FormationConfig
from memlane.formation.runner import FormationResult
from memlane.models import Proposal


async def test_an_approved_proposal_is_stored_with_the_reviewer_in_history(mem: AsyncMemory) -> None:
    p = await mem.propose("Ann is allergic to peanuts", user_id="ann", reason="said in chat 12")
    assert (p.status, p.action, p.reason, p.provenance["origin"]) == ("pending", "add", "said in chat 12", "api")
    assert (await mem.list(user_id="ann")).total == 0  # nothing in memory before the review
    assert [x.id for x in await mem.proposals(user_id="ann")] == [p.id]
    done = await mem.review(p.id, approve=True, reviewer="nurse-kim")
    assert (done.status, done.reviewer, done.result_event) == ("approved", "nurse-kim", "ADD")
    fact = await mem.get(done.result_id or "", user_id="ann")
    assert fact.content == "Ann is allergic to peanuts" and fact.metadata["proposal"] == p.id
    assert [(h.event, h.actor) for h in await mem.history(fact.id, user_id="ann")] == [("ADD", "nurse-kim")]
    assert (await mem.search("peanuts", user_id="ann")).hits[0].fact.id == fact.id
    assert await mem.proposals(user_id="ann") == []  # no longer pending
    assert [x.status for x in await mem.proposals(user_id="ann", status="approved")] == ["approved"]
    with pytest.raises(ConflictError, match="already reviewed"):
        await mem.review(p.id, approve=True)


async def test_a_rejected_proposal_changes_nothing(mem: AsyncMemory) -> None:
    p = await mem.propose("Ann dislikes cats", user_id="ann")
    done = await mem.review(p.id, approve=False, reviewer="lead")
    assert (done.status, done.reviewer, done.result_id) == ("rejected", "lead", None)
    assert (await mem.list(user_id="ann", include_invalid=True)).total == 0
    with pytest.raises(ConflictError):
        await mem.review(p.id, approve=True)


async def test_an_edited_approval_stores_the_reviewers_text(mem: AsyncMemory) -> None:
    p = await mem.propose("Ann lives in Pariss", user_id="ann")
    done = await mem.review(p.id, edit="Ann lives in Paris", reviewer="kim")
    assert (done.text, done.edited_from) == ("Ann lives in Paris", "Ann lives in Pariss")
    assert [f.content for f in await mem.list(user_id="ann")] == ["Ann lives in Paris"]


async def test_update_and_delete_proposals_apply_to_their_target(mem: AsyncMemory) -> None:
    old = (await mem.add("Ann works at Acme", user_id="ann"))[0]
    up = await mem.propose("Ann works at Globex", user_id="ann", action="update", target_id=old.id)
    assert up.target_version == 1
    done = await mem.review(up.id, reviewer="kim")
    assert (done.result_event, done.result_id) == ("UPDATE", old.id)
    now = await mem.get(old.id, user_id="ann")
    assert (now.content, now.version) == ("Ann works at Globex", 2)
    assert [(h.event, h.actor) for h in await mem.history(old.id, user_id="ann")][-1] == ("UPDATE", "kim")
    gone = await mem.propose(None, user_id="ann", action="delete", target_id=old.id, reason="she left")
    assert (await mem.review(gone.id, reviewer="kim")).result_event == "DELETE"
    assert (await mem.get(old.id, user_id="ann")).invalid_at is not None
    assert [(h.event, h.actor) for h in await mem.history(old.id, user_id="ann")][-1] == ("DELETE", "kim")


async def test_a_delete_with_a_replacement_stores_the_new_statement(mem: AsyncMemory) -> None:
    old = (await mem.add("Ann is single", user_id="ann"))[0]
    p = await mem.propose("Ann is married", user_id="ann", action="delete", target_id=old.id)
    done = await mem.review(p.id, reviewer="kim")
    assert done.result_event == "DELETE" and done.result_id != old.id
    assert [f.content for f in await mem.list(user_id="ann")] == ["Ann is married"]


async def test_a_proposal_whose_target_changed_goes_stale_and_is_not_applied(mem: AsyncMemory) -> None:
    fact = (await mem.add("Ann drives a Fiat", user_id="ann"))[0]
    up = await mem.propose("Ann drives a Volvo", user_id="ann", action="update", target_id=fact.id)
    rm = await mem.propose(None, user_id="ann", action="delete", target_id=fact.id)
    await mem.update(fact.id, "Ann drives a Tesla", user_id="ann")  # the target moved on
    stale = await mem.review(up.id, reviewer="kim")
    assert (stale.status, stale.result_id) == ("stale", None)
    assert (await mem.get(fact.id, user_id="ann")).content == "Ann drives a Tesla"
    await mem.delete(fact.id, user_id="ann")
    assert (await mem.review(rm.id, reviewer="kim")).status == "stale"
    assert [x.id for x in await mem.proposals(user_id="ann", status="stale")] == [rm.id, up.id]


async def test_two_reviews_at_once_apply_a_proposal_once(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    """Two engines (replicas) approve the same proposal at the same time: one applies it, the
    other gets ConflictError; one fact, one history row."""
    async with (
        open_memory(tmp_path / "m.db", embedder="hash") as a,
        open_memory(tmp_path / "m.db", embedder="hash") as b,
    ):
        p = await a.propose("Ann plays chess", user_id="ann")
        results = await asyncio.gather(
            a.review(p.id, reviewer="kim"), b.review(p.id, reviewer="lee"), return_exceptions=True
        )
        done = [r for r in results if isinstance(r, Proposal)]
        assert len(done) == 1 and done[0].status == "approved", results
        assert [type(r) for r in results if not isinstance(r, Proposal)] == [ConflictError]
        facts = (await a.list(user_id="ann")).items
        assert [f.content for f in facts] == ["Ann plays chess"]
        assert [h.actor for h in await a.history(facts[0].id, user_id="ann")] == [done[0].reviewer]


async def test_an_add_of_a_stored_text_is_none_through_core_policy(mem: AsyncMemory) -> None:
    fact = (await mem.add("Ann speaks Dutch", user_id="ann"))[0]
    p = await mem.propose("Ann speaks  Dutch", user_id="ann")
    done = await mem.review(p.id, reviewer="kim")
    assert (done.status, done.result_event, done.result_id) == ("approved", "NONE", fact.id)
    assert (await mem.list(user_id="ann")).total == 1


async def test_an_agent_fact_proposal_takes_the_targets_scope(mem: AsyncMemory) -> None:
    shared = (await mem.add("The shop opens at 9", agent_id="shop", scope="agent"))[0]
    p = await mem.propose("The shop opens at 10", user_id="ann", agent_id="shop", action="update", target_id=shared.id)
    assert (p.scope, p.agent_id, p.user_id) == ("agent", "shop", "ann")
    assert [x.id for x in await mem.proposals(agent_id="shop")] == [p.id]
    await mem.review(p.id, reviewer="owner")
    assert (await mem.get(shared.id, agent_id="shop")).content == "The shop opens at 10"


async def test_proposals_stay_with_their_user(mem: AsyncMemory) -> None:
    ann = await mem.propose("Ann has a dog", user_id="ann")
    bob_fact = (await mem.add("Bob has a cat", user_id="bob"))[0]
    assert await mem.proposals(user_id="bob") == []
    with pytest.raises(NotFoundError):
        await mem.get_proposal(ann.id, user_id="bob")
    with pytest.raises(NotFoundError):
        await mem.review(ann.id, user_id="bob")
    with pytest.raises(NotFoundError):  # another user's fact is not a target
        await mem.propose("Bob has two cats", user_id="ann", action="update", target_id=bob_fact.id)
    assert (await mem.get_proposal(ann.id, user_id="ann")).status == "pending"


async def test_bad_input_is_refused_and_queues_nothing(mem: AsyncMemory) -> None:
    fact = (await mem.add("Ann is tall", user_id="ann"))[0]
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"text": "x", "user_id": "ann", "action": "merge"}, InvalidInputError, "action"),
        ({"text": "x", "user_id": "ann", "target_id": fact.id}, InvalidInputError, "no target_id"),
        ({"text": "x", "user_id": "ann", "action": "update"}, InvalidInputError, "needs target_id"),
        ({"text": None, "user_id": "ann"}, InvalidInputError, "text"),
        ({"text": "  ", "user_id": "ann"}, InvalidInputError, "empty"),
        ({"text": "x"}, ScopeError, "user"),
        ({"text": "x", "user_id": "ann", "scope": "agent"}, ScopeError, "agent"),
        ({"text": "x", "user_id": "ann", "reason": "r" * 3000}, InvalidInputError, "reason"),
        ({"text": "x", "user_id": "ann", "action": "update", "target_id": "nope"}, NotFoundError, "nope"),
    ]
    for kw, err, words in cases:
        text = kw.pop("text")
        with pytest.raises(err, match=words):
            await mem.propose(text, **kw)
    assert await mem.proposals(user_id="ann", status=None) == []
    with pytest.raises(ScopeError):
        await mem.proposals()
    with pytest.raises(InvalidInputError, match="status"):
        await mem.proposals(user_id="ann", status="done")
    p = await mem.propose("Ann is kind", user_id="ann")
    with pytest.raises(InvalidInputError, match="edit"):
        await mem.review(p.id, approve=False, edit="Ann is very kind")
    assert (await mem.get_proposal(p.id)).status == "pending"


async def test_forget_erases_proposals_and_export_includes_them(mem: AsyncMemory) -> None:
    p = await mem.propose("Ann's PIN is ZQPROPOSAL", user_id="ann", reason="she told us")
    await mem.propose("Bob likes tea", user_id="bob")
    exported = await mem.export_user("ann")
    assert [(x["id"], x["text"], x["status"]) for x in exported["proposals"]] == [
        (p.id, "Ann's PIN is ZQPROPOSAL", "pending")
    ]
    await mem.forget("ann")
    assert await mem.proposals(user_id="ann", status=None) == []
    with pytest.raises(NotFoundError):
        await mem.get_proposal(p.id)
    assert len(await mem.proposals(user_id="bob")) == 1


async def _vegan_session(m: AsyncMemory, sid: str, agent: str | None) -> FormationResult:
    await m.sessions.create_session(session_id=sid, user_ids=["sam"], agent_id=agent)
    for role, text in [("user", "I am vegan"), ("assistant", "Noted!")]:
        kind = EventType.USER_MESSAGE if role == "user" else EventType.AGENT_RESPONSE
        await m.sessions.add_event(sid, Event(type=kind, author=role, content=text))
    res = await m.form(sid)
    assert isinstance(res, FormationResult)
    return res


async def test_formation_in_review_mode_queues_its_decisions(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    cfg = FormationConfig(review=True, background=False, idle_minutes=None)
    async with open_memory(tmp_path / "m.db", embedder="hash", formation=cfg) as m:
        assert await m.add("I am vegan", user_id="sam", infer=True) == []
        queued = await m.proposals(user_id="sam")
        assert [(p.action, p.text, p.provenance["origin"]) for p in queued] == [("add", "Sam is vegan", "formation")]
        assert (await m.list(user_id="sam")).total == 0
        done = await m.review(queued[0].id, reviewer="kim")
        assert [f.content for f in await m.list(user_id="sam")] == ["Sam is vegan"]
        assert [h.actor for h in await m.history(done.result_id or "", user_id="sam")] == ["kim"]


async def test_review_mode_per_agent(tmp_path: Path, open_memory: Callable[..., AsyncMemory]) -> None:
    """``review_agents`` turns review on for one agent namespace only (and off for another)."""
    cfg = FormationConfig(review_agents={"care-bot": True}, background=False, idle_minutes=None)
    async with open_memory(tmp_path / "m.db", embedder="hash", formation=cfg) as m:
        reviewed = await _vegan_session(m, "s1", "care-bot")
        assert reviewed.changes == [] and len(reviewed.proposed) == 1
        assert [p.id for p in await m.proposals(agent_id="care-bot")] == reviewed.proposed
        assert (await m.list(user_id="sam", agent_id="care-bot", kind="fact")).total == 0
        direct = await _vegan_session(m, "s2", "shop-bot")
        assert direct.proposed == [] and [c.event for c in direct.changes] == ["ADD"]
        assert await m.proposals(agent_id="shop-bot") == []
    off = FormationConfig(review=True, review_agents={"shop-bot": False})
    assert (off.reviews("shop-bot"), off.reviews("care-bot"), off.reviews(None)) == (False, True, True)


async def test_a_replayed_formation_queues_each_proposal_once(mem: AsyncMemory) -> None:
    from memlane.stores.base import ProposalStore

    store = mem.facts
    assert isinstance(store, ProposalStore)
    p = Proposal(id="p-fixed", action="add", text="Sam is vegan", user_id="sam", provenance={"origin": "formation"})
    await store.put_proposals([p])
    await store.put_proposals([p.model_copy(update={"text": "changed"})])  # a replay: the first stays
    assert [(x.id, x.text) for x in await mem.proposals(user_id="sam")] == [("p-fixed", "Sam is vegan")]


async def test_proposals_are_redacted_before_they_are_queued(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    """With ``redact=``, what waits in the queue (text, reason, metadata, a reviewer's edit) is
    redacted as ``add`` would store it."""
    # sessions="local": a redacting engine wraps its session store (the backends' check looks at it)
    async with open_memory(tmp_path / "m.db", embedder="hash", redact=["email"], sessions="local") as m:
        p = await m.propose(
            "Ann's mail is ann.zq@example.org",
            user_id="ann",
            reason="from ann.zq@example.org",
            metadata={"m": "ann.zq@example.org"},
        )
        assert "ann.zq@example.org" not in p.model_dump_json()
        q = await m.propose("Ann has a mail address", user_id="ann")
        done = await m.review(q.id, edit="Ann's mail is ann.zq@example.org", reviewer="kim")
        assert "ann.zq@example.org" not in (done.text or "")
        assert "ann.zq@example.org" not in str([f.content for f in (await m.list(user_id="ann")).items])


def test_the_sync_facade_reviews(tmp_path: Path, open_sync_memory: Callable[..., Any]) -> None:
    with open_sync_memory(tmp_path / "m.db", embedder="hash") as m:
        p = m.propose("Ann likes jazz", user_id="ann")
        assert [x.id for x in m.proposals(user_id="ann")] == [p.id]
        assert m.get_proposal(p.id).text == "Ann likes jazz"
        assert m.review(p.id, reviewer="kim").status == "approved"
