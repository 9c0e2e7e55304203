"""Documents (elizaOS ``DOCUMENT``) in the fact store: the document row, its fragments, and
the reads between them. The splitting itself is :mod:`memlane.ingest.documents`.

A ``document`` row keeps the whole text and is not searched itself; its ``fragment`` rows
(~1,000 tokens, cut at headings and paragraphs first) are embedded and searched, each with
``metadata["document_id"]``. Deleting the document deletes its fragments.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.engine.search import redact_contributor
from memlane.engine.writes import write_scope
from memlane.errors import InvalidInputError, NotFoundError
from memlane.ingest.documents import MAX_DOCUMENT_CHARS, document_rows
from memlane.inputs import clean_text
from memlane.models import EmbedPriority, Fact, FactFilter, Scope, ScopeName, content_hash
from memlane.stores.base import FactStore

__all__ = ["DocumentMethods", "document_fact", "fragment_ids", "read_fragments", "read_parent", "visible_fact"]


def document_fact(
    text: str,
    *,
    title: str | None,
    source: str | None,
    scope: Literal["user", "agent", "room"],
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
    metadata: Mapping[str, Any] | None,
    timestamp: datetime | None,
) -> Fact:
    """The (checked) ``document`` row of ``text``; its fragments are
    :func:`memlane.ingest.documents.document_rows`. The same text hashes the same (idempotent)."""
    body = clean_text(text, "text", max_chars=MAX_DOCUMENT_CHARS)
    meta = inputs.metadata(metadata)
    for name, value in (("title", title), ("source", source)):
        if value is not None:
            meta[name] = clean_text(value, name, max_chars=inputs.MAX_ID_CHARS * 4)
    return Fact(
        content=body,
        scope=scope,
        user_id=user_id,
        agent_id=agent_id,
        session_id=session_id,
        kind="document",
        occurred_at=inputs.timestamp(timestamp),
        metadata=meta,
        hash=content_hash(f"document\x1f{body}"),
    )


async def visible_fact(
    facts: FactStore, fact_id: str, *, user_id: str | None, agent_id: str | None, session_id: str | None
) -> Fact:
    """One fact by id as ``user_id`` may see it (NotFoundError if absent or outside the scope;
    ``session_id`` names the room of a room memory)."""
    fact_id = inputs.identifier(fact_id, "fact_id", error=InvalidInputError)
    user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
    fact = await facts.get_fact(fact_id, Scope(user_id=user_id, agent_id=agent_id, session_id=session_id))
    if fact is None:
        raise NotFoundError(f"no fact {fact_id!r} for this user/agent")
    return redact_contributor(fact, user_id)


async def fragment_ids(facts: FactStore, document: Fact, scope: Scope) -> list[str]:
    """Every fragment id of ``document`` visible in ``scope``."""
    flt = FactFilter(kind="fragment", metadata=(("document_id", document.id),))
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = await facts.list_facts(scope, limit=1000, cursor=cursor, filter=flt)
        ids += [f.id for f in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return ids


async def read_fragments(
    facts: FactStore, document_id: str, *, user_id: str | None, agent_id: str | None, session_id: str | None
) -> list[Fact]:
    """A document's fragments in reading order (NotFoundError when the document is not
    visible from this scope; ``session_id`` names the room of a room document)."""
    document_id = inputs.identifier(document_id, "document_id", error=InvalidInputError)
    user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
    doc = await visible_fact(facts, document_id, user_id=user_id, agent_id=agent_id, session_id=session_id)
    if doc.kind != "document":
        raise InvalidInputError(f"{document_id!r} is a {doc.kind}, not a document")
    # a room document's fragments are in its room: read them there, whatever session_id narrowed to
    scope = Scope(user_id=user_id, agent_id=agent_id, session_id=doc.session_id if doc.scope == "room" else None)
    found = list((await facts.get_facts(await fragment_ids(facts, doc, scope), scope)).values())
    found.sort(key=lambda f: int(f.metadata.get("fragment", 0)))
    return [redact_contributor(f, user_id) for f in found]


async def read_parent(
    facts: FactStore, fragment_id: str, *, user_id: str | None, agent_id: str | None, session_id: str | None
) -> Fact:
    """The document a fragment belongs to (a search hit's source)."""
    fragment_id = inputs.identifier(fragment_id, "fragment_id", error=InvalidInputError)
    ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
    fragment = await visible_fact(facts, fragment_id, **ids)
    parent = fragment.metadata.get("document_id")
    if fragment.kind != "fragment" or not isinstance(parent, str):
        raise InvalidInputError(f"{fragment_id!r} is a {fragment.kind}, not a document fragment")
    return await visible_fact(facts, parent, **ids)


class DocumentMethods(EngineState):
    """The engine's methods for documents: ``add_document``, ``fragments``, ``parent_document``."""

    @opening
    async def add_document(
        self,
        text: str,
        *,
        title: str | None = None,
        source: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        scope: ScopeName = "user",
        metadata: Mapping[str, Any] | None = None,
        timestamp: datetime | None = None,
        embed: EmbedPriority = "now",
    ) -> Fact:
        """Store a document (elizaOS ``DOCUMENT``) whatever its length: the ``document`` row
        keeps the whole text and is not searched itself; its ``fragment`` rows (~1,000 tokens,
        cut at headings and paragraphs first; a short document has one) are embedded and
        searched, each with ``metadata["document_id"]`` (see :meth:`fragments`). Deleting the
        document deletes its fragments. Adding the same text again returns the stored document.

        Args:
            text: the document (Markdown, code or prose), up to 5,000,000 characters.
            title: stored as ``metadata["title"]``.
            source: where it came from (``"filesystem"``, ``"discord"``, a URL...), stored as
                ``metadata["source"]`` (filter with ``filters={"source": ...}``).
            scope: as :meth:`add`: ``"user"``/``"private"``, ``"agent"``/``"shared"``
                (a knowledge base for all the agent's users), ``"room"``.
            metadata: stored on the document and on every fragment.
            embed: as :meth:`add`: ``"now"``, or queue the fragments at ``"high"`` /
                ``"normal"`` / ``"low"`` priority.

        Returns:
            The document fact (``metadata["fragments"]``: how many fragments it has).
        """
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        fact_scope = write_scope(scope, user_id, agent_id, session_id, "add_document()")
        red = self._writer  # AsyncMemory(redact=...): the text, title, source and metadata
        doc = document_fact(
            red.redact_text(text),
            title=red.redact_text(title),
            source=red.redact_text(source),
            scope=fact_scope,
            user_id=user_id,
            agent_id=agent_id,
            session_id=session_id,
            metadata=red.redact_data(metadata),
            timestamp=timestamp,
        )
        embed = inputs.embed_priority(embed)
        return (await self._writer.store_rows(document_rows(doc), embed))[0]

    @opening
    async def fragments(
        self,
        document_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> builtins.list[Fact]:
        """A document's fragments in reading order (NotFoundError when the document is not
        visible from this scope; ``session_id`` names the room of a room document)."""
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return await read_fragments(self.facts, document_id, **ids)

    @opening
    async def parent_document(
        self,
        fragment_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> Fact:
        """The document a fragment belongs to (a search hit's source)."""
        ids = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return await read_parent(self.facts, fragment_id, **ids)
