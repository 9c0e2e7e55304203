"""Settings at the edge: the settings (:mod:`memlane.settings`) and the engine built from them.

The CLI and the server start here: :func:`load_settings` reads defaults < YAML < environment
(< command line), and :func:`build_memory` assembles an :class:`~memlane.memory.AsyncMemory`
from the result. The engine is assembled here, at the edge, so that the settings module and
the leaf helpers (:mod:`memlane._env`) that lower layers use never import the engine. Every
name of :mod:`memlane.settings` is re-exported, so ``from memlane.config import ...`` keeps
working.
"""

from __future__ import annotations

import os

from memlane.formation.config import FormationConfig
from memlane.memory import AsyncMemory
from memlane.settings import (
    CONFIG_ENV,
    ENV_VARS,
    SECRET_ENV_VARS,
    MemlaneSettings,
    MemorySettings,
    ServerSettings,
    SessionSettings,
    Settings,
    default_data_dir,
    default_db_path,
    engine_arguments,
    env_positive_int,
    formation_config,
    load_settings,
    recall_config,
    redact_url,
    retrieval_config,
    session_backend,
)
from memlane.stores.base import SessionStore

__all__ = [
    "CONFIG_ENV",
    "ENV_VARS",
    "SECRET_ENV_VARS",
    "MemlaneSettings",
    "MemorySettings",
    "ServerSettings",
    "SessionSettings",
    "Settings",
    "build_memory",
    "default_data_dir",
    "default_db_path",
    "engine_arguments",
    "env_positive_int",
    "formation_config",
    "load_settings",
    "recall_config",
    "redact_url",
    "retrieval_config",
    "session_backend",
]


def build_memory(
    settings: MemlaneSettings,
    store: str | os.PathLike[str] | None = None,
    *,
    sessions: str | SessionStore | None = None,
    jobs: str | None = None,
    formation: FormationConfig | None = None,
) -> AsyncMemory:
    """An unopened :class:`~memlane.memory.AsyncMemory` configured by ``settings``.

    Args:
        store: the long-term store (default ``settings.memory.store``); the service passes
            each tenant's own.
        sessions: the session store to use instead of the one ``sessions.backend`` names
            (the service hands one in-process store from reload to reload, and each tenant
            its own Redis prefix).
        jobs: the job queue URL to use instead of ``memory.queue`` (each tenant's own).
        formation: the formation settings to use instead of :func:`formation_config`'s
            (the service turns background formation off for ``server.formation_worker: false``).

    Raises:
        ConfigError: a setting the engine cannot use (e.g. ``redis`` sessions without a URL,
            an unknown embedder name).
    """
    return AsyncMemory(**engine_arguments(settings, store, sessions=sessions, jobs=jobs, formation=formation))
