"""``memlane migrate --from URL --to URL``: copy a long-term store into another.

SQLite to PostgreSQL (moving to a shared server), PostgreSQL to SQLite (a local copy, a
backup), SQLite to SQLite, PostgreSQL to PostgreSQL. Everything is copied (sessions, events,
facts with their vectors and keyword index, history, reflections, consolidated memory, jobs,
formation cursors, the embedder binding), in batches, resumably; the row counts are compared
at the end. The logic is :func:`memlane.stores.transfer.migrate`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from memlane.cli.progress import Progress
from memlane.config import redact_url

__all__ = ["add_parser", "cmd_migrate"]


def cmd_migrate(args: argparse.Namespace) -> int:
    from memlane.stores.transfer import migrate

    bars = not args.quiet and sys.stderr.isatty()

    def progress(table: str, total: int) -> Progress:
        return Progress(total, table, unit="row", enabled=bars)

    report = asyncio.run(
        migrate(
            args.source,
            args.target,
            batch_size=args.batch_size,
            restart=args.restart,
            force=args.force,
            progress=progress,
        )
    )
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0 if report.ok else 1
    binding = f"{report.embedder} ({report.dim} dimensions)" if report.embedder else "none (keyword-only)"
    print(f"copied {redact_url(args.source)} -> {redact_url(args.target)}; embedder: {binding}")
    print(f"{'table':<18} {'source':>9} {'target':>9} {'copied':>9}")
    for t in report.tables:
        mark = "" if t.ok else "  MISMATCH"
        note = " (resumed)" if t.resumed else ""
        print(f"{t.name:<18} {t.source_rows:>9} {t.target_rows:>9} {t.copied:>9}{note}{mark}")
    if report.ok:
        print(f"verified: every table has as many rows in the target as in the source ({len(report.tables)} tables)")
        return 0
    for p in report.problems:
        print(f"memlane: verification failed: {p}", file=sys.stderr)
    return 1


def _batch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 100000, got {text!r}")
    return value


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``memlane migrate`` to the CLI's sub-command parsers."""
    s = sub.add_parser(
        "migrate",
        parents=[common],
        help="copy a store into another (SQLite <-> PostgreSQL), resumably",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Copy everything in one long-term store into another: sessions, events, facts (vectors\n"
        "verbatim, keyword index rebuilt on the target), history, reflections, consolidated memory,\n"
        "jobs, formation cursors and the embedder binding (the context cache is skipped).\n\n"
        "Rows go in primary-key order, in batches; each batch commits with a checkpoint in the target,\n"
        "so an interrupted copy resumes where it stopped when run again (--restart scans from the\n"
        "start; rows already there are skipped, never duplicated). A target holding data from another\n"
        "source is refused (--force merges). At the end the row counts of every table are compared:\n"
        "exit 0 when they match, 1 when not. Stop the servers and workers writing the source first.",
        epilog="Examples:\n"
        "  memlane migrate --from ~/.local/share/memlane/memlane.db --to 'postgresql://memlane@db/memlane'\n"
        "  memlane migrate --from 'postgresql://memlane@db/memlane?schema=acme' --to backup.db\n"
        "  (a password in a URL: put it in $PGPASSWORD or ~/.pgpass instead of the command line)",
    )
    s.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="URL",
        help="the store to copy: a SQLite file, sqlite:///path, postgresql://...[?schema=NAME]",
    )
    s.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL",
        help="the store to fill (created if missing): same forms as --from",
    )
    s.add_argument("--batch-size", type=_batch, default=500, metavar="N", help="rows per batch (default: %(default)s)")
    s.add_argument("--restart", action="store_true", help="ignore the checkpoints of an interrupted copy")
    s.add_argument("--force", action="store_true", help="copy into a target that holds other data (merge)")
    s.set_defaults(fn=cmd_migrate)
