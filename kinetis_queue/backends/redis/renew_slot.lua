-- renew_slot: extend a held concurrency slot's lease, only while its holder's token still holds it.
--
-- A slot whose lease ended and was taken by another holder (or removed) is not added back: the token
-- is the fence. The set's own expiry follows the newest lease (see acquire_slot.lua).
--
-- KEYS[1] = {prefix}kinetis_queue:limit:{slot key}
-- ARGV[1] = the holder's token, ARGV[2] = the lease in seconds
-- Returns 1 when renewed, 0 when the token no longer holds a slot

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease * 1000) + 1000)
return 1
