"""Top-k BM25 over the SQLite keyword index without scoring every match.

FTS5's ``bm25()`` scores every row that matches any query term, and before the first score
it walks the table-wide posting list of every phrase in the query to count its rows (the
IDF). A query with a common word ("think", "book") at 100k memories in one scope scores tens
of thousands of rows to return 20.

BM25 is a sum of per-phrase contributions, each depending only on that phrase, the row and
table-wide statistics. So (MaxScore's split into essential and non-essential terms, Turtle &
Flood 1995):

1. Each term's document frequency (table-wide, FTS5's IDF count) comes from a cache (counted
   with ``MATCH`` on a miss, recounted once the table's row count has moved by more than
   ``df_tolerance`` of it). It only decides the split below, never a score.
2. Terms are split: the rarest ones, whose posting lists together hold at most ``budget``
   rows (at least one term), are *essential* (E); the rest are *common* (C).
3. Two FTS5 queries, both bm25-ordered with ``LIMIT``, score only rows matching E:
   ``E AND C`` gives the rows that hold both kinds their full score (every query phrase
   appears once, so FTS5's bm25 is the whole query's bm25), and ``E`` gives the rows without
   a common term their full score too (a common term they lack adds 0). Their merge is the
   exact top ``limit`` among all rows that match an essential term, with FTS5's own scores.

What is approximate: a row that matches only common terms is never returned. It can only
rank by those terms' low IDF; ``bench/keyword_topk.py`` measures recall@10 against the exact
ranking. Queries whose terms all fit in the budget run as one query, as before.

The partition-token phrase (weight 0, but FTS5 walks the whole partition to compute its IDF)
is left out of the split path's ``MATCH``: when the partitions searched are all the
partitions in the file, the fetched rows are only checked against them; otherwise the
partitions filter the joined rows before the ``LIMIT`` (the essential terms' rows are few by
construction, table-wide). The split path runs when the partitions searched hold at least
``split_min_rows`` rows (or are the whole file); a small partition in a big shared file (1,000
users x 1,000 memories) keeps the single ``part AND terms`` query, whose scoring is bounded by
the partition, while the split path would still pay the common terms' table-wide IDF walks.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memlane.stores.sqlite.fts import fts_or_query, partition_token

#: (fact id, score = negated bm25, author)
Row = tuple[str, float, str | None]


def _varints(blob: bytes) -> list[int]:
    """SQLite varints (FTS5's averages record)."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        v = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                v = (v << 8) | byte
                break
            v = (v << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(v)
    return out


def averages(c: sqlite3.Connection) -> tuple[int, int]:
    """(rows, tokens in every column) of the keyword index: what bm25 reads for N and avgdl."""
    row = c.execute("SELECT block FROM facts_fts_data WHERE id = 1").fetchone()
    values = _varints(bytes(row[0])) if row is not None and row[0] else []
    return (values[0], sum(values[1:])) if values else (0, 0)


@dataclass
class KeywordIndex:
    """Keyword search over ``facts_fts`` for one store (the document-frequency cache is per store).

    Args:
        weights: bm25 column weights (part, author, text, ctx, date).
        budget: the essential terms' posting lists may hold this many rows together
            (table-wide) ...
        budget_share: ... or this share of the table's rows, whichever is larger.
        df_tolerance: a cached document frequency is recounted once the table's row count
            has moved by more than this share of it.
        split_min_rows: partitions of at least this many rows (together) take the split path.
    """

    weights: tuple[float, float, float, float, float]
    budget: int = 5_000
    budget_share: float = 0.0
    df_tolerance: float = 0.1
    split_min_rows: int = 20_000
    _df: dict[str, tuple[int, int]] = field(default_factory=dict)
    _sizes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ statistics
    @staticmethod
    def table_rows(c: sqlite3.Connection) -> int:
        """Rows in the index, as bm25 reads them (FTS5's averages record)."""
        row = c.execute("SELECT block FROM facts_fts_data WHERE id = 1").fetchone()
        return _varints(bytes(row[0]))[0] if row is not None and row[0] else 0

    def doc_freq(self, c: sqlite3.Connection, term: str, rows: int) -> int:
        """Rows holding ``term`` anywhere (FTS5's IDF count), cached while the table's row
        count is within ``df_tolerance`` of this count."""
        with self._lock:
            hit = self._df.get(term)
        if hit is not None and abs(rows - hit[1]) <= self.df_tolerance * max(hit[0], 1):
            return hit[0]
        sql = "SELECT count(*) FROM facts_fts WHERE facts_fts MATCH ?"
        n = int(c.execute(sql, (fts_or_query([term]),)).fetchone()[0])
        with self._lock:
            if len(self._df) >= 100_000:
                self._df.clear()
            self._df[term] = (n, rows)
        return n

    def partition_rows(self, c: sqlite3.Connection, parts: Sequence[str], cap: int) -> int:
        """Rows in ``parts`` (each counted up to ``cap``), cached per partition while its
        (appends, changes) counters stay the same."""
        marks = ",".join("?" * len(parts))
        sql = f"SELECT partition, appends, changes FROM partitions WHERE partition IN ({marks})"
        stamps = {r[0]: (int(r[1]), int(r[2])) for r in c.execute(sql, parts)}
        total = 0
        for p, stamp in stamps.items():
            with self._lock:
                hit = self._sizes.get(p)
            if hit is None or hit[1:] != stamp:
                sql = "SELECT count(*) FROM (SELECT 1 FROM facts WHERE partition = ? LIMIT ?)"
                n = int(c.execute(sql, (p, cap)).fetchone()[0])
                with self._lock:
                    if len(self._sizes) >= 100_000:
                        self._sizes.clear()
                    self._sizes[p] = (n, *stamp)
            else:
                n = hit[0]
            total += n
            if total >= cap:
                break
        return total

    def split(self, c: sqlite3.Connection, terms: Sequence[str]) -> tuple[list[str], list[str]]:
        """(essential, common) terms; terms that match nothing are dropped."""
        rows = self.table_rows(c)
        if rows == 0:
            return [], []
        dfs = {t: self.doc_freq(c, t, rows) for t in dict.fromkeys(terms)}
        budget = max(self.budget, int(self.budget_share * rows))
        essential: list[str] = []
        common: list[str] = []
        spent = 0
        for t in sorted((t for t in dfs if dfs[t] > 0), key=lambda t: dfs[t]):
            if not essential or spent + dfs[t] <= budget:
                essential.append(t)
                spent += dfs[t]
            else:
                common.append(t)
        return essential, common

    # ------------------------------------------------------------------ queries
    def _bm25(self) -> str:
        return "bm25(facts_fts, " + ", ".join(repr(float(w)) for w in self.weights) + ")"

    @staticmethod
    def _whole_file(c: sqlite3.Connection, parts: Sequence[str]) -> bool:
        """True when ``parts`` are all the partitions in the file (the partition filter is a no-op)."""
        stored = [r[0] for r in c.execute("SELECT partition FROM partitions LIMIT ?", (len(parts) + 1,))]
        return len(stored) <= len(parts) and set(stored) <= set(parts)

    @staticmethod
    def _part_match(parts: Sequence[str], terms: Sequence[str]) -> str:
        tokens = " OR ".join(f'part : "{partition_token(p)}"' for p in parts)
        # `part` only ever holds partition tokens, so the terms need no column filter.
        return f"({tokens}) AND ({fts_or_query(terms)})"

    def _ranked(
        self,
        c: sqlite3.Connection,
        match: str,
        parts: Sequence[str],
        limit: int,
        fsql: str,
        fargs: Sequence[Any],
        *,
        check_parts: bool,
        prefilter: bool = False,
    ) -> list[tuple[int, str, float, str | None]]:
        """(rowid, id, bm25, author) of the best ``limit`` rows for ``match`` (bm25 order);
        ``check_parts``: only rows of ``parts``, checked after the ``LIMIT`` (a safety net) or,
        with ``prefilter``, before it."""
        inner = f"SELECT rowid, {self._bm25()} AS s FROM facts_fts WHERE facts_fts MATCH ? ORDER BY s"
        psql, pargs = "", []
        if check_parts:
            psql = f" AND f.partition IN ({','.join('?' * len(parts))})"
            pargs = list(parts)
        if not fsql and not prefilter:
            # Only rowid and score go through the sort; the author comes from the joined row.
            sql = (
                f"SELECT k.rowid, f.id, k.s, f.author FROM ({inner} LIMIT ?) k JOIN facts f ON f.rowid = k.rowid"
                f" WHERE 1{psql} ORDER BY k.s"
            )
            args: list[Any] = [match, limit, *pargs]
        else:
            sql = (
                f"SELECT k.rowid, f.id, k.s, f.author FROM ({inner}) k JOIN facts f ON f.rowid = k.rowid"
                f" WHERE 1{fsql}{psql} ORDER BY k.s LIMIT ?"
            )
            args = [match, *fargs, *pargs, limit]
        return [(r[0], r[1], float(r[2]), r[3]) for r in c.execute(sql, args)]

    def exact(
        self,
        c: sqlite3.Connection,
        parts: Sequence[str],
        terms: Sequence[str],
        *,
        limit: int,
        fsql: str = "",
        fargs: Sequence[Any] = (),
    ) -> list[Row]:
        """FTS5's bm25 ranking of every match (the reference; the keyword path before issue 11)."""
        if not terms or not parts or limit <= 0:
            return []
        match = self._part_match(parts, terms)
        rows = self._ranked(c, match, parts, limit, fsql, fargs, check_parts=False)
        return [(fid, -s, author or None) for _, fid, s, author in rows]

    def search(
        self,
        c: sqlite3.Connection,
        parts: Sequence[str],
        terms: Sequence[str],
        *,
        limit: int,
        fsql: str = "",
        fargs: Sequence[Any] = (),
    ) -> list[Row]:
        """The best ``limit`` rows (scores: negated bm25 of the whole query, higher is better)."""
        if not terms or not parts or limit <= 0:
            return []
        whole = self._whole_file(c, parts)
        if not whole and self.partition_rows(c, parts, self.split_min_rows) < self.split_min_rows:
            return self.exact(c, parts, terms, limit=limit, fsql=fsql, fargs=fargs)
        essential, common = self.split(c, terms)
        if not essential:
            return []
        # No partition phrase: the whole file needs no filter (the join checks it anyway);
        # otherwise the join filters before the LIMIT.
        match_e = fts_or_query(essential)
        found = self._ranked(c, match_e, parts, limit, fsql, fargs, check_parts=True, prefilter=not whole)
        if common:
            # Rows matching a common term too: their full score (E first: FTS5 steps through
            # the short essential lists and seeks in the long common ones).
            match_ec = f"({match_e}) AND ({fts_or_query(common)})"
            both = self._ranked(c, match_ec, parts, limit, fsql, fargs, check_parts=True, prefilter=not whole)
            seen = {r[0] for r in both}
            found = both + [r for r in found if r[0] not in seen]
            found.sort(key=lambda r: r[2])
        return [(fid, -s, author or None) for _, fid, s, author in found[:limit]]
