//! The Lua sources of the scope's scripts (see [`scripts`](super::scripts)), kept in Rust
//! strings so that the crate is its `.rs` sources alone. `PRELUDE` documents the data model
//! and is prepended to every script.

/// The helpers every script starts with, and the data model they work on.
pub(crate) const PRELUDE: &str = r#"-- keylock's Redis scope: the helpers every script starts with (see core/src/redis/scripts.rs).
--
-- Per lock key, four Redis keys under the scope's hash tag, passed in KEYS in this order:
--   l  hash   n = the fence (last one minted), t = the exclusive holder's token,
--             d = its lease deadline (server ms), q = the waiters' ticket counter,
--             x = 1 when the last exclusive hold (or semaphore hold) ended by its lease (its
--             holder died or stalled); for a semaphore's key also h = the units held and
--             u<token> = each holder's units
--   s  zset   shared holders, or a semaphore's holders: token -> lease deadline (server ms)
--   q  zset   waiters in arrival order: mode .. waiter id -> ticket
-- A mode is 'x' (exclusive), 's' (shared) or, for a semaphore's request, 'u' .. units .. '.'
-- .. permits .. '.' (a semaphore's keys live in a space of their own; every acquisition of
-- one takes its units and mints a fence, and waiters are served strictly in order).
--   e  zset   the same waiters -> when their registration lapses (server ms)
-- A waiter blocks (BLPOP) on its own list ARGV[1] .. waiter id, which wake() pushes to.
-- Per scope, one more name, passed last in KEYS to the scripts that make or drop a key's names:
--   f  string the fence floor: the highest fence of any key whose names were dropped.
-- A key with nothing held, nobody queued and no died mark to report has its names dropped
-- (see drop_if_idle), so a free key takes no memory; its hash, made again at its next grant,
-- starts its fence at the floor, so that a key's fences never go backwards.
-- Time is the server's (TIME), so every client agrees on deadlines.
-- Every script also takes the request's id as its last ARGV, and its reply is {id, result}
-- (scripts.rs wraps each script's body), so that the client matches each reply to its request.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A semaphore request's units and permits, from its mode (nil for a lock's mode).
local function units_of(m)
  local u, p = string.match(m, '^u(%d+)%.(%d+)%.')
  if u then return tonumber(u), tonumber(p), #u + #p + 3 end
  return nil
end

-- Whether u more units fit among the key's holders.
local function fits(l, u, p)
  return tonumber(redis.call('HGET', l, 'h') or '0') + u <= p
end

-- The scope's fence floor f (0 if there is none yet); an error if it holds something else than
-- a number, so that no fence is made from it.
local function floor_of(f)
  local v = redis.call('GET', f)
  if not v then return 0 end
  local n = tonumber(v)
  if not n then
    error('keylock: the fence floor ' .. f .. ' holds something else than a number')
  end
  return n
end

-- The key's hash before a grant: made, its fence starting at the floor f, if the key has none.
local function made(l, f)
  if redis.call('HEXISTS', l, 'n') == 0 then
    redis.call('HSET', l, 'n', floor_of(f))
  end
end

-- Drops the key's names if nothing is held, nobody is queued and no died mark waits for the
-- next holder, first raising the floor f to the key's fence.
local function drop_if_idle(l, s, q, e, f)
  -- (An empty sorted set does not exist.)
  if redis.call('EXISTS', s, q) > 0 then return end
  local h = redis.call('HMGET', l, 't', 'x', 'h', 'n')
  if h[1] or h[2] or (h[3] and tonumber(h[3]) ~= 0) then return end
  if h[4] and tonumber(h[4]) > floor_of(f) then
    redis.call('SET', f, h[4])
  end
  redis.call('DEL', l, e)
end

-- Tells the head waiter of a key to try again, if the key's holders would admit it.
local function wake(l, s, q, np)
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if not head then return end
  if redis.call('HEXISTS', l, 't') == 1 then return end
  local u, p, len = units_of(head)
  if u then
    if not fits(l, u, p) then return end
  elseif string.sub(head, 1, 1) == 'x' and redis.call('ZCARD', s) > 0 then
    return
  end
  local list = np .. string.sub(head, (len or 1) + 1)
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
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', s, '-inf', now)) do
    local u = redis.call('HGET', l, 'u' .. tok)
    if u then
      -- A semaphore's hold ended by its lease: its units go back, and the next holder
      -- learns that its holder died or stalled.
      redis.call('HINCRBY', l, 'h', -tonumber(u))
      redis.call('HDEL', l, 'u' .. tok, 'f' .. tok)
      redis.call('HSET', l, 'x', 1)
    end
    redis.call('ZREM', s, tok)
    changed = true
  end
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
  local u, p = units_of(m)
  if u then
    -- A semaphore: the units must fit, and nobody may be queued ahead (strict FIFO).
    if not fits(l, u, p) then
      local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')
      return false, first[2] and (tonumber(first[2]) - now) or head_lapse(q, e, now)
    end
    local ahead = redis.call('ZRANK', q, member)
    if not ahead then ahead = redis.call('ZCARD', q) end
    if ahead == 0 then return true, 0 end
    return false, head_lapse(q, e, now)
  end
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
"#;

/// `acquire`: Acquire: every key or none, in one step.
pub(crate) const ACQUIRE: &str = r#"-- Acquire: every key or none, in one step.
-- KEYS: l s q e per key, then f.  ARGV: notify prefix, token, waiter id, lease ms,
-- registration ms (0: a try, never queue), then one mode per key ('x' exclusive, 's' shared,
-- 'u' .. units ..).
-- Returns {1, fence1, died1, fence2, died2, ...} or {0, ms worth waiting before looking again}.
local now = now_ms()
local np, token, wid = ARGV[1], ARGV[2], ARGV[3]
local lease, reg = tonumber(ARGV[4]), tonumber(ARGV[5])
local f = KEYS[#KEYS]
local n = (#KEYS - 1) / 4
local blocked, hint = nil, 0
-- Keys this token holds already: a retry of an attempt whose reply was lost (the client
-- retries once on a torn connection) gets the same grant, not a wait on itself.
local mine = {}
for i = 1, n do
  local l, s, q, e = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  tidy(l, s, q, e, np, now)
  local m = ARGV[5 + i]
  if (m == 'x' and redis.call('HGET', l, 't') == token)
      or (m ~= 'x' and redis.call('ZSCORE', s, token)) then
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
    drop_if_idle(l, s, q, e, f)
  end
  return {0, hint}
end
local out = {1}
for i = 1, n do
  local l, s, q, e = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local m = ARGV[5 + i]
  if redis.call('ZREM', q, m .. wid) == 1 then
    -- A waiter granted: its wake-up list (a push it did not need may be there) goes too.
    redis.call('ZREM', e, m .. wid)
    redis.call('DEL', np .. wid)
  end
  local u = units_of(m)
  if not mine[i] then made(l, f) end
  if mine[i] and u then
    out[#out + 1] = tonumber(redis.call('HGET', l, 'f' .. token) or '0')
    out[#out + 1] = 0
  elseif mine[i] then
    out[#out + 1] = tonumber(redis.call('HGET', l, 'n') or '0')
    out[#out + 1] = 0
  elseif u then
    -- A semaphore's units: a fence of its own (kept for a retry of this acquire).
    local died = tonumber(redis.call('HGET', l, 'x') or '0')
    local fence = redis.call('HINCRBY', l, 'n', 1)
    out[#out + 1] = fence
    out[#out + 1] = died
    redis.call('ZADD', s, now + lease, token)
    redis.call('HSET', l, 'u' .. token, u, 'f' .. token, fence)
    redis.call('HINCRBY', l, 'h', u)
    redis.call('HDEL', l, 'x')
    -- The next waiter's units may fit too.
    wake(l, s, q, np)
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
"#;

/// `release`: Release: compare-and-delete on the token, then wake the head waiter.
pub(crate) const RELEASE: &str = r#"-- Release: compare-and-delete on the token, then wake the head waiter.
-- KEYS: l s q e f.  ARGV: notify prefix, token, mode char.  Returns 1, or 0 if not ours (any
-- more).
local now = now_ms()
local l, s, q, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
tidy(l, s, q, e, ARGV[1], now)
if ARGV[3] == 'x' then
  if redis.call('HGET', l, 't') ~= ARGV[2] then return 0 end
  redis.call('HDEL', l, 't', 'd')
elseif redis.call('ZREM', s, ARGV[2]) == 0 then
  return 0
else
  local u = redis.call('HGET', l, 'u' .. ARGV[2])
  if u then
    redis.call('HINCRBY', l, 'h', -tonumber(u))
    redis.call('HDEL', l, 'u' .. ARGV[2], 'f' .. ARGV[2])
  end
end
wake(l, s, q, ARGV[1])
drop_if_idle(l, s, q, e, KEYS[5])
return 1
"#;

/// `renew`: Renew (and extend): moves our lease's end to ARGV[4] ms from now, if the hold is still ours.
pub(crate) const RENEW: &str = r#"-- Renew (and extend): moves our lease's end to ARGV[4] ms from now, if the hold is still ours.
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
"#;

/// `check`: Whether our hold is current (read only). KEYS: l s.  ARGV: token, mode char.  Returns 1 or 0.
pub(crate) const CHECK: &str = r#"-- Whether our hold is current (read only). KEYS: l s.  ARGV: token, mode char.  Returns 1 or 0.
local now = now_ms()
if ARGV[2] == 'x' then
  if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
  return tonumber(redis.call('HGET', KEYS[1], 'd')) > now and 1 or 0
end
local d = redis.call('ZSCORE', KEYS[2], ARGV[1])
return (d and tonumber(d) > now) and 1 or 0
"#;

/// `force`: Force-unlock: frees the key whoever holds it, advancing the fence. KEYS: l s q e f.
pub(crate) const FORCE: &str = r#"-- Force-unlock: frees the key whoever holds it, advancing the fence. KEYS: l s q e f.
-- ARGV: notify prefix.  Returns 1 if it was held, else 0.
local now = now_ms()
local l, s, q, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
tidy(l, s, q, e, ARGV[1], now)
if redis.call('HEXISTS', l, 't') == 0 and redis.call('ZCARD', s) == 0 then return 0 end
redis.call('HDEL', l, 't', 'd')
for _, tok in ipairs(redis.call('ZRANGE', s, 0, -1)) do
  redis.call('HDEL', l, 'u' .. tok, 'f' .. tok)
end
redis.call('HDEL', l, 'h')
redis.call('DEL', s)
redis.call('HINCRBY', l, 'n', 1)
wake(l, s, q, ARGV[1])
drop_if_idle(l, s, q, e, KEYS[5])
return 1
"#;

/// `leave`: A waiter gives up: leaves every queue it stands in and drops its wake-up list.
pub(crate) const LEAVE: &str = r#"-- A waiter gives up: leaves every queue it stands in and drops its wake-up list.
-- KEYS: l s q e per key, then f.  ARGV: notify prefix, waiter id, one mode char per key.
for i = 1, (#KEYS - 1) / 4 do
  local l, s, q, e = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local member = ARGV[2 + i] .. ARGV[2]
  if redis.call('ZREM', q, member) == 1 then
    redis.call('ZREM', e, member)
    wake(l, s, q, ARGV[1])
  end
  drop_if_idle(l, s, q, e, KEYS[#KEYS])
end
redis.call('DEL', ARGV[1] .. ARGV[2])
return 1
"#;

/// `info`: A snapshot of a key. KEYS: l s q e f.  ARGV: notify prefix.
pub(crate) const INFO: &str = r#"-- A snapshot of a key. KEYS: l s q e f.  ARGV: notify prefix.
-- Returns {exclusive held 0/1, fence, exclusive ms left, shared holders, earliest shared ms
-- left, waiters, units held (a semaphore's)}. Drops the key's names if it is idle (after a
-- waiter's registration lapsed, say).
local now = now_ms()
local l, s, q, e = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
tidy(l, s, q, e, ARGV[1], now)
local fence = tonumber(redis.call('HGET', l, 'n') or '0')
local d = redis.call('HGET', l, 'd')
local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')
local shared_left = -1
if first[1] then shared_left = tonumber(first[2]) - now end
local out = {d and 1 or 0, fence, d and (tonumber(d) - now) or -1, redis.call('ZCARD', s),
  shared_left, redis.call('ZCARD', q), tonumber(redis.call('HGET', l, 'h') or '0')}
drop_if_idle(l, s, q, e, KEYS[5])
return out
"#;

/// `permits`: A semaphore scope's permits per key: records ARGV[1] if none are recorded.
pub(crate) const PERMITS: &str = r#"-- A semaphore scope's permits per key: records ARGV[1] if none are recorded yet.
-- KEYS: the prefix's permits key.  Returns the permits recorded.
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1])
  return tonumber(ARGV[1])
end
return tonumber(cur)
"#;
