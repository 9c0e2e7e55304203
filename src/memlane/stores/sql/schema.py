"""The table definitions SQLite and PostgreSQL share, written once (used by both migration lists).

A definition is the same ``CREATE`` text on both backends but for its column types, which a
:class:`ColumnTypes` names: ISO-8601 text or ``timestamptz``, JSON text or ``jsonb``, an
``INTEGER`` flag or a ``boolean``, SQLite's ``AUTOINCREMENT`` or a ``BIGSERIAL``. Each function
renders exactly the text the migrations applied before it existed (whitespace included: SQLite
keeps a table's ``CREATE`` text in ``sqlite_master``, and a fresh file must equal an upgraded
one), so never edit a definition: a schema change is a new migration.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CONSOLIDATED_VERSIONS_BACKFILL",
    "PG_TYPES",
    "SQLITE_TYPES",
    "ColumnTypes",
    "authors",
    "consolidated_versions",
    "context_cache",
    "contributors",
    "fact_windows",
    "facts",
    "formation_cursors",
    "history",
    "identities",
    "jobs",
    "proposals",
    "reflections",
    "sessions",
]


class ColumnTypes(NamedTuple):
    """The column types that differ between the backends' tables."""

    ts: str
    """A timestamp."""
    json: str
    """JSON data."""
    serial: str
    """An increasing integer primary key."""
    flag: str
    """A boolean column, ``NOT NULL`` and false by default."""
    real: str
    """A floating-point number."""
    no_rowid: str
    """Appended to a table with a primary key that needs no separate row id."""
    rowid: str
    """The facts' integer key, in insertion order."""
    vector: str
    """An embedding."""


SQLITE_TYPES = ColumnTypes(
    ts="TEXT",
    json="TEXT",
    serial="INTEGER PRIMARY KEY AUTOINCREMENT",
    flag="INTEGER NOT NULL DEFAULT 0",
    real="REAL",
    no_rowid=" WITHOUT ROWID",
    rowid="INTEGER PRIMARY KEY",
    vector="BLOB",
)
PG_TYPES = ColumnTypes(
    ts="TIMESTAMPTZ",
    json="JSONB",
    serial="BIGSERIAL PRIMARY KEY",
    flag="BOOLEAN NOT NULL DEFAULT FALSE",
    real="DOUBLE PRECISION",
    no_rowid="",
    rowid="BIGSERIAL PRIMARY KEY",
    vector="vector",
)


def sessions(t: ColumnTypes) -> list[str]:
    """Sessions, their participants and their events (with their indexes)."""
    return [
        f"""CREATE TABLE sessions (
                app TEXT NOT NULL,
                id TEXT NOT NULL,
                user_ids {t.json} NOT NULL DEFAULT '[]',
                agent_id TEXT,
                channel TEXT,
                state {t.json} NOT NULL DEFAULT '{{}}',
                created_at {t.ts} NOT NULL,
                updated_at {t.ts} NOT NULL,
                PRIMARY KEY (app, id)
            )""",
        "CREATE INDEX sessions_updated ON sessions(app, updated_at)",
        """CREATE TABLE session_users (
                app TEXT NOT NULL, session_id TEXT NOT NULL, user_id TEXT NOT NULL,
                PRIMARY KEY (app, user_id, session_id),
                FOREIGN KEY (app, session_id) REFERENCES sessions(app, id) ON DELETE CASCADE
            )""",
        f"""CREATE TABLE events (
                seq {t.serial},
                app TEXT NOT NULL,
                session_id TEXT NOT NULL,
                id TEXT NOT NULL,
                type TEXT NOT NULL,
                ts {t.ts} NOT NULL,
                author TEXT NOT NULL,
                content TEXT,
                metadata {t.json} NOT NULL DEFAULT '{{}}',
                FOREIGN KEY (app, session_id) REFERENCES sessions(app, id) ON DELETE CASCADE
            )""",
        "CREATE INDEX events_session ON events(app, session_id, seq)",
    ]


def facts(t: ColumnTypes, keyword_columns: str = "") -> list[str]:
    """Facts (verbatim memories, extracted facts, documents, fragments) and their indexes;
    ``keyword_columns``: the backend's keyword-index columns, after the embedding."""
    return [
        f"""CREATE TABLE facts (
                rowid {t.rowid},
                id TEXT NOT NULL UNIQUE,
                partition TEXT NOT NULL,
                content TEXT NOT NULL,
                hash TEXT NOT NULL,
                scope TEXT NOT NULL,
                agent_id TEXT,
                user_id TEXT,
                session_id TEXT,
                kind TEXT NOT NULL,
                author TEXT,
                seq INTEGER,
                occurred_at {t.ts},
                formed_at {t.ts} NOT NULL,
                updated_at {t.ts} NOT NULL,
                access_count INTEGER NOT NULL DEFAULT 0,
                version INTEGER NOT NULL DEFAULT 1,
                source_event_ids {t.json} NOT NULL DEFAULT '[]',
                valid_from {t.ts} NOT NULL,
                invalid_at {t.ts},
                metadata {t.json} NOT NULL DEFAULT '{{}}',
                embedding {t.vector}{keyword_columns}
            )""",
        "CREATE UNIQUE INDEX facts_hash ON facts(partition, hash) WHERE invalid_at IS NULL",
        "CREATE INDEX facts_partition ON facts(partition, rowid)",
        "CREATE INDEX facts_user ON facts(user_id)",
        "CREATE INDEX facts_session_seq ON facts(partition, session_id, seq)",
    ]


def fact_windows(t: ColumnTypes) -> list[str]:
    """The further windows' vectors of facts longer than the encoder reads (issue 22): window
    ``win`` (1, 2, ...) of fact ``fact_id``; window 0 is ``facts.embedding``. ``partition`` is
    the fact's, so a search of partitions without long texts finds none at once (its index)."""
    return [
        f"""CREATE TABLE fact_windows (
                fact_id TEXT NOT NULL,
                win INTEGER NOT NULL,
                partition TEXT NOT NULL,
                embedding {t.vector} NOT NULL,
                PRIMARY KEY (fact_id, win)
            ){t.no_rowid}""",
        "CREATE INDEX fact_windows_partition ON fact_windows(partition)",
    ]


def authors(t: ColumnTypes) -> list[str]:
    """The authors seen in each partition."""
    return [
        """CREATE TABLE authors (
                partition TEXT NOT NULL, author TEXT NOT NULL, PRIMARY KEY (partition, author)
            )""",
    ]


def history(t: ColumnTypes) -> list[str]:
    """Every change to a fact (with its indexes)."""
    return [
        f"""CREATE TABLE history (
                id TEXT PRIMARY KEY,
                fact_id TEXT NOT NULL,
                user_id TEXT,
                event TEXT NOT NULL,
                old_content TEXT,
                new_content TEXT,
                actor TEXT NOT NULL,
                at {t.ts} NOT NULL
            )""",
        "CREATE INDEX history_fact ON history(fact_id, at)",
        "CREATE INDEX history_user ON history(user_id)",
    ]


def reflections(t: ColumnTypes) -> list[str]:
    """Reflection buffers and consolidated blobs (with the buffers' index)."""
    return [
        f"""CREATE TABLE reflections (
                id TEXT PRIMARY KEY,
                content TEXT NOT NULL,
                scope TEXT NOT NULL,
                agent_id TEXT,
                user_id TEXT,
                session_id TEXT,
                absorbed {t.flag},
                formed_at {t.ts} NOT NULL
            )""",
        "CREATE INDEX reflections_scope ON reflections(scope, agent_id, user_id, session_id, absorbed)",
        f"""CREATE TABLE consolidated (
                id TEXT PRIMARY KEY,
                scope TEXT NOT NULL,
                agent_id TEXT NOT NULL DEFAULT '',
                user_id TEXT NOT NULL DEFAULT '',
                session_id TEXT NOT NULL DEFAULT '',
                consolidated_content TEXT NOT NULL,
                word_limit INTEGER NOT NULL,
                version INTEGER NOT NULL,
                unabsorbed_ids {t.json} NOT NULL DEFAULT '[]',
                last_consolidated_at {t.ts},
                UNIQUE (scope, agent_id, user_id, session_id)
            )""",
    ]


def consolidated_versions(t: ColumnTypes) -> list[str]:
    """Every version of every consolidated blob, keyed as the blob is plus its version (with the
    indexes ``forget`` reads: by user, and by blob for a dropped agent blob)."""
    return [
        f"""CREATE TABLE consolidated_versions (
                scope TEXT NOT NULL,
                agent_id TEXT NOT NULL DEFAULT '',
                user_id TEXT NOT NULL DEFAULT '',
                session_id TEXT NOT NULL DEFAULT '',
                version INTEGER NOT NULL,
                blob_id TEXT NOT NULL,
                content TEXT NOT NULL,
                word_limit INTEGER NOT NULL,
                consolidated_at {t.ts},
                PRIMARY KEY (scope, agent_id, user_id, session_id, version)
            ){t.no_rowid}""",
        "CREATE INDEX consolidated_versions_user ON consolidated_versions(user_id)",
        "CREATE INDEX consolidated_versions_blob ON consolidated_versions(blob_id)",
    ]


#: The migration step after :func:`consolidated_versions`: each blob already stored gets its
#: current version as its first row.
CONSOLIDATED_VERSIONS_BACKFILL = (
    "INSERT INTO consolidated_versions (scope, agent_id, user_id, session_id, version, blob_id, content,"
    " word_limit, consolidated_at) SELECT scope, agent_id, user_id, session_id, version, id,"
    " consolidated_content, word_limit, last_consolidated_at FROM consolidated"
)


def contributors(t: ColumnTypes) -> list[str]:
    """Who an agent-scope item was formed from (with its index)."""
    return [
        f"""CREATE TABLE contributors (
                user_id TEXT NOT NULL,
                kind TEXT NOT NULL,
                item_id TEXT NOT NULL,
                PRIMARY KEY (user_id, kind, item_id)
            ){t.no_rowid}""",
        "CREATE INDEX contributors_item ON contributors(kind, item_id)",
    ]


def jobs(t: ColumnTypes) -> list[str]:
    """Durable formation jobs (with their indexes)."""
    return [
        f"""CREATE TABLE jobs (
                id TEXT PRIMARY KEY,
                kind TEXT NOT NULL,
                key TEXT NOT NULL,
                user_id TEXT,
                status TEXT NOT NULL,
                payload {t.json} NOT NULL,
                state {t.json} NOT NULL DEFAULT '{{}}',
                result {t.json},
                attempts INTEGER NOT NULL DEFAULT 0,
                max_attempts INTEGER NOT NULL,
                last_error TEXT,
                next_run_at {t.ts} NOT NULL,
                lease_until {t.ts},
                worker TEXT,
                created_at {t.ts} NOT NULL,
                updated_at {t.ts} NOT NULL
            )""",
        "CREATE INDEX jobs_due ON jobs(status, next_run_at)",
        "CREATE INDEX jobs_key ON jobs(key, status)",
        "CREATE INDEX jobs_user ON jobs(user_id)",
    ]


def formation_cursors(t: ColumnTypes) -> list[str]:
    """Per-session formation cursors: what was formed, what is pending, when last active."""
    return [
        f"""CREATE TABLE formation_cursors (
                app TEXT NOT NULL,
                session_id TEXT NOT NULL,
                user_ids {t.json} NOT NULL DEFAULT '[]',
                agent_id TEXT,
                tier INTEGER NOT NULL DEFAULT 0,
                last_event_id TEXT,
                formed_events INTEGER NOT NULL DEFAULT 0,
                pending_messages INTEGER NOT NULL DEFAULT 0,
                pending_tokens {t.real} NOT NULL DEFAULT 0,
                last_activity_at {t.ts} NOT NULL,
                last_formed_at {t.ts},
                PRIMARY KEY (app, session_id)
            )""",
        "CREATE INDEX formation_cursors_idle ON formation_cursors(last_activity_at)",
    ]


def context_cache(t: ColumnTypes) -> list[str]:
    """The assembled memory context, reused while its stamps match (with its indexes)."""
    return [
        f"""CREATE TABLE context_cache (
                key TEXT PRIMARY KEY,
                stamp TEXT NOT NULL,
                text TEXT NOT NULL,
                built_at {t.ts} NOT NULL,
                user_id TEXT,
                agent_id TEXT,
                session_id TEXT
            )""",
        "CREATE INDEX context_cache_user ON context_cache(user_id)",
        "CREATE INDEX context_cache_session ON context_cache(session_id)",
    ]


def identities(t: ColumnTypes) -> list[str]:
    """The identity map: a sender on a channel -> the canonical user it is (with the index
    ``forget`` and ``identities(user_id)`` read)."""
    return [
        f"""CREATE TABLE identities (
                channel TEXT NOT NULL,
                sender TEXT NOT NULL,
                user_id TEXT NOT NULL,
                linked_at {t.ts} NOT NULL,
                PRIMARY KEY (channel, sender)
            ){t.no_rowid}""",
        "CREATE INDEX identities_user ON identities(user_id)",
    ]


def proposals(t: ColumnTypes) -> list[str]:
    """The review queue: proposed changes to long-term memory and their outcome (with its indexes)."""
    return [
        f"""CREATE TABLE proposals (
                id TEXT PRIMARY KEY,
                action TEXT NOT NULL,
                text TEXT,
                target_id TEXT,
                target_version INTEGER,
                reason TEXT,
                provenance {t.json} NOT NULL DEFAULT '{{}}',
                scope TEXT NOT NULL,
                user_id TEXT,
                agent_id TEXT,
                session_id TEXT,
                metadata {t.json} NOT NULL DEFAULT '{{}}',
                status TEXT NOT NULL,
                created_at {t.ts} NOT NULL,
                reviewed_at {t.ts},
                reviewer TEXT,
                result_id TEXT,
                result_event TEXT,
                edited_from TEXT
            )""",
        "CREATE INDEX proposals_user ON proposals(user_id, status, created_at)",
        "CREATE INDEX proposals_agent ON proposals(agent_id, status, created_at)",
    ]
