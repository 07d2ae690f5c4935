-- release_unique: free a unique job's key, but only while that job holds it (kinetis_queue.unique).
--
-- Called by the worker when the holder starts (scope "started") or is about to be acked or failed for
-- good (scope "settled"). A key taken over since (it expired and another push took it) belongs to the
-- other job and is left alone.
--
-- KEYS[1] = {prefix}kinetis_queue:unique:{lock key}
-- ARGV[1] = the job id
-- Returns 1 when the key was freed, else 0

if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
