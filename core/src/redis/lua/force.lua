-- Force-unlock: frees the key whoever holds it, advancing the fence. KEYS: l s q e.
-- ARGV: notify prefix.  Returns 1 if it was held, else 0.
local now = now_ms()
local l, s, q, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
tidy(l, s, q, e, ARGV[1], now)
if redis.call('HEXISTS', l, 't') == 0 and redis.call('ZCARD', s) == 0 then return 0 end
redis.call('HDEL', l, 't', 'd')
redis.call('DEL', s)
redis.call('HINCRBY', l, 'n', 1)
wake(l, s, q, ARGV[1])
return 1
