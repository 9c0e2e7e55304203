"""Versioned schema migrations of the PostgreSQL store, applied in order on open.

Each migration runs in one transaction under an advisory lock, so replicas starting together
migrate once; applied names are recorded in ``schema_migrations``. Never edit an applied
migration: append a new one. The tables mirror the SQLite store's (same names and columns, so
``memlane migrate`` copies table by table) with native types: ``timestamptz``, ``jsonb``,
``boolean`` and pgvector's ``vector`` (its dimension is fixed, and the HNSW index built, when
the first embedder is bound: ``PgFactStore.bind_embedder``).

Keyword search reads ``facts.tsv``: the English ``tsvector`` of the searchable text (weight A),
the event date in words (B) and the neighbouring turns of the session (C), under a GIN index.
"""

from __future__ import annotations

from memlane.stores.sql import schema

#: The column types of the tables shared with SQLite (:mod:`memlane.stores.sql.schema`).
T = schema.PG_TYPES

# retrieval.text.keyword_text in PL/pgSQL (for migration 0003): NFKC, ß as ss, every run of
# CJK characters (the same ranges as retrieval.text._CJK_RUN) as " c1 c1c2 c2 c2c3 ... cn ".
_KEYWORD_TEXT_FUNCTION = r"""CREATE FUNCTION pg_temp.memlane_keyword_text(t text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $f$
DECLARE
    s text;
    out text := '';
    run text := '';
    ch text;
    n int;
BEGIN
    IF t IS NULL OR octet_length(t) = char_length(t) THEN
        RETURN t;
    END IF;
    s := replace(replace(normalize(t, NFKC), 'ß', 'ss'), 'ẞ', 'SS');
    n := char_length(s);
    FOR i IN 1 .. n + 1 LOOP
        ch := CASE WHEN i <= n THEN substr(s, i, 1) ELSE '' END;
        IF ch <> '' AND ch ~ '[々㐀-䶿一-鿿豈-﫿𠀀-𱍏ぁ-ゟァ-ヺー-ヿㇰ-ㇿ가-힯ᄀ-ᇿㄱ-ㆎ]' THEN
            run := run || ch;
        ELSE
            IF run <> '' THEN
                out := out || ' ';
                FOR j IN 1 .. char_length(run) - 1 LOOP
                    out := out || substr(run, j, 1) || ' ' || substr(run, j, 2) || ' ';
                END LOOP;
                out := out || substr(run, char_length(run), 1) || ' ';
                run := '';
            END IF;
            out := out || ch;
        END IF;
    END LOOP;
    RETURN out;
END
$f$"""

#: The keyword index of the facts: the searchable text, the date in words, the neighbouring
#: turns (:mod:`memlane.stores.postgres.search`).
_KEYWORD_COLUMNS = """,
                search_text TEXT NOT NULL DEFAULT '',
                ctx TEXT NOT NULL DEFAULT '',
                date_words TEXT NOT NULL DEFAULT '',
                tsv tsvector GENERATED ALWAYS AS (
                    setweight(to_tsvector('english', search_text), 'A')
                    || setweight(to_tsvector('english', date_words), 'B')
                    || setweight(to_tsvector('english', ctx), 'C')
                ) STORED"""

#: pgvector's HNSW limit (``memlane.stores.postgres.facts.HNSW_MAX_DIM``).
_HNSW_MAX_DIM = 2000
#: 0011: type ``fact_windows.embedding`` as the bound embedder's ``vector(dim)``, kept in the row
#: (MAIN), with its HNSW index, when the schema is bound already.
_TYPE_WINDOWS = f"""DO $$
DECLARE d integer;
BEGIN
    SELECT value::integer INTO d FROM meta WHERE key = 'dim';
    IF d IS NOT NULL THEN
        EXECUTE format('ALTER TABLE fact_windows ALTER COLUMN embedding TYPE vector(%s)', d);
        ALTER TABLE fact_windows ALTER COLUMN embedding SET STORAGE MAIN;
        IF d <= {_HNSW_MAX_DIM} THEN
            CREATE INDEX fact_windows_hnsw ON fact_windows USING hnsw (embedding vector_cosine_ops);
        END IF;
    END IF;
END $$"""

MIGRATIONS: list[tuple[str, list[str]]] = [
    (
        "0001_core",
        [
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "INSERT INTO meta (key, value) VALUES ('generation', '0')",
            # ---- short-term: sessions and events
            *schema.sessions(T),
            # ---- long-term: facts (verbatim memories, extracted facts, documents, fragments)
            *schema.facts(T, _KEYWORD_COLUMNS),
            "CREATE INDEX facts_tsv ON facts USING gin (tsv)",
            "CREATE INDEX facts_unembedded ON facts(rowid) WHERE embedding IS NULL AND invalid_at IS NULL",
            # Per-partition change counters (memory stamps, vector caches) and authors.
            """CREATE TABLE partitions (
                partition TEXT PRIMARY KEY,
                appends BIGINT NOT NULL DEFAULT 0,
                changes BIGINT NOT NULL DEFAULT 0
            )""",
            *schema.authors(T),
            *schema.history(T),
            # ---- always-in-context: reflections and consolidated blobs
            *schema.reflections(T),
            # Who an agent-scope item was formed from (forget(user) finds what it erases).
            *schema.contributors(T),
            # ---- formation: durable jobs (claimed with FOR UPDATE SKIP LOCKED), cursors, batches
            *schema.jobs(T),
            *schema.formation_cursors(T),
            """CREATE TABLE applied_batches (
                key TEXT PRIMARY KEY, user_id TEXT, at TIMESTAMPTZ NOT NULL, result JSONB NOT NULL
            )""",
            "CREATE INDEX applied_batches_user ON applied_batches(user_id)",
            # ---- the assembled memory context, reused while its stamps match (5-minute TTL)
            *schema.context_cache(T),
        ],
    ),
    (
        # A user's partitions are found by key prefix, compared byte-wise (COLLATE "C") so the
        # database's locale cannot reorder the "|" and "%" of partition keys; an index serves it.
        "0002_prefix_index_rowids",
        [
            'CREATE INDEX partitions_prefix ON partitions (partition COLLATE "C")',
            # Insertion order, as SQLite's implicit rowid gives it: history entries and
            # reflections written in the same microsecond keep their order.
            "ALTER TABLE history ADD COLUMN rowid BIGSERIAL",
            "ALTER TABLE reflections ADD COLUMN rowid BIGSERIAL",
        ],
    ),
    (
        # Chinese / Japanese / Korean text findable by keyword: search_text and ctx hold
        # retrieval.text.keyword_text of the texts (CJK runs as characters and character pairs,
        # NFKC, ß as ss); rows written before held the raw texts. The function below is that
        # transformation in PL/pgSQL (tests/retrieval/test_multilingual.py compares the two), used once.
        "0003_cjk_keyword_text",
        [
            _KEYWORD_TEXT_FUNCTION,
            "UPDATE facts SET search_text = pg_temp.memlane_keyword_text(search_text),"
            " ctx = pg_temp.memlane_keyword_text(ctx)"
            " WHERE octet_length(search_text) <> char_length(search_text) OR octet_length(ctx) <> char_length(ctx)",
            "DROP FUNCTION pg_temp.memlane_keyword_text(text)",
        ],
    ),
    (
        # Sessions by id alone, in every app (SessionStore.sessions_with_id): the service's room
        # check for a user-bound key reads it on each room read; the (app, id) key cannot serve it.
        "0004_sessions_by_id",
        ["CREATE INDEX sessions_id ON sessions (id, app)"],
    ),
    (
        # Vectors read without TOAST (issue 19): under pgvector's default storage (external) a row
        # of texts, tsvector and a 384-float vector passes the 2 KB toast threshold and the
        # vector goes out of line, so an exact scan of 1,000 rows read 6,208 buffers (1.7 MB heap
        # + TOAST). MAIN storage keeps the vector in the row, and a 4 KB toast_tuple_target keeps
        # whole rows of up to ~4 KB inline (tsv stays in the row too): 498 buffers, 6.6 -> 1.5 ms
        # (docs/benchmarks.md, issue 19). Applies to rows written (or rewritten: VACUUM FULL) from
        # now on. PgFactStore.bind_embedder's ALTER COLUMN ... TYPE resets the column's storage
        # to the type's (external), so a store bound after this migration needs bind_embedder to
        # set MAIN again after it (tests/stores/test_pg_search.py::test_vectors_stay_in_the_row).
        "0005_vectors_inline",
        [
            "ALTER TABLE facts SET (toast_tuple_target = 4080)",
            "ALTER TABLE facts ALTER COLUMN embedding SET STORAGE MAIN",
        ],
    ),
    (
        # Access counts updated in place (issue 19): every search adds 1 to its hits'
        # access_count. A facts row is ~3 KB, two to a page, so at the default fillfactor an
        # update found no room on its page and was not HOT (3-21% HOT): each one inserted the row
        # again into the GIN and HNSW indexes, 19-31 ms of a 40-52 ms search. With 40% of each
        # page left free, 100% of them are HOT and the UPDATE costs ~1 ms, for a heap 1.6x larger
        # (docs/benchmarks.md, issue 19 round 2). Applies to pages written from now on (VACUUM
        # FULL rewrites the rest). No index covers access_count, or HOT could not apply.
        "0006_facts_hot_updates",
        ["ALTER TABLE facts SET (fillfactor = 60)"],
    ),
    (
        # Bi-temporal memory (docs/temporal.md): each history row records, beside `at` (record
        # time), the world time its change took effect: an ADD's or UPDATE's text holds from
        # then (the statement's own time), a DELETE ends the fact then. NULL on older rows
        # (stores/sql/temporal.py falls back to the fact's valid_from and the row's `at`).
        "0007_bitemporal",
        [f"ALTER TABLE history ADD COLUMN effective_at {T.ts}"],
    ),
    (
        # The review queue (docs/review.md): proposed ADD / UPDATE / DELETE changes waiting for a
        # reviewer, applied through formation's write path on approval; forget(user) erases them.
        "0008_proposals",
        [*schema.proposals(T)],
    ),
    (
        # One person across channels (issue 20): (channel, sender) -> user_id, written by
        # link_identity, read by add / sessions given channel= and sender=, erased by forget.
        "0009_identities",
        [*schema.identities(T)],
    ),
    (
        # The history of each consolidated blob (the inspector's versions, issue 21): every put of
        # a blob writes its version here in the same transaction; forget erases a user's rows
        # and those of a dropped agent blob; blobs already stored get their current version.
        "0010_consolidated_versions",
        [*schema.consolidated_versions(T), schema.CONSOLIDATED_VERSIONS_BACKFILL],
    ),
    (
        # Every character of a long memory on the vector side (issue 22): a text longer than the
        # encoder reads keeps one vector per further window here (window 0 is facts.embedding),
        # written with the fact, dropped with its text (update) or the fact (forget). A schema
        # already bound to an embedder types the column and builds its HNSW index here (a new
        # one gets them from PgFactStore.bind_embedder, as facts.embedding does).
        "0011_fact_windows",
        [
            *schema.fact_windows(T),
            _TYPE_WINDOWS,
        ],
    ),
]
