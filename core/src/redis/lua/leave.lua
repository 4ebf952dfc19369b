-- A waiter gives up: leaves every queue it stands in and drops its wake-up list.
-- KEYS: l s q e per key.  ARGV: notify prefix, waiter id, one mode char per key.
for i = 1, #KEYS / 4 do
  local l, s, q, e = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local member = ARGV[2 + i] .. ARGV[2]
  if redis.call('ZREM', q, member) == 1 then
    redis.call('ZREM', e, member)
    wake(l, s, q, ARGV[1])
  end
end
redis.call('DEL', ARGV[1] .. ARGV[2])
return 1
