"""Keyword and vector candidate search of the PostgreSQL fact store, plus the columns search
reads (``facts.ctx``, ``facts.embedding``): a mixin of :class:`~memlane.stores.postgres.facts.PgFactStore`.

Keyword search reads the generated ``facts.tsv`` (English ``tsvector``, GIN index): the
searchable text is weight A, the event date in words B, the neighbouring turns of the
session C. ``ts_rank_cd`` has no inverse document frequency, so a row scores the sum over the
query terms it holds of BM25's idf (the term's document frequency among the partitions'
matches, N the partitions' size) times ``ts_rank_cd`` of that term, whose weights mirror the
SQLite store's BM25 column weights (text 1.0, ``date_weight`` 1.0, ``ctx_weight`` 0.5): a turn
that says the words ranks above one whose neighbours say them, and a rare word counts more
than a common one. On LoCoMo (keyword only, 883 questions) recall@5 / @10 went from
0.582 / 0.669 with ``ts_rank_cd`` alone to 0.686 / 0.758 (SQLite's FTS5 BM25: 0.703 / 0.772).
In partitions of ``keyword_split_min_rows`` rows or more only the rows holding one of the
rarest terms are scored (:meth:`PgSearchMixin.keyword_search`).

Vector search returns cosine similarity (``1 - (embedding <=> q)``, -1..1). Partitions of up to
``exact_max`` rows are scanned exactly (the ordering expression is not the index's, so the
planner cannot take the approximate HNSW index); larger ones go through the HNSW index with
``hnsw.ef_search = max(100, 8 * limit)`` for that statement, and when the index returns fewer
than ``limit`` rows (pgvector 0.6 filters *after* the graph walk, so a rare filter or a small
share of a large table starves it) the exact scan answers, in the same statement. Every
condition (partitions, validity, kind, author, session, metadata) is in the SQL, before ``LIMIT``.

Round trips: each search is one statement once a user's partitions are known (remembered per
prefix, checked by every statement, which runs again when they changed); the partitions' size
and the keyword statistics are cached per store and checked inside the statement against the
partitions' highest rowid and change counters (:class:`_SearchCache`). Each candidate comes
with its fact row, and the keyword statement returns the partitions' authors (the engine's
author boost reads them from the cache, :meth:`PgSearchMixin._cached_authors`), so an
``AsyncMemory.search`` of one query sends two statements: keyword and vector (issue 19).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from memlane.documents import DOCUMENT_THRESHOLD_CHARS
from memlane.errors import ConfigError, DimensionMismatchError, StorageError
from memlane.models import PartitionFilter
from memlane.retrieval.context import CONTEXT_RADIUS, affected_range, neighbour_context
from memlane.retrieval.text import keyword_text
from memlane.stores.base import Candidate, FactFilter, Vector
from memlane.stores.embedding import check_windows
from memlane.stores.postgres.dialect import PgDialect, pg_sql
from memlane.stores.postgres.rows import FACT_COLS, Conn, dec, enc, filter_sql, resolve_partitions, row_to_fact
from memlane.stores.sql.facts import write_windows

if TYPE_CHECKING:
    from memlane.stores.postgres.db import PgDatabase

__all__ = ["PgSearchMixin", "partitions_now_sql", "tsquery_sql"]

#: pgvector 0.6 caps ``hnsw.ef_search`` at 1000.
EF_SEARCH_MAX = 1000

#: A candidate's fact row (:data:`FACT_COLS` of ``facts fr``, the vector left out): each
#: candidate statement returns its candidates' rows, so the engine reads no hit again.
_ROW_COLS = ", ".join([*(f"fr.{c.strip()}" for c in FACT_COLS.split(",")[:-1]), "NULL"])
#: The first (statistics) row's place holders for those columns.
_NO_ROW = ", ".join(["NULL"] * len(FACT_COLS.split(",")))


def tsquery_sql(terms: Sequence[str]) -> tuple[str, list[str]]:
    """An SQL ``tsquery`` expression matching any of ``terms`` (the core's keyword terms), with
    the terms as parameters: ``phraseto_tsquery('english', %s) || ...``. Each term is parsed
    by PostgreSQL's English configuration like the indexed text (stemmed; a term that is
    punctuation-joined words must match as a phrase, as a quoted FTS5 term does); no term is
    ever part of the SQL text."""
    return " || ".join(["phraseto_tsquery('english', %s)"] * len(terms)), list(terms)


#: The partitions' highest rowid (one backward step on the partition index each) and their
#: change counters: rows added since a count are at most the rowid's move.
_MAXROW_SQL = (
    "(SELECT COALESCE(max(x.r), 0) FROM unnest(%(parts)s::text[]) p(k),"
    " LATERAL (SELECT rowid AS r FROM facts WHERE partition = p.k"
    " ORDER BY partition DESC, rowid DESC LIMIT 1) x)"
)
_CHANGES_SQL = "(SELECT COALESCE(sum(changes), 0) FROM partitions WHERE partition = ANY(%(parts)s))"


#: Document frequencies kept per cached keyword statistics entry.
_MAX_TERMS = 10_000


def partitions_now_sql(pf: PartitionFilter) -> tuple[str, dict[str, Any]]:
    """An SQL expression for the stored partitions under ``pf``'s prefixes (``text[]``, NULL
    without prefixes), with its named parameters: a search statement returns it so the store
    learns, in the same round trip, whether the partitions it searched were still all of them."""
    if not pf.prefixes:
        return "NULL::text[]", {}
    conds: list[str] = []
    args: dict[str, Any] = {}
    for i, prefix in enumerate(pf.prefixes):
        conds.append(f'(partition COLLATE "C" >= %(plo{i})s AND partition COLLATE "C" < %(phi{i})s)')
        args[f"plo{i}"], args[f"phi{i}"] = prefix, prefix + "\U0010ffff"
    return f"(SELECT COALESCE(array_agg(partition), '{{}}'::text[]) FROM partitions WHERE {' OR '.join(conds)})", args


def _named(sql: str, args: Sequence[Any], prefix: str) -> tuple[str, dict[str, Any]]:
    """``sql``'s ``%s`` placeholders (from :func:`filter_sql`, :func:`tsquery_sql`) as named
    ones ``%(<prefix><i>)s``, with their arguments, to compose them into one statement."""
    parts = sql.split("%s")
    if len(parts) - 1 != len(args):
        raise AssertionError(f"{len(parts) - 1} placeholders for {len(args)} arguments")
    out = parts[0]
    named: dict[str, Any] = {}
    for i, (arg, rest) in enumerate(zip(args, parts[1:], strict=True)):
        out += f"%({prefix}{i})s{rest}"
        named[f"{prefix}{i}"] = arg
    return out, named


def _vector_sql(fsql: str, now: str) -> str:
    """The vector statement: a first row (partitions now, highest rowid, changes, the
    partitions' size, rows the HNSW walk returned), then the candidates ``(k, id, cosine
    distance, rowid)`` and their rows (:data:`_ROW_COLS`, read by rowid after the ``LIMIT``):
    the walk's when it ran and returned ``k`` rows, else the exact scan's. A fact's distance
    is its nearest vector's: ``facts.embedding`` or one of its further windows
    (``fact_windows``, issue 22; each walked and scanned beside the facts, by partition).

    The walk is ordered by the index's own operator expression, so the planner takes the
    index; the exact scan by an expression the index cannot serve, so every row is scored (a
    zero vector, whose cosine distance is NaN, scores 0 as a dot product with it does; ties
    keep insertion order). Each runs only when its condition (no column in it: a one-time
    filter) holds; ``set_config(..., true)`` in the walk's condition sets ``hnsw.ef_search``
    for this statement's transaction before the index is read.
    """
    where = (
        "f.partition = ANY(%(parts)s) AND f.invalid_at IS NULL AND f.embedding IS NOT NULL"
        f" AND f.kind <> 'document'{fsql}"
    )
    return (
        f"WITH s AS MATERIALIZED (SELECT {_MAXROW_SQL} AS maxrow, {_CHANGES_SQL} AS changes),"
        " c AS MATERIALIZED (SELECT CASE"
        " WHEN %(known)s::bigint IS NOT NULL"
        " AND %(known)s::bigint + greatest(s.maxrow - %(cmax)s::bigint, 0) <= %(xmax)s"
        " THEN %(known)s::bigint + greatest(s.maxrow - %(cmax)s::bigint, 0)"
        " WHEN %(known)s::bigint > %(xmax)s AND s.changes = %(cch)s THEN %(known)s::bigint"
        " ELSE (SELECT count(*) FROM (SELECT 1 FROM facts WHERE partition = ANY(%(parts)s) LIMIT %(cap1)s) x)"
        " END AS n FROM s),"
        " h0 AS MATERIALIZED (SELECT f.id, f.rowid, f.embedding <=> %(q)s AS d FROM facts f"
        " WHERE (SELECT n FROM c) > %(xmax)s AND (SELECT set_config('hnsw.ef_search', %(ef)s, true)) IS NOT NULL"
        f" AND {where} ORDER BY f.embedding <=> %(q)s LIMIT %(k)s),"
        " hw AS MATERIALIZED (SELECT f.id, f.rowid, w.embedding <=> %(q)s AS d FROM fact_windows w"
        " JOIN facts f ON f.id = w.fact_id WHERE (SELECT n FROM c) > %(xmax)s"
        " AND (SELECT set_config('hnsw.ef_search', %(ef)s, true)) IS NOT NULL"
        f" AND w.partition = ANY(%(parts)s) AND {where} ORDER BY w.embedding <=> %(q)s LIMIT %(k)s),"
        " h AS MATERIALIZED (SELECT id, rowid, min(d) AS d FROM (SELECT * FROM h0 UNION ALL SELECT * FROM hw) hx"
        " GROUP BY id, rowid ORDER BY min(d), rowid LIMIT %(k)s),"
        " hn AS MATERIALIZED (SELECT count(*) AS hn FROM h),"
        " e AS MATERIALIZED (SELECT id, rowid, min(d) AS d FROM ("
        "SELECT f.id, f.rowid, COALESCE(NULLIF(f.embedding <=> %(q)s, 'NaN'::float8), 1.0) AS d"
        " FROM facts f WHERE ((SELECT n FROM c) <= %(xmax)s OR (SELECT hn FROM hn) < %(k)s)"
        f" AND {where}"
        " UNION ALL SELECT f.id, f.rowid, COALESCE(NULLIF(w.embedding <=> %(q)s, 'NaN'::float8), 1.0)"
        " FROM fact_windows w JOIN facts f ON f.id = w.fact_id"
        " WHERE ((SELECT n FROM c) <= %(xmax)s OR (SELECT hn FROM hn) < %(k)s)"
        f" AND w.partition = ANY(%(parts)s) AND {where}) ex GROUP BY id, rowid ORDER BY min(d), rowid LIMIT %(k)s)"
        f" SELECT 0, NULL::text, NULL::float8, NULL::bigint, {now}, s.maxrow, s.changes, (SELECT n FROM c),"
        f" (SELECT hn FROM hn), {_NO_ROW} FROM s"
        f" UNION ALL SELECT 1, h.id, h.d, h.rowid, NULL, NULL, NULL, NULL, NULL, {_ROW_COLS}"
        " FROM h JOIN facts fr ON fr.rowid = h.rowid WHERE (SELECT hn FROM hn) >= %(k)s"
        f" UNION ALL SELECT 2, e.id, e.d, e.rowid, NULL, NULL, NULL, NULL, NULL, {_ROW_COLS}"
        " FROM e JOIN facts fr ON fr.rowid = e.rowid"
    )


@dataclass
class _Stats:
    """What a keyword statement that scored every match counted for some partitions and a
    filter: the partitions' highest rowid and change counters then, their size (BM25's N),
    and each term's document frequency among the matches."""

    maxrow: int
    changes: int
    n: float
    dfs: dict[str, int]

    def stands(self, now: _Stats, tolerance: float) -> bool:
        """Whether these counts still stand at ``now``'s highest rowid and change counters (the
        same test the keyword statement makes)."""
        return (now.maxrow - self.maxrow) + abs(now.changes - self.changes) <= tolerance * self.n


@dataclass
class _SearchCache:
    """Per store: the partitions under each prefix, keyword statistics, partition sizes and
    the partitions' authors (each bounded: cleared when full)."""

    parts: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)
    stats: dict[tuple[Any, ...], _Stats] = field(default_factory=dict)
    sizes: dict[tuple[Any, ...], tuple[int, int, int]] = field(default_factory=dict)
    authors: dict[tuple[str, ...], list[str]] = field(default_factory=dict)
    limit: int = 50_000

    def put_parts(self, key: tuple[str, ...], value: tuple[str, ...]) -> None:
        if len(self.parts) >= self.limit:
            self.parts.clear()
        self.parts[key] = value

    def put_stats(self, key: tuple[Any, ...], value: _Stats) -> None:
        if len(self.stats) >= self.limit // 10:
            self.stats.clear()
        self.stats[key] = value

    def put_size(self, key: tuple[Any, ...], value: tuple[int, int, int]) -> None:
        if len(self.sizes) >= self.limit:
            self.sizes.clear()
        self.sizes[key] = value

    def put_authors(self, key: tuple[str, ...], value: list[str]) -> None:
        if len(self.authors) >= self.limit // 10:
            self.authors.clear()
        self.authors[key] = value


class PgSearchMixin:
    """Candidate search, embeddings backfill and neighbour context on ``self.db``.

    Attributes (class defaults; the store may set them per instance):
        ctx_weight: weight of the neighbouring-turns text (the SQLite store's BM25 weight).
        date_weight: weight of the date words.
        exact_max: partitions of up to this many rows are searched exactly, larger ones
            through the HNSW index.
        ef_search_min, ef_search_per_result: the HNSW walk keeps
            ``max(ef_search_min, ef_search_per_result * limit)`` candidates (at most 1000).
            Measured on 10,000 clustered 384-dimensional vectors (limit 20): ef_search 80 found
            71% of the exact top 20, 200 found 90%, 400 97% (in 2.4 / 4.6 / 8.2 ms against
            22 ms for the exact scan), hence more than pgvector's default of 40.
        rank_normalization: ``ts_rank_cd``'s normalization flags (1: divide by 1 + log of the
            document length, a mild form of BM25's length normalisation).
        idf_count_max: the partitions' size (BM25's N) is counted up to this many rows; beyond
            it the table's row estimate stands in.
        keyword_budget: in partitions of at least ``keyword_split_min_rows`` rows, the
            essential terms' rows (rarest first) may number this many together; only rows
            matching an essential term are scored (see :meth:`keyword_search`).
        keyword_split_min_rows: partitions (together) of fewer rows score every match.
        df_tolerance: cached document frequencies and partition sizes stand while the rows
            added and changed since they were counted are at most this share of the size.
    """

    db: PgDatabase
    dim: int | None
    ctx_weight: float = 0.5
    date_weight: float = 1.0
    exact_max: int = 10_000
    ef_search_min: int = 100
    ef_search_per_result: int = 8
    rank_normalization: int = 1
    idf_count_max: int = 50_000
    keyword_budget: int = 5_000
    keyword_split_min_rows: int = 20_000
    df_tolerance: float = 0.1
    last_vector_path: str | None = None
    """How the last vector search ran: ``"exact"``, ``"hnsw"``, or ``"hnsw+exact"`` (the index
    returned too few rows and the exact scan answered); for diagnostics and tests."""
    last_vector_walked: int | None = None
    """Rows the last HNSW walk returned (after its filters), None when the scan was exact."""
    last_keyword_scored: int | None = None
    """Rows the last keyword search scored (every match, or only the essential terms' rows)."""

    # ------------------------------------------------------------------ the scope, resolved once
    def _search_cache(self) -> _SearchCache:
        cache: _SearchCache | None = self.__dict__.get("_pg_search_cache")
        if cache is None:
            cache = self.__dict__["_pg_search_cache"] = _SearchCache()
        return cache

    async def _partitions(self, conn: Conn, pf: PartitionFilter) -> list[str]:
        """The partitions ``pf`` names: its exact keys plus the stored partitions under its
        prefixes, as last seen (resolved on a miss). Every search statement also reads the
        prefixes' partitions afresh (:func:`partitions_now_sql`) and :meth:`_confirm` compares."""
        parts = list(pf.exact)
        if pf.prefixes:
            cache = self._search_cache()
            hit = cache.parts.get(pf.prefixes)
            if hit is None:
                hit = tuple(sorted(await resolve_partitions(conn, PartitionFilter(prefixes=pf.prefixes))))
                cache.put_parts(pf.prefixes, hit)
            parts += [p for p in hit if p not in parts]
        return parts

    def _confirm(self, pf: PartitionFilter, now: Sequence[str] | None) -> bool:
        """Whether the statement just run used the prefixes' current partitions (``now``, read
        by that statement); if not, remember them: the caller runs the statement again."""
        if not pf.prefixes or now is None:
            return True
        cache = self._search_cache()
        fresh = tuple(sorted(now))
        if cache.parts.get(pf.prefixes) == fresh:
            return True
        cache.put_parts(pf.prefixes, fresh)
        return False

    def _known_parts(self, pf: PartitionFilter) -> tuple[str, ...] | None:
        """``pf``'s partitions as last resolved (sorted), None when not known yet; no I/O."""
        parts = list(pf.exact)
        if pf.prefixes:
            hit = self._search_cache().parts.get(pf.prefixes)
            if hit is None:
                return None
            parts += [p for p in hit if p not in parts]
        return tuple(sorted(parts))

    def _cached_authors(self, pf: PartitionFilter) -> list[str] | None:
        """The authors of ``pf``'s partitions as the last statement that read them saw (every
        keyword statement returns them), or None when unknown; no I/O."""
        key = self._known_parts(pf)
        found = None if key is None else self._search_cache().authors.get(key)
        return None if found is None else list(found)

    def _remember_authors(self, pf: PartitionFilter, authors: list[str]) -> None:
        """Cache ``authors`` as those of ``pf``'s partitions as last resolved."""
        key = self._known_parts(pf)
        if key is not None:
            self._search_cache().put_authors(key, list(authors))

    async def scoped_rows(
        self, conn: Conn, pf: PartitionFilter, sql: str, args: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (named parameters; ``%(parts)s`` is the partitions ``pf``
        names) in one statement once the user's partitions are known: the statement also
        reads the prefixes' partitions afresh, and runs again if they changed (a new agent of
        the user). For the store's other scoped reads (``authors``, ``get_facts``), which
        otherwise resolve the partitions in a statement of their own."""
        if not (pf.exact or pf.prefixes):
            return []
        now, now_args = partitions_now_sql(pf)
        wrapped = f"SELECT {now}, x.* FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT true, y.* FROM ({sql}) y) x ON true"
        rows: list[tuple[Any, ...]] = []
        for _ in range(3):
            parts = await self._partitions(conn, pf)
            cur = await conn.execute(wrapped, {**(args or {}), **now_args, "parts": parts})
            rows = [tuple(r) for r in await cur.fetchall()]
            if self._confirm(pf, rows[0][0]):
                break
        return [r[2:] for r in rows if r[1] is not None]  # r[1]: NULL on the one row of no match

    # ------------------------------------------------------------------ keyword
    def _rank_weights(self) -> list[float]:
        """``ts_rank_cd``'s ``{D, C, B, A}`` weights: text 1, ctx and date as configured,
        all scaled into 0..1 (PostgreSQL refuses weights above 1)."""
        a, b, c = 1.0, float(self.date_weight), float(self.ctx_weight)
        if min(a, b, c) < 0 or not all(math.isfinite(x) for x in (b, c)):
            raise ConfigError(f"ctx_weight and date_weight must be finite and >= 0, got {c} and {b}")
        top = max(a, b, c)
        return [0.0, c / top, b / top, a / top]

    async def keyword_search(
        self,
        partitions: PartitionFilter,
        terms: Sequence[str],
        *,
        limit: int,
        filter: FactFilter | None = None,
    ) -> list[Candidate]:
        """Valid facts of ``partitions`` matching any term, best first (idf-weighted
        ``ts_rank_cd``, see the module docstring), with their authors (for the core's author
        boost). Filters apply before ``limit``. One statement (two the first time a user's
        partitions are resolved, or when they or the cached counts went stale).

        Scoring every match costs ~8 us a row (39,664 rows for a 4-term question at 100k
        rows in one partition), so big partitions score fewer, as ``stores/sqlite/keyword.py``
        does: the statement that scores every match also returns each term's document
        frequency and the partitions' size; while those stand (``df_tolerance``), the terms
        are split, rarest first, into *essential* ones whose rows number at most
        ``keyword_budget`` together and *common* ones, and only rows matching an essential
        term are scored, each with its full score (every term's idf and ``ts_rank_cd``; the
        common terms' frequencies from the cache, the essential ones' counted). A row
        matching only common terms is never returned (the approximation SQLite's top-k
        makes; ``bench/pg_search.py`` reports the overlap with scoring every match)."""
        terms = list(dict.fromkeys(t for t in terms if t))
        if not terms or limit <= 0 or not (partitions.exact or partitions.prefixes):
            return []
        fsql, fargs = filter_sql(filter, "f")
        cache = self._search_cache()
        try:
            async with self.db.connection() as conn:
                for _ in range(3):
                    parts = await self._partitions(conn, partitions)
                    key = (tuple(parts), fsql, repr(fargs))
                    stats = cache.stats.get(key)
                    split = self._split(stats, terms)
                    if split is None:
                        sql, args = self._keyword_all_sql(partitions, parts, terms, fsql, fargs, limit)
                    else:
                        assert stats is not None
                        sql, args = self._keyword_split_sql(partitions, parts, terms, split, stats, fsql, fargs, limit)
                    rows = await (await conn.execute(sql, args)).fetchall()
                    meta, found = rows[0], rows[1:]
                    if not self._confirm(partitions, meta[5]):
                        continue
                    if split is not None and not meta[11]:  # the cached counts no longer stand
                        cache.stats.pop(key, None)
                        continue
                    dfs = dict(zip(terms, (int(x) for x in meta[9]), strict=True))
                    if split is None:
                        fresh = _Stats(int(meta[6]), int(meta[7]), float(meta[8]), dfs)
                        if stats is not None and stats.stands(fresh, self.df_tolerance) and len(stats.dfs) < _MAX_TERMS:
                            stats.dfs.update(dfs)  # the older counts' stamp stays: tolerance from the oldest
                        elif fresh.n >= self.keyword_split_min_rows:
                            cache.put_stats(key, fresh)
                    else:
                        assert stats is not None
                        if len(stats.dfs) >= _MAX_TERMS:  # bounded: forgotten terms are counted again
                            stats.dfs.clear()
                        stats.dfs.update({t: dfs[t] for t in split[0]})
                    self.last_keyword_scored = int(meta[10])
                    cache.put_authors(tuple(sorted(parts)), [dec(a) or "" for a in meta[12]])
                    found.sort(key=lambda r: (-float(r[2]), int(r[4])))
                    return [Candidate(r[1], float(r[2]), dec(r[3]) or None, fact=row_to_fact(r[13:])) for r in found]
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc.diag.message_primary or exc}") from exc
        return []  # the partitions changed under three statements in a row: nothing consistent to show

    def _split(self, stats: _Stats | None, terms: list[str]) -> tuple[list[str], list[str]] | None:
        """(essential, common) terms when the cached counts allow scoring fewer rows, else None.
        Terms never counted are essential (their rows are counted in the statement)."""
        if stats is None or stats.n < self.keyword_split_min_rows:
            return None
        essential: list[str] = []
        common: list[str] = []
        spent = 0
        for t in sorted(terms, key=lambda t: stats.dfs.get(t, 0)):
            df = stats.dfs.get(t, 0)
            if not essential or spent + df <= self.keyword_budget:
                essential.append(t)
                spent += df
            else:
                common.append(t)
        return (essential, common) if common else None

    def _keyword_tail(self, parts: list[str], terms: list[str], limit: int) -> tuple[str, dict[str, Any]]:
        """The scoring and the statement's rows, on CTEs ``m`` (rows scored), ``d`` (each
        distinct term query's ``tq``, ``df`` and ``idf``) and ``s`` (``maxrow``, ``changes``):
        a first row of what the store caches (with the partitions' authors, which
        :meth:`_cached_authors` serves the engine's author boost from), then the best
        ``limit`` rows, each with its fact row."""
        sql = (
            " r AS (SELECT m.rowid, m.id, COALESCE((SELECT sum(d.idf * ts_rank_cd(%(w)s::float4[], m.tsv, d.tq,"
            " %(norm)s::int)) FROM d WHERE m.tsv @@ d.tq), 0) AS s, m.author FROM m ORDER BY s DESC, m.rowid"
            " LIMIT %(limit)s)"
            " SELECT 0, NULL::text, NULL::float8, NULL::text, NULL::bigint, {now}, s.maxrow, s.changes,"
            " (SELECT n FROM n), (SELECT array_agg(COALESCE(d.df, 0) ORDER BY u.i) FROM unnest(%(terms)s::text[])"
            " WITH ORDINALITY u(term, i) LEFT JOIN d ON d.tq = phraseto_tsquery('english', u.term)),"
            " {scored}, {ok}, (SELECT COALESCE(array_agg(DISTINCT a.author), '{{}}'::text[]) FROM authors a"
            f" WHERE a.partition = ANY(%(parts)s)), {_NO_ROW} FROM s"
            " UNION ALL SELECT 1, r.id, r.s, r.author, r.rowid, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
            f" {_ROW_COLS} FROM r JOIN facts fr ON fr.rowid = r.rowid"
        )
        args = {"w": self._rank_weights(), "norm": self.rank_normalization, "limit": limit, "terms": terms}
        return sql, args

    def _keyword_all_sql(
        self, pf: PartitionFilter, parts: list[str], terms: list[str], fsql: str, fargs: list[Any], limit: int
    ) -> tuple[str, dict[str, Any]]:
        """Every match scored (the ranking since issue 10): m, the matching rows (GIN and
        partition index); n, the partitions' size (counted up to the cap on the partition
        index, beyond it the table's estimate); d, each term's document frequency among m."""
        tsq, targs = _named(*tsquery_sql(terms), "t")
        fs, fa = _named(fsql, fargs, "f")
        now, now_args = partitions_now_sql(pf)
        tail, tail_args = self._keyword_tail(parts, terms, limit)
        sql = (
            f"WITH s AS MATERIALIZED (SELECT {_MAXROW_SQL} AS maxrow, {_CHANGES_SQL} AS changes),"
            f" m AS MATERIALIZED (SELECT f.rowid, f.id, f.author, f.tsv FROM facts f, (SELECT {tsq} AS q) q"
            f" WHERE f.partition = ANY(%(parts)s) AND f.invalid_at IS NULL AND f.tsv @@ q.q{fs}),"
            " c AS (SELECT count(*) AS cnt FROM (SELECT 1 FROM facts WHERE partition = ANY(%(parts)s)"
            " LIMIT %(cap1)s) x),"
            " n AS MATERIALIZED (SELECT greatest(1, CASE WHEN c.cnt > %(cap)s THEN greatest(c.cnt::float8,"
            " (SELECT reltuples FROM pg_class WHERE oid = 'facts'::regclass)) ELSE c.cnt END)::float8 AS n FROM c),"
            " t AS MATERIALIZED (SELECT DISTINCT phraseto_tsquery('english', term) AS tq"
            " FROM unnest(%(terms)s::text[]) term),"
            " d AS MATERIALIZED (SELECT t.tq, k.df, ln(1 + (greatest(n.n, k.df) - k.df + 0.5) / (k.df + 0.5)) AS idf"
            " FROM t CROSS JOIN n CROSS JOIN LATERAL (SELECT count(*) AS df FROM m WHERE m.tsv @@ t.tq) k),"
            + tail.format(now=now, ok="true", scored="(SELECT count(*) FROM m)")
        )
        cap = self.idf_count_max
        return sql, {**targs, **fa, **now_args, **tail_args, "parts": parts, "cap": cap, "cap1": cap + 1}

    def _keyword_split_sql(
        self,
        pf: PartitionFilter,
        parts: list[str],
        terms: list[str],
        split: tuple[list[str], list[str]],
        stats: _Stats,
        fsql: str,
        fargs: list[Any],
        limit: int,
    ) -> tuple[str, dict[str, Any]]:
        """Only rows matching an essential term scored, with the same score: the common
        terms' document frequencies and the size from ``stats``, provided the rows added
        since (the partitions' highest rowid moved at most by that) plus the rows changed
        stay within ``df_tolerance`` of the size (``ok``, else nothing is scored). The
        essential terms' frequencies come from ``stats`` too when it holds them all: the rows
        are then scored as the index finds them (no copy of them to count); a term never
        counted is counted among the essential rows, which are then copied once."""
        essential, _ = split
        lean = all(t in stats.dfs for t in essential)
        tsq, targs = _named(*tsquery_sql(essential), "t")
        fs, fa = _named(fsql, fargs, "f")
        now, now_args = partitions_now_sql(pf)
        tail, tail_args = self._keyword_tail(parts, terms, limit)
        is_e = [t in essential and not lean for t in terms]
        cached = [None if e else stats.dfs.get(t, 0) for t, e in zip(terms, is_e, strict=True)]
        scored = sum(stats.dfs[t] for t in essential) if lean else 0
        sql = (
            f"WITH s AS MATERIALIZED (SELECT {_MAXROW_SQL} AS maxrow, {_CHANGES_SQL} AS changes),"
            " ok AS MATERIALIZED (SELECT (s.maxrow - %(cmax)s) + abs(s.changes - %(cch)s)"
            " <= %(tol)s::float8 * %(cn)s::float8 AS ok FROM s),"
            f" m AS {'NOT ' if lean else ''}MATERIALIZED (SELECT f.rowid, f.id, f.author, f.tsv"
            f" FROM facts f, (SELECT {tsq} AS q) q"
            f" WHERE (SELECT ok FROM ok) AND f.partition = ANY(%(parts)s) AND f.invalid_at IS NULL"
            f" AND f.tsv @@ q.q{fs}),"
            " n AS MATERIALIZED (SELECT %(cn)s::float8 AS n),"
            " t AS MATERIALIZED (SELECT phraseto_tsquery('english', u.term) AS tq, u.df, u.e"
            " FROM unnest(%(terms)s::text[], %(dfs)s::bigint[], %(ess)s::boolean[]) u(term, df, e)),"
            " g AS MATERIALIZED (SELECT t.tq, CASE WHEN bool_or(t.e) THEN (SELECT count(*) FROM m WHERE m.tsv @@ t.tq)"
            " ELSE max(t.df) END AS df FROM t GROUP BY t.tq),"
            " d AS MATERIALIZED (SELECT g.tq, g.df, ln(1 + (greatest(n.n, g.df) - g.df + 0.5) / (g.df + 0.5)) AS idf"
            " FROM g CROSS JOIN n),"
            + tail.format(
                now=now, ok="(SELECT ok FROM ok)", scored="%(scored)s::bigint" if lean else "(SELECT count(*) FROM m)"
            )
        )
        args = {
            **targs,
            **fa,
            **now_args,
            **tail_args,
            "parts": parts,
            "dfs": cached,
            "ess": is_e,
            "scored": scored,
            "cmax": stats.maxrow,
            "cch": stats.changes,
            "cn": stats.n,
            "tol": self.df_tolerance,
        }
        return sql, args

    # ------------------------------------------------------------------ vector
    def _query_vector(self, vector: Vector) -> np.ndarray[Any, np.dtype[np.float32]]:
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"query vector has dimension {q.shape[0]}, the store holds {self.dim}",
                expected=self.dim,
                got=int(q.shape[0]),
            )
        return q

    async def vector_search(
        self,
        partitions: PartitionFilter,
        vector: Vector,
        *,
        limit: int,
        filter: FactFilter | None = None,
    ) -> list[Candidate]:
        """Valid, embedded facts of ``partitions`` (documents excluded: their fragments are
        searched) by cosine similarity, best first. Filters apply before ``limit``.

        One statement (two the first time a user's partitions are resolved): it sizes the
        partitions (a cached count while no row was added beyond ``exact_max`` or removed),
        walks the HNSW index when they are larger than ``exact_max`` (``hnsw.ef_search`` set
        by that statement for its own transaction), and scans exactly when they are small or
        when the walk found fewer than ``limit`` rows (a rare filter).

        Raises:
            DimensionMismatchError: ``vector`` is not of the store's dimension.
        """
        if self.dim is None:
            return []
        q = self._query_vector(vector)
        if limit <= 0 or not (partitions.exact or partitions.prefixes):
            return []
        fsql, fargs = filter_sql(filter, "f")
        fs, fa = _named(fsql, fargs, "f")
        cache = self._search_cache()
        ef = min(EF_SEARCH_MAX, max(self.ef_search_min, self.ef_search_per_result * limit))
        try:
            async with self.db.connection() as conn:
                for _ in range(3):
                    parts = await self._partitions(conn, partitions)
                    key = (tuple(parts), self.exact_max)
                    size = cache.sizes.get(key)
                    now, now_args = partitions_now_sql(partitions)
                    args = {
                        **fa,
                        **now_args,
                        "parts": parts,
                        "q": q,
                        "k": limit,
                        "xmax": self.exact_max,
                        "cap1": self.exact_max + 1,
                        "ef": str(ef),
                        "known": None if size is None else size[0],
                        "cmax": 0 if size is None else size[1],
                        "cch": 0 if size is None else size[2],
                    }
                    rows = await (await conn.execute(_vector_sql(fs, now), args)).fetchall()
                    meta, found = rows[0], rows[1:]
                    if not self._confirm(partitions, meta[4]):
                        continue
                    n, hn = int(meta[7]), int(meta[8])
                    cache.put_size(key, (n, int(meta[5]), int(meta[6])))
                    self.last_vector_walked = None if n <= self.exact_max else hn
                    if n <= self.exact_max:
                        self.last_vector_path = "exact"
                    else:
                        self.last_vector_path = "hnsw" if hn >= limit else "hnsw+exact"
                    found.sort(key=lambda r: (float(r[2]) if r[2] == r[2] else 1.0, int(r[3])))
                    return [Candidate(r[1], _similarity(1 - float(r[2])), fact=row_to_fact(r[9:])) for r in found]
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc.diag.message_primary or exc}") from exc
        return []

    # ------------------------------------------------------------------ embeddings backfill
    async def missing_embeddings(
        self, *, limit: int = 256, fact_ids: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """Valid facts stored without a vector: ``[(fact_id, text to embed)]``, oldest first;
        only among ``fact_ids`` when given. A document's text is its opening
        (``DOCUMENT_THRESHOLD_CHARS``): its vector only marks it embedded, its fragments are searched."""
        if limit <= 0:
            return []
        text = f"CASE WHEN kind = 'document' THEN substr(content, 1, {int(DOCUMENT_THRESHOLD_CHARS)}) ELSE content END"
        where = "embedding IS NULL AND invalid_at IS NULL"  # the WHERE of index facts_unembedded
        async with self.db.connection() as conn:
            if fact_ids is None:
                cur = await conn.execute(
                    f"SELECT id, {text} FROM facts WHERE {where} ORDER BY rowid LIMIT %s", (limit,)
                )
            else:
                ids = list(dict.fromkeys(fact_ids))
                if not ids:
                    return []
                cur = await conn.execute(
                    f"SELECT id, {text} FROM facts WHERE id = ANY(%s) AND {where} ORDER BY rowid LIMIT %s",
                    (ids, limit),
                )
            return [(r[0], dec(r[1]) or "") for r in await cur.fetchall()]

    async def set_embeddings(
        self, fact_ids: Sequence[str], vectors: Vector, *, windows: Sequence[Vector | None] | None = None
    ) -> None:
        """Attach vectors to facts still waiting for one (:meth:`missing_embeddings`), with
        ``windows``: per fact, its further windows' vectors (written with its vector).

        A fact that got a vector meanwhile (an update with its new text's vector, another
        worker's backfill) or was deleted keeps what it has: a backfill that embedded an older
        text never overwrites a newer vector. The partitions' change counters move (memory stamps).

        Raises:
            DimensionMismatchError: not one vector per id, or not of the store's dimension.
        """
        ids = list(fact_ids)
        mat = np.asarray(vectors, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[0] != len(ids):
            raise DimensionMismatchError(f"expected {len(ids)} vectors, got array of shape {mat.shape}")
        if self.dim is not None and mat.shape[1] != self.dim:
            raise DimensionMismatchError(
                f"vector dimension {mat.shape[1]} does not match the store's {self.dim}",
                expected=self.dim,
                got=int(mat.shape[1]),
            )
        check_windows(windows, len(ids), self.dim)
        if not ids:
            return
        async with self.db.transaction() as conn:
            parts: set[str] = set()
            for i, (fid, vec) in enumerate(zip(ids, mat, strict=True)):
                cur = await conn.execute(
                    "UPDATE facts SET embedding = %s WHERE id = %s AND embedding IS NULL AND invalid_at IS NULL"
                    " RETURNING partition",
                    (vec, fid),
                )
                row = await cur.fetchone()
                if row is not None:
                    parts.add(row[0])
                    win = windows[i] if windows is not None else None
                    stmts = write_windows(PgDialect(None), [(fid, row[0], win)], replace=True)
                    for stmt in stmts:
                        async with conn.cursor() as many:
                            await many.executemany(pg_sql(stmt.sql), stmt.args)
            if parts:
                await conn.execute(
                    "UPDATE partitions SET changes = changes + 1 WHERE partition = ANY(%s)", (sorted(parts),)
                )

    # ------------------------------------------------------------------ neighbour context
    async def _refresh_context(self, conn: Conn, part: str, session_id: str, seqs: Sequence[int | None]) -> None:
        """Rewrite the ``ctx`` column of new, changed or removed turns' neighbours in one
        session, inside the caller's transaction on ``conn`` (the text is core policy:
        :func:`memlane.retrieval.context.neighbour_context`).

        ``part`` is the partition key; ``session_id`` is the session as the :class:`Fact`
        holds it (encoded here as the rows store it); ``seqs`` are the turns that appeared,
        changed or vanished. Rows in the affected range that are no longer valid get an empty
        ``ctx``: their neighbours' words leave them (a purge of a neighbour leaves no copy).
        """
        span = affected_range(s for s in seqs if s is not None)
        if span is None:
            return
        lo, hi = span
        cur = await conn.execute(
            "SELECT rowid, seq, content, invalid_at IS NULL, ctx FROM facts"
            " WHERE partition = %s AND session_id = %s AND seq BETWEEN %s AND %s ORDER BY seq, rowid",
            (part, enc(session_id), lo - CONTEXT_RADIUS, hi + CONTEXT_RADIUS),
        )
        rows = await cur.fetchall()
        by_seq = {r[1]: r[2] for r in rows if r[3]}
        changes: list[tuple[str, int]] = []
        for rowid, seq, _, valid, old in rows:
            if not lo <= seq <= hi:
                continue
            ctx = keyword_text(neighbour_context(by_seq, seq)) if valid else ""
            if ctx != old:
                changes.append((ctx, rowid))
        if changes:
            async with conn.cursor() as c:
                await c.executemany("UPDATE facts SET ctx = %s WHERE rowid = %s", changes)


def _similarity(value: Any) -> float:
    """A cosine similarity from the database as a float in -1..1 (rounding can step outside)."""
    s = float(value)
    if math.isnan(s):
        return 0.0
    return max(-1.0, min(1.0, s))
