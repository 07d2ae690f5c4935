-- Claim one (schedule, tick) and push its job, as one step: the claim is a key set only if absent
-- (SET NX, with an expiry), and the push happens only when this call set it. Two schedulers firing
-- the same tick run this one after the other; the second finds the key and pushes nothing.
--
-- The push is the one a push() of the job makes (scripts.py puts priority.lua's and unique_push.lua's
-- functions before this text): a job with a priority goes to the queue's prioritized set, and a unique
-- job goes through its lock, so a tick whose key is held stores nothing and names the holder (the
-- tick is claimed all the same: it was dealt with).
--
-- KEYS[1] the claim key    {prefix}kinetis_queue:schedule:{name}:{tick}
-- KEYS[2] the state hash   {prefix}kinetis_queue:schedule:{name}  (tick, job_id, fired_at of the latest tick)
-- KEYS[3] the queue's pending list, KEYS[4] its delayed set, KEYS[5] its prioritized set, KEYS[6] its
--         sequence key
-- KEYS[7] the unique job's lock key (absent when the job is not unique)
-- ARGV[1] job id, ARGV[2] claim expiry in seconds, ARGV[3] the envelope (JSON), ARGV[4] the tick,
-- ARGV[5] the firing scheduler's time (Unix seconds), ARGV[6] the job's priority (0: none),
-- ARGV[7] the lock's lifetime in milliseconds, ARGV[8] "1" to debounce, else "0" (both unique only)
-- Returns the id the push gave (the tick's job id, or the holder's when its unique key is held), or 0
-- when the tick was claimed already.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return 0
end
local job_id = ARGV[1]
if KEYS[7] then
  job_id = push_unique(KEYS[7], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[3], '', ARGV[7], ARGV[8],
                       ARGV[6])[1]
else
  make_ready(KEYS[3], KEYS[5], KEYS[6], ARGV[3], ARGV[6])
end
local latest = tonumber(redis.call('HGET', KEYS[2], 'tick') or '-1')
if tonumber(ARGV[4]) > latest then
  redis.call('HSET', KEYS[2], 'tick', ARGV[4], 'job_id', job_id, 'fired_at', ARGV[5])
end
return job_id
