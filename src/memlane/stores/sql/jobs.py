"""Durable formation jobs and per-session formation cursors, written once for every SQL backend.

A job is claimed with a lease: a process killed mid-formation leaves a ``running`` job whose
lease expires, and the next worker (this process after a restart, or another one, maybe on
another replica) claims it again. Two jobs of one key (one session) never run at the same time:
``claim`` takes a job only when no other job of its key runs on a live lease, and ``renew``
(the heartbeat) refuses to extend a lease once another job of the key has been claimed.

What differs is a :class:`JobDialect`:

* **time**: SQLite takes the process's clock once per operation (ISO-8601 text, written into
  the statement as a literal: the value is ours, never the caller's); PostgreSQL the server's
  ``now()`` (the transaction's start), so leases mean the same on every replica;
* **locks**: SQLite's write transaction (``BEGIN IMMEDIATE``) locks the file, so a claim is one
  read and one write; PostgreSQL claimers never wait on each other: each takes the candidate
  key's advisory lock with ``pg_try_advisory_xact_lock`` (moving on to the next key when another
  claimer holds it), then, in a fresh statement under the lock, picks the key's oldest due job
  ``FOR UPDATE SKIP LOCKED`` and checks again that no job of the key runs;
* **encodings**: JSON text or NUL-safe ``jsonb``, and whether a write returns its row
  (``RETURNING``; the core re-reads the row where it does not).
"""

from __future__ import annotations

import builtins
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from memlane.errors import InvalidInputError, NotFoundError
from memlane.models import FormationCursor, Job, new_id, utcnow
from memlane.stores.sql.stmt import Program, Row, Stmt, all_rows, count, one

__all__ = ["JobDialect", "SqlJobStore"]

T = TypeVar("T")

JOB_COLS = (
    "id, kind, key, user_id, status, payload, state, result, attempts, max_attempts, last_error,"
    " next_run_at, created_at, updated_at"
)
#: What a job row reads back: the insertable columns plus the lease holder.
JOB_READ = JOB_COLS + ", worker, lease_until"
CURSOR_COLS = (
    "app, session_id, user_ids, agent_id, tier, last_event_id, formed_events, pending_messages,"
    " pending_tokens, last_activity_at, last_formed_at"
)


class JobDialect(ABC):
    """One backend's differences in the job and cursor tables.

    Attributes:
        key_locks: claimers lock a key (and rows) of their own, so a claim re-reads its job
            under the key's lock; False where the write transaction locks the whole database.
        returning: a write returns its row with ``RETURNING`` (else the core reads it again).
        empty_json: the SQL literal of an empty JSON object.
        for_update: `` FOR UPDATE`` where rows lock, else empty.
    """

    key_locks: bool = False
    returning: bool = False
    empty_json: str = "'{}'"
    for_update: str = ""

    # ------------------------------------------------------------------ values
    @abstractmethod
    def text(self, value: str | None) -> Any:
        """A string as stored and compared."""

    @abstractmethod
    def untext(self, value: Any) -> Any:
        """The inverse of :meth:`text`."""

    @abstractmethod
    def json(self, value: Any) -> Any:
        """JSON data as stored."""

    @abstractmethod
    def unjson(self, value: Any) -> Any:
        """The inverse of :meth:`json`."""

    @abstractmethod
    def ts(self, value: datetime) -> Any:
        """A caller's timestamp, as compared with stored ones."""

    @abstractmethod
    def unts(self, value: Any) -> datetime:
        """A stored timestamp (never NULL) as an aware UTC datetime."""

    def limit(self, n: int) -> Any:
        """A ``LIMIT`` argument (a negative one: no limit)."""
        return n

    # ------------------------------------------------------------------ time
    @abstractmethod
    def now(self, at: datetime) -> str:
        """SQL for "now": ``at`` (this operation's clock reading) or the server's clock."""

    @abstractmethod
    def later(self, at: datetime, seconds: float) -> str:
        """SQL for "now + ``seconds``" (finite)."""

    # ------------------------------------------------------------------ SQL pieces
    @abstractmethod
    def lists_user(self, column: str) -> str:
        """The condition "the JSON array in ``column`` holds the string ``?``"."""

    def result_filter(self) -> str:
        """`` AND ...`` narrowing the done jobs whose results may quote shared memory."""
        return ""

    def key_lock(self, space: str, key: Any, *, wait: bool) -> Program[bool]:
        """Take the transaction-scoped lock of ``key`` (a stored key) in the lock ``space``
        (``"claim"`` or ``"enqueue"``); without ``wait``, False when another holds it. True
        where the write transaction already locks everything."""
        return True
        yield  # pragma: no cover - a program that runs no statement

    # ------------------------------------------------------------------ rows
    def job(self, r: Row) -> Job:
        return Job(
            id=self.untext(r[0]),
            kind=r[1],
            key=self.untext(r[2]),
            user_id=self.untext(r[3]),
            status=r[4],
            payload=self.unjson(r[5]),
            state=self.unjson(r[6]),
            result=self.unjson(r[7]) if r[7] is not None else None,
            attempts=r[8],
            max_attempts=r[9],
            last_error=self.untext(r[10]),
            next_run_at=self.unts(r[11]),
            created_at=self.unts(r[12]),
            updated_at=self.unts(r[13]),
            worker=self.untext(r[14]),
            lease_until=self.unts(r[15]) if r[15] is not None else None,
        )

    def cursor(self, r: Row) -> FormationCursor:
        return FormationCursor(
            app=self.untext(r[0]),
            session_id=self.untext(r[1]),
            user_ids=self.unjson(r[2]),
            agent_id=self.untext(r[3]),
            tier=r[4],
            last_event_id=self.untext(r[5]),
            formed_events=r[6],
            pending_messages=r[7],
            pending_tokens=r[8],
            last_activity_at=self.unts(r[9]),
            last_formed_at=self.unts(r[10]) if r[10] is not None else None,
        )


def _finite(seconds: float) -> float:
    value = float(seconds)
    if not math.isfinite(value):
        raise InvalidInputError(f"a duration in seconds must be finite, got {seconds!r}")
    return value


def _write_read(
    d: JobDialect, sql: str, args: Sequence[Any], cols: str, reread: str, key: Sequence[Any]
) -> Program[Row | None]:
    """Run a write of at most one row and read the row back (``RETURNING`` where the dialect
    has it, else ``reread`` with ``key``); None when the write changed nothing."""
    if d.returning:
        row = yield from one(f"{sql} RETURNING {cols}", args)
        return row
    if (yield from count(sql, args)) == 0:
        return None
    return (yield from one(reread, key))


def _job_by_id(d: JobDialect, sql: str, args: Sequence[Any], job_id: Any) -> Program[Row | None]:
    return (yield from _write_read(d, sql, args, JOB_READ, f"SELECT {JOB_READ} FROM jobs WHERE id=?", (job_id,)))


# ---------------------------------------------------------------------- job programs
def enqueue(
    d: JobDialect, kind: str, key: str, payload: dict[str, Any], user_id: str | None, max_attempts: int, coalesce: bool
) -> Program[Job]:
    now = d.now(utcnow())
    if coalesce:
        # Two writers coalescing into one key at once must still make one job.
        yield from d.key_lock("enqueue", d.text(key), wait=True)
        row = yield from one(
            f"SELECT id, payload FROM jobs WHERE key=? AND kind=? AND status='queued' AND state={d.empty_json}"
            f" ORDER BY created_at LIMIT 1{d.for_update}",
            (d.text(key), d.text(kind)),
        )
        if row is not None:
            merged = {**d.unjson(row[1]), **payload}
            sql = f"UPDATE jobs SET payload=?, updated_at={now} WHERE id=?"
            found = yield from _job_by_id(d, sql, (d.json(merged), row[0]), row[0])
            assert found is not None
            return d.job(found)
    jid = d.text(new_id())
    sql = f"INSERT INTO jobs ({JOB_COLS}) VALUES (?,?,?,?,'queued',?,{d.empty_json},NULL,0,?,NULL,{now},{now},{now})"
    args = (jid, d.text(kind), d.text(key), d.text(user_id), d.json(payload), max_attempts)
    row = yield from _job_by_id(d, sql, args, jid)
    assert row is not None
    return d.job(row)


def _key_free(now: str) -> str:
    """... of a key with no other job running on a live lease."""
    return (
        "NOT EXISTS (SELECT 1 FROM jobs o WHERE o.key=j.key AND o.id<>j.id AND o.status='running'"
        f" AND o.lease_until>={now})"
    )


def claim(d: JobDialect, worker: str, lease_seconds: float, job_id: str | None) -> Program[Job | None]:
    at = utcnow()
    now, lease = d.now(at), d.later(at, _finite(lease_seconds))
    # A job that may be taken now: due and queued, or running on an expired lease.
    where = f"(j.status='queued' AND j.next_run_at<={now}) OR (j.status='running' AND j.lease_until<{now})"
    args: list[Any] = []
    if job_id is not None:
        where = f"j.id=? AND (j.status='queued' OR (j.status='running' AND j.lease_until<{now}))"
        args = [d.text(job_id)]
    free, order = _key_free(now), "ORDER BY j.next_run_at, j.created_at LIMIT 1"
    skip: list[Any] = []
    while True:
        # 1. the oldest claimable job (where keys lock: no row lock yet, only under the key's lock)
        skipped = f" AND j.key NOT IN ({','.join('?' * len(skip))})" if skip else ""
        row = yield from one(
            f"SELECT j.id, j.key FROM jobs j WHERE ({where}) AND {free}{skipped} {order}", (*args, *skip)
        )
        if row is None:
            return None
        if d.key_locks:
            key = row[1]
            skip.append(key)
            # 2. the key's lock, held to commit: one claimer per key at a time, nobody waits
            if not (yield from d.key_lock("claim", key, wait=False)):
                continue  # another claimer is taking a job of this key right now
            # 3. a fresh statement under the lock sees every claim of this key committed so far
            row = yield from one(
                f"SELECT j.id FROM jobs j WHERE j.key=? AND ({where}) AND {free} {order} FOR UPDATE OF j SKIP LOCKED",
                (key, *args),
            )
            if row is None:
                continue  # claimed (or finished) by someone else meanwhile
        taken = yield from _job_by_id(
            d,
            f"UPDATE jobs SET status='running', lease_until={lease}, worker=?, updated_at={now} WHERE id=?",
            (d.text(worker), row[0]),
            row[0],
        )
        assert taken is not None
        return d.job(taken)


def renew(d: JobDialect, job_id: str, worker: str, lease_seconds: float) -> Program[bool]:
    at = utcnow()
    now, lease = d.now(at), d.later(at, _finite(lease_seconds))
    if d.key_locks:
        row = yield from one("SELECT key FROM jobs WHERE id=?", (d.text(job_id),))
        if row is None:
            return False
        # Blocking is safe: claimers hold this lock briefly and never wait for anything.
        yield from d.key_lock("claim", row[0], wait=True)
    n = yield from count(
        f"UPDATE jobs AS j SET lease_until={lease}"
        f" WHERE j.id=? AND j.status='running' AND j.worker=? AND {_key_free(now)}",
        (d.text(job_id), d.text(worker)),
    )
    return n == 1


def fail(d: JobDialect, job_id: str, error: str, retry_in: float | None) -> Program[Job]:
    at = utcnow()
    row = yield from _job_by_id(
        d,
        "UPDATE jobs SET attempts=attempts+1,"
        " status=CASE WHEN ? OR attempts+1>=max_attempts THEN 'failed' ELSE 'queued' END,"
        f" last_error=?, next_run_at={d.later(at, _finite(retry_in or 0))}, lease_until=NULL,"
        f" updated_at={d.now(at)} WHERE id=?",
        (retry_in is None, d.text(error[:2000]), d.text(job_id)),
        d.text(job_id),
    )
    if row is None:
        raise NotFoundError(f"no job {job_id!r}")
    return d.job(row)


def retry(d: JobDialect, job_id: str) -> Program[Job]:
    now = d.now(utcnow())
    yield Stmt(
        f"UPDATE jobs SET status='queued', attempts=0, next_run_at={now}, updated_at={now}"
        " WHERE id=? AND status IN ('failed', 'queued')",
        (d.text(job_id),),
    )
    row = yield from one(f"SELECT {JOB_READ} FROM jobs WHERE id=?", (d.text(job_id),))
    if row is None:
        raise NotFoundError(f"no job {job_id!r}")
    return d.job(row)


def list_jobs(d: JobDialect, status: str | None, key: str | None, limit: int) -> Program[list[Job]]:
    where, args = ["1=1"], []
    if status is not None:
        where.append("status=?")
        args.append(d.text(status))
    if key is not None:
        where.append("key=?")
        args.append(d.text(key))
    rows = yield from all_rows(
        f"SELECT {JOB_READ} FROM jobs WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT ?",
        (*args, d.limit(limit)),
    )
    return [d.job(r) for r in rows]


def purge_user(d: JobDialect, user_id: str, cursors: bool) -> Program[int]:
    """The user's jobs, (``cursors``) their solo sessions' cursors and their place in group
    cursors; checkpoints of jobs not running dropped, quoted memory out of done results."""
    user = d.text(user_id)
    n = yield from count("DELETE FROM jobs WHERE user_id=?", (user,))
    if cursors:
        n += yield from count("DELETE FROM formation_cursors WHERE user_ids=?", (d.json([user_id]),))
        # a group session's cursor stays, without the user (as the session's participants)
        groups = yield from all_rows(
            f"SELECT app, session_id, user_ids FROM formation_cursors WHERE {d.lists_user('user_ids')}{d.for_update}",
            (user,),
        )
        for app, sid, users in groups:
            kept = [u for u in d.unjson(users) if u != user_id]
            yield Stmt("UPDATE formation_cursors SET user_ids=? WHERE app=? AND session_id=?", (d.json(kept), app, sid))
    yield Stmt(f"UPDATE jobs SET state={d.empty_json} WHERE status<>'running' AND state<>{d.empty_json}")
    done = yield from all_rows(
        f"SELECT id, result FROM jobs WHERE status='done' AND result IS NOT NULL{d.result_filter()}"
    )
    for job_id, stored in done:
        result = d.unjson(stored)
        changes = result.get("changes") or []
        if not result.get("consolidated") and not any(ch.get("previous") for ch in changes):
            continue
        result["consolidated"] = []
        for ch in changes:
            ch["previous"] = None
        yield Stmt("UPDATE jobs SET result=? WHERE id=?", (d.json(result), job_id))
    return int(n)


# ---------------------------------------------------------------------- cursor programs
def _cursor_by_key(d: JobDialect, sql: str, args: Sequence[Any], key: Sequence[Any]) -> Program[Row | None]:
    reread = f"SELECT {CURSOR_COLS} FROM formation_cursors WHERE app=? AND session_id=?"
    return (yield from _write_read(d, sql, args, CURSOR_COLS, reread, key))


def touch(
    d: JobDialect,
    app: str,
    session_id: str,
    user_ids: Sequence[str],
    agent_id: str | None,
    tier: int | None,
    messages: int,
    tokens: float,
) -> Program[FormationCursor]:
    now = d.now(utcnow())
    key = (d.text(app), d.text(session_id))
    row = yield from _cursor_by_key(
        d,
        f"INSERT INTO formation_cursors ({CURSOR_COLS}) VALUES (?,?,?,?,?,NULL,0,?,?,{now},NULL)"
        " ON CONFLICT (app, session_id) DO UPDATE SET user_ids=excluded.user_ids,"
        " agent_id=COALESCE(excluded.agent_id, formation_cursors.agent_id),"
        " tier=CASE WHEN CAST(? AS INTEGER) IS NULL THEN formation_cursors.tier ELSE excluded.tier END,"
        " pending_messages=formation_cursors.pending_messages+excluded.pending_messages,"
        " pending_tokens=formation_cursors.pending_tokens+excluded.pending_tokens,"
        " last_activity_at=excluded.last_activity_at",
        (*key, d.json(list(user_ids)), d.text(agent_id), tier or 0, messages, float(tokens), tier),
        key,
    )
    assert row is not None
    return d.cursor(row)


def advance(d: JobDialect, app: str, session_id: str, last_event_id: str, formed: int) -> Program[None]:
    now = d.now(utcnow())
    # An upsert: a session whose events were written straight to the session store
    # has no cursor yet, and must not be formed again from its first event.
    yield Stmt(
        "INSERT INTO formation_cursors (app, session_id, last_event_id, formed_events, last_activity_at,"
        f" last_formed_at) VALUES (?,?,?,?,{now},{now}) ON CONFLICT (app, session_id) DO UPDATE SET"
        " last_event_id=excluded.last_event_id,"
        " formed_events=formation_cursors.formed_events+excluded.formed_events,"
        " last_formed_at=excluded.last_formed_at",
        (d.text(app), d.text(session_id), d.text(last_event_id), formed),
    )


def _get(d: JobDialect, sql: str, args: Sequence[Any]) -> Program[Row | None]:
    return (yield from one(sql, args))


class SqlJobStore(ABC):
    """:class:`~memlane.stores.base.JobStore` over one SQL dialect: leasing, heartbeats,
    retries and cursors once; a backend supplies the dialect and the runners."""

    # ------------------------------------------------------------------ what a backend supplies
    @property
    @abstractmethod
    def _d(self) -> JobDialect:
        """The backend's job dialect."""

    @abstractmethod
    async def _query(self, program: Program[T]) -> T:
        """Run a read."""

    @abstractmethod
    async def _write(self, program: Program[T]) -> T:
        """Run a write of one statement (atomic by itself)."""

    @abstractmethod
    async def _transact(self, program: Program[T]) -> T:
        """Run a program in one write transaction (rolled back when it raises)."""

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
        """Queue a job; with ``coalesce``, merge ``payload`` into the oldest queued job of the
        same kind and key that has not started (no checkpoint) instead."""
        return await self._transact(enqueue(self._d, kind, key, payload, user_id, max_attempts, coalesce))

    async def claim(self, worker: str, *, lease_seconds: float, job_id: str | None = None) -> Job | None:
        """Take the oldest due job (or ``job_id``) whose key has no other running job; None if
        none. Atomic across processes (see the module docstring)."""
        return await self._transact(claim(self._d, worker, lease_seconds, job_id))

    async def renew(self, job_id: str, worker: str, *, lease_seconds: float) -> bool:
        """Heartbeat: extend ``worker``'s lease on a running job to now + ``lease_seconds``.
        False when the job is no longer running under this worker (done, released, or
        claimed by another worker after the lease expired), and also when its lease expired
        and another job of its key has been claimed since: a late heartbeat never makes two
        jobs of one key run at once."""
        return await self._transact(renew(self._d, job_id, worker, lease_seconds))

    async def checkpoint(self, job_id: str, state: dict[str, Any]) -> None:
        """Save step outputs so a replay does not call the model again."""
        d = self._d
        sql = f"UPDATE jobs SET state=?, updated_at={d.now(utcnow())} WHERE id=?"
        await self._write(_run(Stmt(sql, (d.json(state), d.text(job_id)))))

    async def complete(self, job_id: str, result: dict[str, Any]) -> None:
        d = self._d
        sql = (
            f"UPDATE jobs SET status='done', result=?, lease_until=NULL, last_error=NULL, updated_at={d.now(utcnow())}"
            " WHERE id=?"
        )
        await self._write(_run(Stmt(sql, (d.json(result), d.text(job_id)))))

    async def fail(self, job_id: str, error: str, *, retry_in: float | None) -> Job:
        """Count a failed attempt: back to ``queued`` after ``retry_in`` seconds, or ``failed``
        when ``retry_in`` is None or the attempts are used up."""
        return await (self._write if self._d.returning else self._transact)(fail(self._d, job_id, error, retry_in))

    async def release(self, job_id: str) -> None:
        """Give a running job back (worker stopping): queued again, attempt not counted."""
        d = self._d
        sql = (
            f"UPDATE jobs SET status='queued', lease_until=NULL, updated_at={d.now(utcnow())}"
            " WHERE id=? AND status='running'"
        )
        await self._write(_run(Stmt(sql, (d.text(job_id),))))

    async def retry(self, job_id: str) -> Job:
        """Re-queue a failed job now, with a fresh set of attempts."""
        return await self._transact(retry(self._d, job_id))

    async def get(self, job_id: str) -> Job | None:
        d = self._d
        row = await self._query(_get(d, f"SELECT {JOB_READ} FROM jobs WHERE id=?", (d.text(job_id),)))
        return d.job(row) if row is not None else None

    async def list(self, *, status: str | None = None, key: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """Jobs, newest first, optionally of one status and/or key."""
        return await self._query(list_jobs(self._d, status, key, limit))

    async def next_due(self) -> datetime | None:
        """When the earliest queued job becomes due, or a running job's lease runs out (None
        when there is neither)."""
        row = await self._query(
            _get(
                self._d,
                "SELECT MIN(t) FROM (SELECT MIN(next_run_at) AS t FROM jobs WHERE status='queued'"
                " UNION ALL SELECT MIN(lease_until) FROM jobs WHERE status='running') AS due",
                (),
            )
        )
        return self._d.unts(row[0]) if row is not None and row[0] is not None else None

    async def counts(self) -> dict[str, int]:
        rows = await self._query(all_rows("SELECT status, COUNT(*) FROM jobs GROUP BY status"))
        return {s: int(n) for s, n in rows}

    async def purge_user(self, user_id: str, *, cursors: bool = True) -> int:
        """Delete the user's jobs and (``cursors=True``) the cursors of sessions they took part in alone.
        ``cursors=False`` keeps the cursors, for a purge that keeps the user's sessions.

        Other users' jobs can hold this user's words through the agent's shared memory: dedup
        candidates in their checkpoints, the agent blob or a replaced agent fact in their
        results. Checkpoints of jobs not running now are dropped (a replay recomputes them) and
        those texts are removed from finished jobs' results. One transaction."""
        return await self._transact(purge_user(self._d, user_id, cursors))

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
        program = touch(self._d, app, session_id, user_ids, agent_id, tier, messages, tokens)
        return await (self._write if self._d.returning else self._transact)(program)

    async def get_cursor(self, app: str, session_id: str) -> FormationCursor | None:
        d = self._d
        sql = f"SELECT {CURSOR_COLS} FROM formation_cursors WHERE app=? AND session_id=?"
        row = await self._query(_get(d, sql, (d.text(app), d.text(session_id))))
        return d.cursor(row) if row is not None else None

    async def reset_pending(self, app: str, session_id: str) -> None:
        """A formation was scheduled: the trigger counters start again from zero."""
        d = self._d
        sql = "UPDATE formation_cursors SET pending_messages=0, pending_tokens=0 WHERE app=? AND session_id=?"
        await self._write(_run(Stmt(sql, (d.text(app), d.text(session_id)))))

    async def advance(self, app: str, session_id: str, *, last_event_id: str, formed: int) -> None:
        """Events up to ``last_event_id`` are formed."""
        await self._write(advance(self._d, app, session_id, last_event_id, formed))

    async def delete_cursor(self, app: str, session_id: str) -> None:
        d = self._d
        sql = "DELETE FROM formation_cursors WHERE app=? AND session_id=?"
        await self._write(_run(Stmt(sql, (d.text(app), d.text(session_id)))))

    async def idle_cursors(self, before: datetime, *, limit: int = 1000) -> builtins.list[FormationCursor]:
        """Sessions whose last activity is older than ``before``, oldest first."""
        d = self._d
        rows = await self._query(
            all_rows(
                f"SELECT {CURSOR_COLS} FROM formation_cursors WHERE last_activity_at<?"
                " ORDER BY last_activity_at LIMIT ?",
                (d.ts(before), d.limit(limit)),
            )
        )
        return [d.cursor(r) for r in rows]


def _run(stmt: Stmt) -> Program[None]:
    yield stmt
