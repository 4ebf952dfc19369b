-- A snapshot of a key. KEYS: l s q e.  ARGV: notify prefix.
-- Returns {exclusive held 0/1, fence, exclusive ms left, shared holders, earliest shared ms
-- left, waiters}.
local now = now_ms()
local l, s, q, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
tidy(l, s, q, e, ARGV[1], now)
local fence = tonumber(redis.call('HGET', l, 'n') or '0')
local d = redis.call('HGET', l, 'd')
local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')
local shared_left = -1
if first[1] then shared_left = tonumber(first[2]) - now end
return {d and 1 or 0, fence, d and (tonumber(d) - now) or -1, redis.call('ZCARD', s), shared_left,
  redis.call('ZCARD', q)}
