-- push_unique: push a unique job unless its key is held, in one step (kinetis_queue.unique).
--
-- The lock is a hash {id, member} with the key's lifetime as its expiry (PEXPIRE): the holder's id, and
-- its envelope exactly as stored while it waits (the pending list's or the delayed set's member). The
-- worker deletes it (release_unique.lua) when the holder starts or settles, as its scope says; the
-- expiry bounds it in every scope. A script runs whole: the lock and the job are written together or
-- not at all, and no other client's command runs in between.
--
-- Debounce: when the key is held and the holder still waits on this queue (its member is found in
-- the delayed set or the pending list and removed), the newest envelope replaces it under the holder's
-- id: the envelope's JSON starts with {"id":" and the 32 hex digits of its id (Envelope.to_json), so the
-- id is swapped in place. A holder already reserved is not waiting: the newest push becomes a new job
-- and the new holder (the newest push always runs once).
--
-- A job with a priority waits in the queue's prioritized set (priority.lua); a debounced holder is
-- looked for there too.
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

local function store(member)
    if ARGV[3] == '' then
        make_ready(KEYS[2], KEYS[4], KEYS[5], member, ARGV[6])
    else
        redis.call('ZADD', KEYS[3], ARGV[3], member)
    end
end

local holder = redis.call('HMGET', KEYS[1], 'id', 'member')
if holder[1] then
    if ARGV[5] ~= '1' then
        return {holder[1], 'held'}
    end
    local removed = redis.call('ZREM', KEYS[3], holder[2])
    if removed == 0 then
        removed = redis.call('ZREM', KEYS[4], holder[2])
    end
    if removed == 0 then
        removed = redis.call('LREM', KEYS[2], 1, holder[2])
    end
    if removed == 1 then
        local member = string.sub(ARGV[2], 1, 7) .. holder[1] .. string.sub(ARGV[2], 40)
        store(member)
        redis.call('HSET', KEYS[1], 'member', member)
        redis.call('PEXPIRE', KEYS[1], ARGV[4])
        return {holder[1], 'replaced'}
    end
end
store(ARGV[2])
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'member', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {ARGV[1], 'pushed'}
