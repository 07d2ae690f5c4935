-- clear: count and delete every pending and delayed job of one queue; leases are never touched.
--
-- One script, so a concurrent push cannot change the number between counting and deleting: the
-- count is exactly what was removed. Leases stay, even expired ones: the worker holding one may
-- still be running its job.
--
-- KEYS[1] = kinetis_queue:{queue}:pending
-- KEYS[2] = kinetis_queue:{queue}:delayed
-- KEYS[3] = kinetis_queue:{queue}:prioritized (its jobs are pending too; priority.lua)
-- KEYS[4] = kinetis_queue:{queue}:sequence
-- Returns the number of jobs removed

local count = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return count
