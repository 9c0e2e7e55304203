"""Durable formation jobs and per-session formation cursors in PostgreSQL (``PgJobStore``).

The port of :mod:`memlane.stores.sqlite.jobs` for many workers and replicas on one database:

* ``claim`` is one transaction that never waits on another claimer: it finds the key of the
  oldest due job, takes that key's lock with ``pg_try_advisory_xact_lock`` (moving on to the
  next key when another claimer holds it), then, in a fresh statement under the lock, picks the
  key's oldest due job with ``FOR UPDATE SKIP LOCKED`` and checks again that no job of the key
  runs. The key lock closes the race where two claimers pick two *different* queued jobs of one
  key at the same moment: only one gets the lock, and it is released only when its transaction
  commits, so the other's re-check sees the job it started.
* Every time is the database server's (``now()``: the transaction's start), never a replica's
  clock, so leases mean the same thing on every machine. ``idle_cursors(before)`` compares the
  server's activity stamps with the caller's ``before``.
* Strings (ids, keys, errors, JSON strings in payloads, checkpoints and results) go through
  the NUL-safe codec of :mod:`memlane.stores.postgres.rows`, as in every PostgreSQL store.
* ``enqueue(coalesce=True)`` holds a per-key advisory lock (another lock space than
  ``claim``'s) so two replicas coalescing into one key at once still make one job.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from memlane.errors import InvalidInputError, NotFoundError, StorageError
from memlane.models import FormationCursor, Job, as_utc, new_id
from memlane.stores.postgres.db import PgDatabase
from memlane.stores.postgres.rows import dec, dec_json, enc, enc_json

__all__ = ["PgJobStore"]

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
#: Advisory lock spaces (first key of the two-int form), per schema so tenants never collide.
_CLAIM_SPACE = "hashtext('memlane.jobs.claim:' || current_schema())"
_ENQUEUE_SPACE = "hashtext('memlane.jobs.enqueue:' || current_schema())"
#: A job that may be taken now: due and queued, or running on an expired lease.
_DUE = "(j.status='queued' AND j.next_run_at<=now()) OR (j.status='running' AND j.lease_until<now())"
#: ... of a key with no other job running on a live lease.
_KEY_FREE = (
    "NOT EXISTS (SELECT 1 FROM jobs o WHERE o.key=j.key AND o.id<>j.id AND o.status='running' AND o.lease_until>=now())"
)


def _job(r: Sequence[Any]) -> Job:
    return Job(
        id=dec(r[0]), kind=r[1], key=dec(r[2]), user_id=dec(r[3]), status=r[4], payload=dec_json(r[5]),
        state=dec_json(r[6]), result=dec_json(r[7]), attempts=r[8], max_attempts=r[9], last_error=dec(r[10]),
        next_run_at=as_utc(r[11]), created_at=as_utc(r[12]), updated_at=as_utc(r[13]), worker=dec(r[14]),
        lease_until=as_utc(r[15]) if r[15] is not None else None,
    )  # fmt: skip


def _cursor(r: Sequence[Any]) -> FormationCursor:
    return FormationCursor(
        app=dec(r[0]), session_id=dec(r[1]), user_ids=dec_json(r[2]), agent_id=dec(r[3]), tier=r[4],
        last_event_id=dec(r[5]), formed_events=r[6], pending_messages=r[7], pending_tokens=r[8],
        last_activity_at=as_utc(r[9]), last_formed_at=as_utc(r[10]) if r[10] is not None else None,
    )  # fmt: skip


def _json(value: Any) -> Jsonb:
    """JSON data as ``jsonb`` can hold it (strings through the NUL-safe codec)."""
    return Jsonb(enc_json(value))


def _limit(limit: int) -> int | None:
    """SQLite reads a negative LIMIT as "no limit"; PostgreSQL's spelling of that is NULL."""
    return None if limit < 0 else limit


def _export_row(names: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """A row for an export: decoded, timestamps as ISO-8601 text (what the SQLite export holds)."""
    return {k: v.isoformat() if isinstance(v, datetime) else dec_json(v) for k, v in zip(names, row, strict=True)}


class PgJobStore:
    """Jobs and cursors (see :class:`memlane.stores.base.JobStore`) on a :class:`PgDatabase`.

    Args:
        db: the database to share with the other stores of the location; this store takes a
            reference now and gives it back once on :meth:`close` (the pool closes with the
            last reference).
    """

    def __init__(self, db: PgDatabase) -> None:
        self._db = db.acquire()
        self._closed = False

    async def close(self) -> None:
        """Give back the database reference. Idempotent; other calls afterwards raise StorageError."""
        if self._closed:
            return
        self._closed = True
        await self._db.release()

    # ------------------------------------------------------------------ plumbing
    @asynccontextmanager
    async def _tx(self, *, single: bool = False) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One transaction (``single``: an autocommit connection, for one statement, which is
        atomic by itself and saves the BEGIN/COMMIT round trips); a value PostgreSQL refuses
        (NaN in ``jsonb``, say) is bad input (nothing is written), any other database failure a
        StorageError."""
        if self._closed:
            raise StorageError("this PgJobStore is closed; open a new one")
        try:
            async with self._db.connection() if single else self._db.transaction() as conn:
                yield conn
        except psycopg.DataError as exc:
            raise InvalidInputError(f"PostgreSQL refused a job value: {exc.diag.message_primary or exc}") from exc
        except psycopg.Error as exc:
            raise StorageError(f"job store: {exc}") from exc

    async def check(self) -> builtins.list[str]:
        """Broken job invariants (empty when healthy): running jobs without a lease, and keys
        with more than one job running on a live lease. Reads only."""
        problems: builtins.list[str] = []
        async with self._tx() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM jobs WHERE status='running' AND (lease_until IS NULL OR worker IS NULL)"
            )
            row = await cur.fetchone()
            if row is not None and row[0]:
                problems.append(f"jobs: {row[0]} running job(s) without a lease holder")
            cur = await conn.execute(
                "SELECT key, count(*) FROM jobs WHERE status='running' AND lease_until>=now()"
                " GROUP BY key HAVING count(*)>1 ORDER BY key LIMIT 100"
            )
            for key, n in await cur.fetchall():
                problems.append(f"jobs: key {dec(key)!r} has {n} jobs running at once")
        return problems

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
        async with self._tx() as conn:
            if coalesce:
                # Two replicas coalescing into one key at once must still make one job.
                await conn.execute(f"SELECT pg_advisory_xact_lock({_ENQUEUE_SPACE}, hashtext(%s))", (enc(key),))
                cur = await conn.execute(
                    "SELECT id FROM jobs WHERE key=%s AND kind=%s AND status='queued' AND state='{}'::jsonb"
                    " ORDER BY created_at LIMIT 1 FOR UPDATE",
                    (enc(key), enc(kind)),
                )
                row = await cur.fetchone()
                if row is not None:
                    cur = await conn.execute(
                        f"UPDATE jobs SET payload=payload || %s, updated_at=now() WHERE id=%s RETURNING {_JOB_READ}",
                        (_json(payload), row[0]),
                    )
                    merged = await cur.fetchone()
                    assert merged is not None
                    return _job(merged)
            cur = await conn.execute(
                f"INSERT INTO jobs ({_JOB_COLS}) VALUES"
                f" (%s,%s,%s,%s,'queued',%s,'{{}}',NULL,0,%s,NULL,now(),now(),now()) RETURNING {_JOB_READ}",
                (new_id(), enc(kind), enc(key), enc(user_id), _json(payload), max_attempts),
            )
            row = await cur.fetchone()
            assert row is not None
            return _job(row)

    async def claim(self, worker: str, *, lease_seconds: float, job_id: str | None = None) -> Job | None:
        """Take the oldest due job (or ``job_id``) whose key has no other running job; None if none.

        Atomic across processes, and never waits on another claimer: see the module docstring.
        """
        where = _DUE
        args: builtins.list[Any] = []
        if job_id is not None:
            where = "j.id=%s AND (j.status='queued' OR (j.status='running' AND j.lease_until<now()))"
            args = [enc(job_id)]
        order = "ORDER BY j.next_run_at, j.created_at LIMIT 1"
        skip_keys: builtins.list[str] = []
        async with self._tx() as conn:
            while True:
                # 1. the key of the oldest claimable job (no row lock: rows are locked only under the key's lock)
                cur = await conn.execute(
                    f"SELECT j.key FROM jobs j WHERE ({where}) AND {_KEY_FREE} AND NOT (j.key = ANY(%s)) {order}",
                    (*args, skip_keys),
                )
                row = await cur.fetchone()
                if row is None:
                    return None
                key = row[0]
                # 2. the key's lock, held to commit: one claimer per key at a time, nobody waits
                cur = await conn.execute(f"SELECT pg_try_advisory_xact_lock({_CLAIM_SPACE}, hashtext(%s))", (key,))
                locked = await cur.fetchone()
                skip_keys.append(key)
                if locked is None or not locked[0]:
                    continue  # another claimer is taking a job of this key right now
                # 3. a fresh statement under the lock sees every claim of this key committed so far
                cur = await conn.execute(
                    f"SELECT j.id FROM jobs j WHERE j.key=%s AND ({where}) AND {_KEY_FREE}"
                    f" {order} FOR UPDATE OF j SKIP LOCKED",
                    (key, *args),
                )
                row = await cur.fetchone()
                if row is None:
                    continue  # claimed (or finished) by someone else meanwhile
                cur = await conn.execute(
                    "UPDATE jobs SET status='running', lease_until=now() + make_interval(secs => %s), worker=%s,"
                    f" updated_at=now() WHERE id=%s RETURNING {_JOB_READ}",
                    (float(lease_seconds), enc(worker), row[0]),
                )
                taken = await cur.fetchone()
                assert taken is not None
                return _job(taken)

    async def renew(self, job_id: str, worker: str, *, lease_seconds: float) -> bool:
        """Heartbeat: extend ``worker``'s lease on a running job to now + ``lease_seconds``.
        False when the job is no longer running under this worker (done, released, or
        claimed by another worker after the lease expired), and also when its lease expired
        and another job of its key has been claimed since: a late heartbeat never makes two
        jobs of one key run at once. Under the key's claim lock, so no claim slips in between."""
        async with self._tx() as conn:
            cur = await conn.execute("SELECT key FROM jobs WHERE id=%s", (enc(job_id),))
            row = await cur.fetchone()
            if row is None:
                return False
            # Blocking is safe: claimers hold this lock briefly and never wait for anything.
            await conn.execute(f"SELECT pg_advisory_xact_lock({_CLAIM_SPACE}, hashtext(%s))", (row[0],))
            cur = await conn.execute(
                "UPDATE jobs j SET lease_until=now() + make_interval(secs => %s)"
                f" WHERE j.id=%s AND j.status='running' AND j.worker=%s AND {_KEY_FREE}",
                (float(lease_seconds), enc(job_id), enc(worker)),
            )
            return cur.rowcount == 1

    async def checkpoint(self, job_id: str, state: dict[str, Any]) -> None:
        """Save step outputs so a replay does not call the model again."""
        async with self._tx(single=True) as conn:
            await conn.execute("UPDATE jobs SET state=%s, updated_at=now() WHERE id=%s", (_json(state), enc(job_id)))

    async def complete(self, job_id: str, result: dict[str, Any]) -> None:
        async with self._tx(single=True) as conn:
            await conn.execute(
                "UPDATE jobs SET status='done', result=%s, lease_until=NULL, last_error=NULL, updated_at=now()"
                " WHERE id=%s",
                (_json(result), enc(job_id)),
            )

    async def fail(self, job_id: str, error: str, *, retry_in: float | None) -> Job:
        """Count a failed attempt: back to ``queued`` after ``retry_in`` seconds, or ``failed``
        when ``retry_in`` is None or the attempts are used up."""
        async with self._tx(single=True) as conn:
            cur = await conn.execute(
                "UPDATE jobs SET attempts=attempts+1,"
                " status=CASE WHEN %s OR attempts+1>=max_attempts THEN 'failed' ELSE 'queued' END,"
                " last_error=%s, next_run_at=now() + make_interval(secs => %s), lease_until=NULL, updated_at=now()"
                f" WHERE id=%s RETURNING {_JOB_READ}",
                (retry_in is None, enc(error[:2000]), float(retry_in or 0), enc(job_id)),
            )
            row = await cur.fetchone()
            if row is None:
                raise NotFoundError(f"no job {job_id!r}")
            return _job(row)

    async def release(self, job_id: str) -> None:
        """Give a running job back (worker stopping): queued again, attempt not counted."""
        async with self._tx(single=True) as conn:
            await conn.execute(
                "UPDATE jobs SET status='queued', lease_until=NULL, updated_at=now() WHERE id=%s AND status='running'",
                (enc(job_id),),
            )

    async def retry(self, job_id: str) -> Job:
        """Re-queue a failed job now, with a fresh set of attempts."""
        async with self._tx() as conn:
            await conn.execute(
                "UPDATE jobs SET status='queued', attempts=0, next_run_at=now(), updated_at=now()"
                " WHERE id=%s AND status IN ('failed', 'queued')",
                (enc(job_id),),
            )
            cur = await conn.execute(f"SELECT {_JOB_READ} FROM jobs WHERE id=%s", (enc(job_id),))
            row = await cur.fetchone()
            if row is None:
                raise NotFoundError(f"no job {job_id!r}")
            return _job(row)

    async def get(self, job_id: str) -> Job | None:
        async with self._tx(single=True) as conn:
            cur = await conn.execute(f"SELECT {_JOB_READ} FROM jobs WHERE id=%s", (enc(job_id),))
            row = await cur.fetchone()
            return _job(row) if row is not None else None

    async def list(self, *, status: str | None = None, key: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """Jobs, newest first, optionally of one status and/or key."""
        where, args = ["TRUE"], []
        if status is not None:
            where.append("status=%s")
            args.append(enc(status))
        if key is not None:
            where.append("key=%s")
            args.append(enc(key))
        async with self._tx(single=True) as conn:
            cur = await conn.execute(
                f"SELECT {_JOB_READ} FROM jobs WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %s",
                (*args, _limit(limit)),
            )
            return [_job(r) for r in await cur.fetchall()]

    async def next_due(self) -> datetime | None:
        """When the earliest queued job becomes due, or a running job's lease runs out (None
        when there is neither)."""
        async with self._tx(single=True) as conn:
            cur = await conn.execute(
                "SELECT LEAST((SELECT MIN(next_run_at) FROM jobs WHERE status='queued'),"
                " (SELECT MIN(lease_until) FROM jobs WHERE status='running'))"
            )
            row = await cur.fetchone()
            return as_utc(row[0]) if row is not None and row[0] is not None else None

    async def counts(self) -> dict[str, int]:
        async with self._tx(single=True) as conn:
            cur = await conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status")
            return {s: int(n) for s, n in await cur.fetchall()}

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
        async with self._tx(single=True) as conn:
            cur = await conn.execute(
                f"INSERT INTO formation_cursors ({_CURSOR_COLS}) VALUES (%s,%s,%s,%s,%s,NULL,0,%s,%s,now(),NULL)"
                " ON CONFLICT (app, session_id) DO UPDATE SET user_ids=excluded.user_ids,"
                " agent_id=COALESCE(excluded.agent_id, formation_cursors.agent_id),"
                " tier=CASE WHEN %s::integer IS NULL THEN formation_cursors.tier ELSE excluded.tier END,"
                " pending_messages=formation_cursors.pending_messages+excluded.pending_messages,"
                " pending_tokens=formation_cursors.pending_tokens+excluded.pending_tokens,"
                f" last_activity_at=excluded.last_activity_at RETURNING {_CURSOR_COLS}",
                (
                    enc(app),
                    enc(session_id),
                    _json(list(user_ids)),
                    enc(agent_id),
                    tier or 0,
                    messages,
                    float(tokens),
                    tier,
                ),
            )
            row = await cur.fetchone()
            assert row is not None
            return _cursor(row)

    async def get_cursor(self, app: str, session_id: str) -> FormationCursor | None:
        async with self._tx(single=True) as conn:
            cur = await conn.execute(
                f"SELECT {_CURSOR_COLS} FROM formation_cursors WHERE app=%s AND session_id=%s",
                (enc(app), enc(session_id)),
            )
            row = await cur.fetchone()
            return _cursor(row) if row is not None else None

    async def reset_pending(self, app: str, session_id: str) -> None:
        """A formation was scheduled: the trigger counters start again from zero."""
        async with self._tx(single=True) as conn:
            await conn.execute(
                "UPDATE formation_cursors SET pending_messages=0, pending_tokens=0 WHERE app=%s AND session_id=%s",
                (enc(app), enc(session_id)),
            )

    async def advance(self, app: str, session_id: str, *, last_event_id: str, formed: int) -> None:
        """Events up to ``last_event_id`` are formed."""
        async with self._tx(single=True) as conn:
            # An upsert: a session whose events were written straight to the session store
            # has no cursor yet, and must not be formed again from its first event.
            await conn.execute(
                "INSERT INTO formation_cursors (app, session_id, last_event_id, formed_events, last_activity_at,"
                " last_formed_at) VALUES (%s,%s,%s,%s,now(),now()) ON CONFLICT (app, session_id) DO UPDATE SET"
                " last_event_id=excluded.last_event_id,"
                " formed_events=formation_cursors.formed_events+excluded.formed_events,"
                " last_formed_at=excluded.last_formed_at",
                (enc(app), enc(session_id), enc(last_event_id), formed),
            )

    async def delete_cursor(self, app: str, session_id: str) -> None:
        async with self._tx(single=True) as conn:
            await conn.execute(
                "DELETE FROM formation_cursors WHERE app=%s AND session_id=%s", (enc(app), enc(session_id))
            )

    async def idle_cursors(self, before: datetime, *, limit: int = 1000) -> builtins.list[FormationCursor]:
        """Sessions whose last activity is older than ``before``, oldest first."""
        async with self._tx(single=True) as conn:
            cur = await conn.execute(
                f"SELECT {_CURSOR_COLS} FROM formation_cursors WHERE last_activity_at<%s"
                " ORDER BY last_activity_at LIMIT %s",
                (as_utc(before), _limit(limit)),
            )
            return [_cursor(r) for r in await cur.fetchall()]

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's jobs (input and status; checkpoints and results are derived and may quote
        the agent's shared memory) and the formation cursors of their sessions, as the SQLite
        store exports them (:func:`memlane.stores.sqlite.export.jobs_part`)."""
        async with self._tx() as conn:
            cur = await conn.execute(
                "SELECT id, kind, key, status, payload, attempts, max_attempts, last_error, next_run_at, created_at,"
                " updated_at FROM jobs WHERE user_id=%s ORDER BY created_at, id",
                (enc(user_id),),
            )
            names = [d.name for d in cur.description or ()]
            jobs = [_export_row(names, r) for r in await cur.fetchall()]
            cur = await conn.execute(
                f"SELECT {_CURSOR_COLS} FROM formation_cursors WHERE user_ids @> jsonb_build_array(%s::text)"
                " ORDER BY app, session_id",
                (enc(user_id),),
            )
            names = [d.name for d in cur.description or ()]
            cursors = [_export_row(names, r) for r in await cur.fetchall()]
        return {"jobs": jobs, "formation_cursors": cursors}

    async def purge_user(self, user_id: str, *, cursors: bool = True) -> int:
        """Delete the user's jobs and (``cursors=True``) the cursors of sessions they took part in alone.
        ``cursors=False`` keeps the cursors, for a purge that keeps the user's sessions.

        Other users' jobs can hold this user's words through the agent's shared memory: dedup
        candidates in their checkpoints, the agent blob or a replaced agent fact in their
        results. Checkpoints of jobs not running now are dropped (a replay recomputes them) and
        those texts are removed from finished jobs' results. One transaction."""
        user = enc(user_id)
        async with self._tx() as conn:
            cur = await conn.execute("DELETE FROM jobs WHERE user_id=%s", (user,))
            n = cur.rowcount
            if cursors:
                cur = await conn.execute("DELETE FROM formation_cursors WHERE user_ids=%s", (Jsonb([user]),))
                n += cur.rowcount
                # a group session's cursor stays, without the user (as the session's participants)
                await conn.execute(
                    "UPDATE formation_cursors SET user_ids=COALESCE((SELECT jsonb_agg(u.v ORDER BY u.i)"
                    " FROM jsonb_array_elements(user_ids) WITH ORDINALITY AS u(v, i) WHERE u.v <> to_jsonb(%s::text)),"
                    " '[]'::jsonb) WHERE user_ids @> jsonb_build_array(%s::text)",
                    (user, user),
                )
            await conn.execute("UPDATE jobs SET state='{}'::jsonb WHERE status<>'running' AND state<>'{}'::jsonb")
            cur = await conn.execute(
                "SELECT id, result FROM jobs WHERE status='done' AND result IS NOT NULL"
                " AND (result ? 'consolidated' OR jsonb_path_exists(result, '$.changes[*].previous'))"
            )
            for job_id, result in await cur.fetchall():
                changes = result.get("changes") or []
                if not result.get("consolidated") and not any(ch.get("previous") for ch in changes):
                    continue
                result["consolidated"] = []
                for ch in changes:
                    ch["previous"] = None
                # ``result`` is as stored (encoded): written back as is
                await conn.execute("UPDATE jobs SET result=%s WHERE id=%s", (Jsonb(result), job_id))
            return int(n)
