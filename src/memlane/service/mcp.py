"""memlane as an MCP server (``memlane mcp``): the tools ``search``, ``remember``, ``list``,
``delete``, ``context`` and ``profile`` over the official ``mcp`` package's high-level
:class:`~mcp.server.mcpserver.MCPServer`, on the stdio or the streamable-HTTP transport.

Scope: no tool takes a user, agent or tenant argument (an argument a tool's schema does not
list is refused as a tool error). Whose memory a call reads and writes is fixed by the server:

* stdio: the user (and agent) given on the command line: one process per user, started by the
  MCP client (``memlane mcp --user alice``);
* streamable HTTP with API keys: the caller's ``Authorization: Bearer <key>``, verified through
  the package's own token-verifier hook (:class:`KeyVerifier`); the key's tenant selects the
  engine (:class:`~memlane.service.hub.MemoryHub`), the key's user is the user. A key not bound
  to a user cannot use MCP (there would be no user to scope to); a read-only key cannot
  ``remember`` or ``delete``. A missing or unknown key is refused with HTTP 401 before any
  MCP message is read;
* streamable HTTP without keys: loopback only, the ``default`` tenant and the configured user.

``delete`` deletes only the caller's own memories (not the agent's shared ones, which every
user of the agent reads). Tool results are JSON (also as ``structuredContent``); the text is
:func:`~memlane.agent.tools.tool_result_json` (markup escaped, so memory text cannot pose as a
prompt tag). memlane's input errors, a foreign or unknown id and a refused write come back
as MCP tool errors (``isError``) with a clear message; nothing is changed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, cast

import anyio.to_thread
from pydantic import ConfigDict, Field, ValidationError, create_model

from memlane import __version__, inputs
from memlane.agent.tools import MAX_FACT_CHARS, MAX_QUERY_CHARS, MAX_TOOL_TOP_K, MemoryTools, age, tool_result_json
from memlane.engine.context import estimate_tokens
from memlane.errors import (
    AuthenticationError,
    ConfigError,
    InvalidInputError,
    MemlaneError,
    MissingExtraError,
    NotFoundError,
    PermissionDeniedError,
)
from memlane.memory import AsyncMemory
from memlane.models import Fact, utcnow
from memlane.retrieval.hybrid import MAX_QUERIES
from memlane.service.hub import DEFAULT_TENANT, MemoryHub
from memlane.service.keys import KeyStore, check_host
from memlane.service.limits import DEFAULT_BODY_TIMEOUT, BodySizeLimit

try:
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise MissingExtraError("memlane mcp needs the mcp extra: pip install 'memlane[mcp]'") from exc

__all__ = [
    "DEFAULT_PATH",
    "TOOL_NAMES",
    "Caller",
    "KeyVerifier",
    "build_server",
    "check_host",
    "fixed_caller",
    "http_app",
    "key_caller",
    "run_stdio",
    "serve_http",
]

log = logging.getLogger("memlane.mcp")

#: The tools the server advertises, in this order.
TOOL_NAMES: Final = ("search", "remember", "list", "delete", "context", "profile")
#: Where the streamable-HTTP endpoint is mounted.
DEFAULT_PATH: Final = "/mcp"
#: Largest page ``list`` returns.
MAX_LIST_LIMIT: Final = 100
#: Most recent items ``profile`` folds in, and the longest one (characters).
MAX_PROFILE_ITEMS: Final = 20
MAX_PROFILE_ITEM_CHARS: Final = 500
#: Largest ``budget_tokens`` ``context`` takes.
MAX_CONTEXT_BUDGET: Final = 32_000


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose memory one tool call reads and writes (fixed by the server, never by the client)."""

    tenant: str
    user_id: str
    agent_id: str | None = None
    read_only: bool = False


CallerResolver = Callable[[], Caller]
"""Gives the caller of the tool call being served (raises
:class:`~memlane.errors.AuthenticationError` / :class:`~memlane.errors.PermissionDeniedError`)."""


def fixed_caller(user_id: str, agent_id: str | None = None, *, tenant: str = DEFAULT_TENANT) -> CallerResolver:
    """Every call acts for ``user_id`` (stdio, and HTTP without keys).

    Raises:
        ScopeError: a missing or malformed id.
    """
    caller = Caller(
        tenant=inputs.identifier(tenant, "tenant"),
        user_id=inputs.identifier(user_id, "user_id"),
        agent_id=inputs.optional_id(agent_id, "agent_id"),
    )
    return lambda: caller


# ---------------------------------------------------------------------------- API keys over HTTP
class KeyVerifier:
    """The ``mcp`` package's ``TokenVerifier`` over memlane's API keys
    (:class:`~memlane.service.keys.KeyStore`): the bearer token is an API key; a live key
    becomes an ``AccessToken`` whose claims carry the key's tenant, user and read-only flag.
    The package's bearer middleware answers 401 for a missing, unknown or revoked key, and
    binds each MCP session to the key that opened it."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await anyio.to_thread.run_sync(self.keys.verify, token)
        except MemlaneError as exc:  # the keys file went missing or bad: refuse (fail closed)
            log.warning("memlane mcp: refusing a request: %s", exc)
            return None
        if key is None:
            return None
        return AccessToken(
            token=key.id,  # not the secret: nothing downstream needs it
            client_id=key.id,
            scopes=[],
            subject=key.user_id,
            claims={"tenant": key.tenant, "user_id": key.user_id, "read_only": key.read_only, "key_id": key.id},
        )


def key_caller(agent_id: str | None = None) -> CallerResolver:
    """The caller from the request's verified API key (streamable HTTP with keys).

    Raises (from the resolver):
        AuthenticationError: no verified key on this request.
        PermissionDeniedError: the key is not bound to a user.
    """
    agent_id = inputs.optional_id(agent_id, "agent_id")

    def resolve() -> Caller:
        token = get_access_token()
        claims = token.claims if token is not None else None
        if not claims or "tenant" not in claims:
            raise AuthenticationError("this request carries no valid API key")
        user_id = claims.get("user_id")
        if not user_id:
            raise PermissionDeniedError(
                "this API key is not bound to a user; MCP tools act for one user: use a user-bound key "
                "(memlane keys create --user USER)"
            )
        return Caller(
            tenant=str(claims["tenant"]),
            user_id=str(user_id),
            agent_id=agent_id,
            read_only=bool(claims.get("read_only", False)),
        )

    return resolve


# ---------------------------------------------------------------------------- the tools
_DESCRIPTIONS: Final[dict[str, str]] = {
    "search": (
        "Search the user's long-term memory (everything remembered about this user, plus memories the agent "
        "shares with all its users). Use it to recall names, numbers, preferences, plans or anything said in "
        f"earlier conversations. Give 1 to {MAX_QUERIES} differently worded queries; their results are fused. "
        "Returns the best matches with their id, text, kind, scope and age."
    ),
    "remember": (
        "Store one fact about the user verbatim in long-term memory, for future conversations. Use it when the "
        "user shares something durable (identity, relationships and contacts, stable preferences, ongoing goals). "
        "Write one self-contained statement. Returns the new memory's id."
    ),
    "list": (
        "List the user's memories (and the agent's shared ones), newest first, one page at a time. Pass the "
        "returned next_cursor as cursor for the next page."
    ),
    "delete": (
        "Delete one of the user's own memories by id (from search or list). It leaves search and listings; the "
        "change is kept in its history. Memories the agent shares with all users cannot be deleted here."
    ),
    "context": (
        "The user's memory context block for the start of a conversation: their profile, consolidated memory, "
        "recent reflections and recent facts, as one <MemoryContext> text to put in the prompt."
    ),
    "profile": (
        "A short importance-ranked profile of the user (at most 20 bullets) distilled from their memories; "
        "optionally folding in recent tasks or projects given as items. Returns null when nothing is stored."
    ),
}

_READ: Final = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_ANNOTATIONS: Final[dict[str, ToolAnnotations]] = {
    "search": _READ,
    "list": _READ,
    "context": _READ,
    "profile": _READ,
    "remember": ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    "delete": ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False),
}

Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
Queries = Annotated[list[Query], Field(min_length=1, max_length=MAX_QUERIES)]
Kind = Literal["fact", "message", "document", "fragment", "description", "custom", "summary"]


def _fact_row(fact: Fact) -> dict[str, Any]:
    when = fact.occurred_at or fact.formed_at
    return {
        "id": fact.id,
        "content": fact.content,
        "kind": fact.kind,
        "scope": fact.scope,
        "author": fact.author,
        "timestamp": when.isoformat(),
        "age": age(when, utcnow()),
    }


class _Refusal(ToolError):
    """A tool call memlane refused: a stable ``code`` and a message saying what to fix."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


#: memlane error class -> the code of its tool error (the HTTP API's codes; a bad argument is
#: ``invalid_arguments``, as in ``/v1/tools``).
_CODES: Final = (
    (AuthenticationError, "unauthenticated"),
    (PermissionDeniedError, "forbidden"),
    (NotFoundError, "not_found"),
    (InvalidInputError, "invalid_arguments"),
    (ConfigError, "config_error"),
)


def _refusal(exc: MemlaneError) -> _Refusal:
    code = next((code for cls, code in _CODES if isinstance(exc, cls)), "error")
    return _Refusal(code, " ".join(str(exc).split()))


def _validation_message(exc: ValidationError) -> str:
    """Pydantic's complaint about tool arguments in one line per argument, without the input
    values or pydantic's documentation links: ``query: List should have at least 1 item ...``."""
    by_argument: dict[str, list[str]] = {}
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        loc = err.get("loc", ())
        name = str(loc[0]) if loc else "arguments"
        if err.get("type") == "extra_forbidden":
            message = "is not an argument of this tool (whose memory a tool uses is fixed by the server)"
        elif err.get("type") == "missing":
            message = "is required"
        else:
            message = str(err.get("msg", "is not valid"))
        if message not in by_argument.setdefault(name, []):
            by_argument[name].append(message)
    return "; ".join(f"{name}: {' or '.join(messages)}" for name, messages in by_argument.items())


def _error_text(code: str, message: str) -> str:
    """A tool error's text: memlane's one error shape, ``{"error": {"code", "message"}}``."""
    return tool_result_json({"error": {"code": code, "message": message}})


class _Server(MCPServer[Any]):
    """The package's server, with every tool error in memlane's error shape: JSON
    ``{"error": {"code", "message"}}`` (``invalid_arguments``, ``unknown_tool``, ``forbidden``,
    ``not_found``, ``unauthenticated``, ...), never pydantic's raw text."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the package answers with a generic message and logs it
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                code, message = "invalid_arguments", _validation_message(cause)
            elif isinstance(cause, _Refusal):
                code, message = cause.code, cause.message
            elif self._tool_manager.get_tool(name) is None:
                code, message = "unknown_tool", f"no tool {name!r}; the tools are {', '.join(TOOL_NAMES)}"
            else:
                code, message = "error", str(exc)
            raise ToolError(_error_text(code, message)) from exc


def _result(data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=tool_result_json(data))], structured_content=data)


class _Forbid(ArgModelBase):
    model_config = ConfigDict(extra="forbid")


def _strict(tool: Tool) -> Tool:
    """Refuse arguments the tool does not declare (a ``user_id`` too), and say so in its schema
    (``additionalProperties: false``): the package ignores unknown arguments by default."""
    base = tool.fn_metadata.arg_model
    strict = cast("type[ArgModelBase]", create_model(base.__name__, __base__=(base, _Forbid), __module__=__name__))
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)
    return tool


def build_server(
    hub: MemoryHub,
    caller: CallerResolver,
    *,
    verifier: KeyVerifier | None = None,
    url: str = "http://127.0.0.1",
    name: str = "memlane",
) -> MCPServer[Any]:
    """The MCP server: six memory tools, each scoped by ``caller`` and run on ``hub``'s engine of
    the caller's tenant (see :func:`run_stdio`, :func:`http_app`). With a ``verifier``, its
    streamable-HTTP app requires a bearer API key (``url``: the server's own address, named as
    the token issuer in the package's auth settings)."""

    def who_calls(*, write: bool = False) -> Caller:
        try:
            who = caller()
        except MemlaneError as exc:
            raise _refusal(exc) from exc
        if write and who.read_only:
            raise _Refusal("forbidden", "this API key is read-only: it cannot change memory")
        return who

    def tools_of(who: Caller, engine: AsyncMemory) -> MemoryTools:
        return MemoryTools(engine, user_id=who.user_id, agent_id=who.agent_id, tools=("search_facts", "remember"))

    async def run(who: Caller, work: Callable[[AsyncMemory], Awaitable[dict[str, Any]]]) -> CallToolResult:
        """``work`` on the caller's tenant engine, leased for the call (a configuration reload
        does not close it underneath); memlane's refusals become tool errors."""
        try:
            async with hub.lease(who.tenant) as engine:
                return _result(await work(engine))
        except (InvalidInputError, NotFoundError, PermissionDeniedError, ConfigError) as exc:
            raise _refusal(exc) from exc

    async def search(
        query: Annotated[
            Queries | Query,
            Field(description=f"1 to {MAX_QUERIES} search queries (a single string is one query)"),
        ],
        top_k: Annotated[int, Field(ge=1, le=MAX_TOOL_TOP_K, description="How many memories to return")] = 10,
    ) -> CallToolResult:
        who, args = who_calls(), {"query": query, "top_k": top_k}
        return await run(who, lambda engine: tools_of(who, engine).call("search_facts", args, raise_errors=True))

    async def remember(
        fact: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_FACT_CHARS,
                description='The fact, as one self-contained statement (e.g. "Alice\'s sister is Ana")',
            ),
        ],
    ) -> CallToolResult:
        who = who_calls(write=True)
        return await run(who, lambda engine: tools_of(who, engine).call("remember", {"fact": fact}, raise_errors=True))

    async def list_(
        limit: Annotated[int, Field(ge=1, le=MAX_LIST_LIMIT, description="Page size")] = 20,
        cursor: Annotated[str | None, Field(max_length=200, description="next_cursor of the previous page")] = None,
        kind: Annotated[Kind | None, Field(description="Only memories of this kind")] = None,
    ) -> CallToolResult:
        who = who_calls()

        async def work(engine: AsyncMemory) -> dict[str, Any]:
            page = await engine.list(user_id=who.user_id, agent_id=who.agent_id, limit=limit, cursor=cursor, kind=kind)
            return {
                "count": len(page.items),
                "total": page.total,
                "next_cursor": page.next_cursor,
                "memories": [_fact_row(f) for f in page.items],
            }

        return await run(who, work)

    async def delete(
        memory_id: Annotated[str, Field(min_length=1, max_length=200, description="The id of the memory to delete")],
    ) -> CallToolResult:
        who = who_calls(write=True)

        async def work(engine: AsyncMemory) -> dict[str, Any]:
            try:
                fact = await engine.get(memory_id, user_id=who.user_id, agent_id=who.agent_id)
            except NotFoundError:
                raise NotFoundError(f"no memory {memory_id!r} of this user") from None
            if fact.invalid_at is not None:
                raise NotFoundError(f"memory {memory_id!r} is already deleted")
            if fact.scope != "user" or fact.user_id != who.user_id:
                raise PermissionDeniedError(
                    f"memory {memory_id!r} is shared by the agent with all its users; only your own memories "
                    "can be deleted"
                )
            gone = await engine.delete(memory_id, user_id=who.user_id, agent_id=who.agent_id)
            return {"status": "deleted", "id": gone.id, "content": gone.content}

        return await run(who, work)

    async def context(
        budget_tokens: Annotated[
            int | None, Field(ge=1, le=MAX_CONTEXT_BUDGET, description="Token budget of the block (default: none)")
        ] = None,
    ) -> CallToolResult:
        who = who_calls()

        async def work(engine: AsyncMemory) -> dict[str, Any]:
            text = await engine.context(user_id=who.user_id, agent_id=who.agent_id, budget_tokens=budget_tokens)
            return {"context": text, "tokens": estimate_tokens(text), "budget_tokens": budget_tokens}

        return await run(who, work)

    async def profile(
        items: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=MAX_PROFILE_ITEM_CHARS)]],
            Field(max_length=MAX_PROFILE_ITEMS, description="Recent tasks or projects to fold in"),
        ] = [],  # noqa: B006 - never mutated; pydantic copies defaults
    ) -> CallToolResult:
        who = who_calls()

        async def work(engine: AsyncMemory) -> dict[str, Any]:
            block = await engine.profile(who.user_id, agent_id=who.agent_id, items=items)
            return {"profile": block}

        return await run(who, work)

    functions: dict[str, Callable[..., Awaitable[CallToolResult]]] = {
        "search": search,
        "remember": remember,
        "list": list_,
        "delete": delete,
        "context": context,
        "profile": profile,
    }
    tools = [
        _strict(
            Tool.from_function(
                fn,
                name=tool_name,
                description=_DESCRIPTIONS[tool_name],
                annotations=_ANNOTATIONS[tool_name],
                structured_output=False,
            )
        )
        for tool_name, fn in functions.items()
    ]
    return _Server(
        name,
        instructions="Long-term memory of the current user: search it before answering from memory, remember "
        "durable facts the user shares.",
        version=__version__,
        tools=tools,
        log_level="WARNING",
        token_verifier=verifier,
        auth=AuthSettings(issuer_url=url, resource_server_url=None) if verifier is not None else None,
    )


# ---------------------------------------------------------------------------- transports
async def run_stdio(hub: MemoryHub, caller: CallerResolver) -> None:
    """Serve MCP on stdin/stdout until the client closes it; then close the engines."""
    server = build_server(hub, caller)
    try:
        await hub.open()  # the config file watcher (hot reload), if the hub has one
        await server.run_stdio_async()
    finally:
        await hub.aclose()


def _streamable(server: MCPServer[Any], host: str, path: str) -> Any:
    return server.streamable_http_app(streamable_http_path=path, host=host)


def _json_error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


class _KeyGate:
    """ASGI middleware in front of the streamable-HTTP apps: looks at the keys file on every
    request (:meth:`KeyStore.configured`), so a key created by another process is required
    from the next request on. While no key exists the key-less app serves (loopback, the
    configured user); once one does, only the keyed app (bearer key, 401 otherwise). A keys
    file that went missing or bad is 503; headers carrying several different keys are 401."""

    def __init__(self, app: Any, *, keys: KeyStore, keyed: Any, keyless: Any | None) -> None:
        self.app = app
        self.keys = keys
        self.keyed = keyed
        self.keyless = keyless

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.requests import HTTPConnection

        from memlane.service.auth import WWW_AUTHENTICATE, presented_key

        try:
            configured = await anyio.to_thread.run_sync(self.keys.configured)
        except MemlaneError as exc:
            log.warning("memlane mcp: refusing a request: %s", exc)
            await _json_error(503, "storage_unavailable", str(exc))(scope, receive, send)
            return
        if not configured and self.keyless is not None:
            await self.keyless(scope, receive, send)
            return
        try:
            presented_key(HTTPConnection(scope))
        except AuthenticationError as exc:
            response = _json_error(401, "unauthenticated", str(exc), {"WWW-Authenticate": WWW_AUTHENTICATE})
            await response(scope, receive, send)
            return
        await self.keyed(scope, receive, send)


def http_app(
    hub: MemoryHub,
    caller: CallerResolver,
    *,
    verifier: KeyVerifier | None = None,
    keyless: CallerResolver | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    path: str = DEFAULT_PATH,
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
) -> Any:
    """The streamable-HTTP ASGI app (Starlette) at ``path``. The engines are closed when the
    app's lifespan ends. A request body that has not fully arrived ``body_timeout`` seconds
    after it is first read is answered 408 and the connection closed (0 or None: no timeout;
    ``memlane mcp`` passes ``server.body_timeout``).

    * No ``verifier``: every request acts for ``caller`` (a :func:`fixed_caller`; loopback only).
    * A ``verifier``: every request needs ``Authorization: Bearer <API key>`` (401 otherwise);
      pass :func:`key_caller` as ``caller``. The keys file is looked at on every request.
    * A ``verifier`` and ``keyless`` (a :func:`fixed_caller`): while the keys file holds no key
      at all, requests act for ``keyless``; from the request after a key is created (by any
      process) they need a key, as above.
    """
    import starlette.applications
    from starlette.middleware import Middleware

    if verifier is None:
        inner = [_streamable(build_server(hub, caller), host, path)]
        app = inner[0]
    else:
        keyed = _streamable(build_server(hub, caller, verifier=verifier, url=f"http://{host}:{port}"), host, path)
        unkeyed = None if keyless is None else _streamable(build_server(hub, keyless), host, path)
        inner = [keyed] if unkeyed is None else [keyed, unkeyed]
        gate = Middleware(_KeyGate, keys=verifier.keys, keyed=keyed, keyless=unkeyed)
        app = starlette.applications.Starlette(middleware=[gate])
    if body_timeout:  # slow-client protection, as memlane serve (the package limits the size itself)
        app.add_middleware(BodySizeLimit, max_bytes=0, timeout=body_timeout)
    inner_lifespans = [(sub, sub.router.lifespan_context) for sub in inner]

    @asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for sub, context in inner_lifespans:
                await stack.enter_async_context(context(sub))
            try:
                await hub.open()
                yield
            finally:
                await hub.aclose()

    app.router.lifespan_context = lifespan
    return app


async def serve_http(
    hub: MemoryHub,
    caller: CallerResolver,
    *,
    verifier: KeyVerifier | None = None,
    keyless: CallerResolver | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    path: str = DEFAULT_PATH,
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
) -> None:
    """Serve the streamable-HTTP transport with uvicorn until stopped (arguments as
    :func:`http_app`; a key-less start binds loopback only)."""
    import uvicorn

    keys_now = verifier is not None and keyless is None
    check_host(host, keys=keys_now, what="memlane mcp")
    if not keys_now:
        log.warning("no API keys: loopback only")
    app = http_app(
        hub, caller, verifier=verifier, keyless=keyless, host=host, port=port, path=path, body_timeout=body_timeout
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    log.warning("memlane MCP (streamable HTTP) on http://%s:%s%s", host, port, path)
    await server.serve()
