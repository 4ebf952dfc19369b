-- keylock's Redis scope: the helpers every script starts with (see core/src/redis/scripts.rs).
--
-- Per lock key, four Redis keys under the scope's hash tag, passed in KEYS in this order:
--   l  hash   n = the fence (last one minted), t = the exclusive holder's token,
--             d = its lease deadline (server ms), q = the waiters' ticket counter,
--             x = 1 when the last exclusive hold ended by its lease (its holder died or stalled)
--   s  zset   shared holders: token -> lease deadline (server ms)
--   q  zset   waiters in arrival order: mode char .. waiter id -> ticket
--   e  zset   the same waiters -> when their registration lapses (server ms)
-- A waiter blocks (BLPOP) on its own list ARGV[1] .. waiter id, which wake() pushes to.
-- Time is the server's (TIME), so every client agrees on deadlines.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Tells the head waiter of a key to try again, if the key's holders would admit it.
local function wake(l, s, q, np)
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if not head then return end
  if redis.call('HEXISTS', l, 't') == 1 then return end
  if string.sub(head, 1, 1) == 'x' and redis.call('ZCARD', s) > 0 then return end
  local list = np .. string.sub(head, 2)
  if redis.call('LLEN', list) == 0 then redis.call('LPUSH', list, 1) end
  redis.call('PEXPIRE', list, 60000)
end

-- Ends what has run out: an exclusive hold past its lease (advancing the fence, as the end of
-- an exclusive lease does in every scope), shared holds past theirs, and waiters whose
-- registration lapsed (their process died or gave up without saying so). Wakes the head
-- waiter if anything ended.
local function tidy(l, s, q, e, np, now)
  local changed = false
  local d = redis.call('HGET', l, 'd')
  if d and tonumber(d) <= now then
    redis.call('HDEL', l, 't', 'd')
    redis.call('HINCRBY', l, 'n', 1)
    redis.call('HSET', l, 'x', 1)
    changed = true
  end
  if redis.call('ZREMRANGEBYSCORE', s, '-inf', now) > 0 then changed = true end
  local dead = redis.call('ZRANGEBYSCORE', e, '-inf', now)
  for _, w in ipairs(dead) do
    redis.call('ZREM', q, w)
    redis.call('ZREM', e, w)
    changed = true
  end
  if changed then wake(l, s, q, np) end
end

-- Milliseconds until the head waiter's registration lapses (when to look again if it died).
local function head_lapse(q, e, now)
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if not head then return 0 end
  return tonumber(redis.call('ZSCORE', e, head) or now) - now
end

-- Whether a request in mode m by waiter `member` may take the key now (FIFO: nobody who came
-- first and would conflict is waiting), and if not, how long until it is worth looking again.
local function grantable(l, s, q, e, m, member, now)
  local d = redis.call('HGET', l, 'd')
  if d then return false, tonumber(d) - now end
  if m == 'x' then
    local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')
    if first[1] then return false, tonumber(first[2]) - now end
  end
  local ahead = redis.call('ZRANK', q, member)
  if not ahead then ahead = redis.call('ZCARD', q) end
  if ahead == 0 then return true, 0 end
  if m == 'x' then return false, head_lapse(q, e, now) end
  for _, w in ipairs(redis.call('ZRANGE', q, 0, ahead - 1)) do
    if string.sub(w, 1, 1) == 'x' then return false, head_lapse(q, e, now) end
  end
  return true, 0
end
