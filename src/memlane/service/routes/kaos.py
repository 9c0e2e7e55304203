"""The session-log routes under their earlier, KAOS-named module: :mod:`memlane.service.routes.session_log`.

Kept for code that imports ``memlane.service.routes.kaos`` (listed in :mod:`memlane.compat`);
the app includes the routes once, from ``session_log``.
"""

from memlane.service.routes.session_log import (
    DEFAULT_EVENTS,
    KaosEvent,
    KaosEvents,
    KaosSessions,
    memory_events,
    memory_sessions,
    router,
)

__all__ = ["DEFAULT_EVENTS", "KaosEvent", "KaosEvents", "KaosSessions", "memory_events", "memory_sessions", "router"]
