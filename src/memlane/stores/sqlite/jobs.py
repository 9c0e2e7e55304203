"""Durable formation jobs and per-session formation cursors, in the memlane SQLite file.

A job is claimed with a lease: a process killed mid-formation leaves a ``running`` job
whose lease expires, and the next worker (this process after a restart, or another one)
claims it again. Two jobs with the same key (one session) never run at the same time.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from memlane.errors import NotFoundError
from memlane.models import FormationCursor, Job, as_utc, new_id, utcnow
from memlane.stores.sqlite import export as export_
from memlane.stores.sqlite.db import Database

_JOB_COLS = (
    "id, kind, key, user_id, status, payload, state, result, attempts, max_attempts, last_error,"
    " next_run_at, created_at, updated_at"
)
#: What a job row reads back: the insertable columns plus the lease holder.
_JOB_READ = _JOB_COLS + ", worker, lease_until"
_CURSOR_COLS = (
    "app, session_id, user_ids, agent_id, tier, last_event_id, formed_events, pending_messages,"
    " pending_tokens, last_activity_at, last_formed_at"
)


def _dt(text: str) -> datetime:
    return as_utc(datetime.fromisoformat(text))


def _job(r: Sequence[Any]) -> Job:
    return Job(
        id=r[0],
        kind=r[1],
        key=r[2],
        user_id=r[3],
        status=r[4],
        payload=json.loads(r[5]),
        state=json.loads(r[6]),
        result=json.loads(r[7]) if r[7] else None,
        attempts=r[8],
        max_attempts=r[9],
        last_error=r[10],
        next_run_at=_dt(r[11]),
        created_at=_dt(r[12]),
        updated_at=_dt(r[13]),
        worker=r[14],
        lease_until=_dt(r[15]) if r[15] else None,
    )


def _cursor(r: Sequence[Any]) -> FormationCursor:
    return FormationCursor(
        app=r[0],
        session_id=r[1],
        user_ids=json.loads(r[2]),
        agent_id=r[3],
        tier=r[4],
        last_event_id=r[5],
        formed_events=r[6],
        pending_messages=r[7],
        pending_tokens=r[8],
        last_activity_at=_dt(r[9]),
        last_formed_at=_dt(r[10]) if r[10] else None,
    )


class SqliteJobStore:
    """Jobs and cursors (see :class:`memlane.stores.base.JobStore`)."""

    def __init__(self, db: Database | str | os.PathLike[str]) -> None:
        self._db = db.acquire() if isinstance(db, Database) else Database(db).open_sync().acquire()

    async def close(self) -> None:
        await self._db.release()

    async def check(self) -> builtins.list[str]:
        """Integrity problems of the database file this store lives in (shared with the fact
        and session stores); empty when healthy. See :meth:`Database.check_sync`."""
        return await self._db.check()

    # ------------------------------------------------------------------ jobs
    async def enqueue(
        self,
        kind: str,
        key: str,
        payload: dict[str, Any],
        *,
        user_id: str | None = None,
        max_attempts: int = 8,
        coalesce: bool = False,
    ) -> Job:
        def op(c: sqlite3.Connection) -> Job:
            now = utcnow().isoformat()
            with self._db.write(c):
                if coalesce:
                    row = c.execute(
                        f"SELECT {_JOB_READ} FROM jobs WHERE key=? AND kind=? AND status='queued' AND state='{{}}'"
                        " ORDER BY created_at LIMIT 1",
                        (key, kind),
                    ).fetchone()
                    if row is not None:
                        merged = {**json.loads(row[5]), **payload}
                        c.execute(
                            "UPDATE jobs SET payload=?, updated_at=? WHERE id=?", (json.dumps(merged), now, row[0])
                        )
                        return _job(c.execute(f"SELECT {_JOB_READ} FROM jobs WHERE id=?", (row[0],)).fetchone())
                jid = new_id()
                c.execute(
                    f"INSERT INTO jobs ({_JOB_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        jid,
                        kind,
                        key,
                        user_id,
                        "queued",
                        json.dumps(payload),
                        "{}",
                        None,
                        0,
                        max_attempts,
                        None,
                        now,
                        now,
                        now,
                    ),
                )
                return _job(c.execute(f"SELECT {_JOB_READ} FROM jobs WHERE id=?", (jid,)).fetchone())

        return await self._db.run(op)

    async def claim(self, worker: str, *, lease_seconds: float, job_id: str | None = None) -> Job | None:
        """Take the oldest due job (or ``job_id``) whose key has no other running job; None if none."""

        def op(c: sqlite3.Connection) -> Job | None:
            now = utcnow()
            iso = now.isoformat()
            with self._db.write(c):
                where = "(status='queued' AND next_run_at<=?) OR (status='running' AND lease_until<?)"
                args: list[Any] = [iso, iso]
                if job_id is not None:
                    where = "id=? AND (status='queued' OR (status='running' AND lease_until<?))"
                    args = [job_id, iso]
                rows = c.execute(
                    f"SELECT {_JOB_READ} FROM jobs j WHERE ({where}) AND NOT EXISTS ("
                    " SELECT 1 FROM jobs o WHERE o.key=j.key AND o.id<>j.id AND o.status='running'"
                    " AND o.lease_until>=?) ORDER BY next_run_at, created_at LIMIT 1",
                    (*args, iso),
                ).fetchall()
                if not rows:
                    return None
                job = _job(rows[0])
                lease = now + timedelta(seconds=lease_seconds)
                c.execute(
                    "UPDATE jobs SET status='running', lease_until=?, worker=?, updated_at=? WHERE id=?",
                    (lease.isoformat(), worker, iso, job.id),
                )
                return job.model_copy(update={"status": "running", "worker": worker, "lease_until": lease})

        return await self._db.run(op)

    async def renew(self, job_id: str, worker: str, *, lease_seconds: float) -> bool:
        """Heartbeat: extend ``worker``'s lease on a running job to now + ``lease_seconds``.
        False when the job is no longer running under this worker (done, released, or
        claimed by another worker after the lease expired)."""

        def op(c: sqlite3.Connection) -> bool:
            now = utcnow()
            with self._db.write(c):
                cur = c.execute(
                    "UPDATE jobs SET lease_until=? WHERE id=? AND status='running' AND worker=?",
                    ((now + timedelta(seconds=lease_seconds)).isoformat(), job_id, worker),
                )
                return cur.rowcount == 1

        return await self._db.run(op)

    async def checkpoint(self, job_id: str, state: dict[str, Any]) -> None:
        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                c.execute(
                    "UPDATE jobs SET state=?, updated_at=? WHERE id=?",
                    (json.dumps(state), utcnow().isoformat(), job_id),
                )

        await self._db.run(op)

    async def complete(self, job_id: str, result: dict[str, Any]) -> None:
        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                c.execute(
                    "UPDATE jobs SET status='done', result=?, lease_until=NULL, last_error=NULL, updated_at=?"
                    " WHERE id=?",
                    (json.dumps(result), utcnow().isoformat(), job_id),
                )

        await self._db.run(op)

    async def fail(self, job_id: str, error: str, *, retry_in: float | None) -> Job:
        """Count a failed attempt: back to ``queued`` after ``retry_in`` seconds, or ``failed``
        when ``retry_in`` is None or the attempts are used up."""

        def op(c: sqlite3.Connection) -> Job:
            now = utcnow()
            with self._db.write(c):
                row = c.execute("SELECT attempts, max_attempts FROM jobs WHERE id=?", (job_id,)).fetchone()
                if row is None:
                    raise NotFoundError(f"no job {job_id!r}")
                attempts = row[0] + 1
                give_up = retry_in is None or attempts >= row[1]
                due = now + timedelta(seconds=retry_in or 0)
                c.execute(
                    "UPDATE jobs SET status=?, attempts=?, last_error=?, next_run_at=?, lease_until=NULL, updated_at=?"
                    " WHERE id=?",
                    (
                        "failed" if give_up else "queued",
                        attempts,
                        error[:2000],
                        due.isoformat(),
                        now.isoformat(),
                        job_id,
                    ),
                )
                return _job(c.execute(f"SELECT {_JOB_READ} FROM jobs WHERE id=?", (job_id,)).fetchone())

        return await self._db.run(op)

    async def release(self, job_id: str) -> None:
        """Give a running job back (worker stopping): queued again, attempt not counted."""

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                c.execute(
                    "UPDATE jobs SET status='queued', lease_until=NULL, updated_at=? WHERE id=? AND status='running'",
                    (utcnow().isoformat(), job_id),
                )

        await self._db.run(op)

    async def retry(self, job_id: str) -> Job:
        """Re-queue a failed job now, with a fresh set of attempts."""

        def op(c: sqlite3.Connection) -> Job:
            now = utcnow().isoformat()
            with self._db.write(c):
                cur = c.execute(
                    "UPDATE jobs SET status='queued', attempts=0, next_run_at=?, updated_at=? WHERE id=?"
                    " AND status IN ('failed', 'queued')",
                    (now, now, job_id),
                )
                row = c.execute(f"SELECT {_JOB_READ} FROM jobs WHERE id=?", (job_id,)).fetchone()
                if row is None:
                    raise NotFoundError(f"no job {job_id!r}")
                del cur
                return _job(row)

        return await self._db.run(op)

    async def get(self, job_id: str) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            row = c.execute(f"SELECT {_JOB_READ} FROM jobs WHERE id=?", (job_id,)).fetchone()
            return _job(row) if row else None

        return await self._db.run(op)

    async def list(self, *, status: str | None = None, key: str | None = None, limit: int = 50) -> builtins.list[Job]:
        where, args = "1", []
        if status is not None:
            where, args = "status=?", [status]
        if key is not None:
            where += " AND key=?"
            args.append(key)

        def op(c: sqlite3.Connection) -> builtins.list[Job]:
            rows = c.execute(
                f"SELECT {_JOB_READ} FROM jobs WHERE {where} ORDER BY created_at DESC LIMIT ?", (*args, limit)
            ).fetchall()
            return [_job(r) for r in rows]

        return await self._db.run(op)

    async def next_due(self) -> datetime | None:
        """When the earliest queued job becomes due (None when the queue is empty)."""

        def op(c: sqlite3.Connection) -> datetime | None:
            row = c.execute(
                "SELECT MIN(t) FROM (SELECT MIN(next_run_at) t FROM jobs WHERE status='queued'"
                " UNION ALL SELECT MIN(lease_until) FROM jobs WHERE status='running')"
            ).fetchone()
            return _dt(row[0]) if row and row[0] else None

        return await self._db.run(op)

    async def counts(self) -> dict[str, int]:
        def op(c: sqlite3.Connection) -> dict[str, int]:
            return {s: n for s, n in c.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status")}

        return await self._db.run(op)

    # ------------------------------------------------------------------ cursors
    async def touch(
        self,
        app: str,
        session_id: str,
        *,
        user_ids: Sequence[str],
        agent_id: str | None,
        tier: int | None,
        messages: int,
        tokens: float,
    ) -> FormationCursor:
        """Record activity on a session: pending counters grow, ``last_activity_at`` = now."""

        def op(c: sqlite3.Connection) -> FormationCursor:
            now = utcnow().isoformat()
            with self._db.write(c):
                c.execute(
                    f"INSERT INTO formation_cursors ({_CURSOR_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
                    " ON CONFLICT (app, session_id) DO UPDATE SET user_ids=excluded.user_ids,"
                    " agent_id=COALESCE(excluded.agent_id, agent_id),"
                    " tier=CASE WHEN ? IS NULL THEN tier ELSE excluded.tier END,"
                    " pending_messages=pending_messages+excluded.pending_messages,"
                    " pending_tokens=pending_tokens+excluded.pending_tokens,"
                    " last_activity_at=excluded.last_activity_at",
                    (
                        app,
                        session_id,
                        json.dumps(list(user_ids)),
                        agent_id,
                        tier or 0,
                        None,
                        0,
                        messages,
                        tokens,
                        now,
                        None,
                        tier,
                    ),
                )
                return _cursor(
                    c.execute(
                        f"SELECT {_CURSOR_COLS} FROM formation_cursors WHERE app=? AND session_id=?", (app, session_id)
                    ).fetchone()
                )

        return await self._db.run(op)

    async def get_cursor(self, app: str, session_id: str) -> FormationCursor | None:
        def op(c: sqlite3.Connection) -> FormationCursor | None:
            row = c.execute(
                f"SELECT {_CURSOR_COLS} FROM formation_cursors WHERE app=? AND session_id=?", (app, session_id)
            ).fetchone()
            return _cursor(row) if row else None

        return await self._db.run(op)

    async def reset_pending(self, app: str, session_id: str) -> None:
        """A formation was scheduled: the trigger counters start again from zero."""

        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                c.execute(
                    "UPDATE formation_cursors SET pending_messages=0, pending_tokens=0 WHERE app=? AND session_id=?",
                    (app, session_id),
                )

        await self._db.run(op)

    async def advance(self, app: str, session_id: str, *, last_event_id: str, formed: int) -> None:
        """Events up to ``last_event_id`` are formed."""

        def op(c: sqlite3.Connection) -> None:
            now = utcnow().isoformat()
            with self._db.write(c):
                # An upsert: a session whose events were written straight to the session store
                # has no cursor yet, and must not be formed again from its first event.
                c.execute(
                    "INSERT INTO formation_cursors (app, session_id, last_event_id, formed_events, last_activity_at,"
                    " last_formed_at) VALUES (?,?,?,?,?,?) ON CONFLICT (app, session_id) DO UPDATE SET"
                    " last_event_id=excluded.last_event_id, formed_events=formed_events+excluded.formed_events,"
                    " last_formed_at=excluded.last_formed_at",
                    (app, session_id, last_event_id, formed, now, now),
                )

        await self._db.run(op)

    async def delete_cursor(self, app: str, session_id: str) -> None:
        def op(c: sqlite3.Connection) -> None:
            with self._db.write(c):
                c.execute("DELETE FROM formation_cursors WHERE app=? AND session_id=?", (app, session_id))

        await self._db.run(op)

    async def idle_cursors(self, before: datetime, *, limit: int = 1000) -> builtins.list[FormationCursor]:
        """Sessions whose last activity is older than ``before``, oldest first."""

        def op(c: sqlite3.Connection) -> builtins.list[FormationCursor]:
            rows = c.execute(
                f"SELECT {_CURSOR_COLS} FROM formation_cursors WHERE last_activity_at<? ORDER BY last_activity_at"
                " LIMIT ?",
                (before.isoformat(), limit),
            ).fetchall()
            return [_cursor(r) for r in rows]

        return await self._db.run(op)

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's jobs and their sessions' formation cursors (see :mod:`memlane.stores.sqlite.export`)."""
        return await self._db.run(lambda c: export_.jobs_part(c, user_id))

    async def purge_user(self, user_id: str, *, cursors: bool = True) -> int:
        """Delete the user's jobs and (``cursors=True``) the cursors of sessions they took part in alone.
        ``cursors=False`` keeps the cursors, for a purge that keeps the user's sessions.

        Other users' jobs can hold this user's words through the agent's shared memory: dedup
        candidates in their checkpoints, the agent blob or a replaced agent fact in their
        results. Checkpoints of jobs not running now are dropped (a replay recomputes them) and
        those texts are removed from finished jobs' results."""

        def op(c: sqlite3.Connection) -> int:
            with self._db.write(c):
                n = c.execute("DELETE FROM jobs WHERE user_id=?", (user_id,)).rowcount
                if cursors:
                    n += c.execute("DELETE FROM formation_cursors WHERE user_ids=?", (json.dumps([user_id]),)).rowcount
                    # a group session's cursor stays, without the user (as the session's participants)
                    for app, sid, users in c.execute(
                        "SELECT app, session_id, user_ids FROM formation_cursors"
                        " WHERE EXISTS (SELECT 1 FROM json_each(formation_cursors.user_ids) WHERE value=?)",
                        (user_id,),
                    ).fetchall():
                        kept = [u for u in json.loads(users) if u != user_id]
                        c.execute(
                            "UPDATE formation_cursors SET user_ids=? WHERE app=? AND session_id=?",
                            (json.dumps(kept), app, sid),
                        )
                c.execute("UPDATE jobs SET state='{}' WHERE status<>'running' AND state<>'{}'")
                for job_id, text in c.execute(
                    "SELECT id, result FROM jobs WHERE status='done' AND result IS NOT NULL"
                ).fetchall():
                    result = json.loads(text)
                    changes = result.get("changes") or []
                    if not result.get("consolidated") and not any(ch.get("previous") for ch in changes):
                        continue
                    result["consolidated"] = []
                    for ch in changes:
                        ch["previous"] = None
                    c.execute("UPDATE jobs SET result=? WHERE id=?", (json.dumps(result), job_id))
                return int(n)

        return await self._db.run(op)
