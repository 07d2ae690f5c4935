-- reclaim: return expired leases to pending, each fenced on its exact leased envelope and still expired.
--
-- The caller found the expired envelopes with sweep.lua and wrote each replacement (same id and
-- pushedAt, attempts + 1, so a new handle). For each pair, the replacement goes to the pending tail
-- (a crashed delivery gets no delay: the next reserve takes it) and only then is the old envelope
-- removed. A pair whose old envelope is no longer leased (settled, or reclaimed by a racing sweep)
-- or no longer expired (renewed since) writes nothing: of two racers, one wins. An empty
-- replacement removes the old envelope only: it no longer decodes, and is removed as malformed
-- rather than found again by every sweep.
--
-- A job with a priority goes to the front of its priority in the prioritized set (priority.lua).
--
-- KEYS[1] = kinetis_queue:{queue}:leased
-- KEYS[2] = kinetis_queue:{queue}:pending
-- KEYS[3] = kinetis_queue:{queue}:prioritized
-- KEYS[4] = kinetis_queue:{queue}:sequence
-- ARGV[3n-2] = an expired leased envelope, exactly as stored
-- ARGV[3n-1] = its replacement, or "" to remove it as malformed
-- ARGV[3n]   = the job's priority (0: none)
-- Returns { envelopes reclaimed, malformed envelopes removed }

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000

local reclaimed, removed = 0, 0
for i = 1, #ARGV, 3 do
    local expiry = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if expiry and tonumber(expiry) <= now then
        if ARGV[i + 1] == '' then
            removed = removed + 1
        elseif tonumber(ARGV[i + 2]) ~= 0 then
            redis.call('ZADD', KEYS[3], priority_score(KEYS[4], ARGV[i + 2], true), ARGV[i + 1])
            reclaimed = reclaimed + 1
        else
            redis.call('RPUSH', KEYS[2], ARGV[i + 1])
            reclaimed = reclaimed + 1
        end
        redis.call('ZREM', KEYS[1], ARGV[i])
    end
end
return { reclaimed, removed }
