"""LangGraph long-term memory over memlane: :class:`MemlaneStore`, a ``langgraph`` ``BaseStore``.

Compile a graph with ``store=MemlaneStore(memory)`` and its nodes' ``store.put`` / ``store.search``
(and the async variants) read and write memlane memories, kept in memlane's SQLite file,
searched with memlane's hybrid search (or by cosine with LangGraph's ``index={"embed": ...}``),
and isolated per user like every memlane memory::

    from langgraph.graph import StateGraph
    from memlane import Memory
    from memlane.adapters.langgraph import MemlaneStore

    store = MemlaneStore(Memory("memory.db", embedder="hash"))
    graph = builder.compile(store=store, checkpointer=...)

How items map onto memlane (see docs/adapters.md):

* **Scope.** A namespace's first ``scope_depth`` labels pick the memlane scope through the
  ``scope`` function: by default ``namespace[0]`` is the ``user_id`` (``("alice", "memories")``
  belongs to user ``alice``) and the optional ``agent_id`` is the agent namespace. A store bound
  to one user (``MemlaneStore(memory, user_id="alice")``) keeps every namespace in that user's
  memory instead.
* **What a store may see.** A bound store sees its user's items; the default store sees the
  items of every user it wrote for under its agent namespace (its caller can read each of them
  by naming the user, so listing them reveals nothing new). ``search(())`` and
  ``list_namespaces()`` without a user cover exactly that: the default store keeps a directory
  of the namespace leads (``namespace[:scope_depth]``) it wrote, as memlane memories of a
  reserved agent namespace (``langgraph-store-directory`` or ``langgraph-store-directory:<agent_id>``),
  each linked to its user (``forget(user)`` erases it). Another agent namespace's leads are in
  another directory, never read. A custom ``scope`` function has no directory: its searches
  and listings must name the scope's labels (:class:`~memlane.errors.ScopeError` otherwise).
* **Item = one memlane memory** (a verbatim memory, author ``"langgraph"``). Its metadata
  keeps the namespace, key, value (a JSON object; value and vectors at most 64 KiB as JSON) and
  creation time; its text, the one memlane indexes for keyword and vector search, is taken from
  the value by LangGraph's index field paths (``index={"fields": [...]}`` on the store or
  ``index=`` on ``put``; default ``"$"``, the whole value as JSON). ``index=False`` stores an
  item that ``get`` and filter-only searches find but a ``query`` never scores.
* **put** on an existing key replaces the item (its memory is deleted, a new one written):
  one item per key, ``created_at`` kept, ``updated_at`` new. **delete** (``value=None``) is
  memlane's soft delete: the item is gone for LangGraph, the old memory stays in memlane's
  history until the user is forgotten (:meth:`~memlane.AsyncMemory.forget`).
* **search** without ``query`` returns the items under the prefix in ``InMemoryStore``'s order:
  grouped by namespace (namespaces by their oldest item), oldest item first. With ``query``:

  - with ``index={"embed": ..., "dims": ...}`` (an ``Embeddings``, a sync or async function,
    or a ``"provider:model"`` string, as ``InMemoryStore`` takes): every indexed item is scored
    by the cosine similarity (-1..1) of the query's embedding and its best field vector, as
    ``InMemoryStore`` does; the vectors are stored with the item (float32) and the scan covers
    the prefix (brute force, like ``InMemoryStore``). Embeddings are computed on the caller's
    thread or event loop (``embed_documents`` / ``aembed_documents``), before the batch runs.
  - without ``embed``, memlane's hybrid search ranks the best 100 matches first
    (``score`` = memlane's fused score, above 0, about 0..2) and every other indexed item
    follows with ``score=0.0`` (no keyword match, no cosine above memlane's floor).

  Items stored with ``index=False`` come last with ``score=None``, as in ``InMemoryStore``.
  ``filter`` has ``InMemoryStore``'s semantics (exact match, nested dicts, ``$eq $ne $gt $gte
  $lt $lte``) on the item's value.
* **batch** applies ``InMemoryStore``'s order: every read of the batch sees the state before
  the batch; then the writes run, the last write to a key winning. No TTL support.

Sync and async: give it a sync :class:`memlane.Memory` (every method works, from any thread,
inside ``graph.invoke`` and ``graph.ainvoke``), or an :class:`memlane.AsyncMemory` for async
graphs (``aput``/``asearch``/...; the sync methods then work only from another thread while
that memory's event loop runs, as in LangGraph's sync nodes under ``ainvoke``).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar, cast

import numpy as np

from memlane import inputs
from memlane._binding import Binding
from memlane.adapters import missing_extra
from memlane.errors import ConfigError, InvalidInputError, ScopeError, StorageError
from memlane.memory import AsyncMemory
from memlane.models import Fact, Scope, utcnow
from memlane.sync import Memory

try:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:
    raise missing_extra("langgraph", "LangGraph (langgraph >= 1.0)", "langgraph", exc) from exc

__all__ = ["AUTHOR", "DIRECTORY", "MemlaneStore", "ScopeFn", "user_scope"]

T = TypeVar("T")

ScopeFn = Callable[[tuple[str, ...]], tuple[str | None, str | None]]
"""Maps a namespace's leading labels (``namespace[:scope_depth]``) to ``(user_id, agent_id)``.
``(user, None)``: the user's own memory; ``(user, agent)``: the user's memory under that agent;
``(None, agent)``: the agent's memory shared by all its users."""

Lead = tuple[str, ...]
ItemKey = tuple[tuple[str, ...], str]

#: The author of every memory MemlaneStore writes.
AUTHOR = "langgraph"
#: The agent namespace (``DIRECTORY`` or ``DIRECTORY:<agent_id>``) holding a default store's
#: directory of namespace leads, read by ``search(())`` and ``list_namespaces()``.
DIRECTORY = "langgraph-store-directory"
#: Search hits ranked by memlane per query and scope (memlane's top_k limit); other items follow.
RANKED = 100
#: Facts read per page when scanning a prefix.
PAGE = 1000
#: The score of an indexed item memlane's hybrid search did not find (every hit scores above 0).
UNMATCHED = 0.0

_SYNC_HINT = (
    "MemlaneStore over an AsyncMemory: use the async methods (aput, aget, asearch, ...) in async code, "
    "or give MemlaneStore a sync memlane.Memory for sync code"
)

_NS, _KEY, _VALUE, _CREATED, _INDEXED, _DEPTH, _VECTORS = (
    "lg_namespace",
    "lg_key",
    "lg_value",
    "lg_created_at",
    "lg_indexed",
    "lg_depth",
    "lg_vectors",
)
_LEAD, _LEAD_DEPTH = "lg_lead", "lg_lead_depth"
#: The fixed time of directory entries: the same lead is the same memory (memlane's writes are
#: idempotent by author, time and text), so two stores registering it at once store it once.
_DIRECTORY_TIME = datetime(2000, 1, 1, tzinfo=UTC)


def _prefix_key(n: int) -> str:
    """Metadata key holding a namespace's first ``n`` labels joined by ``.`` (LangGraph labels
    never contain a period), so a prefix search is an exact metadata match in the store."""
    return f"lg_ns{n}"


def user_scope(namespace: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The default mapping: ``namespace[0]`` is the user id, no agent."""
    return namespace[0], None


@dataclass
class _Vectors:
    """Embeddings computed at the edge for one batch: per query text, per put's (namespace, key)."""

    queries: dict[str, list[float]] = field(default_factory=dict)
    items: dict[ItemKey, dict[str, list[float]]] = field(default_factory=dict)


class MemlaneStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are memlane memories (see the module docstring).

    Args:
        memory: a sync :class:`memlane.Memory` or an :class:`memlane.AsyncMemory`.
        user_id: bind the store to this user: every namespace lives in the user's memory, and
            ``search(())`` / ``list_namespaces()`` cover the user's items (not with ``scope``).
        scope: maps ``namespace[:scope_depth]`` to ``(user_id, agent_id)``; default
            :func:`user_scope` (``namespace[0]`` is the user) with ``agent_id``.
        scope_depth: how many leading namespace labels ``scope`` reads (>= 1, default 1); with a
            custom ``scope``, searches and namespace listings must give at least that many.
        agent_id: the agent namespace for the default ``scope`` or ``user_id`` (not with a
            custom ``scope``).
        index: LangGraph's ``IndexConfig``. ``fields``: the JSON paths of the text indexed
            (default ``["$"]``). ``embed`` (with ``dims``): an ``Embeddings``, a sync or async
            function, or a ``"provider:model"`` string (needs ``langchain``); queries are then
            scored by cosine with it, as ``InMemoryStore`` does. Without ``embed``, memlane's
            hybrid search (with the memory's own embedder) ranks queries.

    Attributes:
        index_config: the ``index`` given (a copy), or None, as ``InMemoryStore`` exposes it.
        embeddings: the ``Embeddings`` made from ``index["embed"]``, or None.
    """

    supports_ttl = False

    def __init__(
        self,
        memory: AsyncMemory | Memory,
        *,
        user_id: str | None = None,
        scope: ScopeFn | None = None,
        scope_depth: int | None = None,
        agent_id: str | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        # Made in async code over an AsyncMemory, the binding remembers that loop for sync calls.
        self._binding = Binding(memory, sync_hint=_SYNC_HINT)
        self._engine: AsyncMemory = self._binding.require("MemlaneStore")
        agent = inputs.optional_id(agent_id, "agent_id")
        user = inputs.optional_id(user_id, "user_id")
        if scope is not None and (agent is not None or user is not None):
            raise ConfigError(
                "agent_id and user_id apply to the default scope; with a custom scope, return them from the function"
            )
        if scope is not None and not callable(scope):
            raise ConfigError(f"scope must be a function of the namespace, got {inputs.show(scope)}")
        self._scope_fn: ScopeFn
        self._directory: str | None = None
        if user is not None:
            if scope_depth is not None:
                raise ConfigError("scope_depth does not apply to a store bound to one user_id")
            self._depth, self._scope_fn = 0, (lambda _ns: (user, agent))
        else:
            self._depth = inputs.integer(1 if scope_depth is None else scope_depth, "scope_depth", 1, 1000)
            self._scope_fn = scope if scope is not None else (lambda ns: (ns[0], agent))
            if scope is None:  # only the default scope knows whose leads its directory may hold
                self._directory = DIRECTORY if agent is None else f"{DIRECTORY}:{agent}"
        self.index_config, self.embeddings, self._fields, self._dims = _index(index)
        self._write_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------------ BaseStore
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (reads see the state before the batch; writes follow, last one per key wins)."""
        checked = _checked(ops)
        vectors = self._embed(checked) if self.embeddings is not None else _Vectors()
        return self._binding.run_sync(self._batch(checked, vectors))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch`."""
        checked = _checked(ops)
        vectors = await self._aembed(checked) if self.embeddings is not None else _Vectors()
        return await self._binding.run(self._batch(checked, vectors))

    # ------------------------------------------------------------------ embeddings (at the edge)
    def _to_embed(self, ops: list[Op]) -> tuple[list[str], list[tuple[ItemKey, str, str]]]:
        """The queries and the (item, field path, text) of the final puts that need vectors."""
        queries = sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})
        puts = {(tuple(op.namespace), op.key): op for op in ops if isinstance(op, PutOp)}
        texts = [
            (key, path, text)
            for key, op in puts.items()
            if isinstance(op.value, Mapping) and op.index is not False
            for path, text in self._field_texts(op.value, op.index)
        ]
        return queries, texts

    def _embed(self, ops: list[Op]) -> _Vectors:
        embeddings = cast(Embeddings, self.embeddings)
        queries, texts = self._to_embed(ops)
        query_vectors = [embeddings.embed_query(q) for q in queries]
        text_vectors = embeddings.embed_documents([t for _, _, t in texts]) if texts else []
        return self._vectors(queries, query_vectors, texts, text_vectors)

    async def _aembed(self, ops: list[Op]) -> _Vectors:
        embeddings = cast(Embeddings, self.embeddings)
        queries, texts = self._to_embed(ops)
        query_vectors = list(await asyncio.gather(*(embeddings.aembed_query(q) for q in queries)))
        text_vectors = await embeddings.aembed_documents([t for _, _, t in texts]) if texts else []
        return self._vectors(queries, query_vectors, texts, text_vectors)

    def _vectors(
        self,
        queries: list[str],
        query_vectors: Sequence[Sequence[float]],
        texts: list[tuple[ItemKey, str, str]],
        text_vectors: Sequence[Sequence[float]],
    ) -> _Vectors:
        if len(query_vectors) != len(queries) or len(text_vectors) != len(texts):
            raise ConfigError(
                f"index['embed'] returned {len(text_vectors)} vectors for {len(texts)} texts: it must return one per "
                "text"
            )
        out = _Vectors(queries={q: self._vector(v) for q, v in zip(queries, query_vectors, strict=True)})
        for (key, path, _), vector in zip(texts, text_vectors, strict=True):
            out.items.setdefault(key, {})[path] = self._vector(vector)
        return out

    def _vector(self, vector: Sequence[float]) -> list[float]:
        try:
            array = np.asarray(vector, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"index['embed'] must return lists of numbers, got {inputs.show(vector)}") from exc
        if array.ndim != 1 or not np.isfinite(array).all():
            raise ConfigError(f"index['embed'] must return flat lists of finite numbers, got {inputs.show(vector)}")
        if self._dims is not None and array.shape[0] != self._dims:
            raise ConfigError(
                f"index['embed'] returned a {array.shape[0]}-dimensional vector; index['dims'] is {self._dims}"
            )
        return [float(x) for x in array]

    # ------------------------------------------------------------------ batch
    async def _batch(self, ops: list[Op], vectors: _Vectors) -> list[Result]:
        await self._engine.open()
        results: list[Result] = []
        puts: dict[ItemKey, PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(tuple(op.namespace), op.key))
            elif isinstance(op, SearchOp):
                results.append(await self._search(op, vectors.queries.get(op.query) if op.query else None))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(op))
            else:
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
        if puts:
            if self._write_lock is None:
                self._write_lock = asyncio.Lock()
            async with self._write_lock:  # a put reads then replaces: one at a time in this store
                for key, op in puts.items():
                    await self._put(op, vectors.items.get(key, {}))
        return results

    # ------------------------------------------------------------------ scopes
    def _scope(self, labels: tuple[str, ...], what: str) -> Scope:
        if len(labels) < self._depth:
            raise ScopeError(
                f"{what} {labels!r} does not name a memlane scope: give at least {self._depth} namespace label(s) "
                "(a store with a custom scope function has no directory of its users)"
            )
        user_id, agent_id = self._scope_fn(tuple(labels[: self._depth]))
        return Scope(user_id=user_id, agent_id=agent_id)

    async def _leads(self, pattern: tuple[str, ...], *, wildcards: bool, what: str) -> list[Lead]:
        """The leads (``namespace[:scope_depth]``) this store may read under ``pattern``: the
        pattern's own lead when it names one, else the directory's leads that fit it."""
        head = pattern[: self._depth]
        if len(head) == self._depth and not (wildcards and "*" in head):
            return [head]
        if self._directory is None:
            self._scope(head[: head.index("*")] if "*" in head else head, what)  # raises ScopeError
        leads = await self._directory_leads()
        return [
            lead for lead in leads if all((wildcards and p == "*") or p == x for p, x in zip(head, lead, strict=False))
        ]

    async def _directory_leads(self) -> list[Lead]:
        assert self._directory is not None
        leads: set[Lead] = set()
        cursor: str | None = None
        while True:
            page = await self._engine.list(
                agent_id=self._directory, limit=PAGE, cursor=cursor, filters={_LEAD_DEPTH: self._depth}
            )
            leads.update(tuple(f.metadata[_LEAD]) for f in page.items if isinstance(f.metadata.get(_LEAD), list))
            cursor = page.next_cursor
            if cursor is None:
                return sorted(leads)

    async def _register(self, lead: Lead, scope: Scope) -> None:
        """Record ``lead`` in the store's directory (once), linked to its user."""
        if self._directory is None:
            return
        joined = ".".join(lead)
        meta = {_LEAD: list(lead), _LEAD_DEPTH: self._depth, _prefix_key(self._depth): joined}
        found = await self._engine.list(
            agent_id=self._directory, limit=1, filters={_LEAD_DEPTH: self._depth, _prefix_key(self._depth): joined}
        )
        if found.items:
            return
        entry = {
            "role": "user",
            "name": AUTHOR,
            "content": f"LangGraph namespace {joined}",
            "timestamp": _DIRECTORY_TIME,
        }
        await self._engine.add([entry], user_id=scope.user_id, agent_id=self._directory, scope="agent", metadata=meta)

    # ------------------------------------------------------------------ reads
    def _filters(self, scope: Scope, prefix: tuple[str, ...]) -> dict[str, Any]:
        """The store's items under ``prefix`` in ``scope``: its author, its scope kind, its labels."""
        out: dict[str, Any] = {"author": AUTHOR, "scope": "user" if scope.user_id is not None else "agent"}
        if prefix:
            out[_prefix_key(len(prefix))] = ".".join(prefix)
        return out

    async def _facts(self, scope: Scope, metadata: Mapping[str, Any]) -> list[Fact]:
        """Every valid item memory under ``scope`` matching ``metadata`` (fragments left out: they
        carry their item's metadata, and a filter cannot exclude a kind), newest first."""
        out: list[Fact] = []
        cursor: str | None = None
        while True:
            page = await self._engine.list(
                user_id=scope.user_id, agent_id=scope.agent_id, limit=PAGE, cursor=cursor, filters=metadata
            )
            out += [f for f in page.items if f.kind != "fragment" and _KEY in f.metadata]
            cursor = page.next_cursor
            if cursor is None:
                return out

    async def _key_facts(self, namespace: tuple[str, ...], key: str) -> tuple[Scope, list[Fact]]:
        scope = self._scope(namespace, "namespace")
        n = len(namespace)
        facts = await self._facts(scope, self._filters(scope, namespace) | {_DEPTH: n, _KEY: key})
        return scope, facts

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        _, facts = await self._key_facts(namespace, key)
        return _item(facts[0]) if facts else None

    async def _entries(self, prefix: tuple[str, ...], leads: list[Lead]) -> list[tuple[Item, Fact]]:
        """The items under ``prefix`` in the leads' scopes, in InMemoryStore's order, each with its memory."""
        entries: list[tuple[Item, Fact]] = []
        for lead in leads:
            scope = self._scope(lead, "namespace")
            under = prefix if len(prefix) >= len(lead) else lead
            seen: set[ItemKey] = set()
            mine: list[tuple[Item, Fact]] = []
            for f in await self._facts(scope, self._filters(scope, under)):
                item = _item(f)  # newest first: a key left twice by an interrupted put shows its newest value
                if (item.namespace, item.key) not in seen:
                    seen.add((item.namespace, item.key))
                    mine.append((item, f))
            entries += reversed(mine)
        # InMemoryStore's order: namespaces by their oldest item, then items oldest first
        # (sorts are stable: same-instant items keep their write order)
        first: dict[tuple[str, ...], datetime] = {}
        for i, _ in entries:
            first[i.namespace] = min(first.get(i.namespace, i.created_at), i.created_at)
        entries.sort(key=lambda e: (first[e[0].namespace], e[0].namespace, e[0].created_at))
        return entries

    async def _search(self, op: SearchOp, query_vector: list[float] | None) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        limit = inputs.integer(op.limit, "limit", 0, inputs.MAX_INT)
        offset = inputs.integer(op.offset, "offset", 0, inputs.MAX_INT)
        flt = op.filter or {}
        if not isinstance(flt, Mapping):
            raise InvalidInputError(f"filter must be a dict, got {inputs.show(flt)}")
        leads = await self._leads(prefix, wildcards=False, what="namespace_prefix")

        def keep(item: Item) -> bool:
            return all(_compare_values(item.value.get(k), v) for k, v in flt.items())

        if not op.query:
            return [_search_item(i, None) for i, _ in await self._entries(prefix, leads) if keep(i)][
                offset : offset + limit
            ]
        if query_vector is not None:  # LangGraph's own scores: cosine with index["embed"]
            scored: list[tuple[float, Item]] = []
            scoreless: list[Item] = []
            for item, fact in await self._entries(prefix, leads):
                stored = fact.metadata.get(_VECTORS)
                if not keep(item):
                    continue
                if isinstance(stored, dict) and stored:
                    scored.append((_cosine(query_vector, stored.values()), item))
                else:
                    scoreless.append(item)
            scored.sort(key=lambda p: p[0], reverse=True)
            out = [_search_item(i, s) for s, i in scored] + [_search_item(i, None) for i in scoreless]
            return out[offset : offset + limit]
        ranked: list[tuple[float, Item]] = []
        seen: set[ItemKey] = set()
        for lead in leads:
            scope = self._scope(lead, "namespace_prefix")
            under = prefix if len(prefix) >= len(lead) else lead
            result = await self._engine.search(
                op.query,
                user_id=scope.user_id,
                agent_id=scope.agent_id,
                top_k=RANKED,
                filters=self._filters(scope, under) | {_INDEXED: True},
            )
            for hit in result.hits:
                if _KEY not in hit.fact.metadata:
                    continue
                item = _item(hit.fact)  # a fragment carries its item's metadata
                if (item.namespace, item.key) in seen or not keep(item):
                    continue
                seen.add((item.namespace, item.key))
                ranked.append((hit.score, item))
        if len(leads) > 1:  # each scope's hits are in memlane's order; across scopes, by score
            ranked.sort(key=lambda p: p[0], reverse=True)
        head = [_search_item(i, s) for s, i in ranked]
        if len(head) >= offset + limit:
            return head[offset : offset + limit]
        rest = [
            (i, f.metadata.get(_INDEXED) is True)
            for i, f in await self._entries(prefix, leads)
            if (i.namespace, i.key) not in seen and keep(i)
        ]
        tail = [_search_item(i, UNMATCHED) for i, indexed in rest if indexed]
        tail += [_search_item(i, None) for i, indexed in rest if not indexed]
        return (head + tail)[offset : offset + limit]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        prefixes = [tuple(c.path) for c in conditions if c.match_type == "prefix"]
        pattern = prefixes[0] if prefixes else ()
        literal = pattern[: pattern.index("*")] if "*" in pattern else pattern
        limit = inputs.integer(op.limit, "limit", 0, inputs.MAX_INT)
        offset = inputs.integer(op.offset, "offset", 0, inputs.MAX_INT)
        depth = inputs.optional_integer(op.max_depth, "max_depth", 1, inputs.MAX_INT)
        leads = await self._leads(pattern, wildcards=True, what="list_namespaces prefix")
        namespaces = {i.namespace for i, _ in await self._entries(literal, leads)}
        found = [ns for ns in namespaces if all(_does_match(c, ns) for c in conditions)]
        out = sorted({ns[:depth] for ns in found} if depth is not None else found)
        return out[offset : offset + limit]

    # ------------------------------------------------------------------ writes
    async def _put(self, op: PutOp, vectors: Mapping[str, list[float]]) -> None:
        namespace = tuple(op.namespace)
        scope, old = await self._key_facts(namespace, op.key)
        kept: Fact | None = None
        if op.value is not None:
            kept = await self._write(scope, namespace, op, old, vectors)
        if old:
            ids = [f.id for f in old if kept is None or f.id != kept.id]
            for fact_id in ids:
                await self._engine.delete(fact_id, user_id=scope.user_id, agent_id=scope.agent_id)
        if kept is not None:
            await self._register(namespace[: self._depth], scope)

    async def _write(
        self,
        scope: Scope,
        namespace: tuple[str, ...],
        op: PutOp,
        old: list[Fact],
        vectors: Mapping[str, list[float]],
    ) -> Fact:
        if not isinstance(op.value, Mapping):
            raise InvalidInputError(f"value must be a dict (or None to delete), got {inputs.show(op.value)}")
        value = inputs.metadata(op.value, "value")
        texts = self._texts(value, op.index)
        now = utcnow()
        created = _item(old[0]).created_at if old else now
        meta: dict[str, Any] = {
            _NS: list(namespace),
            _KEY: op.key,
            _VALUE: value,
            _CREATED: created.isoformat(),
            _INDEXED: bool(texts or vectors),
            _DEPTH: len(namespace),
        }
        if vectors:
            meta[_VECTORS] = {path: _pack(v) for path, v in vectors.items()}
        for n in range(1, len(namespace) + 1):
            meta[_prefix_key(n)] = ".".join(namespace[:n])
        meta = inputs.metadata(meta, "value")  # the limit applies to everything stored with it
        text = "\n".join(texts) if texts else f"{'.'.join(namespace)} {op.key}"
        write_scope: Literal["user", "agent"] = "user" if scope.user_id is not None else "agent"
        # A memory's identity is (author, time, text) within its scope: two keys holding the same
        # text stay two memories; on the rare same-instant clash, the next microsecond is used.
        for attempt in range(8):
            message = {
                "role": "user",
                "name": AUTHOR,
                "content": text,
                "timestamp": now + timedelta(microseconds=attempt),
            }
            (fact,) = await self._engine.add(
                [message], user_id=scope.user_id, agent_id=scope.agent_id, scope=write_scope, metadata=meta
            )
            if all(fact.metadata.get(k) == v for k, v in meta.items()):  # a long text's document row adds keys
                return fact
        raise StorageError(f"could not store item {op.key!r} in {namespace!r}: its memory clashed with another")

    def _paths(self, index: Literal[False] | list[str] | None) -> list[str]:
        paths = self._fields if index is None else index
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise InvalidInputError(f"index must be False, None or a list of JSON paths, got {inputs.show(paths)}")
        return paths

    def _field_texts(self, value: Mapping[str, Any], index: Literal[False] | list[str] | None) -> list[tuple[str, str]]:
        """``(path, text)`` per text an item's index paths select (``path.i`` for the i-th of
        several), as ``InMemoryStore`` embeds them."""
        if index is False:
            return []
        out: list[tuple[str, str]] = []
        for path in self._paths(index):
            found = get_text_at_path(value, path if path == "$" else tokenize_path(path))
            if len(found) == 1:
                out.append((path, found[0]))
            else:
                out += [(f"{path}.{i}", text) for i, text in enumerate(found)]
        return out

    def _texts(self, value: dict[str, Any], index: Literal[False] | list[str] | None) -> list[str]:
        """The distinct visible texts memlane indexes for an item."""
        texts: list[str] = []
        for _, text in self._field_texts(value, index):
            if inputs.has_visible(text) and text not in texts:
                texts.append(text)
        return texts


# ---------------------------------------------------------------------- helpers


def _index(index: IndexConfig | None) -> tuple[IndexConfig | None, Embeddings | None, list[str], int | None]:
    """LangGraph's ``IndexConfig`` checked: (config kept, embeddings, field paths, dims)."""
    if index is None:
        return None, None, ["$"], None
    if not isinstance(index, Mapping):
        raise ConfigError(f"index must be a dict (LangGraph's IndexConfig), got {inputs.show(index)}")
    unknown = set(index) - {"fields", "embed", "dims"}
    if unknown:
        raise ConfigError(f"index takes dims, embed and fields (LangGraph's IndexConfig), not {sorted(unknown)}")
    fields = index.get("fields") or ["$"]
    if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        raise ConfigError(f"index['fields'] must be a list of JSON paths, got {inputs.show(fields)}")
    dims = index.get("dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise ConfigError(f"index['dims'] must be a positive integer, got {inputs.show(dims)}")
    embed = index.get("embed")
    embeddings: Embeddings | None = None
    if embed is not None:
        try:
            embeddings = ensure_embeddings(embed)
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"index['embed'] cannot be used: {exc}") from exc
    elif dims is not None:
        raise ConfigError(
            "index['dims'] without index['embed']: give the embedding function, or leave both out to rank with "
            "memlane's hybrid search (the memory's own embedder)"
        )
    return cast(IndexConfig, dict(index)), embeddings, list(fields), dims


def _checked(ops: Iterable[Op]) -> list[Op]:
    """The ops as a list, each a known kind with valid namespace labels (before anything runs)."""
    checked = list(ops)
    for op in checked:
        if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
            raise InvalidInputError(f"unknown store operation {inputs.show(op)}")
        validate_op_namespace(op)
    return checked


def _pack(vector: list[float]) -> str:
    """A vector as base64 of little-endian float32 (6 KiB of metadata for 1536 dimensions)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _cosine(query: list[float], stored: Iterable[object]) -> float:
    """The best cosine similarity (-1..1) of ``query`` and an item's stored vectors (max pooling,
    as ``InMemoryStore``); 0.0 against a zero vector."""
    q = np.asarray(query, dtype=np.float64)
    qn = float(np.linalg.norm(q))
    best: float | None = None
    for packed in stored:
        v = np.frombuffer(base64.b64decode(str(packed)), dtype="<f4").astype(np.float64)
        vn = float(np.linalg.norm(v))
        sim = float(np.dot(q, v) / (qn * vn)) if qn > 0 and vn > 0 and v.shape == q.shape else 0.0
        best = sim if best is None else max(best, sim)
    return 0.0 if best is None else best


def _item(fact: Fact) -> Item:
    meta = fact.metadata
    updated = fact.occurred_at or fact.formed_at
    return Item(
        value=json.loads(json.dumps(meta[_VALUE])),  # a copy: callers may mutate what they get
        key=meta[_KEY],
        namespace=tuple(meta[_NS]),
        created_at=datetime.fromisoformat(meta[_CREATED]),
        updated_at=updated,
    )


def _search_item(item: Item, score: float | None) -> SearchItem:
    return SearchItem(
        namespace=item.namespace,
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
        score=score,
    )


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's namespace match (``InMemoryStore``): a prefix or suffix path, ``"*"`` any label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"match_type must be 'prefix' or 'suffix', got {inputs.show(condition.match_type)}")
    return all(p == "*" or k == p for k, p in pairs)


def _compare_values(item_value: Any, filter_value: Any) -> bool:
    """LangGraph's filter semantics (``InMemoryStore``, after PostgreSQL's JSONB)."""
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(_apply_operator(item_value, k, v) for k, v in filter_value.items())
        if not isinstance(item_value, dict):
            return False
        return all(_compare_values(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, list | tuple):
        return (
            isinstance(item_value, list | tuple)
            and len(item_value) == len(filter_value)
            and all(_compare_values(i, f) for i, f in zip(item_value, filter_value, strict=False))
        )
    return bool(item_value == filter_value)


def _apply_operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator not in ("$gt", "$gte", "$lt", "$lte"):
        raise InvalidInputError(f"unsupported filter operator {operator!r} (use $eq $ne $gt $gte $lt $lte)")
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    if operator == "$gt":
        return a > b
    if operator == "$gte":
        return a >= b
    if operator == "$lt":
        return a < b
    return a <= b
