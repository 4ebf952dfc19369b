-- Release: compare-and-delete on the token, then wake the head waiter.
-- KEYS: l s q e.  ARGV: notify prefix, token, mode char.  Returns 1, or 0 if not ours (any more).
local now = now_ms()
local l, s, q, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
tidy(l, s, q, e, ARGV[1], now)
if ARGV[3] == 'x' then
  if redis.call('HGET', l, 't') ~= ARGV[2] then return 0 end
  redis.call('HDEL', l, 't', 'd')
elseif redis.call('ZREM', s, ARGV[2]) == 0 then
  return 0
end
wake(l, s, q, ARGV[1])
return 1
