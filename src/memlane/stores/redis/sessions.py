"""``RedisSessionStore``: sessions shared by every replica (KAOS ``RedisMemory``, :mod:`memlane.compat`).

The same API, validation and bounds as :class:`~memlane.stores.local.LocalSessionStore`: at most
``max_sessions`` sessions (over all apps; creating one more first evicts the oldest-created
10%, at least one, of the new session's own users' sessions: never another user's, a
:class:`~memlane.errors.StoreFullError` when there is none) and ``max_session_events``
events per session (the oldest dropped first); plus an optional ``ttl``: a session untouched
for ``ttl`` seconds is gone.

Keys, under the URL's ``prefix`` (``P``), with ``m`` = ``enc(app):enc(session id)``
(:func:`~memlane.stores.redis.url.encode_part`: no ``:`` inside a component, so no two
sessions share a key whatever their ids hold)::

    P session:{m}            hash: doc (JSON identity + state), users, ukeys, updated, order
    P events:{m}             list: one entry per event, oldest first
    P sessions:app:{enc app} zset: session id -> last activity (microseconds)
    P sessions:user:{enc u}  set: the members m the user takes part in (all apps)
    P sessions:created       zset: m -> creation counter (eviction order, counts)
    P sessions:expiry        zset: m -> when the session expires (ms, server clock; with ttl)
    P sessions:seq           the creation counter

Every operation is one Lua script, so it is atomic across replicas: two replicas creating
the same id race inside Redis and exactly one wins; ``pop_event`` removes exactly one event.
Each script first drops the sessions whose ``ttl`` ran out (from every index), reading
Redis's own clock, so all replicas agree on what expired. Activity (create, resume with
``get_or_create_session``, ``add_event``, ``pop_event``) restarts the ``ttl``; the keys also
carry a Redis expiry of twice the ``ttl``, so a prefix nobody uses any more empties itself.
All replicas sharing a prefix must use the same ``ttl`` and bounds.

Timestamps shown on sessions and events (``created_at``, ``updated_at``) come from the writing
process's clock, like the other stores; ``ttl`` expiry uses Redis's clock only.

Scripts reach keys they compute (not declared ``KEYS``) and write after reading ``TIME``
(Redis >= 5): use a single Redis server (or a Sentinel-managed primary), not Redis Cluster.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from redis.asyncio import Redis

from memlane.errors import InvalidInputError, NotFoundError, StoreFullError
from memlane.models import Directory, Event, EventType, Session, UserActivity, utcnow
from memlane.sessions import (
    check_app,
    check_json,
    check_limit,
    check_session_id,
    check_user_ids,
    directory_apps,
    directory_users,
    event_type_filter,
    export_session,
    full_message,
    new_session,
    prepare_event,
    to_utc,
)
from memlane.stores.kaos import KaosNames
from memlane.stores.redis._client import RedisStore, ScriptRunner, client_for, connect, text, to_us
from memlane.stores.redis.url import DEFAULT_PREFIX, encode_part, parse_redis_url

#: When full, ``ceil(max_sessions / EVICT_DIVISOR)`` sessions are evicted (KAOS: oldest 10%).
EVICT_DIVISOR = 10
#: Expired sessions dropped per script call at most (the rest go on the next calls).
PRUNE_BATCH = 1000

_LUA_COMMON = """
local P = ARGV[1]
local TTL = tonumber(ARGV[2])
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function split(m)
  local c = string.find(m, ':', 1, true)
  return string.sub(m, 1, c - 1), string.sub(m, c + 1)
end
local function json_list(t)
  if #t == 0 then return '[]' end
  return cjson.encode(t)
end
local function drop(m)
  local sk = P .. 'session:' .. m
  local ek = P .. 'events:' .. m
  local ukeys = redis.call('HGET', sk, 'ukeys')
  if ukeys then
    for _, k in ipairs(cjson.decode(ukeys)) do redis.call('SREM', k, m) end
  end
  local a, i = split(m)
  redis.call('ZREM', P .. 'sessions:app:' .. a, i)
  redis.call('ZREM', P .. 'sessions:created', m)
  redis.call('ZREM', P .. 'sessions:expiry', m)
  local n = redis.call('LLEN', ek)
  local existed = redis.call('DEL', sk)
  redis.call('DEL', ek)
  return existed, n
end
local NOW = now_ms()
if TTL > 0 then
  local due = redis.call('ZRANGEBYSCORE', P .. 'sessions:expiry', '-inf', NOW, 'LIMIT', 0, __PRUNE_BATCH__)
  for _, m in ipairs(due) do drop(m) end
end
local function keepalive(m)
  if TTL <= 0 then return end
  local sk = P .. 'session:' .. m
  local keep = TTL * 2
  redis.call('ZADD', P .. 'sessions:expiry', NOW + TTL, m)
  local a = split(m)
  for _, k in ipairs({sk, P .. 'events:' .. m, P .. 'sessions:app:' .. a, P .. 'sessions:created',
                      P .. 'sessions:expiry', P .. 'sessions:seq'}) do
    redis.call('PEXPIRE', k, keep)
  end
  local ukeys = redis.call('HGET', sk, 'ukeys')
  if ukeys then
    for _, k in ipairs(cjson.decode(ukeys)) do redis.call('PEXPIRE', k, keep) end
  end
end
""".replace("__PRUNE_BATCH__", str(PRUNE_BATCH))

# ARGV: P, ttl, m, mode ('create' | 'resume'), doc, users, ukeys, updated, score, max, evict
# -> {1} created, {0} exists (create), {2, doc, users, updated, events} exists (resume),
#    {3} full and none of the stored sessions is the new session's users' own
_CREATE = (
    _LUA_COMMON
    + """
local m = ARGV[3]
local sk = P .. 'session:' .. m
if redis.call('EXISTS', sk) == 1 then
  if ARGV[4] == 'create' then return {0} end
  keepalive(m)
  local v = redis.call('HMGET', sk, 'doc', 'users', 'updated')
  return {2, v[1], v[2], v[3], redis.call('LRANGE', P .. 'events:' .. m, 0, -1)}
end
local created = P .. 'sessions:created'
if redis.call('ZCARD', created) >= tonumber(ARGV[10]) then
  -- evict the oldest sessions of the new session's own users only (participants all among them)
  local mine = {}
  for _, u in ipairs(cjson.decode(ARGV[6])) do mine[u] = true end
  local left = tonumber(ARGV[11])
  local victims = {}
  for _, old in ipairs(redis.call('ZRANGE', created, 0, -1)) do
    if left <= 0 then break end
    local users = redis.call('HGET', P .. 'session:' .. old, 'users')
    local own = true
    if users then
      for _, u in ipairs(cjson.decode(users)) do
        if not mine[u] then own = false end
      end
    end
    if own then
      victims[#victims + 1] = old
      left = left - 1
    end
  end
  if #victims == 0 then return {3} end
  for _, old in ipairs(victims) do drop(old) end
end
local order = redis.call('INCR', P .. 'sessions:seq')
redis.call('HSET', sk, 'doc', ARGV[5], 'users', ARGV[6], 'ukeys', ARGV[7], 'updated', ARGV[8], 'order', order)
redis.call('ZADD', created, order, m)
local a, i = split(m)
redis.call('ZADD', P .. 'sessions:app:' .. a, ARGV[9], i)
for _, k in ipairs(cjson.decode(ARGV[7])) do redis.call('SADD', k, m) end
keepalive(m)
return {1}
"""
)

# ARGV: P, ttl, m, start -> {doc, users, updated, events} or {}
_GET = (
    _LUA_COMMON
    + """
local m = ARGV[3]
local sk = P .. 'session:' .. m
if redis.call('EXISTS', sk) == 0 then return {} end
local v = redis.call('HMGET', sk, 'doc', 'users', 'updated')
return {v[1], v[2], v[3], redis.call('LRANGE', P .. 'events:' .. m, tonumber(ARGV[4]), -1)}
"""
)

# ARGV: P, ttl, m, entry, max_events, updated, score -> 1 added, 0 no session
_ADD = (
    _LUA_COMMON
    + """
local m = ARGV[3]
local sk = P .. 'session:' .. m
if redis.call('EXISTS', sk) == 0 then return 0 end
local ek = P .. 'events:' .. m
redis.call('RPUSH', ek, ARGV[4])
redis.call('LTRIM', ek, -tonumber(ARGV[5]), -1)
redis.call('HSET', sk, 'updated', ARGV[6])
local a, i = split(m)
redis.call('ZADD', P .. 'sessions:app:' .. a, ARGV[7], i)
keepalive(m)
return 1
"""
)

# ARGV: P, ttl, m, updated, score -> the popped entry or nil
_POP = (
    _LUA_COMMON
    + """
local m = ARGV[3]
local sk = P .. 'session:' .. m
if redis.call('EXISTS', sk) == 0 then return false end
local e = redis.call('RPOP', P .. 'events:' .. m)
if not e then return false end
redis.call('HSET', sk, 'updated', ARGV[4])
local a, i = split(m)
redis.call('ZADD', P .. 'sessions:app:' .. a, ARGV[5], i)
keepalive(m)
return e
"""
)

# ARGV: P, ttl, m -> 1 deleted, 0 absent
_DELETE = (
    _LUA_COMMON
    + """
local existed = drop(ARGV[3])
return existed
"""
)

# ARGV: P, ttl, enc app, user set key or '' -> flat {doc, users, updated, order, ...}
_LIST = (
    _LUA_COMMON
    + """
local a = ARGV[3]
local ukey = ARGV[4]
local out = {}
local function add(m, dangling)
  local v = redis.call('HMGET', P .. 'session:' .. m, 'doc', 'users', 'updated', 'order')
  if not v[1] then dangling(m) return end
  for j = 1, 4 do table.insert(out, v[j]) end
end
if ukey ~= '' then
  for _, m in ipairs(redis.call('SMEMBERS', ukey)) do
    if split(m) == a then add(m, function(x) redis.call('SREM', ukey, x) end) end
  end
else
  local zk = P .. 'sessions:app:' .. a
  for _, i in ipairs(redis.call('ZRANGE', zk, 0, -1)) do
    add(a .. ':' .. i, function(x) redis.call('ZREM', zk, i) end)
  end
end
return out
"""
)

# ARGV: P, ttl -> {sessions, events}
_COUNTS = (
    _LUA_COMMON
    + """
local sessions, events = 0, 0
for _, m in ipairs(redis.call('ZRANGE', P .. 'sessions:created', 0, -1)) do
  if redis.call('EXISTS', P .. 'session:' .. m) == 1 then
    sessions = sessions + 1
    events = events + redis.call('LLEN', P .. 'events:' .. m)
  else
    drop(m)
  end
end
return {sessions, events}
"""
)

# ARGV: P, ttl, m... -> per member: its number of events, or -1 when the session is gone
_EVENT_COUNTS = (
    _LUA_COMMON
    + """
local out = {}
for i = 3, #ARGV do
  local m = ARGV[i]
  if redis.call('EXISTS', P .. 'session:' .. m) == 1 then
    out[#out + 1] = redis.call('LLEN', P .. 'events:' .. m)
  else
    out[#out + 1] = -1
  end
end
return out
"""
)

# ARGV: P, ttl, user set key, user -> sessions + events deleted
_DELETE_USER = (
    _LUA_COMMON
    + """
local ukey = ARGV[3]
local user = ARGV[4]
local n = 0
for _, m in ipairs(redis.call('SMEMBERS', ukey)) do
  local sk = P .. 'session:' .. m
  local users = redis.call('HGET', sk, 'users')
  if not users then
    redis.call('SREM', ukey, m)
  else
    local list = cjson.decode(users)
    if #list == 1 and list[1] == user then
      drop(m)
      n = n + 1
    else
      local ek = P .. 'events:' .. m
      local evs = redis.call('LRANGE', ek, 0, -1)
      local kept = {}
      for _, e in ipairs(evs) do
        local nl = string.find(e, '\\n', 1, true)
        local h = cjson.decode(string.sub(e, 1, nl - 1))
        if h[1] == user or h[2] == user then n = n + 1 else table.insert(kept, e) end
      end
      if #kept < #evs then
        local pttl = redis.call('PTTL', ek)
        redis.call('DEL', ek)
        for s = 1, #kept, 1000 do
          redis.call('RPUSH', ek, unpack(kept, s, math.min(s + 999, #kept)))
        end
        if pttl > 0 and #kept > 0 then redis.call('PEXPIRE', ek, pttl) end
      end
      local ukeys = cjson.decode(redis.call('HGET', sk, 'ukeys'))
      local nu, nk = {}, {}
      for j, u in ipairs(list) do
        if u ~= user then table.insert(nu, u) end
      end
      for _, k in ipairs(ukeys) do
        if k ~= ukey then table.insert(nk, k) end
      end
      redis.call('HSET', sk, 'users', json_list(nu), 'ukeys', json_list(nk))
      redis.call('SREM', ukey, m)
    end
  end
end
return n
"""
)


# ARGV: P, ttl -> problems (read only: expired sessions not dropped yet are not problems)
_CHECK = """
local P = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, m in ipairs(redis.call('ZRANGE', P .. 'sessions:created', 0, -1)) do
  local exp = redis.call('ZSCORE', P .. 'sessions:expiry', m)
  local expired = exp and tonumber(exp) <= now
  if not expired and redis.call('EXISTS', P .. 'session:' .. m) == 0 then
    table.insert(out, 'session index entry ' .. m .. ' has no session')
  end
end
return out
"""


def _ts(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (``2024-05-01T12:00:00.000000+00:00``)."""
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _parse_ts(value: str) -> datetime:
    return to_utc(datetime.fromisoformat(value))


def _event_entry(event: Event) -> str:
    """A stored event: a JSON header ``[author, metadata user_id or null]`` (what
    ``delete_user_sessions`` matches, read by Lua), a newline, then the event as JSON."""
    uid = event.metadata.get("user_id")
    header = json.dumps([event.author, uid if isinstance(uid, str) else None], ensure_ascii=True)
    body = json.dumps(
        {
            "id": event.id,
            "type": event.type.value,
            "timestamp": _ts(event.timestamp),
            "author": event.author,
            "content": json.loads(check_json("event content", event.content)),
            "metadata": json.loads(check_json("event metadata", event.metadata)),
        },
        ensure_ascii=False,
    )
    return f"{header}\n{body}"


def _event(entry: str) -> Event:
    data = json.loads(entry.partition("\n")[2])
    return Event(
        id=data["id"],
        type=EventType(data["type"]),
        timestamp=_parse_ts(data["timestamp"]),
        author=data["author"],
        content=data["content"],
        metadata=data["metadata"],
    )


def _doc(session: Session) -> str:
    return json.dumps(
        {
            "app": session.app,
            "id": session.id,
            "agent_id": session.agent_id,
            "channel": session.channel,
            "state": session.state,
            "created_at": _ts(session.created_at),
        },
        ensure_ascii=False,
    )


def _session(doc: Any, users: Any, updated: Any) -> Session:
    data = json.loads(text(doc))
    return Session(
        app=data["app"],
        id=data["id"],
        user_ids=json.loads(text(users)),
        agent_id=data["agent_id"],
        channel=data["channel"],
        state=data["state"],
        created_at=_parse_ts(data["created_at"]),
        updated_at=_parse_ts(text(updated)),
    )


def _check_bound(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be an integer >= 1, got {value!r}")
    return value


class RedisSessionStore(RedisStore):
    """A :class:`~memlane.stores.base.SessionStore` in Redis, shared by any number of processes.

    Args:
        client: a ``redis.asyncio.Redis`` client (replies decoded or not).
        prefix: prepended to every key.
        ttl: seconds a session lives after its last activity; None: until deleted or evicted.
        max_sessions: sessions kept (over all apps); creating one more when this many exist
            first evicts the oldest-created ``ceil(10%)`` (at least 1) of its own users'
            sessions (never another user's: StoreFullError when there is none).
        max_session_events: events kept per session; older ones are dropped first.
        owns_client: close the client in :meth:`close` (``open`` sets it).

    Use :meth:`open` with a URL (``redis://host:6379/0?prefix=app:&ttl=3600``).

    Raises:
        InvalidInputError: a bound below 1, a non-positive ``ttl`` or an empty prefix.
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float | None = None,
        max_sessions: int = 1000,
        max_session_events: int = 500,
        owns_client: bool = False,
    ) -> None:
        self.max_sessions = _check_bound("max_sessions", max_sessions)
        self.max_session_events = _check_bound("max_session_events", max_session_events)
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0):
            raise InvalidInputError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        if not isinstance(prefix, str) or not prefix:
            raise InvalidInputError(f"prefix must be a non-empty string, got {prefix!r}")
        self.prefix = prefix
        self.ttl = ttl
        self._ttl_ms = "0" if ttl is None else str(max(1, round(ttl * 1000)))
        self._owns_client = owns_client
        self._redis = ScriptRunner(client, "RedisSessionStore")
        reg = self._redis.register
        self._create, self._add, self._pop = reg(_CREATE), reg(_ADD), reg(_POP)
        self._get, self._list = reg(_GET, idempotent=True), reg(_LIST, idempotent=True)
        self._delete, self._counts = reg(_DELETE), reg(_COUNTS, idempotent=True)
        self._delete_user = reg(_DELETE_USER)
        self._event_counts = reg(_EVENT_COUNTS, idempotent=True)
        self._check = reg(_CHECK, idempotent=True)

    @classmethod
    async def open(cls, url: str) -> RedisSessionStore:
        """Connect to the Redis a URL names (``?prefix=&ttl=&max_sessions=&max_session_events=``).

        Raises:
            ConfigError: a bad URL or parameter (the message hides the password).
            StorageError: Redis cannot be reached.
        """
        location = parse_redis_url(url)
        client = await connect(location)
        return cls(
            client,
            prefix=location.prefix,
            ttl=location.ttl,
            max_sessions=location.max_sessions,
            max_session_events=location.max_session_events,
            owns_client=True,
        )

    # ------------------------------------------------------------------ keys
    def _member(self, app: str, session_id: str) -> str:
        return f"{encode_part(app)}:{encode_part(session_id)}"

    def _user_key(self, user_id: str) -> str:
        return f"{self.prefix}sessions:user:{encode_part(user_id)}"

    async def _script(self, script: Any, *args: object) -> Any:
        return await self._redis.run(script, self.prefix, self._ttl_ms, *args)

    # ------------------------------------------------------------------ sessions
    async def create_session(
        self,
        *,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
        session_id: str | None = None,
        state: dict[str, object] | None = None,
    ) -> Session:
        """Create a session; raises InvalidInputError if ``session_id`` exists in ``app``
        (also when another replica creates it at the same moment: one of them wins)."""
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=state
        )
        reply = await self._insert(session, "create")
        if int(reply[0]) == 3:
            raise StoreFullError(full_message(self.max_sessions, session.user_ids))
        if int(reply[0]) == 0:
            raise InvalidInputError(
                f"session {session.id!r} already exists in app {app!r}; use get_or_create_session to resume it"
            )
        return session

    async def get_or_create_session(
        self,
        *,
        session_id: str,
        app: str = "default",
        user_ids: Sequence[str] = (),
        agent_id: str | None = None,
        channel: str | None = None,
    ) -> Session:
        """Return the session (with its events) or create it: idempotent, also across replicas.

        An existing session is returned unchanged (the other arguments are ignored); its
        ``ttl`` starts again.
        """
        session = new_session(
            app=app, user_ids=user_ids, agent_id=agent_id, channel=channel, session_id=session_id, state=None
        )
        reply = await self._insert(session, "resume")
        if int(reply[0]) == 1:
            return session
        if int(reply[0]) == 3:
            raise StoreFullError(full_message(self.max_sessions, session.user_ids))
        found = _session(reply[1], reply[2], reply[3])
        found.events = [_event(text(e)) for e in reply[4]]
        return found

    async def _insert(self, session: Session, mode: str) -> Any:
        evict = max(1, -(-self.max_sessions // EVICT_DIVISOR))  # integer ceil, no float error
        ukeys = [self._user_key(u) for u in session.user_ids]
        return await self._script(
            self._create,
            self._member(session.app, session.id),
            mode,
            _doc(session),
            json.dumps(session.user_ids, ensure_ascii=False),
            json.dumps(ukeys),
            _ts(session.updated_at),
            to_us(session.updated_at),
            self.max_sessions,
            evict,
        )

    async def get_session(self, session_id: str, *, app: str = "default") -> Session | None:
        """The session with all its stored events, or None."""
        check_app(app)
        check_session_id(session_id)
        reply = await self._script(self._get, self._member(app, session_id), 0)
        if not reply:
            return None
        session = _session(reply[0], reply[1], reply[2])
        session.events = [_event(text(e)) for e in reply[3]]
        return session

    async def list_sessions(self, *, app: str = "default", user_id: str | None = None) -> list[Session]:
        """Sessions of ``app`` (optionally of one user), newest activity first, without events."""
        check_app(app)
        ukey = "" if user_id is None else self._user_key(user_id)
        reply = await self._script(self._list, encode_part(app), ukey)
        found: list[tuple[Session, int]] = []
        for j in range(0, len(reply), 4):
            found.append((_session(reply[j], reply[j + 1], reply[j + 2]), int(reply[j + 3])))
        found.sort(key=lambda item: (item[0].updated_at, item[1]), reverse=True)
        return [s for s, _ in found]

    async def sessions_with_id(self, session_id: str) -> list[Session]:
        """Every session named ``session_id``, in every app, without events (an app's sessions
        are keyed by (app, id): the same id may exist in several apps). The room check of the
        service reads it: a room memory is keyed by agent and session id, not by app."""
        check_session_id(session_id)
        want = encode_part(session_id)
        found: list[Session] = []
        for member in await self._redis.call("ZRANGE", f"{self.prefix}sessions:created", 0, -1):
            m = text(member)
            if m.partition(":")[2] != want:
                continue
            reply = await self._script(self._get, m, 0)
            if reply:
                found.append(_session(reply[0], reply[1], reply[2]))
        return sorted(found, key=lambda s: s.app)

    async def delete_session(self, session_id: str, *, app: str = "default") -> bool:
        """Delete a session and its events; True if it existed."""
        check_app(app)
        check_session_id(session_id)
        return bool(int(await self._script(self._delete, self._member(app, session_id))))

    async def counts(self) -> tuple[int, int]:
        """(sessions, events) under this prefix."""
        sessions, events = await self._script(self._counts)
        return int(sessions), int(events)

    async def event_counts(self, session_ids: Sequence[str], *, app: str = "default") -> dict[str, int]:
        """Each named session's number of events (:class:`~memlane.stores.base.EventCounts`);
        sessions that do not exist (or expired) are left out. One script call."""
        check_app(app)
        for session_id in session_ids:
            check_session_id(session_id)
        ids = list(dict.fromkeys(session_ids))
        if not ids:
            return {}
        reply = await self._script(self._event_counts, *(self._member(app, i) for i in ids))
        return {i: int(n) for i, n in zip(ids, reply, strict=True) if int(n) >= 0}

    async def delete_user_sessions(self, user_id: str) -> int:
        """Delete, in every app, the sessions whose only participant is ``user_id``; in group
        sessions, delete the user's own events (author or ``metadata["user_id"]`` is the user)
        and remove the user from the participants. Returns how many sessions and events went."""
        check_user_ids([user_id])
        return int(await self._script(self._delete_user, self._user_key(user_id), user_id))

    async def _sessions_of(self, user_id: str | None) -> list[Session]:
        """Every live session under this prefix (of ``user_id`` only, when given), without
        events: one read per session (the directory's; the store holds at most
        ``max_sessions``)."""
        if user_id is None:
            members = await self._redis.call("ZRANGE", f"{self.prefix}sessions:created", 0, -1)
        else:
            members = await self._redis.call("SMEMBERS", self._user_key(user_id))
        found: list[Session] = []
        for member in members:
            reply = await self._script(self._get, text(member), 0)
            if reply:
                found.append(_session(reply[0], reply[1], reply[2]))
        return found

    async def directory_users(
        self, *, agent_id: str | None, user_id: str | None, after: str | None, limit: int
    ) -> list[UserActivity]:
        """The sessions' participants, by user id (:class:`~memlane.stores.base.UserDirectory`)."""
        sessions = await self._sessions_of(user_id)
        return directory_users(sessions, agent_id=agent_id, user_id=user_id, after=after, limit=limit)

    async def directory(self, *, user_id: str | None) -> Directory:
        """The apps and their sessions (:class:`~memlane.stores.base.UserDirectory`)."""
        return directory_apps(await self._sessions_of(user_id), user_id=user_id)

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The sessions the user takes part in, with events (a group session: the user's own
        events only; see :func:`memlane.sessions.export_session`)."""
        check_user_ids([user_id])
        members = await self._redis.call("SMEMBERS", self._user_key(user_id))
        found: list[tuple[tuple[str, str], Session]] = []
        for member in members:
            reply = await self._script(self._get, text(member), 0)
            if reply:
                session = _session(reply[0], reply[1], reply[2])
                session.events = [_event(text(e)) for e in reply[3]]
                if user_id in session.user_ids:
                    found.append(((session.app, session.id), session))
        found.sort(key=lambda item: item[0])
        return {"sessions": [export_session(s, user_id) for _, s in found]}

    # ------------------------------------------------------------------ events
    async def add_event(self, session_id: str, event: Event, *, app: str = "default") -> Event:
        """Append ``event`` (a full session drops its oldest event) and touch ``updated_at``.

        Returns the stored copy (timestamp normalised to UTC), exactly as a later read gives it.

        Raises:
            NotFoundError: no such session in ``app``; nothing is written.
            InvalidInputError: the event is invalid or not JSON; nothing is written.
        """
        check_app(app)
        check_session_id(session_id)
        entry = _event_entry(prepare_event(event))
        now = utcnow()
        added = await self._script(
            self._add, self._member(app, session_id), entry, self.max_session_events, _ts(now), to_us(now)
        )
        if not int(added):
            raise NotFoundError(f"no session {session_id!r} in app {app!r}; create it first (get_or_create_session)")
        return _event(entry)

    async def get_events(
        self,
        session_id: str,
        event_types: Sequence[EventType | str] | None = None,
        limit: int | None = None,
        *,
        app: str = "default",
    ) -> list[Event]:
        """Events oldest first, optionally filtered by type; ``limit`` keeps the newest N.

        A missing session has no events (``[]``).
        """
        check_app(app)
        check_session_id(session_id)
        types = event_type_filter(event_types)
        check_limit(limit)
        if limit == 0 or types == frozenset():
            return []
        start = -limit if limit is not None and types is None else 0
        reply = await self._script(self._get, self._member(app, session_id), start)
        if not reply:
            return []
        events = [_event(text(e)) for e in reply[3]]
        if types is not None:
            events = [e for e in events if e.type in types]
        if limit is not None:
            events = events[-limit:]
        return events

    async def pop_event(self, session_id: str, *, app: str = "default") -> Event | None:
        """Remove and return the newest event atomically (None when there is none)."""
        check_app(app)
        check_session_id(session_id)
        now = utcnow()
        entry = await self._script(self._pop, self._member(app, session_id), _ts(now), to_us(now))
        return None if entry is None else _event(text(entry))

    async def check(self) -> list[str]:
        """Index entries without their session (empty when healthy; ``memlane check``). Reads only."""
        return [text(p) for p in await self._script(self._check)]


__all__ = ["RedisMemory", "RedisSessionStore"]


class RedisMemory(KaosNames, RedisSessionStore):
    """KAOS's name and constructor: ``RedisMemory(redis_url="redis://localhost:6379")``, a
    :class:`RedisSessionStore` on a client it makes (no I/O until the first call) and closes,
    with KAOS's method names too (``create_session(app_name=, user_id=)`` returns a session id,
    ``create_event``, ``get_session_events``: :class:`~memlane.stores.kaos.KaosNames`).

    Args:
        redis_url: the Redis URL; its query parameters (``prefix``, ``ttl``, ``max_sessions``,
            ``max_session_events``) apply unless given as keywords here.

    Raises:
        ConfigError: a bad URL (the message hides the password).
        InvalidInputError: a bad bound, ``ttl`` or prefix.
    """

    def __init__(
        self,
        redis_url: str = "redis://localhost:6379/0",
        *,
        prefix: str | None = None,
        ttl: float | None = None,
        max_sessions: int | None = None,
        max_session_events: int | None = None,
    ) -> None:
        location = parse_redis_url(redis_url)
        client = client_for(location)
        super().__init__(
            client,
            prefix=prefix if prefix is not None else location.prefix,
            ttl=ttl if ttl is not None else location.ttl,
            max_sessions=max_sessions if max_sessions is not None else location.max_sessions,
            max_session_events=max_session_events if max_session_events is not None else location.max_session_events,
            owns_client=True,
        )
