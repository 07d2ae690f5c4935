-- unreserve: give back a delivery whose attempt never started, same envelope, at once or after a delay.
--
-- Fenced on the exact leased envelope (the delivery's handle): if it is no longer leased (settled,
-- reclaimed, released or given back already) nothing is written and 0 comes back, which the caller
-- raises as a stale unreserve. Unlike release.lua nothing is rewritten: the envelope goes back as it
-- is (attempts unchanged, so no attempt is charged). Without a delay it goes on the pending tail,
-- where the next reserve takes it, ahead of the jobs already waiting; with one (a job held back at
-- its concurrency limit) into the delayed set, scored by its ready-at time. It is added there before
-- its lease is removed, so a failing key cannot destroy the only copy.
--
-- A job with a priority goes back to the front of its priority in the prioritized set (priority.lua).
--
-- KEYS[1] = kinetis_queue:{queue}:leased
-- KEYS[2] = kinetis_queue:{queue}:pending
-- KEYS[3] = kinetis_queue:{queue}:delayed
-- KEYS[4] = kinetis_queue:{queue}:prioritized
-- KEYS[5] = kinetis_queue:{queue}:sequence
-- ARGV[1] = the leased envelope, exactly as stored (the handle)
-- ARGV[2] = the ready-at time (epoch seconds, the caller's clock), "" to give it back at once
-- ARGV[3] = the job's priority (0: none)
-- Returns 1 when given back, 0 when the handle is stale

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    return 0
end
if ARGV[2] == '' and tonumber(ARGV[3]) ~= 0 then
    redis.call('ZADD', KEYS[4], priority_score(KEYS[5], ARGV[3], true), ARGV[1])
elseif ARGV[2] == '' then
    redis.call('RPUSH', KEYS[2], ARGV[1])
else
    redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
