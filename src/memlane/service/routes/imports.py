"""``POST /v1/import``: bulk import of conversation turns (the HTTP face of ``memlane import``).

The body carries the file's text: a JSONL of turns (``{"user_id", "session_id", "role",
"content", "timestamp"?}`` per line) or a LoCoMo JSON list. All or nothing, as the CLI: every
line is parsed and checked (and every batch tried on a scratch database) before the first row
is written, and a bad line is named (``body:LINE``). The turns are stored at once, keyword-
searchable, and embedded in the background at low priority (``GET /v1/embeddings``), so the
request never waits for the embedder; with ``form: true`` each imported session is also
replayed and queued for formation. The answer is 202: the formation jobs to poll and where to
watch the embedding queue.

A user-bound key may import only its own user's turns (every line must name it); a read-only
key may not import. With ``form: true`` the turns join a session only if their user takes
part in it: an existing session of another user is 409 ``conflict``, before anything is
written. The request body is bounded by the server's body limit (1 MiB by default): a
larger file goes through ``memlane import`` on the server.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from memlane.errors import InvalidInputError
from memlane.ingest import importers
from memlane.service.deps import Caller, Engine, authorize

router = APIRouter(tags=["import"])


class ImportRequest(BaseModel):
    """A file of turns to import."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, description="the file's text: JSONL of turns, or a LoCoMo JSON list")
    format: Literal["auto", "jsonl", "locomo"] = Field("auto", description="auto: a JSON list is LoCoMo")
    form: bool = Field(False, description="also form each imported session into memory (background jobs)")
    user_prefix: str = Field("", max_length=200, description="LoCoMo only: prefix of the generated user ids")


class ImportAccepted(BaseModel):
    """202: the turns are stored; embeddings and formation run in the background."""

    imported: int = Field(description="turns stored")
    sessions: int = Field(description="sessions the turns belong to")
    format: Literal["jsonl", "locomo"]
    jobs: list[str] = Field(description="formation job ids (with form: true), poll /v1/jobs/{id}")
    embedding_status_url: str = Field(description="the background embedding queue's progress")


def _parse(content: str, fmt: str, user_prefix: str) -> importers.ImportPlan:
    with tempfile.TemporaryDirectory(prefix="memlane-import-") as tmp:
        path = Path(tmp) / "body"
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
        kind = importers.detect(path) if fmt == "auto" else fmt
        try:
            return importers.prepare(path, kind, user_prefix)
        except InvalidInputError as exc:  # name the line of the body, not the scratch file
            raise InvalidInputError(str(exc).replace(str(path), "body")) from None
        except (ValueError, KeyError, TypeError) as exc:  # a LoCoMo file of the wrong shape
            raise InvalidInputError(f"body is not a {kind} import file: {exc}") from None


@router.post("/v1/import", status_code=202, operation_id="import_turns")
async def import_turns(body: ImportRequest, memory: Engine, caller: Caller, response: Response) -> ImportAccepted:
    """Import conversation turns (all or nothing); embeddings and formation run in the background."""
    authorize(caller, user_id=None, write=True)
    plan = await asyncio.to_thread(_parse, body.content, body.format, body.user_prefix)
    for b in plan.batches:  # every line's user, before anything is written
        authorize(caller, user_id=b.user_id, write=True)
    if not plan.batches:
        raise InvalidInputError("the body holds no turns")
    # the importers workflow, as `memlane import` runs it; sessions are kept only to be formed
    await importers.store_turns(memory, plan, embed="low", keep_sessions=body.form)
    jobs: list[str] = []
    if body.form:
        await importers.keep_sessions(memory, plan)
        jobs = [job.id for job in await importers.queue_formation(memory, plan)]
    response.headers["Location"] = "/v1/embeddings"
    return ImportAccepted(
        imported=plan.turns,
        sessions=len(plan.sessions),
        format=plan.format,
        jobs=jobs,
        embedding_status_url="/v1/embeddings",
    )


@router.get("/v1/embeddings", operation_id="embedding_progress")
async def embedding_progress(memory: Engine, caller: Caller) -> dict[str, Any]:
    """The background embedding queue: counts per priority, done, failed, the last error."""
    authorize(caller, user_id=None, write=False)
    return (await memory.embedding_progress()).model_dump()
