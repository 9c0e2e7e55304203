"""Redaction on the engine's write paths (``AsyncMemory(redact=...)``; the detectors are
:mod:`memlane.privacy.redaction`).

One place per path family:

* long-term writes (``add``, ``add_many``, ``add(infer=True)``'s turns before they are
  queued, documents and fragments, ``update``): :func:`redact_messages` and
  :meth:`Redactor.redact` in :mod:`memlane.engine.writes` and :mod:`memlane.engine.documents`;
* session events and state: :class:`RedactingSessions` wraps the engine's session store, so
  whatever writes through ``memory.sessions`` (``add_event``, the ADK and OpenAI Agents
  adapters, the HTTP session routes, importers) reaches SQLite, PostgreSQL or Redis redacted;
* formation output (facts, merged texts, reflections, consolidated blobs, the profile):
  :class:`RedactingModel` wraps the formation models;
* search queries and filters are redacted the same way (a hash token matches its value).

Hash mode's key: ``RedactionConfig.key``, else ``$MEMLANE_REDACT_KEY``, else a random key
kept in the store's ``meta`` table (:class:`~memlane.stores.base.MetaStore`) so tokens stay
the same across restarts. It is never logged.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from memlane.formation.model import FormationModel
from memlane.formation.schemas import (
    ConsolidationInput,
    DedupInput,
    DedupOutput,
    ExtractionInput,
    ExtractionOutput,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
)
from memlane.ingest.messages import Message
from memlane.models import Event, EventType, Session
from memlane.privacy.redaction import KEY_META, RedactionConfig, Redactor
from memlane.providers.llm.base import UsageMeter
from memlane.stores.base import FactStore, MetaStore, SessionStore

__all__ = [
    "ID_KEYS",
    "KEY_ENV",
    "META_KEY",
    "RedactingModel",
    "RedactingSessions",
    "open_redactor",
    "redact_event",
    "redact_messages",
    "redact_metadata",
]

log = logging.getLogger("memlane")

#: The environment variable holding hash mode's key.
KEY_ENV = "MEMLANE_REDACT_KEY"
#: The ``meta`` key of the generated hash key.
META_KEY = KEY_META
#: Metadata keys holding ids, kept as given (``forget`` finds a user's turns in a group session
#: by ``metadata["user_id"]``, a document's fragments point at it by ``document_id``).
ID_KEYS = frozenset({"user_id", "agent_id", "session_id", "document_id", "app"})


async def open_redactor(config: RedactionConfig | None, facts: FactStore) -> Redactor | None:
    """The engine's redactor (None: redaction off), its hash key resolved: the config's, then
    ``$MEMLANE_REDACT_KEY``, then the one the store keeps (generated on first use)."""
    if config is None:
        return None
    key: bytes | None = None
    if config.mode == "hash" and config.key is None:
        env = os.environ.get(KEY_ENV, "").strip()
        if env:
            key = env.encode()
        elif isinstance(facts, MetaStore):
            key = (await facts.meta_setdefault(META_KEY, secrets.token_hex(32))).encode()
        else:
            log.warning("memlane: this store keeps no settings; hash-mode redaction tokens change on restart")
            key = secrets.token_bytes(32)
    return Redactor.from_config(config, key)


def redact_metadata(redactor: Redactor, metadata: Any) -> Any:
    """Every string in ``metadata`` redacted, except the ids under :data:`ID_KEYS`."""
    if not isinstance(metadata, Mapping):
        return redactor.redact_value(metadata)
    return {k: v if k in ID_KEYS else redactor.redact_value(v) for k, v in metadata.items()}


def redact_event(redactor: Redactor, event: Event) -> Event:
    """``event`` with its content and metadata redacted (a copy; ids, type, author, time kept)."""
    return event.model_copy(
        update={"content": redactor.redact_value(event.content), "metadata": redact_metadata(redactor, event.metadata)}
    )


def _empty(value: Any) -> bool:
    return isinstance(value, str) and not value.strip()


def redact_messages(
    redactor: Redactor | None, messages: str | bytes | Sequence[Message]
) -> str | bytes | Sequence[Message] | None:
    """``add``'s input redacted, in the same shape (texts, message dicts, Events); what is not
    a text is left for the input checks to refuse. In drop mode a text or message left empty
    is removed; None when nothing is left to store."""
    if redactor is None:
        return messages
    if isinstance(messages, str):
        text = redactor.redact(messages)
        return None if _empty(text) and not _empty(messages) else text
    if isinstance(messages, bytes) or not isinstance(messages, Sequence):
        return messages
    out: list[Any] = []
    for m in messages:
        if isinstance(m, Event):
            red = redact_event(redactor, m)
            if not (_empty(red.text) and not _empty(m.text) and isinstance(m.content, str)):
                out.append(red)
        elif isinstance(m, Mapping):
            red_m = dict(m)
            if "content" in red_m:
                red_m["content"] = redactor.redact_value(red_m["content"])
            if "metadata" in red_m:
                red_m["metadata"] = redact_metadata(redactor, red_m["metadata"])
            if not (_empty(red_m.get("content")) and not _empty(m.get("content"))):
                out.append(red_m)
        else:
            out.append(m)
    return out if out or not messages else None


class RedactingSessions:
    """A :class:`~memlane.stores.base.SessionStore` that redacts events (content, metadata)
    and session state before the wrapped store sees them; every other call (reads, the
    store's own extra capabilities) goes to the wrapped store unchanged."""

    def __init__(self, store: SessionStore, redactor: Redactor) -> None:
        self.store = store
        self.redactor = redactor

    def __getattr__(self, name: str) -> Any:  # the wrapped store's other methods
        return getattr(self.store, name)

    def __repr__(self) -> str:
        return f"RedactingSessions({self.store!r})"

    async def create_session(
        self,
        *,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
        session_id: str | None = None,
        state: dict[str, object] | None = None,
    ) -> Session:
        return await self.store.create_session(
            app=app,
            user_ids=user_ids,
            agent_id=agent_id,
            channel=channel,
            session_id=session_id,
            state=self.redactor.redact_value(state) if isinstance(state, dict) else state,
        )

    async def get_or_create_session(
        self,
        *,
        session_id: str,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session:
        return await self.store.get_or_create_session(
            session_id=session_id, app=app, user_ids=user_ids, agent_id=agent_id, channel=channel
        )

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        return await self.store.get_session(session_id, app=app)

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        return await self.store.list_sessions(app=app, user_id=user_id)

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        return await self.store.sessions_with_id(session_id)

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        return await self.store.delete_session(session_id, app=app)

    async def counts(self) -> tuple[int, int]:
        return await self.store.counts()

    async def delete_user_sessions(self, user_id: str) -> int:
        return await self.store.delete_user_sessions(user_id)

    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        if isinstance(event, Event):
            event = redact_event(self.redactor, event)
        return await self.store.add_event(session_id, event, app=app)

    async def get_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
        *,
        app: str = "default",
    ) -> list[Event]:
        return await self.store.get_events(session_id, event_types, limit, app=app)

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        return await self.store.pop_event(session_id, app=app)

    async def close(self) -> None:
        await self.store.close()


class RedactingModel:
    """A :class:`~memlane.formation.model.FormationModel` whose outputs are redacted: the
    extracted facts, merged texts, reflections, consolidated blobs and profile bullets, so
    what a model adds (or repeats) is stored as the write paths store it. Its inputs come from
    the (redacted) stores, except ``profile(items=...)``'s, redacted here before the call."""

    def __init__(self, model: FormationModel, redactor: Redactor) -> None:
        self.model = model
        self.redactor = redactor
        self.name: str = model.name
        self.meter: UsageMeter = model.meter

    def __getattr__(self, name: str) -> Any:  # the model's other attributes
        return getattr(self.model, name)

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionOutput:
        out = await self.model.extract_facts(inp)
        facts = [f.model_copy(update={"content": self.redactor.redact(f.content)}) for f in out.facts]
        return out.model_copy(update={"facts": [f for f in facts if f.content.strip()]})

    async def decide(self, inp: DedupInput) -> DedupOutput:
        out = await self.model.decide(inp)
        decisions = [
            d.model_copy(update={"text": self.redactor.redact(d.text)}) if d.text is not None else d
            for d in out.decisions
        ]
        return out.model_copy(update={"decisions": decisions})

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        out = await self.model.reflect(inp)
        red = self.redactor.redact
        return out.model_copy(
            update={
                name: [t for t in (red(x) for x in getattr(out, name)) if t.strip()]
                for name in ("agent", "user", "session")
            }
        )

    async def consolidate(self, inp: ConsolidationInput) -> str:
        return self.redactor.redact(await self.model.consolidate(inp))

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput:
        # the caller's recent items (tasks, projects) come straight from the call, not from a store
        inp = inp.model_copy(update={"items": [self.redactor.redact(i) for i in inp.items]})
        out = await self.model.distill_profile(inp)
        bullets = [t for t in (self.redactor.redact(b) for b in out.bullets) if t.strip()]
        return out.model_copy(update={"bullets": bullets})

    async def aclose(self) -> None:
        await self.model.aclose()
