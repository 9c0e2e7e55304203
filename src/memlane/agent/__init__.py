"""The agent surface: what an agent (or the app around it) calls to use memlane.

* :mod:`memlane.agent.context` — the always-in-context ``<MemoryContext>`` block and the
  windowed replay of the session for the model.
* :mod:`memlane.agent.tools` — ``search_facts``, ``load_memory``, ``preload_memory``,
  ``remember`` as Python callables and as OpenAI / Anthropic / Gemini function schemas.
* :mod:`memlane.agent.commands` — slash commands handled out of band.
* :mod:`memlane.agent.contacts` — "my girlfriend" → a stored contact.
* :mod:`memlane.agent.state` — elizaOS-style state providers and ``compose_state``.

Framework bridges (ADK, LangGraph, OpenAI Agents, pydantic-ai) live in :mod:`memlane.adapters`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlane.agent.commands import CommandResult, handle_command, handle_command_sync, is_command
    from memlane.agent.contacts import Contact, Resolution, resolve_contact, resolve_contact_sync
    from memlane.agent.context import assemble_context, escape_memory_text, replay_messages, replay_window
    from memlane.agent.state import (
        FunctionProvider,
        Provider,
        ProviderResult,
        State,
        StateComposer,
        StateMessage,
        SyncStateComposer,
    )
    from memlane.agent.tools import MemoryTools, memory_tools, provision, tool_result_json

# Imported on first use: the engine (memlane.memory) imports memlane.agent.config, which runs
# this package, and the other modules import the engine, so eager imports here would be circular.
_EXPORTS = {
    "CommandResult": "commands",
    "handle_command": "commands",
    "handle_command_sync": "commands",
    "is_command": "commands",
    "Contact": "contacts",
    "Resolution": "contacts",
    "resolve_contact": "contacts",
    "resolve_contact_sync": "contacts",
    "assemble_context": "context",
    "escape_memory_text": "context",
    "replay_messages": "context",
    "replay_window": "context",
    "FunctionProvider": "state",
    "Provider": "state",
    "ProviderResult": "state",
    "State": "state",
    "StateComposer": "state",
    "StateMessage": "state",
    "SyncStateComposer": "state",
    "MemoryTools": "tools",
    "memory_tools": "tools",
    "provision": "tools",
    "tool_result_json": "tools",
}

__all__ = [
    "CommandResult",
    "Contact",
    "FunctionProvider",
    "MemoryTools",
    "Provider",
    "ProviderResult",
    "Resolution",
    "State",
    "StateComposer",
    "StateMessage",
    "SyncStateComposer",
    "assemble_context",
    "escape_memory_text",
    "handle_command",
    "handle_command_sync",
    "is_command",
    "memory_tools",
    "provision",
    "replay_messages",
    "replay_window",
    "resolve_contact",
    "resolve_contact_sync",
    "tool_result_json",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memlane.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(f"memlane.agent.{module}"), name)
