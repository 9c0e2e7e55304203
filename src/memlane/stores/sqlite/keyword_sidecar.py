"""An in-memory postings index of one large partition's keyword rows, scored with numpy.

Why: FTS5's ``bm25()`` computes every query phrase's IDF by walking its whole table-wide
posting list, then scores every matching row through the auxiliary-function API (about a
microsecond a row). At 100k memories in one scope a query with a common word spends 5-8 ms
there (docs/benchmarks.md, issue 11). This index holds, per token, the partition's rows that
contain it (as dense row numbers) with the token's count in each scored column (text, ctx,
date), plus every row's length in tokens, and each token's postings in impact order too. A
query scores a few hundred to a few thousand candidate rows with numpy (:func:`bm25_top`:
impact-ordered seeds give a floor, MaxScore and per-token impact cut-offs bound the rest).

It is exact, not approximate: the same formula as FTS5's ``bm25()`` (k1 1.2, b 0.75, IDF
``log((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, the row length over every column, the
average from FTS5's own averages record, column weights summed per instance), over the same
tokens (read from the keyword index's own ``fts5vocab`` when the partition is the whole file,
else tokenized by FTS5 in an in-memory table with the same tokenizer; query terms likewise;
docs/retrieval.md "Keywords"). When the partition is
the whole file, document frequencies come from the index (exact); otherwise from the
keyword index's table-wide document-frequency cache (the split path's, recounted once the
table moved by ``df_tolerance``).

The database stays the truth. An index is a derived copy of one partition at one
``(appends, changes, generation)`` stamp, built from one read snapshot:

* ``changes`` or the purge ``generation`` moved (an update, delete, forget, context refresh
  of an edit): the index is dropped, never used; a rebuild is queued and searches go through
  FTS5 until it is done;
* only ``appends`` moved (new rows): rows above the index's rowid watermark, and every row of
  the sessions they joined (an appended turn rewrites its neighbours' ``ctx``), are read from
  FTS5 and tokenized as a *delta* (on the search path, once per ``appends`` value); the
  index's copies of those rows are masked. Exact again. A delta of more than
  ``rebuild_fraction`` of the partition is not tokenized: a rebuild is queued and FTS5
  answers until it is done.

Indexes persist as ``<db>.keywords/*.npz`` (:class:`KeywordFiles`), loaded by the next
process only when their stamp still holds. Searches with a fact filter, over several
partitions, or with a term FTS5 splits into a phrase keep the FTS5 path
(stores/sqlite/keyword.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memlane.errors import ConfigError
from memlane.stores.sqlite.keyword import averages
from memlane.stores.sqlite.vector_cache import partition_file_key

log = logging.getLogger("memlane")

#: FTS5's bm25 constants (fts5_aux.c).
K1 = 1.2
B = 0.75
#: The keyword index's tokenizer (stores/sqlite/migrations.py, ``facts_fts``).
TOKENIZE = "porter unicode61"
#: Partitions of at least this many rows get a postings index (``$MEMLANE_KEYWORD_INDEX_MIN``).
DEFAULT_MIN_ROWS = 20_000


def index_min_rows() -> int:
    """``$MEMLANE_KEYWORD_INDEX_MIN``: the smallest partition (rows) given a postings index;
    ``0`` (or ``off``) turns the index off; unset: :data:`DEFAULT_MIN_ROWS`."""
    raw = os.environ.get("MEMLANE_KEYWORD_INDEX_MIN", "").strip().lower()
    if not raw:
        return DEFAULT_MIN_ROWS
    if raw in ("off", "false", "no"):
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"MEMLANE_KEYWORD_INDEX_MIN must be a row count >= 0 or 'off', got {raw!r}")
    return value


#: (rowid, score) best first
Hits = list[tuple[int, float]]


def _tokenizer_db() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    c.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, ctx, date, tokenize = '{TOKENIZE}')")
    c.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    return c


class QueryTokens:
    """FTS5's tokens of a query term (what ``"term"`` in a ``MATCH`` looks up), cached."""

    def __init__(self) -> None:
        self._c = _tokenizer_db()
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[str, ...]] = {}

    def __call__(self, term: str) -> tuple[str, ...]:
        hit = self._cache.get(term)
        if hit is not None:
            return hit
        with self._lock:
            self._c.execute("INSERT INTO t (rowid, text) VALUES (1, ?)", (term,))
            toks = tuple(r[0] for r in self._c.execute("SELECT term FROM v ORDER BY offset"))
            self._c.execute("DELETE FROM t")
            if len(self._cache) >= 100_000:
                self._cache.clear()
            self._cache[term] = toks
        return toks


@dataclass
class Postings:
    """Rows (dense numbers), their lengths and per-token postings with column counts."""

    rowids: npt.NDArray[np.int64]  # row number -> facts rowid (ascending)
    doclen: npt.NDArray[np.float64]  # tokens in every column (the partition token included)
    terms: dict[str, int]  # token -> slot
    offsets: npt.NDArray[np.int64]  # slot -> [offsets[s], offsets[s + 1]) in docs / tf
    docs: npt.NDArray[np.int32]  # row numbers, ascending within a slot
    tf: npt.NDArray[np.uint16]  # (postings, 3): counts in text, ctx, date
    tf_max: npt.NDArray[np.uint16]  # (slots, 3): the largest counts of each slot's postings
    len_min: npt.NDArray[np.float64]  # slot -> the shortest row of its postings
    # impact order: within each slot, postings by descending ``impact`` (the BM25 tf part at
    # ``impact_weights`` and ``impact_avgdl``, rounded up), as positions into docs / tf
    impact_weights: tuple[float, float, float] = (1.0, 0.5, 1.0)
    impact_avgdl: float = 1.0
    impact_order: npt.NDArray[np.int32] | None = None
    neg_impact: npt.NDArray[np.float32] | None = None  # -impact (rounded up), in impact order

    @property
    def rows(self) -> int:
        return len(self.rowids)

    def df(self, token: str) -> int:
        s = self.terms.get(token)
        return 0 if s is None else int(self.offsets[s + 1] - self.offsets[s])


#: The keyword index's ``fts5vocab`` instance table (temporary schema, per connection).
_INSTANCES = "memlane_fts_instances"
#: fts5vocab ``instance`` rows grouped by term: (term, instances, "doc*4+col,...") with col
#: text 0, ctx 1, date 2, anything else (the partition token's column) 3.
VOCAB_SQL = (
    "SELECT term, count(*), group_concat(doc * 4 + CASE col WHEN 'text' THEN 0 WHEN 'ctx' THEN 1"
    " WHEN 'date' THEN 2 ELSE 3 END) FROM {table} GROUP BY term"
)


def tokenize_rows(rows: Sequence[tuple[int, str | None, str | None, str | None]]) -> Postings:
    """Postings of ``(rowid, text, ctx, date)`` rows (ascending rowids), tokenized by FTS5."""
    c = _tokenizer_db()
    try:
        c.execute("BEGIN")
        c.executemany(
            "INSERT INTO t (rowid, text, ctx, date) VALUES (?,?,?,?)",
            ((i, r[1] or "", r[2] or "", r[3] or "") for i, r in enumerate(rows)),
        )
        c.execute("COMMIT")
        vocab = c.execute(VOCAB_SQL.format(table="v")).fetchall()
    finally:
        c.close()
    rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    return postings_of(rowids, vocab, by_rowid=False)


def postings_of(rowids: npt.NDArray[np.int64], vocab: Sequence[tuple[str, int, str]], *, by_rowid: bool) -> Postings:
    """Postings from :data:`VOCAB_SQL` rows over the rows ``rowids`` (ascending). ``by_rowid``:
    the instances name rows by rowid and hold the partition token (the keyword index itself),
    else by position in ``rowids`` without it (a copy holding text, ctx and date only).

    Raises:
        ValueError: an instance names a row not in ``rowids``.
    """
    n = len(rowids)
    names = [v[0] for v in vocab]
    if not names:
        empty = np.zeros(0, dtype=np.int64)
        z = np.zeros((0, 3), np.uint16)
        return Postings(rowids, np.ones(n), {}, np.zeros(1, dtype=np.int64), empty.astype(np.int32), z, z, np.zeros(0))
    # fts5vocab yields instances in (term, doc, col, offset) order: GROUP BY term needs no sort.
    codes = np.fromstring(",".join(v[2] for v in vocab), dtype=np.int64, sep=",")
    term_of = np.repeat(np.arange(len(names), dtype=np.int64), [int(v[1]) for v in vocab])
    doc = codes >> 2
    if by_rowid:
        pos = np.searchsorted(rowids, doc)
        pos[pos >= n] = 0
        if n == 0 or not np.array_equal(rowids[pos], doc):
            raise ValueError("the keyword index holds rows the partition does not")
        doc = pos
    # every token counts for the row's length (the partition token too: a copy adds it)
    doclen = np.bincount(doc, minlength=n).astype(np.float64) + (0.0 if by_rowid else 1.0)
    col = codes & 3
    scored = col < 3
    term_of, doc, col = term_of[scored], doc[scored], col[scored]
    # (term, doc, col) runs -> counts (still sorted by term, doc, col)
    key = (term_of * n + doc) * 4 + col
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    cnt = np.diff(np.r_[starts, len(key)])
    ukey = key[starts]
    ucol = ukey & 3
    pair = ukey >> 2  # term * n + doc
    first = np.r_[True, pair[1:] != pair[:-1]]
    group = np.cumsum(first) - 1
    upair = pair[first]
    tf = np.zeros((len(upair), 3), dtype=np.uint16)
    tf[group, ucol] = np.minimum(cnt, 65535)
    p_term = upair // n
    docs = (upair % n).astype(np.int32)
    # only terms with a scored posting get a slot (the partition token has none)
    run = np.flatnonzero(np.r_[True, p_term[1:] != p_term[:-1]]) if len(p_term) else np.zeros(0, np.int64)
    kept = p_term[run]  # ascending: p_term is sorted
    offsets = np.r_[run, len(p_term)].astype(np.int64)
    tf_max = np.maximum.reduceat(tf, offsets[:-1], axis=0) if len(kept) else np.zeros((0, 3), np.uint16)
    len_min = np.minimum.reduceat(doclen[docs], offsets[:-1]) if len(kept) else np.zeros(0)
    terms = {names[int(t)]: i for i, t in enumerate(kept)}
    return Postings(rowids, doclen, terms, offsets, docs, tf, tf_max, len_min)


def _distinct(lists: Sequence[npt.NDArray[np.int32]], mask: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.int32]:
    """The distinct row numbers of ``lists``, ascending (int32: binary searches in the int32
    posting lists need no conversion), without the masked ones."""
    x = np.sort(np.concatenate(lists))
    if len(x):
        x = x[np.r_[True, x[1:] != x[:-1]]]
    return x[~mask[x]] if mask is not None else x


def order_by_impact(index: Postings, weights: tuple[float, float, float], avgdl: float) -> None:
    """Sort every slot's postings by their BM25 tf part at ``weights`` and ``avgdl`` (kept
    beside the doc order: :func:`bm25_top` walks the best postings of each query phrase first)."""
    if len(index.docs) == 0:
        index.impact_order, index.neg_impact = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
    else:
        f = index.tf @ np.asarray(weights, dtype=np.float64)
        k = K1 * (1.0 - B + B * index.doclen[index.docs] / avgdl)
        g = f * (K1 + 1.0) / (f + k)
        slot = np.repeat(np.arange(len(index.offsets) - 1), np.diff(index.offsets))
        order = np.lexsort((-g, slot))
        index.impact_order = order.astype(np.int32)  # positions in docs (< 2**31)
        # float32 rounded up (an upper bound of the exact value), negated: ascending per slot
        index.neg_impact = -np.nextafter(g[order].astype(np.float32), np.float32(np.inf))
    index.impact_weights, index.impact_avgdl = weights, avgdl


def bm25_top(
    index: Postings,
    phrases: Sequence[str],
    dfs: Sequence[int],
    *,
    total_rows: int,
    avgdl: float,
    weights: tuple[float, float, float],
    limit: int,
    mask: npt.NDArray[np.bool_] | None = None,
) -> Hits:
    """The best ``limit`` rows of ``index`` for single-token ``phrases`` (FTS5 bm25, higher is
    better) with table-wide document frequencies ``dfs``; rows where ``mask`` is True are
    left out (superseded by a delta).

    MaxScore (Turtle & Flood 1995), exact: the rows of the rarest phrases are scored first,
    their ``limit``-th best score is a floor the answer's ``limit``-th score cannot be below;
    phrases whose upper bounds (the largest weighted count over the smallest row length of
    their postings) together stay under it cannot lift a row holding only them into the top
    ``limit``, so only rows of the other phrases are scored, each over every phrase (a binary
    search in each posting list), summed in phrase order as FTS5 sums them.
    """
    n = index.rows
    if n == 0 or limit <= 0:
        return []
    w = np.asarray(weights, dtype=np.float64)
    terms: list[tuple[int, float, float]] = []  # (slot, idf, upper bound) in phrase order
    for tok, nhit in zip(phrases, dfs, strict=True):
        s = index.terms.get(tok)
        if s is None:
            continue
        idf = math.log((total_rows - nhit + 0.5) / (nhit + 0.5))
        if idf <= 0.0:
            idf = 1e-6
        fmax = float(index.tf_max[s] @ w)
        kmin = K1 * (1.0 - B + B * float(index.len_min[s]) / avgdl)
        terms.append((s, idf, idf * fmax * (K1 + 1.0) / (fmax + kmin) if fmax > 0 else 0.0))
    if not terms:
        return []

    def postings(s: int) -> npt.NDArray[np.int32]:
        return index.docs[int(index.offsets[s]) : int(index.offsets[s + 1])]

    def union(slots: Sequence[int]) -> npt.NDArray[np.int32]:
        lists = [postings(s) for s in slots]
        if sum(len(x) for x in lists) * 8 > n:
            seen = np.zeros(n, dtype=np.bool_)
            for x in lists:
                seen[x] = True
            if mask is not None:
                seen &= ~mask
            return np.flatnonzero(seen).astype(np.int32)
        return _distinct(lists, mask)

    def score(cand: npt.NDArray[np.int32]) -> npt.NDArray[np.float64]:
        total = np.zeros(len(cand))
        klen = K1 * (1.0 - B + B * index.doclen[cand] / avgdl)
        for s, idf, _ in terms:
            lo, hi = int(index.offsets[s]), int(index.offsets[s + 1])
            docs = index.docs[lo:hi]
            pos = np.searchsorted(docs, cand)
            pos[pos >= len(docs)] = 0
            hit = docs[pos] == cand
            f = index.tf[lo:hi][pos[hit]] @ w
            part = np.zeros(len(cand))
            part[hit] = idf * (f * (K1 + 1.0)) / (f + klen[hit])
            total += part
        return total

    if index.impact_order is not None and index.neg_impact is not None and index.impact_weights == tuple(weights):
        return _impact_top(index, terms, score, avgdl=avgdl, limit=limit, mask=mask)
    # a floor for the limit-th best score: the rows of the rarest phrases, fully scored
    by_df = sorted(terms, key=lambda t: int(index.offsets[t[0] + 1] - index.offsets[t[0]]))
    floor = -math.inf
    seeds: list[int] = []
    for s, _, _ in by_df:
        seeds.append(s)
        seed = union(seeds)
        if len(seed) >= limit:
            floor = float(np.partition(score(seed), len(seed) - limit)[len(seed) - limit])
            break
    # phrases that together cannot reach the floor are not essential
    essential: list[int] = []
    bound = 0.0
    for s, _, ub in sorted(terms, key=lambda t: t[2]):
        bound += ub
        if not bound < floor * (1.0 - 1e-9):
            essential.append(s)
    cand = union(essential)
    if len(cand) == 0:
        return []
    scores = score(cand)
    if len(cand) > limit:
        keep = np.argpartition(-scores, limit - 1)[:limit]
        cand, scores = cand[keep], scores[keep]
    order = np.lexsort((index.rowids[cand], -scores))
    return [(int(index.rowids[cand[i]]), float(scores[i])) for i in order]


def _impact_top(
    index: Postings,
    terms: Sequence[tuple[int, float, float]],
    score: Callable[[npt.NDArray[np.int32]], npt.NDArray[np.float64]],
    *,
    avgdl: float,
    limit: int,
    mask: npt.NDArray[np.bool_] | None,
) -> Hits:
    """The exact top ``limit`` (up to ties) from impact-ordered postings, in two rounds.

    1. The best ``4 * limit`` postings of every phrase are scored in full: their ``limit``-th
       score ``theta`` is a floor of the answer's.
    2. Phrases whose upper bounds together stay below ``theta`` are non-essential (MaxScore);
       what is left of ``theta`` is shared by the essential ones (in proportion to their
       posting lists' lengths), and each contributes
       its postings whose impact (times ``idf``, times ``avgdl / impact_avgdl`` when the
       average row grew since the order was taken: a longer average lifts a row's tf part by
       at most that factor) exceeds its share. A row outside every such head scores at most
       ``theta``: it cannot enter the top ``limit`` (at most tie with it). The heads are
       scored in full, over every phrase.
    """
    assert index.impact_order is not None and index.neg_impact is not None
    order, neg = index.impact_order, index.neg_impact
    grow = max(1.0, avgdl / index.impact_avgdl)
    spans = [(int(index.offsets[s]), int(index.offsets[s + 1]), idf, ub) for s, idf, ub in terms]
    m = max(4 * limit, 16)
    seed = _distinct([index.docs[order[lo : min(hi, lo + m)]] for lo, hi, _, _ in spans], mask)
    if len(seed) < limit:  # few rows match at all: every one of them
        cand = _distinct([index.docs[lo:hi] for lo, hi, _, _ in spans], mask)
        return _best(index, cand, score(cand), limit)
    seed_scores = score(seed)
    theta = float(np.partition(seed_scores, len(seed) - limit)[len(seed) - limit]) * (1.0 - 1e-9)
    left = theta
    essential: list[tuple[int, int, float]] = []
    for lo, hi, idf, ub in sorted(spans, key=lambda t: t[3]):
        if ub < left and not essential:
            left -= ub  # non-essential: all of its rows' contributions fit under theta
        else:
            essential.append((lo, hi, idf))
    total = sum(hi - lo for lo, hi, _ in essential)
    heads = [seed]
    for lo, hi, idf in essential:
        # its share of what is left of theta (longer lists get more: shorter heads; measured
        # 25% fewer rows scored than equal shares), and the postings whose idf * impact *
        # grow exceed it (neg holds -impact, ascending)
        share = left * (hi - lo) / total
        cut = int(np.searchsorted(neg[lo:hi], -share / (idf * grow), side="left")) if share > 0 else hi - lo
        heads.append(index.docs[order[lo : lo + cut]])
    cand = _distinct(heads, mask)
    return _best(index, cand, score(cand), limit)


def _best(index: Postings, rows: npt.NDArray[np.int32], scores: npt.NDArray[np.float64], limit: int) -> Hits:
    """The best ``limit`` of ``rows`` by score (ties: lower rowid first) as (rowid, score)."""
    if len(rows) > limit:
        keep = np.argpartition(-scores, limit - 1)[:limit]
        rows, scores = rows[keep], scores[keep]
    best = np.lexsort((index.rowids[rows], -scores))
    return [(int(index.rowids[rows[i]]), float(scores[i])) for i in best]


@dataclass
class PartitionIndex:
    """One partition's postings at one database stamp, plus the delta appended since."""

    part: str
    appends: int
    changes: int
    generation: str | None
    max_rowid: int
    main: Postings
    # delta: rows appended (or whose context an append rewrote) since the stamp
    delta_appends: int = -1
    delta: Postings | None = None
    delta_mask: npt.NDArray[np.bool_] | None = None


#: The sidecar file format (a change makes old files unreadable: they are rebuilt).
FORMAT = 2
_ARRAYS = ("rowids", "doclen", "offsets", "docs", "tf", "tf_max", "len_min", "impact_order", "neg_impact")


class KeywordFiles:
    """Postings indexes on disk: ``<db>.keywords/<key of the partition>.npz`` (one file per
    partition, written under a temporary name and renamed into place; the partition's name is
    not in the file name). A file is only ever a starting point: its stamp must match the
    database's counters and its row count the partition's keyword rows up to its watermark,
    else it is deleted and the index rebuilt."""

    def __init__(self, db_path: str) -> None:
        self.dir = Path(db_path + ".keywords")

    def path(self, part: str) -> Path:
        return self.dir / f"{partition_file_key(part)}.npz"

    def save(self, idx: PartitionIndex) -> None:
        main = idx.main
        header = {
            "format": FORMAT,
            "appends": idx.appends,
            "changes": idx.changes,
            "generation": idx.generation,
            "max_rowid": idx.max_rowid,
            "impact_weights": list(main.impact_weights),
            "impact_avgdl": main.impact_avgdl,
        }
        terms = sorted(main.terms, key=main.terms.__getitem__)
        arrays = {name: getattr(main, name) for name in _ARRAYS}
        tmp = self.dir / f".{partition_file_key(idx.part)}.{secrets.token_hex(6)}.tmp.npz"
        try:
            self.dir.mkdir(exist_ok=True)
            with open(tmp, "wb") as f:
                np.savez(f, header=np.array(json.dumps(header)), terms=np.array("\n".join(terms)), **arrays)
            os.replace(tmp, self.path(idx.part))
        except OSError as exc:  # a full disk, a read-only directory: the index stays in memory
            log.warning("memlane: could not write the keyword index sidecar: %s", exc)
            with contextlib.suppress(OSError):
                tmp.unlink()

    def load(self, c: sqlite3.Connection, part: str, stamp: tuple[int, int, str | None]) -> PartitionIndex | None:
        """The file's index when it is whole and of this database state (appends may have
        moved: the delta covers them); None otherwise (a stale or damaged file is deleted)."""
        path = self.path(part)
        if not path.exists():
            return None
        try:
            with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
                header = json.loads(str(z["header"]))
                if header.get("format") != FORMAT or (header["changes"], header["generation"]) != stamp[1:]:
                    raise ValueError("stale")
                arrays = {name: z[name] for name in _ARRAYS}
                text = str(z["terms"])
            names = text.split("\n") if text else []
            main = Postings(
                terms={t: i for i, t in enumerate(names)},
                impact_weights=tuple(header["impact_weights"]),
                impact_avgdl=float(header["impact_avgdl"]),
                **arrays,
            )
            n, m = len(main.rowids), len(main.docs)
            ok = (
                len(main.doclen) == n
                and len(main.offsets) == len(names) + 1
                and int(main.offsets[-1]) == m
                and main.tf.shape == (m, 3)
                and main.impact_order is not None
                and len(main.impact_order) == m
                and (m == 0 or (int(main.docs.max()) < n and int(main.docs.min()) >= 0))
            )
            held = c.execute(
                "SELECT count(*) FROM facts f JOIN facts_fts x ON x.rowid = f.rowid"
                " WHERE f.partition = ? AND f.rowid <= ?",
                (part, int(header["max_rowid"])),
            ).fetchone()[0]
            if not ok or held != n:
                raise ValueError("damaged or not this database's")
        except Exception as exc:
            log.debug("memlane: keyword index sidecar not used (%s); rebuilding", exc)
            self.remove(part)
            return None
        return PartitionIndex(part, int(header["appends"]), stamp[1], stamp[2], int(header["max_rowid"]), main)

    def remove(self, part: str) -> None:
        with contextlib.suppress(OSError):
            self.path(part).unlink()


class KeywordSidecars:
    """The postings indexes of one store's large partitions and their background builder.

    Args:
        min_rows: partitions of at least this many keyword rows get an index (None: off).
        background: build on a thread of its own (a file database); False: in the searching
            call (``:memory:``, where all threads share one connection).
        connect: this thread's database connection (the builder's reads).
        rebuild_fraction: rebuild once the delta holds this share of the partition's rows.
    """

    def __init__(
        self,
        min_rows: int | None,
        *,
        background: bool,
        connect: Callable[[], sqlite3.Connection],
        files: KeywordFiles | None = None,
        rebuild_fraction: float = 0.05,
    ) -> None:
        self.min_rows = min_rows
        self.background = background
        self.rebuild_fraction = rebuild_fraction
        self._connect = connect
        self.files = files
        self._indexes: dict[str, PartitionIndex] = {}
        self._small: dict[str, tuple[int, int, str | None]] = {}  # partitions under min_rows, by stamp
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: dict[str, bool] = {}  # partition -> build fresh (not from the file)
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self.tokens = QueryTokens()
        #: the column weights (text, ctx, date) new indexes order their postings by
        self.weights: tuple[float, float, float] = (1.0, 0.5, 1.0)
        #: observable counters (tests, benchmarks)
        self.builds = 0
        self.loads = 0
        self.served = 0
        self.delta_builds = 0

    # ------------------------------------------------------------------ state
    @staticmethod
    def stamp(c: sqlite3.Connection, part: str) -> tuple[int, int, str | None] | None:
        row = c.execute(
            "SELECT appends, changes, (SELECT value FROM meta WHERE key='generation')"
            " FROM partitions WHERE partition=?",
            (part,),
        ).fetchone()
        return (int(row[0]), int(row[1]), row[2]) if row is not None else None

    def get(self, part: str) -> PartitionIndex | None:
        with self._lock:
            return self._indexes.get(part)

    def drop(self, part: str) -> None:
        """Forget ``part``'s index, in memory and on disk."""
        with self._lock:
            self._indexes.pop(part, None)
        if self.files is not None:
            self.files.remove(part)

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()

    # ------------------------------------------------------------------ building
    def load_or_build(self, c: sqlite3.Connection, part: str, *, fresh: bool = False) -> PartitionIndex | None:
        """``part``'s sidecar file when it is of this database state, else (or ``fresh``) a
        new index (written to the sidecar file)."""
        if self.files is not None and not fresh:
            stamp = self.stamp(c, part)
            idx = self.files.load(c, part, stamp) if stamp is not None else None
            if idx is not None:
                with self._lock:
                    self._indexes[part] = idx
                    self.loads += 1
                return idx
        idx = self.build(c, part)
        if idx is not None and self.files is not None and not self._closed:
            self.files.save(idx)
        return idx

    def build(self, c: sqlite3.Connection, part: str) -> PartitionIndex | None:
        """Read ``part``'s keyword rows and its stamp in one snapshot and index them. When the
        partition is the whole file, the keyword index's own ``fts5vocab`` is read (FTS5's
        tokens as stored: nothing tokenized again); otherwise its rows are tokenized by FTS5
        in a copy."""
        whole = c.execute("SELECT count(*) FROM (SELECT 1 FROM partitions LIMIT 2)").fetchone()[0] == 1
        if whole:
            try:
                c.execute(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_INSTANCES} USING fts5vocab(main, facts_fts, instance)"
                )
            except sqlite3.Error:  # no temporary schema here: tokenize a copy
                whole = False
        c.execute("BEGIN")
        try:
            stamp = self.stamp(c, part)
            total, tokens = averages(c)
            whole = whole and c.execute("SELECT count(*) FROM (SELECT 1 FROM partitions LIMIT 2)").fetchone()[0] == 1
            main: Postings | None = None
            if whole:
                rowids = np.array(
                    [
                        r[0]
                        for r in c.execute(
                            "SELECT f.rowid FROM facts f JOIN facts_fts x ON x.rowid = f.rowid"
                            " WHERE f.partition = ? ORDER BY f.rowid",
                            (part,),
                        )
                    ],
                    dtype=np.int64,
                )
                try:
                    main = postings_of(
                        rowids,
                        c.execute(VOCAB_SQL.format(table=f"temp.{_INSTANCES}")).fetchall(),
                        by_rowid=True,
                    )
                except ValueError:
                    main = None
            rows = []
            if main is None:
                rows = c.execute(
                    "SELECT x.rowid, x.text, x.ctx, x.date FROM facts f JOIN facts_fts x ON x.rowid = f.rowid"
                    " WHERE f.partition = ? ORDER BY f.rowid",
                    (part,),
                ).fetchall()
        finally:
            c.execute("COMMIT")
        if stamp is None:
            return None
        if self._closed:
            return None
        if main is None:
            main = tokenize_rows(rows)
        order_by_impact(main, self.weights, tokens / total if total else 1.0)
        top = int(main.rowids[-1]) if main.rows else 0
        idx = PartitionIndex(part, stamp[0], stamp[1], stamp[2], top, main)
        with self._lock:
            self._indexes[part] = idx
            self.builds += 1
        return idx

    def schedule(self, part: str, *, fresh: bool = False) -> None:
        """Queue ``part``'s build (``fresh``: not from the sidecar file, whose delta is too
        large)."""
        with self._cond:
            if self._closed or (part in self._queue and not fresh):
                return
            self._queue[part] = self._queue.get(part, False) or fresh
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="memlane-keyword-builder", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no build is queued or running (tests, benchmarks)."""
        with self._cond:
            return self._cond.wait_for(lambda: (not self._queue and not self._busy) or self._closed, timeout)

    def close(self, timeout: float = 1.0) -> None:
        """Stop the builder: a build in progress stops at its next step (and is not saved); a
        short wait, so a one-shot process (a CLI search) never waits for a build to finish."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed)
                if self._closed:
                    self._busy = False
                    self._cond.notify_all()
                    return
                part = next(iter(self._queue))
                fresh = self._queue[part]
                self._busy = True
            try:
                self.load_or_build(self._connect(), part, fresh=fresh)
            except Exception:  # a failed build leaves the FTS5 path in place
                if not self._closed:
                    log.exception("memlane: keyword index build failed")
            finally:
                with self._cond:
                    self._queue.pop(part, None)
                    self._busy = False
                    self._cond.notify_all()

    # ------------------------------------------------------------------ freshness
    def current(self, c: sqlite3.Connection, part: str, rows_hint: Callable[[], int]) -> PartitionIndex | None:
        """``part``'s index, proven current against the database (with its delta refreshed),
        or None (a build is queued when the partition is large enough)."""
        if self.min_rows is None:
            return None
        stamp = self.stamp(c, part)
        if stamp is None:
            return None
        idx = self.get(part)
        if idx is not None and (idx.changes, idx.generation) != stamp[1:]:
            self.drop(part)  # an edit, delete or purge since: never used again
            idx = None
        if idx is None:
            if self._small.get(part) == stamp:  # counted below min_rows at this very stamp
                return None
            if rows_hint() < self.min_rows:
                with self._lock:
                    if len(self._small) >= 100_000:
                        self._small.clear()
                    self._small[part] = stamp
                return None
            if self.background:
                self.schedule(part)
                return None
            idx = self.build(c, part)
            if idx is None or (idx.appends, idx.changes, idx.generation) != stamp:
                return None
        moved = idx.appends != stamp[0] and idx.delta_appends != stamp[0]
        if moved and not self._refresh_delta(c, idx, stamp):
            return None
        return idx

    def _refresh_delta(self, c: sqlite3.Connection, idx: PartitionIndex, stamp: tuple[int, int, str | None]) -> bool:
        """Tokenize the rows appended since ``idx``'s stamp and the rows of the sessions they
        joined (their ``ctx`` may have changed); False when the snapshot moved meanwhile."""
        c.execute("BEGIN")
        try:
            now = self.stamp(c, idx.part)
            rows = c.execute(
                "SELECT x.rowid, x.text, x.ctx, x.date FROM facts f JOIN facts_fts x ON x.rowid = f.rowid"
                " WHERE f.partition = ?1 AND (f.rowid > ?2 OR f.session_id IN"
                " (SELECT session_id FROM facts WHERE partition = ?1 AND rowid > ?2 AND session_id IS NOT NULL))"
                " ORDER BY f.rowid",
                (idx.part, idx.max_rowid),
            ).fetchall()
        finally:
            c.execute("COMMIT")
        if now != stamp:
            return False
        if len(rows) > self.rebuild_fraction * max(idx.main.rows, 1) and self.background:
            # too many to tokenize on the search path: FTS5 answers until the rebuild is done
            self.schedule(idx.part, fresh=True)
            return False
        delta = tokenize_rows(rows)
        mask = np.isin(idx.main.rowids, delta.rowids)
        with self._lock:
            idx.delta, idx.delta_mask, idx.delta_appends = delta, mask, stamp[0]
            self.delta_builds += 1
        return True

    # ------------------------------------------------------------------ search
    def search(
        self,
        idx: PartitionIndex,
        phrases: Sequence[str],
        dfs: Sequence[int],
        *,
        total_rows: int,
        avgdl: float,
        weights: tuple[float, float, float],
        limit: int,
    ) -> Hits:
        """The best ``limit`` (rowid, score) of the index and its delta."""
        kw = {"total_rows": total_rows, "avgdl": avgdl, "weights": weights, "limit": limit}
        hits = bm25_top(idx.main, phrases, dfs, mask=idx.delta_mask if idx.delta is not None else None, **kw)  # type: ignore[arg-type]
        if idx.delta is not None and idx.delta.rows:
            hits += bm25_top(idx.delta, phrases, dfs, **kw)  # type: ignore[arg-type]
            hits.sort(key=lambda h: (-h[1], h[0]))
            del hits[limit:]
        with self._lock:
            self.served += 1
        return hits

    def local_df(self, idx: PartitionIndex, token: str) -> int:
        """Rows of the partition holding ``token`` now (index minus masked rows plus delta)."""
        main = idx.main
        s = main.terms.get(token)
        n = 0
        if s is not None:
            docs = main.docs[int(main.offsets[s]) : int(main.offsets[s + 1])]
            n = len(docs) - (
                int(idx.delta_mask[docs].sum()) if idx.delta is not None and idx.delta_mask is not None else 0
            )
        if idx.delta is not None:
            n += idx.delta.df(token)
        return n
