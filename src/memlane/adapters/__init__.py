"""Bridges between memlane and agent frameworks. Each module imports its framework, which is
an optional extra: ``pip install 'memlane[adk]'`` (Google ADK), ``memlane[langgraph]``,
``memlane[openai-agents]``, ``memlane[pydantic-ai]``, or ``memlane[adapters]`` for all.
Importing an adapter without its extra raises :class:`~memlane.errors.MissingExtraError`
(a :class:`~memlane.errors.ConfigError` and an ``ImportError``) naming the command to run."""

from __future__ import annotations

from memlane.errors import MissingExtraError


def missing_extra(adapter: str, framework: str, extra: str, exc: ImportError) -> MissingExtraError:
    """The error an adapter module raises when its framework cannot be imported: ``adapter`` is
    the module name (``"langgraph"``), ``framework`` what to install (``"LangGraph (langgraph >=
    1.0)"``), ``extra`` memlane's extra, ``exc`` the framework's own ``ImportError``."""
    return MissingExtraError(
        f"memlane.adapters.{adapter} needs {framework}, which is missing or too old ({exc}). "
        f"Install it with: pip install 'memlane[{extra}]'",
        name=exc.name,
    )
