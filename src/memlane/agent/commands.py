"""Slash commands, handled out of band (Gaia): the app checks each inbound message with
:func:`handle_command` before anything else. A command is answered here and never reaches the
model, the session store or memory formation (the app must not append it to the session);
anything else returns None and the turn proceeds normally.

=================  =====================================================================
``/remember <f>``  store ``<f>`` verbatim in the caller's long-term memory (as the tool)
``/memory``        list everything stored for the caller (aka ``/memories``)
``/forget``        erase the caller's long-term memory; the conversation (short-term) stays
``/reset``         form the conversation into memory, then clear it (a clean slate)
``/help``          the list above; an unknown ``/command`` gets it too
=================  =====================================================================

A command is a message whose first word is ``/name`` (letters, digits, ``_`` and ``-``,
optionally ``@botname`` as Telegram sends it); ``/usr/bin`` or ``//`` are ordinary text.
Whitespace and zero-width characters (a BOM, a zero-width space) around it are ignored.
Every command acts on the identity the app passes (``user_id``, ``agent_id``,
``session_id``, ``app``): one user can never list, erase or reset another's memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from memlane import inputs
from memlane.agent._binding import Binding, Identity, MemoryLike
from memlane.agent.tools import MAX_FACT_CHARS, age
from memlane.errors import FormationError, InvalidInputError
from memlane.formation.runner import FormationResult
from memlane.memory import AsyncMemory

__all__ = [
    "COMMANDS",
    "HELP_TEXT",
    "CommandResult",
    "handle_command",
    "handle_command_sync",
    "is_command",
    "parse_command",
]

#: The commands and what they do (the ``/help`` text).
COMMANDS: Final[dict[str, str]] = {
    "remember": "/remember <fact> — store a fact about you, exactly as written",
    "memory": "/memory — list everything I have stored about you",
    "forget": "/forget — erase your long-term memory (this conversation is kept)",
    "reset": "/reset — save this conversation to memory, then start a fresh one",
    "help": "/help — this list",
}
#: Other names for a command.
ALIASES: Final[dict[str, str]] = {"memories": "memory"}
HELP_TEXT: Final = "Commands:\n" + "\n".join(COMMANDS.values())
#: Memories ``/memory`` shows at most (the newest; the reply says how many more there are).
LIST_LIMIT: Final = 50
#: Longest memory line ``/memory`` shows (characters; longer ones are clipped).
LINE_CHARS: Final = 300

#: Invisible characters a client may put around a command (zero-width space / joiners, word
#: joiner, BOM): ignored like whitespace, so ``"\ufeff/forget"`` is still handled out of band
#: instead of reaching the model and memory formation.
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"
_EDGES = re.compile(rf"\A[\s{_INVISIBLE}]+|[\s{_INVISIBLE}]+\Z")
_COMMAND = re.compile(
    rf"\A[\s{_INVISIBLE}]*/([A-Za-z][A-Za-z0-9_-]*)(?:@[A-Za-z0-9_]+)?(?=[\s{_INVISIBLE}]|\Z)(.*)\Z", re.DOTALL
)


@dataclass(frozen=True)
class CommandResult:
    """What a slash command did: the reply for the user, never for the model."""

    command: str
    """The command run (``"remember"``, ``"memory"``, ``"forget"``, ``"reset"``, ``"help"``), or
    ``"unknown"``."""
    text: str
    """The reply to show the user."""
    ok: bool = True
    """False when the command could not do its job (bad usage, memory off, a refused reset)."""
    data: dict[str, Any] = field(default_factory=dict)
    """Details for the app: the stored fact id, the listed memories, rows removed, the formation job."""


def parse_command(text: str) -> tuple[str, str] | None:
    """``(name, argument)`` for a slash command (name lower-cased, aliases resolved, argument
    stripped), else None."""
    if not isinstance(text, str):
        raise InvalidInputError(f"text must be a text, got {inputs.show(text)}")
    m = _COMMAND.match(text)
    if m is None:
        return None
    name = m.group(1).lower()
    return ALIASES.get(name, name), _EDGES.sub("", m.group(2))


def is_command(text: str) -> bool:
    """True when ``text`` is a slash command (known or not): the app answers it with
    :func:`handle_command` and keeps it away from the model and the session."""
    return parse_command(text) is not None


async def handle_command(
    memory: MemoryLike | None,
    text: str,
    *,
    user_id: str,
    agent_id: str | None = None,
    session_id: str | None = None,
    app: str = "default",
) -> CommandResult | None:
    """Run ``text`` if it is a slash command; None when it is not (the turn proceeds).

    Args:
        memory: the engine (:class:`~memlane.AsyncMemory` or :class:`~memlane.Memory`), or None
            when memory is off (memory commands then answer that memory is off).
        user_id: the caller, fixed by the app.
        agent_id: the agent namespace (else ``app``; ``"default"`` means none), where
            ``/remember`` stores.
        session_id: the current conversation, which ``/reset`` forms and clears.
        app: the application the session is stored under.

    Raises:
        ScopeError: a missing or malformed id. Storage errors propagate; a formation failure
            during ``/reset`` is reported in the result (the session is then kept).
    """
    parsed = parse_command(text)
    if parsed is None:
        return None
    who = Identity(user_id, agent_id, session_id, app)
    binding = Binding(memory, allow_none=True)
    return await binding.run(_run(binding.engine, who, *parsed))


def handle_command_sync(
    memory: MemoryLike | None,
    text: str,
    *,
    user_id: str,
    agent_id: str | None = None,
    session_id: str | None = None,
    app: str = "default",
) -> CommandResult | None:
    """Blocking :func:`handle_command`, for the sync :class:`memlane.Memory` (or None)."""
    parsed = parse_command(text)
    if parsed is None:
        return None
    who = Identity(user_id, agent_id, session_id, app)
    binding = Binding(memory, allow_none=True)
    return binding.run_sync(_run(binding.engine, who, *parsed))


_MEMORY_OFF = "Memory is off for this assistant, so there is nothing to {}."


async def _run(engine: AsyncMemory | None, who: Identity, name: str, arg: str) -> CommandResult:
    if name == "help":
        return CommandResult("help", HELP_TEXT)
    if name not in COMMANDS:
        return CommandResult("unknown", f"Unknown command /{name}.\n{HELP_TEXT}", ok=False)
    if engine is None:
        verb = {"remember": "store it in", "memory": "list", "forget": "forget", "reset": "save"}[name]
        return CommandResult(name, _MEMORY_OFF.format(verb), ok=False)
    if name == "remember":
        return await _remember(engine, who, arg)
    if name == "memory":
        return await _list(engine, who)
    if name == "forget":
        removed = await engine.forget(who.user_id, sessions=False)
        return CommandResult(
            "forget",
            "Done: I erased everything I had stored about you. This conversation is kept (/reset starts a new one).",
            data={"removed": removed},
        )
    return await _reset(engine, who)


async def _remember(engine: AsyncMemory, who: Identity, fact: str) -> CommandResult:
    if not fact:
        return CommandResult("remember", f"Usage: {COMMANDS['remember']}", ok=False)
    try:  # the tool's limit: /remember stores one fact, not a document
        fact = inputs.clean_text(fact, "fact", max_chars=MAX_FACT_CHARS)
        stored = await engine.add(
            fact,
            user_id=who.user_id,
            agent_id=who.namespace,
            session_id=who.session_id,
            metadata={"source": "command:remember"},
        )
    except InvalidInputError as exc:  # the text itself (too long, invisible): nothing stored
        return CommandResult("remember", f"I could not store that: {exc}", ok=False)
    return CommandResult("remember", "Got it, I'll remember that.", data={"id": stored[0].id})


async def _list(engine: AsyncMemory, who: Identity) -> CommandResult:
    # user_id alone: all of the caller's own memories, under every agent; never an agent's shared ones
    page = await engine.list(user_id=who.user_id, limit=LIST_LIMIT)
    # a document stands for its fragments; a session's summary retells turns and facts listed
    # here already (``memlane summaries`` / ``AsyncMemory.summaries`` list them)
    shown = [f for f in page.items if f.kind not in ("fragment", "summary")]
    if not shown:
        return CommandResult("memory", "I don't have anything stored about you.", data={"memories": [], "total": 0})
    lines = []
    for i, f in enumerate(shown, 1):
        line = " ".join(f.content.split())
        if len(line) > LINE_CHARS:
            line = line[: LINE_CHARS - 1].rstrip() + "…"
        lines.append(f"{i}. {line} ({age(f.occurred_at or f.formed_at)})")
    more = page.total - len(page.items)
    tail = f"\n… and {more} more." if more > 0 else ""
    total = page.total - (await engine.list(user_id=who.user_id, kind="summary", limit=1)).total
    return CommandResult(
        "memory",
        f"What I have stored about you ({total}):\n" + "\n".join(lines) + tail,
        data={"memories": [{"id": f.id, "content": f.content, "kind": f.kind} for f in shown], "total": total},
    )


async def _reset(engine: AsyncMemory, who: Identity) -> CommandResult:
    if who.session_id is None:
        return CommandResult("reset", "There is no current conversation to reset.", ok=False)
    await engine.open()
    session = await engine.sessions.get_session(who.session_id, app=who.app)
    if session is None:
        return CommandResult("reset", "Nothing to reset: this conversation is already empty.")
    if session.user_ids != [who.user_id]:
        # someone else's conversation, a group one (resetting it would erase the others' words),
        # or one with no recorded participant: not the caller's to clear
        return CommandResult("reset", "Only a one-to-one conversation can be reset by its own user.", ok=False)
    try:
        result = await engine.reset_session(who.session_id, app=who.app)
    except FormationError as exc:
        return CommandResult(
            "reset",
            f"I could not save this conversation to memory ({exc}); it was kept and will be retried.",
            ok=False,
        )
    data: dict[str, Any] = {}
    if isinstance(result, FormationResult):  # always, with wait=True
        data = {"job_id": result.job_id, "turns": result.turns, "facts": len(result.facts), "cleared": result.cleared}
    return CommandResult(
        "reset", "Done: this conversation is saved to memory and cleared. Let's start fresh.", data=data
    )
