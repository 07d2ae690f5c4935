-- acquire_slot: take one of a concurrency key's slots, if fewer than the limit are held (kinetis_queue.limits).
--
-- The slots are a sorted set: each holder's token, scored by the end of its lease on the server's clock
-- (TIME), as the leases of deliveries are. Leases that ended are removed first: a crashed worker's slot
-- is free once it stops renewing it. The set itself expires a second after its newest lease would end,
-- so a key nobody uses any more leaves nothing behind.
--
-- KEYS[1] = {prefix}kinetis_queue:limit:{slot key}
-- ARGV[1] = the limit, ARGV[2] = the holder's token, ARGV[3] = the lease in seconds
-- Returns 1 when taken, 0 when the limit is reached

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
    return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease * 1000) + 1000)
return 1
