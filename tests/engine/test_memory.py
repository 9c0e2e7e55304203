"""The engine end to end on a real SQLite file: add, search, update, delete, history,
forget, idempotency and the keyword index's neighbouring-turn context."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memlane import (
    AsyncMemory,
    DimensionMismatchError,
    Event,
    EventType,
    NotFoundError,
    RetrievalConfig,
    ScopeError,
)


async def test_add_text_and_search_finds_it(mem: AsyncMemory) -> None:
    [fact] = await mem.add("Alice's email is alice@example.com", user_id="alice")
    assert fact.kind == "fact" and fact.user_id == "alice" and fact.version == 1
    res = await mem.search("what is the email address", user_id="alice")
    assert res.hits[0].fact.id == fact.id
    assert res.hits[0].keyword_rank == 1


async def test_messages_keep_author_time_and_order(mem: AsyncMemory) -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    facts = await mem.add(
        [
            {"role": "user", "content": "I adopted a dog named Rex", "timestamp": when},
            {"role": "assistant", "content": "Congratulations! What breed?"},
            Event(type=EventType.USER_MESSAGE, author="user", content="A beagle", timestamp=when),
        ],
        user_id="u",
        session_id="s1",
    )
    assert [f.seq for f in facts] == [0, 1, 2]
    assert [f.author for f in facts] == ["user", "assistant", "user"]
    assert facts[0].occurred_at == when and facts[0].kind == "message"
    assert facts[2].source_event_ids  # provenance: the event id
    more = await mem.add([{"role": "user", "content": "He is two years old"}], user_id="u", session_id="s1")
    assert more[0].seq == 3


async def test_neighbouring_turns_make_answers_findable(mem: AsyncMemory) -> None:
    """The answer turn shares no word with the question; its neighbour does."""
    await mem.add(
        [
            {"role": "Bob", "content": "What breed is your new puppy?"},
            {"role": "Ann", "content": "A beagle, adopted last week from the shelter"},
            {"role": "Bob", "content": "Lovely"},
        ],
        user_id="ann",
        session_id="s",
    )
    await mem.add("The weather was rainy", user_id="ann")
    mem.retrieval = RetrievalConfig(vector_weight=0)
    res = await mem.search("which puppy breed", user_id="ann")
    contents = [h.fact.content for h in res.hits]
    assert "A beagle, adopted last week from the shelter" in contents
    assert "The weather was rainy" not in contents


async def test_re_adding_is_idempotent(mem: AsyncMemory, db_path: Path) -> None:
    msgs = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    a = await mem.add(msgs, user_id="u", session_id="s")
    b = await mem.add(msgs, user_id="u", session_id="s")
    assert [f.id for f in a] == [f.id for f in b]
    x = await mem.add("Paris is the capital of France", user_id="u")
    y = await mem.add("  Paris is the capital   of France ", user_id="u")
    assert x[0].id == y[0].id
    assert (await mem.list(user_id="u")).total == 3
    # the same text for another user is a separate memory
    z = await mem.add("Paris is the capital of France", user_id="v")
    assert z[0].id != x[0].id


async def test_repeated_turn_at_other_time_is_kept(mem: AsyncMemory) -> None:
    t1, t2 = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)
    await mem.add([{"role": "user", "content": "thanks!", "timestamp": t1}], user_id="u", session_id="s")
    await mem.add([{"role": "user", "content": "thanks!", "timestamp": t2}], user_id="u", session_id="s")
    assert (await mem.list(user_id="u")).total == 2


async def test_update_delete_history(mem: AsyncMemory) -> None:
    [f] = await mem.add("Bob lives in Berlin", user_id="bob")
    up = await mem.update(f.id, "Bob lives in Munich", user_id="bob")
    assert up.version == 2 and up.content == "Bob lives in Munich"
    assert (await mem.search("Munich", user_id="bob")).hits[0].fact.id == f.id
    # the old text is no longer searchable: "Berlin" finds only what the fact says now (or nothing)
    berlin = [h.fact.content for h in (await mem.search("Berlin", user_id="bob", top_k=5)).hits]
    assert berlin in ([], ["Bob lives in Munich"]), berlin
    gone = await mem.delete(f.id, user_id="bob")
    assert gone.invalid_at is not None
    assert (await mem.search("Munich", user_id="bob")).hits == []
    assert (await mem.get(f.id, user_id="bob")).invalid_at is not None  # kept, invalidated
    assert (await mem.list(user_id="bob")).total == 0
    assert (await mem.list(user_id="bob", include_invalid=True)).total == 1
    hist = await mem.history(f.id, user_id="bob")
    assert [h.event for h in hist] == ["ADD", "UPDATE", "DELETE"]
    assert hist[1].old_content == "Bob lives in Berlin" and hist[1].new_content == "Bob lives in Munich"
    # after deletion the same fact can be stored again
    [again] = await mem.add("Bob lives in Berlin", user_id="bob")
    assert again.id != f.id


async def test_access_count_increments_on_retrieval(mem: AsyncMemory) -> None:
    [f] = await mem.add("The launch code is 1234", user_id="u")
    await mem.search("launch code", user_id="u")
    await mem.search("launch code", user_id="u")
    assert (await mem.get(f.id, user_id="u")).access_count == 2


async def test_multi_query_merges_and_limits(mem: AsyncMemory) -> None:
    await mem.add("Carol plays the cello", user_id="c")
    await mem.add("Carol's birthday is March 3", user_id="c")
    res = await mem.search(["cello", "birthday"], user_id="c")
    assert {h.fact.content for h in res.hits} == {"Carol plays the cello", "Carol's birthday is March 3"}
    with pytest.raises(ValueError, match="1 to 3"):
        await mem.search(["a", "b", "c", "d"], user_id="c")


async def test_debug_mode_reports_stages(mem: AsyncMemory) -> None:
    await mem.add("Dana drives a red Volvo", user_id="d")
    res = await mem.search("which car: a red Volvo?", user_id="d", debug=True)
    assert res.debug is not None
    assert {"keyword_ms", "vector_ms", "total_ms"} <= set(res.debug["timings"])
    assert res.debug["vectors_used"] is True
    assert res.hits[0].vector_score is not None


async def test_unrelated_vector_neighbours_are_not_returned(mem: AsyncMemory) -> None:
    """With no keyword match, only vectors above ``min_vector_score`` may fill the results."""
    await mem.add("Omar repaired the kitchen sink", user_id="o")
    assert (await mem.search("quantum chromodynamics lecture", user_id="o")).hits == []
    # no cosine floor: still nothing, a cosine at or under vector_floor is no evidence (issue 17)
    mem.retrieval = RetrievalConfig(min_vector_score=None)
    assert (await mem.search("quantum chromodynamics lecture", user_id="o")).hits == []
    mem.retrieval = RetrievalConfig(min_vector_score=None, vector_floor=-1.0)  # every cosine counts
    assert len((await mem.search("quantum chromodynamics lecture", user_id="o")).hits) == 1


async def test_filters(mem: AsyncMemory) -> None:
    await mem.add("Eve likes jazz", user_id="e", metadata={"source": "chat"})
    await mem.add("Eve likes jazz clubs in Paris", user_id="e", metadata={"source": "email"})
    res = await mem.search("jazz", user_id="e", filters={"source": "email"})
    assert [h.fact.metadata["source"] for h in res.hits] == ["email"]


async def test_agent_scope_is_shared_user_scope_is_not(mem: AsyncMemory) -> None:
    await mem.add("The office wifi password is tulip 42", agent_id="bot", scope="agent")
    await mem.add("Frank's password hint is tulip", user_id="frank", agent_id="bot")
    r1 = await mem.search("tulip", user_id="grace", agent_id="bot")
    assert [h.fact.content for h in r1.hits] == ["The office wifi password is tulip 42"]
    r2 = await mem.search("tulip", user_id="frank", agent_id="bot")
    assert len(r2.hits) == 2
    # user_id alone: all of the user's own memories (every agent), never an agent's shared ones
    assert [h.fact.content for h in (await mem.search("tulip", user_id="frank")).hits] == [
        "Frank's password hint is tulip"
    ]
    assert (await mem.list(user_id="frank")).total == 1
    # agent_id narrows: another agent's namespace sees none of it
    assert (await mem.search("tulip", user_id="frank", agent_id="other")).hits == []


async def test_agent_session_forms_under_its_agent(tmp_path: Path, open_memory: Callable[..., AsyncMemory]) -> None:
    """create_session(agent_id=X) and add_event(app=X) form memories under X alike."""
    from memlane import Event, EventType

    async with open_memory(tmp_path / "ns.db", embedder="hash", llm="offline") as m:
        await m.sessions.create_session(user_ids=["sam"], agent_id="chef", session_id="s1")
        await m.sessions.create_session(app="chef", user_ids=["sam"], session_id="s2")
        for sid, app, text in (("s1", "default", "I'm vegetarian."), ("s2", "chef", "I live in Lisbon.")):
            await m.add_event(sid, Event(type=EventType.USER_MESSAGE, author="Sam", content=text), app=app)
            await m.add_event(sid, Event(type=EventType.AGENT_RESPONSE, author="chef", content="Noted!"), app=app)
            await m.end_session(sid, app=app)
        facts = (await m.list(user_id="sam", agent_id="chef")).items
        assert {f.agent_id for f in facts} == {"chef"} and len(facts) >= 2
        assert (await m.list(user_id="sam", agent_id="other")).total == 0


async def test_get_outside_scope_is_not_found(mem: AsyncMemory) -> None:
    [f] = await mem.add("secret of alice", user_id="alice")
    with pytest.raises(NotFoundError):
        await mem.get(f.id, user_id="mallory")
    with pytest.raises(NotFoundError):
        await mem.update(f.id, "pwned", user_id="mallory")
    with pytest.raises(NotFoundError):
        await mem.delete(f.id, user_id="mallory")
    with pytest.raises(NotFoundError):
        await mem.history(f.id, user_id="mallory")
    assert (await mem.get(f.id, user_id="alice")).content == "secret of alice"


async def test_queries_without_scope_are_errors(mem: AsyncMemory) -> None:
    with pytest.raises(ScopeError):
        await mem.search("anything")
    with pytest.raises(ScopeError):
        await mem.list()
    with pytest.raises(ScopeError):
        await mem.add("x")
    with pytest.raises(ScopeError):
        await mem.add("x", user_id="u", scope="agent")


async def test_infer_extracts_with_the_offline_model_by_default(mem: AsyncMemory) -> None:
    facts = await mem.add("I am vegan", user_id="sam", infer=True)
    assert [f.content for f in facts] == ["Sam is vegan"]  # rewritten to stand alone, not stored verbatim
    assert (await mem.list(user_id="sam")).total == 1
    assert await mem.add("hello there", user_id="sam", infer=True) == []  # nothing durable: nothing stored


async def test_list_pagination(mem: AsyncMemory) -> None:
    for i in range(7):
        await mem.add(f"fact number {i}", user_id="p")
    seen = []
    cursor = None
    while True:
        page = await mem.list(user_id="p", limit=3, cursor=cursor)
        assert page.total == 7
        seen += [f.content for f in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"fact number {i}" for i in reversed(range(7))]


async def test_forget_purges_everything_of_the_user(mem: AsyncMemory, db_path: Path) -> None:
    await mem.add("zebra-secret of alice", user_id="alice")
    [f] = await mem.add([{"role": "user", "content": "alice's zebra-diary"}], user_id="alice", session_id="s")
    await mem.update(f.id, "alice's zebra-diary v2", user_id="alice")
    await mem.add("bob keeps his zebra-note", user_id="bob")
    s = await mem.sessions.create_session(user_ids=["alice"], session_id="alice:cli")
    await mem.sessions.create_session(app="other-app", user_ids=["alice"], session_id="alice:tg")
    await mem.sessions.create_session(user_ids=["alice", "bob"], session_id="group")
    await mem.sessions.add_event(s.id, Event(content="zebra-chat of alice"))
    removed = await mem.forget("alice")
    assert removed >= 4
    assert (await mem.list(user_id="alice", include_invalid=True)).total == 0
    assert await mem.sessions.get_session("alice:cli") is None
    assert await mem.sessions.get_session("alice:tg", app="other-app") is None  # every app
    assert await mem.sessions.get_session("group") is not None  # a group session is not alice's alone
    assert (await mem.list(user_id="bob")).total == 1
    # verified at the file level: no row anywhere still holds alice's text
    await mem.close()
    con = sqlite3.connect(db_path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            for row in con.execute(f'SELECT * FROM "{t}"'):
                if "group" in row:  # the shared group session still names alice as a participant
                    continue
                assert not any(isinstance(v, str) and "alice" in v for v in row), (t, row)
    finally:
        con.close()


async def test_keyword_only_without_embedder(db_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with AsyncMemory(db_path, embedder=None, sessions="local") as m:
        await m.add("Ivy collects stamps", user_id="i")
        res = await m.search("stamps", user_id="i", debug=True)
        assert res.hits[0].fact.content == "Ivy collects stamps"
        assert res.debug is not None and res.debug["vectors_used"] is False


async def test_auto_without_model_warns_once(db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import memlane.registry as reg

    monkeypatch.setattr(reg, "local_model_available", lambda: False)
    with caplog.at_level("WARNING", logger="memlane"):
        async with AsyncMemory(db_path, embedder="auto", sessions="null") as m:
            assert m.embedder is None
    warnings = [r for r in caplog.records if "keyword-only" in r.getMessage()]
    assert len(warnings) == 1


async def test_reopen_resumes_facts_and_vectors(db_path: Path, open_memory: Callable[..., AsyncMemory]) -> None:
    async with open_memory(db_path, embedder="hash", sessions="sqlite") as m:
        await m.add("Jack's locker is number 42", user_id="j")
    async with open_memory(db_path, embedder="hash", sessions="sqlite") as m:
        res = await m.search("locker", user_id="j", debug=True)
        assert res.hits[0].vector_rank == 1 and res.hits[0].keyword_rank == 1


async def test_vector_cache_sees_writes_of_another_instance(
    db_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    """Two engines on one file (like two processes): the vector cache follows the other's writes."""
    async with (
        open_memory(db_path, embedder="hash", sessions="local") as a,
        open_memory(db_path, embedder="hash", sessions="local") as b,
    ):
        await a.add("kiwi fruit note", user_id="k")
        mem_vec = RetrievalConfig(keyword_weight=0, vector_weight=1)
        b.retrieval = mem_vec
        assert len((await b.search("kiwi fruit note", user_id="k")).hits) == 1
        [f] = await a.add("mango fruit note", user_id="k")
        assert len((await b.search("kiwi fruit note", user_id="k")).hits) == 2
        await a.delete(f.id, user_id="k")
        assert len((await b.search("kiwi fruit note", user_id="k")).hits) == 1


async def test_score_fusion_mode(mem: AsyncMemory) -> None:
    await mem.add("Lena's violin teacher is Mr. Ortiz", user_id="l")
    await mem.add("Lena bought a new bicycle", user_id="l")
    mem.retrieval = RetrievalConfig(fusion="score", vector_weight=0.2, min_vector_score=None)
    res = await mem.search("who teaches violin", user_id="l")
    assert res.hits[0].fact.content == "Lena's violin teacher is Mr. Ortiz"
    top = res.hits[0]
    assert top.keyword_rank == 1 and top.vector_score is not None
    assert top.score == pytest.approx(1.0 + 0.2 * top.vector_score)


async def test_embedder_that_learns_its_dimension_on_first_call(
    db_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    """An OpenAI-compatible server with an unknown model reports dim 0 until it answers."""
    from memlane.providers.embed.hashing import HashEmbedder

    class Discovering(HashEmbedder):
        def __init__(self) -> None:
            super().__init__(96)
            self.dim = 0

        async def embed_batch(self, texts: list[str]):  # type: ignore[no-untyped-def]
            self.dim = 96
            return await super().embed_batch(texts)

    async with open_memory(db_path, embedder=Discovering(), sessions="null") as m:
        assert m.facts.dim is None
        await m.add("Pia's bike is green", user_id="p")
        assert m.facts.dim == 96
        res = await m.search("green bike", user_id="p", debug=True)
        assert res.hits[0].vector_rank == 1
    with pytest.raises(DimensionMismatchError):
        await open_memory(db_path, embedder="hash:64", sessions="null").open()


async def test_filters_are_applied_in_the_store_not_after_fusion(mem: AsyncMemory) -> None:
    """100 chat notes plus one e-mail memory: the filter finds it (it was cut by the over-fetch)."""
    await mem.add(
        [{"role": "user", "content": f"chat note {i} about the email thread"} for i in range(100)],
        user_id="u",
        session_id="chat",
        metadata={"source": "chat"},
    )
    await mem.add("forwarded email about the thread", user_id="u", metadata={"source": "email"})
    res = await mem.search("email thread", user_id="u", top_k=3, filters={"source": "email"})
    assert [h.fact.content for h in res.hits] == ["forwarded email about the thread"]
    res = await mem.search("email thread", user_id="u", top_k=5, filters={"kind": "message", "source": "chat"})
    assert len(res.hits) == 5 and all(h.fact.metadata["source"] == "chat" for h in res.hits)
    assert (await mem.search("email", user_id="u", filters={"source": "sms"})).hits == []


async def test_agent_memory_does_not_show_its_contributor_to_others(mem: AsyncMemory) -> None:
    [f] = await mem.add("The club meets on Fridays", user_id="ann", agent_id="club", scope="agent")
    assert f.user_id == "ann"
    for reader in ("bob", None):
        kw = {"user_id": reader} if reader else {}
        hit = (await mem.search("club meets", agent_id="club", **kw)).hits[0].fact
        assert hit.id == f.id and hit.user_id is None
        assert (await mem.get(f.id, agent_id="club", **kw)).user_id is None
        assert [x.user_id for x in (await mem.list(agent_id="club", **kw)).items] == [None]
    assert (await mem.get(f.id, user_id="ann", agent_id="club")).user_id == "ann"


async def test_session_and_scope_filters_narrow_the_search(mem: AsyncMemory) -> None:
    await mem.add([{"role": "user", "content": "kiwi in session a"}], user_id="u", agent_id="bot", session_id="a")
    await mem.add([{"role": "user", "content": "kiwi in session b"}], user_id="u", agent_id="bot", session_id="b")
    await mem.add("kiwi rule of the bot", agent_id="bot", scope="agent")
    res = await mem.search("kiwi", user_id="u", agent_id="bot", session_id="a")
    assert [h.fact.content for h in res.hits] == ["kiwi in session a"]
    assert (
        await mem.search("kiwi", user_id="u", agent_id="bot", session_id="a", filters={"session_id": "b"})
    ).hits == []
    agent_only = await mem.search("kiwi", user_id="u", agent_id="bot", filters={"scope": "agent"})
    assert [h.fact.content for h in agent_only.hits] == ["kiwi rule of the bot"]
    user_only = await mem.search("kiwi", user_id="u", agent_id="bot", filters={"scope": "user"})
    assert sorted(h.fact.content for h in user_only.hits) == ["kiwi in session a", "kiwi in session b"]
