"""Readers for ``memlane import`` and ``POST /v1/import``: LoCoMo-format JSON and a JSONL of turns.

``memlane import`` is all-or-nothing: :func:`read` parses and checks the whole file, naming
the line (or LoCoMo turn) of the first bad one, and :func:`check_with_engine` runs every batch
through the real ``add`` on a private in-memory database, so whatever the engine would refuse
is found before the first row is written to the user's database.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memlane.errors import ConflictError, InvalidInputError
from memlane.evaluation import locomo
from memlane.formation.config import FormationConfig
from memlane.models import Event, EventType, Session, message_role

#: Turns per ``add`` call when importing.
BATCH = 256


@dataclass
class Batch:
    """Consecutive turns of one user's session."""

    user_id: str
    session_id: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: Where each message came from, for errors: ``"path:line"`` or ``"path conv-26 D1:3"``.
    where: list[str] = field(default_factory=list)


def read(path: Path, fmt: str, user_prefix: str = "") -> list[Batch]:
    """Every batch of the file, checked; raises InvalidInputError naming the bad line."""
    return list(read_locomo(path, user_prefix) if fmt == "locomo" else read_jsonl(path))


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
                [f"{path} {conv.sample_id} {t.dia_id}" for t in turns],
            )


def read_jsonl(path: Path) -> Iterator[Batch]:
    """Lines of ``{user_id, session_id, role, content, timestamp}``; consecutive lines of
    the same user and session form one batch. Blank lines are skipped."""
    current: Batch | None = None
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInputError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{where}: not JSON ({exc.msg})") from exc
            except RecursionError:
                raise InvalidInputError(f"{where}: JSON nested too deeply") from None
            user, session, msg = _turn(row, where)
            if (
                current is None
                or (current.user_id, current.session_id) != (user, session)
                or len(current.messages) >= BATCH
            ):
                if current is not None:
                    yield current
                current = Batch(user, session)
            current.messages.append(msg)
            current.where.append(where)
    if current is not None:
        yield current


def _turn(row: object, where: str) -> tuple[str, str | None, dict[str, Any]]:
    """One JSONL row as (user_id, session_id, message), or InvalidInputError naming the line."""
    if not isinstance(row, dict):
        raise InvalidInputError(f"{where}: expected a JSON object with user_id and content, got {_kind(row)}")
    ids: dict[str, str | None] = {}
    for key in ("user_id", "session_id", "role"):
        value = row.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
            raise InvalidInputError(f"{where}: {key} must be text, got {_kind(value)}")
        ids[key] = None if value is None or value == "" else str(value)
    if ids["user_id"] is None:
        raise InvalidInputError(f"{where}: needs at least user_id and content (no user_id)")
    if "content" not in row:
        raise InvalidInputError(f"{where}: needs at least user_id and content (no content)")
    content = row["content"]
    if not isinstance(content, str):
        raise InvalidInputError(f"{where}: content must be text, got {_kind(content)}")
    if not content.strip():
        raise InvalidInputError(f"{where}: content is empty")
    msg: dict[str, Any] = {"role": ids["role"] or "user", "content": content}
    when = row.get("timestamp")
    if when not in (None, ""):
        try:
            datetime.fromisoformat(str(when))
        except ValueError:
            raise InvalidInputError(f"{where}: timestamp {when!r} is not an ISO 8601 date-time") from None
        msg["timestamp"] = when
    meta = row.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise InvalidInputError(f"{where}: metadata must be a JSON object, got {_kind(meta)}")
    if meta:
        msg["metadata"] = meta
    return str(ids["user_id"]), ids["session_id"], msg


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


def chunks(batches: list[Batch], rows: int) -> Iterator[list[Batch]]:
    """Consecutive runs of whole batches of about ``rows`` turns (at least one batch each)."""
    run: list[Batch] = []
    n = 0
    for b in batches:
        if run and n + len(b.messages) > rows:
            yield run
            run, n = [], 0
        run.append(b)
        n += len(b.messages)
    if run:
        yield run


def check_with_engine(batches: list[Batch], progress: Callable[[int], None] | None = None) -> None:
    """Run every batch through the real ``add_many`` on a private in-memory database (no
    embedder), so anything the engine refuses is reported, with its line, before the real
    import writes."""
    from memlane.bulk import CHUNK_ROWS, AddBatch
    from memlane.sync import Memory

    quiet = FormationConfig(background=False, idle_minutes=None)
    with Memory(":memory:", embedder=None, sessions="null", formation=quiet) as scratch:
        for run in chunks(batches, CHUNK_ROWS):
            try:
                scratch.add_many([AddBatch(b.messages, user_id=b.user_id, session_id=b.session_id) for b in run])
            except InvalidInputError as exc:
                index = re.match(r"batch (\d+): ", str(exc))
                b = run[int(index.group(1))] if index else run[0]
                raise _locate(scratch, b, exc) from exc
            if progress is not None:
                progress(sum(len(b.messages) for b in run))


def _locate(scratch: Any, b: Batch, exc: InvalidInputError) -> InvalidInputError:
    """The batch failed: add its messages one by one to find the line to name."""
    for msg, where in zip(b.messages, b.where, strict=True):
        try:
            scratch.add([msg], user_id=b.user_id, session_id=b.session_id)
        except InvalidInputError as one:
            return InvalidInputError(f"{where}: " + re.sub(r"^message 0\b", "the turn", str(one)))
    return InvalidInputError(f"{b.where[0]}: {exc}")


def check_session_owner(user_id: str, session_id: str, session: Session | None) -> None:
    """Imported turns join only their user's own sessions: ConflictError (HTTP 409) when the
    session ``session_id`` (of the default app) exists and ``user_id`` does not take part in it.
    Called for every session of an import before anything is written (and again on the session
    the import resumes, in case another writer created it in between)."""
    if session is not None and user_id not in session.user_ids:
        raise ConflictError(
            f"session {session_id!r} already exists and {user_id!r} does not take part in it:"
            " import these turns under another session_id"
        )


def session_events(batches: list[Batch]) -> dict[tuple[str, str], list[Event]]:
    """The turns as session events, per (user, session), for ``import --form``.

    Event ids are derived from the turn (user, session, author, timestamp, text, and its
    occurrence among identical turns), so importing the same file again finds every event
    already stored instead of appending copies."""
    sessions: dict[tuple[str, str], list[Event]] = {}
    seen: dict[str, int] = {}
    for b in batches:
        sid = b.session_id or f"{b.user_id}:import"
        events = sessions.setdefault((b.user_id, sid), [])
        for msg, where in zip(b.messages, b.where, strict=True):
            author = str(msg.get("name") or msg.get("role") or "user")
            when = msg.get("timestamp")
            stamp = when.isoformat() if isinstance(when, datetime) else str(when or "")
            key = json.dumps([b.user_id, sid, author, stamp, msg["content"]], ensure_ascii=False)
            seen[key] = seen.get(key, 0) + 1
            digest = hashlib.sha256(f"{key}#{seen[key]}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
            assistant = message_role(msg.get("role")) == "assistant"
            try:
                events.append(Event(
                    id=f"import-{digest}", type=EventType.AGENT_RESPONSE if assistant else EventType.USER_MESSAGE,
                    author=author, content=msg["content"],
                    **({"timestamp": when if isinstance(when, datetime) else datetime.fromisoformat(stamp)}
                       if when else {}),
                ))  # fmt: skip
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                raise InvalidInputError(f"{where}: {exc}") from exc
    return sessions
