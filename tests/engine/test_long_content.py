"""Long content (a pasted document, a code file) is stored as a document with searchable
fragments instead of rejecting the whole conversation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memlane import AsyncMemory, InvalidInputError, Memory
from memlane.documents import DOCUMENT_THRESHOLD_CHARS, MAX_DOCUMENT_CHARS


def _document(marker: str) -> str:
    parts = []
    for i in range(60):
        parts.append(f"## Section {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(90)) + ".\n")
    parts.insert(37, f"## The answer\n\nThe launch code is {marker}.\n")
    return "\n".join(parts)


async def test_pasted_document_keeps_the_conversation_and_is_searchable(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    doc = _document("zebrafish42")
    assert len(doc) > 50_000
    async with open_memory(tmp_path / "d.db", embedder="hash:64", sessions="null") as m:
        stored = await m.add(
            [{"role": "user", "content": doc}, {"role": "assistant", "content": "Thanks, I read your notes."}],
            user_id="ann",
            session_id="s1",
        )
        assert [f.kind for f in stored] == ["document", "message"]
        parent = stored[0]
        assert parent.content == doc and parent.metadata["fragments"] > 10
        hits = (await m.search("what is the launch code", user_id="ann")).hits
        top = hits[0].fact
        assert top.kind == "fragment" and "zebrafish42" in top.content
        assert top.metadata["document_id"] == parent.id and top.metadata["headings"][0].startswith("Section")
        assert doc[top.metadata["start"] : top.metadata["end"]] == top.content
        assert len(top.content) <= DOCUMENT_THRESHOLD_CHARS
        # the document row itself is never a search result: its fragments are
        assert all(h.fact.kind != "document" for h in hits)
        assert (await m.search("read your notes", user_id="ann")).hits[0].fact.content.startswith("Thanks")
        # re-adding the same conversation changes nothing
        before = (await m.stats(user_id="ann")).facts
        again = await m.add([{"role": "user", "content": doc}], user_id="ann", session_id="s1")
        assert again[0].id == parent.id and (await m.stats(user_id="ann")).facts == before
        # deleting the document deletes its fragments with it
        await m.delete(parent.id, user_id="ann")
        assert all(
            h.fact.metadata.get("document_id") != parent.id
            for h in (await m.search("launch code zebrafish42", user_id="ann")).hits
        )
        frags = (await m.list(user_id="ann", limit=1000)).items
        assert [f.content for f in frags] == ["Thanks, I read your notes."]
        with pytest.raises(InvalidInputError, match="document"):
            await m.update(top.id, "edited", user_id="ann")


async def test_documents_over_the_hard_cap_are_refused_whole(
    tmp_path: Path, open_memory: Callable[..., AsyncMemory]
) -> None:
    async with open_memory(tmp_path / "c.db", embedder=None, sessions="null") as m:
        with pytest.raises(InvalidInputError, match="limit"):
            await m.add(
                [
                    {"role": "user", "content": "x " * (MAX_DOCUMENT_CHARS // 2 + 1)},
                    {"role": "assistant", "content": "ok"},
                ],
                user_id="u",
            )
        assert (await m.stats(user_id="u")).facts == 0


def test_sync_text_document(tmp_path: Path, open_sync_memory: Callable[..., Memory]) -> None:
    code = "\n\n".join(f"def f{i}(x):\n    return x * {i}\n" for i in range(800))
    with open_sync_memory(tmp_path / "s.db", embedder=None, sessions="null") as m:
        [doc] = m.add(code, user_id="u", metadata={"source": "paste"})
        assert doc.kind == "document"
        hit = m.search("f731", user_id="u", filters={"source": "paste"}).hits[0].fact
        assert "def f731(x)" in hit.content and hit.metadata["source"] == "paste"
