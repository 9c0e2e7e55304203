"""Row helpers shared by the PostgreSQL stores (facts, search, reflections).

* :data:`FACT_COLS` and :func:`row_to_fact`: one ``facts`` row as a :class:`~memlane.models.Fact`
  (the same column order as the SQLite store's ``_FACT_COLS``, so code ports line by line).
* :func:`enc` / :func:`dec` (and :func:`enc_json` / :func:`dec_json`): PostgreSQL ``text`` and
  ``jsonb`` cannot hold the NUL character, which ids and text may contain (SQLite keeps them).
  Strings are stored with NUL written as ``ESC + "0"`` and ``ESC`` itself as ``ESC + "e"``
  (``ESC`` is the noncharacter U+10FFFE): the mapping is injective, so equality queries on
  encoded values are exact, and strings without either character are stored unchanged.
  Encode every user-supplied string written or compared; decode every one read.
* :func:`filter_sql`: a :class:`~memlane.models.FactFilter` as SQL conditions (metadata keys
  with dots are paths into nested ``jsonb``).
* :func:`resolve_partitions`: the stored partitions a :class:`PartitionFilter` names (every
  read names its partitions; there is no unscoped read).
* :func:`digest`, :func:`parse_cursor`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from memlane.inputs import check_cursor
from memlane.models import Fact, FactFilter, PartitionFilter, metadata_path, utcnow
from memlane.stores.sql.dialect import filter_conditions

__all__ = [
    "FACT_COLS",
    "Conn",
    "dec",
    "dec_json",
    "digest",
    "enc",
    "enc_json",
    "filter_sql",
    "parse_cursor",
    "resolve_partitions",
    "row_to_fact",
    "vector_list",
]

Conn = psycopg.AsyncConnection[Any]

#: Columns of a fact row, in the order :func:`row_to_fact` reads them (index 0 is ``rowid``,
#: 2 ``partition``, 19 ``invalid_at``, 21 ``embedding``).
FACT_COLS = (
    "rowid, id, partition, content, hash, scope, agent_id, user_id, session_id, kind, author, seq, "
    "occurred_at, formed_at, updated_at, access_count, version, source_event_ids, valid_from, "
    "invalid_at, metadata, embedding"
)

_ESC = "\U0010fffe"
_DEC_RE = re.compile(_ESC + "(.)", re.DOTALL)


def enc(value: str | None) -> str | None:
    """``value`` as PostgreSQL ``text`` can hold it (see the module docstring)."""
    if value is None or (_ESC not in value and "\x00" not in value):
        return value
    return value.replace(_ESC, _ESC + "e").replace("\x00", _ESC + "0")


def dec(value: str | None) -> str | None:
    """The inverse of :func:`enc`."""
    if value is None or _ESC not in value:
        return value
    return _DEC_RE.sub(lambda m: "\x00" if m[1] == "0" else _ESC, value)


def enc_json(value: Any) -> Any:
    """``value`` (JSON data) with every string and key passed through :func:`enc`."""
    if isinstance(value, str):
        return enc(value)
    if isinstance(value, dict):
        return {enc(str(k)): enc_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [enc_json(v) for v in value]
    return value


def dec_json(value: Any) -> Any:
    """The inverse of :func:`enc_json`."""
    if isinstance(value, str):
        return dec(value)
    if isinstance(value, dict):
        return {dec(k): dec_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [dec_json(v) for v in value]
    return value


def row_to_fact(r: Sequence[Any], *, with_embedding: bool = False) -> Fact:
    """A fact from a row of :data:`FACT_COLS` (the vector only when ``with_embedding``)."""
    emb = r[21]
    return Fact(
        id=dec(r[1]) or "",
        content=dec(r[3]) or "",
        hash=r[4],
        scope=r[5],
        agent_id=dec(r[6]),
        user_id=dec(r[7]),
        session_id=dec(r[8]),
        kind=r[9],
        author=dec(r[10]),
        seq=r[11],
        occurred_at=r[12],
        formed_at=r[13] or utcnow(),
        updated_at=r[14] or utcnow(),
        access_count=r[15],
        version=r[16],
        source_event_ids=dec_json(r[17]),
        valid_from=r[18] or utcnow(),
        invalid_at=r[19],
        metadata=dec_json(r[20]),
        embedding=(vector_list(emb) if with_embedding and emb is not None else None),
    )


def vector_list(value: Any) -> list[float]:
    """A loaded ``vector`` value as floats (pgvector's loader gives a ``pgvector.Vector``;
    a numpy array or a list are taken too)."""
    if hasattr(value, "to_list"):
        return [float(x) for x in value.to_list()]
    return [float(x) for x in value]


def digest(parts: list[Any]) -> str:
    """A short stable token of JSON-able ``parts`` (for memory and reflection stamps)."""
    return hashlib.blake2b(json.dumps(parts, default=str).encode(), digest_size=12).hexdigest()


parse_cursor = check_cursor  # a listing cursor: see memlane.inputs.check_cursor


def _metadata_sql(table: str, key: str, value: Any) -> tuple[str, list[Any]]:
    path = [enc(p) for p in metadata_path(key)]  # "sender.id": nested
    return f"({table}.metadata #> %s::text[]) = %s", [path, Jsonb(enc_json(value))]


def filter_sql(flt: FactFilter | None, table: str) -> tuple[str, list[Any]]:
    """`` AND ...`` conditions on ``table``'s columns for a pushed-down filter (``%s`` params).

    Metadata values compare as JSON: a string matches only a string, ``True`` only JSON
    ``true`` (not ``1``), ``1`` matches ``1`` and ``1.0``, ``None`` only an explicit ``null``.
    """
    return filter_conditions(flt, table, text=enc, metadata=_metadata_sql, mark="%s")


async def resolve_partitions(conn: Conn, pf: PartitionFilter) -> list[str]:
    """The concrete partitions a filter names: exact keys plus, for each prefix, the stored
    partitions starting with it (a byte-order range scan: ``COLLATE "C"`` so the database's
    locale cannot reorder the ``|`` and ``%`` of partition keys)."""
    parts = list(pf.exact)
    for prefix in pf.prefixes:
        cur = await conn.execute(
            'SELECT partition FROM partitions WHERE partition COLLATE "C" >= %s AND partition COLLATE "C" < %s',
            (prefix, prefix + "\U0010ffff"),
        )
        parts.extend(r[0] for r in await cur.fetchall() if r[0] not in parts)
    return parts
