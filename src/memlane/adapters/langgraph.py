"""LangGraph long-term memory over memlane: :class:`MemlaneStore`, a ``langgraph`` ``BaseStore``.

Compile a graph with ``store=MemlaneStore(memory)`` and its nodes' ``store.put`` / ``store.search``
(and the async variants) read and write memlane memories, kept in memlane's SQLite file,
searched with memlane's hybrid search, and isolated per user like every memlane memory::

    from langgraph.graph import StateGraph
    from memlane import Memory
    from memlane.adapters.langgraph import MemlaneStore

    store = MemlaneStore(Memory("memory.db", embedder="hash"))
    graph = builder.compile(store=store, checkpointer=...)

How items map onto memlane (see docs/adapters.md):

* **Scope.** A namespace's first ``scope_depth`` labels pick the memlane scope through the
  ``scope`` function: by default ``namespace[0]`` is the ``user_id`` (``("alice", "memories")``
  belongs to user ``alice``) and the optional ``agent_id`` is the agent namespace. A search or
  a namespace listing must name at least those labels: memlane has no query across users, so
  ``search(())`` raises :class:`~memlane.errors.ScopeError` instead of reading everyone's items.
* **Item = one memlane memory** (a verbatim memory, author ``"langgraph"``). Its metadata
  keeps the namespace, key, value (a JSON object, at most 64 KiB as JSON) and creation time;
  its text, the one memlane indexes for keyword and vector search, is taken from the value by
  LangGraph's index field paths (``index={"fields": [...]}`` on the store or ``index=`` on
  ``put``; default ``"$"``, the whole value as JSON). ``index=False`` stores an item that
  ``get`` and filter-only searches find but a ``query`` never ranks.
* **put** on an existing key replaces the item (its memory is deleted, a new one written):
  one item per key, ``created_at`` kept, ``updated_at`` new. **delete** (``value=None``) is
  memlane's soft delete: the item is gone for LangGraph, the old memory stays in memlane's
  history until the user is forgotten (:meth:`~memlane.AsyncMemory.forget`).
* **search** without ``query`` returns the items under the prefix in ``InMemoryStore``'s order:
  grouped by namespace (namespaces by their oldest item), oldest item first. With ``query``,
  memlane's hybrid search ranks the best 100 matches first (``score`` = memlane's fused score),
  and the other items follow unranked (``score=None``), as ``InMemoryStore`` does for items it
  has no vector of.
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
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from memlane import inputs
from memlane._binding import Binding
from memlane.adapters import missing_extra
from memlane.errors import ConfigError, InvalidInputError, ScopeError, StorageError
from memlane.memory import AsyncMemory
from memlane.models import Fact, Scope, utcnow
from memlane.sync import Memory

try:
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
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:
    raise missing_extra("langgraph", "LangGraph (langgraph >= 1.0)", "langgraph", exc) from exc

__all__ = ["AUTHOR", "MemlaneStore", "ScopeFn", "user_scope"]

T = TypeVar("T")

ScopeFn = Callable[[tuple[str, ...]], tuple[str | None, str | None]]
"""Maps a namespace's leading labels (``namespace[:scope_depth]``) to ``(user_id, agent_id)``.
``(user, None)``: the user's own memory; ``(user, agent)``: the user's memory under that agent;
``(None, agent)``: the agent's memory shared by all its users."""

#: The author of every memory MemlaneStore writes.
AUTHOR = "langgraph"
#: Search hits ranked by memlane per query (memlane's top_k limit); other items follow unranked.
RANKED = 100
#: Facts read per page when scanning a prefix.
PAGE = 1000

_SYNC_HINT = (
    "MemlaneStore over an AsyncMemory: use the async methods (aput, aget, asearch, ...) in async code, "
    "or give MemlaneStore a sync memlane.Memory for sync code"
)

_NS, _KEY, _VALUE, _CREATED, _INDEXED, _DEPTH = (
    "lg_namespace", "lg_key", "lg_value", "lg_created_at", "lg_indexed", "lg_depth",
)  # fmt: skip


def _prefix_key(n: int) -> str:
    """Metadata key holding a namespace's first ``n`` labels joined by ``.`` (LangGraph labels
    never contain a period), so a prefix search is an exact metadata match in the store."""
    return f"lg_ns{n}"


def user_scope(namespace: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The default mapping: ``namespace[0]`` is the user id, no agent."""
    return namespace[0], None


class MemlaneStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are memlane memories (see the module docstring).

    Args:
        memory: a sync :class:`memlane.Memory` or an :class:`memlane.AsyncMemory`.
        scope: maps ``namespace[:scope_depth]`` to ``(user_id, agent_id)``; default
            :func:`user_scope` (``namespace[0]`` is the user) with ``agent_id``.
        scope_depth: how many leading namespace labels ``scope`` reads (>= 1); searches and
            namespace listings must give at least that many.
        agent_id: the agent namespace for the default ``scope`` (not with a custom ``scope``).
        index: LangGraph's index config; only ``fields`` applies (the text paths memlane
            indexes, default ``["$"]``): memlane embeds with its own embedder, so ``embed``
            and ``dims`` are refused (configure ``AsyncMemory(embedder=...)`` instead).
    """

    supports_ttl = False

    def __init__(
        self,
        memory: AsyncMemory | Memory,
        *,
        scope: ScopeFn | None = None,
        scope_depth: int = 1,
        agent_id: str | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        # Made in async code over an AsyncMemory, the binding remembers that loop for sync calls.
        self._binding = Binding(memory, sync_hint=_SYNC_HINT)
        self._engine: AsyncMemory = self._binding.require("MemlaneStore")
        self._depth = inputs.integer(scope_depth, "scope_depth", 1, 1000)
        agent = inputs.optional_id(agent_id, "agent_id")
        if scope is not None and agent is not None:
            raise ConfigError("agent_id applies to the default scope; with a custom scope, return it from the function")
        if scope is not None and not callable(scope):
            raise ConfigError(f"scope must be a function of the namespace, got {inputs.show(scope)}")
        self._scope_fn: ScopeFn = scope if scope is not None else (lambda ns: (ns[0], agent))
        unknown = set(index or {}) - {"fields"}
        if unknown:
            raise ConfigError(
                f"MemlaneStore takes only index={{'fields': [...]}}; {sorted(unknown)} do not apply: memlane embeds "
                "with its own embedder (AsyncMemory(embedder=...))"
            )
        fields = (index or {}).get("fields") or ["$"]
        if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"index['fields'] must be a list of JSON paths, got {inputs.show(fields)}")
        self._fields = list(fields)
        self._write_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------------ BaseStore
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (reads see the state before the batch; writes follow, last one per key wins)."""
        return self._binding.run_sync(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch`."""
        return await self._binding.run(self._batch(list(ops)))

    # ------------------------------------------------------------------ batch
    async def _batch(self, ops: list[Op]) -> list[Result]:
        await self._engine.open()
        for op in ops:
            if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
                raise InvalidInputError(f"unknown store operation {inputs.show(op)}")
            validate_op_namespace(op)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op.namespace, op.key))
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(op))
            else:
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
        if puts:
            if self._write_lock is None:
                self._write_lock = asyncio.Lock()
            async with self._write_lock:  # a put reads then replaces: one at a time in this store
                for op in puts.values():
                    await self._put(op)
        return results

    # ------------------------------------------------------------------ scopes
    def _scope(self, labels: tuple[str, ...], what: str) -> Scope:
        if len(labels) < self._depth:
            raise ScopeError(
                f"{what} {labels!r} does not name a memlane scope: give at least {self._depth} namespace label(s) "
                "(memlane has no query across users)"
            )
        user_id, agent_id = self._scope_fn(tuple(labels[: self._depth]))
        return Scope(user_id=user_id, agent_id=agent_id)

    # ------------------------------------------------------------------ reads
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
        facts = await self._facts(scope, {_prefix_key(n): ".".join(namespace), _DEPTH: n, _KEY: key})
        return scope, facts

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        _, facts = await self._key_facts(tuple(namespace), key)
        return _item(facts[0]) if facts else None

    async def _items(self, scope: Scope, prefix: tuple[str, ...]) -> list[Item]:
        """The items under ``prefix`` in InMemoryStore's order."""
        facts = await self._facts(scope, {_prefix_key(len(prefix)): ".".join(prefix)})
        seen: set[tuple[tuple[str, ...], str]] = set()
        items: list[Item] = []
        for f in facts:  # newest first: a key left twice by an interrupted put shows its newest value
            item = _item(f)
            if (item.namespace, item.key) not in seen:
                seen.add((item.namespace, item.key))
                items.append(item)
        items.reverse()
        # InMemoryStore's order: namespaces by their oldest item, then items oldest first
        # (sorts are stable: same-instant items keep their write order)
        first: dict[tuple[str, ...], datetime] = {}
        for i in items:
            first[i.namespace] = min(first.get(i.namespace, i.created_at), i.created_at)
        items.sort(key=lambda i: (first[i.namespace], i.namespace, i.created_at))
        return items

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        scope = self._scope(prefix, "namespace_prefix")
        limit = inputs.integer(op.limit, "limit", 0, inputs.MAX_INT)
        offset = inputs.integer(op.offset, "offset", 0, inputs.MAX_INT)
        flt = op.filter or {}
        if not isinstance(flt, Mapping):
            raise InvalidInputError(f"filter must be a dict, got {inputs.show(flt)}")

        def keep(item: Item) -> bool:
            return all(_compare_values(item.value.get(k), v) for k, v in flt.items())

        ranked: list[SearchItem] = []
        seen: set[tuple[tuple[str, ...], str]] = set()
        if op.query:
            result = await self._engine.search(
                op.query, user_id=scope.user_id, agent_id=scope.agent_id, top_k=RANKED,
                filters={_prefix_key(len(prefix)): ".".join(prefix), _INDEXED: True},
            )  # fmt: skip
            for hit in result.hits:
                if _KEY not in hit.fact.metadata:
                    continue
                item = _item(hit.fact)  # a fragment carries its item's metadata
                if (item.namespace, item.key) in seen or not keep(item):
                    continue
                seen.add((item.namespace, item.key))
                ranked.append(_search_item(item, hit.score))
        if len(ranked) >= offset + limit:
            return ranked[offset : offset + limit]
        rest = [
            _search_item(i, None)
            for i in await self._items(scope, prefix)
            if (i.namespace, i.key) not in seen and keep(i)
        ]
        return (ranked + rest)[offset : offset + limit]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        prefixes = [c.path for c in conditions if c.match_type == "prefix"]
        lead: tuple[str, ...] = ()
        if prefixes:
            path = tuple(prefixes[0])
            lead = path[: path.index("*")] if "*" in path else path
        scope = self._scope(lead, "list_namespaces prefix")
        limit = inputs.integer(op.limit, "limit", 0, inputs.MAX_INT)
        offset = inputs.integer(op.offset, "offset", 0, inputs.MAX_INT)
        depth = inputs.optional_integer(op.max_depth, "max_depth", 1, inputs.MAX_INT)
        namespaces = {i.namespace for i in await self._items(scope, lead)}
        found = [ns for ns in namespaces if all(_does_match(c, ns) for c in conditions)]
        out = sorted({ns[:depth] for ns in found} if depth is not None else found)
        return out[offset : offset + limit]

    # ------------------------------------------------------------------ writes
    async def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        scope, old = await self._key_facts(namespace, op.key)
        kept: Fact | None = None
        if op.value is not None:
            kept = await self._write(scope, namespace, op, old)
        if old:
            ids = [f.id for f in old if kept is None or f.id != kept.id]
            for fact_id in ids:
                await self._engine.delete(fact_id, user_id=scope.user_id, agent_id=scope.agent_id)

    async def _write(self, scope: Scope, namespace: tuple[str, ...], op: PutOp, old: list[Fact]) -> Fact:
        if not isinstance(op.value, Mapping):
            raise InvalidInputError(f"value must be a dict (or None to delete), got {inputs.show(op.value)}")
        value = inputs.metadata(op.value, "value")
        texts = self._texts(value, op.index)
        now = utcnow()
        created = _item(old[0]).created_at if old else now
        meta: dict[str, Any] = {
            _NS: list(namespace), _KEY: op.key, _VALUE: value, _CREATED: created.isoformat(),
            _INDEXED: bool(texts), _DEPTH: len(namespace),
        }  # fmt: skip
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

    def _texts(self, value: dict[str, Any], index: Literal[False] | list[str] | None) -> list[str]:
        if index is False:
            return []
        paths = self._fields if index is None else index
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise InvalidInputError(f"index must be False, None or a list of JSON paths, got {inputs.show(paths)}")
        texts: list[str] = []
        for path in paths:
            found = get_text_at_path(value, path if path == "$" else tokenize_path(path))
            texts += [t for t in found if inputs.has_visible(t) and t not in texts]
        return texts


# ---------------------------------------------------------------------- helpers


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
        namespace=item.namespace, key=item.key, value=item.value, created_at=item.created_at,
        updated_at=item.updated_at, score=score,
    )  # fmt: skip


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
