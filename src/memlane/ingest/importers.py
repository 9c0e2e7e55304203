"""The import workflow of ``memlane import`` and ``POST /v1/import`` (one, shared): LoCoMo-format
JSON and a JSONL of turns.

Both faces run the same steps, in order:

1. :func:`prepare`: :func:`read` parses and checks the whole file, naming the line (or LoCoMo
   turn) of the first bad one; :func:`check_with_engine` runs every batch through the real
   ``add_many`` on a private in-memory database, so whatever the engine would refuse is found
   before the first row is written (all or nothing);
2. :func:`store_turns`: every session the turns will join is checked to be their user's own
   (409 otherwise, before anything is written), then the turns are stored in bulk
   (``add_many``, ~2,048 turns a transaction), embedded now or by the background queue;
3. :func:`keep_sessions`: the turns are kept as session events (a session id several users'
   turns share is one group session), so formation sees them;
4. :func:`form_sessions` / :func:`queue_formation`: each imported session is formed, now
   (the CLI) or as queued jobs (the HTTP API, which answers 202 with their ids).

The CLI adds progress bars and waits for the background embeddings between steps 2 and 3;
the HTTP API keeps sessions only with ``form: true``.
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
from memlane.formation.runner import FormationResult
from memlane.ingest.bulk import CHUNK_ROWS, AddBatch
from memlane.memory import AsyncMemory
from memlane.models import EmbedPriority, Event, EventType, Job, Session, message_role, utcnow

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
                events.append(
                    Event(
                        id=f"import-{digest}",
                        type=EventType.AGENT_RESPONSE if assistant else EventType.USER_MESSAGE,
                        author=author,
                        content=msg["content"],
                        **(
                            {"timestamp": when if isinstance(when, datetime) else datetime.fromisoformat(stamp)}
                            if when
                            else {}
                        ),
                    )
                )
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                raise InvalidInputError(f"{where}: {exc}") from exc
    return sessions


# ---------------------------------------------------------------------------- the workflow
@dataclass
class ImportPlan:
    """A checked import: the file's format, its batches of turns, and the session events
    they become (per (user, session))."""

    format: str
    batches: list[Batch]
    sessions: dict[tuple[str, str], list[Event]]

    @property
    def turns(self) -> int:
        return sum(len(b.messages) for b in self.batches)

    @property
    def session_ids(self) -> list[str]:
        """The imported sessions' ids, each once (a group session once), in file order."""
        return list(dict.fromkeys(sid for _, sid in self.sessions))


def read_plan(path: Path, fmt: str | None = None, user_prefix: str = "") -> ImportPlan:
    """The file parsed and checked line by line (``fmt`` None or ``"auto"``: detected), not yet
    tried on the engine (:func:`prepare` does both).

    Raises:
        InvalidInputError: a bad line or turn, named.
    """
    kind = detect(path) if fmt in (None, "auto") else str(fmt)
    batches = read(path, kind, user_prefix)
    return ImportPlan(kind, batches, session_events(batches))


def prepare(
    path: Path, fmt: str | None = None, user_prefix: str = "", progress: Callable[[int], None] | None = None
) -> ImportPlan:
    """Step 1: the file parsed and every batch tried on a scratch engine (:func:`read_plan`,
    then :func:`check_with_engine`).

    Raises:
        InvalidInputError: a bad line or turn, named (nothing has been written anywhere).
    """
    plan = read_plan(path, fmt, user_prefix)
    check_with_engine(plan.batches, progress)
    return plan


async def store_turns(
    memory: AsyncMemory,
    plan: ImportPlan,
    *,
    embed: EmbedPriority,
    keep_sessions: bool = True,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Step 2: store the turns in bulk; returns how many were new (a turn stored before comes
    back as it was). With ``keep_sessions``, first checks that every session the turns will
    join is their user's own.

    Raises:
        ConflictError: a session exists and the user does not take part in it (nothing written).
    """
    if keep_sessions:
        for user_id, sid in plan.sessions:  # an existing session takes only its own user's turns
            check_session_owner(user_id, sid, await memory.sessions.get_session(sid))
    started, new = utcnow(), 0
    for run in chunks(plan.batches, CHUNK_ROWS):  # bulk: one transaction per ~2,048 turns
        stored = await memory.add_many(
            [AddBatch(b.messages, user_id=b.user_id, session_id=b.session_id) for b in run], embed=embed
        )
        new += sum(1 for facts in stored for f in facts if f.formed_at >= started)
        if progress is not None:
            progress(sum(len(b.messages) for b in run))
    return new


async def keep_sessions(memory: AsyncMemory, plan: ImportPlan, progress: Callable[[int], None] | None = None) -> int:
    """Step 3: keep the imported turns as sessions, so formation sees them (``memlane form
    SESSION`` later, or :func:`form_sessions`); returns how many events were new. Events
    already stored (an earlier import of the same turns) are not added again.

    Raises:
        ConflictError: another writer created one of the sessions for another user meanwhile.
    """
    added = 0
    members: dict[str, list[str]] = {}  # a session id several users' turns share: a group session
    for user_id, sid in plan.sessions:
        members.setdefault(sid, []).append(user_id)
    for (user_id, sid), events in plan.sessions.items():
        session = await memory.sessions.get_or_create_session(user_ids=members[sid], session_id=sid)
        check_session_owner(user_id, sid, session)
        stored = {e.id for e in await memory.sessions.get_events(sid)}
        for event in events:
            if event.id not in stored:  # through the engine: the formation cursor sees it
                await memory.add_event(sid, event)
                added += 1
        if progress is not None:
            progress(1)
    return added


async def form_sessions(
    memory: AsyncMemory, plan: ImportPlan, progress: Callable[[int], None] | None = None
) -> list[FormationResult]:
    """Step 4, now: form each imported session (session end: facts, reflections, consolidation)."""
    out: list[FormationResult] = []
    for sid in plan.session_ids:
        result = await memory.end_session(sid)
        assert isinstance(result, FormationResult)
        out.append(result)
        if progress is not None:
            progress(1)
    return out


async def queue_formation(memory: AsyncMemory, plan: ImportPlan) -> list[Job]:
    """Step 4, in the background: queue each imported session's formation (session end)."""
    out: list[Job] = []
    for sid in plan.session_ids:
        job = await memory.end_session(sid, wait=False)
        assert isinstance(job, Job)
        out.append(job)
    return out
