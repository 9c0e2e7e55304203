"""elizaOS-style state composition: providers contribute text, template values and raw data
for one incoming message, and :meth:`StateComposer.compose_state` merges them into a
:class:`State`.

* A :class:`Provider` has a ``name``, an ``async get(message, ctx)`` returning a
  :class:`ProviderResult` (``text``, ``values``, ``data``), a ``position`` (lower first;
  ties keep registration order), and two flags: ``dynamic`` providers join the default set
  only when one of their ``relevance_keywords`` occurs in the message text (case-insensitive,
  whole words), ``private`` providers only when a call names them (``include=`` / ``only=``).
* :class:`StateComposer` binds providers to an :class:`~memlane.memory.AsyncMemory`, runs the
  selected ones concurrently, joins their texts in position order, merges their values and
  keeps each provider's data under its name. A failing provider is logged and reported in
  :attr:`State.errors`; the others still contribute. Composed states are kept in an LRU
  cache (200 entries, elizaOS's size) keyed by the message id, its ids and the provider set.
* Built-in providers (registered by default): ``time``, ``profile`` (Gaia's
  ``<USER_PROFILE>``), ``memory_context`` (the ``<MemoryContext>`` block of
  :func:`memlane.agent.context.assemble_context`) and ``recent_messages`` (the session's tail).

Selection, for ``compose_state(message, include=..., exclude=..., only=...)``:

======================  ==================================================================
call                    providers run
======================  ==================================================================
(no argument)           every non-private provider; a dynamic one only when its keywords
                        match the message
``include=[names]``     the default set plus these (the way to ask for a private provider,
                        or for a dynamic one whatever the message says)
``exclude=[names]``     the default set (plus ``include``) minus these
``only=[names]``        exactly these, private and dynamic ones included
======================  ==================================================================

``only`` cannot be combined with ``include`` or ``exclude``; an unknown name is an error.
(elizaOS spells this ``composeState(message, includeList, onlyInclude, skipCache)``:
``only=names`` is ``(names, true)``, ``include=names`` is ``(names, false)``.)

Sync code: :class:`SyncStateComposer` drives a composer through a :class:`memlane.Memory`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from memlane import inputs
from memlane.agent.context import assemble_context, escape_memory_text
from memlane.errors import InvalidInputError, ScopeError
from memlane.models import TEXT_EVENT_TYPES, Event, Session, new_id
from memlane.sessions import window_events

if TYPE_CHECKING:
    from memlane.memory import AsyncMemory
    from memlane.sync import Memory

log = logging.getLogger("memlane")

#: Composed states kept per composer (elizaOS: a 200-entry LRU).
STATE_CACHE_SIZE = 200
#: Seconds a provider may take before it is reported as failed (None: no limit).
PROVIDER_TIMEOUT = 30.0
#: Events the ``recent_messages`` provider shows by default (elizaOS ``conversationLength``).
RECENT_MESSAGES_LIMIT = 32


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class StateMessage:
    """The message a state is composed for, with the ids that scope every memory read.

    ``id`` keys the state cache: composing the same message twice returns the cached state
    (a new :class:`StateMessage` gets a fresh id, so two messages with the same text never
    share a state). :meth:`from_event` builds one from a session :class:`~memlane.models.Event`.
    """

    text: str
    """The message text (dynamic providers match their keywords against it)."""
    user_id: str | None = None
    """The user who sent it: scopes profile, memory context and the session check."""
    agent_id: str | None = None
    """The agent answering (its namespace)."""
    session_id: str | None = None
    """The conversation it belongs to (``recent_messages``, session memory)."""
    app: str = "default"
    """The session store's app name."""
    id: str = field(default_factory=new_id)
    """Message id (the cache key)."""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidInputError(f"message text must be a string, got {inputs.show(self.text)}")
        inputs.scope_ids(self.user_id, self.agent_id, self.session_id)
        inputs.identifier(self.app, "app")
        inputs.identifier(self.id, "message id", error=InvalidInputError)

    @classmethod
    def from_event(
        cls,
        event: Event,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        app: str = "default",
    ) -> StateMessage:
        """A message from a session event: its text and id (the ids are not part of an event)."""
        if not isinstance(event, Event):
            raise InvalidInputError(f"event must be an Event, got {inputs.show(event)}")
        return cls(text=event.text, user_id=user_id, agent_id=agent_id, session_id=session_id, app=app, id=event.id)


@dataclass
class ProviderResult:
    """What a provider contributes: ``text`` (joined into :attr:`State.text`), ``values``
    (merged into :attr:`State.values`, template variables) and ``data`` (kept as
    ``State.data[provider.name]``)."""

    text: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class State:
    """The composed, ephemeral context for one message (elizaOS ``State``)."""

    message: StateMessage
    """The message it was composed for."""
    text: str = ""
    """The providers' texts in position order, separated by blank lines (empty ones skipped)."""
    values: dict[str, Any] = field(default_factory=dict)
    """All providers' values merged in position order (a later provider wins a key clash)."""
    data: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each provider's raw data under its name (failed providers have none)."""
    providers: list[str] = field(default_factory=list)
    """The providers that ran, in position order (failed ones included)."""
    errors: dict[str, str] = field(default_factory=dict)
    """Provider name -> what went wrong, for providers that raised or timed out."""
    composed_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    """When the providers ran (a cached state keeps its original time)."""

    @property
    def recent_messages(self) -> list[Event]:
        """The ``recent_messages`` provider's events (elizaOS ``recentMessagesData``), or []."""
        events = self.data.get("recent_messages", {}).get("events", [])
        return list(events) if isinstance(events, list) else []

    def copy(self) -> State:
        """A copy whose containers (values, data, providers, errors) can be changed freely."""
        return State(
            message=self.message,
            text=self.text,
            values=dict(self.values),
            data={k: dict(v) for k, v in self.data.items()},
            providers=list(self.providers),
            errors=dict(self.errors),
            composed_at=self.composed_at,
        )


@dataclass(frozen=True)
class ProviderContext:
    """What a provider gets besides the message: the memory and one clock for the whole
    composition (so every provider sees the same "now")."""

    memory: AsyncMemory
    now: datetime
    selected: tuple[str, ...]
    """Names of the providers running in this composition, in position order."""


# --------------------------------------------------------------------------- providers

ProviderOutput = ProviderResult | str | None
ProviderFunction = Callable[[StateMessage, ProviderContext], Awaitable[ProviderOutput]]


class Provider:
    """A source of state. Subclass and implement :meth:`get`, or wrap a coroutine function
    with :class:`FunctionProvider` (or the :meth:`StateComposer.provider` decorator).

    Args:
        name: unique within a composer; ``State.data[name]`` holds its data.
        position: ordering of texts and value merging, lower first (default 0); ties keep
            registration order. Providers always run concurrently.
        dynamic: include by default only when a ``relevance_keywords`` entry occurs in the
            message text as a whole word or phrase, ignoring case.
        relevance_keywords: the keywords of a dynamic provider.
        private: never in the default set; runs only when named in ``include=`` / ``only=``.
        description: what it provides (for listings and docs).
    """

    def __init__(
        self,
        name: str,
        *,
        position: int = 0,
        dynamic: bool = False,
        relevance_keywords: Sequence[str] = (),
        private: bool = False,
        description: str = "",
    ) -> None:
        self.name = inputs.identifier(name, "provider name", error=InvalidInputError)
        self.position = inputs.integer(position, "position", -(2**31), 2**31 - 1)
        self.dynamic = inputs.flag(dynamic, "dynamic")
        self.private = inputs.flag(private, "private")
        if not isinstance(description, str):
            raise InvalidInputError(f"description must be a string, got {inputs.show(description)}")
        self.description = description
        self.relevance_keywords = _keywords(relevance_keywords)
        self._pattern = _keyword_pattern(self.relevance_keywords)

    def relevant(self, text: str) -> bool:
        """True when one of the relevance keywords occurs in ``text`` (whole words, any case)."""
        return self._pattern is not None and self._pattern.search(text) is not None

    async def get(self, message: StateMessage, ctx: ProviderContext) -> ProviderOutput:
        """The provider's contribution for ``message``: a :class:`ProviderResult`, a plain
        text, or None for nothing."""
        raise NotImplementedError(f"{type(self).__name__} must implement get()")

    def __repr__(self) -> str:
        flags = "".join(f", {f}=True" for f in ("dynamic", "private") if getattr(self, f))
        return f"{type(self).__name__}({self.name!r}, position={self.position}{flags})"


class FunctionProvider(Provider):
    """A provider whose :meth:`get` is a coroutine function ``fn(message, ctx)``."""

    def __init__(
        self,
        name: str,
        fn: ProviderFunction,
        *,
        position: int = 0,
        dynamic: bool = False,
        relevance_keywords: Sequence[str] = (),
        private: bool = False,
        description: str = "",
    ) -> None:
        if not callable(fn):
            raise InvalidInputError(f"fn must be a coroutine function, got {inputs.show(fn)}")
        super().__init__(
            name,
            position=position,
            dynamic=dynamic,
            relevance_keywords=relevance_keywords,
            private=private,
            description=description or (fn.__doc__ or "").strip(),
        )
        self.fn = fn

    async def get(self, message: StateMessage, ctx: ProviderContext) -> ProviderOutput:
        return await self.fn(message, ctx)


def _keywords(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidInputError(f"relevance_keywords must be a list of strings, got {inputs.show(value)}")
    out: list[str] = []
    for kw in value:
        if not isinstance(kw, str) or not kw.strip():
            raise InvalidInputError(f"each relevance keyword must be a non-empty string, got {inputs.show(kw)}")
        out.append(kw.strip())
    return tuple(out)


def _keyword_pattern(keywords: Sequence[str]) -> re.Pattern[str] | None:
    """One regex matching any keyword as a whole word / phrase: not inside a longer word
    ("rain" does not match "brain" or "training"); inner whitespace matches any whitespace."""
    if not keywords:
        return None
    alternatives = sorted({r"\s+".join(re.escape(w) for w in kw.split()) for kw in keywords}, key=len, reverse=True)
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


def _as_result(name: str, out: object) -> ProviderResult:
    if out is None:
        return ProviderResult()
    if isinstance(out, str):
        return ProviderResult(text=out)
    if not isinstance(out, ProviderResult):
        raise TypeError(f"provider {name!r} returned {inputs.show(out)}; expected ProviderResult, str or None")
    if not isinstance(out.text, str) or not isinstance(out.values, dict) or not isinstance(out.data, dict):
        raise TypeError(f"provider {name!r} returned a ProviderResult with text not str or values/data not dicts")
    return out


# --------------------------------------------------------------------------- built-ins


class TimeProvider(Provider):
    """``time``: the current UTC time (text, ``values["time"]`` ISO-8601, ``values["timestamp"]``)."""

    def __init__(self, *, position: int = -20) -> None:
        super().__init__("time", position=position, description="The current date and time (UTC).")

    async def get(self, message: StateMessage, ctx: ProviderContext) -> ProviderResult:
        now = ctx.now.astimezone(UTC)
        iso = now.isoformat().replace("+00:00", "Z")
        return ProviderResult(
            text=f"Current time: {now:%A, %Y-%m-%d %H:%M} UTC ({iso})",
            values={"time": iso, "timestamp": now.timestamp()},
            data={"now": now},
        )


class ProfileProvider(Provider):
    """``profile``: :meth:`AsyncMemory.profile` for the message's user (Gaia's session-start
    bullets), in a ``<USER_PROFILE>`` block (``format="xml"``) or after ``About the user:``
    (``format="text"``). Either way each profile line is one escaped bullet (as in the
    ``<MemoryContext>`` block), also in ``values["user_profile"]``; ``data["profile"]`` keeps
    the profile as stored. Nothing without a user or a profile."""

    def __init__(self, *, position: int = -10, format: Literal["xml", "text"] = "xml") -> None:
        inputs.choice(format, "format", ("xml", "text"))
        super().__init__("profile", position=position, description="What memlane knows about the user.")
        self.format = format

    async def get(self, message: StateMessage, ctx: ProviderContext) -> ProviderResult:
        if message.user_id is None:
            return ProviderResult()
        profile = await ctx.memory.profile(message.user_id, agent_id=message.agent_id)
        if not profile:
            return ProviderResult()
        # one escaped bullet per profile line (as in the <MemoryContext> block): a profile line can
        # neither close a tag nor start a line that poses as a turn or another section
        lines = [escape_memory_text(line, one_line=True).lstrip("-• ") for line in profile.splitlines()]
        bullets = "\n".join(f"- {line}" for line in lines if line)
        if not bullets:
            return ProviderResult()
        text = f"<USER_PROFILE>\n{bullets}\n</USER_PROFILE>" if self.format == "xml" else f"About the user:\n{bullets}"
        return ProviderResult(text=text, values={"user_profile": bullets}, data={"profile": profile})


class MemoryContextProvider(Provider):
    """``memory_context``: the ``<MemoryContext>`` block of
    :func:`memlane.agent.context.assemble_context` for the message's session, user and agent.

    Its profile block is off by default (``profile=False``): the ``profile`` provider adds it.
    Pass ``profile=True`` when that provider is not used. Nothing without a user or an agent.
    """

    def __init__(self, *, position: int = 0, profile: bool = False, budget_tokens: int | None = None) -> None:
        super().__init__(
            "memory_context", position=position, description="Long-term memory: consolidated memory and recent facts."
        )
        self.profile = inputs.flag(profile, "profile")
        self.budget_tokens = inputs.optional_integer(budget_tokens, "budget_tokens", 1, inputs.MAX_INT)

    async def get(self, message: StateMessage, ctx: ProviderContext) -> ProviderResult:
        if message.user_id is None and message.agent_id is None:
            return ProviderResult()
        # Session memory only for a session the store knows to be this user's: a deleted or
        # foreign session id must not surface another conversation's reflections.
        session = await _owned_session(ctx.memory, message)
        text = await assemble_context(
            ctx.memory,
            session_id=session.id if session is not None else None,
            user_id=message.user_id,
            agent_id=message.agent_id,
            budget_tokens=self.budget_tokens,
            profile=self.profile,
            now=ctx.now,
        )
        return ProviderResult(text=text, values={"memory_context": text}, data={"context": text})


async def _owned_session(memory: AsyncMemory, message: StateMessage) -> Session | None:
    """The message's session (None without one or when the store has no such session).

    Raises:
        ScopeError: the session has participants and ``message.user_id`` is not one of them.
    """
    if message.session_id is None:
        return None
    session = await memory.sessions.get_session(message.session_id, app=message.app)
    if session is not None and session.user_ids and message.user_id not in session.user_ids:
        raise ScopeError(f"session {message.session_id!r} is not a conversation of user {message.user_id!r}")
    return session


class RecentMessagesProvider(Provider):
    """``recent_messages``: the last ``limit`` conversational events of the message's session
    (user and agent turns, delegations), oldest first, as ``role: text`` lines (the text
    escaped like memory text, continuation lines indented).

    The session must be the message user's: a session with participants that do not include
    ``message.user_id`` raises :class:`~memlane.errors.ScopeError` (reported in
    :attr:`State.errors`), so one user can never read another's conversation by its id.
    """

    def __init__(self, *, position: int = 100, limit: int = RECENT_MESSAGES_LIMIT) -> None:
        super().__init__("recent_messages", position=position, description="The conversation so far.")
        self.limit = inputs.integer(limit, "limit", 1, 10_000)

    async def get(self, message: StateMessage, ctx: ProviderContext) -> ProviderResult:
        session = await _owned_session(ctx.memory, message)
        if session is None:
            return ProviderResult(data={"events": []})
        events = [e for e in session.events if e.type in TEXT_EVENT_TYPES and e.text.strip()]
        events = [e for e in window_events(events, last_n=self.limit) if e.id != message.id]
        lines = [f"{_speaker(e)}: {_one_entry(e.text)}" for e in events]
        text = "# Recent messages\n" + "\n".join(lines) if lines else ""
        return ProviderResult(text=text, values={"recent_messages": "\n".join(lines)}, data={"events": events})


def _speaker(event: Event) -> str:
    role = event.role
    if role == "user":
        name = event.author if event.author not in ("", "user") else "user"
    else:
        name = "assistant" if role == "assistant" else event.author or role
    return escape_memory_text(name, one_line=True) or role


def _one_entry(text: str) -> str:
    """A message's text as one entry of the transcript: escaped as memory text (no tag, special
    token or bidi control) and continuation lines indented, so a message cannot start a line
    that looks like another speaker's turn."""
    return "\n  ".join(escape_memory_text(text).splitlines())


def builtin_providers() -> list[Provider]:
    """Fresh instances of the built-ins: time (-20), profile (-10), memory_context (0),
    recent_messages (100)."""
    return [TimeProvider(), ProfileProvider(), MemoryContextProvider(), RecentMessagesProvider()]


# --------------------------------------------------------------------------- composer

_CacheKey = tuple[str, str | None, str | None, str | None, str, tuple[str, ...]]


class StateComposer:
    """A registry of providers bound to one memory, composing :class:`State` per message.

    Args:
        memory: the engine the built-ins (and your providers, through ``ctx.memory``) read.
        providers: providers to register, after the built-ins.
        builtins: register :func:`builtin_providers` first (default True).
        cache_size: composed states kept (LRU; elizaOS 200). 0 disables the cache.
        timeout: seconds one provider may take (None: no limit); a slower one is reported
            in :attr:`State.errors` and contributes nothing.
    """

    def __init__(
        self,
        memory: AsyncMemory,
        providers: Iterable[Provider] = (),
        *,
        builtins: bool = True,
        cache_size: int = STATE_CACHE_SIZE,
        timeout: float | None = PROVIDER_TIMEOUT,
    ) -> None:
        from memlane.memory import AsyncMemory

        if not isinstance(memory, AsyncMemory):
            raise InvalidInputError(
                f"memory must be an AsyncMemory, got {inputs.show(memory)} (sync code: use SyncStateComposer)"
            )
        self.memory = memory
        self.cache_size = inputs.integer(cache_size, "cache_size", 0, 1_000_000)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
            raise InvalidInputError(f"timeout must be a positive number of seconds or None, got {inputs.show(timeout)}")
        self.timeout = timeout
        self._providers: dict[str, Provider] = {}
        self._cache: OrderedDict[_CacheKey, State] = OrderedDict()
        self._erasures = memory.erasures
        for provider in [*(builtin_providers() if inputs.flag(builtins, "builtins") else []), *providers]:
            self.register(provider)

    # ------------------------------------------------------------------ registry
    def register(self, provider: Provider, *, replace: bool = False) -> Provider:
        """Add a provider (a name already registered needs ``replace=True``; a replaced
        provider keeps its place in the tie order). Clears the state cache."""
        if not isinstance(provider, Provider):
            raise InvalidInputError(f"expected a Provider, got {inputs.show(provider)}")
        if provider.name in self._providers and not replace:
            raise InvalidInputError(f"a provider named {provider.name!r} is registered; pass replace=True")
        self._providers[provider.name] = provider
        self.clear_cache()
        return provider

    def unregister(self, name: str) -> Provider:
        """Remove and return a provider. Clears the state cache."""
        provider = self._providers.pop(self._known(name))
        self.clear_cache()
        return provider

    def provider(
        self,
        name: str,
        *,
        position: int = 0,
        dynamic: bool = False,
        relevance_keywords: Sequence[str] = (),
        private: bool = False,
        description: str = "",
    ) -> Callable[[ProviderFunction], ProviderFunction]:
        """Decorator registering a coroutine function ``fn(message, ctx)`` as a provider."""

        def decorate(fn: ProviderFunction) -> ProviderFunction:
            self.register(
                FunctionProvider(
                    name,
                    fn,
                    position=position,
                    dynamic=dynamic,
                    relevance_keywords=relevance_keywords,
                    private=private,
                    description=description,
                )
            )
            return fn

        return decorate

    @property
    def providers(self) -> list[Provider]:
        """Registered providers in position order (ties: registration order)."""
        order = {name: i for i, name in enumerate(self._providers)}
        return sorted(self._providers.values(), key=lambda p: (p.position, order[p.name]))

    def __getitem__(self, name: str) -> Provider:
        return self._providers[self._known(name)]

    def __contains__(self, name: object) -> bool:
        return name in self._providers

    def _known(self, name: object) -> str:
        if not isinstance(name, str) or name not in self._providers:
            known = ", ".join(sorted(self._providers)) or "none"
            raise InvalidInputError(f"no provider named {inputs.show(name)}; registered: {known}")
        return name

    # ------------------------------------------------------------------ cache
    def clear_cache(self) -> None:
        """Forget every composed state."""
        self._cache.clear()

    @property
    def cache_len(self) -> int:
        """States in the cache now."""
        return len(self._cache)

    # ------------------------------------------------------------------ compose
    def select(
        self,
        message: StateMessage,
        *,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        only: Iterable[str] | None = None,
    ) -> list[Provider]:
        """The providers :meth:`compose_state` would run for ``message``, in position order
        (see the module docstring for the rules)."""
        if not isinstance(message, StateMessage):
            raise InvalidInputError(
                f"message must be a StateMessage, got {inputs.show(message)} "
                "(StateMessage.from_event converts an Event)"
            )
        include_names = _names(include, "include") or frozenset()
        exclude_names = _names(exclude, "exclude") or frozenset()
        only_names = _names(only, "only")
        for name in include_names | exclude_names | (only_names or frozenset()):
            self._known(name)
        if only_names is not None:
            if include_names or exclude_names:
                raise InvalidInputError("only= names the exact providers: it cannot be combined with include/exclude")
            if not only_names:
                raise InvalidInputError("only= must name at least one provider")
            return [p for p in self.providers if p.name in only_names]
        both = include_names & exclude_names
        if both:
            raise InvalidInputError(f"providers both included and excluded: {', '.join(sorted(both))}")
        return [
            p
            for p in self.providers
            if p.name in include_names or (p.name not in exclude_names and _by_default(p, message.text))
        ]

    async def compose_state(
        self,
        message: StateMessage,
        *,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        only: Iterable[str] | None = None,
        skip_cache: bool = False,
        now: datetime | None = None,
    ) -> State:
        """Compose the state for ``message``.

        Args:
            message: the incoming message and its ids.
            include: provider names added to the default set (private or dynamic ones too).
            exclude: provider names removed from the default set.
            only: exactly these providers (cannot be combined with include/exclude).
            skip_cache: run the providers even when this message's state is cached; the
                fresh state replaces the cached one.
            now: the clock for this composition (default: the current UTC time).

        Returns:
            A :class:`State` (a copy: changing it does not change the cached one). States
            with provider errors are not cached.
        """
        selected = self.select(message, include=include, exclude=exclude, only=only)
        skip_cache = inputs.flag(skip_cache, "skip_cache")
        when = inputs.timestamp(now, "now") if now is not None else datetime.now(UTC)
        assert when is not None
        names = tuple(p.name for p in selected)
        key: _CacheKey = (message.id, message.user_id, message.agent_id, message.session_id, message.app, names)
        if self._erasures != self.memory.erasures:  # a user was forgotten: cached states may hold their words
            self.clear_cache()
            self._erasures = self.memory.erasures
        if not skip_cache and key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key].copy()
        await self.memory.open()
        ctx = ProviderContext(memory=self.memory, now=when, selected=names)
        outcomes = await asyncio.gather(*(self._run(p, message, ctx) for p in selected))
        state = State(message=message, providers=list(names), composed_at=when)
        texts: list[str] = []
        for provider, outcome in zip(selected, outcomes, strict=True):
            if isinstance(outcome, str):
                state.errors[provider.name] = outcome
                continue
            if outcome.text.strip():
                texts.append(outcome.text.strip())
            state.values.update(outcome.values)
            state.data[provider.name] = dict(outcome.data)
        state.text = "\n\n".join(texts)
        if self.cache_size and not state.errors:
            self._cache[key] = state
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return state.copy()

    async def _run(self, provider: Provider, message: StateMessage, ctx: ProviderContext) -> ProviderResult | str:
        """The provider's result, or a description of its failure (logged)."""
        try:
            out = await asyncio.wait_for(provider.get(message, ctx), self.timeout)
            return _as_result(provider.name, out)
        except TimeoutError:
            error = f"TimeoutError: no result within {self.timeout} s"
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        log.warning("memlane: state provider %r failed (%s); the state is composed without it", provider.name, error)
        return error


def _by_default(provider: Provider, text: str) -> bool:
    """In the default set: not private; dynamic ones only when their keywords match ``text``."""
    return not provider.private and (not provider.dynamic or provider.relevant(text))


def _names(value: Iterable[str] | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidInputError(f"{what} must be a list of provider names, got {inputs.show(value)}")
    return frozenset(value)


# --------------------------------------------------------------------------- sync


class SyncStateComposer:
    """:class:`StateComposer` for sync code: binds to a :class:`memlane.Memory` and runs the
    (async) providers on that memory's own event-loop thread.

    Example:
        >>> with Memory("app.db") as m:  # doctest: +SKIP
        ...     composer = SyncStateComposer(m)
        ...     state = composer.compose_state(StateMessage("hi", user_id="alice"))
    """

    def __init__(
        self,
        memory: Memory,
        providers: Iterable[Provider] = (),
        *,
        builtins: bool = True,
        cache_size: int = STATE_CACHE_SIZE,
        timeout: float | None = PROVIDER_TIMEOUT,
    ) -> None:
        from memlane.sync import Memory

        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a memlane.Memory, got {inputs.show(memory)}")
        self._memory = memory
        self.composer = StateComposer(
            memory.engine, providers, builtins=builtins, cache_size=cache_size, timeout=timeout
        )

    def register(self, provider: Provider, *, replace: bool = False) -> Provider:
        """See :meth:`StateComposer.register`."""
        return self.composer.register(provider, replace=replace)

    def unregister(self, name: str) -> Provider:
        """See :meth:`StateComposer.unregister`."""
        return self.composer.unregister(name)

    @property
    def providers(self) -> list[Provider]:
        """Registered providers in position order."""
        return self.composer.providers

    def clear_cache(self) -> None:
        """Forget every composed state."""
        self.composer.clear_cache()

    def compose_state(
        self,
        message: StateMessage,
        *,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        only: Iterable[str] | None = None,
        skip_cache: bool = False,
        now: datetime | None = None,
    ) -> State:
        """See :meth:`StateComposer.compose_state` (blocking)."""
        return self._memory.run(
            self.composer.compose_state(
                message, include=include, exclude=exclude, only=only, skip_cache=skip_cache, now=now
            )
        )


__all__ = [
    "PROVIDER_TIMEOUT",
    "RECENT_MESSAGES_LIMIT",
    "STATE_CACHE_SIZE",
    "FunctionProvider",
    "MemoryContextProvider",
    "ProfileProvider",
    "Provider",
    "ProviderContext",
    "ProviderFunction",
    "ProviderOutput",
    "ProviderResult",
    "RecentMessagesProvider",
    "State",
    "StateComposer",
    "StateMessage",
    "SyncStateComposer",
    "TimeProvider",
    "builtin_providers",
]
