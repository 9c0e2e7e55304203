"""Settings read once at the edges (CLI, later the server): environment variables with the
``MEMLANE_`` prefix. The library API takes constructor arguments instead."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


def default_data_dir() -> Path:
    """The per-user data directory: ``$XDG_DATA_HOME/memlane`` (``~/.local/share/memlane``),
    ``~/Library/Application Support/memlane`` on macOS, ``%LOCALAPPDATA%\\memlane`` on Windows."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "memlane"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "memlane"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "memlane"


def env_positive_int(name: str, default: int) -> int:
    """``$name`` as a positive integer, or ``default`` when unset or blank.

    Raises:
        ConfigError: the variable is set but not a positive integer.
    """
    from memlane.errors import ConfigError

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {raw!r}")
    return value


def default_db_path() -> str:
    """``$MEMLANE_DB`` if set, else ``<data dir>/memlane.db``."""
    return os.environ.get("MEMLANE_DB") or str(default_data_dir() / "memlane.db")


class Settings(BaseModel):
    """What the CLI reads from the environment.

    Environment: ``MEMLANE_DB`` (database file), ``MEMLANE_EMBEDDER`` (``auto``, ``local``,
    ``local:/path``, ``hash``, ``openai:MODEL``, ``gemini:MODEL``, ``none``), ``MEMLANE_LLM``
    (formation model: ``offline``, ``openai:MODEL``, ``ollama:MODEL``, ``anthropic:MODEL``,
    ``gemini:MODEL``, ...).
    """

    model_config = ConfigDict(extra="forbid")

    db: str = Field(default_factory=default_db_path)
    embedder: str = Field(default_factory=lambda: os.environ.get("MEMLANE_EMBEDDER", "auto"))
    llm: str = Field(default_factory=lambda: os.environ.get("MEMLANE_LLM", "offline"))
