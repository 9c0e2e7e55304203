"""memlane: memory for LLM agents.

Short-term sessions, long-term facts with hybrid (keyword + vector) search, and
always-in-context reflections, embedded on SQLite and offline by default.

    >>> from memlane import Memory
    >>> m = Memory()                                   # doctest: +SKIP
    >>> m.add("I'm vegetarian", user_id="alice")       # doctest: +SKIP
    >>> m.search("what does alice eat?", user_id="alice")  # doctest: +SKIP
"""

from memlane.agent.config import RecallConfig
from memlane.errors import (
    AuthenticationError,
    ConfigError,
    ConflictError,
    CorruptDatabaseError,
    DimensionMismatchError,
    EmbedderError,
    FormationError,
    FormationTimeoutError,
    InvalidInputError,
    LLMError,
    MemlaneError,
    MissingExtraError,
    NotFoundError,
    NotSupportedError,
    OutputParseError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ProviderError,
    RateLimitedError,
    ScopeError,
    StorageError,
    UnknownIdentityError,
    UsageError,
)
from memlane.formation.config import FormationConfig
from memlane.formation.runner import FormationResult
from memlane.formation.summaries import SessionSummary
from memlane.ingest.bulk import AddBatch
from memlane.memory import AsyncMemory
from memlane.models import (
    CheckReport,
    ConsolidatedMemory,
    ConsolidatedVersion,
    Event,
    EventType,
    Fact,
    Growth,
    HistoryEntry,
    Hit,
    Identity,
    Job,
    Page,
    Reflection,
    Scope,
    SearchResult,
    Session,
    Timeline,
    session_key,
)
from memlane.privacy.redaction import RedactionConfig
from memlane.retrieval.hybrid import RetrievalConfig
from memlane.sync import Memory

__version__ = "0.1.0"

__all__ = [
    "AddBatch",
    "AsyncMemory",
    "AuthenticationError",
    "CheckReport",
    "ConfigError",
    "ConflictError",
    "ConsolidatedMemory",
    "ConsolidatedVersion",
    "CorruptDatabaseError",
    "DimensionMismatchError",
    "EmbedderError",
    "Event",
    "EventType",
    "Fact",
    "FormationConfig",
    "FormationError",
    "FormationResult",
    "FormationTimeoutError",
    "Growth",
    "HistoryEntry",
    "Hit",
    "Identity",
    "InvalidInputError",
    "Job",
    "LLMError",
    "MemlaneError",
    "Memory",
    "MissingExtraError",
    "NotFoundError",
    "NotSupportedError",
    "OutputParseError",
    "Page",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "ProviderError",
    "RateLimitedError",
    "RecallConfig",
    "RedactionConfig",
    "Reflection",
    "RetrievalConfig",
    "Scope",
    "ScopeError",
    "SearchResult",
    "Session",
    "SessionSummary",
    "StorageError",
    "Timeline",
    "UnknownIdentityError",
    "UsageError",
    "__version__",
    "session_key",
]
