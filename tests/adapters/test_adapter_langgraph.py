"""MemlaneStore: LangGraph's BaseStore over memlane, with the real ``langgraph`` package.

A compiled StateGraph recalls across threads; the op-level behaviours are run side by side
against LangGraph's own InMemoryStore; users are isolated; items survive a reopen."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import memlane.adapters.langgraph as lg
from memlane import AsyncMemory, Memory
from memlane.adapters.langgraph import MemlaneStore
from memlane.errors import ConfigError, InvalidInputError, ScopeError, UsageError


@pytest.fixture
def memory(db_path: Path) -> Iterator[Memory]:
    m = Memory(db_path, embedder="hash")
    try:
        yield m
    finally:
        m.close()


@pytest.fixture
def store(memory: Memory) -> MemlaneStore:
    return MemlaneStore(memory)


# --------------------------------------------------------------------------- a real graph


class State(TypedDict, total=False):
    text: str
    recalled: list[str]


def _builder(node: Callable[..., Any]) -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node("memory", node)
    builder.add_edge(START, "memory")
    builder.add_edge("memory", END)
    return builder


def _cfg(thread: str, user: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "user_id": user}}


def remember_or_recall(state: State, config: RunnableConfig, *, store: BaseStore) -> State:
    """A node: "remember: ..." stores a memory for the user; anything else recalls."""
    ns = (config["configurable"]["user_id"], "memories")
    text = state["text"]
    if text.startswith("remember: "):
        store.put(ns, uuid.uuid4().hex, {"text": text.removeprefix("remember: ")})
        return {"recalled": []}
    return {"recalled": [item.value["text"] for item in store.search(ns, query=text, limit=3)]}


async def aremember_or_recall(state: State, config: RunnableConfig, *, store: BaseStore) -> State:
    ns = (config["configurable"]["user_id"], "memories")
    text = state["text"]
    if text.startswith("remember: "):
        await store.aput(ns, uuid.uuid4().hex, {"text": text.removeprefix("remember: ")})
        return {"recalled": []}
    return {"recalled": [item.value["text"] for item in await store.asearch(ns, query=text, limit=3)]}


def test_graph_recalls_across_threads_and_not_across_users(store: MemlaneStore) -> None:
    graph = _builder(remember_or_recall).compile(store=store, checkpointer=InMemorySaver())
    graph.invoke({"text": "remember: I am allergic to peanuts"}, _cfg("thread-1", "alice"))
    graph.invoke({"text": "remember: my sister lives in Lisbon"}, _cfg("thread-1", "alice"))

    out = graph.invoke({"text": "what am I allergic to?"}, _cfg("thread-2", "alice"))
    assert out["recalled"][0] == "I am allergic to peanuts"
    # thread 2's checkpoint is its own: the recall came from the store, not from thread 1's state
    assert graph.get_state(_cfg("thread-2", "alice")).values["text"] == "what am I allergic to?"
    assert graph.get_state(_cfg("thread-1", "alice")).values["text"] == "remember: my sister lives in Lisbon"

    assert graph.invoke({"text": "what am I allergic to?"}, _cfg("thread-3", "bob"))["recalled"] == []


async def test_async_graph_recalls_across_threads(db_path: Path) -> None:
    async with AsyncMemory(db_path, embedder="hash") as m:
        graph = _builder(aremember_or_recall).compile(store=MemlaneStore(m), checkpointer=InMemorySaver())
        await graph.ainvoke({"text": "remember: I am allergic to peanuts"}, _cfg("t1", "alice"))
        out = await graph.ainvoke({"text": "what am I allergic to?"}, _cfg("t2", "alice"))
        assert out["recalled"] == ["I am allergic to peanuts"]
        assert (await graph.ainvoke({"text": "peanuts"}, _cfg("t3", "bob")))["recalled"] == []


async def test_sync_node_in_an_async_graph_over_an_async_memory(db_path: Path) -> None:
    """LangGraph runs sync nodes on worker threads under ainvoke: the store hands their calls
    to the memory's event loop."""
    async with AsyncMemory(db_path, embedder="hash") as m:
        graph = _builder(remember_or_recall).compile(store=MemlaneStore(m), checkpointer=InMemorySaver())
        await graph.ainvoke({"text": "remember: I am allergic to peanuts"}, _cfg("t1", "alice"))
        out = await graph.ainvoke({"text": "what am I allergic to?"}, _cfg("t2", "alice"))
        assert out["recalled"] == ["I am allergic to peanuts"]


async def test_sync_call_on_the_loop_of_an_async_memory_is_a_usage_error(db_path: Path) -> None:
    async with AsyncMemory(db_path, embedder="hash") as m:
        with pytest.raises(UsageError, match="async methods"):
            MemlaneStore(m).put(("alice", "m"), "k", {"a": 1})


# --------------------------------------------------------------------------- side by side with InMemoryStore


def _rows(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(i.namespace, i.key, i.value) for i in items]


def _scenario(s: BaseStore) -> list[Any]:
    """Every op kind; returns what each read gave, as comparable data."""
    out: list[Any] = []
    s.put(("u1", "mem"), "a", {"text": "likes tea", "n": 1, "tags": ["x", "y"], "who": {"name": "ann"}})
    s.put(("u1", "mem"), "b", {"text": "likes coffee", "n": 5, "tags": ["y"]})
    s.put(("u1", "mem"), "c", {"text": "has a cat", "n": 3}, index=False)
    s.put(("u1", "mem", "deep"), "d", {"text": "deep note", "n": 9})
    s.put(("u1", "prefs"), "e", {"text": "dark theme", "n": 2})
    out.append(s.get(("u1", "mem"), "a").value)  # type: ignore[union-attr]
    out.append(s.get(("u1", "mem"), "missing"))
    s.put(("u1", "mem"), "a", {"text": "likes green tea", "n": 2})  # update: same key, no duplicate
    out.append(_rows(s.search(("u1",))))
    out.append(_rows(s.search(("u1", "mem"))))
    out.append(_rows(s.search(("u1", "mem", "deep"))))
    out.append(_rows(s.search(("u1",), filter={"n": {"$gt": 2}})))
    out.append(_rows(s.search(("u1",), filter={"n": {"$gte": 2, "$lt": 5}})))
    out.append(_rows(s.search(("u1",), filter={"n": {"$ne": 5}})))
    out.append(_rows(s.search(("u1",), filter={"text": "has a cat"})))
    out.append(_rows(s.search(("u1",), filter={"tags": ["y"]})))
    out.append(_rows(s.search(("u1",), filter={"n": 2, "text": "dark theme"})))
    out.append(_rows(s.search(("u1",), limit=2)))
    out.append(_rows(s.search(("u1",), limit=2, offset=2)))
    out.append(_rows(s.search(("u1",), offset=10)))
    out.append(sorted(_rows(s.search(("u1",), query="tea", limit=10))))  # ranking differs; the set must not
    out.append(s.list_namespaces(prefix=("u1",)))
    out.append(s.list_namespaces(prefix=("u1",), max_depth=2))
    out.append(s.list_namespaces(prefix=("u1", "*")))
    out.append(s.list_namespaces(prefix=("u1",), suffix=("deep",)))
    out.append(s.list_namespaces(prefix=("u1",), suffix=("*", "mem")))
    out.append(s.list_namespaces(prefix=("u1",), limit=1, offset=1))
    # (after the listings: InMemoryStore lists a namespace once anything read from it)
    out.append(s.get(("u1", "other"), "a"))
    s.delete(("u1", "mem"), "b")
    out.append(s.get(("u1", "mem"), "b"))
    out.append(_rows(s.search(("u1", "mem"))))
    s.delete(("u1", "mem"), "never-there")
    # a batch: reads see the state before it; of two writes to one key the last wins
    out.append(
        [
            r.value if isinstance(r, Item) else _rows(r) if r and isinstance(r[0], Item) else r
            for r in s.batch(
                [
                    PutOp(("u1", "mem"), "f", {"v": 1}),
                    GetOp(("u1", "mem"), "f"),
                    PutOp(("u1", "mem"), "f", {"v": 2}),
                    PutOp(("u1", "mem"), "c", None),
                    SearchOp(("u1", "prefs")),
                    ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("u1", "prefs")),)),
                ]
            )
        ]
    )
    out.append(s.get(("u1", "mem"), "f").value)  # type: ignore[union-attr]
    out.append(s.get(("u1", "mem"), "c"))
    out.append(_rows(s.search(("u1", "mem"))))
    return out


def test_same_results_as_langgraphs_in_memory_store(store: MemlaneStore) -> None:
    expected, got = _scenario(InMemoryStore()), _scenario(store)
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"step {i}"
    assert got[2] == [
        (("u1", "mem"), "a", {"text": "likes green tea", "n": 2}),
        (("u1", "mem"), "b", {"text": "likes coffee", "n": 5, "tags": ["y"]}),
        (("u1", "mem"), "c", {"text": "has a cat", "n": 3}),
        (("u1", "mem", "deep"), "d", {"text": "deep note", "n": 9}),
        (("u1", "prefs"), "e", {"text": "dark theme", "n": 2}),
    ]


async def test_async_ops_match_the_sync_ones(db_path: Path) -> None:
    async with AsyncMemory(db_path, embedder="hash") as m:
        s = MemlaneStore(m)
        await s.aput(("u1", "mem"), "a", {"text": "likes tea"})
        await s.aput(("u1", "mem"), "a", {"text": "likes green tea"})
        item = await s.aget(("u1", "mem"), "a")
        assert item is not None and item.value == {"text": "likes green tea"}
        assert _rows(await s.asearch(("u1",), query="green tea")) == [(("u1", "mem"), "a", {"text": "likes green tea"})]
        assert await s.alist_namespaces(prefix=("u1",)) == [("u1", "mem")]
        await s.adelete(("u1", "mem"), "a")
        assert await s.aget(("u1", "mem"), "a") is None
        assert await s.asearch(("u1",)) == []


def test_update_keeps_created_at_and_moves_updated_at(store: MemlaneStore, memory: Memory) -> None:
    store.put(("alice", "mem"), "k", {"text": "v1"})
    first = store.get(("alice", "mem"), "k")
    assert first is not None and first.created_at == first.updated_at
    assert first.created_at.tzinfo is not None
    assert abs((datetime.now(UTC) - first.created_at).total_seconds()) < 600
    store.put(("alice", "mem"), "k", {"text": "v2"})
    second = store.get(("alice", "mem"), "k")
    assert second is not None and second.value == {"text": "v2"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    # one memory per key in memlane too: the old one is deleted, not left searchable
    valid = [f for f in memory.list(user_id="alice").items if f.metadata.get("lg_key") == "k"]
    assert [f.metadata["lg_value"] for f in valid] == [{"text": "v2"}]


def test_query_ranks_matches_first_then_the_rest_unranked(store: MemlaneStore) -> None:
    store.put(("alice", "mem"), "tea", {"text": "Alice drinks green tea every morning"})
    store.put(("alice", "mem"), "cat", {"text": "Alice has a cat named Miso"})
    store.put(("alice", "mem"), "hidden", {"text": "green tea secret"}, index=False)
    found = store.search(("alice",), query="green tea")
    assert found[0].key == "tea" and found[0].score is not None and found[0].score > 0
    assert {i.key for i in found} == {"tea", "cat", "hidden"}
    assert next(i for i in found if i.key == "hidden").score is None  # index=False: never scored
    assert next(i for i in found if i.key == "cat").score == 0.0  # indexed, not matched: scored 0
    assert [i.key for i in store.search(("alice",), query="green tea", limit=1)] == ["tea"]
    assert [
        i.key for i in store.search(("alice",), query="green tea", filter={"text": "Alice has a cat named Miso"})
    ] == ["cat"]


def test_index_fields_choose_the_indexed_text(memory: Memory) -> None:
    s = MemlaneStore(memory, index={"fields": ["summary"]})
    s.put(("alice", "mem"), "k1", {"summary": "loves hiking", "raw": "zebra"})
    s.put(("alice", "mem"), "k2", {"summary": "plays chess", "raw": "hiking"}, index=["raw"])
    hits = s.search(("alice",), query="zebra")
    assert [h.score for h in hits] == [0.0, 0.0]  # "raw" of k1 was not indexed: nothing matched
    ranked = [h.key for h in s.search(("alice",), query="hiking") if h.score]
    assert sorted(ranked) == ["k1", "k2"]
    with pytest.raises(ConfigError, match="embed"):
        MemlaneStore(memory, index={"dims": 3})  # dims without an embedding function
    with pytest.raises(ConfigError, match="IndexConfig"):
        MemlaneStore(memory, index={"fields": ["a"], "ttl": 3})  # type: ignore[typeddict-unknown-key]


def test_same_value_under_two_keys_is_two_items(store: MemlaneStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # one frozen clock: the two memories would be identical (author, time, text); both must stay
    frozen = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    monkeypatch.setattr(lg, "utcnow", lambda: frozen)
    store.batch([PutOp(("alice", "mem"), "k1", {"t": "same"}), PutOp(("alice", "mem"), "k2", {"t": "same"})])
    store.put(("alice", "mem"), "k3", {"t": "same"})
    assert [i.key for i in store.search(("alice", "mem"))] == ["k1", "k2", "k3"]
    store.put(("alice", "mem"), "k1", {"t": "same"})  # re-putting the same value keeps one item
    assert [i.key for i in store.search(("alice", "mem"))] == ["k1", "k2", "k3"]


def test_long_value_is_searchable_and_one_item(store: MemlaneStore) -> None:
    body = " ".join(f"paragraph {i} talks about ordinary things." for i in range(600)) + " The vault code is zanzibar."
    value = {"text": body}
    store.put(("alice", "docs"), "long", value)
    item = store.get(("alice", "docs"), "long")
    assert item is not None and item.value == value
    hits = store.search(("alice",), query="zanzibar vault code")
    assert [(h.key, h.score is not None) for h in hits] == [("long", True)]
    store.put(("alice", "docs"), "long", {"text": "short now"})
    assert [h.value for h in store.search(("alice",), query="zanzibar")] == [{"text": "short now"}]
    store.delete(("alice", "docs"), "long")
    assert store.search(("alice",), query="zanzibar") == []


def test_bad_input_is_refused_and_changes_nothing(store: MemlaneStore) -> None:
    store.put(("alice", "mem"), "k", {"ok": 1})
    with pytest.raises(InvalidInputError):
        store.put(("alice", "mem"), "k", {"bad": {1, 2}})  # not JSON
    with pytest.raises(InvalidInputError):
        store.put(("alice", "mem"), "k", {"big": "x" * 70_000})  # over memlane's metadata limit
    with pytest.raises(InvalidInputError, match="operator"):
        store.search(("alice",), filter={"ok": {"$regex": "x"}})
    with pytest.raises(ValueError):  # LangGraph's own namespace check (InvalidNamespaceError)
        store.put(("alice", "a.b"), "k", {"ok": 2})
    with pytest.raises(ValueError):
        store.batch([PutOp(("alice", "a.b"), "k", {"ok": 2})])
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(("alice", "mem"), "k", {"ok": 3}, ttl=5)
    assert store.get(("alice", "mem"), "k").value == {"ok": 1}  # type: ignore[union-attr]
    assert _rows(store.search(("alice",))) == [(("alice", "mem"), "k", {"ok": 1})]


# --------------------------------------------------------------------------- isolation


def test_users_never_see_each_others_items(store: MemlaneStore, memory: Memory) -> None:
    store.put(("alice", "memories"), "secret", {"text": "alice's bank PIN is 4321"})
    store.put(("bob", "memories"), "note", {"text": "bob likes jazz"})
    # only bob's own item comes back, unranked: nothing of alice's matched
    assert [(i.key, i.score) for i in store.search(("bob",), query="alice bank PIN 4321")] == [("note", 0.0)]
    assert [i.key for i in store.search(("bob",), query="alice bank PIN 4321")] == ["note"]
    assert [i.key for i in store.search(("bob", "memories"))] == ["note"]
    assert store.get(("bob", "memories"), "secret") is None
    assert store.list_namespaces(prefix=("bob",)) == [("bob", "memories")]
    # bob writing and deleting the same key in his namespace leaves alice's item alone
    store.put(("bob", "memories"), "secret", {"text": "bob's own"})
    store.delete(("bob", "memories"), "secret")
    assert store.get(("alice", "memories"), "secret").value == {"text": "alice's bank PIN is 4321"}  # type: ignore[union-attr]
    # memlane's own API agrees: bob's memory holds nothing of alice's
    assert all("4321" not in f.content for f in memory.list(user_id="bob").items)
    assert [h.fact.metadata["lg_key"] for h in memory.search("PIN 4321", user_id="alice").hits] == ["secret"]
    assert memory.search("PIN 4321", user_id="bob").hits == []


def test_listing_without_a_user_covers_the_users_this_store_wrote_for(memory: Memory) -> None:
    """search(()) and list_namespaces() list every user's items under the store's agent
    namespace, and nothing of another agent namespace, a bound user's or memlane's own."""
    app1, app2 = MemlaneStore(memory, agent_id="app-1"), MemlaneStore(memory, agent_id="app-2")
    app1.put(("alice", "m"), "k", {"text": "alice in app one"})
    app1.put(("bob", "notes", "x"), "k", {"text": "bob in app one"})
    app2.put(("carol", "m"), "k", {"text": "carol in app two"})
    memory.add("a memory written through memlane's own API", user_id="dave", agent_id="app-1")
    assert app1.list_namespaces() == [("alice", "m"), ("bob", "notes", "x")]
    assert app1.list_namespaces(prefix=("*", "notes")) == [("bob", "notes", "x")]
    assert app1.list_namespaces(suffix=("m",)) == [("alice", "m")]
    assert app1.list_namespaces(max_depth=1) == [("alice",), ("bob",)]
    assert _rows(app1.search(())) == [
        (("alice", "m"), "k", {"text": "alice in app one"}),
        (("bob", "notes", "x"), "k", {"text": "bob in app one"}),
    ]
    assert {(i.key, i.namespace[0]) for i in app1.search((), query="carol app two")} == {("k", "alice"), ("k", "bob")}
    assert app2.list_namespaces() == [("carol", "m")]
    assert [i.namespace for i in app2.search(())] == [("carol", "m")]
    app1.delete(("bob", "notes", "x"), "k")  # a namespace with no item left is not listed (PostgresStore)
    assert app1.list_namespaces() == [("alice", "m")]
    # the directory is memlane memory linked to its user: forgetting the user erases it
    assert [f.metadata["lg_lead"] for f in memory.list(agent_id=f"{lg.DIRECTORY}:app-1").items] == [["bob"], ["alice"]]
    memory.forget("alice")
    assert app1.list_namespaces() == []
    assert [f.metadata["lg_lead"] for f in memory.list(agent_id=f"{lg.DIRECTORY}:app-1").items] == [["bob"]]


def test_store_bound_to_a_user(memory: Memory) -> None:
    alice = MemlaneStore(memory, user_id="alice", agent_id="app")
    bob = MemlaneStore(memory, user_id="bob", agent_id="app")
    alice.put(("memories",), "k", {"text": "alice likes tea"})
    alice.put(("prefs", "ui"), "theme", {"text": "dark"})
    bob.put(("memories",), "k", {"text": "bob likes jazz"})
    assert alice.list_namespaces() == [("memories",), ("prefs", "ui")]
    assert bob.list_namespaces() == [("memories",)]
    assert [i.value for i in bob.search(())] == [{"text": "bob likes jazz"}]
    assert [(i.value, i.score) for i in bob.search((), query="tea")] == [({"text": "bob likes jazz"}, 0.0)]
    assert bob.get(("prefs", "ui"), "theme") is None
    # in memlane, the items are alice's own memories under the agent namespace
    assert {f.metadata["lg_key"] for f in memory.list(user_id="alice", agent_id="app").items} == {"k", "theme"}
    with pytest.raises(ConfigError):
        MemlaneStore(memory, user_id="alice", scope_depth=2)
    with pytest.raises(ConfigError):
        MemlaneStore(memory, user_id="alice", scope=lambda ns: (ns[0], None))


def test_custom_scope_has_no_directory(memory: Memory) -> None:
    s = MemlaneStore(memory, scope=lambda ns: (ns[1], "my-app"), scope_depth=2)
    s.put(("memories", "alice"), "k", {"a": 1})
    with pytest.raises(ScopeError):
        s.search(("memories",))
    with pytest.raises(ScopeError):
        s.list_namespaces()
    with pytest.raises(ScopeError):
        s.list_namespaces(prefix=("memories", "*"))
    assert s.list_namespaces(prefix=("memories", "alice")) == [("memories", "alice")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(["app-1", "app-2"]), st.sampled_from(["u1", "u2", "u3"]), st.sampled_from("abc")),
        max_size=6,
    )
)
def test_property_a_store_lists_and_returns_only_its_agent_namespace(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[str, str, str]]
) -> None:
    with Memory(tmp_path_factory.mktemp("prop") / "m.db", embedder="hash") as m:
        stores = {a: MemlaneStore(m, agent_id=a) for a in ("app-1", "app-2")}
        for agent, user, label in writes:
            stores[agent].put((user, label), "k", {"text": f"{agent} {user} {label}"})
        for agent, s in stores.items():
            mine = sorted({(u, lab) for a, u, lab in writes if a == agent})
            assert s.list_namespaces() == mine
            assert sorted(i.namespace for i in s.search((), limit=100)) == mine
            assert all(i.value["text"].startswith(agent) for i in s.search((), query="app u1 a", limit=100))


def test_custom_scope_mapping(memory: Memory) -> None:
    """Namespaces shaped ("memories", user_id): the user is the second label."""
    s = MemlaneStore(memory, scope=lambda ns: (ns[1], "my-app"), scope_depth=2)
    s.put(("memories", "alice"), "k", {"text": "alice likes tea"})
    s.put(("memories", "bob"), "k", {"text": "bob likes jazz"})
    assert [i.value for i in s.search(("memories", "bob"), query="tea")] == [{"text": "bob likes jazz"}]
    with pytest.raises(ScopeError):
        s.search(("memories",))
    assert [f.agent_id for f in memory.list(user_id="alice").items] == ["my-app"]
    # agent-shared namespace: (None, agent) writes the agent's shared memory, visible to all its users
    shared = MemlaneStore(memory, scope=lambda ns: (None, "my-app"))
    shared.put(("shared", "faq"), "hours", {"text": "open 9 to 5"})
    assert [f.metadata["lg_key"] for f in memory.list(agent_id="my-app").items if f.scope == "agent"] == ["hours"]
    with pytest.raises(ConfigError):
        MemlaneStore(memory, scope=lambda ns: (ns[0], None), agent_id="x")


def test_agent_id_partitions_a_users_items(memory: Memory) -> None:
    s1, s2 = MemlaneStore(memory, agent_id="app-1"), MemlaneStore(memory, agent_id="app-2")
    s1.put(("alice", "m"), "k", {"text": "for app one"})
    assert s2.get(("alice", "m"), "k") is None
    assert s1.get(("alice", "m"), "k").value == {"text": "for app one"}  # type: ignore[union-attr]


# --------------------------------------------------------------------------- persistence


def test_items_survive_reopening_the_file(db_path: Path) -> None:
    with Memory(db_path, embedder="hash") as m:
        s = MemlaneStore(m)
        s.put(("alice", "memories"), "k1", {"text": "I am allergic to peanuts"})
        s.put(("alice", "memories"), "k2", {"text": "temporary"})
        s.delete(("alice", "memories"), "k2")
        before = s.get(("alice", "memories"), "k1")
    with Memory(db_path, embedder="hash") as m:
        s = MemlaneStore(m)
        assert s.get(("alice", "memories"), "k1") == before
        assert s.get(("alice", "memories"), "k2") is None
        assert [i.key for i in s.search(("alice",), query="peanuts allergy")] == ["k1"]
        graph = _builder(remember_or_recall).compile(store=s, checkpointer=InMemorySaver())
        assert graph.invoke({"text": "what am I allergic to?"}, _cfg("new", "alice"))["recalled"] == [
            "I am allergic to peanuts"
        ]


def test_runs_from_many_threads(store: MemlaneStore) -> None:
    async def main() -> None:
        await asyncio.gather(*(store.aput(("alice", "m"), f"k{i}", {"i": i}) for i in range(10)))

    asyncio.run(main())
    assert sorted(i.value["i"] for i in store.search(("alice",), limit=100)) == list(range(10))


# --------------------------------------------------------------------------- LangGraph's index: cosine scores


def _embed(texts: list[str]) -> list[list[float]]:
    """A deterministic 26-dimensional embedding: letter counts."""
    return [[float(t.lower().count(c)) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


async def _aembed(texts: list[str]) -> list[list[float]]:
    return _embed(texts)


def _cosine_scenario(s: BaseStore) -> list[Any]:
    s.put(("u1", "docs"), "a", {"text": "apple pie", "color": "red"})
    s.put(("u1", "docs"), "b", {"text": "banana bread", "color": "yellow"})
    s.put(("u1", "docs"), "c", {"title": "cherry", "body": "tart"}, index=["title", "body"])
    s.put(("u1", "docs"), "d", {"text": "apple tart"}, index=False)
    s.put(("u1", "docs"), "b", {"text": "blueberry bread", "color": "blue"})  # re-embedded
    return [
        [(i.key, i.score) for i in s.search(("u1",), query=q, filter=f, limit=lim, offset=off)]
        for q, f, lim, off in [
            ("apple", None, 10, 0),
            ("tart", None, 10, 0),
            ("bread", {"color": "blue"}, 10, 0),
            ("apple", None, 2, 1),
        ]
    ]


def test_index_embed_scores_by_cosine_as_in_memory_store_does(memory: Memory) -> None:
    index: Any = {"dims": 26, "embed": _embed, "fields": ["text"]}
    expected = _cosine_scenario(InMemoryStore(index=index))
    store = MemlaneStore(memory, index=index)
    got = _cosine_scenario(store)
    assert [[k for k, _ in r] for r in got] == [[k for k, _ in r] for r in expected]
    for mine, theirs in zip(got, expected, strict=True):
        for (_, a), (_, b) in zip(mine, theirs, strict=True):
            assert (a is None and b is None) or a == pytest.approx(b, abs=1e-6)
    assert got[0][-1] == ("d", None)  # index=False: never scored, last
    assert all(-1 - 1e-9 <= score <= 1 + 1e-9 for r in got for _, score in r if score is not None)
    assert store.index_config == index and store.index_config is not index
    assert MemlaneStore(memory).index_config is None


def test_index_embed_vectors_persist_and_async_embed_functions_work(db_path: Path) -> None:
    index: Any = {"dims": 26, "embed": _aembed}

    async def write() -> None:
        async with AsyncMemory(db_path, embedder="hash") as m:
            s = MemlaneStore(m, index=index)
            await s.aput(("alice", "m"), "k1", {"text": "zebra zoo"})
            await s.aput(("alice", "m"), "k2", {"text": "apple"})
            assert [i.key for i in await s.asearch(("alice",), query="zz")] == ["k1", "k2"]

    asyncio.run(write())
    with Memory(db_path, embedder="hash") as m:  # a new process: the vectors were stored with the items
        found = MemlaneStore(m, index={"dims": 26, "embed": _embed}).search(("alice",), query="zz")
        reference = InMemoryStore(index={"dims": 26, "embed": _embed})
        reference.put(("alice", "m"), "k1", {"text": "zebra zoo"})
        reference.put(("alice", "m"), "k2", {"text": "apple"})
        want = [(i.key, pytest.approx(i.score, abs=1e-6)) for i in reference.search(("alice",), query="zz")]
        assert [(i.key, i.score) for i in found] == want


def test_index_embed_wrong_dims_is_refused_and_changes_nothing(memory: Memory) -> None:
    s = MemlaneStore(memory, index={"dims": 3, "embed": _embed})
    with pytest.raises(ConfigError, match="26-dimensional"):
        s.put(("alice", "m"), "k", {"text": "hello"})
    assert s.get(("alice", "m"), "k") is None
    assert memory.list(user_id="alice").items == []
