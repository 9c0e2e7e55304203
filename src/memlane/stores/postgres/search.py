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

Vector search returns cosine similarity (``1 - (embedding <=> q)``, -1..1). Partitions of up to
``exact_max`` rows are scanned exactly (the ordering expression is not the index's, so the
planner cannot take the approximate HNSW index); larger ones go through the HNSW index with
``hnsw.ef_search = max(100, 8 * limit)`` for that transaction, and when the index returns fewer
than ``limit`` rows (pgvector 0.6 filters *after* the graph walk, so a rare filter or a small
share of a large table starves it) the search is redone exactly. Every condition (partitions,
validity, kind, author, session, metadata) is in the SQL, before ``LIMIT``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from memlane.documents import DOCUMENT_THRESHOLD_CHARS
from memlane.errors import ConfigError, DimensionMismatchError
from memlane.retrieval.context import CONTEXT_RADIUS, affected_range, neighbour_context
from memlane.retrieval.text import keyword_text
from memlane.stores.base import Candidate, FactFilter, PartitionFilter, Vector
from memlane.stores.postgres.rows import Conn, dec, enc, filter_sql, resolve_partitions

if TYPE_CHECKING:
    from memlane.stores.postgres.db import PgDatabase

__all__ = ["PgSearchMixin", "tsquery_sql"]

#: pgvector 0.6 caps ``hnsw.ef_search`` at 1000.
EF_SEARCH_MAX = 1000


def tsquery_sql(terms: Sequence[str]) -> tuple[str, list[str]]:
    """An SQL ``tsquery`` expression matching any of ``terms`` (the core's keyword terms), with
    the terms as parameters: ``phraseto_tsquery('english', %s) || ...``. Each term is parsed
    by PostgreSQL's English configuration like the indexed text (stemmed; a term that is
    punctuation-joined words must match as a phrase, as a quoted FTS5 term does); no term is
    ever part of the SQL text."""
    return " || ".join(["phraseto_tsquery('english', %s)"] * len(terms)), list(terms)


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
    last_vector_path: str | None = None
    """How the last vector search ran: ``"exact"``, ``"hnsw"``, or ``"hnsw+exact"`` (the index
    returned too few rows and the exact scan answered); for diagnostics and tests."""

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
        boost). Filters apply before ``limit``."""
        terms = [t for t in terms if t]
        if not terms or limit <= 0:
            return []
        tsq, targs = tsquery_sql(terms)
        fsql, fargs = filter_sql(filter, "f")
        cap = self.idf_count_max
        # m: the matching rows (GIN and partition index); t: one tsquery per term; d: each term's
        # document frequency among them; n: the partitions' size (counted up to the cap on the
        # partition index, beyond it the table's estimate). Score: sum over the terms a row holds
        # of BM25's idf times ts_rank_cd of that term (the column weights, the length normalisation).
        sql = (
            f"WITH m AS MATERIALIZED (SELECT f.rowid, f.id, f.author, f.tsv FROM facts f, (SELECT {tsq} AS q) q"
            f" WHERE f.partition = ANY(%s) AND f.invalid_at IS NULL AND f.tsv @@ q.q{fsql}),"
            " c AS (SELECT count(*) AS cnt FROM (SELECT 1 FROM facts WHERE partition = ANY(%s) LIMIT %s) x),"
            " n AS MATERIALIZED (SELECT greatest(1, CASE WHEN c.cnt > %s THEN greatest(c.cnt::float8,"
            " (SELECT reltuples FROM pg_class WHERE oid = 'facts'::regclass)) ELSE c.cnt END)::float8 AS n FROM c),"
            " t AS MATERIALIZED (SELECT DISTINCT phraseto_tsquery('english', term) AS tq FROM unnest(%s::text[]) term),"
            " d AS MATERIALIZED (SELECT t.tq, ln(1 + (greatest(n.n, k.df) - k.df + 0.5) / (k.df + 0.5)) AS idf"
            " FROM t CROSS JOIN n CROSS JOIN LATERAL (SELECT count(*) AS df FROM m WHERE m.tsv @@ t.tq) k)"
            " SELECT m.id, COALESCE((SELECT sum(d.idf * ts_rank_cd(%s::float4[], m.tsv, d.tq, %s::int)) FROM d"
            " WHERE m.tsv @@ d.tq), 0) AS s, m.author FROM m ORDER BY s DESC, m.rowid LIMIT %s"
        )
        async with self.db.connection() as conn:
            parts = await resolve_partitions(conn, partitions)
            if not parts:
                return []
            args = [*targs, parts, *fargs, parts, cap + 1, cap, terms, self._rank_weights(), self.rank_normalization]
            cur = await conn.execute(sql, [*args, limit])
            rows = await cur.fetchall()
        return [Candidate(r[0], float(r[1]), dec(r[2]) or None) for r in rows]

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

        Raises:
            DimensionMismatchError: ``vector`` is not of the store's dimension.
        """
        if self.dim is None:
            return []
        q = self._query_vector(vector)
        if limit <= 0:
            return []
        fsql, fargs = filter_sql(filter, "f")
        async with self.db.transaction() as conn:
            parts = await resolve_partitions(conn, partitions)
            if not parts:
                return []
            where = (
                "f.partition = ANY(%s) AND f.invalid_at IS NULL AND f.embedding IS NOT NULL"
                f" AND f.kind <> 'document'{fsql}"
            )
            wargs: list[Any] = [parts, *fargs]
            hnsw_sql, exact_sql = self._vector_sql(where)
            if await self._partition_rows(conn, parts) > self.exact_max:
                ef = min(EF_SEARCH_MAX, max(self.ef_search_min, self.ef_search_per_result * limit))
                await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
                cur = await conn.execute(hnsw_sql, [q, *wargs, q, limit])
                rows = await cur.fetchall()
                if len(rows) >= limit:
                    self.last_vector_path = "hnsw"
                    return [Candidate(r[0], _similarity(r[1])) for r in rows]
                self.last_vector_path = "hnsw+exact"
            else:
                self.last_vector_path = "exact"
            # small partitions, and the fallback: every matching row scored, an exact top ``limit``
            cur = await conn.execute(exact_sql, [q, *wargs, limit])
            return [Candidate(r[0], _similarity(r[1])) for r in await cur.fetchall()]

    @staticmethod
    def _vector_sql(where: str) -> tuple[str, str]:
        """The two vector queries on rows matching ``where`` (parameters: query vector, the
        ``where`` arguments, [query vector again,] limit), each returning ``(id, similarity)``:

        * HNSW: ordered by the index's own operator expression, so the planner walks the graph;
        * exact: ordered by an expression the index cannot serve, so every row is scored; a
          zero vector (cosine distance NaN) scores 0, as a dot product with it does, and ties
          keep insertion order.
        """
        hnsw = f"SELECT f.id, 1 - (f.embedding <=> %s) FROM facts f WHERE {where} ORDER BY f.embedding <=> %s LIMIT %s"
        exact = (
            "SELECT id, 1 - d FROM (SELECT f.id, f.rowid,"
            " COALESCE(NULLIF(f.embedding <=> %s, 'NaN'::float8), 1.0) AS d"
            f" FROM facts f WHERE {where}) x ORDER BY d, rowid LIMIT %s"
        )
        return hnsw, exact

    async def _partition_rows(self, conn: Conn, parts: list[str]) -> int:
        """Rows of ``parts`` (valid or not), counted up to ``exact_max + 1`` on the
        ``(partition, rowid)`` index: enough to choose between exact and HNSW search."""
        cur = await conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM facts WHERE partition = ANY(%s) LIMIT %s) t",
            (parts, self.exact_max + 1),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

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

    async def set_embeddings(self, fact_ids: Sequence[str], vectors: Vector) -> None:
        """Attach vectors to facts still waiting for one (:meth:`missing_embeddings`).

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
        if not ids:
            return
        async with self.db.transaction() as conn:
            parts: set[str] = set()
            for fid, vec in zip(ids, mat, strict=True):
                cur = await conn.execute(
                    "UPDATE facts SET embedding = %s WHERE id = %s AND embedding IS NULL AND invalid_at IS NULL"
                    " RETURNING partition",
                    (vec, fid),
                )
                row = await cur.fetchone()
                if row is not None:
                    parts.add(row[0])
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
