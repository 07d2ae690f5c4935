-- renew: move a live lease's expiry to Redis TIME + the visibility timeout.
--
-- ZADD ... XX only updates a member the leased set still holds, so renewing a settled or
-- reclaimed delivery never adds it back. The changed count is not read: ZADD answers 0 for a
-- score it did not change, which a renewal within the same microsecond produces.
--
-- KEYS[1] = kinetis_queue:{queue}:leased
-- ARGV[1] = the leased envelope, exactly as stored (the handle)
-- ARGV[2] = visibility timeout in seconds
-- Returns nothing

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
