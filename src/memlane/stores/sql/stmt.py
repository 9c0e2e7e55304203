"""Statements and programs of the sans-IO core (see :mod:`memlane.stores.sql`).

A *program* is a generator that yields :class:`Stmt` and is sent back what each statement
returned: ``None`` for :data:`EXEC` and :data:`MANY`, one row or ``None`` for :data:`ONE`, a
list of rows for :data:`ALL`, the affected row count for :data:`COUNT`. Rows are sequences
indexed by column position. The program's return value is the operation's result.

Algorithms compose with ``yield from``::

    def count_facts(d: Dialect, part: str) -> Program[int]:
        row = yield from one("SELECT COUNT(*) FROM facts WHERE partition=?", (part,))
        return int(row[0]) if row else 0
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = [
    "ALL",
    "COUNT",
    "EXEC",
    "MANY",
    "ONE",
    "Memo",
    "Program",
    "Row",
    "Stmt",
    "all_rows",
    "count",
    "one",
    "run_all",
]

T = TypeVar("T")

Row = Sequence[Any]

Fetch = Literal["exec", "one", "all", "count", "many"]
EXEC: Fetch = "exec"
ONE: Fetch = "one"
ALL: Fetch = "all"
COUNT: Fetch = "count"
MANY: Fetch = "many"  # ``args`` is a sequence of argument tuples (executemany)


@dataclass(frozen=True, slots=True)
class Stmt:
    """One SQL statement: ``?`` placeholders (a driver rewrites them to its paramstyle; a
    literal ``%`` is allowed), its arguments already adapted by the dialect, and what the
    program wants back (``fetch``)."""

    sql: str
    args: Sequence[Any] = ()
    fetch: Fetch = EXEC


class Memo(dict[Any, Any]):
    """``memo[x]`` is ``fn(x)``, computed once per distinct ``x`` (a bulk insert's rows share
    a few timestamps: one ``isoformat`` per distinct time, not one per row and column)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, key: Any) -> Any:
        value = self[key] = self.fn(key)
        return value


#: An algorithm: yields statements, is sent their results, returns ``T``.
Program = Generator[Stmt, Any, T]


def one(sql: str, args: Sequence[Any] = ()) -> Program[Row | None]:
    """The first row of a query, or None."""
    row: Row | None = yield Stmt(sql, args, ONE)
    return row


def all_rows(sql: str, args: Sequence[Any] = ()) -> Program[list[Row]]:
    """Every row of a query."""
    rows: list[Row] = yield Stmt(sql, args, ALL)
    return rows


def count(sql: str, args: Sequence[Any] = ()) -> Program[int]:
    """Run a write; the number of rows it changed."""
    n: int = yield Stmt(sql, args, COUNT)
    return int(n)


def run_all(stmts: Iterable[Stmt]) -> Program[None]:
    """Run statements whose results the program does not need."""
    for stmt in stmts:  # noqa: UP028 (yield from a list would fail on the driver's send)
        yield stmt


def drive(program: Program[T], execute: Callable[[Stmt], Any]) -> T:
    """Run ``program`` to its end, each statement through ``execute`` (a synchronous driver)."""
    try:
        stmt = next(program)
        while True:
            stmt = program.send(execute(stmt))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def drive_async(program: Program[T], execute: Callable[[Stmt], Awaitable[Any]]) -> T:
    """Run ``program`` to its end, each statement awaited through ``execute`` (an async driver)."""
    try:
        stmt = next(program)
        while True:
            stmt = program.send(await execute(stmt))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
