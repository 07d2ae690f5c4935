-- release: swap a live delivery's leased envelope for its replacement, on pending or delayed.
--
-- Fenced on the exact leased envelope (the delivery's handle): if it is no longer leased (settled,
-- reclaimed, released already) nothing is written and 0 comes back, which the caller raises as a
-- stale release. The replacement (attempts + 1) is written before the old envelope is removed, and
-- the destination is chosen inside the script, so a delayed retry is as indivisible as an
-- immediate one. An immediate release goes to the pending head, behind the work already waiting (a
-- job with a priority: to the back of its priority in the prioritized set, priority.lua); a delayed
-- one keeps its priority in the envelope, for its promotion.
--
-- KEYS[1] = kinetis_queue:{queue}:leased
-- KEYS[2] = kinetis_queue:{queue}:pending
-- KEYS[3] = kinetis_queue:{queue}:delayed
-- KEYS[4] = kinetis_queue:{queue}:prioritized
-- KEYS[5] = kinetis_queue:{queue}:sequence
-- ARGV[1] = the leased envelope, exactly as stored (the handle)
-- ARGV[2] = its replacement
-- ARGV[3] = ready-at time, epoch seconds by the releasing process's clock, or "" for no delay
-- ARGV[4] = the job's priority (0: none)
-- Returns 1 when released, 0 when the handle is stale

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    return 0
end
if ARGV[3] == '' then
    make_ready(KEYS[2], KEYS[4], KEYS[5], ARGV[2], ARGV[4])
else
    redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
