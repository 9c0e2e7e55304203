"""The seeds' names in memlane: one table, and the aliases that keep code written against them running.

memlane unifies five memory designs (Gaia on mem0, Eden memory v2, KAOS, elizaOS, adk-rs).
Its public names say what a thing is (``LocalSessionStore``, ``RetrievalConfig.strict()``,
``routes/session_log.py``); where a seed, or an earlier memlane, spelled it after the design it
came from, that spelling still works and is listed here:

* :data:`NAMES`: every seed name memlane answers to, with memlane's own name and, for a Python
  name, where the seed-compatible alias is importable. docs/compat.md is
  :func:`markdown_table` (a test keeps them equal), and a test checks every alias is the object
  (or, for KAOS's session stores, the subclass adding KAOS's method names) that the table says.
* the KAOS session stores by KAOS's names: ``from memlane.compat import LocalMemory, NullMemory,
  RedisMemory`` (``RedisMemory`` comes from the Redis backend's registry row on first use, so
  importing this module loads no Redis driver). They are also importable where they always
  were (``memlane.stores.local.LocalMemory``, ...).

Aliases of methods live on their class (``RetrievalConfig.eden`` *is* ``RetrievalConfig.strict``),
of modules in their old module (``memlane.service.routes.kaos``); this module only lists them.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Literal

from memlane.registry import BACKENDS
from memlane.stores.kaos import KaosNames
from memlane.stores.local import LocalMemory
from memlane.stores.null import NullMemory

__all__ = [
    "NAMES",
    "KaosNames",
    "LocalMemory",
    "NullMemory",
    "RedisMemory",  # noqa: F822  # module __getattr__ (below)
    "SeedName",
    "markdown_table",
    "resolve",
]

Seed = Literal["Gaia", "Eden", "KAOS", "elizaOS", "adk-rs"]
#: How an alias relates to memlane's name: ``same`` (the very same object), ``subclass`` (a
#: subclass adding KAOS's method names and constructor), ``method`` (a method the KAOS-named
#: stores add, from :class:`~memlane.stores.kaos.KaosNames`), ``module`` (an old module
#: re-exporting the new one's names), ``kept`` (memlane uses the seed's name itself: no alias).
Relation = Literal["same", "subclass", "method", "module", "kept"]


@dataclass(frozen=True)
class SeedName:
    """One name of a seed and memlane's name for it."""

    seed: Seed
    """The design the name comes from."""
    name: str
    """The name as the seed spells it (a class, method, setting, URL or value)."""
    memlane: str
    """memlane's name: a dotted Python path (``memlane.`` first: a test imports it), or a
    setting, URL or value."""
    relation: Relation = "kept"
    """How :attr:`aliases` relate to :attr:`memlane`."""
    aliases: tuple[str, ...] = ()
    """Dotted paths where the seed-compatible name is importable (empty: memlane's name is the one)."""
    note: str = ""
    """What differs, in a few words."""


_MEM = "memlane.AsyncMemory"

#: Every seed name memlane answers to (docs/compat.md shows this table).
NAMES: tuple[SeedName, ...] = (
    # KAOS: the runtime's session memory
    SeedName(
        "KAOS",
        "LocalMemory",
        "memlane.stores.local.LocalSessionStore",
        "subclass",
        ("memlane.compat.LocalMemory", "memlane.stores.local.LocalMemory"),
        'the in-process store (`sessions="local"`) with KAOS\'s method names too',
    ),
    SeedName(
        "KAOS",
        "RedisMemory",
        "memlane.stores.redis.sessions.RedisSessionStore",
        "subclass",
        ("memlane.compat.RedisMemory", "memlane.stores.redis.sessions.RedisMemory"),
        "KAOS's `RedisMemory(redis_url=...)` constructor and method names",
    ),
    SeedName(
        "KAOS",
        "NullMemory",
        "memlane.stores.null.NullSessionStore",
        "subclass",
        ("memlane.compat.NullMemory", "memlane.stores.null.NullMemory"),
        'memory off (`sessions="null"`, `MEMORY_ENABLED=false`)',
    ),
    SeedName(
        "KAOS",
        "create_session(app_name=, user_id=)",
        "memlane.stores.base.SessionStore.create_session",
        "method",
        ("memlane.compat.KaosNames.create_session",),
        "memlane's form is `create_session(app=, user_ids=[...])` and returns the `Session`; KAOS's returns its id",
    ),
    SeedName(
        "KAOS",
        "get_or_create_session(session_id, app_name)",
        "memlane.stores.base.SessionStore.get_or_create_session",
        "method",
        ("memlane.compat.KaosNames.get_or_create_session",),
        "as `create_session`",
    ),
    SeedName(
        "KAOS",
        "create_event(event_type, content, metadata)",
        "memlane.Event",
        "method",
        ("memlane.compat.KaosNames.create_event",),
        "an `Event(type=..., content=..., metadata=...)`",
    ),
    SeedName(
        "KAOS",
        "get_session_events(session_id, event_types)",
        "memlane.stores.base.SessionStore.get_events",
        "method",
        ("memlane.compat.KaosNames.get_session_events",),
    ),
    SeedName(
        "KAOS", "MemoryEvent", "memlane.Event", note="`event_id`, `event_type` are `id`, `type`; same event types"
    ),
    SeedName(
        "KAOS",
        "GET /memory/events, GET /memory/sessions",
        "memlane.service.routes.session_log",
        "module",
        ("memlane.service.routes.kaos",),
        "the same URLs and JSON; the module was `routes/kaos.py`",
    ),
    SeedName("KAOS", "MEMORY_ENABLED", "memory.enabled", note="false also sets `sessions.backend: null`"),
    SeedName("KAOS", "MEMORY_TYPE", "sessions.backend"),
    SeedName("KAOS", "MEMORY_CONTEXT_LIMIT", "memlane.agent.config.RecallConfig.context_limit"),
    SeedName(
        "KAOS", "MEMORY_MAX_SESSIONS, MEMORY_MAX_SESSION_EVENTS", "sessions.max_sessions, sessions.max_session_events"
    ),
    SeedName("KAOS", "MEMORY_REDIS_URL", "sessions.redis_url"),
    # Eden memory v2: reflections in context, facts by search
    SeedName(
        "Eden",
        "RAG_SEMANTIC/TEXT/RRF_SCORE_THRESHOLD (0.65, 1.5, 0.015)",
        "memlane.RetrievalConfig.strict",
        "same",
        ("memlane.RetrievalConfig.eden",),
        "hard cut-offs with RRF; memlane's default is `RetrievalConfig()`",
    ),
    SeedName("Eden", "search_facts", "memlane.agent.tools.MemoryTools.search_facts", note="up to 3 queries"),
    SeedName("Eden", "<MemoryContext>", f"{_MEM}.context"),
    SeedName("Eden", "FACTS_FIFO_LIMIT", "memlane.engine.context.FACTS_FIFO_LIMIT"),
    SeedName("Eden", "FACTS_FIFO_MAX_AGE_HOURS", "memlane.engine.context.FACTS_FIFO_MAX_AGE", note="a `timedelta`"),
    SeedName("Eden", "on_session_end", f"{_MEM}.end_session"),
    SeedName(
        "Eden",
        "get_consolidation_status",
        f"{_MEM}.get_consolidation_status",
        note="per scope, a `ConsolidationStatus` (typed; reads as the dict with Eden's keys)",
    ),
    SeedName(
        "Eden",
        "get_memory_stats",
        f"{_MEM}.get_memory_stats",
        note="a `MemoryStats` (typed; reads as the dict with Eden's keys)",
    ),
    SeedName(
        "Eden", "Fact, Reflection, ConsolidatedMemory", "memlane.Fact, memlane.Reflection, memlane.ConsolidatedMemory"
    ),
    # Gaia: ADK sessions + mem0 facts + a session-start profile
    SeedName("Gaia", "mem0 add / search", f"{_MEM}.add, {_MEM}.search"),
    SeedName("Gaia", "<USER_PROFILE>", f"{_MEM}.profile"),
    SeedName("Gaia", "/reset", f"{_MEM}.reset_session", note="form the conversation, then delete the session"),
    SeedName("Gaia", "/forget", f"{_MEM}.forget", note="`forget(user, sessions=False)`: long-term memory only"),
    SeedName("Gaia", "{user}:{channel} session key", "memlane.session_key"),
    SeedName("Gaia", "memory.recall_limit", "memlane.agent.config.RecallConfig.recall_limit"),
    SeedName("Gaia", "sessions.window_turns", "memlane.agent.config.RecallConfig.window_turns"),
    SeedName("Gaia", "memory:, sessions: config blocks", "memlane.settings.MemlaneSettings"),
    # elizaOS: memories, documents and state providers
    SeedName(
        "elizaOS", "scope: private / shared / room", 'scope="user" / "agent" / "room"', note="both spellings accepted"
    ),
    SeedName("elizaOS", "MemoryType.DOCUMENT / FRAGMENT / MESSAGE", 'kind="document" / "fragment" / "message"'),
    SeedName("elizaOS", "composeState", "memlane.agent.state.StateComposer.compose_state"),
    SeedName("elizaOS", "State", "memlane.agent.state.State"),
    # adk-rs: the Rust ADK's memory service
    SeedName(
        "adk-rs",
        "InMemoryMemoryService",
        "memlane.adapters.adk_rs.InMemoryMemoryService",
        note="memlane's substring search",
    ),
    SeedName(
        "adk-rs", "VectorMemoryService", "memlane.adapters.adk_rs.VectorMemoryService", note="memlane's vector search"
    ),
    SeedName(
        "adk-rs",
        "MemoryEntry, SearchMemoryResponse",
        "memlane.adapters.adk_rs.MemoryEntry, memlane.adapters.adk_rs.SearchMemoryResponse",
    ),
    SeedName("adk-rs", "load_memory_tool()", "memlane.agent.tools.MemoryTools.load_memory"),
    SeedName("adk-rs", "preload_memory_tool(max_entries)", "memlane.agent.tools.MemoryTools.preload_memory"),
)


def resolve(path: str) -> Any:
    """The object a dotted path names: the longest importable module, then attributes, the
    last one of a class read statically (a classmethod is the method itself, not a bound copy;
    a pydantic model's field is its ``FieldInfo``).

    Raises:
        ImportError: no prefix of the path is a module.
        AttributeError: an attribute is missing.
    """
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            obj: Any = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module.startswith(exc.name):
                raise  # a module that exists but lacks a dependency (an extra not installed)
            continue
        break
    else:
        raise ImportError(f"no module in {path!r}")
    for i, attr in enumerate(parts[end:], start=end):
        if i == len(parts) - 1 and inspect.isclass(obj):
            fields = getattr(obj, "model_fields", {})  # a pydantic model's field is no class attribute
            obj = fields[attr] if attr in fields else inspect.getattr_static(obj, attr)
        else:
            obj = getattr(obj, attr)
    return obj


def markdown_table() -> str:
    """:data:`NAMES` as docs/compat.md shows it: seed, the seed's name, memlane's, the aliases."""

    def code(text: str) -> str:
        return ", ".join(f"`{part.strip()}`" for part in text.split(", ")) if text else ""

    lines = ["| seed | the seed's name | memlane's name | also importable as | note |", "|---|---|---|---|---|"]
    for n in NAMES:
        aliases = ", ".join(f"`{a}`" for a in n.aliases)
        lines.append(f"| {n.seed} | `{n.name}` | {code(n.memlane)} | {aliases} | {n.note} |")
    return "\n".join(lines) + "\n"


def __getattr__(name: str) -> Any:
    # RedisMemory on first use, through the Redis backend's registry row: importing memlane.compat
    # loads no Redis module nor driver (tests/architecture/test_backend_boundaries.py).
    if name == "RedisMemory":
        redis = next(b for b in BACKENDS if b.name == "redis")
        return redis.load("sessions:RedisMemory")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
