-- Renew (and extend): moves our lease's end to ARGV[4] ms from now, if the hold is still ours.
-- KEYS: l s q e.  ARGV: notify prefix, token, mode char, ms.  Returns 1, or 0 if lost.
local now = now_ms()
local l, s, q, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
tidy(l, s, q, e, ARGV[1], now)
local until_ms = now + tonumber(ARGV[4])
if ARGV[3] == 'x' then
  if redis.call('HGET', l, 't') ~= ARGV[2] then return 0 end
  redis.call('HSET', l, 'd', until_ms)
else
  if not redis.call('ZSCORE', s, ARGV[2]) then return 0 end
  redis.call('ZADD', s, 'XX', until_ms, ARGV[2])
end
return 1
