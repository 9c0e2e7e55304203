"""The point-in-time query parameters (docs/temporal.md) the read routes share: ``?as_of=``
(record time: memory as it was then) and ``?valid_at=`` (world time: what was true then),
ISO-8601. The engine checks them (a bad time is a 400 with the engine's message)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from memlane.errors import InvalidInputError

__all__ = ["AsOf", "ValidAt", "one_of"]

AsOf = Annotated[
    str | None,
    Query(description="ISO-8601 record time: memory as it held then, before later updates and deletes"),
]
ValidAt = Annotated[
    str | None,
    Query(description="ISO-8601 world time: what was true then, by the statements' own times"),
]


def one_of(body: str | None, query: str | None, name: str) -> str | None:
    """A time given in a request body or its query string (both: they must agree)."""
    if body is not None and query is not None and body != query:
        raise InvalidInputError(f"{name} is given twice with different values ({body!r} and {query!r})")
    return body if body is not None else query
