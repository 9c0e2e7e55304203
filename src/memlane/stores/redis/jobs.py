"""``RedisJobStore``: the formation job queue and formation cursors in Redis, shared by every
replica and worker (the semantics of :class:`~memlane.stores.sqlite.jobs.SqliteJobStore`).

A job is claimed with a lease: a worker killed mid-formation leaves a ``running`` job whose
lease expires, and the next claim (by any worker) takes it again. Two jobs with the same key
(one session) never run at the same time. Every state change is one Lua script, so claims are
atomic across processes, and every time (``created_at``, ``next_run_at``, leases, cursor
activity) is read from Redis's clock (``TIME``), so workers on hosts whose clocks differ still
agree on which lease has expired.

Keys, under the URL's ``prefix`` (``P``); times are microseconds since the epoch::

    P job:{id}                    hash: the job's fields (JSON payload / state / result)
    P jobs:all                    zset: id -> created_at            (list)
    P jobs:status:{status}        zset: id -> created_at            (list by status, counts)
    P jobs:due                    zset: queued id -> next_run_at    (claim order, next_due)
    P jobs:leases                 zset: running id -> lease_until   (expired leases, next_due)
    P jobs:key:{enc key}          zset: id -> created_at            (list by key)
    P jobs:key-active:{enc key}   zset: queued/running ids of the key (same-key exclusion, coalesce)
    P jobs:user:{enc user}        set: the user's job ids           (purge_user, export_user)
    P jobs:with-state             set: ids holding a checkpoint     (purge_user drops them)
    P jobs:to-scrub               set: done ids whose result quotes memory text (purge_user)
    P cursor:{enc app}:{enc sid}  hash: a formation cursor
    P cursors:idle                zset: cursor -> last_activity_at  (idle_cursors)
    P cursors:user:{enc user}     set: cursors the user takes part in

Like the session store, scripts reach keys they compute: a single Redis server (or a
Sentinel-managed primary), not Redis Cluster.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from redis.asyncio import Redis

from memlane.errors import InvalidInputError, NotFoundError
from memlane.models import FormationCursor, Job, new_id
from memlane.stores.redis._client import LUA_NOW, RedisStore, ScriptRunner, connect, from_us, pairs, text, to_us
from memlane.stores.redis.url import DEFAULT_PREFIX, encode_part, parse_redis_url

#: Jobs the claim script looks at per page of due jobs (same-key blocked ones are skipped).
_PAGE = 100

_LUA_JOBS = (
    LUA_NOW
    + """
local P = ARGV[1]
local NOW = now_us()
local function jkey(id) return P .. 'job:' .. id end
local function restatus(id, jk, new)
  local v = redis.call('HMGET', jk, 'status', 'created_at', 'kact')
  local old, created, kact = v[1], v[2], v[3]
  if old ~= new then
    redis.call('ZREM', P .. 'jobs:status:' .. old, id)
    redis.call('ZADD', P .. 'jobs:status:' .. new, created, id)
    redis.call('HSET', jk, 'status', new)
  end
  if new ~= 'queued' then redis.call('ZREM', P .. 'jobs:due', id) end
  if new ~= 'running' then redis.call('ZREM', P .. 'jobs:leases', id) end
  if new == 'queued' or new == 'running' then
    redis.call('ZADD', kact, created, id)
  else
    redis.call('ZREM', kact, id)
  end
end
local function remove_job(id, jk)
  local v = redis.call('HMGET', jk, 'status', 'kidx', 'kact', 'uidx')
  if not v[1] then return 0 end
  redis.call('ZREM', P .. 'jobs:status:' .. v[1], id)
  for _, k in ipairs({P .. 'jobs:all', P .. 'jobs:due', P .. 'jobs:leases', v[2], v[3]}) do
    redis.call('ZREM', k, id)
  end
  if v[4] then redis.call('SREM', v[4], id) end
  redis.call('SREM', P .. 'jobs:with-state', id)
  redis.call('SREM', P .. 'jobs:to-scrub', id)
  redis.call('DEL', jk)
  return 1
end
"""
)

# ARGV: P, id, kind, key, user or '', payload, max_attempts, kidx, kact, uidx or '', coalesce
# -> {'job', fields...} or {'merge', id, payload}
_ENQUEUE = (
    _LUA_JOBS
    + """
local kind, kact = ARGV[3], ARGV[9]
if ARGV[11] == '1' then
  for _, id in ipairs(redis.call('ZRANGE', kact, 0, -1)) do
    local v = redis.call('HMGET', jkey(id), 'kind', 'status', 'state', 'payload')
    if v[1] == kind and v[2] == 'queued' and v[3] == '{}' then return {'merge', id, v[4]} end
  end
end
local id = ARGV[2]
local jk = jkey(id)
local now = us(NOW)
redis.call('HSET', jk, 'id', id, 'kind', kind, 'key', ARGV[4], 'status', 'queued', 'payload', ARGV[6],
  'state', '{}', 'attempts', 0, 'max_attempts', ARGV[7], 'next_run_at', now, 'created_at', now,
  'updated_at', now, 'kidx', ARGV[8], 'kact', kact)
if ARGV[5] ~= '' then
  redis.call('HSET', jk, 'user_id', ARGV[5], 'uidx', ARGV[10])
  redis.call('SADD', ARGV[10], id)
end
redis.call('ZADD', P .. 'jobs:all', now, id)
redis.call('ZADD', P .. 'jobs:status:queued', now, id)
redis.call('ZADD', P .. 'jobs:due', now, id)
redis.call('ZADD', ARGV[8], now, id)
redis.call('ZADD', kact, now, id)
return {'job', redis.call('HGETALL', jk)}
"""
)

# ARGV: P, id, expected payload, merged payload -> fields, or {} when the job changed meanwhile
_MERGE = (
    _LUA_JOBS
    + """
local jk = jkey(ARGV[2])
local v = redis.call('HMGET', jk, 'status', 'state', 'payload')
if v[1] ~= 'queued' or v[2] ~= '{}' or v[3] ~= ARGV[3] then return {} end
redis.call('HSET', jk, 'payload', ARGV[4], 'updated_at', us(NOW))
return redis.call('HGETALL', jk)
"""
)

# ARGV: P, worker, lease (us), job key or '', job id -> fields or {}
_CLAIM = (
    _LUA_JOBS
    + """
local worker, lease = ARGV[2], tonumber(ARGV[3])
local function eligible(id)
  local kact = redis.call('HGET', jkey(id), 'kact')
  for _, o in ipairs(redis.call('ZRANGE', kact, 0, -1)) do
    if o ~= id then
      local v = redis.call('HMGET', jkey(o), 'status', 'lease_until')
      if v[1] == 'running' and v[2] and tonumber(v[2]) >= NOW then return false end
    end
  end
  return true
end
local function take(id)
  local jk = jkey(id)
  restatus(id, jk, 'running')
  local until_ = us(NOW + lease)
  redis.call('HSET', jk, 'lease_until', until_, 'worker', worker, 'updated_at', us(NOW))
  redis.call('ZADD', P .. 'jobs:leases', until_, id)
  return redis.call('HGETALL', jk)
end
if ARGV[4] ~= '' then
  local v = redis.call('HMGET', ARGV[4], 'status', 'lease_until')
  if v[1] == 'queued' or (v[1] == 'running' and v[2] and tonumber(v[2]) < NOW) then
    if eligible(ARGV[5]) then return take(ARGV[5]) end
  end
  return {}
end
-- running jobs whose lease expired, in (next_run_at, created_at) order
local expired = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'jobs:leases', '-inf', '(' .. us(NOW), 'LIMIT', 0, 1000)) do
  local v = redis.call('HMGET', jkey(id), 'next_run_at', 'created_at')
  table.insert(expired, {tonumber(v[1]), tonumber(v[2]), id})
end
table.sort(expired, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
local ci = 1
local offset = 0
while true do
  local page = redis.call('ZRANGEBYSCORE', P .. 'jobs:due', '-inf', us(NOW), 'WITHSCORES', 'LIMIT', offset, __PAGE__)
  if #page == 0 then break end
  for j = 1, #page, 2 do
    local id, due = page[j], tonumber(page[j + 1])
    local created = tonumber(redis.call('HGET', jkey(id), 'created_at'))
    while ci <= #expired and (expired[ci][1] < due or (expired[ci][1] == due and expired[ci][2] < created)) do
      if eligible(expired[ci][3]) then return take(expired[ci][3]) end
      ci = ci + 1
    end
    if eligible(id) then return take(id) end
  end
  offset = offset + __PAGE__
end
while ci <= #expired do
  if eligible(expired[ci][3]) then return take(expired[ci][3]) end
  ci = ci + 1
end
return {}
""".replace("__PAGE__", str(_PAGE))
)

# ARGV: P, job key, worker, lease (us) -> 1 renewed, 0 not this worker's running job
_RENEW = (
    _LUA_JOBS
    + """
local v = redis.call('HMGET', ARGV[2], 'status', 'worker', 'id')
if v[1] ~= 'running' or v[2] ~= ARGV[3] then return 0 end
local until_ = us(NOW + tonumber(ARGV[4]))
redis.call('HSET', ARGV[2], 'lease_until', until_)
redis.call('ZADD', P .. 'jobs:leases', until_, v[3])
return 1
"""
)

# ARGV: P, job key, state
_CHECKPOINT = (
    _LUA_JOBS
    + """
local id = redis.call('HGET', ARGV[2], 'id')
if not id then return 0 end
redis.call('HSET', ARGV[2], 'state', ARGV[3], 'updated_at', us(NOW))
if ARGV[3] == '{}' then
  redis.call('SREM', P .. 'jobs:with-state', id)
else
  redis.call('SADD', P .. 'jobs:with-state', id)
end
return 1
"""
)

# ARGV: P, job key, result, scrub ('1': the result quotes memory text)
_COMPLETE = (
    _LUA_JOBS
    + """
local jk = ARGV[2]
local id = redis.call('HGET', jk, 'id')
if not id then return 0 end
restatus(id, jk, 'done')
redis.call('HSET', jk, 'result', ARGV[3], 'updated_at', us(NOW))
redis.call('HDEL', jk, 'lease_until', 'last_error')
if ARGV[4] == '1' then
  redis.call('SADD', P .. 'jobs:to-scrub', id)
else
  redis.call('SREM', P .. 'jobs:to-scrub', id)
end
return 1
"""
)

# ARGV: P, job key, error, retry_in (us) or '' -> fields or {}
_FAIL = (
    _LUA_JOBS
    + """
local jk = ARGV[2]
local v = redis.call('HMGET', jk, 'id', 'attempts', 'max_attempts')
if not v[1] then return {} end
local attempts = tonumber(v[2]) + 1
local give_up = ARGV[4] == '' or attempts >= tonumber(v[3])
local due = us(NOW + (tonumber(ARGV[4]) or 0))
local status = 'queued'
if give_up then status = 'failed' end
restatus(v[1], jk, status)
redis.call('HSET', jk, 'attempts', attempts, 'last_error', ARGV[3], 'next_run_at', due, 'updated_at', us(NOW))
redis.call('HDEL', jk, 'lease_until')
if status == 'queued' then redis.call('ZADD', P .. 'jobs:due', due, v[1]) end
return redis.call('HGETALL', jk)
"""
)

# ARGV: P, job key
_RELEASE = (
    _LUA_JOBS
    + """
local jk = ARGV[2]
local v = redis.call('HMGET', jk, 'id', 'status', 'next_run_at')
if v[2] ~= 'running' then return 0 end
restatus(v[1], jk, 'queued')
redis.call('HSET', jk, 'updated_at', us(NOW))
redis.call('HDEL', jk, 'lease_until')
redis.call('ZADD', P .. 'jobs:due', v[3], v[1])
return 1
"""
)

# ARGV: P, job key -> fields or {}
_RETRY = (
    _LUA_JOBS
    + """
local jk = ARGV[2]
local v = redis.call('HMGET', jk, 'id', 'status')
if not v[1] then return {} end
if v[2] == 'failed' or v[2] == 'queued' then
  restatus(v[1], jk, 'queued')
  redis.call('HSET', jk, 'attempts', 0, 'next_run_at', us(NOW), 'updated_at', us(NOW))
  redis.call('ZADD', P .. 'jobs:due', us(NOW), v[1])
end
return redis.call('HGETALL', jk)
"""
)

# ARGV: P, source zset, status or '', key or '', limit -> {fields, fields, ...}
_LIST = (
    _LUA_JOBS
    + """
local src, status, key, limit = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local out = {}
local offset = 0
while #out < limit do
  local ids = redis.call('ZREVRANGE', src, offset, offset + 99)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local v = redis.call('HMGET', jkey(id), 'status', 'key')
    if v[1] and (status == '' or v[1] == status) and (key == '' or v[2] == key) then
      table.insert(out, redis.call('HGETALL', jkey(id)))
      if #out >= limit then break end
    end
  end
  offset = offset + 100
end
return out
"""
)

# ARGV: P, cursor key, member, app, sid, users, ukeys, has agent, agent, has tier, tier, messages, tokens
_TOUCH = (
    _LUA_JOBS
    + """
local ck, m = ARGV[2], ARGV[3]
local now = us(NOW)
if redis.call('EXISTS', ck) == 0 then
  local tier = '0'
  if ARGV[10] == '1' then tier = ARGV[11] end
  redis.call('HSET', ck, 'app', ARGV[4], 'session_id', ARGV[5], 'user_ids', ARGV[6], 'ukeys', ARGV[7],
    'tier', tier, 'formed_events', 0, 'pending_messages', ARGV[12],
    'pending_tokens', string.format('%.17g', tonumber(ARGV[13])), 'last_activity_at', now)
  if ARGV[8] == '1' then redis.call('HSET', ck, 'agent_id', ARGV[9]) end
else
  for _, k in ipairs(cjson.decode(redis.call('HGET', ck, 'ukeys') or '[]')) do redis.call('SREM', k, m) end
  redis.call('HSET', ck, 'user_ids', ARGV[6], 'ukeys', ARGV[7], 'last_activity_at', now)
  if ARGV[8] == '1' then redis.call('HSET', ck, 'agent_id', ARGV[9]) end
  if ARGV[10] == '1' then redis.call('HSET', ck, 'tier', ARGV[11]) end
  redis.call('HINCRBY', ck, 'pending_messages', ARGV[12])
  local tokens = tonumber(redis.call('HGET', ck, 'pending_tokens')) + tonumber(ARGV[13])
  redis.call('HSET', ck, 'pending_tokens', string.format('%.17g', tokens))
end
for _, k in ipairs(cjson.decode(ARGV[7])) do redis.call('SADD', k, m) end
redis.call('ZADD', P .. 'cursors:idle', now, m)
return redis.call('HGETALL', ck)
"""
)

# ARGV: P, cursor key, member, app, sid, last_event_id, formed
_ADVANCE = (
    _LUA_JOBS
    + """
local ck, m = ARGV[2], ARGV[3]
local now = us(NOW)
if redis.call('EXISTS', ck) == 0 then
  redis.call('HSET', ck, 'app', ARGV[4], 'session_id', ARGV[5], 'user_ids', '[]', 'ukeys', '[]', 'tier', 0,
    'last_event_id', ARGV[6], 'formed_events', ARGV[7], 'pending_messages', 0, 'pending_tokens', '0',
    'last_activity_at', now, 'last_formed_at', now)
  redis.call('ZADD', P .. 'cursors:idle', now, m)
else
  redis.call('HSET', ck, 'last_event_id', ARGV[6], 'last_formed_at', now)
  redis.call('HINCRBY', ck, 'formed_events', ARGV[7])
end
return 1
"""
)

# ARGV: P, cursor key
_RESET = (
    _LUA_JOBS
    + """
if redis.call('EXISTS', ARGV[2]) == 1 then
  redis.call('HSET', ARGV[2], 'pending_messages', 0, 'pending_tokens', '0')
end
return 1
"""
)

_LUA_DROP_CURSOR = """
local function drop_cursor(m)
  local ck = P .. 'cursor:' .. m
  for _, k in ipairs(cjson.decode(redis.call('HGET', ck, 'ukeys') or '[]')) do redis.call('SREM', k, m) end
  redis.call('ZREM', P .. 'cursors:idle', m)
  return redis.call('DEL', ck)
end
"""

# ARGV: P, member
_DELETE_CURSOR = (
    _LUA_JOBS
    + _LUA_DROP_CURSOR
    + """
return drop_cursor(ARGV[2])
"""
)

# ARGV: P, before (us), limit -> {fields, ...}
_IDLE = (
    _LUA_JOBS
    + """
local out = {}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', P .. 'cursors:idle', '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])) do
  table.insert(out, redis.call('HGETALL', P .. 'cursor:' .. m))
end
return out
"""
)

# ARGV: P, jobs user set, cursors user set, user, cursors ('1'/'0') -> {removed, {ids to scrub}}
_PURGE = (
    _LUA_JOBS
    + _LUA_DROP_CURSOR
    + """
local juser, cuser, user = ARGV[2], ARGV[3], ARGV[4]
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', juser)) do n = n + remove_job(id, jkey(id)) end
redis.call('DEL', juser)
if ARGV[5] == '1' then
  for _, m in ipairs(redis.call('SMEMBERS', cuser)) do
    local ck = P .. 'cursor:' .. m
    local users = redis.call('HGET', ck, 'user_ids')
    if users then
      local list = cjson.decode(users)
      if #list == 1 and list[1] == user then
        n = n + drop_cursor(m)
      else
        local nu, nk = {}, {}
        for _, u in ipairs(list) do if u ~= user then table.insert(nu, u) end end
        for _, k in ipairs(cjson.decode(redis.call('HGET', ck, 'ukeys'))) do
          if k ~= cuser then table.insert(nk, k) end
        end
        local function enc(t) if #t == 0 then return '[]' end return cjson.encode(t) end
        redis.call('HSET', ck, 'user_ids', enc(nu), 'ukeys', enc(nk))
      end
    end
  end
  redis.call('DEL', cuser)
end
for _, id in ipairs(redis.call('SMEMBERS', P .. 'jobs:with-state')) do
  local st = redis.call('HGET', jkey(id), 'status')
  if not st then
    redis.call('SREM', P .. 'jobs:with-state', id)
  elseif st ~= 'running' then
    redis.call('HSET', jkey(id), 'state', '{}')
    redis.call('SREM', P .. 'jobs:with-state', id)
  end
end
return {n, redis.call('SMEMBERS', P .. 'jobs:to-scrub')}
"""
)

# ARGV: P, job key, id, expected result, scrubbed result
_SCRUB = (
    _LUA_JOBS
    + """
if redis.call('HGET', ARGV[2], 'result') == ARGV[4] then
  redis.call('HSET', ARGV[2], 'result', ARGV[5])
  redis.call('SREM', P .. 'jobs:to-scrub', ARGV[3])
  return 1
end
return 0
"""
)


# ARGV: P -> problems (read only)
_CHECK = """
local P = ARGV[1]
local out = {}
for _, status in ipairs({'queued', 'running', 'done', 'failed'}) do
  for _, id in ipairs(redis.call('ZRANGE', P .. 'jobs:status:' .. status, 0, -1)) do
    local st = redis.call('HGET', P .. 'job:' .. id, 'status')
    if st ~= status then
      table.insert(out, 'job ' .. id .. ' is indexed as ' .. status .. ' but is ' .. tostring(st or 'missing'))
    end
  end
end
for _, pair in ipairs({{'jobs:due', 'queued'}, {'jobs:leases', 'running'}}) do
  for _, id in ipairs(redis.call('ZRANGE', P .. pair[1], 0, -1)) do
    local st = redis.call('HGET', P .. 'job:' .. id, 'status')
    if st ~= pair[2] then
      table.insert(out, 'job ' .. id .. ' is in ' .. pair[1] .. ' but is ' .. tostring(st or 'missing'))
    end
  end
end
return out
"""


def _quotes_memory(result: Any) -> bool:
    """Whether a done job's result holds memory text a purge must remove (the agent blob or
    a replaced fact's previous text), as :meth:`SqliteJobStore.purge_user` checks."""
    if not isinstance(result, dict):
        return False
    changes = result.get("changes") or []
    return bool(result.get("consolidated")) or any(isinstance(ch, dict) and ch.get("previous") for ch in changes)


def _scrubbed(result: dict[str, Any]) -> dict[str, Any]:
    result["consolidated"] = []
    for ch in result.get("changes") or []:
        if isinstance(ch, dict):
            ch["previous"] = None
    return result


def _job(fields: dict[str, str]) -> Job:
    return Job(
        id=fields["id"],
        kind=fields["kind"],
        key=fields["key"],
        user_id=fields.get("user_id"),
        status=fields["status"],
        payload=json.loads(fields["payload"]),
        state=json.loads(fields["state"]),
        result=json.loads(fields["result"]) if "result" in fields else None,
        attempts=int(fields["attempts"]),
        max_attempts=int(fields["max_attempts"]),
        last_error=fields.get("last_error"),
        next_run_at=from_us(fields["next_run_at"]),
        created_at=from_us(fields["created_at"]),
        updated_at=from_us(fields["updated_at"]),
        worker=fields.get("worker"),
        lease_until=from_us(fields["lease_until"]) if "lease_until" in fields else None,
    )


def _cursor(fields: dict[str, str]) -> FormationCursor:
    return FormationCursor(
        app=fields["app"],
        session_id=fields["session_id"],
        user_ids=json.loads(fields["user_ids"]),
        agent_id=fields.get("agent_id"),
        tier=int(fields["tier"]),
        last_event_id=fields.get("last_event_id"),
        formed_events=int(fields["formed_events"]),
        pending_messages=int(fields["pending_messages"]),
        pending_tokens=float(fields["pending_tokens"]),
        last_activity_at=from_us(fields["last_activity_at"]),
        last_formed_at=from_us(fields["last_formed_at"]) if "last_formed_at" in fields else None,
    )


def _lease_us(seconds: float) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise InvalidInputError(f"lease_seconds must be a positive number, got {seconds!r}")
    return max(1, round(seconds * 1_000_000))


class RedisJobStore(RedisStore):
    """Jobs and cursors in Redis (see :class:`memlane.stores.base.JobStore`).

    Args:
        client: a ``redis.asyncio.Redis`` client (replies decoded or not).
        prefix: prepended to every key (the same prefix as a session store is fine: the
            two use different key names).
        owns_client: close the client in :meth:`close` (``open`` sets it).
    """

    def __init__(self, client: Redis, *, prefix: str = DEFAULT_PREFIX, owns_client: bool = False) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise InvalidInputError(f"prefix must be a non-empty string, got {prefix!r}")
        self.prefix = prefix
        self._owns_client = owns_client
        self._redis = ScriptRunner(client, "RedisJobStore")
        reg = self._redis.register
        self._enqueue, self._merge, self._claim = reg(_ENQUEUE), reg(_MERGE), reg(_CLAIM)
        self._renew, self._checkpoint, self._complete = reg(_RENEW), reg(_CHECKPOINT), reg(_COMPLETE)
        self._fail, self._release, self._retry = reg(_FAIL), reg(_RELEASE), reg(_RETRY)
        self._list = reg(_LIST, idempotent=True)
        self._touch, self._advance, self._reset = reg(_TOUCH), reg(_ADVANCE), reg(_RESET)
        self._delete_cursor, self._idle, self._purge, self._scrub = (
            reg(_DELETE_CURSOR),
            reg(_IDLE),
            reg(_PURGE),
            reg(_SCRUB),
        )
        self._check = reg(_CHECK, idempotent=True)

    @classmethod
    async def open(cls, url: str) -> RedisJobStore:
        """Connect to the Redis a URL names (``redis://host:6379/0?prefix=memlane:``).

        Raises:
            ConfigError: a bad URL or parameter (the message hides the password).
            StorageError: Redis cannot be reached.
        """
        location = parse_redis_url(url)
        client = await connect(location)
        return cls(client, prefix=location.prefix, owns_client=True)

    async def check(self) -> builtins.list[str]:
        """Index entries that disagree with their job (empty when healthy; ``memlane check``). Reads only."""
        return [text(p) for p in await self._script(self._check)]

    # ------------------------------------------------------------------ keys
    def _job_key(self, job_id: str) -> str:
        return f"{self.prefix}job:{encode_part(job_id)}"

    def _cursor_member(self, app: str, session_id: str) -> str:
        return f"{encode_part(app)}:{encode_part(session_id)}"

    def _cursor_user_key(self, user_id: str) -> str:
        return f"{self.prefix}cursors:user:{encode_part(user_id)}"

    async def _script(self, script: Any, *args: object) -> Any:
        return await self._redis.run(script, self.prefix, *args)

    # ------------------------------------------------------------------ jobs
    async def enqueue(
        self,
        kind: str,
        key: str,
        payload: dict[str, Any],
        *,
        user_id: str | None = None,
        max_attempts: int = 8,
        coalesce: bool = False,
    ) -> Job:
        """Queue a job; with ``coalesce``, merge ``payload`` into the oldest not-yet-started
        queued job of the same key and kind (one that has no checkpoint), atomically."""
        body = json.dumps(payload)
        ekey = encode_part(key)
        uidx = "" if user_id is None else f"{self.prefix}jobs:user:{encode_part(user_id)}"
        while True:
            reply = await self._script(
                self._enqueue,
                new_id(),
                kind,
                key,
                user_id or "",
                body,
                max_attempts,
                f"{self.prefix}jobs:key:{ekey}",
                f"{self.prefix}jobs:key-active:{ekey}",
                uidx,
                "1" if coalesce else "0",
            )
            if text(reply[0]) == "job":
                return _job(pairs(reply[1]))
            job_id, current = text(reply[1]), text(reply[2])
            merged = json.dumps({**json.loads(current), **payload})
            fields = await self._script(self._merge, job_id, current, merged)
            if fields:
                return _job(pairs(fields))
            # the job was claimed or changed in between: look again

    async def claim(self, worker: str, *, lease_seconds: float, job_id: str | None = None) -> Job | None:
        """Take the oldest due job (or ``job_id``) whose key has no other running job; None if none."""
        lease = _lease_us(lease_seconds)
        job_key = "" if job_id is None else self._job_key(job_id)
        fields = await self._script(self._claim, worker, lease, job_key, "" if job_id is None else job_id)
        return _job(pairs(fields)) if fields else None

    async def renew(self, job_id: str, worker: str, *, lease_seconds: float) -> bool:
        """Heartbeat: extend ``worker``'s lease on a running job to now + ``lease_seconds``.
        False when the job is no longer running under this worker."""
        lease = _lease_us(lease_seconds)
        return bool(int(await self._script(self._renew, self._job_key(job_id), worker, lease)))

    async def checkpoint(self, job_id: str, state: dict[str, Any]) -> None:
        await self._script(self._checkpoint, self._job_key(job_id), json.dumps(state))

    async def complete(self, job_id: str, result: dict[str, Any]) -> None:
        scrub = "1" if _quotes_memory(result) else "0"
        await self._script(self._complete, self._job_key(job_id), json.dumps(result), scrub)

    async def fail(self, job_id: str, error: str, *, retry_in: float | None) -> Job:
        """Count a failed attempt: back to ``queued`` after ``retry_in`` seconds, or ``failed``
        when ``retry_in`` is None or the attempts are used up."""
        retry = "" if retry_in is None else str(round(retry_in * 1_000_000))
        fields = await self._script(self._fail, self._job_key(job_id), error[:2000], retry)
        if not fields:
            raise NotFoundError(f"no job {job_id!r}")
        return _job(pairs(fields))

    async def release(self, job_id: str) -> None:
        """Give a running job back (worker stopping): queued again, attempt not counted."""
        await self._script(self._release, self._job_key(job_id))

    async def retry(self, job_id: str) -> Job:
        """Re-queue a failed job now, with a fresh set of attempts."""
        fields = await self._script(self._retry, self._job_key(job_id))
        if not fields:
            raise NotFoundError(f"no job {job_id!r}")
        return _job(pairs(fields))

    async def get(self, job_id: str) -> Job | None:
        fields = await self._redis.call("HGETALL", self._job_key(job_id))
        if not fields:
            return None
        if isinstance(fields, dict):
            return _job({text(k): text(v) for k, v in fields.items()})
        return _job(pairs(fields))

    async def list(self, *, status: str | None = None, key: str | None = None, limit: int = 50) -> builtins.list[Job]:
        """Jobs newest first, optionally of one status and / or key."""
        if limit <= 0:
            return []
        if key is not None:
            source = f"{self.prefix}jobs:key:{encode_part(key)}"
        elif status is not None:
            source = f"{self.prefix}jobs:status:{status}"
        else:
            source = f"{self.prefix}jobs:all"
        reply = await self._script(self._list, source, status or "", key or "", limit)
        return [_job(pairs(r)) for r in reply]

    async def next_due(self) -> datetime | None:
        """When the earliest queued job becomes due or running lease runs out (None: neither)."""
        due = await self._redis.call("ZRANGE", f"{self.prefix}jobs:due", 0, 0, "WITHSCORES")
        lease = await self._redis.call("ZRANGE", f"{self.prefix}jobs:leases", 0, 0, "WITHSCORES")
        times = [int(float(text(r[1]))) for r in (_flat_pairs(due), _flat_pairs(lease)) if r]
        return from_us(min(times)) if times else None

    async def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for status in ("queued", "running", "done", "failed"):
            n = int(await self._redis.call("ZCARD", f"{self.prefix}jobs:status:{status}"))
            if n:
                out[status] = n
        return out

    # ------------------------------------------------------------------ cursors
    async def touch(
        self,
        app: str,
        session_id: str,
        *,
        user_ids: Sequence[str],
        agent_id: str | None,
        tier: int | None,
        messages: int,
        tokens: float,
    ) -> FormationCursor:
        """Record activity on a session: pending counters grow, ``last_activity_at`` = now."""
        users = list(user_ids)
        fields = await self._script(
            self._touch,
            self.prefix + "cursor:" + self._cursor_member(app, session_id),
            self._cursor_member(app, session_id),
            app,
            session_id,
            json.dumps(users),
            json.dumps([self._cursor_user_key(u) for u in dict.fromkeys(users)]),
            "0" if agent_id is None else "1",
            agent_id or "",
            "0" if tier is None else "1",
            int(tier or 0),
            int(messages),
            repr(float(tokens)),
        )
        return _cursor(pairs(fields))

    async def get_cursor(self, app: str, session_id: str) -> FormationCursor | None:
        fields = await self._redis.call("HGETALL", self.prefix + "cursor:" + self._cursor_member(app, session_id))
        if not fields:
            return None
        if isinstance(fields, dict):
            return _cursor({text(k): text(v) for k, v in fields.items()})
        return _cursor(pairs(fields))

    async def reset_pending(self, app: str, session_id: str) -> None:
        """A formation was scheduled: the trigger counters start again from zero."""
        await self._script(self._reset, self.prefix + "cursor:" + self._cursor_member(app, session_id))

    async def advance(self, app: str, session_id: str, *, last_event_id: str, formed: int) -> None:
        """Events up to ``last_event_id`` are formed (creates the cursor when there is none)."""
        member = self._cursor_member(app, session_id)
        await self._script(
            self._advance, self.prefix + "cursor:" + member, member, app, session_id, last_event_id, int(formed)
        )

    async def delete_cursor(self, app: str, session_id: str) -> None:
        await self._script(self._delete_cursor, self._cursor_member(app, session_id))

    async def idle_cursors(self, before: datetime, *, limit: int = 1000) -> builtins.list[FormationCursor]:
        """Sessions whose last activity is older than ``before``, oldest first."""
        if limit <= 0:
            return []
        reply = await self._script(self._idle, to_us(before), limit)
        return [_cursor(pairs(r)) for r in reply if r]

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """The user's jobs (input and status) and their sessions' formation cursors, shaped
        like :func:`memlane.stores.sqlite.export.jobs_part`."""
        ids = await self._redis.call("SMEMBERS", f"{self.prefix}jobs:user:{encode_part(user_id)}")
        jobs = [j for j in [await self.get(text(i)) for i in ids] if j is not None]
        jobs.sort(key=lambda j: (j.created_at, j.id))
        members = await self._redis.call("SMEMBERS", self._cursor_user_key(user_id))
        cursors: builtins.list[FormationCursor] = []
        for member in members:
            fields = await self._redis.call("HGETALL", self.prefix + "cursor:" + text(member))
            if fields:
                got = fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2], strict=True))
                cursor = _cursor({text(k): text(v) for k, v in got.items()})
                if user_id in cursor.user_ids:
                    cursors.append(cursor)
        cursors.sort(key=lambda c: (c.app, c.session_id))

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "jobs": [
                {
                    "id": j.id,
                    "kind": j.kind,
                    "key": j.key,
                    "status": j.status,
                    "payload": j.payload,
                    "attempts": j.attempts,
                    "max_attempts": j.max_attempts,
                    "last_error": j.last_error,
                    "next_run_at": iso(j.next_run_at),
                    "created_at": iso(j.created_at),
                    "updated_at": iso(j.updated_at),
                }
                for j in jobs
            ],
            "formation_cursors": [
                {**c.model_dump(), "last_activity_at": iso(c.last_activity_at), "last_formed_at": iso(c.last_formed_at)}
                for c in cursors
            ],
        }

    async def purge_user(self, user_id: str, *, cursors: bool = True) -> int:
        """Delete the user's jobs and (``cursors=True``) the cursors of sessions they took part
        in alone (a group session's cursor stays, without the user). ``cursors=False`` keeps
        the cursors, for a purge that keeps the user's sessions.

        Other users' jobs can hold this user's words through the agent's shared memory:
        checkpoints of jobs not running now are dropped (a replay recomputes them) and the
        agent blob and replaced facts' previous texts are removed from finished jobs' results."""
        reply = await self._script(
            self._purge,
            f"{self.prefix}jobs:user:{encode_part(user_id)}",
            self._cursor_user_key(user_id),
            user_id,
            "1" if cursors else "0",
        )
        removed, to_scrub = int(reply[0]), [text(i) for i in reply[1]]
        for job_id in to_scrub:
            for _ in range(10):  # a compare-and-set: results do not change once done
                current = await self._redis.call("HGET", self._job_key(job_id), "result")
                if current is None:
                    break
                before = text(current)
                after = json.dumps(_scrubbed(json.loads(before)))
                if int(await self._script(self._scrub, self._job_key(job_id), job_id, before, after)):
                    break
        return removed


def _flat_pairs(reply: Any) -> builtins.list[Any]:
    """The first ``(member, score)`` of a ``ZRANGE ... WITHSCORES`` reply (RESP2 flat list or
    RESP3 pairs), or ``[]``."""
    if not reply:
        return []
    first = reply[0]
    if isinstance(first, list | tuple):
        return [first[0], first[1]]
    return [reply[0], reply[1]]
