"""Keyword-only bulk ingest, round 2 (issue 22): the cheaper row building stores exactly what
the validated path stored. Facts built without pydantic's validation equal validated ones;
the fast copy equals ``model_copy``; the batched neighbour context equals the per-turn one;
the ASCII fast path of the visibility check agrees with the general one on every character;
``add_many`` stores the same rows (every column, history included) as one ``add`` per batch;
the cyclic collector is paused during ``add_many`` and restored after it, also on failure."""

from __future__ import annotations

import gc
import json
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from memlane import AddBatch, AsyncMemory, InvalidInputError
from memlane.ingest import bulk
from memlane.ingest.messages import MESSAGE_FIELDS, message_fact, to_facts
from memlane.inputs import clean_text, has_visible
from memlane.models import FACT_FIELDS, Event, Fact, fact_copy
from memlane.retrieval.context import neighbour_context, neighbour_contexts
from memlane.stores.sql.store import SqlFactStore

T0 = datetime(2024, 5, 8, 13, 56, tzinfo=UTC)

MESSAGES: list[Any] = [
    {"role": "user", "content": "plain"},
    {"role": "assistant", "name": "Bob", "content": "with a time", "timestamp": T0},
    {"role": "user", "content": "naive time", "timestamp": datetime(2024, 1, 2, 3, 4, 5)},
    {
        "role": "user",
        "content": "other zone",
        "timestamp": datetime(2024, 1, 2, 3, 4, tzinfo=timezone(timedelta(hours=5))),
    },
    {"role": "user", "content": "iso text", "timestamp": "2024-05-01T09:30:00+02:00", "id": 17},
    {"role": "user", "content": "Fußball 我的猫 ｆｕｌｌ", "metadata": {"dia_id": "D1:2", "n": [1, 2]}},
    Event(author="Cy", content="an event", timestamp=T0),
    Event(author="Cy", content={"text": "event with dict content"}),
]


def _validated(f: Fact) -> Fact:
    """The Fact the pydantic-validated path built from the same arguments (issue 11's code)."""
    return Fact(
        id=f.id,
        formed_at=f.formed_at,
        updated_at=f.updated_at,
        valid_from=f.valid_from,
        **{k: getattr(f, k) for k in MESSAGE_FIELDS},
    )


def test_message_facts_equal_validated_facts() -> None:
    meta = {"source": "import"}
    facts = to_facts(
        MESSAGES, scope="user", user_id="ann", agent_id="bot", session_id="s1", metadata=meta, timestamp=None
    )
    assert len(facts) == len(MESSAGES)
    for f in facts:
        v = _validated(f)
        assert f.model_dump() == v.model_dump()
        assert f == v
        # the defaults a validated call fills are not in the fields set (model_dump(exclude_unset) agrees)
        assert f.model_fields_set == MESSAGE_FIELDS
        assert f.model_dump(exclude_unset=True) == Fact(**{k: getattr(f, k) for k in MESSAGE_FIELDS}).model_dump(
            exclude_unset=True
        )
        assert list(f.__dict__) == list(FACT_FIELDS)  # every field, in declaration order
        assert not Fact.__private_attributes__  # (checked_fact sets none: a new one would need it)
        assert f.occurred_at is None or f.occurred_at.utcoffset() == timedelta(0)
        assert f.valid_from == (f.occurred_at or f.formed_at)
        assert f.metadata is not meta
    # one call's messages share one record time
    assert len({f.formed_at for f in facts}) == 1 and all(f.updated_at == f.formed_at for f in facts)
    assert facts[4].source_event_ids == ["17"] and facts[6].source_event_ids == [MESSAGES[6].id]
    assert facts[5].metadata == {"source": "import", "dia_id": "D1:2", "n": [1, 2]}
    assert facts[3].occurred_at == datetime(2024, 1, 1, 22, 4, tzinfo=UTC)
    assert facts[2].occurred_at == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_message_fact_still_checks_what_validation_checked() -> None:
    with pytest.raises(InvalidInputError, match="scope"):
        message_fact(
            {"content": "x"},
            0,
            scope="global",
            user_id="u",
            agent_id=None,
            session_id=None,
            metadata={},  # type: ignore[arg-type]
        )
    with pytest.raises(InvalidInputError, match="message 0"):
        message_fact({"content": 5}, 0, scope="user", user_id="u", agent_id=None, session_id=None, metadata={})
    with pytest.raises(InvalidInputError, match="timestamp"):
        message_fact(
            {"content": "x", "timestamp": "soon"},
            0,
            scope="user",
            user_id="u",
            agent_id=None,
            session_id=None,
            metadata={},
        )


def test_fact_copy_equals_model_copy() -> None:
    [f] = to_facts(MESSAGES[5:6], scope="user", user_id="u", agent_id=None, session_id="s", metadata={}, timestamp=None)
    update = {"hash": "h", "seq": 3, "embedding": None}
    a, b = fact_copy(f, update), f.model_copy(update=update)
    assert a == b and a.model_dump() == b.model_dump()
    assert a.model_fields_set == b.model_fields_set
    assert a is not f and a.__dict__ is not f.__dict__ and f.seq is None  # the input is left alone


def test_neighbour_contexts_equal_the_per_turn_context() -> None:
    by_seq = {0: "a", 1: "b", 3: "d", 4: "", 5: "f", 9: "j"}
    seqs = [0, 1, 2, 3, 4, 5, 6, 7, 9, 12]
    assert neighbour_contexts(by_seq, seqs) == [neighbour_context(by_seq, s) for s in seqs]
    assert neighbour_contexts(by_seq, seqs, radius=1) == [neighbour_context(by_seq, s, radius=1) for s in seqs]


def test_the_ascii_visibility_check_agrees_with_the_general_one() -> None:
    for code in range(128):
        ch = chr(code)
        # beside an invisible non-ASCII character (zero-width space) it takes the general path
        assert has_visible(ch) == has_visible(ch + "\u200b") == (33 <= code <= 126), repr(ch)
    assert not has_visible(" \t\n\x00\x7f") and has_visible("  x ")
    # clean_text's ASCII fast path accepts what its checks accept, and refuses the rest the same way
    assert clean_text("  x ", "t") == "  x " and clean_text(b"x", "t") == "x"
    for bad, why in [("   ", "is empty"), ("\x00\x01 \x7f", "invisible"), ("x" * 11, "11 characters"), (5, "text")]:
        with pytest.raises(InvalidInputError, match=why):
            clean_text(bad, "t", max_chars=10)


def _turns(user: str, session: int, n: int, *, times: bool = True) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "name": "Ann" if i % 2 == 0 else "Bob",
            "content": f"{user} {session}.{i}: Fußball 我的猫 pottery {i * 7 % 5}",
            **({"timestamp": T0 + timedelta(days=session, minutes=i)} if times else {}),
            **({"id": f"e{session}-{i}"} if i % 3 == 0 else {}),
            **({"metadata": {"dia_id": f"D{session}:{i}"}} if i % 2 else {}),
        }
        for i in range(n)
    ]


def _batches() -> list[AddBatch]:
    out = [
        AddBatch(_turns(u, s, 4 + s, times=s != 2), user_id=u, session_id=f"{u}:{s}")
        for u in ("a", "b")
        for s in (1, 2, 3)
    ]
    out.append(AddBatch(_turns("a", 1, 6), user_id="a", session_id="a:1", metadata={"batch": 2}))  # repeats + continues
    out.append(AddBatch(_turns("a", 4, 3), user_id="a", session_id="a:4", kind="custom"))
    return out


def _rows(path: Path) -> dict[str, Any]:
    """Every column of facts, their keyword rows and history, ids replaced by row numbers and
    record times by what they must equal."""
    c = sqlite3.connect(path)
    cols = [r[1] for r in c.execute("PRAGMA table_info(facts)")]
    facts = [dict(zip(cols, r, strict=True)) for r in c.execute("SELECT * FROM facts ORDER BY rowid")]
    num = {f["id"]: f["rowid"] for f in facts}
    history = [
        dict(zip(["id", "fact_id", "user_id", "event", "old", "new", "actor", "at", "effective_at"], r, strict=True))
        for r in c.execute(
            "SELECT id, fact_id, user_id, event, old_content, new_content, actor, at, effective_at FROM history"
        )
    ]
    out_facts = []
    for f in facts:
        assert f["updated_at"] == f["formed_at"]
        assert f["valid_from"] == (f["occurred_at"] or f["formed_at"])
        [h] = [h for h in history if h["fact_id"] == f["id"]]
        assert h["effective_at"] == f["valid_from"] and h["at"] >= f["formed_at"]
        out_facts.append({k: v for k, v in f.items() if k not in ("id", "formed_at", "updated_at", "valid_from")})
    hist = sorted(
        (num[h["fact_id"]], h["user_id"], h["event"], h["old"], h["new"], h["actor"], len(h["id"])) for h in history
    )
    fts = c.execute("SELECT rowid, part, author, text, ctx, date FROM facts_fts ORDER BY rowid").fetchall()
    parts = c.execute("SELECT partition, token, appends, changes FROM partitions ORDER BY 1").fetchall()
    c.close()
    return {"facts": out_facts, "history": hist, "fts": fts, "partitions": parts}


async def test_add_many_stores_every_column_as_one_add_per_batch(tmp_path: Path) -> None:
    """The exact rows: every column of every table add writes (ids and record times aside,
    which are checked against each other), non-ASCII text, event ids, metadata, a session
    continued and repeated, a kind, turns without times."""
    async with AsyncMemory(tmp_path / "add.db", embedder=None, sessions="null") as m:
        one = [
            await m.add(
                b.messages,
                user_id=b.user_id,
                session_id=b.session_id,
                metadata=b.metadata,
                kind=b.kind,  # type: ignore[arg-type]
            )
            for b in _batches()
        ]
    async with AsyncMemory(tmp_path / "bulk.db", embedder=None, sessions="null") as m:
        many = await m.add_many(_batches())
    assert [[f.model_dump(exclude={"id", "formed_at", "updated_at", "valid_from"}) for f in b] for b in many] == [
        [f.model_dump(exclude={"id", "formed_at", "updated_at", "valid_from"}) for f in b] for b in one
    ]
    a, b = _rows(tmp_path / "add.db"), _rows(tmp_path / "bulk.db")
    assert len(a["facts"]) == 40 and a["facts"][0]["source_event_ids"] == json.dumps(["e1-0"])
    for table in a:
        assert a[table] == b[table], table


async def test_the_collector_is_paused_during_add_many_and_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    put = SqlFactStore.put_fact_groups

    async def spy(self: SqlFactStore, *args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return await put(self, *args, **kwargs)

    monkeypatch.setattr(SqlFactStore, "put_fact_groups", spy)
    assert gc.isenabled()
    async with AsyncMemory(tmp_path / "m.db", embedder=None, sessions="null") as m:
        await m.add_many(_batches())
        assert seen == [False] and gc.isenabled()
        with pytest.raises(InvalidInputError):
            await m.add_many([*_batches(), AddBatch([{"content": " "}], user_id="a")])
        assert gc.isenabled()
        gc.disable()  # a caller that turned it off keeps it off
        try:
            await m.add_many(_batches())
            assert not gc.isenabled()
        finally:
            gc.enable()
    with bulk.collector_paused():  # nested blocks: back on only after the outer one
        with bulk.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
