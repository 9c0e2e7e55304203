"""``/v1/jobs``: formation jobs (queued by form/end/reset, ``add(infer=True)``, triggers).

A user-bound key sees only its own jobs: those owned by its user, and formation jobs of
sessions its user took part in when the job was queued (the participants are stored with the
job, so a session id reused by another user reaches none of the earlier session's jobs).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from memlane.errors import NotFoundError
from memlane.memory import AsyncMemory
from memlane.models import Job
from memlane.service.auth import Principal
from memlane.service.deps import Caller, Engine, authorize, page

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


class JobOut(BaseModel):
    """A formation job's status (its checkpoint state and input are not shown)."""

    id: str
    kind: Literal["form", "infer", "consolidate"]
    status: Literal["queued", "running", "done", "failed"]
    user_id: str | None
    app: str | None
    session_id: str | None
    attempts: int
    max_attempts: int
    last_error: str | None
    result: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    next_run_at: datetime

    @classmethod
    def of(cls, job: Job) -> JobOut:
        app, session_id = job.payload.get("app"), job.payload.get("session_id")
        return cls(
            id=job.id,
            kind=job.kind,
            status=job.status,
            user_id=job.user_id,
            app=app if isinstance(app, str) else None,
            session_id=session_id if isinstance(session_id, str) else None,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            last_error=job.last_error,
            result=_without_vectors(job.result),
            created_at=job.created_at,
            updated_at=job.updated_at,
            next_run_at=job.next_run_at,
        )


def _without_vectors(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job's result with the facts' embeddings left out (large, and not for clients)."""
    if result is None:
        return None
    out = dict(result)
    changes = out.get("changes")
    if isinstance(changes, list):
        out["changes"] = [
            {**c, "fact": {k: v for k, v in c["fact"].items() if k != "embedding"}}
            if isinstance(c, dict) and isinstance(c.get("fact"), dict)
            else c
            for c in changes
        ]
    return out


class JobList(BaseModel):
    jobs: list[JobOut]
    total: int


def _visible(caller: Principal, job: Job) -> bool:
    """A tenant-wide key sees every job; a user-bound key its user's ``infer`` jobs and the
    formation jobs of sessions its user took part in *when the job was last queued*
    (``payload["user_ids"]``; a job a later trigger coalesced into carries the later
    participants), never through a session that now has the job's session id (a reused id is
    another session). A formation job queued before participants were stored shows only to its
    ``user_id``."""
    if caller.user_id is None:
        return True
    users = job.payload.get("user_ids")
    if job.kind == "form" and isinstance(users, list):
        return caller.user_id in users
    return job.user_id == caller.user_id


async def _job(memory: AsyncMemory, caller: Principal, job_id: str) -> Job:
    job = await memory.get_job(job_id)
    if not _visible(caller, job):
        raise NotFoundError(f"no formation job {job_id!r}")
    return job


@router.get("", operation_id="list_jobs")
async def list_jobs(
    memory: Engine,
    caller: Caller,
    request: Request,
    status: Literal["queued", "running", "done", "failed"] | None = None,
    limit: Annotated[
        int | None, Query(description="at most this many (default 50; cap: the server's page size)")
    ] = None,
) -> JobList:
    """Formation jobs, newest first."""
    limit = page(request, limit)
    authorize(caller, user_id=None, write=False)
    scan = limit if caller.user_id is None else min(10_000, limit * 20)
    jobs = [j for j in await memory.list_jobs(status=status, limit=scan) if _visible(caller, j)]
    out = [JobOut.of(j) for j in jobs[:limit]]
    return JobList(jobs=out, total=len(out))


@router.get("/{job_id}", operation_id="get_job")
async def get_job(job_id: str, memory: Engine, caller: Caller) -> JobOut:
    """A job's status, attempts, last error and result."""
    authorize(caller, user_id=None, write=False)
    return JobOut.of(await _job(memory, caller, job_id))


@router.post("/{job_id}/retry", operation_id="retry_job")
async def retry_job(job_id: str, memory: Engine, caller: Caller) -> JobOut:
    """Queue a failed job again with a fresh set of attempts."""
    authorize(caller, user_id=None, write=True)
    await _job(memory, caller, job_id)
    return JobOut.of(await memory.retry_job(job_id))
