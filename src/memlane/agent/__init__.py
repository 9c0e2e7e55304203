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
