"""The Lua scripts the shared quotas (`gateway.shared.store.RedisQuotas`) run in Redis, each atomic
on the server: a rate bucket refilled by the server's own clock (so replicas' clocks never
matter) and a slice of it leased (`LEASE`) or given back (`GIVE`); a tenant's
`max_concurrent` slots, one field per replica, taken at the limit or refused (`ENTER`,
dropping the fields of replicas whose liveness key has expired) and released (`LEAVE`).

Scripts only, as text: it knows no Redis client and no tenant.
"""
from __future__ import annotations

# Refill a bucket by the server's clock; grant `want` units (at least `need`, else none).
LEASE = """
local cap, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local need, want = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('HMGET', KEYS[1], 'level', 'at')
local level, at = tonumber(held[1]) or cap, tonumber(held[2]) or now
level = math.min(cap, level + math.max(0, now - at) * rate / 1000)
local granted = 0
if level >= need then granted = math.min(level, want) end
level = level - granted
redis.call('HSET', KEYS[1], 'level', tostring(level), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return {tostring(granted), tostring(level)}
"""
# Units leased and not spent, back into the bucket (never above its size).
GIVE = """
local cap, rate, units = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('HMGET', KEYS[1], 'level', 'at')
local level, at = tonumber(held[1]) or cap, tonumber(held[2]) or now
level = math.min(cap, level + math.max(0, now - at) * rate / 1000 + units)
redis.call('HSET', KEYS[1], 'level', tostring(level), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return tostring(level)
"""
# One more slot of ARGV[1]'s if the live replicas hold fewer than ARGV[2]; dead ones' dropped.
ENTER = """
local fields = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #fields, 2 do
  if fields[i] ~= ARGV[1] and redis.call('EXISTS', ARGV[3] .. fields[i]) == 0 then
    redis.call('HDEL', KEYS[1], fields[i])
  else
    total = total + tonumber(fields[i + 1])
  end
end
if total >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
return 1
"""
LEAVE = """
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return n
"""
