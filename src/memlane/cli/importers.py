"""Readers for ``memlane import``: LoCoMo-format JSON and a generic JSONL of turns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlane.errors import InvalidInputError
from memlane.evaluation import locomo

#: Turns per ``add`` call when importing.
BATCH = 256


@dataclass
class Batch:
    """Consecutive turns of one user's session."""

    user_id: str
    session_id: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)


def detect(path: Path) -> str:
    """``"locomo"`` for a LoCoMo JSON list, ``"jsonl"`` otherwise."""
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip()
    return "locomo" if head.startswith(b"[") else "jsonl"


def count_turns(path: Path, fmt: str) -> int:
    if fmt == "locomo":
        return sum(c.turns for c in locomo.load(path))
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def read_locomo(path: Path, user_prefix: str = "") -> Iterator[Batch]:
    for conv in locomo.load(path):
        for turns in conv.sessions:
            if not turns:
                continue
            yield Batch(
                user_prefix + conv.sample_id,
                f"{conv.sample_id}:s{turns[0].session}",
                [
                    {
                        "role": t.speaker,
                        "content": t.text,
                        "timestamp": t.when,
                        "metadata": {"dia_id": t.dia_id},
                    }
                    for t in turns
                ],
            )


def read_jsonl(path: Path) -> Iterator[Batch]:
    """Lines of ``{user_id, session_id, role, content, timestamp}``; consecutive lines of
    the same user and session form one batch."""
    current: Batch | None = None
    with path.open("r", encoding="utf-8", errors="strict") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}:{lineno}: not JSON ({exc.msg})") from exc
            if not isinstance(row, dict) or not row.get("user_id") or "content" not in row:
                raise InvalidInputError(f"{path}:{lineno}: needs at least user_id and content")
            user, session = str(row["user_id"]), row.get("session_id")
            msg = {"role": row.get("role") or "user", "content": row["content"]}
            if row.get("timestamp"):
                msg["timestamp"] = row["timestamp"]
            if row.get("metadata"):
                msg["metadata"] = row["metadata"]
            if (
                current is None
                or (current.user_id, current.session_id) != (user, session)
                or len(current.messages) >= BATCH
            ):
                if current is not None:
                    yield current
                current = Batch(user, session)
            current.messages.append(msg)
    if current is not None:
        yield current
