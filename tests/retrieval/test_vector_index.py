"""The vector stage of the SQLite store: HNSW graph (usearch) vs exact, exact filters,
persisted sidecars (reuse, staleness, damage, forget), backfills kept in the cache.

Real SQLite files, real usearch; thresholds set low so a few thousand rows take the
graph / sidecar paths. No timings here: see bench/vector_ann.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memlane.models import Fact, Scope, user_partition
from memlane.stores.base import FactFilter
from memlane.stores.sqlite import vector_cache
from memlane.stores.sqlite.db import Database
from memlane.stores.sqlite.facts import SqliteFactStore
from memlane.stores.sqlite.vector import VectorIndex, load_usearch

DIM = 32
USER = "alice"
PART = user_partition(USER, None)
needs_usearch = pytest.mark.skipif(load_usearch() is None, reason="usearch (extra 'ann') not installed")


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_facts(n: int, start: int = 0, user: str = USER, sessions: int = 10) -> list[Fact]:
    return [
        Fact(
            content=f"memory number {start + i}",
            user_id=user,
            session_id=f"s{(start + i) % sessions}",
            kind="message" if (start + i) % 10 else "fact",
        )
        for i in range(n)
    ]


async def open_store(path: Path, **kw: object) -> SqliteFactStore:
    opts: dict[str, object] = {"exact_max": 100, "ann_min": 500, "sidecar_min": 500}
    opts.update(kw)
    store = await SqliteFactStore.open(path, **opts)  # type: ignore[arg-type]
    await store.bind_embedder("test", DIM)
    return store


async def search(store: SqliteFactStore, q: np.ndarray, limit: int = 10, **flt: object) -> list[tuple[str, float]]:
    f = FactFilter(**flt) if flt else None  # type: ignore[arg-type]
    got = await store.vector_search(Scope(user_id=USER).partition_filter(), q, limit=limit, filter=f)
    return [(c.fact_id, c.score) for c in got]


def exact_top(ids: list[str], mat: np.ndarray, q: np.ndarray, k: int) -> list[str]:
    scores = mat @ q
    order = np.argsort(-scores, kind="stable")[:k]
    return [ids[i] for i in order]


async def built(store: SqliteFactStore, rng: np.random.Generator) -> None:
    """A first search loads the cache and queues the builder; wait for it."""
    await search(store, unit(rng, 1)[0])
    assert store.vector_caches.wait_idle(120)


def sidecar_files(db: Path) -> list[Path]:
    d = Path(str(db) + ".vectors")
    return sorted(d.iterdir()) if d.exists() else []


@needs_usearch
async def test_graph_recall_against_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n = 3000
    vecs = unit(rng, n)
    store = await open_store(tmp_path / "m.db", sidecar_min=None)
    stored = await store.put_facts(make_facts(n), vecs)
    ids = [f.id for f, _ in stored]
    await built(store, rng)
    index = store._cache[PART].index
    assert index.ann is not None and index.ann_n == n  # the graph path is the one measured
    recalls = []
    for q in unit(rng, 50):
        got = await search(store, q)
        exact = exact_top(ids, vecs, q, 10)
        recalls.append(len({g for g, _ in got} & set(exact)) / 10)
        # scores are exact cosines (graph candidates are rescored)
        by_id = dict(zip(ids, vecs @ q, strict=True))
        assert all(abs(s - by_id[g]) < 1e-5 for g, s in got)
    assert np.mean(recalls) >= 0.95
    # rows appended after the graph (the tail) are searched exactly: an exact copy of a new
    # vector is found first at once, before any rebuild
    new = unit(rng, 3)
    added = await store.put_facts(make_facts(3, start=n), new)
    got = await search(store, new[1])
    assert got[0][0] == added[1][0].id
    await store.close()


@needs_usearch
async def test_filters_are_exact_on_the_graph_path(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n = 3000
    vecs = unit(rng, n)
    store = await open_store(tmp_path / "m.db", sidecar_min=None)
    facts = make_facts(n)
    stored = await store.put_facts(facts, vecs)
    ids = [f.id for f, _ in stored]
    await built(store, rng)
    assert store._cache[PART].index.ann is not None
    sessions = np.array([f.session_id for f in facts])
    kinds = np.array([f.kind for f in facts])
    for q in unit(rng, 20):
        # broad filter (90% of rows: over-fetch from the graph) and narrow ones (10%, exact scan)
        for flt, keep in (
            ({"kind": "message"}, kinds == "message"),
            ({"kind": "fact"}, kinds == "fact"),
            ({"session_id": "s3"}, sessions == "s3"),
        ):
            got = await search(store, q, **flt)
            rows = np.flatnonzero(keep)
            allowed = {ids[i] for i in rows}
            assert len(got) == 10 and all(g in allowed for g, _ in got)
            exact = exact_top([ids[i] for i in rows], vecs[rows], q, 10)
            assert len({g for g, _ in got} & set(exact)) >= 8
            if flt.get("kind") != "message":  # narrow: the exact scan, same order
                assert [g for g, _ in got] == exact
    await store.close()


@needs_usearch
async def test_sidecar_reused_by_a_second_store(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    db = tmp_path / "m.db"
    n = 2000
    vecs = unit(rng, n)
    a = await open_store(db)
    await a.put_facts(make_facts(n), vecs)
    await built(a, rng)
    assert a.vector_blob_rows == n
    files = sidecar_files(db)
    assert {p.suffix for p in files} == {".vec", ".usearch"}
    queries = unit(rng, 10)
    before = [await search(a, q) for q in queries]
    await a.close()

    b = await open_store(db)
    await search(b, queries[0])  # loads the partition: vectors memory-mapped, the graph file
    # mapped on the builder thread; until it is, searches are exact (so results may differ)
    assert b.vector_caches.wait_idle(60)
    after = [await search(b, q) for q in queries]
    assert b.vector_blob_rows == 0  # memory-mapped, no BLOB read
    cached = b._cache[PART]
    assert len(cached.index) == n and cached.index.base_rows == n and cached.index.ann_n == n
    assert after == before
    # an append by this store: only the new row is read
    new = unit(rng, 1)
    ((added, _),) = await b.put_facts(make_facts(1, start=n), new)
    got = await search(b, new[0])
    assert got[0][0] == added.id and b.vector_blob_rows == 1
    await b.close()


@needs_usearch
async def test_sidecar_after_changes_in_another_process(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    db = tmp_path / "m.db"
    n = 1000
    vecs = unit(rng, n)
    a = await open_store(db)
    stored = await a.put_facts(make_facts(n), vecs)
    await built(a, rng)
    await a.close()
    assert sidecar_files(db)

    # another process appends 5 facts: the sidecar is behind, not stale (a delta of 5 rows)
    appended = unit(rng, 5)
    np.save(tmp_path / "new.npy", appended)
    script = textwrap.dedent(f"""
        import asyncio, numpy as np
        from memlane.models import Fact
        from memlane.stores.sqlite.facts import SqliteFactStore
        async def main():
            s = await SqliteFactStore.open({str(db)!r}, exact_max=100, ann_min=500, sidecar_min=500)
            v = np.load({str(tmp_path / "new.npy")!r})
            out = await s.put_facts([Fact(content=f"from the other process {{i}}", user_id={USER!r})
                                     for i in range(5)], v)
            print(",".join(f.id for f, _ in out))
            await s.close()
        asyncio.run(main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    other_ids = proc.stdout.strip().split(",")
    b = await open_store(db)
    got = await search(b, appended[2])
    assert got[0][0] == other_ids[2]
    assert b.vector_blob_rows == 5
    await b.close()

    # a delete (changes++) makes the sidecar stale: ignored, deleted, rebuilt without the row
    victim = stored[7][0]
    c = await open_store(db)
    await c.invalidate_fact(victim.id, Scope(user_id=USER))
    await c.close()
    d = await open_store(db)
    got = await search(d, vecs[7])
    assert victim.id not in {g for g, _ in got}
    assert d.vector_blob_rows == n + 5 - 1  # reloaded from the database
    assert d.vector_caches.wait_idle(120)
    for p in sidecar_files(db):
        assert vecs[7].tobytes() not in p.read_bytes()
    await d.close()


@needs_usearch
async def test_forget_leaves_no_vector_in_sidecars(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    db = tmp_path / "m.db"
    n = 800
    vecs = unit(rng, n)
    store = await open_store(db)
    await store.put_facts(make_facts(n), vecs)
    other = unit(rng, n)
    await store.put_facts(make_facts(n, user="bob"), other)
    await built(store, rng)
    await store.vector_search(Scope(user_id="bob").partition_filter(), other[0], limit=5)
    assert store.vector_caches.wait_idle(120)
    blobs = b"".join(p.read_bytes() for p in sidecar_files(db))
    assert vecs[0].tobytes() in blobs and other[0].tobytes() in blobs  # both persisted
    await store.purge_user(USER)
    blobs = b"".join(p.read_bytes() for p in sidecar_files(db))
    for v in vecs[:50]:
        assert v.tobytes() not in blobs
    assert other[0].tobytes() in blobs  # bob's sidecar is untouched (his partition did not change)
    await store.close()


async def test_half_written_sidecar_is_ignored(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    db = tmp_path / "m.db"
    n = 700
    vecs = unit(rng, n)
    a = await open_store(db)
    await a.put_facts(make_facts(n), vecs)
    await built(a, rng)
    q = unit(rng, 1)[0]
    want = await search(a, q)
    await a.close()
    (vec_file,) = [p for p in sidecar_files(db) if p.suffix == ".vec"]
    data = vec_file.read_bytes()
    for broken in (data[: len(data) // 2], data[:10], b"garbage" * 100, data + b"\0" * 64):
        vec_file.write_bytes(broken)
        b = await open_store(db)
        assert await search(b, q) == want
        assert b.vector_blob_rows == n  # read from the database, not from the broken file
        assert b._cache[PART].index.base_rows == 0
        await b.close()


async def test_backfill_keeps_the_cache(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    db = tmp_path / "m.db"
    store = await open_store(db)
    vecs = unit(rng, 300)
    await store.put_facts(make_facts(300), vecs)
    pending = [f for f, _ in await store.put_facts(make_facts(20, start=300), None)]  # no vectors yet
    await search(store, vecs[0])
    cached = store._cache[PART]
    assert len(cached.index) == 300 and store.vector_blob_rows == 300
    late = unit(rng, 20)
    await store.set_embeddings([f.id for f in pending], late)
    got = await search(store, late[4])
    assert store._cache[PART] is cached  # the same cache object: no reload
    assert store.vector_blob_rows == 320  # just the 20 backfilled rows were read
    assert got[0][0] == pending[4].id
    # replacing a vector that existed is a change: the partition reloads, the new vector wins
    await store.set_embeddings([pending[4].id], late[5:6])
    got = await search(store, late[5])
    assert store._cache[PART] is not cached
    assert got[0][0] in (pending[4].id, pending[5].id) and {g for g, _ in got[:2]} == {pending[4].id, pending[5].id}
    await store.close()


async def test_backfill_on_top_of_a_sidecar(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    db = tmp_path / "m.db"
    a = await open_store(db)
    vecs = unit(rng, 600)
    await a.put_facts(make_facts(600), vecs)
    pending = [f for f, _ in await a.put_facts(make_facts(10, start=600), None)]
    await built(a, rng)
    await a.close()
    b = await open_store(db)
    late = unit(rng, 10)
    await b.set_embeddings([f.id for f in pending], late)  # before b's first search
    got = await search(b, late[3])
    assert got[0][0] == pending[3].id
    assert b.vector_blob_rows == 10 and b._cache[PART].index.base_rows == 600
    await b.close()


async def test_without_usearch_the_numpy_paths_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_cache, "load_usearch", lambda: None)
    rng = np.random.default_rng(9)
    db = tmp_path / "m.db"
    n = 1500
    vecs = unit(rng, n)
    store = await open_store(db)
    stored = await store.put_facts(make_facts(n), vecs)
    await built(store, rng)
    index = store._cache[PART].index
    assert index.ann is None  # sign-bit first pass + exact rescoring (n > exact_max)
    got = await search(store, vecs[42])
    assert got[0][0] == stored[42][0].id
    assert [p.suffix for p in sidecar_files(db)] == [".vec"]  # vectors persisted, no graph
    await store.close()
    again = await open_store(db)
    assert (await search(again, vecs[42]))[0][0] == stored[42][0].id
    assert again.vector_blob_rows == 0
    await again.close()


async def test_memory_database_has_no_sidecar(tmp_path: Path) -> None:
    store = await SqliteFactStore.open(Database(":memory:").open_sync(), exact_max=10, sidecar_min=10)
    await store.bind_embedder("test", DIM)
    rng = np.random.default_rng(10)
    vecs = unit(rng, 50)
    stored = await store.put_facts(make_facts(50), vecs)
    assert (await search(store, vecs[3]))[0][0] == stored[3][0].id
    assert store.vector_caches.sidecars is None
    await store.close()


def test_index_from_arrays_matches_appended_rows() -> None:
    rng = np.random.default_rng(11)
    vecs = unit(rng, 400)
    keys = [f"k{i}" for i in range(400)]
    full = VectorIndex(DIM, exact_max=50)
    full.append(keys, [f"s{i % 3}" for i in range(400)], vecs, ["message"] * 400)
    blob, off = full.key_arrays(300)
    sn, sc, kn, kc = full.code_arrays(300)
    part = VectorIndex.from_arrays(DIM, vecs[:300], np.frombuffer(blob, np.uint8), off, sn, sc, kn, kc, exact_max=50)
    part.append(keys[300:], [f"s{i % 3}" for i in range(300, 400)], vecs[300:], ["message"] * 100)
    assert part.keys == keys and part.sessions == full.sessions
    for q in unit(rng, 5):
        for flt in ({}, {"session_id": "s1"}, {"allowed": {"k5", "k350", "k399"}}):
            r1, s1 = full.search(q, 5, **flt)  # type: ignore[arg-type]
            r2, s2 = part.search(q, 5, **flt)  # type: ignore[arg-type]
            assert r1.tolist() == r2.tolist() and np.allclose(s1, s2)


async def test_sidecar_of_a_purged_partition_is_not_reused(tmp_path: Path) -> None:
    """A purge restarts the partition's counters; a sidecar that survived it (say, a crash
    between the commit and the unlink) must not pass for the new partition's."""
    rng = np.random.default_rng(12)
    db = tmp_path / "m.db"
    store = await open_store(db)
    old = unit(rng, 600)
    await store.put_facts(make_facts(600), old)
    await built(store, rng)
    saved = {p.name: p.read_bytes() for p in sidecar_files(db)}
    assert saved
    await store.purge_user(USER)
    assert sidecar_files(db) == []
    new = unit(rng, 600)
    fresh = [f for f, _ in await store.put_facts(make_facts(600, start=1000), new)]
    await store.close()
    for name, data in saved.items():  # the survivor: same name, same counters as the new partition
        (Path(str(db) + ".vectors") / name).write_bytes(data)
    again = await open_store(db)
    got = await search(again, old[0])
    assert again.vector_blob_rows == 600  # the new rows, read from the database
    assert {g for g, _ in got} <= {f.id for f in fresh}
    assert (await search(again, new[9]))[0][0] == fresh[9].id
    blobs = b"".join(p.read_bytes() for p in sidecar_files(db))
    assert old[0].tobytes() not in blobs  # the survivor was deleted
    await again.close()
