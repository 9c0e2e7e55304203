"""Bridges between memlane and agent frameworks. Each module imports its framework, which is
an optional extra: ``pip install 'memlane[adk]'`` (Google ADK), ``memlane[langgraph]``,
``memlane[openai-agents]``, ``memlane[pydantic-ai]``, or ``memlane[adapters]`` for all."""
