-- stats: queue_status's figures for one queue, read at one instant: ready, delayed, reserved.
--
-- One script, so the three figures are one snapshot and ready + delayed equals what size.lua
-- counts. A delayed job already due by the reader's clock is ready (the next sweep promotes it,
-- by the popping worker's clock), and so is a lease past its expiry by Redis TIME (the next sweep
-- reclaims it); reserved counts live leases only. Only counts are read, never an envelope.
--
-- KEYS[1] = kinetis_queue:{queue}:pending
-- KEYS[2] = kinetis_queue:{queue}:delayed
-- KEYS[3] = kinetis_queue:{queue}:leased
-- KEYS[4] = kinetis_queue:{queue}:prioritized (jobs with a priority, ready; priority.lua)
-- ARGV[1] = now by the reading process's clock, epoch seconds (delayed jobs due by then are ready)
-- Returns { ready, delayed, reserved }

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000

local due = redis.call('ZCOUNT', KEYS[2], '-inf', ARGV[1])
local expired = redis.call('ZCOUNT', KEYS[3], '-inf', now)
local ready = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[4]) + due + expired
return { ready, redis.call('ZCARD', KEYS[2]) - due, redis.call('ZCARD', KEYS[3]) - expired }
