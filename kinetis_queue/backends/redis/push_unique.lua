-- push_unique: push a unique job unless its key is held, in one step (kinetis_queue.unique; the rules are
-- unique_push.lua's, which scripts.py puts before this text).
--
-- KEYS[1] = {prefix}kinetis_queue:unique:{lock key}
-- KEYS[2] = the queue's pending list
-- KEYS[3] = the queue's delayed set
-- KEYS[4] = the queue's prioritized set
-- KEYS[5] = the queue's sequence key
-- ARGV[1] = the job id, ARGV[2] = the envelope (JSON), ARGV[3] = its ready-at time ("" when immediate),
-- ARGV[4] = the lock's lifetime in milliseconds, ARGV[5] = "1" to debounce, else "0",
-- ARGV[6] = the job's priority (0: none)
-- Returns {id, outcome}: outcome "pushed" (a new job holds the key), "held" (nothing written) or
-- "replaced" (the waiting holder now carries the newest push)

return push_unique(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
