"""memlane's error tree as HTTP answers: one JSON shape, stable codes, status by error class.

Every error answer is ``{"error": {"code": "<stable_snake_case>", "message": "...", ...}}``.
The table :data:`ERROR_TABLE` maps the error classes (by name, walking the exception's MRO so
a subclass added later inherits its parent's answer) to a status and a code:

====================  ======  =========================
error class           status  code
====================  ======  =========================
AuthenticationError   401     ``unauthenticated``
PermissionDeniedError 403     ``forbidden``
NotFoundError         404     ``not_found``
ConflictError         409     ``conflict``
StoreFullError        507     ``storage_full``
PayloadTooLargeError  413     ``payload_too_large``
RateLimitedError      429     ``rate_limited`` (+ ``Retry-After``)
ScopeError            400     ``invalid_scope``
DimensionMismatch...  400     ``dimension_mismatch``
InvalidInputError     400     ``invalid_input``
MissingExtraError     400     ``missing_extra``
ConfigError           400     ``config_error``
NotSupportedError     400     ``not_supported``
UsageError            400     ``usage_error``
CorruptDatabaseError  503     ``corrupt_database``
StorageError          503     ``storage_unavailable``
EmbedderError         503     ``embedder_unavailable``
LLMError              503     ``llm_unavailable``
ProviderError         503     ``provider_unavailable``
FormationTimeoutError 503     ``formation_timeout``
FormationError        503     ``formation_failed``
====================  ======  =========================

Request-shape errors found by FastAPI (a missing field, a wrong type) are 422
``validation_error`` with ``details``; a pydantic ``ValidationError`` raised while building a
model from request data is the same 422. HTTP errors raised by the framework (unknown route
404, wrong method 405) keep their status with codes ``not_found`` / ``method_not_allowed`` /
``http_<status>``. Anything else is logged with its traceback and answered 500
``internal_error`` without details (bad input never gets there).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memlane.errors import MemlaneError
from memlane.registry import unavailable_errors
from memlane.service.auth import WWW_AUTHENTICATE

__all__ = [
    "ERROR_RESPONSES",
    "ERROR_TABLE",
    "ErrorResponse",
    "error_body",
    "error_response",
    "install_error_handlers",
    "status_and_code",
]

log = logging.getLogger("memlane.service")

#: Error class name -> (HTTP status, stable code). The first class in the exception's MRO found here wins.
ERROR_TABLE: dict[str, tuple[int, str]] = {
    "AuthenticationError": (401, "unauthenticated"),
    "PermissionDeniedError": (403, "forbidden"),
    "NotFoundError": (404, "not_found"),
    "ConflictError": (409, "conflict"),
    "StoreFullError": (507, "storage_full"),
    "PayloadTooLargeError": (413, "payload_too_large"),
    "RateLimitedError": (429, "rate_limited"),
    "ScopeError": (400, "invalid_scope"),
    "DimensionMismatchError": (400, "dimension_mismatch"),
    "InvalidInputError": (400, "invalid_input"),
    "MissingExtraError": (400, "missing_extra"),
    "ConfigError": (400, "config_error"),
    "NotSupportedError": (400, "not_supported"),
    "UsageError": (400, "usage_error"),
    "CorruptDatabaseError": (503, "corrupt_database"),
    "StorageError": (503, "storage_unavailable"),
    "EmbedderError": (503, "embedder_unavailable"),
    "LLMError": (503, "llm_unavailable"),
    "ProviderError": (503, "provider_unavailable"),
    "FormationTimeoutError": (503, "formation_timeout"),
    "FormationError": (503, "formation_failed"),
}


class ErrorDetail(BaseModel):
    """What went wrong: a stable snake_case ``code`` and a message saying how to fix it. Some
    errors add fields (``details`` for 422, ``retry_after`` for 429, ``limit`` for 413, ``job_id``)."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class ErrorResponse(BaseModel):
    """Every error answer: ``{"error": {"code", "message", ...}}``."""

    error: ErrorDetail


_ERROR_STATUSES = {
    400: "bad input (invalid_input, invalid_scope, config_error, ...)",
    401: "no API key, or an unknown or revoked one (unauthenticated)",
    403: "the key may not do this (forbidden)",
    404: "no such object in your scope (not_found)",
    409: "a concurrent writer changed it first (conflict)",
    413: "the request body is too large (payload_too_large)",
    422: "the request does not have the documented shape (validation_error)",
    429: "too many requests for this key; see Retry-After (rate_limited)",
    503: "the store or a model provider is unavailable; retry later",
    507: "the session store is full of other users' sessions (storage_full)",
}

#: The error answers every route documents (``include_router(..., responses=ERROR_RESPONSES)``).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text} for status, text in _ERROR_STATUSES.items()
}

#: Codes for framework HTTP errors (unknown route, wrong method, ...).
HTTP_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}

#: Extra attributes an error may carry that go into the JSON body as they are.
_EXTRA_ATTRS = ("job_id", "status", "expected", "got", "retryable", "status_code", "limit")


#: Database drivers' "server unreachable" errors, as (top-level package, class name), from each
#: backend's row (:attr:`memlane.registry.Backend.unavailable`, read again on each error): a
#: PostgreSQL or Redis server that goes away in the middle of a call is 503 ``storage_unavailable``
#: (retry later), like a StorageError, not a 500. Matched by name, so no driver is imported.
DRIVER_UNAVAILABLE: frozenset[tuple[str, str]] = unavailable_errors()


def status_and_code(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and stable code of a memlane error (500 ``internal_error`` otherwise)."""
    unavailable = unavailable_errors()
    for cls in type(exc).__mro__:
        hit = ERROR_TABLE.get(cls.__name__)
        if hit is not None and issubclass(cls, MemlaneError):
            return hit
        if (cls.__module__.partition(".")[0], cls.__name__) in unavailable:
            return 503, "storage_unavailable"
    return 500, "internal_error"


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """``{"error": {"code", "message", **extra}}``."""
    return {"error": {"code": code, "message": message, **jsonable_encoder(extra)}}


def error_response(
    status: int, code: str, message: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    """A JSON error answer in the one shape."""
    return JSONResponse(error_body(code, message, **extra), status_code=status, headers=headers)


def _retry_after(exc: BaseException) -> str | None:
    value = getattr(exc, "retry_after", None)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return str(max(1, math.ceil(value)))


async def _memlane_error(request: Request, exc: Exception) -> JSONResponse:
    status, code = status_and_code(exc)
    extra: dict[str, Any] = {}
    for attr in _EXTRA_ATTRS:
        value = getattr(exc, attr, None)
        if value is not None and (attr != "status" or isinstance(value, str)):
            extra["job_status" if attr == "status" else attr] = value
    headers: dict[str, str] | None = None
    retry_after = _retry_after(exc)
    if retry_after is not None:
        headers = {"Retry-After": retry_after}
        extra["retry_after"] = int(retry_after)
    if status == 401:  # RFC 9110: a 401 names the scheme to use
        headers = {**(headers or {}), "WWW-Authenticate": WWW_AUTHENTICATE}
    if status >= 500:
        log.warning("memlane service: %s %s -> %d %s: %s", request.method, request.url.path, status, code, exc)
    message = str(exc) or type(exc).__name__
    if status == 500:
        log.error(
            "memlane service: unexpected %s on %s %s",
            type(exc).__name__,
            request.method,
            request.url.path,
            exc_info=exc,
        )
        message = "internal error (logged on the server)"
        extra = {}
    return error_response(status, code, message, headers=headers, **extra)


def _validation_details(errors: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for err in errors:
        loc = [str(part) for part in err.get("loc", ())]
        out.append({"loc": loc, "msg": str(err.get("msg", "")), "type": str(err.get("type", ""))})
    return out


def _validation_message(details: list[dict[str, Any]]) -> str:
    if not details:
        return "the request is not valid"
    first = details[0]
    where = ".".join(first["loc"]) or "request"
    more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
    return f"{where}: {first['msg']}{more}"


async def _request_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError | ValidationError)
    details = _validation_details(exc.errors())
    return error_response(422, "validation_error", _validation_message(details), details=details)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code in (404, 405) and message in ("Not Found", "Method Not Allowed"):  # the router's own
        raw = request.scope.get("raw_path")
        path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
        what = f"no route {path}" if exc.status_code == 404 else f"{request.method} is not allowed on {path}"
        message = f"{what} (the routes are listed at /docs and /openapi.json)"
    headers = dict(exc.headers) if exc.headers else None
    return error_response(exc.status_code, code, message, headers=headers)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    status, code = status_and_code(exc)
    if code == "storage_unavailable":  # a database driver's connection error, not a bug
        log.warning("memlane service: %s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
        return error_response(status, code, "the store is unavailable (its server cannot be reached); retry later")
    log.error(
        "memlane service: unexpected %s on %s %s", type(exc).__name__, request.method, request.url.path, exc_info=exc
    )
    return error_response(500, "internal_error", "internal error (logged on the server)")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(MemlaneError, _memlane_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(ValidationError, _request_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
