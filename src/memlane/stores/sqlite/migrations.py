"""Named schema migrations, applied in order inside one transaction each on open.

Never edit an applied migration: append a new one. A step is an SQL statement or a Python
function of the connection (for data rewrites SQL cannot express), run in the same transaction.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from urllib.parse import quote

from memlane.stores.sql import schema

#: The column types of the tables shared with PostgreSQL (:mod:`memlane.stores.sql.schema`).
T = schema.SQLITE_TYPES


def _rekey_partitions(c: sqlite3.Connection) -> None:
    """0003: partition keys joined ids with a bare ``\x1f``, so ids containing it collided
    across (agent, user) pairs. Rebuild every key from the fact's own columns with
    percent-encoded parts (``u|user|agent``, ``a|agent``), and the FTS partition tokens."""

    def key(scope: str, agent: str | None, user: str | None) -> str:
        if scope == "agent":
            return f"a|{quote(agent or '', safe='')}"
        return f"u|{quote(user or '', safe='')}|{quote(agent or '', safe='')}"

    def token(partition: str) -> str:
        return "p" + hashlib.md5(partition.encode("utf-8")).hexdigest()[:20]

    old_of: dict[str, str] = {}
    for rowid, scope, agent, user, old in c.execute(
        "SELECT rowid, scope, agent_id, user_id, partition FROM facts"
    ).fetchall():
        new = key(scope, agent, user)
        if new != old:
            c.execute("UPDATE facts SET partition=? WHERE rowid=?", (new, rowid))
            c.execute("UPDATE facts_fts SET part=? WHERE rowid=?", (token(new), rowid))
        old_of.setdefault(old, new)
    c.execute("DELETE FROM partitions")
    for (part,) in c.execute("SELECT DISTINCT partition FROM facts").fetchall():
        c.execute(
            "INSERT INTO partitions (partition, token, appends, changes) VALUES (?, ?, 1, 1)", (part, token(part))
        )
    authors = c.execute("SELECT partition, author FROM authors").fetchall()
    c.execute("DELETE FROM authors")
    for part, author in authors:
        if part in old_of:
            c.execute("INSERT OR IGNORE INTO authors VALUES (?, ?)", (old_of[part], author))


def _reindex_keyword_text(c: sqlite3.Connection) -> None:
    """0007: the keyword index holds :func:`memlane.retrieval.text.keyword_text` of a fact's
    text and context (CJK runs as characters and character pairs, NFKC, ``ß`` as ``ss``).
    Rows written before stored the raw texts, which ``keyword_text`` turns into the new form;
    only rows with a non-ASCII text or context can change (ASCII text is kept as is)."""
    from memlane.retrieval.text import keyword_text

    rows = c.execute(
        "SELECT rowid, text, ctx FROM facts_fts WHERE length(CAST(text AS BLOB)) <> length(text)"
        " OR length(CAST(ctx AS BLOB)) <> length(ctx)"
    ).fetchall()
    for rowid, text, ctx in rows:
        new_text, new_ctx = keyword_text(text or ""), keyword_text(ctx or "")
        if (new_text, new_ctx) != (text, ctx):
            c.execute("UPDATE facts_fts SET text=?, ctx=? WHERE rowid=?", (new_text, new_ctx, rowid))


Step = str | Callable[[sqlite3.Connection], None]

MIGRATIONS: list[tuple[str, list[Step]]] = [
    (
        "0001_core",
        [
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            # ---- short-term: sessions and events
            *schema.sessions(T),
            # ---- long-term: facts (verbatim memories and extracted facts)
            *schema.facts(T),
            # Keyword index. `part` holds one token naming the partition, so a query is
            # `part:TOKEN AND (...)` and its cost follows the user's own memory size.
            # `ctx` holds neighbouring turns of the same session (down-weighted),
            # `date` the event date in words.
            """CREATE VIRTUAL TABLE facts_fts USING fts5(
                part, author UNINDEXED, text, ctx, date, tokenize = 'porter unicode61'
            )""",
            # Per-partition change counters: vector caches compare them to stay fresh
            # across threads and processes.
            """CREATE TABLE partitions (
                partition TEXT PRIMARY KEY,
                token TEXT NOT NULL,
                appends INTEGER NOT NULL DEFAULT 0,
                changes INTEGER NOT NULL DEFAULT 0
            )""",
            *schema.authors(T),
            *schema.history(T),
            # ---- always-in-context: reflections and consolidated blobs
            *schema.reflections(T),
        ],
    ),
    (
        "0002_formation",
        [
            # Durable formation jobs: a conversation waiting to be formed is never only in memory.
            *schema.jobs(T),
            # Per-session formation cursor: what was formed, what is pending, when it was last active.
            *schema.formation_cursors(T),
            # Exactly-once application of a formation batch (replays of a job find their key here).
            "CREATE TABLE applied_batches (key TEXT PRIMARY KEY, user_id TEXT, at TEXT NOT NULL, result TEXT NOT NULL)",
            "CREATE INDEX applied_batches_user ON applied_batches(user_id)",
        ],
    ),
    (
        # Partition keys with percent-encoded ids: no collisions whatever ids contain, and all
        # of a user's partitions share the prefix ``u|user|`` (a range scan of `partitions`).
        "0003_partition_keys",
        [_rekey_partitions],
    ),
    (
        # forget(user) must find what it erases: agent-scope reflections and consolidated blobs
        # (and agent facts another user's conversation updated) belong to no user, so the users
        # whose conversations they were formed from are recorded here. Never returned by reads.
        "0004_erasure",
        [
            *schema.contributors(T),
            # Bumped by every purge. Partition counters restart at 0 when a purge deletes the
            # partition row, so a vector cache (in any process) compares this generation too.
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', '0')",
        ],
    ),
    (
        # The assembled memory context (agent/context.py), kept with the session as Eden does:
        # reused for 5 minutes while the stamps of the memory it was built from still match.
        "0005_context_cache",
        [
            *schema.context_cache(T),
        ],
    ),
    (
        # The embedding queue's idle scan (SqliteFactStore.missing_embeddings: valid facts without
        # a vector, oldest first) reads this partial index, which holds only those facts, instead
        # of scanning every fact. Its WHERE is the query's, so the planner may use it.
        "0006_unembedded_index",
        ["CREATE INDEX facts_unembedded ON facts(rowid) WHERE embedding IS NULL AND invalid_at IS NULL"],
    ),
    (
        # Chinese / Japanese / Korean text findable by keyword: the index stores each CJK run as
        # its characters and character pairs (retrieval.text.keyword_text); re-index old rows.
        "0007_cjk_keyword_text",
        [_reindex_keyword_text],
    ),
    (
        # A vector backfilled into a fact that had none (set_embeddings: the embedding queue)
        # is an append for the vector caches, not a change: the partition's `embedded` counter
        # moves and the fact records it in `embed_seq`, so a cache loads just those rows
        # (stores/sqlite/vector_cache.py) instead of reloading the whole partition.
        "0008_vector_backfill_seq",
        [
            "ALTER TABLE partitions ADD COLUMN embedded INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE facts ADD COLUMN embed_seq INTEGER",
            "CREATE INDEX facts_embed_seq ON facts(partition, embed_seq) WHERE embed_seq IS NOT NULL",
        ],
    ),
    (
        # Sessions by id alone, in every app (SessionStore.sessions_with_id): the service's room
        # check for a user-bound key reads it on each room read; the (app, id) key cannot serve it.
        "0009_sessions_by_id",
        ["CREATE INDEX sessions_id ON sessions(id, app)"],
    ),
    (
        # Bi-temporal memory (docs/temporal.md): each history row records, beside `at` (record
        # time), the world time its change took effect: an ADD's or UPDATE's text holds from
        # then (the statement's own time), a DELETE ends the fact then. NULL on older rows
        # (stores/sql/temporal.py falls back to the fact's valid_from and the row's `at`).
        "0010_bitemporal",
        [f"ALTER TABLE history ADD COLUMN effective_at {T.ts}"],
    ),
    (
        # The review queue (docs/review.md): proposed ADD / UPDATE / DELETE changes waiting for a
        # reviewer, applied through formation's write path on approval; forget(user) erases them.
        "0011_proposals",
        [*schema.proposals(T)],
    ),
    (
        # One person across channels (issue 20): (channel, sender) -> user_id, written by
        # link_identity, read by add / sessions given channel= and sender=, erased by forget.
        "0012_identities",
        [*schema.identities(T)],
    ),
    (
        # The history of each consolidated blob (the inspector's versions, issue 21): every put of
        # a blob writes its version here in the same transaction; forget erases a user's rows
        # and those of a dropped agent blob; blobs already stored get their current version.
        "0013_consolidated_versions",
        [*schema.consolidated_versions(T), schema.CONSOLIDATED_VERSIONS_BACKFILL],
    ),
    (
        # Every character of a long memory on the vector side (issue 22): a text longer than the
        # encoder reads keeps one vector per further window here (window 0 is facts.embedding),
        # written with the fact, dropped with its text (update) or the fact (forget), and loaded
        # into the partition's vector cache beside it (search scores a fact by its best window).
        "0014_fact_windows",
        [*schema.fact_windows(T)],
    ),
]
