"""``POST /v1/search``: hybrid search (keyword + vector, fused), up to 3 queries at once."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from memlane.engine.search import SearchMode
from memlane.models import SearchResult
from memlane.service.deps import Caller, Engine, authorize
from memlane.service.routes._memory_models import FactOut, check_room
from memlane.service.routes._temporal import AsOf, ValidAt, one_of

router = APIRouter(prefix="/v1", tags=["search"])


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str | list[str] = Field(description="a query, or up to 3 queries run concurrently and fused")
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = Field(default=None, description="only memories from this session (or of this room)")
    app: str = Field(default="default", description="the app of session_id (user-bound keys)")
    top_k: int = Field(default=10, description="results to return (1..100)")
    filters: dict[str, Any] | None = Field(default=None, description="exact matches: kind, author, metadata keys")
    debug: bool = False
    mode: SearchMode = Field(
        default="hybrid",
        description="hybrid; keyword or vector alone; substring: texts holding the query, any case (adk-rs)",
    )
    match_threshold: float | None = Field(
        default=None, description="elizaOS: the cosine (-1..1) a memory must reach to be found by meaning, this call"
    )
    unique: bool = Field(default=False, description="elizaOS: one hit per distinct text (the best)")
    as_of: str | None = Field(default=None, description="ISO-8601 record time: search memory as it was then")
    valid_at: str | None = Field(default=None, description="ISO-8601 world time: what was true then")


class HitOut(BaseModel):
    fact: FactOut
    score: float
    keyword_rank: int | None
    vector_rank: int | None
    keyword_score: float | None
    vector_score: float | None


class SearchResponse(BaseModel):
    hits: list[HitOut]
    debug: dict[str, Any] | None = None

    @classmethod
    def of(cls, result: SearchResult) -> SearchResponse:
        hits = [HitOut(fact=FactOut.of(h.fact), **h.model_dump(exclude={"fact"})) for h in result.hits]
        return cls(hits=hits, debug=result.debug)


@router.post("/search", operation_id="search", response_model=SearchResponse)
async def search(
    body: SearchRequest, memory: Engine, caller: Caller, as_of: AsOf = None, valid_at: ValidAt = None
) -> SearchResponse:
    """Search one user's (and the agent's shared) memories; ``debug`` adds stage timings;
    ``as_of`` / ``valid_at`` (body or query string): memory as it was, what was true then."""
    user = authorize(caller, user_id=body.user_id, write=False)
    await check_room(memory, caller, body.session_id, body.app)
    result = await memory.search(
        body.query,
        user_id=user,
        agent_id=body.agent_id,
        session_id=body.session_id,
        top_k=body.top_k,
        filters=body.filters,
        debug=body.debug,
        mode=body.mode,
        match_threshold=body.match_threshold,
        unique=body.unique,
        as_of=one_of(body.as_of, as_of, "as_of"),
        valid_at=one_of(body.valid_at, valid_at, "valid_at"),
    )
    return SearchResponse.of(result)
