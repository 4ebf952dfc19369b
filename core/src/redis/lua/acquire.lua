-- Acquire: every key or none, in one step.
-- KEYS: l s q e per key.  ARGV: notify prefix, token, waiter id, lease ms, registration ms
-- (0: a try, never queue), then one mode char per key ('x' exclusive, 's' shared).
-- Returns {1, fence1, died1, fence2, died2, ...} or {0, ms worth waiting before looking again}.
local now = now_ms()
local np, token, wid = ARGV[1], ARGV[2], ARGV[3]
local lease, reg = tonumber(ARGV[4]), tonumber(ARGV[5])
local n = #KEYS / 4
local blocked, hint = nil, 0
-- Keys this token holds already: a retry of an attempt whose reply was lost (the client
-- retries once on a torn connection) gets the same grant, not a wait on itself.
local mine = {}
for i = 1, n do
  local l, s, q, e = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  tidy(l, s, q, e, np, now)
  local m = ARGV[5 + i]
  if (m == 'x' and redis.call('HGET', l, 't') == token)
      or (m == 's' and redis.call('ZSCORE', s, token)) then
    mine[i] = true
  elseif not blocked then
    local ok, wait = grantable(l, s, q, e, m, m .. wid, now)
    if not ok then blocked, hint = i, wait end
  end
end
if blocked then
  -- Queue on the key that blocks (keeping our place if we had one); stand in no other queue,
  -- so that a multi-key waiter never holds up a key it is not waiting for.
  for i = 1, n do
    local l, s, q, e = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
    local member = ARGV[5 + i] .. wid
    if i == blocked and reg > 0 then
      if not redis.call('ZSCORE', q, member) then
        redis.call('ZADD', q, redis.call('HINCRBY', l, 'q', 1), member)
      end
      redis.call('ZADD', e, now + reg, member)
    elseif redis.call('ZREM', q, member) == 1 then
      redis.call('ZREM', e, member)
      wake(l, s, q, np)
    end
  end
  return {0, hint}
end
local out = {1}
for i = 1, n do
  local l, s, q, e = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local m = ARGV[5 + i]
  if redis.call('ZREM', q, m .. wid) == 1 then redis.call('ZREM', e, m .. wid) end
  if mine[i] then
    out[#out + 1] = tonumber(redis.call('HGET', l, 'n') or '0')
    out[#out + 1] = 0
  elseif m == 'x' then
    local died = tonumber(redis.call('HGET', l, 'x') or '0')
    out[#out + 1] = redis.call('HINCRBY', l, 'n', 1)
    out[#out + 1] = died
    redis.call('HSET', l, 't', token, 'd', now + lease)
    redis.call('HDEL', l, 'x')
  else
    redis.call('ZADD', s, now + lease, token)
    out[#out + 1] = tonumber(redis.call('HGET', l, 'n') or '0')
    out[#out + 1] = tonumber(redis.call('HGET', l, 'x') or '0')
    redis.call('HDEL', l, 'x')
    -- A shared grant may admit the next shared waiter too.
    wake(l, s, q, np)
  end
end
return out
