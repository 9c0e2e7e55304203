"""The whole memlane error tree.

::

    MemlaneError
    ├── UsageError                 bad configuration or an API used the wrong way
    │   ├── ConfigError            unknown backend/provider, missing optional extra
    │   │   └── MissingExtraError  an optional extra is not installed (also an ImportError)
    │   └── NotSupportedError      a feature this backend or build does not offer (yet)
    ├── InvalidInputError          bad input (also a ValueError); nothing was changed
    │   ├── ScopeError             missing/unknown user_id, agent_id or app
    │   └── DimensionMismatchError a vector of the wrong size
    ├── NotFoundError              (also a KeyError) no such fact / session
    │   └── UnknownIdentityError   no user is linked to this (channel, sender)
    ├── StorageError               the database failed; original error chained
    │   ├── CorruptDatabaseError   not a memlane database, or damaged
    │   ├── ConflictError          a concurrent writer changed the row first (retry)
    │   └── StoreFullError         (HTTP 507) a bounded session store is full of others' sessions
    ├── ProviderError              an embedder or LLM call failed (status_code, retryable)
    │   ├── EmbedderError          an embedding call failed
    │   └── LLMError               a chat-completion call failed
    │       └── OutputParseError   the model's output was not the JSON asked for (after one retry)
    ├── FormationError             a memory-formation job failed; it stays queued for retry
    │   └── FormationTimeoutError  waited too long for a formation job (it is kept)
    ├── AuthenticationError        (service, HTTP 401) no API key, or an unknown/revoked one
    ├── PermissionDeniedError      (service, HTTP 403) the key may not do this (tenant, user, read-only)
    ├── RateLimitedError           (service, HTTP 429) too many requests for this key (retry_after)
    └── PayloadTooLargeError       (service, HTTP 413) the request body is over the size limit

Every message says how to fix the problem.
"""

from __future__ import annotations


class MemlaneError(Exception):
    """Root of every error memlane raises on purpose."""


class UsageError(MemlaneError):
    """The API or configuration was used the wrong way."""


class ConfigError(UsageError):
    """Unknown backend or provider name, bad setting, or a missing optional extra."""


class MissingExtraError(ConfigError, ImportError):
    """An optional extra (a framework adapter's package, ...) is not installed, or too old.
    Also an ``ImportError``, so ``except ImportError`` around an optional import catches it;
    the message names the ``pip install 'memlane[EXTRA]'`` to run."""


class NotSupportedError(UsageError):
    """The feature is not available with this backend or in this version."""


class InvalidInputError(MemlaneError, ValueError):
    """Input was rejected; nothing was written."""


class ScopeError(InvalidInputError):
    """A scope (user_id / agent_id) is missing or invalid."""


class DimensionMismatchError(InvalidInputError):
    """A vector's dimension does not match the embedder or the store."""

    def __init__(self, message: str, *, expected: int | None = None, got: int | None = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


class NotFoundError(MemlaneError, KeyError):
    """The fact, session or other object does not exist (in this scope)."""

    def __str__(self) -> str:  # KeyError quotes its message; we don't want that
        return str(self.args[0]) if self.args else ""


class UnknownIdentityError(NotFoundError):
    """No user is linked to this ``(channel, sender)``: link it first with
    ``link_identity(channel, sender, user_id)`` (``memlane identity link``). memlane never
    creates a user for an unknown sender, as Gaia's dispatcher resolves only senders it knows."""


class StorageError(MemlaneError):
    """The storage backend failed."""


class CorruptDatabaseError(StorageError):
    """The file is not a memlane database, or it is damaged."""


class ConflictError(StorageError):
    """Another writer changed the row first (optimistic concurrency); retrying is safe."""


class StoreFullError(StorageError):
    """HTTP 507: a bounded session store (in-process or Redis, ``max_sessions``) is full and
    none of the full store's sessions belong only to the new session's users, so making room
    would evict another user's sessions; nothing was changed. Delete or end sessions, or raise
    ``max_sessions`` (or set a ``ttl`` on Redis)."""


class ProviderError(MemlaneError):
    """A call to a model provider failed.

    Attributes:
        status_code: HTTP status when there was one.
        retryable: True when trying again later may succeed (timeouts, 429, 5xx).
    """

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


class EmbedderError(ProviderError):
    """An embedding call failed."""


class LLMError(ProviderError):
    """A chat-completion call failed."""


class OutputParseError(LLMError):
    """The model did not return valid structured output, even after one corrective retry.

    Attributes:
        raw: the last text the model returned (for debugging; may be long).
    """

    def __init__(self, message: str, *, raw: str = "") -> None:
        super().__init__(message, retryable=True)
        self.raw = raw


class FormationError(MemlaneError):
    """A memory-formation job failed. The conversation is kept and the job is retried later."""


class FormationTimeoutError(FormationError):
    """A wait for a formation job (``form``, ``end_session``, ``add(infer=True)``) ran out of
    time. The job is kept and finishes later.

    Attributes:
        job_id: the job waited for.
        status: its status when the wait gave up (``queued``, ``running``, ...).
    """

    def __init__(self, message: str, *, job_id: str, status: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.status = status


class AuthenticationError(MemlaneError):
    """HTTP 401: the request carries no API key, or an unknown or revoked one.

    Send ``Authorization: Bearer <key>`` (or ``X-API-Key: <key>``) with a key from
    ``memlane keys create``.
    """


class PermissionDeniedError(MemlaneError):
    """HTTP 403: the key is valid but may not do this: a read-only key writing, a user-bound key
    naming another user or writing agent-shared memory."""


class RateLimitedError(MemlaneError):
    """HTTP 429: this key sent more requests than its per-minute limit allows.

    Attributes:
        retry_after: seconds to wait before the next request may succeed (the ``Retry-After``
            header's value, a whole number >= 1).
    """

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PayloadTooLargeError(MemlaneError):
    """HTTP 413: the request body is larger than the server's limit; nothing was read or changed.

    Attributes:
        limit: the largest body the server accepts, in bytes.
    """

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit
