"""A user's data export (``AsyncMemory.export_user``) from a memlane SQLite file.

:data:`TABLES` records, for every table of the schema, whether it is exported or why not
(derived from exported rows, a cache, or not about anyone). A test lists the file's tables
and fails when one has no decision here, so a new table cannot silently escape the export.

What is exported is what ``forget(user_id)`` erases, plus references (ids, never text) to
the agent's shared memories formed from the user's words, which hold other users' words too.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

__all__ = ["EXPORTED", "TABLES", "facts_part", "jobs_part"]

EXPORTED = "exported"

#: Every table of the schema: ``"exported"`` or the reason it is not.
TABLES: dict[str, str] = {
    # ---- exported
    "sessions": EXPORTED,  # sessions the user takes part in ("sessions")
    "session_users": EXPORTED,  # participation: which sessions are exported
    "events": EXPORTED,  # a solo session's events; the user's own events of a group session
    "facts": EXPORTED,  # every fact holding the user's id, valid and invalid ("facts")
    "history": EXPORTED,  # each exported fact's changes; the user's changes to shared facts
    "reflections": EXPORTED,
    "consolidated": EXPORTED,
    "consolidated_versions": EXPORTED,  # every version of the user's own blobs ("consolidated_versions")
    "contributors": EXPORTED,  # as references to shared memories ("shared"), not their text
    "jobs": EXPORTED,  # the user's formation jobs (input and status)
    "formation_cursors": EXPORTED,  # formation bookkeeping of the user's sessions
    "identities": EXPORTED,  # the user's (channel, sender) links ("identities", engine/privacy.py)
    "proposals": EXPORTED,  # the review queue's proposals about the user ("proposals")
    # ---- not exported
    "meta": "not personal: schema settings (embedder name, dimension, purge generation)",
    "_migrations": "not personal: applied schema migrations",
    "sqlite_sequence": "not personal: SQLite's AUTOINCREMENT counters",
    "partitions": "derived: per-partition change counters of the facts",
    "authors": "derived: distinct authors of the exported facts",
    "facts_fts": "derived: keyword index of the facts",
    "facts_fts_data": "derived: keyword index storage",
    "facts_fts_idx": "derived: keyword index storage",
    "facts_fts_content": "derived: keyword index storage",
    "facts_fts_docsize": "derived: keyword index storage",
    "facts_fts_config": "derived: keyword index storage",
    "applied_batches": "derived: exactly-once records of formation batches whose results are the exported facts",
    "context_cache": "derived: cached assemblies of exported memory (5-minute cache)",
    "fact_windows": "derived: embeddings of the windows of exported long facts (their text is the fact's)",
}

_FACT_COLS = (
    "id, content, scope, agent_id, user_id, session_id, kind, author, seq, occurred_at, formed_at, updated_at,"
    " access_count, version, source_event_ids, valid_from, invalid_at, metadata"
)


def _rows(c: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    cur = c.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _json(row: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if isinstance(row.get(name), str):
            row[name] = json.loads(row[name])
    return row


def facts_part(c: sqlite3.Connection, user_id: str) -> dict[str, Any]:
    """Facts (with history), reflections, consolidated blobs of ``user_id``; references to
    shared memories formed from their words."""
    facts = [
        _json(r, "source_event_ids", "metadata")
        for r in _rows(c, f"SELECT {_FACT_COLS} FROM facts WHERE user_id=? ORDER BY rowid", (user_id,))
    ]
    own = {f["id"] for f in facts}
    for f in facts:
        f["history"] = _rows(
            c,
            "SELECT event, old_content, new_content, actor, at FROM history WHERE fact_id=? ORDER BY at, rowid",
            (f["id"],),
        )
    # The user's changes to facts that are not theirs (an agent fact their conversation
    # updated): what they said (new_content), not what was there before (another user's words).
    changes = [
        r
        for r in _rows(
            c, "SELECT fact_id, event, new_content, actor, at FROM history WHERE user_id=? ORDER BY at", (user_id,)
        )
        if r["fact_id"] not in own
    ]
    reflections = _rows(
        c,
        "SELECT id, content, scope, agent_id, user_id, session_id, absorbed, formed_at FROM reflections"
        " WHERE user_id=? ORDER BY formed_at, id",
        (user_id,),
    )
    for r in reflections:
        r["absorbed"] = bool(r["absorbed"])
    blobs = _rows(
        c,
        "SELECT id, scope, agent_id, user_id, session_id, consolidated_content, word_limit, version,"
        " last_consolidated_at FROM consolidated WHERE user_id=? ORDER BY scope, agent_id, session_id",
        (user_id,),
    )
    own |= {r["id"] for r in reflections} | {b["id"] for b in blobs}
    shared: list[dict[str, Any]] = []
    for kind, item_id in c.execute(
        "SELECT kind, item_id FROM contributors WHERE user_id=? ORDER BY kind, item_id", (user_id,)
    ).fetchall():
        if item_id in own:
            continue
        table = {"fact": "facts", "reflection": "reflections", "blob": "consolidated"}.get(kind)
        ref: dict[str, Any] = {"kind": kind, "id": item_id, "scope": None, "agent_id": None}
        if table is not None:
            row = c.execute(f"SELECT scope, agent_id FROM {table} WHERE id=?", (item_id,)).fetchone()
            if row is not None:
                ref["scope"], ref["agent_id"] = row[0], row[1] or None
        shared.append(ref)
    return {
        "facts": facts,
        "shared_changes": changes,
        "reflections": reflections,
        "consolidated": blobs,
        "shared": shared,
    }


def jobs_part(c: sqlite3.Connection, user_id: str) -> dict[str, Any]:
    """The user's formation jobs (input and status; checkpoints and results are derived and
    may quote the agent's shared memory) and the formation cursors of their sessions."""
    jobs = [
        _json(r, "payload")
        for r in _rows(
            c,
            "SELECT id, kind, key, status, payload, attempts, max_attempts, last_error, next_run_at, created_at,"
            " updated_at FROM jobs WHERE user_id=? ORDER BY created_at, id",
            (user_id,),
        )
    ]
    cursors = [
        _json(r, "user_ids")
        for r in _rows(
            c,
            "SELECT app, session_id, user_ids, agent_id, tier, last_event_id, formed_events, pending_messages,"
            " pending_tokens, last_activity_at, last_formed_at FROM formation_cursors"
            " WHERE EXISTS (SELECT 1 FROM json_each(formation_cursors.user_ids) WHERE value=?)"
            " ORDER BY app, session_id",
            (user_id,),
        )
    ]
    return {"jobs": jobs, "formation_cursors": cursors}
