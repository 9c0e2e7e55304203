"""Memory tools for a function-calling agent: ``search_facts``, ``load_memory``, ``remember``
(advertised to the model) and ``preload_memory`` (passive, called by the app at turn start);
``review_memory`` (opt-in, for an admin agent: the bound user's review queue, docs/review.md).

A :class:`MemoryTools` is bound to one memlane engine and to the caller's identity
(``user_id``, ``agent_id``, ``session_id``, ``app``), both fixed by the app when it builds the
tools for a turn or a conversation. No schema has a ``user_id`` (or any scope) parameter, and
the dispatcher refuses arguments the schema does not list: the model can never choose whose
memory it reads or writes.

Sync and async: every tool is an ``async`` method. Built from the sync :class:`memlane.Memory`,
the async methods run on the facade's loop thread (awaiting them does not block the caller's
loop), and each has a blocking ``*_sync`` counterpart (``search_facts_sync``, ``call_sync``,
...). Built from an :class:`~memlane.AsyncMemory`, use the async methods (the ``*_sync`` ones
work only from another thread while that memory's loop runs; see :mod:`memlane._binding`).

Scope: searches and writes use the user's partition under the agent namespace
(``agent_id``, else ``app`` unless it is ``"default"``), plus the agent's shared memories for
reads: the same memories formation writes for that app (see :class:`memlane.models.Scope`).

Schemas: :meth:`MemoryTools.schemas` renders the advertised tools for OpenAI chat completions,
the OpenAI Responses API, Anthropic and Gemini; :func:`provision` adds them to an agent's
tool list (Eden's automatic provisioning: memory on means ``search_facts`` is there).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Literal, get_args

from memlane import inputs
from memlane.agent._binding import Binding, Identity, MemoryLike
from memlane.agent.config import RECALL_LIMIT
from memlane.agent.context import escape_memory_text
from memlane.errors import ConfigError, ConflictError, InvalidInputError, NotFoundError, UsageError
from memlane.models import Fact, Hit, utcnow
from memlane.retrieval.hybrid import MAX_QUERIES

__all__ = [
    "DEFAULT_TOOLS",
    "MAX_FACT_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_TOOL_TOP_K",
    "PRELOAD_HEADER",
    "PRELOAD_MAX_ENTRIES",
    "RECALL_LIMIT",
    "REVIEW_LIST_LIMIT",
    "MemoryTools",
    "SchemaFormat",
    "ToolName",
    "age",
    "memory_tools",
    "provision",
    "tool_result_json",
]

ToolName = Literal["search_facts", "load_memory", "remember", "review_memory"]
SchemaFormat = Literal["openai", "openai_responses", "anthropic", "gemini"]

#: The tools advertised by default, in this order.
DEFAULT_TOOLS: Final[tuple[ToolName, ...]] = ("search_facts", "load_memory", "remember")
#: Bullets ``preload_memory`` adds at most (adk-rs ``preload_memory_tool(5)``).
PRELOAD_MAX_ENTRIES: Final = 5
#: Heading of the block ``preload_memory`` appends to the system text (adk-rs).
PRELOAD_HEADER: Final = "Relevant prior context:"
#: Largest ``top_k`` the model may ask ``search_facts`` for (the engine allows 100; results
#: go into the model's context, so the tool keeps them smaller).
MAX_TOOL_TOP_K: Final = 50
#: Longest query the model may send (characters).
MAX_QUERY_CHARS: Final = 1000
#: Longest fact the model may ``remember`` in one call (characters).
MAX_FACT_CHARS: Final = 4000
#: Longest snippet ``preload_memory`` puts in one bullet (characters; longer ones are clipped).
PRELOAD_SNIPPET_CHARS: Final = 500
#: Longest user message ``preload_memory`` searches with (characters; the start is used).
PRELOAD_QUERY_CHARS: Final = 4000
#: Proposals ``review_memory`` lists at most.
REVIEW_LIST_LIMIT: Final = 20

_DESCRIPTIONS: Final[dict[ToolName, str]] = {
    "search_facts": (
        "Search long-term memory using query(s): everything remembered about this user and shared by this agent, "
        "from any past conversation. Use it when the answer is not in the current context, to recall specific "
        "information (names, numbers, e-mails, URLs, dates, specifications) or things said days or weeks ago. "
        "Give 1 to 3 differently worded queries; they run in parallel and their results are fused."
    ),
    "load_memory": (
        "Load memories relevant to a query from past conversations with this user. Returns the top matches "
        "with who said them and when."
    ),
    "remember": (
        "Store a fact about the user verbatim in long-term memory, for future conversations. Use it when the "
        "user shares something durable (identity, relationships and contacts, stable preferences, ongoing "
        "goals). Write one self-contained statement."
    ),
    "review_memory": (
        "Review proposed changes to this user's long-term memory (the review queue). action 'list' shows the "
        "pending proposals with their id, action (add / update / delete), text and reason; 'approve' applies one "
        "(optionally with an edited text), 'reject' discards it. Approve only what is accurate and appropriate "
        "to keep about the user."
    ),
}

_PARAMETERS: Final[dict[ToolName, dict[str, Any]]] = {
    "search_facts": {
        "type": "object",
        "properties": {
            "query": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
                "minItems": 1,
                "maxItems": MAX_QUERIES,
                "description": f"List of 1 to {MAX_QUERIES} search queries (run in parallel, results fused)",
            },
            "top_k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TOOL_TOP_K,
                "default": 10,
                "description": "Number of facts to return (default 10)",
            },
            "debug": {
                "type": "boolean",
                "default": False,
                "description": "Include timings and per-stage scores (default false)",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "load_memory": {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                "description": "What to look for in past conversations",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "remember": {
        "type": "object",
        "properties": {
            "fact": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_FACT_CHARS,
                "description": "The fact to store, as one self-contained statement (e.g. \"Grace is the user's "
                'girlfriend; her number is +1 555 0100")',
            },
        },
        "required": ["fact"],
        "additionalProperties": False,
    },
    "review_memory": {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": ["list", "approve", "reject"],
                "description": "list the pending proposals, or approve / reject one",
            },
            "proposal_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 256,
                "description": "The proposal to approve or reject (an id from action 'list')",
            },
            "edit": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_FACT_CHARS,
                "description": "approve: store this text instead of the proposed one",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    },
}

#: JSON Schema keywords Gemini's OpenAPI subset does not take (dropped from its declarations).
_GEMINI_DROP: Final = frozenset({"additionalProperties", "default"})


def _gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema as Gemini's OpenAPI subset: upper-case types, no ``additionalProperties``."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _GEMINI_DROP:
            continue
        if key == "type":
            out[key] = str(value).upper()
        elif key == "properties":
            out[key] = {name: _gemini_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = _gemini_schema(value)
        elif isinstance(value, list):
            out[key] = list(value)
        else:
            out[key] = value
    return out


def _copy(value: Any) -> Any:
    """A deep copy of JSON data (callers may mutate the schemas they get)."""
    return json.loads(json.dumps(value))


def age(when: datetime | None, now: datetime | None = None) -> str | None:
    """How long ago ``when`` was, Eden-style: ``"just now"``, ``"5m ago"``, ``"5h ago"``,
    ``"2d ago"``, ``"3mo ago"``, ``"1y ago"`` (None when ``when`` is None)."""
    if when is None:
        return None
    seconds = max(0, int(((now or utcnow()) - when).total_seconds()))
    for unit, size in (("y", 365 * 86400), ("mo", 30 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now"


def _when(fact: Fact) -> datetime:
    return fact.occurred_at or fact.formed_at


def _one_line(text: str, limit: int) -> str:
    """A memory as one line of prompt text, clipped: escaped as in the ``<MemoryContext>``
    block (markup and look-alikes become entities, invisible controls go), so it can neither
    start a new line (a fake role turn or section) nor open or close a tag of the prompt."""
    line = " ".join(text.split())
    line = line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
    return escape_memory_text(line, one_line=True)


#: Characters a tool result's JSON text spells as ``\uXXXX`` escapes: markup (and look-alikes),
#: line/paragraph separators, NEL and bidi controls. JSON strings may escape any character, so
#: the data is unchanged for a JSON reader; only the raw text can no longer form a tag, a
#: chat-template special token (``<|im_end|>``) or a reordered line.
_JSON_ESCAPES: Final = str.maketrans(
    {c: f"\\u{ord(c):04x}" for c in "<>&\x85\u2028\u2029\uff1c\uff1e\u2039\u203a\ufe64\ufe65"}
    | {chr(c): f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)


def tool_result_json(result: Any) -> str:
    """A tool result as the JSON text to give the model (the ``content`` of a ``tool`` message):
    ``json.dumps`` with markup characters escaped, so memory text inside it cannot pose as a
    tag or special token of the prompt; ``json.loads`` gives back exactly ``result``."""
    return json.dumps(result, ensure_ascii=False).translate(_JSON_ESCAPES)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` hook refusing duplicate keys (a guard reading the first ``fact`` and the
    dispatcher storing the last would disagree)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


class _UnknownToolError(InvalidInputError):
    """The model called a tool that is not among the advertised memory tools."""


def _error(code: str, message: str) -> dict[str, Any]:
    """The model's mistake as a result, in memlane's one error shape ``{"error": {"code", "message"}}``
    (the HTTP API's and the MCP server's)."""
    return {"error": {"code": code, "message": message}}


class MemoryTools:
    """The memory tools of one caller, bound to a memlane engine.

    Args:
        memory: the engine (:class:`~memlane.AsyncMemory` or the sync :class:`~memlane.Memory`),
            or None when memory is off: then ``search_facts``, ``load_memory`` and ``remember``
            raise :class:`~memlane.errors.ConfigError` and ``preload_memory`` does nothing.
        user_id: whose memory: fixed here by the app, never chosen by the model.
        agent_id: the agent namespace (else ``app``; ``"default"`` means none).
        session_id: the current session: provenance of what ``remember`` stores.
        app: the application name sessions are stored under.
        tools: which tools are advertised and callable through :meth:`call`.
        recall_limit: hits ``load_memory`` returns; None: the engine's
            ``recall_config.recall_limit`` (settings ``memory.recall_limit``; Gaia: 5).
        preload_max_entries: default cap of ``preload_memory``'s bullet list (adk-rs: 5).

    Raises:
        ScopeError: a missing or malformed id.
        InvalidInputError: an unknown tool name, or a bad limit.
    """

    def __init__(
        self,
        memory: MemoryLike | None,
        *,
        user_id: str,
        agent_id: str | None = None,
        session_id: str | None = None,
        app: str = "default",
        tools: Sequence[ToolName] = DEFAULT_TOOLS,
        recall_limit: int | None = None,
        preload_max_entries: int = PRELOAD_MAX_ENTRIES,
    ) -> None:
        self._binding = Binding(memory, allow_none=True)
        if recall_limit is None:
            engine = self._binding.engine
            recall_limit = engine.recall_config.recall_limit if engine is not None else RECALL_LIMIT
        self.identity = Identity(user_id, agent_id, session_id, app)
        if isinstance(tools, str) or not isinstance(tools, Sequence):
            raise InvalidInputError(f"tools must be a list of tool names, got {inputs.show(tools)}")
        for name in tools:
            inputs.choice(name, "tools[]", get_args(ToolName))
        self.tools: tuple[ToolName, ...] = tuple(dict.fromkeys(tools))
        self.recall_limit = inputs.integer(recall_limit, "recall_limit", 1, 100)
        self.preload_max_entries = inputs.integer(preload_max_entries, "preload_max_entries", 1, 100)

    def __repr__(self) -> str:
        return f"MemoryTools({self.identity!r}, tools={list(self.tools)!r})"

    @property
    def enabled(self) -> bool:
        """True when a memory service is configured."""
        return self._binding.engine is not None

    # ------------------------------------------------------------------ schemas
    def schemas(self, format: SchemaFormat = "openai") -> list[dict[str, Any]]:
        """The advertised tools as function-calling definitions (fresh copies).

        ``"openai"``: chat completions, ``{"type": "function", "function": {name, description,
        parameters}}``. ``"openai_responses"``: the Responses API's flat ``{"type": "function",
        name, description, parameters, strict: false}``. ``"anthropic"``: ``{name, description,
        input_schema}``. ``"gemini"``: one Tool, ``[{"function_declarations": [...]}]``, with
        Gemini's OpenAPI-subset parameters (upper-case types, no ``additionalProperties``).
        ``preload_memory`` is never among them (passive)."""
        inputs.choice(format, "format", get_args(SchemaFormat))
        if format == "gemini":
            return [{"function_declarations": self.function_declarations()}]
        out: list[dict[str, Any]] = []
        for name in self.tools:
            params = _copy(_PARAMETERS[name])
            if format == "openai":
                out.append(
                    {
                        "type": "function",
                        "function": {"name": name, "description": _DESCRIPTIONS[name], "parameters": params},
                    }
                )
            elif format == "openai_responses":
                out.append(
                    {
                        "type": "function",
                        "name": name,
                        "description": _DESCRIPTIONS[name],
                        "parameters": params,
                        "strict": False,
                    }
                )
            else:
                out.append({"name": name, "description": _DESCRIPTIONS[name], "input_schema": params})
        return out

    def function_declarations(self) -> list[dict[str, Any]]:
        """Gemini ``FunctionDeclaration`` dicts for the advertised tools."""
        return [
            {"name": name, "description": _DESCRIPTIONS[name], "parameters": _gemini_schema(_PARAMETERS[name])}
            for name in self.tools
        ]

    def json_schema(self, name: ToolName) -> dict[str, Any]:
        """The JSON Schema of one tool's arguments (what :meth:`call` enforces)."""
        inputs.choice(name, "name", get_args(ToolName))
        schema: dict[str, Any] = _copy(_PARAMETERS[name])
        return schema

    def functions(self) -> dict[str, Callable[..., Awaitable[dict[str, Any]]]]:
        """The advertised tools as plain async callables, by name (for frameworks that build
        tools from Python functions)."""
        table: dict[ToolName, Callable[..., Awaitable[dict[str, Any]]]] = {
            "search_facts": self.search_facts,
            "load_memory": self.load_memory,
            "remember": self.remember,
            "review_memory": self.review_memory,
        }
        return {name: table[name] for name in self.tools}

    # ------------------------------------------------------------------ the tools
    async def search_facts(self, query: str | Sequence[str], top_k: int = 10, debug: bool = False) -> dict[str, Any]:
        """Hybrid search (keyword + vector, RRF) over all of the caller's facts.

        The 1 to 3 queries run concurrently inside one engine search and are fused into one
        ranked, de-duplicated list of ``top_k`` results (Eden returns a list per query; a
        fused list gives the model each fact once, ranked by all its queries together).

        Returns:
            ``{"query": [...], "count": n, "results": [{"id", "content", "kind", "scope",
            "author", "timestamp", "age", "score"}, ...]}``; with ``debug`` each result also has
            its per-stage ranks and scores (``keyword_rank``, ``keyword_score``,
            ``vector_rank``, ``vector_score``) and ``"debug"`` holds the stage timings (ms),
            each query's keyword and vector candidates with their scores, and whether vectors
            were used.
        """
        queries, top_k, debug = self._search_args(query, top_k, debug)
        return await self._binding.run(self._search_facts(queries, top_k, debug))

    async def load_memory(self, query: str) -> dict[str, Any]:
        """ADK's ``load_memory``: the top :attr:`recall_limit` memories matching ``query``.

        Returns:
            ``{"memories": [{"content", "author", "timestamp"}, ...]}`` (ISO-8601 timestamps).

        Raises:
            ConfigError: no memory service is configured.
        """
        self._binding.require("load_memory")
        query = self._text(query, "query", MAX_QUERY_CHARS)
        return await self._binding.run(self._load_memory(query))

    async def remember(self, fact: str) -> dict[str, Any]:
        """Store ``fact`` verbatim (``infer=False``: no extraction) in the caller's memory.

        Returns:
            ``{"status": "stored", "id", "content"}`` (storing the same text again returns the
            memory already stored).
        """
        self._binding.require("remember")
        fact = self._text(fact, "fact", MAX_FACT_CHARS)
        return await self._binding.run(self._remember(fact))

    async def review_memory(
        self, action: str, proposal_id: str | None = None, edit: str | None = None
    ) -> dict[str, Any]:
        """An admin agent's review of the bound user's proposals (under the agent namespace):
        ``list`` the pending ones, ``approve`` one (``edit``: store that text instead) or
        ``reject`` it. The history names ``agent:<namespace>`` (else ``tool:review_memory``) as
        the reviewer. Opt-in: advertised only when ``tools`` lists it.

        Returns:
            ``list``: ``{"proposals": [{"id", "action", "text", "target_id", "reason", "created_at"}, ...]}``;
            ``approve`` / ``reject``: ``{"id", "status", "result_id", "result_event"}`` (``status``
            ``stale``: its target changed since; nothing applied).
        """
        self._binding.require("review_memory")
        args = self._review_args(action, proposal_id, edit)
        return await self._binding.run(self._review_memory(*args))

    async def preload_memory(
        self, user_text: str | None, system_text: str = "", *, max_entries: int | None = None
    ) -> str:
        """Passive recall at turn start (adk-rs ``preload_memory``; never advertised to the model).

        Searches the caller's memory with the user's message and, when there are hits, returns
        ``system_text`` followed by ``"Relevant prior context:"`` and a bullet list of at most
        ``max_entries`` snippets (each on one line). Returns ``system_text`` unchanged when no
        memory service is configured, the user text is empty, or nothing matches. Search
        failures (storage, provider) are raised, not hidden.
        """
        query, limit = self._preload_args(user_text, system_text, max_entries)
        if query is None:
            return system_text
        return await self._binding.run(self._preload(query, system_text, limit))

    # ------------------------------------------------------------------ dispatch
    async def call(
        self, name: str, arguments: str | Mapping[str, Any] | None = None, *, raise_errors: bool = False
    ) -> dict[str, Any]:
        """Run the tool call the model made: ``name`` and its arguments as a JSON text (OpenAI
        ``function.arguments``) or a mapping (Anthropic ``input``, Gemini ``functionCall.args``).

        The model's mistakes come back as a result it can read and correct, not as an
        exception: an unknown or not-advertised tool (``preload_memory`` included), arguments
        that are not a JSON object, an argument the schema does not list (``user_id`` too), a
        missing or ill-typed one → ``{"error": {"code": "unknown_tool" | "invalid_arguments",
        "message": ...}}``, and nothing is read or written. With ``raise_errors=True`` these
        raise :class:`~memlane.errors.InvalidInputError` instead. The app's problems always
        raise: :class:`~memlane.errors.ConfigError` (no memory service), storage or provider
        errors.

        Returns:
            The tool's JSON-able result.
        """
        try:
            return await self._binding.run(self._prepare_call(name, arguments)())
        except InvalidInputError as exc:
            if raise_errors:
                raise
            return _error("unknown_tool" if isinstance(exc, _UnknownToolError) else "invalid_arguments", str(exc))

    # ------------------------------------------------------------------ sync counterparts
    def search_facts_sync(self, query: str | Sequence[str], top_k: int = 10, debug: bool = False) -> dict[str, Any]:
        """Blocking :meth:`search_facts` (tools built from the sync :class:`memlane.Memory`)."""
        queries, top_k, debug = self._search_args(query, top_k, debug)
        return self._binding.run_sync(self._search_facts(queries, top_k, debug))

    def load_memory_sync(self, query: str) -> dict[str, Any]:
        """Blocking :meth:`load_memory`."""
        self._binding.require("load_memory")
        query = self._text(query, "query", MAX_QUERY_CHARS)
        return self._binding.run_sync(self._load_memory(query))

    def remember_sync(self, fact: str) -> dict[str, Any]:
        """Blocking :meth:`remember`."""
        self._binding.require("remember")
        fact = self._text(fact, "fact", MAX_FACT_CHARS)
        return self._binding.run_sync(self._remember(fact))

    def review_memory_sync(
        self, action: str, proposal_id: str | None = None, edit: str | None = None
    ) -> dict[str, Any]:
        """Blocking :meth:`review_memory`."""
        self._binding.require("review_memory")
        args = self._review_args(action, proposal_id, edit)
        return self._binding.run_sync(self._review_memory(*args))

    def preload_memory_sync(
        self, user_text: str | None, system_text: str = "", *, max_entries: int | None = None
    ) -> str:
        """Blocking :meth:`preload_memory`."""
        query, limit = self._preload_args(user_text, system_text, max_entries)
        if query is None:
            return system_text
        return self._binding.run_sync(self._preload(query, system_text, limit))

    def call_sync(
        self, name: str, arguments: str | Mapping[str, Any] | None = None, *, raise_errors: bool = False
    ) -> dict[str, Any]:
        """Blocking :meth:`call`."""
        try:
            return self._binding.run_sync(self._prepare_call(name, arguments)())
        except InvalidInputError as exc:
            if raise_errors:
                raise
            return _error("unknown_tool" if isinstance(exc, _UnknownToolError) else "invalid_arguments", str(exc))

    # ------------------------------------------------------------------ internals
    def _text(self, value: object, name: str, max_chars: int) -> str:
        return inputs.clean_text(value, name, max_chars=max_chars)

    def _search_args(self, query: object, top_k: object, debug: object) -> tuple[list[str], int, bool]:
        if isinstance(query, str):  # weak models send one string; the schema asks for a list
            query = [query]
        if not isinstance(query, list | tuple):
            raise InvalidInputError(
                f"query must be a list of 1 to {MAX_QUERIES} search texts, got {inputs.show(query)}"
            )
        if not 1 <= len(query) <= MAX_QUERIES:
            raise InvalidInputError(f"query must hold 1 to {MAX_QUERIES} search texts, got {len(query)}")
        queries = [self._text(q, f"query[{i}]", MAX_QUERY_CHARS) for i, q in enumerate(query)]
        return queries, inputs.integer(top_k, "top_k", 1, MAX_TOOL_TOP_K), inputs.flag(debug, "debug")

    def _prepare_call(self, name: object, arguments: object) -> Callable[[], Coroutine[Any, Any, dict[str, Any]]]:
        """Check a model's tool call; return the engine work to run (nothing runs on error)."""
        if not isinstance(name, str) or name not in self.tools:
            shown = repr(name) if isinstance(name, str) else inputs.show(name)
            raise _UnknownToolError(f"unknown tool {shown}; the memory tools are: {', '.join(self.tools) or 'none'}")
        tool: ToolName = name
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            args: Any = {}
        elif isinstance(arguments, str | bytes | bytearray):
            try:
                args = json.loads(arguments, object_pairs_hook=_unique_keys)
            except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
                raise InvalidInputError(f"{tool}: the arguments are not valid JSON ({exc})") from None
        else:
            args = arguments
        if not isinstance(args, Mapping):
            raise InvalidInputError(f"{tool}: the arguments must be a JSON object, got {inputs.show(args)}")
        schema = _PARAMETERS[tool]
        allowed = schema["properties"]
        extra = sorted(str(k) for k in args if k not in allowed)
        if extra:
            raise InvalidInputError(
                f"{tool}: unexpected argument(s) {', '.join(extra)}; it takes {', '.join(allowed)} (memory is "
                "always the current user's)"
            )
        missing = [k for k in schema["required"] if k not in args]
        if missing:
            raise InvalidInputError(f"{tool}: missing required argument(s) {', '.join(missing)}")
        if tool == "search_facts":
            queries, top_k, debug = self._search_args(args["query"], args.get("top_k", 10), args.get("debug", False))
            self._binding.require(tool)
            return lambda: self._search_facts(queries, top_k, debug)
        if tool == "load_memory":
            query = self._text(args["query"], "query", MAX_QUERY_CHARS)
            self._binding.require(tool)
            return lambda: self._load_memory(query)
        if tool == "review_memory":
            review = self._review_args(args["action"], args.get("proposal_id"), args.get("edit"))
            self._binding.require(tool)
            return lambda: self._review_memory(*review)
        fact = self._text(args["fact"], "fact", MAX_FACT_CHARS)
        self._binding.require(tool)
        return lambda: self._remember(fact)

    def _review_args(self, action: object, proposal_id: object, edit: object) -> tuple[str, str | None, str | None]:
        inputs.choice(action, "action", ("list", "approve", "reject"))
        assert isinstance(action, str)
        if action == "list":
            if proposal_id is not None or edit is not None:
                raise InvalidInputError("review_memory: action 'list' takes no proposal_id or edit")
            return action, None, None
        pid = inputs.identifier(proposal_id, "proposal_id", error=InvalidInputError)
        if edit is not None and action != "approve":
            raise InvalidInputError("review_memory: edit is the text to approve; it goes with action 'approve' only")
        return action, pid, None if edit is None else self._text(edit, "edit", MAX_FACT_CHARS)

    async def _review_memory(self, action: str, proposal_id: str | None, edit: str | None) -> dict[str, Any]:
        engine = self._binding.require("review_memory")
        ids = {"user_id": self.identity.user_id, "agent_id": self.identity.namespace}
        if action == "list":
            found = await engine.proposals(**ids, limit=REVIEW_LIST_LIMIT)
            return {
                "proposals": [
                    {
                        "id": p.id,
                        "action": p.action,
                        "text": p.text,
                        "target_id": p.target_id,
                        "reason": p.reason,
                        "created_at": p.created_at.isoformat(),
                    }
                    for p in found
                ]
            }
        assert proposal_id is not None
        ns = self.identity.namespace
        try:
            done = await engine.review(
                proposal_id,
                approve=action == "approve",
                edit=edit,
                reviewer=f"agent:{ns}" if ns else "tool:review_memory",
                **ids,
            )
        except NotFoundError as exc:  # the model's mistake (an id it was not shown): a result it can read
            return _error("not_found", str(exc.args[0]) if exc.args else str(exc))
        except ConflictError as exc:
            return _error("already_reviewed", str(exc))
        return {"id": done.id, "status": done.status, "result_id": done.result_id, "result_event": done.result_event}

    def _preload_args(self, user_text: object, system_text: object, max_entries: object) -> tuple[str | None, int]:
        """The query ``preload_memory`` searches with (None: nothing to do) and its cap."""
        if not isinstance(system_text, str):
            raise InvalidInputError(f"system_text must be a text, got {inputs.show(system_text)}")
        limit = inputs.integer(self.preload_max_entries if max_entries is None else max_entries, "max_entries", 1, 100)
        if self._binding.engine is None or not isinstance(user_text, str):
            return None, limit
        try:  # the start of a long message; nothing searchable in it (blank, lone surrogate): no preload
            return inputs.clean_text(user_text[:PRELOAD_QUERY_CHARS], "user_text"), limit
        except InvalidInputError:
            return None, limit

    async def _search_facts(self, queries: list[str], top_k: int, debug: bool) -> dict[str, Any]:
        engine = self._binding.require("search_facts")
        result = await engine.search(
            queries, top_k=top_k, debug=debug, user_id=self.identity.user_id, agent_id=self.identity.namespace
        )
        now = utcnow()
        results = [self._hit(h, now, debug) for h in result.hits]
        out: dict[str, Any] = {"query": queries, "count": len(results), "results": results}
        if debug:
            dbg = result.debug or {}
            out["debug"] = {
                "timings_ms": {k.removesuffix("_ms"): round(float(v), 3) for k, v in dbg.get("timings", {}).items()},
                "vectors_used": bool(dbg.get("vectors_used", False)),
                "stages": {
                    stage: [
                        {"query": q, "candidates": [{"id": fid, "score": float(s)} for fid, s in lst]}
                        for q, lst in zip(queries, dbg.get(stage, []), strict=False)
                    ]
                    for stage in ("keyword", "vector")
                },
            }
        return out

    @staticmethod
    def _hit(hit: Hit, now: datetime, debug: bool) -> dict[str, Any]:
        f = hit.fact
        when = _when(f)
        row: dict[str, Any] = {
            "id": f.id,
            "content": f.content,
            "kind": f.kind,
            "scope": f.scope,
            "author": f.author,
            "timestamp": when.isoformat(),
            "age": age(when, now),
            "score": round(hit.score, 6),
        }
        if debug:
            row.update(
                keyword_rank=hit.keyword_rank,
                keyword_score=hit.keyword_score,
                vector_rank=hit.vector_rank,
                vector_score=hit.vector_score,
            )
        return row

    async def _load_memory(self, query: str) -> dict[str, Any]:
        engine = self._binding.require("load_memory")
        result = await engine.search(
            query, top_k=self.recall_limit, user_id=self.identity.user_id, agent_id=self.identity.namespace
        )
        return {
            "memories": [
                {"content": h.fact.content, "author": h.fact.author, "timestamp": _when(h.fact).isoformat()}
                for h in result.hits
            ]
        }

    async def _remember(self, fact: str) -> dict[str, Any]:
        engine = self._binding.require("remember")
        stored = await engine.add(
            fact,
            infer=False,
            session_id=self.identity.session_id,
            metadata={"source": "tool:remember"},
            user_id=self.identity.user_id,
            agent_id=self.identity.namespace,
        )
        return {"status": "stored", "id": stored[0].id, "content": stored[0].content}

    async def _preload(self, query: str, system_text: str, limit: int) -> str:
        engine = self._binding.require("preload_memory")
        result = await engine.search(
            query, top_k=limit, user_id=self.identity.user_id, agent_id=self.identity.namespace
        )
        if not result.hits:
            return system_text
        bullets = "\n".join(f"- {_one_line(h.fact.content, PRELOAD_SNIPPET_CHARS)}" for h in result.hits[:limit])
        sep = "\n\n"  # one blank line between the system text and the block
        if not system_text or system_text.endswith("\n\n"):
            sep = ""
        elif system_text.endswith("\n"):
            sep = "\n"
        return f"{system_text}{sep}{PRELOAD_HEADER}\n{bullets}"


def memory_tools(
    memory: MemoryLike | None,
    *,
    user_id: str,
    agent_id: str | None = None,
    session_id: str | None = None,
    app: str = "default",
    enabled: bool = True,
    tools: Sequence[ToolName] = DEFAULT_TOOLS,
    recall_limit: int | None = None,
    preload_max_entries: int = PRELOAD_MAX_ENTRIES,
) -> MemoryTools | None:
    """Eden's automatic provisioning: the memory tools of an agent, or None when memory is off.

    With ``enabled`` (the agent has memory), ``search_facts`` is always among the tools,
    whatever ``tools`` lists; with ``enabled=False`` there are no memory tools at all.

    Raises:
        ConfigError: ``enabled`` but ``memory`` is None.
    """
    if not inputs.flag(enabled, "enabled"):
        return None
    if memory is None:
        raise ConfigError("memory is enabled for this agent but no memory service was given (memory=None)")
    chosen: list[ToolName] = ["search_facts", *(t for t in tools if t != "search_facts")]
    return MemoryTools(
        memory,
        user_id=user_id,
        agent_id=agent_id,
        session_id=session_id,
        app=app,
        tools=chosen,
        recall_limit=recall_limit,
        preload_max_entries=preload_max_entries,
    )


def _names(entry: Mapping[str, Any], format: SchemaFormat) -> list[str]:
    if format == "gemini":
        decls = entry.get("function_declarations") or entry.get("functionDeclarations") or []
        return [str(d.get("name")) for d in decls if isinstance(d, Mapping)]
    if format == "openai":
        fn = entry.get("function")
        return [str(fn.get("name"))] if isinstance(fn, Mapping) else []
    return [str(entry.get("name"))] if "name" in entry else []


def provision(
    tool_list: Sequence[Mapping[str, Any]], tools: MemoryTools | None, *, format: SchemaFormat = "openai"
) -> list[dict[str, Any]]:
    """The agent's ``tool_list`` plus the memory tools' schemas in ``format`` (a new list;
    ``tool_list`` is not changed). ``tools=None`` (memory off) returns a copy unchanged.

    A memory tool the list already holds with the same definition is not added twice (so
    provisioning an already provisioned list is harmless).

    Raises:
        UsageError: the list holds another tool with a memory tool's name.
    """
    inputs.choice(format, "format", get_args(SchemaFormat))
    out = [dict(t) for t in tool_list]
    if tools is None:
        return out
    mine = tools.schemas(format)
    if format == "gemini":
        wanted = {d["name"]: d for d in mine[0]["function_declarations"]}
        existing = {n for t in out for n in _names(t, format)}
        for t in out:
            for d in t.get("function_declarations") or t.get("functionDeclarations") or []:
                if d.get("name") in wanted and d != wanted[d["name"]]:
                    raise UsageError(f"the tool list already has a different tool named {d['name']!r}")
        missing = [d for n, d in wanted.items() if n not in existing]
        if missing:
            out.append({"function_declarations": missing})
        return out
    by_name = {n: t for t in out for n in _names(t, format)}
    for schema in mine:
        name = _names(schema, format)[0]
        if name in by_name:
            if by_name[name] != schema:
                raise UsageError(f"the tool list already has a different tool named {name!r}")
            continue
        out.append(schema)
    return out
