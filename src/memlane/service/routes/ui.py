"""``/ui``: the memory inspector, a web page served from files inside the package.

The page is plain HTML, CSS and JavaScript modules (``memlane/service/ui/``; no build step, no
CDN): it works offline. It holds no secret and reads nothing by itself: the person using it types
an API key at the login, and every read and change goes through the public ``/v1`` API with that
key, so the key's rules hold in the page exactly as they do for any client (a read-only key
changes nothing, a user-bound key sees only its user). docs/inspector.md describes the views.

Only files under the asset folder with a known type are served; anything else is a 404 in the
API's error shape. Every answer carries a Content-Security-Policy that allows only this origin.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response

from memlane.errors import NotFoundError

__all__ = ["ASSETS", "router"]

#: The inspector's files (index.html, app.css, js/...).
ASSETS = Path(__file__).resolve().parent.parent / "ui"

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

#: Same-origin only: scripts, styles, images and API calls never leave the server.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def _asset(path: str) -> Path:
    """The file under :data:`ASSETS` that ``path`` names, or NotFoundError (no escape from the
    folder, no hidden files, only the known types)."""
    root = ASSETS.resolve()
    candidate = (root / path).resolve()
    if (
        root not in candidate.parents
        or any(part.startswith((".", "_")) for part in Path(path).parts)
        or candidate.suffix not in _TYPES
        or not candidate.is_file()
    ):
        raise NotFoundError(f"no inspector file {path!r}")
    return candidate


@router.get("/ui")
async def ui_root() -> Response:
    """``/ui`` → ``/ui/`` (the page's relative asset paths need the slash)."""
    return RedirectResponse("/ui/", status_code=308)


@router.get("/ui/")
async def ui_index() -> Response:
    """The inspector's page."""
    return FileResponse(_asset("index.html"), media_type=_TYPES[".html"], headers=_HEADERS)


@router.get("/ui/{path:path}")
async def ui_file(path: str) -> Response:
    """One of the page's files (``js/app.js``, ``app.css``, ...)."""
    file = _asset(path)
    return FileResponse(file, media_type=_TYPES[file.suffix], headers=_HEADERS)
