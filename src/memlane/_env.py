"""Leaf helpers every layer may use: environment integers, default paths, URL redaction.

This module imports nothing of memlane but :mod:`memlane.errors`, so the providers, the
stores and the engine read ``$MEMLANE_*`` integers and the default data folder, and hide
passwords in messages, without importing the settings (:mod:`memlane.settings`) or the
edge that builds engines from them (:mod:`memlane.config`). Both re-export these names.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from memlane.errors import ConfigError

__all__ = ["default_data_dir", "default_db_path", "env_positive_int", "redact_url"]


def default_data_dir() -> Path:
    """The per-user data directory: ``$XDG_DATA_HOME/memlane`` (``~/.local/share/memlane``),
    ``~/Library/Application Support/memlane`` on macOS, ``%LOCALAPPDATA%\\memlane`` on Windows."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "memlane"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "memlane"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "memlane"


def default_db_path() -> str:
    """``$MEMLANE_DB`` if set, else ``<data dir>/memlane.db``."""
    return os.environ.get("MEMLANE_DB") or str(default_data_dir() / "memlane.db")


def env_positive_int(name: str, default: int) -> int:
    """``$name`` as a positive integer, or ``default`` when unset or blank.

    Raises:
        ConfigError: the variable is set but not a positive integer.
    """
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


def redact_url(value: str) -> str:
    """``value`` with the password of a ``scheme://user:password@host`` URL replaced by ``***``."""
    if "://" not in value:
        return value
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return value
    if not password:
        return value
    userinfo, _, host = parts.netloc.rpartition("@")  # the host as written: a bad port must not raise
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
