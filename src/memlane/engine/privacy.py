"""Privacy: erase a user (``forget``) and export what memlane holds about them
(``export_user``), across every store of the engine."""

from __future__ import annotations

from typing import Any, Literal

from memlane import inputs
from memlane.engine.base import EngineState, opening
from memlane.models import utcnow
from memlane.stores.base import (
    ContextCache,
    FactStore,
    IdentityStore,
    JobStore,
    ReflectionStore,
    SessionStore,
    UserExportable,
)

__all__ = ["PrivacyMethods", "export_user", "forget"]


async def forget(
    user_id: str,
    *,
    shared: Literal["erase", "keep"],
    sessions: bool,
    facts: FactStore,
    reflections: ReflectionStore,
    jobs: JobStore,
    session_store: SessionStore,
    contexts: ContextCache,
) -> int:
    """Hard purge everything of the (checked) ``user_id`` from the stores, in the order that
    leaves no text behind: jobs (and, with ``sessions``, formation cursors, sessions and
    identity links), reflections, every cached context, then facts, whose purge ends by
    scrubbing the file.
    Returns the number of rows removed (see :meth:`memlane.memory.AsyncMemory.forget`)."""
    removed = await jobs.purge_user(user_id, cursors=sessions)
    if sessions:
        removed += await session_store.delete_user_sessions(user_id)
        if isinstance(facts, IdentityStore):  # the user's (channel, sender) links
            removed += await facts.purge_identities(user_id)
    if reflections is not facts:  # type: ignore[comparison-overlap]
        removed += await reflections.purge_user(user_id, shared=shared)
    # Cached contexts hold memory text (agent blobs included): all go, not only the user's.
    removed += await contexts.drop_contexts()
    # last: the fact store's purge ends by scrubbing the file (FTS merge, WAL truncate)
    removed += await facts.purge_user(user_id, shared=shared)
    return removed


async def export_user(
    user_id: str, *, facts: FactStore, reflections: ReflectionStore, jobs: JobStore, session_store: SessionStore
) -> dict[str, Any]:
    """Everything the stores hold about the (checked) ``user_id``, as JSON data (the sections
    are described at :meth:`memlane.memory.AsyncMemory.export_user`)."""
    out: dict[str, Any] = {
        "format": "memlane.user-export/1",
        "user_id": user_id,
        "exported_at": utcnow().isoformat(),
        "facts": [],
        "shared_changes": [],
        "reflections": [],
        "consolidated": [],
        "consolidated_versions": [],
        "shared": [],
        "sessions": [],
        "jobs": [],
        "formation_cursors": [],
        "identities": [],
        "proposals": [],
    }
    not_exported: list[str] = []
    seen: set[int] = set()
    stores = (("facts", facts), ("reflections", reflections), ("jobs", jobs), ("sessions", session_store))
    for name, store in stores:
        if id(store) in seen:
            continue
        seen.add(id(store))
        if isinstance(store, UserExportable):
            out.update(await store.export_user(user_id))
        else:
            not_exported.append(f"{name}: {type(store).__name__} has no export_user")
    if isinstance(facts, IdentityStore):  # the user's (channel, sender) links
        out["identities"] = [i.model_dump(mode="json") for i in await facts.identities(user_id)]
    out["not_included"] = {
        "embeddings": "derived: vectors computed from the exported texts",
        "keyword_index": "derived: the full-text index of the exported facts",
        "context_cache": "derived: cached <MemoryContext> assemblies of exported memory (5 minutes)",
        "job_checkpoints_and_results": "derived: step outputs of formation jobs, which may quote other users",
    }
    out["not_exported"] = not_exported
    return out


class PrivacyMethods(EngineState):
    """The engine's methods for privacy: ``forget`` and ``export_user``."""

    @opening
    async def forget(self, user_id: str, *, shared: Literal["erase", "keep"] = "erase", sessions: bool = True) -> int:
        """Hard purge everything of ``user_id``: facts, history, reflections, blobs, pending
        formation jobs, the sessions the user took part in alone, and the user's own events in
        group sessions (``author`` or ``metadata["user_id"]`` is the user id), and the user's
        ``(channel, sender)`` links (:meth:`link_identity`). None of the user's text stays
        in the database file (the keyword index is merged, deleted pages zeroed, the WAL truncated).

        Args:
            shared: what happens to the agent's shared memories formed from the user's words
                (agent facts, agent reflections, the consolidated agent blob). ``"erase"``
                (default, privacy first): they are erased too; a blob that absorbed them is
                dropped and rebuilt from the remaining reflections at the next consolidation.
                ``"keep"``: the agent keeps them for its other users, unlinked from the user.
            sessions: ``False`` erases the long-term memory only (Gaia's ``/forget``): the
                user's sessions, their events, their formation cursors and their identity links
                stay (short-term memory is untouched and the user's senders still resolve;
                turns not formed yet are still formed later, turns already formed are not
                formed again). Everything formed from them (facts, reflections of
                every scope, blobs) and the formation jobs, which hold formed text, are erased,
                and the file is scrubbed as with the default.

        Returns:
            The number of rows removed.
        """
        user_id = inputs.identifier(user_id, "user_id")
        inputs.choice(shared, "shared", ("erase", "keep"))
        sessions = inputs.flag(sessions, "sessions")
        removed = await forget(
            user_id,
            shared=shared,
            sessions=sessions,
            facts=self.facts,
            reflections=self.reflection_store,
            jobs=self.jobs,
            session_store=self.sessions,
            contexts=self.contexts,
        )
        self._erasures += 1
        return removed

    @opening
    async def export_user(self, user_id: str) -> dict[str, Any]:
        """Everything memlane holds about ``user_id``, as JSON data (a data-subject export):
        what :meth:`forget` erases, plus references to the agent's shared memories formed from
        the user's words.

        Sections: ``facts`` (every fact holding the user's id, in every partition, valid and
        invalid, each with its ``history``), ``shared_changes`` (the user's changes to facts that
        are not theirs: what they said, not what was there), ``reflections`` and
        ``consolidated`` (keyed by the user), ``consolidated_versions`` (every version of the
        user's blobs: ``{scope, agent_id, user_id, session_id, version, content, word_limit,
        consolidated_at}``), ``shared`` (``{kind, id, scope, agent_id}``
        references to agent memories formed from the user's words; their text holds other
        users' words too), ``sessions`` (the sessions the user takes part in, with events; a
        group session with the user's own events only), ``jobs`` (their formation jobs: input
        and status), ``formation_cursors``, ``identities`` (the user's ``(channel, sender)``
        links) and ``proposals`` (the review queue's, every status). ``not_included`` says
        what is left out and why (caches and indexes derived from the exported rows);
        ``not_exported`` names a store that cannot export (a custom store without
        ``export_user``).
        """
        user_id = inputs.identifier(user_id, "user_id")
        return await export_user(
            user_id, facts=self.facts, reflections=self.reflection_store, jobs=self.jobs, session_store=self.sessions
        )
