"""FTS5 query text for the SQLite keyword index (SQLite-only; core passes plain terms)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def fts_or_query(terms: Sequence[str]) -> str:
    """An FTS5 expression matching any term; every term quoted, so no query syntax leaks in."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def partition_token(partition: str) -> str:
    """The single FTS token that names a partition in the keyword index."""
    return "p" + hashlib.md5(partition.encode("utf-8")).hexdigest()[:20]
