"""FastAPI dependencies shared by the routes: who is calling, and their tenant's engine.

* :func:`principal` — the caller (:func:`memlane.service.auth.current_principal`).
* :func:`engine` — the calling tenant's open :class:`~memlane.memory.AsyncMemory`
  (``await hub.get(principal.tenant)``); a route never names a tenant itself.
* :func:`authorize` — the one rule for user ids and writes (re-exported from auth).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Request

from memlane.errors import NotFoundError, UsageError
from memlane.memory import AsyncMemory
from memlane.models import Session
from memlane.service import auth
from memlane.service.auth import Principal
from memlane.service.limits import page_size

__all__ = ["Caller", "Engine", "authorize", "check_session", "engine", "hub_of", "page", "principal", "settings_of"]


async def principal(caller: Annotated[Principal, Depends(auth.current_principal)]) -> Principal:
    """The caller of this request (the key's principal; ``tenant="default"`` on a key-less server)."""
    return caller


def authorize(p: Principal, *, user_id: str | None, write: bool, scope: str = "user") -> str | None:
    """The effective user id of a request for ``p`` (:func:`memlane.service.auth.authorize`:
    raises PermissionDeniedError when not allowed)."""
    return auth.authorize(p, user_id=user_id, write=write, scope=scope)


def check_session(p: Principal, session: Session | None, session_id: str, app: str, *, write: bool) -> Session:
    """``session`` when the caller may read it (and write it, with ``write``): it exists and, for
    a user-bound key, the key's user takes part in it. Otherwise NotFoundError (another user's
    session is not found, its existence is not revealed) or PermissionDeniedError (read-only)."""
    authorize(p, user_id=None, write=write)
    if session is None or (p.user_id is not None and p.user_id not in session.user_ids):
        raise NotFoundError(f"no session {session_id!r} in app {app!r}")
    return session


def page(request: Request, limit: int | None, *, default: int | None = None) -> int:
    """A listing's page size: ``limit`` (1..the server's cap) or the default (:func:`limits.page_size`)."""
    return page_size(request, limit, default=default)


def hub_of(request: Request) -> Any:
    """The app's :class:`~memlane.service.hub.MemoryHub`."""
    hub = getattr(request.app.state, "hub", None)
    if hub is None:
        raise UsageError("the memlane service is not started (no memory hub)")
    return hub


def settings_of(request: Request) -> Any:
    """The settings in force: the hub's current ones (a configuration reload replaces them),
    else the ones the app was created with (None: defaults)."""
    hub = getattr(request.app.state, "hub", None)
    current = getattr(hub, "settings", None)
    return current if current is not None else getattr(request.app.state, "settings", None)


Caller = Annotated[Principal, Depends(principal)]


async def engine(request: Request, caller: Caller) -> AsyncIterator[AsyncMemory]:
    """The calling tenant's engine, leased for the whole request: a configuration reload
    meanwhile serves new requests from new engines and closes this one only after it ends."""
    async with hub_of(request).lease(caller.tenant) as memory:
        yield memory


Engine = Annotated[AsyncMemory, Depends(engine)]
