-- Whether our hold is current (read only). KEYS: l s.  ARGV: token, mode char.  Returns 1 or 0.
local now = now_ms()
if ARGV[2] == 'x' then
  if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
  return tonumber(redis.call('HGET', KEYS[1], 'd')) > now and 1 or 0
end
local d = redis.call('ZSCORE', KEYS[2], ARGV[1])
return (d and tonumber(d) > now) and 1 or 0
