"""memlane: memory for LLM agents.

Short-term sessions, long-term facts with hybrid (keyword + vector) search, and
always-in-context reflections, embedded on SQLite and offline by default.

    >>> from memlane import Memory
    >>> m = Memory()                                   # doctest: +SKIP
    >>> m.add("I'm vegetarian", user_id="alice")       # doctest: +SKIP
    >>> m.search("what does alice eat?", user_id="alice")  # doctest: +SKIP
"""

from memlane.errors import (
    ConfigError,
    CorruptDatabaseError,
    DimensionMismatchError,
    EmbedderError,
    InvalidInputError,
    MemlaneError,
    NotFoundError,
    NotSupportedError,
    ProviderError,
    ScopeError,
    StorageError,
    UsageError,
)
from memlane.memory import AsyncMemory
from memlane.models import (
    ConsolidatedMemory,
    Event,
    EventType,
    Fact,
    HistoryEntry,
    Hit,
    MemoryEntry,
    Page,
    Reflection,
    Scope,
    SearchMemoryResponse,
    SearchResult,
    Session,
    session_key,
)
from memlane.retrieval.hybrid import RetrievalConfig
from memlane.sync import Memory

__version__ = "0.1.0"

__all__ = [
    "AsyncMemory",
    "ConfigError",
    "ConsolidatedMemory",
    "CorruptDatabaseError",
    "DimensionMismatchError",
    "EmbedderError",
    "Event",
    "EventType",
    "Fact",
    "HistoryEntry",
    "Hit",
    "InvalidInputError",
    "MemlaneError",
    "Memory",
    "MemoryEntry",
    "NotFoundError",
    "NotSupportedError",
    "Page",
    "ProviderError",
    "Reflection",
    "RetrievalConfig",
    "Scope",
    "ScopeError",
    "SearchMemoryResponse",
    "SearchResult",
    "Session",
    "StorageError",
    "UsageError",
    "__version__",
    "session_key",
]
