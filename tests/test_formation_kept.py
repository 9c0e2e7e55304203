"""What formation keeps: a superseded value never comes back through a re-confirmation (NONE).

The engine tests here take the ``mem`` fixture, so tests/test_engine_backends.py runs them on
SQLite, PostgreSQL and PostgreSQL + Redis as well.
"""

from __future__ import annotations

from memlane import AsyncMemory
from memlane.formation.offline.claims import _decide_one
from memlane.formation.schemas import DedupItem, ExistingFact
from memlane.models import Fact, content_hash
from memlane.policy import resolve_change
from memlane.stores.base import FactChange

OLD = "Sam's email is sam@example.org"
NEW = "Sam's email is sam@new.example"


async def _valid_texts(mem: AsyncMemory, user_id: str) -> list[str]:
    return sorted(f.content for f in (await mem.list(user_id=user_id, kind="fact")).items)


async def test_a_superseded_value_added_again_never_outlives_a_newer_statement(mem: AsyncMemory) -> None:
    """README block 1 then block 2, twice: the old e-mail, added back by hand after the new one
    replaced it, is retired when the new e-mail is said again (it was a NONE that left both)."""
    await mem.add(OLD, user_id="sam")
    first = await mem.add("My email is now sam@new.example", user_id="sam", infer=True)
    assert [f.content for f in first] == [NEW]  # UPDATE of the old fact
    again = await mem.add(OLD, user_id="sam")  # the superseded value, stored again verbatim
    assert await _valid_texts(mem, "sam") == sorted([OLD, NEW])
    await mem.add("My email is now sam@new.example", user_id="sam", infer=True)
    assert await _valid_texts(mem, "sam") == [NEW]
    profile = await mem.profile("sam")
    assert profile is not None and "sam@new.example" in profile and "sam@example.org" not in profile
    events = [h.event for h in await mem.history(again[0].id, user_id="sam")]
    assert events == ["ADD", "DELETE"]


async def test_a_plain_repeat_is_still_none(mem: AsyncMemory) -> None:
    """Nothing else changes: saying the current value again stores nothing and retires nothing."""
    await mem.add("My email is sam@new.example", user_id="sam", infer=True)
    assert await mem.add("My email is sam@new.example", user_id="sam", infer=True) == []
    assert await _valid_texts(mem, "sam") == [NEW]


def test_offline_decision_retires_the_contradicted_candidate_next_to_a_duplicate() -> None:
    item = DedupItem(
        index=0,
        content=NEW,
        candidates=[ExistingFact(id="same", content=NEW), ExistingFact(id="old", content=OLD)],
    )
    d = _decide_one(item)
    assert (d.event, d.fact_id) == ("DELETE", "old")
    alone = DedupItem(index=0, content=NEW, candidates=[ExistingFact(id="same", content=NEW)])
    assert (_decide_one(alone).event, _decide_one(alone).fact_id) == ("NONE", "same")


def _fact(fid: str, text: str) -> Fact:
    return Fact(id=fid, content=text, hash=content_hash(text), scope="user", user_id="sam", kind="fact")


def test_policy_retires_only_a_replacement_never_a_merge() -> None:
    same, old = _fact("same", NEW), _fact("old", OLD)
    stored = {same.hash: same}
    new = _fact("n", NEW)
    delete = resolve_change(FactChange("DELETE", "u|sam|", fact=new, target_id="old"), old, stored.get)
    assert (delete.action, delete.existing, delete.retired) == ("retire", same, old)
    update = resolve_change(FactChange("UPDATE", "u|sam|", fact=new, target_id="old", text=NEW), old, stored.get)
    assert update.action == "retire"
    merged = "Sam's email is sam@new.example, also sam@example.org for work"
    merge = resolve_change(FactChange("UPDATE", "u|sam|", fact=new, target_id="old", text=merged), old, stored.get)
    assert (merge.action, merge.existing) == ("none", same)  # a merge keeps its target's words
    on_same = resolve_change(FactChange("DELETE", "u|sam|", fact=new, target_id="same"), same, stored.get)
    assert (on_same.action, on_same.existing) == ("none", same)
