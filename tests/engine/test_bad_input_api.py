"""Every bad argument to the public Python API gets a typed error with a clear message and
changes nothing (issue 7, section 4). The last test throws arguments of every wrong type at
every public method (hypothesis) and checks that only MemlaneError subclasses escape and
that no row of the SQLite file changes on a rejection."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import AsyncMemory, FormationConfig, InvalidInputError, MemlaneError, Memory, ScopeError
from memlane.inputs import MAX_ID_CHARS, MAX_METADATA_CHARS, MAX_METADATA_DEPTH, has_visible

# --------------------------------------------------------------------------- helpers


def snapshot(db: Path) -> dict[str, str]:
    """A digest of every row of every table (FTS shadow tables included), read through a
    separate read-only connection: equal snapshots mean no row was added, removed or changed."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        out: dict[str, str] = {}
        for name in names:
            try:
                rows = con.execute(f'SELECT * FROM "{name}"').fetchall()
            except sqlite3.OperationalError:  # a virtual table whose module is not loaded here
                continue
            out[name] = hashlib.sha256(repr(sorted(map(repr, rows))).encode()).hexdigest()
        return out
    finally:
        con.close()


def nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(depth - 1):
        cur["a"] = {}
        cur = cur["a"]
    return root


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[tuple[AsyncMemory, Path, str]]:
    """A memory with one fact of user "u" (its id is the third item)."""
    db = tmp_path / "bad.db"
    async with AsyncMemory(db, embedder="hash:64", sessions="sqlite", llm="offline") as m:
        [fact] = await m.add("Sam keeps bees on the roof", user_id="u", session_id="s1")
        yield m, db, fact.id


async def rejected(
    db: Path, call: Awaitable[object], error: type[MemlaneError] = InvalidInputError, match: str = ""
) -> str:
    """Await ``call``, expect ``error`` matching ``match``, and check no row changed."""
    before = snapshot(db)
    with pytest.raises(error, match=match) as info:
        await call
    assert snapshot(db) == before, "a rejected call changed the database"
    return str(info.value)


# --------------------------------------------------------------------------- the cases

NOW = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        pytest.param({"when": NOW}, r"metadata\['when'\] must be a JSON value.*datetime", id="datetime"),
        pytest.param({"tags": {"a", "b"}}, r"metadata\['tags'\] must be a JSON value.*set", id="set"),
        pytest.param({"raw": b"\x00\x01"}, r"metadata\['raw'\] must be a JSON value.*bytes", id="bytes"),
        pytest.param({"price": Decimal("9.99")}, r"metadata\['price'\] must be a JSON value.*Decimal", id="decimal"),
        pytest.param(nested(1000), f"nested more than {MAX_METADATA_DEPTH} levels", id="nested-1000"),
        pytest.param({"x": [[NOW]]}, r"metadata\['x'\]\[0\]\[0\]", id="datetime-in-list"),
        pytest.param({1: "one"}, "key that is not a string", id="int-key"),
        pytest.param({"x": float("nan")}, "NaN", id="nan"),
        pytest.param({"x": 2**64}, "beyond 64 bits", id="huge-int"),
        pytest.param({"x": "y" * MAX_METADATA_CHARS}, "the limit is", id="too-big"),
        pytest.param(["source", "email"], "metadata must be a dict", id="list"),
    ],
)
async def test_metadata_must_be_json(seeded: tuple[AsyncMemory, Path, str], metadata: Any, match: str) -> None:
    m, db, _ = seeded
    await rejected(db, m.add("a new note", user_id="u", metadata=metadata), match=match)
    # the same rule for a message's own metadata
    msg = {"role": "user", "content": "a new note", "metadata": metadata}
    await rejected(db, m.add([msg], user_id="u", session_id="s2"), match=match)


async def test_good_metadata_is_stored_as_plain_json(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, _, _ = seeded
    meta = {"tags": ("a", "b"), "n": 2**62, "ok": True, "none": None, "deep": nested(MAX_METADATA_DEPTH - 1)}
    [fact] = await m.add("a note with metadata", user_id="u", metadata=meta)
    assert fact.metadata["tags"] == ["a", "b"] and fact.metadata["deep"] == nested(MAX_METADATA_DEPTH - 1)
    assert (await m.get(fact.id, user_id="u")).metadata == fact.metadata
    await m.add("deepest allowed", user_id="u", metadata=nested(MAX_METADATA_DEPTH))
    with pytest.raises(InvalidInputError, match="nested more than"):
        await m.add("one level too deep", user_id="u", metadata=nested(MAX_METADATA_DEPTH + 1))


@pytest.mark.parametrize(
    "when", ["yesterday", "2024-13-01", "", 1714555800, 1714555800.0, True, ["2024-05-01"], b"2024-05-01"]
)
async def test_bad_timestamp(seeded: tuple[AsyncMemory, Path, str], when: object) -> None:
    m, db, _ = seeded
    text = await rejected(db, m.add("a new note", user_id="u", timestamp=when), match="timestamp must be")  # type: ignore[call-overload]
    assert "ISO-8601" in text


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ("2024-05-01T09:30:00Z", NOW),
        ("2024-05-01T11:30:00+02:00", NOW),
        ("2024-05-01T09:30:00", NOW),  # naive is UTC
        (datetime(2024, 5, 1, 9, 30), NOW),  # naive is UTC
        (datetime(2024, 5, 1, 4, 30, tzinfo=timezone(timedelta(hours=-5))), NOW),
        (date(2024, 5, 1), datetime(2024, 5, 1, tzinfo=UTC)),
    ],
)
async def test_timestamps_are_normalised_to_utc(
    seeded: tuple[AsyncMemory, Path, str], when: object, expected: datetime
) -> None:
    m, _, _ = seeded
    [fact] = await m.add("a dated note", user_id="u", timestamp=when)  # type: ignore[call-overload]
    assert fact.occurred_at == expected and fact.occurred_at.utcoffset() == timedelta(0)
    [msg] = await m.add([{"role": "user", "content": "a dated turn", "timestamp": when}], user_id="u", session_id="t")
    assert msg.occurred_at == expected and msg.occurred_at.utcoffset() == timedelta(0)


async def test_bad_scope_name(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, db, _ = seeded
    await rejected(db, m.add("a new note", user_id="u", scope="bogus"), match="scope must be one of 'user', 'agent'")  # type: ignore[call-overload]


@pytest.mark.parametrize("sid", [123, 1.5, b"s1", ["s1"], "", "   ", "\ud800", "s" * (MAX_ID_CHARS + 1)])
async def test_bad_session_id_is_refused_the_same_way_everywhere(
    seeded: tuple[AsyncMemory, Path, str], sid: object
) -> None:
    m, db, _ = seeded
    add_msg = await rejected(db, m.add("a new note", user_id="u", session_id=sid), ScopeError, "session_id")  # type: ignore[call-overload]
    search_msg = await rejected(db, m.search("bees", user_id="u", session_id=sid), ScopeError, "session_id")  # type: ignore[arg-type]
    list_msg = await rejected(db, m.list(user_id="u", session_id=sid), ScopeError, "session_id")  # type: ignore[arg-type]
    assert add_msg == search_msg == list_msg  # one rule, one message
    assert len(add_msg) < 200  # a huge id is not echoed back in full


@pytest.mark.parametrize("name", ["user_id", "agent_id"])
@pytest.mark.parametrize("value", [123, "", " \t", "\ud800x", "x" * (MAX_ID_CHARS + 1)])
async def test_bad_user_and_agent_ids(seeded: tuple[AsyncMemory, Path, str], name: str, value: object) -> None:
    m, db, fid = seeded
    ids = {"user_id": "u", "agent_id": "a", name: value}
    await rejected(db, m.add("a new note", **ids), ScopeError, name)
    await rejected(db, m.search("bees", **ids), ScopeError, name)
    await rejected(db, m.get(fid, **ids), ScopeError, name)
    await rejected(db, m.update(fid, "changed", **ids), ScopeError, name)
    await rejected(db, m.delete(fid, **ids), ScopeError, name)
    await rejected(db, m.stats(**ids), ScopeError, name)


async def test_ids_may_hold_any_characters_up_to_the_limit(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, _, _ = seeded
    for uid in ["x" * MAX_ID_CHARS, " padded ", "tab\tand\x1fsep", "émoji 🐝", "\x00nul"]:
        [fact] = await m.add("honey harvest notes", user_id=uid, session_id=uid)
        assert (await m.search("honey", user_id=uid, session_id=uid)).hits[0].fact.id == fact.id


async def test_empty_user_id_in_stats_is_refused_not_the_whole_database(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, db, _ = seeded
    await rejected(db, m.stats(user_id=""), ScopeError, "user_id must be a non-empty string")


@pytest.mark.parametrize("text", ["\u200b", "\u200b\u200c\u200d\u2060\ufeff", " \u200b\n", "\u3164", "\u0301\u034f"])
async def test_invisible_only_text_is_empty(seeded: tuple[AsyncMemory, Path, str], text: str) -> None:
    m, db, fid = seeded
    await rejected(db, m.add(text, user_id="u"), match="empty")
    await rejected(
        db, m.add([{"role": "user", "content": text}], user_id="u", session_id="s"), match="message 0 is empty"
    )
    await rejected(db, m.search(text, user_id="u"), match="query is empty")
    await rejected(db, m.update(fid, text, user_id="u"), match="text is empty")


async def test_visible_text_with_invisible_characters_is_kept() -> None:
    assert has_visible("a\u200b") and has_visible("🐝") and has_visible("٣") and has_visible("\ue000")
    assert not has_visible("\u200b \u2800\t")


@pytest.mark.parametrize(
    ("query", "match"),
    [
        (None, "query must be a text or a list"),
        (42, "query must be"),
        ({"q": 1}, "query must be"),
        ([], "give 1 to 3"),
        (["a", "b", "c", "d"], "give 1 to 3"),
        ([None], "query must be text"),
    ],
)
async def test_bad_query(seeded: tuple[AsyncMemory, Path, str], query: object, match: str) -> None:
    m, db, _ = seeded
    await rejected(db, m.search(query, user_id="u"), match=match)  # type: ignore[arg-type]


@pytest.mark.parametrize("top_k", ["5", 1.5, True, False, None, 0, 101, -1, [5]])
async def test_bad_top_k(seeded: tuple[AsyncMemory, Path, str], top_k: object) -> None:
    m, db, _ = seeded
    await rejected(db, m.search("bees", user_id="u", top_k=top_k), match="top_k must be")  # type: ignore[arg-type]


async def test_top_k_accepts_int_like_values(seeded: tuple[AsyncMemory, Path, str]) -> None:
    np = pytest.importorskip("numpy")
    m, _, _ = seeded
    assert len((await m.search("bees", user_id="u", top_k=np.int64(5))).hits) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("filters", "match"),
    [
        (["source", "email"], "filters must be a dict"),
        ("source=email", "filters must be a dict"),
        ({"source": ["email", "chat"]}, "single value"),
        ({"source": {"$in": ["email"]}}, "single value"),
        ({"when": NOW}, "JSON value"),
        ({1: "x"}, "keys must be non-empty strings"),
        ({"": "x"}, "keys must be non-empty strings"),
    ],
)
async def test_bad_filters(seeded: tuple[AsyncMemory, Path, str], filters: object, match: str) -> None:
    m, db, _ = seeded
    await rejected(db, m.search("bees", user_id="u", filters=filters), match=match)  # type: ignore[arg-type]


@pytest.mark.parametrize("cursor", ["9" * 23, "-" + "9" * 23, 5, b"5", "x" * (MAX_ID_CHARS + 1)])
async def test_bad_cursor(seeded: tuple[AsyncMemory, Path, str], cursor: object) -> None:
    m, db, _ = seeded
    await rejected(db, m.list(user_id="u", cursor=cursor), match="cursor")  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [0, -1, "10", 2.0, True, 10_001])
async def test_bad_list_limit(seeded: tuple[AsyncMemory, Path, str], limit: object) -> None:
    m, db, _ = seeded
    await rejected(db, m.list(user_id="u", limit=limit), match="limit must be")  # type: ignore[arg-type]


async def test_unknown_reflection_scope_raises(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, db, _ = seeded
    await rejected(db, m.reflections("bogus", user_id="u"), match="scope must be one of 'agent', 'user', 'session'")  # type: ignore[arg-type]
    await rejected(db, m.consolidated("bogus", user_id="u"), match="scope must be one of")  # type: ignore[arg-type]
    await rejected(db, m.reflections("user", user_id="u", absorbed="no"), match="absorbed must be True or False")  # type: ignore[arg-type]


@pytest.mark.parametrize(("scope", "needed"), [("user", "user_id"), ("agent", "agent_id"), ("session", "session_id")])
async def test_reflection_scope_needs_its_id(seeded: tuple[AsyncMemory, Path, str], scope: Any, needed: str) -> None:
    m, db, _ = seeded
    ids = {k: v for k, v in {"user_id": "u", "agent_id": "a", "session_id": "s1"}.items() if k != needed}
    await rejected(db, m.reflections(scope, **ids), ScopeError, needed)
    await rejected(db, m.consolidated(scope, **ids), ScopeError, needed)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"status": "bogus"}, "status must be one of 'queued', 'running', 'done', 'failed'"),
        ({"status": 1}, "status must be one of"),
        ({"limit": -1}, "limit must be from 1"),
        ({"limit": 0}, "limit must be"),
        ({"limit": "5"}, "limit must be"),
    ],
)
async def test_bad_list_jobs_arguments_raise(
    seeded: tuple[AsyncMemory, Path, str], kwargs: dict[str, Any], match: str
) -> None:
    m, db, _ = seeded
    await rejected(db, m.list_jobs(**kwargs), match=match)


async def test_bad_fact_and_job_ids(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, db, _ = seeded
    for bad in [None, 7, "", "f" * (MAX_ID_CHARS + 1)]:
        await rejected(db, m.get(bad, user_id="u"), match="fact_id")  # type: ignore[arg-type]
        await rejected(db, m.history(bad, user_id="u"), match="fact_id")  # type: ignore[arg-type]
        await rejected(db, m.get_job(bad), match="job_id")  # type: ignore[arg-type]
        await rejected(db, m.retry_job(bad), match="job_id")  # type: ignore[arg-type]
        await rejected(db, m.forget(bad), ScopeError, "user_id")  # type: ignore[arg-type]


async def test_bad_profile_arguments(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, db, _ = seeded
    await rejected(db, m.profile("u", items="a task"), match="items must be a list")  # type: ignore[arg-type]
    await rejected(db, m.profile("u", items=[None]), match=r"items\[0\] must be text")  # type: ignore[list-item]
    await rejected(db, m.profile("u", tier="gold"), match="tier must be")  # type: ignore[arg-type]
    await rejected(db, m.profile(None), ScopeError, "user_id is required")  # type: ignore[arg-type]


async def test_bad_flags(seeded: tuple[AsyncMemory, Path, str]) -> None:
    m, db, _ = seeded
    await rejected(db, m.add("a new note", user_id="u", infer="yes"), match="infer must be True or False")  # type: ignore[call-overload]
    await rejected(db, m.search("bees", user_id="u", debug=1), match="debug must be True or False")  # type: ignore[arg-type]
    await rejected(db, m.list(user_id="u", include_invalid=None), match="include_invalid")  # type: ignore[arg-type]


def test_sync_facade_raises_the_same_typed_errors(tmp_path: Path) -> None:
    with Memory(tmp_path / "sync.db", embedder="hash:64", sessions="sqlite", llm="offline") as m:
        m.add("Sam keeps bees", user_id="u")
        with pytest.raises(InvalidInputError, match="top_k must be"):
            m.search("bees", user_id="u", top_k="5")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="JSON value"):
            m.add("x", user_id="u", metadata={"when": NOW})
        with pytest.raises(InvalidInputError, match="status must be one of"):
            m.list_jobs(status="bogus")
        assert m.list(user_id="u").total == 1


# --------------------------------------------------------------------------- property test

TRICKY_STRINGS = [
    "",
    " ",
    "\t\n",
    "\u200b",
    "\u200b\u200d\ufeff",
    "\ud800",
    "bogus",
    "yesterday",
    "-1",
    "5",
    "9" * 23,
    "x" * 40_000,
    "u",
    "s1",
    "user",
    "agent",
    "session",
    "done",
]
BAD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=8),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), max_size=4),
    st.dictionaries(
        st.one_of(st.text(max_size=3), st.integers()), st.one_of(st.integers(), st.text(max_size=3)), max_size=3
    ),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=2), max_size=2),
    st.datetimes(min_value=datetime(1, 1, 1), timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=14))])),
    st.dates(),
    st.decimals(allow_nan=False),
    st.sampled_from(TRICKY_STRINGS),
    st.text(max_size=12),
    st.just(nested(200)),
    st.just({"when": NOW, "tags": {1, 2}}),
    st.just(object()),
)

#: Each public method with valid arguments; the property test replaces some of them.
Call = tuple[str, tuple[str, ...], dict[str, Any]]
METHODS: dict[str, dict[str, Any]] = {
    "add": {
        "messages": "Sam waters the roses",
        "user_id": "u",
        "agent_id": None,
        "session_id": "s1",
        "metadata": {"source": "chat"},
        "infer": False,
        "scope": "user",
        "timestamp": NOW,
        "wait": True,
    },
    "search": {
        "query": "roses",
        "user_id": "u",
        "agent_id": None,
        "session_id": None,
        "top_k": 5,
        "filters": None,
        "debug": False,
    },
    "get": {"fact_id": "FACT", "user_id": "u", "agent_id": None},
    "list": {
        "user_id": "u",
        "agent_id": None,
        "session_id": None,
        "limit": 10,
        "cursor": None,
        "include_invalid": False,
    },
    "update": {"fact_id": "FACT", "text": "Sam waters the tulips", "user_id": "u", "agent_id": None},
    "delete": {"fact_id": "FACT", "user_id": "u", "agent_id": None},
    "history": {"fact_id": "FACT", "user_id": "u", "agent_id": None},
    "forget": {"user_id": "nobody", "shared": "erase"},
    "reflections": {"scope": "user", "user_id": "u", "agent_id": None, "session_id": None, "absorbed": None},
    "consolidated": {"scope": "user", "user_id": "u", "agent_id": None, "session_id": None},
    "list_jobs": {"status": None, "limit": 10},
    "profile": {"user_id": "u", "agent_id": None, "items": (), "tier": 0},
    "stats": {"user_id": "u", "agent_id": None},
    "get_consolidation_status": {"user_id": "u", "agent_id": None, "session_id": None},
    "get_memory_stats": {"user_id": "u", "agent_id": None, "session_id": None},
    "get_job": {"job_id": "nojob"},
    "summaries": {"user_id": "u", "agent_id": None, "since": None, "until": None, "limit": 10},
    "timeline": {"user_id": "u", "agent_id": None, "limit": 10, "before": None},
    "growth": {"user_id": "u", "bucket": "day", "agent_id": None},
    "consolidated_history": {"scope": "user", "user_id": "u", "agent_id": None, "session_id": None, "limit": 10},
    "consolidate": {"scope": "user", "user_id": "u", "agent_id": None, "session_id": None, "wait": False},
}
POSITIONAL = {
    "add": 1,
    "search": 1,
    "get": 1,
    "update": 2,
    "delete": 1,
    "history": 1,
    "forget": 1,
    "reflections": 1,
    "consolidated": 1,
    "profile": 1,
    "get_job": 1,
    "summaries": 1,
    "timeline": 1,
    "growth": 1,
    "consolidated_history": 1,
    "consolidate": 1,
}


@st.composite
def bad_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    method = draw(st.sampled_from(sorted(METHODS)))
    args = dict(METHODS[method])
    names = draw(st.lists(st.sampled_from(sorted(args)), min_size=1, max_size=3, unique=True))
    for name in names:
        args[name] = draw(BAD)
    return method, args


def _invoke(m: AsyncMemory, method: str, args: dict[str, Any], fact_id: str) -> Awaitable[object]:
    values = [fact_id if v == "FACT" and isinstance(v, str) else v for v in args.values()]
    n = POSITIONAL.get(method, 0)
    kwargs = dict(zip(list(args)[n:], values[n:], strict=True))
    fn: Callable[..., Awaitable[object]] = getattr(m, method)
    return fn(*values[:n], **kwargs)


def test_only_typed_errors_escape_and_rejections_change_nothing(tmp_path: Path) -> None:
    db = tmp_path / "prop.db"
    seen: dict[str, int] = {}
    with asyncio.Runner() as runner, contextlib.ExitStack() as cleanup:
        stack = contextlib.AsyncExitStack()
        # no background formation worker: an accepted consolidate(wait=False) of an earlier example
        # would otherwise run its job during a later call and look like that call's change
        m = runner.run(
            stack.enter_async_context(
                AsyncMemory(
                    db,
                    embedder="hash:64",
                    sessions="sqlite",
                    llm="offline",
                    formation=FormationConfig(background=False),
                )
            )
        )
        cleanup.callback(lambda: runner.run(stack.aclose()))
        [fact] = runner.run(m.add("Sam waters the roses", user_id="u", session_id="s1"))

        @settings(
            max_examples=300,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(bad_calls())
        def check(call: tuple[str, dict[str, Any]]) -> None:
            method, args = call
            # an earlier example's search leaves access counts to write in the background:
            # write them now, or they land during this call and look like its change
            runner.run(m.facts.settle_access())
            before = snapshot(db)
            try:
                runner.run(_invoke(m, method, args, fact.id))
            except MemlaneError:
                seen[method] = seen.get(method, 0) + 1
                if snapshot(db) != before:
                    raise AssertionError(f"{method}({args!r}) was rejected but changed the database") from None
            except BaseException as exc:
                raise AssertionError(f"{method}({args!r}) raised {type(exc).__name__}: {exc}") from exc

        check()
    assert len(seen) >= 12, f"too few methods rejected anything: {seen}"


@pytest.mark.parametrize("when", [datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), "9999-12-31T23:00:00-05:00"])
async def test_timestamp_that_leaves_the_calendar_in_utc(seeded: tuple[AsyncMemory, Path, str], when: object) -> None:
    m, db, _ = seeded
    await rejected(db, m.add("a new note", user_id="u", timestamp=when), match="out of range in UTC")  # type: ignore[call-overload]
