"""``/v1/documents``: long content kept whole, searched by its fragments."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from memlane.service.deps import Caller, Engine, authorize, page
from memlane.service.routes._memory_models import FactOut, Scoped, check_room

router = APIRouter(prefix="/v1", tags=["documents"])


class DocumentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="the document (Markdown, code or prose)")
    title: str | None = None
    source: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    app: str = Field(default="default", description="the app of session_id (user-bound keys)")
    scope: Literal["user", "agent", "room", "private", "shared"] = "user"
    metadata: dict[str, Any] | None = None
    timestamp: datetime | None = None


class DocumentPage(BaseModel):
    """A page of documents, newest first; pass ``next_cursor`` as ``cursor`` for the next page."""

    documents: list[FactOut]
    next_cursor: str | None
    total: int


class FragmentList(BaseModel):
    fragments: list[FactOut]


@router.post("/documents", status_code=201, operation_id="add_document", response_model=FactOut)
async def add_document(body: DocumentCreate, memory: Engine, caller: Caller) -> FactOut:
    """Store a document; its fragments (``metadata.fragments`` of them) are what search finds."""
    user = authorize(caller, user_id=body.user_id, write=True, scope=body.scope)
    await check_room(memory, caller, body.session_id, body.app)
    doc = await memory.add_document(
        body.text,
        title=body.title,
        source=body.source,
        user_id=user,
        agent_id=body.agent_id,
        session_id=body.session_id,
        scope=body.scope,
        metadata=body.metadata,
        timestamp=body.timestamp,
    )
    return FactOut.of(doc)


@router.get("/documents", operation_id="list_documents", response_model=DocumentPage)
async def list_documents(
    request: Request,
    memory: Engine,
    caller: Caller,
    scope: Scoped,
    limit: Annotated[int | None, Query(description="at most this many (1..the server's cap)")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> DocumentPage:
    """The scope's documents (``kind="document"`` memories, their text whole), newest first;
    their fragments: ``/v1/documents/{id}/fragments``."""
    ids = await scope.ids(memory, caller, write=False)
    found = await memory.list(**ids, limit=page(request, limit), cursor=cursor, kind="document")
    docs = [FactOut.of(f) for f in found.items]
    return DocumentPage(documents=docs, next_cursor=found.next_cursor, total=found.total)


@router.get("/documents/{document_id}/fragments", operation_id="document_fragments", response_model=FragmentList)
async def fragments(document_id: str, memory: Engine, caller: Caller, scope: Scoped) -> FragmentList:
    """A document's fragments in reading order."""
    found = await memory.fragments(document_id, **await scope.ids(memory, caller, write=False))
    return FragmentList(fragments=[FactOut.of(f) for f in found])


@router.get("/fragments/{fragment_id}/document", operation_id="parent_document", response_model=FactOut)
async def parent_document(fragment_id: str, memory: Engine, caller: Caller, scope: Scoped) -> FactOut:
    """The document a fragment (a search hit) belongs to."""
    return FactOut.of(await memory.parent_document(fragment_id, **await scope.ids(memory, caller, write=False)))
