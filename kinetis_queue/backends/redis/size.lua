-- size: waiting work on one queue: pending, delayed, and leases past their expiry (Redis TIME).
--
-- One script, so the three counts are one snapshot. An expired lease counts as waiting because
-- the next sweep reclaims it; a live lease does not.
--
-- KEYS[1] = kinetis_queue:{queue}:pending
-- KEYS[2] = kinetis_queue:{queue}:delayed
-- KEYS[3] = kinetis_queue:{queue}:leased
-- KEYS[4] = kinetis_queue:{queue}:prioritized (jobs with a priority, pending too; priority.lua)
-- Returns the count

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
return redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2])
    + redis.call('ZCOUNT', KEYS[3], '-inf', now) + redis.call('ZCARD', KEYS[4])
