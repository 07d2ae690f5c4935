-- sweep: one probe of one queue: promote due delayed jobs, find expired leases, reserve from the pending tail.
--
-- Fused because every pop() runs all three steps on every queue it watches: as three scripts a
-- reserving pop costs three round trips, as one it costs one (`python -m bench.redis` measures the
-- drain rate against a bare redis-py loop).
--
-- Promotion takes at most ARGV[3] envelopes and the expired-lease scan at most ARGV[4] (the
-- spec's 100 each per sweep); the rest stays due for the next sweep. Expired leases are only
-- returned, not moved: reclaiming rewrites the envelope (attempts + 1), and Lua's cjson would
-- re-encode the job's numbers with 14 significant digits, so the caller writes the replacement in
-- Python (decoding the JSON strictly) and applies it with reclaim.lua, fenced on the exact leased
-- envelope.
-- Reserve takes up to ARGV[5] envelopes, in the order successive pops would (see Priority below),
-- each leased with its own score (Redis TIME + the visibility timeout); they are added to leased
-- before they leave pending, so a failing leased key cannot destroy the only copy. When expired
-- leases were found it reserves one at most (none when one of them carries a priority, which may
-- put it first): successive pops would reserve the reclaimed jobs next (reclaim puts them on the
-- tail, or at the front of their priority), so the caller reclaims them and asks again.
--
--
-- Priority (priority.lua): a queue whose prioritized set exists is reserved from in delivery order:
-- its jobs above priority 0, then the pending tail, then its jobs below 0. A promoted envelope that
-- carries a priority joins that set at the back of its priority; the others go to the pending head.
-- The sequence key is deleted when a reservation empties the set. A queue without priorities costs
-- one EXISTS more.
--
-- KEYS[1] = kinetis_queue:{queue}:pending   (list; pushed at the head, reserved from the tail)
-- KEYS[2] = kinetis_queue:{queue}:delayed   (sorted set scored by ready-at time)
-- KEYS[3] = kinetis_queue:{queue}:leased    (sorted set scored by lease expiry, Redis TIME)
-- KEYS[4] = kinetis_queue:{queue}:prioritized (sorted set scored by priority, then arrival: priority.lua)
-- KEYS[5] = kinetis_queue:{queue}:sequence  (priority.lua's counter)
-- ARGV[1] = now by the popping worker's clock, epoch seconds (promotion uses the worker's clock)
-- ARGV[2] = visibility timeout in seconds (the lease length)
-- ARGV[3] = most due envelopes to promote (0: none)
-- ARGV[4] = most expired leases to return (0: none)
-- ARGV[5] = most envelopes to reserve (1 or more)
-- Returns { { reserved envelope, ... } in reservation order, expired leased envelope, ... }

local promote, reclaim = tonumber(ARGV[3]), tonumber(ARGV[4])
if promote > 0 then
    local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, promote)
    if #due > 0 then
        local plain = {}
        for i = 1, #due do
            local priority = envelope_priority(due[i])
            if priority == 0 then
                plain[#plain + 1] = due[i]
            else
                redis.call('ZADD', KEYS[4], priority_score(KEYS[5], priority, false), due[i])
            end
        end
        if #plain > 0 then
            redis.call('LPUSH', KEYS[1], unpack(plain))
        end
        redis.call('ZREM', KEYS[2], unpack(due))
    end
end

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000

local result = { {} }
if reclaim > 0 then
    local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, reclaim)
    for i = 1, #expired do
        result[i + 1] = expired[i]
    end
end

local count = tonumber(ARGV[5])
if #result > 1 then
    count = 1
    for i = 2, #result do
        if envelope_priority(result[i]) ~= 0 then
            count = 0 -- a reclaimed job with a priority may come before anything waiting: reserve after it
            break
        end
    end
end
local expiry = now + tonumber(ARGV[2])
local reserved = result[1]

-- Reserve up to `count` more members of the prioritized set with scores in (low, high), in order.
local function reserve_prioritized(low, high)
    local wanted = count - #reserved
    if wanted <= 0 then
        return
    end
    local members = redis.call('ZRANGEBYSCORE', KEYS[4], low, high, 'LIMIT', 0, wanted)
    if #members > 0 then
        for i = 1, #members do
            redis.call('ZADD', KEYS[3], expiry, members[i])
            reserved[#reserved + 1] = members[i]
        end
        redis.call('ZREM', KEYS[4], unpack(members))
    end
end

local prioritized = redis.call('EXISTS', KEYS[4]) == 1
if prioritized then
    reserve_prioritized('-inf', '(' .. PRIORITY_ZERO)
end
local wanted = count - #reserved
if wanted > 0 then
    local tail = redis.call('LRANGE', KEYS[1], -wanted, -1)
    if #tail > 0 then
        for i = #tail, 1, -1 do
            redis.call('ZADD', KEYS[3], expiry, tail[i])
            reserved[#reserved + 1] = tail[i]
        end
        redis.call('LTRIM', KEYS[1], 0, -#tail - 1)
    end
end
if prioritized then
    reserve_prioritized('(' .. PRIORITY_ZERO, '+inf')
    if redis.call('EXISTS', KEYS[4]) == 0 then
        redis.call('DEL', KEYS[5])
    end
end
return result
