-- Claim one (schedule, tick) and push its job, as one step: the claim is a key set only if absent
-- (SET NX, with an expiry), and the push happens only when this call set it. Two schedulers firing
-- the same tick run this one after the other; the second finds the key and pushes nothing.
--
-- KEYS[1] the claim key    {prefix}kinetis_queue:schedule:{name}:{tick}
-- KEYS[2] the state hash   {prefix}kinetis_queue:schedule:{name}  (tick, job_id, fired_at of the latest tick)
-- KEYS[3] the queue's pending list
-- ARGV[1] job id, ARGV[2] claim expiry in seconds, ARGV[3] the envelope (JSON), ARGV[4] the tick,
-- ARGV[5] the firing scheduler's time (Unix seconds)
-- Returns 1 when this call claimed and pushed, 0 when the tick was claimed already.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return 0
end
redis.call('LPUSH', KEYS[3], ARGV[3])
local latest = tonumber(redis.call('HGET', KEYS[2], 'tick') or '-1')
if tonumber(ARGV[4]) > latest then
  redis.call('HSET', KEYS[2], 'tick', ARGV[4], 'job_id', ARGV[1], 'fired_at', ARGV[5])
end
return 1
