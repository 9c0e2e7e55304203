"""The always-in-context memory block (Eden's ``<MemoryContext>``) and the windowed replay of a
session, assembled from the stores for the model at the start of a turn.

This module takes stores, not the engine: :meth:`AsyncMemory.context
<memlane.memory.AsyncMemory.context>` and :meth:`~memlane.memory.AsyncMemory.window` call it
with their own, and :mod:`memlane.agent.context` offers the same with an engine argument
(``assemble_context(memory, ...)``).

::

    <MemoryContext>
      <USER_PROFILE>                        Gaia: <= 20 importance-ranked bullets
      - Name is Alice ...</USER_PROFILE>
      <AgentMemory>                         each scope: the consolidated blob (VERSION: n ...)
        <Consolidated>VERSION: 3 ...</Consolidated>
        <RecentReflections>                 and the reflections not yet absorbed into it
        - ...</RecentReflections>
      </AgentMemory>
      <UserMemory>...</UserMemory>
      <SessionMemory>...</SessionMemory>
      <Facts>                               FIFO: <= 40 facts formed in the last 7 days, newest
        - [user] Alice's email is ... (1h ago)   first, scope tag and age
      </Facts>
    </MemoryContext>

**Memory text is data.** Every stored text is escaped (``&``, ``<``, ``>`` and their
look-alikes become entities) so no content can close a tag or open a section, and a fact or
reflection is one line (its line breaks become spaces) so it cannot pose as another bullet.

**Budget.** With ``budget_tokens`` the sections are packed by priority (profile, user blob,
agent blob, session blob, session reflections, user reflections, agent reflections, facts),
whole items first; the first item that does not fit is cut at a word boundary (marked ``…``;
inside a word longer than 40 characters) and everything after it in that section is dropped.
The same memory and budget give the same text, and the text (tags included) never exceeds the budget.

**Cache.** An assembled context is kept (persisted, in the store's ``context_cache`` when the
backend has one) for 5 minutes and reused while the memory it was built from is unchanged:
each entry carries stamps of the fact partitions and reflection scopes it read, which change
on any write by any process. ``forget`` drops every entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from memlane import inputs
from memlane.agent.config import CONFIGURED, WINDOW_TURNS, ConfiguredInt, RecallConfig
from memlane.errors import InvalidInputError, NotFoundError, ScopeError
from memlane.ingest.documents import CHARS_PER_TOKEN
from memlane.models import Event, Fact, FactFilter, Scope, as_utc, utcnow
from memlane.sessions import window_events
from memlane.stores.base import (
    CachedContext,
    ContextCache,
    FactStore,
    ReflectionKey,
    ReflectionStore,
    SessionStore,
    TemporalReadable,
)

__all__ = [
    "CONTEXT_TTL",
    "FACTS_FIFO_LIMIT",
    "FACTS_FIFO_MAX_AGE",
    "ContextQuery",
    "LocalContextCache",
    "ProfileOf",
    "WindowQuery",
    "build_context",
    "escape_memory_text",
    "estimate_tokens",
    "format_age",
    "pack",
    "read_window",
]

#: Eden ``FACTS_FIFO_LIMIT``: at most this many recent facts in the context.
FACTS_FIFO_LIMIT = 40
#: Eden ``FACTS_FIFO_MAX_AGE_HOURS`` (7 days): older facts are left to ``search_facts``.
FACTS_FIFO_MAX_AGE = timedelta(days=7)
#: Eden: the assembled context is cached for 5 minutes.
CONTEXT_TTL = timedelta(minutes=5)
#: Gaia ``sessions.window_turns``: user turns replayed to the model (the engine's
#: :class:`~memlane.agent.config.RecallConfig` holds the value in use).
WINDOW_USER_TURNS = WINDOW_TURNS
#: Largest accepted ``budget_tokens``.
MAX_BUDGET_TOKENS = 10_000_000

_SECTION_TAGS = {"agent": "AgentMemory", "user": "UserMemory", "session": "SessionMemory"}
_ESCAPES = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "\uff1c": "&#xff1c;",  # fullwidth < and >
    "\uff1e": "&#xff1e;",
    "\u2039": "&#x2039;",  # single angle quotation marks
    "\u203a": "&#x203a;",
    "\ufe64": "&#xfe64;",  # small < and >
    "\ufe65": "&#xfe65;",
}
_ESCAPE_RE = re.compile("[" + re.escape("".join(_ESCAPES)) + "]")
# Controls (but tab/newline), line/paragraph separators and bidi overrides: invisible
# characters that could hide or reorder text around the tags.
_INVISIBLE_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape_memory_text(text: str, *, one_line: bool = False) -> str:
    """Stored memory text made safe to place between the context's tags: markup characters
    (and their look-alikes) become entities, invisible control and bidi characters go, and
    with ``one_line`` every run of whitespace (line breaks included) becomes one space."""
    text = _INVISIBLE_RE.sub(" ", text)
    text = _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)
    if one_line:
        return " ".join(text.split())
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def format_age(then: datetime, now: datetime) -> str:
    """Eden's age suffix: ``just now``, ``12m ago``, ``5h ago``, ``3d ago``."""
    seconds = max(0.0, (as_utc(now) - as_utc(then)).total_seconds())
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    return f"{int(seconds // 86400)}d ago"


def estimate_tokens(text: str) -> int:
    """memlane's token estimate (``CHARS_PER_TOKEN`` characters a token, rounded up)."""
    return -(-len(text) // CHARS_PER_TOKEN)


# --------------------------------------------------------------------------- model


@dataclass
class _Section:
    """One packable section: a tag path and its items (lines or blobs)."""

    name: str  # "profile", "agent.consolidated", "facts", ...
    items: list[str]
    priority: int
    kept: list[str] = field(default_factory=list)


@dataclass
class _Parts:
    profile: str | None = None
    consolidated: dict[str, str] = field(default_factory=dict)  # scope -> blob text (escaped)
    reflections: dict[str, list[str]] = field(default_factory=dict)  # scope -> escaped bullets
    facts: list[str] = field(default_factory=list)  # escaped "- [user] text (5h ago)" lines


_PRIORITY = (
    "profile",
    "user.consolidated",
    "agent.consolidated",
    "session.consolidated",
    "session.reflections",
    "user.reflections",
    "agent.reflections",
    "facts",
)


def _sections(parts: _Parts) -> list[_Section]:
    out: list[_Section] = []
    for name in _PRIORITY:
        if name == "profile":
            items = parts.profile.splitlines() if parts.profile else []
        elif name == "facts":
            items = list(parts.facts)
        else:
            scope, kind = name.split(".")
            if kind == "consolidated":
                blob = parts.consolidated.get(scope, "")
                items = blob.splitlines() if blob else []
            else:
                items = list(parts.reflections.get(scope, []))
        if items:
            out.append(_Section(name, items, _PRIORITY.index(name)))
    return out


def _render(sections: Sequence[_Section], *, kept: bool) -> str:
    """The XML text of ``sections`` (their kept items, or all of them), in display order."""
    by_name = {s.name: (s.kept if kept else s.items) for s in sections}
    body: list[str] = []
    profile = by_name.get("profile")
    if profile:
        body.append("  <USER_PROFILE>\n" + "\n".join(f"  {line}" for line in profile) + "\n  </USER_PROFILE>")
    for scope in ("agent", "user", "session"):
        blob = by_name.get(f"{scope}.consolidated")
        refl = by_name.get(f"{scope}.reflections")
        if not blob and not refl:
            continue
        tag = _SECTION_TAGS[scope]
        inner: list[str] = []
        if blob:
            inner.append("    <Consolidated>" + "\n".join(blob) + "</Consolidated>")
        if refl:
            lines = "\n".join(f"    {r}" for r in refl)
            inner.append(f"    <RecentReflections>\n{lines}\n    </RecentReflections>")
        body.append(f"  <{tag}>\n" + "\n".join(inner) + f"\n  </{tag}>")
    facts = by_name.get("facts")
    if facts:
        body.append("  <Facts>\n" + "\n".join(f"    {f}" for f in facts) + "\n  </Facts>")
    if not body:
        return ""
    return "<MemoryContext>\n" + "\n".join(body) + "\n</MemoryContext>"


#: A cut falls back inside a word only when the word boundary before it is further back than
#: this (a 10,000-character "word" is cut, not dropped with the rest of its section).
MAX_WORD_CUT = 40


def _clip(item: str, length: int) -> str:
    return item[:length].rstrip() + " …"


def _cut(item: str, fits: Callable[[str], bool]) -> str | None:
    """The longest prefix of ``item`` (plus ``…``) that ``fits``, cut at a word boundary unless
    the word it falls in is longer than :data:`MAX_WORD_CUT`; None when nothing fits."""
    lo, hi, best = 1, len(item) - 1, 0
    while lo <= hi:  # fits() is monotone in the prefix length
        mid = (lo + hi) // 2
        if fits(_clip(item, mid)):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best == 0:
        return None
    space = item.rfind(" ", 0, best + 1)
    if space > 0 and best - space <= MAX_WORD_CUT and fits(_clip(item, space)):
        return _clip(item, space)
    return _clip(item, best)


def _checked_counter(count_tokens: Callable[[str], int]) -> Callable[[str], int]:
    """``count_tokens`` refusing a result that is not a token count (a negative or fractional
    count would let the text overrun the budget; a string would fail deep in the packing)."""

    def count(text: str) -> int:
        n = count_tokens(text)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidInputError(f"count_tokens must return a whole number >= 0, got {inputs.show(n)}")
        return n

    return count


def pack(parts: _Parts, budget_tokens: int | None, count_tokens: Callable[[str], int] = estimate_tokens) -> str:
    """Render ``parts``; with a budget, keep sections by priority so the text fits."""
    sections = _sections(parts)
    if budget_tokens is None:
        for s in sections:
            s.kept = list(s.items)
        return _render(sections, kept=True)
    for s in sorted(sections, key=lambda s: s.priority):
        for item in s.items:
            s.kept.append(item)
            if count_tokens(_render(sections, kept=True)) <= budget_tokens:
                continue
            s.kept.pop()

            def fits(candidate: str, s: _Section = s) -> bool:
                s.kept.append(candidate)
                ok = count_tokens(_render(sections, kept=True)) <= budget_tokens
                s.kept.pop()
                return ok

            cut = _cut(item, fits)
            if cut is not None:
                s.kept.append(cut)
            break  # the rest of this section is dropped; lower priorities may still fit
    return _render(sections, kept=True)


# --------------------------------------------------------------------------- cache


class LocalContextCache:
    """An in-process :class:`~memlane.stores.base.ContextCache` (LRU, 1,000 entries) for
    backends without a persisted one."""

    def __init__(self, max_entries: int = 1000) -> None:
        self._entries: OrderedDict[str, CachedContext] = OrderedDict()
        self._max = max_entries

    async def get_context(self, key: str) -> CachedContext | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    async def put_context(self, entry: CachedContext) -> None:
        self._entries[entry.key] = entry
        self._entries.move_to_end(entry.key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    async def drop_contexts(self, *, user_id: str | None = None, session_id: str | None = None) -> int:
        doomed = [
            k
            for k, e in self._entries.items()
            if (user_id is None or e.user_id == user_id) and (session_id is None or e.session_id == session_id)
        ]
        for k in doomed:
            del self._entries[k]
        return len(doomed)


# --------------------------------------------------------------------------- assembly

#: Distils a user's profile: ``(user_id, agent_id) -> bullets`` (the engine's ``profile``).
ProfileOf = Callable[[str, str | None], Awaitable[str | None]]


def _reflection_keys(user_id: str | None, agent_id: str | None, session_id: str | None) -> list[ReflectionKey]:
    keys: list[ReflectionKey] = []
    if agent_id:
        keys.append(ReflectionKey("agent", agent_id))
    if user_id:
        keys.append(ReflectionKey("user", agent_id, user_id))
    if session_id:
        keys.append(ReflectionKey("session", agent_id, user_id, session_id))
    return keys


async def _stamp(
    facts: FactStore, reflections: ReflectionStore, scope: Scope | None, keys: Sequence[ReflectionKey]
) -> str:
    fact_stamp = await facts.memory_stamp(scope.partition_filter()) if scope is not None else ""
    reflection_stamp = await reflections.reflection_stamp(keys)
    return f"{fact_stamp}:{reflection_stamp}"


async def _gather(
    facts: FactStore,
    reflections: ReflectionStore,
    profile_of: ProfileOf,
    scope: Scope | None,
    keys: Sequence[ReflectionKey],
    *,
    now: datetime,
    profile: bool,
    fifo_limit: int,
    as_of: datetime | None = None,
) -> _Parts:
    parts = _Parts()
    for key in keys:
        blob = await reflections.get_consolidated(
            scope=key.scope, agent_id=key.agent_id, user_id=key.user_id, session_id=key.session_id
        )
        made = blob.last_consolidated_at if blob is not None else None
        if blob is not None and as_of is not None and (made is None or made > as_of):
            blob = None  # only the latest blob is kept: one written after as_of did not exist then
        if blob is not None and blob.consolidated_content.strip():
            parts.consolidated[key.scope] = escape_memory_text(blob.consolidated_content)
        pending = await reflections.list_reflections(
            scope=key.scope,
            agent_id=key.agent_id,
            user_id=key.user_id,
            session_id=key.session_id,
            absorbed=False if as_of is None else None,
        )
        if as_of is not None:  # then: formed by as_of and not yet in the blob shown
            since = made if blob is not None else None
            pending = [r for r in pending if r.formed_at <= as_of and (since is None or r.formed_at > since)]
        bullets = [escape_memory_text(r.content, one_line=True).lstrip("-• ") for r in pending]
        if bullets := [b for b in bullets if b]:
            parts.reflections[key.scope] = [f"- {b}" for b in bullets]
    if scope is None:
        return parts
    if profile and scope.user_id is not None:
        text = await profile_of(scope.user_id, scope.agent_id)
        if text:
            lines = [escape_memory_text(line, one_line=True).lstrip("-• ") for line in text.splitlines()]
            parts.profile = "\n".join(f"- {line}" for line in lines if line) or None
    parts.facts = [
        f"- [{f.scope}] {escape_memory_text(f.content, one_line=True)} ({format_age(f.formed_at, now)})"
        for f in await _recent_facts(facts, scope, now=now, limit=fifo_limit, as_of=as_of)
    ]
    return parts


async def _recent_facts(
    facts: FactStore, scope: Scope, *, now: datetime, limit: int, as_of: datetime | None = None
) -> list[Fact]:
    """Eden's FIFO: facts (kind ``fact``) formed within 7 days, newest first, at most ``limit``
    (with ``as_of``: of the facts valid then, as they were then)."""
    if limit == 0:
        return []
    oldest = as_utc(now) - FACTS_FIFO_MAX_AGE
    out: list[Fact] = []
    if as_of is not None and isinstance(facts, TemporalReadable):
        snap = await facts.snapshot(scope, as_of=as_of, valid_at=None, filter=FactFilter(kind="fact"))
        out = [f for f, _ in snap if oldest <= f.formed_at <= as_utc(now) + timedelta(minutes=1)]
        return sorted(out, key=lambda f: f.formed_at, reverse=True)[:limit]
    cursor: str | None = None
    while len(out) < limit:
        page = await facts.list_facts(scope, limit=200, cursor=cursor, filter=FactFilter(kind="fact"))
        out += [f for f in page.items if oldest <= f.formed_at <= as_utc(now) + timedelta(minutes=1)]
        cursor = page.next_cursor
        if cursor is None or (page.items and page.items[-1].formed_at < oldest):
            break
    out.sort(key=lambda f: f.formed_at, reverse=True)
    return out[:limit]


@dataclass(frozen=True)
class ContextQuery:
    """The checked arguments of one context assembly (see :meth:`checked`)."""

    user_id: str | None
    agent_id: str | None
    session_id: str | None
    budget_tokens: int | None
    profile: bool
    facts_limit: int
    now: datetime
    use_cache: bool
    count_tokens: Callable[[str], int] | None
    as_of: datetime | None = None
    """The block as memory held it then (docs/temporal.md): read from the snapshot, never cached."""

    @classmethod
    def checked(
        cls,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        budget_tokens: int | None = None,
        profile: bool = True,
        facts_limit: int = FACTS_FIFO_LIMIT,
        now: datetime | None = None,
        use_cache: bool = True,
        count_tokens: Callable[[str], int] | None = None,
        as_of: datetime | str | None = None,
    ) -> ContextQuery:
        """The arguments of :func:`memlane.agent.context.assemble_context`, checked.

        Raises:
            ScopeError: none of ``session_id``, ``user_id``, ``agent_id``.
            InvalidInputError: a bad id, budget or limit.
        """
        user_id, agent_id, session_id = inputs.scope_ids(user_id, agent_id, session_id)
        if not (user_id or agent_id or session_id):
            raise ScopeError("assemble_context needs user_id, agent_id and/or session_id")
        if budget_tokens is not None:
            budget_tokens = inputs.integer(budget_tokens, "budget_tokens", 1, MAX_BUDGET_TOKENS)
        facts_limit = inputs.integer(facts_limit, "facts_limit", 0, 1000)
        profile, use_cache = inputs.flag(profile, "profile"), inputs.flag(use_cache, "use_cache")
        if count_tokens is not None and not callable(count_tokens):
            raise InvalidInputError("count_tokens must be a callable str -> int")
        when = inputs.timestamp(as_of, "as_of")
        now = inputs.timestamp(now, "now") or when or utcnow()
        args = (budget_tokens, profile, facts_limit, now, use_cache, count_tokens, when)
        return cls(user_id, agent_id, session_id, *args)


async def build_context(
    facts: FactStore, reflections: ReflectionStore, contexts: ContextCache, profile_of: ProfileOf, q: ContextQuery
) -> str:
    """The ``<MemoryContext>`` block ``q`` asks for, read from the stores (see
    :func:`memlane.agent.context.assemble_context` for the arguments), cached in ``contexts``
    while the stamps of what it read are unchanged."""
    user_id, agent_id, session_id = q.user_id, q.agent_id, q.session_id
    scope = Scope(user_id=user_id, agent_id=agent_id) if (user_id or agent_id) else None
    keys = _reflection_keys(user_id, agent_id, session_id)
    key = hashlib.blake2b(
        json.dumps(
            [user_id, agent_id, session_id, q.budget_tokens, q.profile, q.facts_limit, q.count_tokens is None]
        ).encode(),
        digest_size=16,
    ).hexdigest()
    stamp = await _stamp(facts, reflections, scope, keys)
    cached = q.count_tokens is None and q.as_of is None  # a look at the past is not cached
    if q.use_cache and cached:
        entry = await contexts.get_context(key)
        if entry is not None and entry.stamp == stamp and timedelta(0) <= q.now - entry.built_at < CONTEXT_TTL:
            return entry.text
    parts = await _gather(
        facts,
        reflections,
        profile_of,
        scope,
        keys,
        now=q.now,
        profile=q.profile,
        fifo_limit=q.facts_limit,
        as_of=q.as_of,
    )
    text = pack(parts, q.budget_tokens, _checked_counter(q.count_tokens) if q.count_tokens else estimate_tokens)
    if cached:
        # The stamp read before gathering: a write racing with the gather makes the entry stale
        # at once (its stamp no longer matches), never wrongly fresh.
        await contexts.put_context(
            CachedContext(key, stamp, text, q.now, user_id=user_id, agent_id=agent_id, session_id=session_id)
        )
    return text


# --------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class WindowQuery:
    """The checked arguments of one session replay (see :meth:`checked`)."""

    session_id: str
    app: str
    user_turns: int | None
    last_n: int | None

    @classmethod
    def checked(
        cls,
        recall: RecallConfig,
        session_id: str,
        *,
        app: str = "default",
        user_turns: ConfiguredInt = CONFIGURED,
        last_n: ConfiguredInt = CONFIGURED,
    ) -> WindowQuery:
        """The arguments of :func:`memlane.agent.context.replay_window`, checked; a
        :data:`~memlane.agent.config.CONFIGURED` bound takes ``recall``'s value."""
        user_turns = recall.window_turns if user_turns is CONFIGURED else user_turns
        last_n = recall.context_limit if last_n is CONFIGURED else last_n
        session_id, app = inputs.identifier(session_id, "session_id"), inputs.identifier(app, "app")
        user_turns = inputs.optional_integer(user_turns, "user_turns", 0, inputs.MAX_INT)
        last_n = inputs.optional_integer(last_n, "last_n", 0, inputs.MAX_INT)
        return cls(session_id, app, user_turns, last_n)


async def read_window(sessions: SessionStore, q: WindowQuery) -> list[Event]:
    """The tail of the session ``q`` names: the last ``user_turns`` user turns (Gaia) with
    everything after them, and at most the last ``last_n`` events (KAOS
    ``memory_context_limit``); the shorter window wins; oldest first.

    Raises:
        NotFoundError: no such session.
    """
    session = await sessions.get_session(q.session_id, app=q.app)
    if session is None:
        raise NotFoundError(f"no session {q.session_id!r} in app {q.app!r}")
    return window_events(session.events, last_n=q.last_n, user_turns=q.user_turns)
