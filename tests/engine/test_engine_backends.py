"""The whole engine, the same on every backend: a SQLite file, PostgreSQL (+ pgvector), and
PostgreSQL with Redis sessions and a Redis job queue.

The behaviours users rely on are the existing engine tests, re-run here over the ``backend``
fixture rather than copied: tests taking the ``mem`` fixture are imported (this module's
``mem`` overrides conftest's), and tests that open their own engines take them from the
``open_memory`` / ``open_sync_memory`` factory fixtures (conftest's open the test's file); here
they are called with the backend's factory (:class:`Engines`), which opens the backend's store,
sessions and queue instead of the file, and after the test checks that every engine it made
really worked on that backend (the store, session store and queue classes). What only makes sense per backend
(erasure down to every table cell and Redis key, the export against the tables, replicas
sharing a store, the isolation property) is written here with backend-neutral checks.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import test_context
import test_erasure
import test_export_user
import test_formation_e2e
import test_isolation
import test_long_content
import test_memory
from hypothesis import HealthCheck, given, settings

# --------------------------------------------------------------------------- tests reused as they are
from test_activity import (  # noqa: F401  (collected here, on every backend)
    test_growth_counts_added_invalidated_and_valid,
    test_timeline_and_growth_refuse_bad_input,
    test_timeline_pages_by_time_and_keeps_an_instant_whole,
    test_timeline_shows_add_update_delete_with_old_and_new_text,
)
from test_consolidate import (  # noqa: F401
    test_a_cleared_sessions_versions_go_with_it,
    test_a_queued_consolidation_is_a_durable_job,
    test_an_unconditional_put_of_the_same_version_replaces_its_row,
    test_forget_erases_the_users_versions_and_export_includes_them,
    test_two_consolidations_give_versions_one_and_two,
)
from test_context import (  # noqa: F401  (collected here, on every backend)
    test_budget_is_never_exceeded_and_packs_by_priority,
    test_cache_expires_after_five_minutes,
    test_cache_reuses_then_invalidates_on_each_kind_of_change,
    test_hostile_content_cannot_change_the_structure,
    test_one_users_context_never_shows_anothers,
    test_window_replays_last_user_turns_or_last_events,
)
from test_directory import (  # noqa: F401
    test_bad_arguments_are_refused,
    test_directory_lists_agents_and_apps,
    test_paging_walks_every_user_once_in_code_point_order,
    test_users_by_agent_and_by_user,
    test_users_come_from_memories_and_sessions_with_counts,
)
from test_formation_kept import (  # noqa: F401
    test_a_cleared_session_keeps_what_the_user_said,
    test_a_group_session_keeps_no_users_turns,
    test_a_plain_repeat_is_still_none,
    test_a_replayed_clear_keeps_each_turn_once,
    test_a_superseded_value_added_again_never_outlives_a_newer_statement,
)
from test_list_filters import (  # noqa: F401
    test_author_session_and_scope_filters,
    test_filters_are_pushed_into_the_query,
    test_filters_never_reach_another_users_memory,
    test_kind_lists_one_memory_type,
)
from test_memory import (  # noqa: F401
    test_access_count_increments_on_retrieval,
    test_add_text_and_search_finds_it,
    test_agent_memory_does_not_show_its_contributor_to_others,
    test_agent_scope_is_shared_user_scope_is_not,
    test_debug_mode_reports_stages,
    test_filters,
    test_filters_are_applied_in_the_store_not_after_fusion,
    test_get_outside_scope_is_not_found,
    test_infer_extracts_with_the_offline_model_by_default,
    test_list_pagination,
    test_messages_keep_author_time_and_order,
    test_multi_query_merges_and_limits,
    test_neighbouring_turns_make_answers_findable,
    test_re_adding_is_idempotent,
    test_repeated_turn_at_other_time_is_kept,
    test_score_fusion_mode,
    test_session_and_scope_filters_narrow_the_search,
    test_unrelated_vector_neighbours_are_not_returned,
    test_update_delete_history,
)
from test_review import (  # noqa: F401
    test_a_delete_with_a_replacement_stores_the_new_statement,
    test_a_proposal_whose_target_changed_goes_stale_and_is_not_applied,
    test_a_rejected_proposal_changes_nothing,
    test_a_replayed_formation_queues_each_proposal_once,
    test_an_add_of_a_stored_text_is_none_through_core_policy,
    test_an_agent_fact_proposal_takes_the_targets_scope,
    test_an_approved_proposal_is_stored_with_the_reviewer_in_history,
    test_an_edited_approval_stores_the_reviewers_text,
    test_bad_input_is_refused_and_queues_nothing,
    test_forget_erases_proposals_and_export_includes_them,
    test_formation_in_review_mode_queues_its_decisions,
    test_proposals_are_redacted_before_they_are_queued,
    test_proposals_stay_with_their_user,
    test_review_mode_per_agent,
    test_the_sync_facade_reviews,
    test_two_reviews_at_once_apply_a_proposal_once,
    test_update_and_delete_proposals_apply_to_their_target,
)
from test_summaries import (  # noqa: F401
    test_a_cleared_session_keeps_its_summary_and_the_next_one_under_its_id_gets_its_own,
    test_a_formed_session_is_summarised_listed_by_period_and_found_by_its_date,
    test_a_group_session_writes_no_summary,
    test_a_later_formation_updates_the_same_summary_versioned,
    test_a_replayed_job_writes_the_summary_once,
    test_forget_erases_the_summaries,
    test_limit_keeps_the_latest_sessions,
    test_summaries_of_one_agent,
)
from test_temporal import (  # noqa: F401
    test_as_of_pages_filters_and_modes,
    test_as_of_sees_memory_as_it_was_before_updates_and_deletes,
    test_context_and_profile_as_of,
    test_forget_erases_at_every_as_of,
    test_snapshot_reads_settled_access_counts,
    test_valid_at_follows_the_statements_own_times,
)

from memlane import AsyncMemory, Event, EventType, Memory
from memlane.models import ConsolidatedMemory
from memlane.stores.postgres.db import parse_pg_location
from services import drop_schema, redis_key_bytes, with_params

# --------------------------------------------------------------------------- backends

BACKENDS = ("sqlite", "pg", "pg+redis")


@dataclass(frozen=True)
class Backend:
    """Where an engine keeps its memory: ``db`` (a file or URL), ``sessions``, ``jobs``."""

    name: str
    db: str
    sessions: str
    jobs: str | None
    redis: str | None = None  # the Redis base URL + prefix (pg+redis)

    @property
    def pg(self) -> bool:
        return self.db.startswith("postgresql://")

    def memory(self, **kw: Any) -> AsyncMemory:
        kw.setdefault("embedder", "hash")
        kw.setdefault("sessions", self.sessions)
        kw.setdefault("jobs", self.jobs)
        return AsyncMemory(self.db, **kw)


def _backend(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    if name == "sqlite":
        return Backend(name, str(tmp_path / "m.db"), "sqlite", None)
    pg: str = request.getfixturevalue("pg_url")
    if name == "pg":
        # sessions="sqlite" is "the store's own": PostgreSQL's session and job tables
        return Backend(name, pg, "sqlite", None)
    redis: str = request.getfixturevalue("redis_url")
    return Backend(name, pg, redis, redis, redis=redis)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return _backend(request.param, tmp_path, request)


@pytest.fixture
async def mem(backend: Backend) -> AsyncIterator[AsyncMemory]:
    m = await backend.memory().open()
    try:
        yield m
    finally:
        await m.close()


@pytest.fixture
def model() -> Iterator[test_formation_e2e.Server]:
    """test_formation_e2e's scripted OpenAI-compatible model server (its ``server`` fixture)."""
    yield from test_formation_e2e.server.__wrapped__()  # type: ignore[attr-defined]


#: The package each backend's stores come from: (long-term store, its own sessions, the Redis ones).
PACKAGES = {"sqlite": "memlane.stores.sqlite", "pg": "memlane.stores.postgres"}


class Engines:
    """An engine factory for tests that open their own engines (``open_memory(path, **kw)``):
    every path opens ``backend`` instead (one location for all), with the backend's sessions
    and queue unless the test names its own sessions (``local``/``null`` keep meaning
    in-process). :meth:`check` then proves each engine really ran on the backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.made: list[tuple[AsyncMemory, dict[str, Any]]] = []

    def _args(self, kw: dict[str, Any]) -> dict[str, Any]:
        if kw.get("sessions", "sqlite") == "sqlite":
            kw["sessions"] = self.backend.sessions
        kw.setdefault("jobs", self.backend.jobs)
        return kw

    def __call__(self, db: Any = None, **kw: Any) -> AsyncMemory:
        m = AsyncMemory(self.backend.db, **self._args(kw))
        self.made.append((m, kw))
        return m

    def sync(self, db: Any = None, **kw: Any) -> Memory:
        m = Memory(self.backend.db, **self._args(kw))
        self.made.append((m.engine, kw))
        return m

    def check(self) -> None:
        """Each engine that opened worked on the backend: its long-term store is the backend's,
        and so are its sessions and queue where the test left them to the backend."""
        be = self.backend
        store = PACKAGES["pg" if be.pg else "sqlite"]
        opened = [(m, kw) for m, kw in self.made if m._opened]
        assert opened, f"the test opened no engine through the {be.name} factory"
        for m, kw in opened:
            assert type(m.facts).__module__.startswith(store + "."), (be.name, type(m.facts))
            assert m.db_path == (be.db if be.pg else str(Path(be.db))), m.db_path
            redis = "memlane.stores.redis."
            if kw["sessions"] == be.sessions:
                sessions = type(m.sessions).__module__
                assert sessions.startswith(redis if be.redis else store + "."), (be.name, sessions)
            if kw["jobs"] == be.jobs:
                assert type(m.jobs).__module__.startswith(redis if be.redis else store + "."), (be.name, type(m.jobs))


@pytest.fixture
def engines(backend: Backend) -> Iterator[Engines]:
    made = Engines(backend)
    yield made
    made.check()


@pytest.fixture
def open_memory(engines: Engines) -> Engines:
    """conftest's ``open_memory``, on this module's backend (tests imported from other modules)."""
    return engines


@pytest.fixture
def open_sync_memory(engines: Engines) -> Any:
    return engines.sync


# --------------------------------------------------------------------------- reading the backend raw


def q(backend: Backend, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of ``query`` (``%s`` placeholders) run directly on the backend's database."""
    if backend.pg:
        import psycopg
        from psycopg import sql

        url, schema, _, _ = parse_pg_location(backend.db)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema or "public")))
            cur = conn.execute(query.encode(), args)
            return cur.fetchall() if cur.description else []
    conn2 = sqlite3.connect(backend.db)
    try:
        with conn2:
            return conn2.execute(query.replace("%s", "?"), args).fetchall()
    finally:
        conn2.close()


def tables(backend: Backend) -> set[str]:
    if backend.pg:
        return {r[0] for r in q(backend, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    return {r[0] for r in q(backend, "SELECT name FROM sqlite_master WHERE type='table'")}


def text_hits(backend: Backend, canary: str) -> list[str]:
    """Where the canary's text still is: table names (every column of every row, as text,
    generated ``tsvector`` and ``jsonb`` included) and, with Redis, the keys under the prefix
    (names and values of every type)."""
    needles = [n.decode().lower() for n in test_erasure.needles(canary)]
    found: list[str] = []
    if not backend.pg:
        found += test_erasure.sql_hits(Path(backend.db), canary)
        found += test_erasure.raw_hits(Path(backend.db), canary)
    else:
        for t in sorted(tables(backend)):
            rows = q(backend, f'SELECT t::text FROM "{t}" t')
            if any(any(n in r[0].lower() for n in needles) for r in rows):
                found.append(t)
    if backend.redis is not None:
        found += [f"redis:{k}" for k in redis_hits(backend.redis, needles)]
    return found


def redis_hits(url: str, needles: list[str]) -> list[str]:
    import redis

    from memlane.stores.redis.url import parse_redis_url

    loc = parse_redis_url(url)
    client = redis.Redis.from_url(url.split("?")[0])
    try:
        hits = []
        for key in client.scan_iter(match=f"{loc.prefix}*", count=1000):
            blob = redis_key_bytes(client, key).decode("utf-8", "replace").lower()
            if any(n in blob for n in needles):
                hits.append(key.decode("utf-8", "replace"))
        return hits
    finally:
        client.close()


# --------------------------------------------------------------------------- engine tests with their own opens


async def test_the_engine_factory_check_catches_an_engine_off_its_backend(tmp_path: Path) -> None:
    """:meth:`Engines.check` fails when no engine opened, or when an engine ran elsewhere than
    the backend (a SQLite file where PostgreSQL was meant: what a factory ignoring its backend
    would do), and passes for the engines it made itself."""
    with pytest.raises(AssertionError, match="opened no engine"):
        Engines(Backend("sqlite", str(tmp_path / "a.db"), "sqlite", None)).check()
    pg = Engines(Backend("pg", "postgresql://u@127.0.0.1:1/none", "sqlite", None))
    async with AsyncMemory(tmp_path / "elsewhere.db", embedder="hash") as stray:
        pg.made.append((stray, {"sessions": "sqlite", "jobs": None}))
    with pytest.raises(AssertionError):
        pg.check()
    own = Engines(Backend("sqlite", str(tmp_path / "b.db"), "sqlite", None))
    async with own(tmp_path / "ignored.db") as m:
        await m.add("a note", user_id="u")
    own.check()
    redis = Engines(Backend("sqlite", str(tmp_path / "b.db"), "redis://x", None, redis="redis://x"))
    redis.made = [(m, {"sessions": "redis://x", "jobs": None})]
    with pytest.raises(AssertionError):  # its sessions are in-process, not the backend's Redis
        redis.check()


async def test_replicas_see_each_others_writes_and_forgets(tmp_path: Path, engines: Engines) -> None:
    """Two engines on one store (two replicas): the vector cache follows the other's writes,
    deletes and a forget; a reopen resumes facts and vectors."""
    where = tmp_path / "m.db"
    await test_memory.test_vector_cache_sees_writes_of_another_instance(where, engines)
    await test_memory.test_reopen_resumes_facts_and_vectors(where, engines)
    await test_erasure.test_a_second_memory_on_the_file_sees_a_forget(where.parent, engines)


async def test_dimension_learned_on_first_call_then_enforced(tmp_path: Path, engines: Engines) -> None:
    await test_memory.test_embedder_that_learns_its_dimension_on_first_call(tmp_path / "m.db", engines)


async def test_session_forms_with_the_offline_model(tmp_path: Path, engines: Engines) -> None:
    """create_session/add_event/end_session -> form() through the backend's sessions and queue."""
    await test_memory.test_agent_session_forms_under_its_agent(tmp_path, engines)


async def test_formation_through_an_openai_compatible_server(
    tmp_path: Path, engines: Engines, model: test_formation_e2e.Server
) -> None:
    """A real HTTP model: the job is kept over malformed JSON and retried from the backend's queue."""
    await test_formation_e2e.test_session_formed_through_openai_compatible_server(model, tmp_path, engines)


async def test_formation_job_kept_then_run(tmp_path: Path, engines: Engines, model: test_formation_e2e.Server) -> None:
    await test_formation_e2e.test_malformed_json_keeps_the_job_then_succeeds(model, tmp_path, engines)


async def test_stale_neighbour_context_after_delete_update_forget(tmp_path: Path, engines: Engines) -> None:
    await test_erasure.test_deleted_or_updated_turn_stops_matching_through_its_neighbours(tmp_path, engines)


async def test_forget_refreshes_kept_neighbours(tmp_path: Path, engines: Engines) -> None:
    await test_erasure.test_forget_refreshes_the_context_of_kept_neighbours(tmp_path, engines)


async def test_forget_reconsolidates_the_agent(tmp_path: Path, engines: Engines) -> None:
    await test_erasure.test_forget_drops_the_agent_blob_and_reconsolidates_from_the_others(tmp_path, engines)


async def test_forget_keeping_the_agents_shared_memory(tmp_path: Path, engines: Engines) -> None:
    await test_erasure.test_forget_can_keep_the_agents_shared_memory(tmp_path, engines)


async def test_long_pasted_document(tmp_path: Path, engines: Engines) -> None:
    """A 50k-character paste: document + fragments, found by search, deleted with its fragments."""
    await test_long_content.test_pasted_document_keeps_the_conversation_and_is_searchable(tmp_path, engines)
    await test_long_content.test_documents_over_the_hard_cap_are_refused_whole(tmp_path, engines)


def test_sync_facade_code_document(tmp_path: Path, engines: Engines) -> None:
    test_long_content.test_sync_text_document(tmp_path, engines.sync)


# --------------------------------------------------------------------------- erasure, export


async def test_forget_leaves_no_text_of_the_user_anywhere(tmp_path: Path, backend: Backend, engines: Engines) -> None:
    """Every kind of memory two users can leave (verbatim, inferred, agent-scope, sessions
    open and ended, formation jobs, reflections, consolidated blobs); forget(ann): no table
    cell (PostgreSQL: every column of every table of the schema as text) and no Redis key or
    value holds her canary; bob's is still there (the scan can see)."""
    from test_erasure import AGENT_CONF, CA, CB, cfg

    await test_erasure._populate(tmp_path, engines)
    assert text_hits(backend, CA) and text_hits(backend, CB)
    if backend.redis is not None:  # the sessions and the queue really are in Redis
        assert any(h.startswith("redis:") for h in text_hits(backend, CA))
    async with backend.memory(formation=cfg(**AGENT_CONF)) as m:
        assert await m.forget("ann") > 0
        assert not (await m.search(CA, agent_id="club")).hits
        assert all(CA not in r.content for r in await m.reflections("agent", agent_id="club"))
        assert (await m.search(CB, user_id="bob", agent_id="club")).hits
        assert text_hits(backend, CA) == []
        assert CA not in json.dumps(await m.export_user("ann"))
    assert text_hits(backend, CA) == []
    assert text_hits(backend, CB)


async def test_context_cache_is_dropped_by_forget(backend: Backend) -> None:
    async with backend.memory() as m:
        await m.add("Alice's secret is 42", user_id="alice", agent_id="eden")
        await m.add("Shared note", agent_id="eden", scope="agent")
        await m.context(user_id="alice", agent_id="eden")
        await m.context(agent_id="eden")
        assert q(backend, "SELECT COUNT(*) FROM context_cache")[0][0] == 2
        await m.forget("alice")
        assert q(backend, "SELECT COUNT(*) FROM context_cache")[0][0] == 0
        assert "secret" not in await m.context(agent_id="eden")


def test_every_table_is_exported_or_has_a_reason(backend: Backend) -> None:
    """The PostgreSQL schema's tables are the SQLite ones (same export decisions): a table
    added to one backend only would escape the export."""
    from memlane.stores.sqlite.export import EXPORTED, TABLES

    with Memory(backend.db, embedder="hash", sessions=backend.sessions, jobs=backend.jobs) as m:
        m.add("hello", user_id="ann")
    have = tables(backend)
    extra = {"schema_migrations"} if backend.pg else set()  # PostgreSQL's migration table
    assert not have - set(TABLES) - extra, have - set(TABLES)
    for t in have & set(TABLES):
        if backend.pg:
            query = "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            cols = {r[0] for r in q(backend, query + " AND table_name = %s", t)}
        else:
            cols = {r[1] for r in q(backend, f'PRAGMA table_info("{t}")')}
        if "user_id" in cols or "user_ids" in cols:
            assert TABLES[t] == EXPORTED or t in ("context_cache", "applied_batches"), t


async def test_export_covers_the_user_and_nothing_of_others(tmp_path: Path, backend: Backend, engines: Engines) -> None:
    """export_user against the backend's own tables (and Redis's sessions and queue)."""
    from test_erasure import AGENT_CONF, CA, CB, cfg

    await test_erasure._populate(tmp_path, engines)
    await test_export_user._group_session(tmp_path, engines)
    async with backend.memory(formation=cfg(**AGENT_CONF)) as m:
        gone = (await m.add(f"Old note {CA}", user_id="ann", agent_id="club"))[0]
        await m.delete(gone.id, user_id="ann", agent_id="club")
        out = await m.export_user("ann")
        bob = json.dumps(await m.export_user("bob"))
    text = json.dumps(out)
    assert CA in text and CB not in text
    assert CB in bob and CA not in bob
    assert out["not_exported"] == []

    def ids(query: str) -> set[str]:
        return {r[0] for r in q(backend, query)}

    facts = {f["id"] for f in out["facts"]}
    assert facts == ids("SELECT id FROM facts WHERE user_id='ann'")
    assert [f["id"] for f in out["facts"] if f["invalid_at"]] == [gone.id]
    assert {f["scope"] for f in out["facts"]} >= {"user", "agent"}
    hist = sum(len(f["history"]) for f in out["facts"])
    query = "SELECT COUNT(*) FROM history WHERE fact_id IN (SELECT id FROM facts WHERE user_id='ann')"
    assert hist == q(backend, query)[0][0] > 0
    assert {r["id"] for r in out["reflections"]} == ids("SELECT id FROM reflections WHERE user_id='ann'") != set()
    assert {b["id"] for b in out["consolidated"]} == ids("SELECT id FROM consolidated WHERE user_id='ann'") != set()
    full = facts | {r["id"] for r in out["reflections"]} | {b["id"] for b in out["consolidated"]}
    refs = {r["id"] for r in out["shared"]}
    contributed = ids("SELECT item_id FROM contributors WHERE user_id='ann'")
    assert contributed and contributed <= full | refs and refs <= contributed
    assert out["jobs"] and out["formation_cursors"]
    assert [(i["channel"], i["sender"]) for i in out["identities"]] == [("sms", f"+{CA}")]
    assert q(backend, "SELECT user_id FROM identities WHERE sender=%s", f"+{CA}") == [("ann",)]
    if backend.jobs is None:  # the store's own job table is the queue
        assert {j["id"] for j in out["jobs"]} == ids("SELECT id FROM jobs WHERE user_id='ann'")
    else:  # the queue is Redis: the store's job table is unused
        assert q(backend, "SELECT COUNT(*) FROM jobs")[0][0] == 0
    sessions = {(s["app"], s["id"]): s for s in out["sessions"]}
    if backend.redis is None:
        assert set(sessions) == set(q(backend, "SELECT app, session_id FROM session_users WHERE user_id='ann'"))
    assert ("club", "ended-ann") in sessions and ("club", "open-ann") in sessions
    grp = sessions[("club", "grp")]
    assert grp["group"] and [e["content"] for e in grp["events"]] == [f"ann here {CA}"]
    assert "user_ids" not in grp and "state" not in grp
    async with backend.memory(formation=cfg(**AGENT_CONF)) as m:
        await m.forget("ann")
        after = await m.export_user("ann")
    for key in (
        "facts",
        "shared_changes",
        "reflections",
        "consolidated",
        "shared",
        "sessions",
        "jobs",
        "formation_cursors",
        "identities",
    ):
        assert after[key] == [], key


# --------------------------------------------------------------------------- context across replicas


async def test_context_cache_sees_a_write_of_another_replica(
    tmp_path: Path, backend: Backend, engines: Engines
) -> None:
    """Replica A caches a context; replica B (another engine on the same store, open at the
    same time) writes a fact, a reflection, deletes: A's next context is rebuilt each time."""
    await test_context.test_cache_is_persisted_and_sees_other_processes_writes(tmp_path, engines)
    async with backend.memory() as a, backend.memory() as b:
        counter = test_context._ProfileCounter(a)
        first = await a.context(session_id="s", user_id="alice", agent_id="eden")
        assert await a.context(session_id="s", user_id="alice", agent_id="eden") == first
        calls = counter.calls
        [fact] = await b.add("Alice moved to Porto", user_id="alice", agent_id="eden")
        text = await a.context(session_id="s", user_id="alice", agent_id="eden")
        assert "Porto" in text and counter.calls == calls + 1
        await test_context._reflect(b, "session", "goal: find a flat", agent_id="eden", user_id="alice", session_id="s")
        text = await a.context(session_id="s", user_id="alice", agent_id="eden")
        assert "find a flat" in text and counter.calls == calls + 2
        await b.delete(fact.id, user_id="alice", agent_id="eden")
        text = await a.context(session_id="s", user_id="alice", agent_id="eden")
        assert "Porto" not in text and counter.calls == calls + 3
        await b.forget("alice")
        assert "find a flat" not in await a.context(session_id="s", user_id="alice", agent_id="eden")


# --------------------------------------------------------------------------- check, stats


async def test_check_and_stats(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    from memlane.cli.main import main

    async with backend.memory() as m:
        await m.add("Sam is vegetarian", user_id="sam")
        await m.add(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            user_id="sam",
            session_id="s1",
        )
        [f] = await m.add("Ann likes tea", user_id="ann", agent_id="bot")
        await m.delete(f.id, user_id="ann", agent_id="bot")
        await m.add("Office is in Paris", agent_id="bot", scope="agent")
        await m.sessions.create_session(user_ids=["sam"], session_id="chat")
        await m.add_event("chat", Event(type=EventType.USER_MESSAGE, author="Sam", content="hey"))
        report = await m.check()
        assert report.ok and report.problems == [], report.problems
        total = await m.stats()
        assert (total.facts, total.valid_facts, total.sessions, total.events) == (5, 4, 1, 1)
        sam = await m.stats(user_id="sam")
        assert (sam.facts, sam.valid_facts) == (3, 3)
        ann = await m.stats(user_id="ann", agent_id="bot")
        assert (ann.facts, ann.valid_facts) == (2, 1)  # the agent's shared fact is in ann's view
        # A user's stats count the user's sessions, events and blobs (they showed 0 / 0 / 0).
        blob = ConsolidatedMemory(scope="user", user_id="sam", consolidated_content="VERSION: 1", word_limit=300)
        await m.reflection_store.put_consolidated(blob)
        sam = await m.stats(user_id="sam")
        assert (sam.sessions, sam.events, sam.consolidated) == (1, 1, 1)
        ann = await m.stats(user_id="ann", agent_id="bot")
        assert (ann.sessions, ann.events, ann.consolidated) == (0, 0, 0)
    args = ["--embedder", "hash", "--db", backend.db, "--json"]
    assert main(["check", *args]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True
    # memlane history / delete find a fact by its id alone, on every store (ann's, under bot)
    assert main(["history", f.id, *args]) == 0
    assert [r["event"] for r in json.loads(capsys.readouterr().out)] == ["ADD", "DELETE"]
    assert main(["history", "no-such-fact", *args]) == 2
    assert "no fact 'no-such-fact'" in capsys.readouterr().err
    if backend.pg:  # a password in the URL is never printed (the test server trusts any)
        secret = backend.db.replace("postgresql://postgres@", "postgresql://postgres:pw-s3cret@")
        for argv in (["stats", "--db", secret], ["check", "--db", secret], ["check", "--db", secret, "--json"]):
            assert main(["--embedder", "hash", *argv]) == 0
            out2 = capsys.readouterr()
            assert "pw-s3cret" not in out2.out + out2.err and "postgres:***@" in out2.out, argv


# --------------------------------------------------------------------------- the isolation property on PostgreSQL


def _empty_schema(url: str) -> None:
    """Every table of the schema emptied (kept: the migrations and the embedder binding)."""
    be = Backend("pg", url, "sqlite", None)
    keep = {"schema_migrations", "meta"}
    names = sorted(tables(be) - keep)
    if names:
        q(be, "TRUNCATE " + ", ".join(f'"{t}"' for t in names))


def test_no_read_crosses_scopes_on_postgres(pg_url: str) -> None:
    """tests/engine/test_isolation.py's property (adversarial ids: separators, NUL, unicode, long),
    each example on the same schema emptied first (a schema per example would be slow)."""

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(test_isolation.writes, test_isolation.reads)
    def prop(w: list[tuple[str, str | None, str, bool]], r: list[tuple[str, str | None, str]]) -> None:
        _empty_schema(pg_url)
        asyncio.run(test_isolation._scenario(pg_url, w, r))  # type: ignore[arg-type]

    prop()


async def test_separator_in_ids_does_not_leak_on_postgres(tmp_path: Path, pg_url: str) -> None:
    engines = Engines(Backend("pg", pg_url, "sqlite", None))
    await test_isolation.test_separator_in_ids_does_not_leak(tmp_path, engines)
    engines.check()


# --------------------------------------------------------------------------- the same answers everywhere


async def _observe(m: AsyncMemory) -> dict[str, Any]:
    """A fixed workload's observable results."""
    await m.add(
        [
            {"role": "user", "content": "I adopted a beagle named Rex", "name": "Ann"},
            {"role": "assistant", "content": "Lovely! How old is he?"},
            {"role": "user", "content": "Two years old, he loves the park", "name": "Ann"},
        ],
        user_id="ann",
        session_id="s1",
        metadata={"source": "chat", "sender": {"id": "7"}},
    )
    for text in ("Ann works as a nurse in Porto", "Ann's sister lives in Lyon", "Ann drinks green tea daily"):
        await m.add(text, user_id="ann", metadata={"source": "profile"})
    [f] = await m.add("Ann drives a red Volvo", user_id="ann")
    await m.update(f.id, "Ann drives a blue Volvo", user_id="ann")
    await m.add("Bob plays chess", user_id="bob")
    await m.add("The clinic opens at 8", agent_id="bot", scope="agent")
    doc = await m.add_document("# Rex\n\nRex needs a walk twice a day.\n\n## Food\n\nRex eats kibble.", user_id="ann")
    obs: dict[str, Any] = {}
    for query in ("dog breed", "where does Ann work", "Volvo colour", "kibble", "tea"):
        res = await m.search(query, user_id="ann")
        obs[f"search {query}"] = sorted(h.fact.content for h in res.hits)
        obs[f"top {query}"] = res.hits[0].fact.content if res.hits else None
    obs["list"] = [(x.kind, x.content) for x in (await m.list(user_id="ann", limit=100)).items]
    obs["list chat"] = [x.content for x in (await m.list(user_id="ann", filters={"source": "chat"})).items]
    obs["list sender"] = [x.content for x in (await m.list(user_id="ann", filters={"sender.id": "7"})).items]
    obs["fragments"] = [x.content for x in await m.fragments(doc.id, user_id="ann")]
    obs["history"] = [(h.event, h.old_content, h.new_content) for h in await m.history(f.id, user_id="ann")]
    obs["stats"] = [(s.facts, s.valid_facts) for s in (await m.stats(), await m.stats(user_id="ann"))]
    obs["infer"] = [x.content for x in await m.add("I am allergic to peanuts", user_id="ann", infer=True)]
    return obs


async def test_the_same_answers_on_every_backend(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """One workload on each backend: the same search results (top hit and hit set), lists,
    filters, fragments, history, stats and inferred facts as SQLite."""
    seen: dict[str, dict[str, Any]] = {}
    for name in BACKENDS:
        be = _backend(name, tmp_path, request)
        if name == "pg+redis":  # pg_url is one schema per test: this backend gets a second one
            be = Backend(name, with_params(be.db, schema=parse_pg_location(be.db)[1] + "r"), be.sessions, be.jobs)
        try:
            async with be.memory() as m:
                seen[name] = await _observe(m)
        finally:
            if name == "pg+redis":
                drop_schema(request.getfixturevalue("pg_server"), parse_pg_location(be.db)[1] or "")
    for name in BACKENDS[1:]:
        diff = {k: (seen["sqlite"][k], v) for k, v in seen[name].items() if seen["sqlite"][k] != v}
        assert not diff, (name, diff)


async def test_close_is_prompt_while_the_formation_worker_claims(backend: Backend) -> None:
    """close() right after start: the background worker is mid-claim. On PostgreSQL the driver
    swallowed that cancellation and close() waited out the worker's 30 s idle sleep; the bound
    here is a hang guard, far above the milliseconds close takes."""
    m = backend.memory(embedder=None, sessions="null")
    await m.start()
    assert (await m.stats(user_id="u")).facts == 0
    closing = asyncio.ensure_future(m.close())
    done, _ = await asyncio.wait({closing}, timeout=10)  # not wait_for: close() may not be cancellable
    await closing
    assert closing in done, "close() waited for the formation worker's idle sleep"


async def test_cli_on_a_redis_session_deployment(
    pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``memlane`` commands configured like the server (MEMORY_TYPE=redis, MEMORY_REDIS_URL,
    MEMLANE_QUEUE) see the Redis sessions and queue, and ``memlane forget`` erases them (it
    used to open the store's own session table and leave the user's events in Redis)."""
    from memlane.cli.main import main

    backend = Backend("pg+redis", pg_url, redis_url, redis_url, redis=redis_url)
    canary = "qqzzyyxw"
    async with backend.memory() as m:
        await m.sessions.create_session(user_ids=["dora"], session_id="dora-chat")
        await m.add_event("dora-chat", Event(type=EventType.USER_MESSAGE, author="Dora", content=f"code {canary}"))
        await m.add(f"Dora likes {canary} tea", user_id="dora")
        await m.end_session("dora-chat")  # a formation job in the Redis queue
    for name, value in {
        "MEMORY_TYPE": "redis",
        "MEMORY_REDIS_URL": backend.redis,
        "MEMLANE_QUEUE": backend.redis,
        "MEMLANE_EMBEDDER": "hash",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["sessions", "--db", backend.db]) == 0
    assert "dora-chat" in capsys.readouterr().out
    assert main(["jobs", "--db", backend.db]) == 0
    assert "no jobs" not in capsys.readouterr().out
    assert redis_hits(redis_url, [canary])
    assert main(["forget", "dora", "--yes", "--db", backend.db]) == 0
    capsys.readouterr()
    assert redis_hits(redis_url, [canary]) == [] and text_hits(backend, canary) == []


async def test_replicas_racing_on_one_store(backend: Backend) -> None:
    """Two engines writing at once: turns of one session get distinct consecutive seqs, the
    same text is stored once, concurrent updates of one fact all land as versions with their
    history, and access counts add up."""
    async with backend.memory() as a, backend.memory() as b:
        turns = [[{"role": "user", "content": f"turn {i}"}] for i in range(12)]
        res = await asyncio.gather(*[(a, b)[i % 2].add(t, user_id="u", session_id="s") for i, t in enumerate(turns)])
        assert sorted(f.seq for r in res for f in r) == list(range(12))
        same = await asyncio.gather(*[(a, b)[i % 2].add("Same text here", user_id="v") for i in range(6)])
        assert len({r[0].id for r in same}) == 1 and (await b.list(user_id="v")).total == 1
        [f] = await a.add("Counter 0", user_id="w")
        ups = await asyncio.gather(*[(a, b)[i % 2].update(f.id, f"Counter {i + 1}", user_id="w") for i in range(6)])
        assert sorted(u.version for u in ups) == list(range(2, 8))
        assert len(await b.history(f.id, user_id="w")) == 7 and (await b.get(f.id, user_id="w")).version == 7
        [g] = await a.add("counted thing", user_id="c")
        await asyncio.gather(*[(a, b)[i % 2].search("counted thing", user_id="c") for i in range(6)])
        assert (await b.get(g.id, user_id="c")).access_count == 6
