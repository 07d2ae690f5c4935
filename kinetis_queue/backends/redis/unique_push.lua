-- unique_push: the function that pushes a unique job unless its key is held (kinetis_queue.unique), shared by
-- push_unique.lua and the schedules' fire.lua (scripts.py puts this text, after priority.lua's, before theirs).
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
-- A key whose lock expired is gone (Redis deleted the hash): the push is a new job, and nothing here
-- touches the former holder's envelope, which stays where it waits.
--
-- A job with a priority waits in the queue's prioritized set (priority.lua); a debounced holder is
-- looked for there too.
--
-- lock_key: {prefix}kinetis_queue:unique:{lock key}; pending_key, delayed_key, prioritized_key, sequence_key:
-- the queue's keys (every caller passes them from KEYS); id: the job id; member: the envelope (JSON); ready_at: its ready-at time ("" when immediate);
-- lifetime: the lock's lifetime in milliseconds; debounce: "1" to debounce, else "0"; priority: the job's
-- priority (0: none).
-- Returns {id, outcome}: outcome "pushed" (a new job holds the key), "held" (nothing written) or
-- "replaced" (the waiting holder now carries the newest push)

local function push_unique(lock_key, pending_key, delayed_key, prioritized_key, sequence_key, id, member, ready_at,
                           lifetime, debounce, priority)
    local function store(stored)
        store_envelope(pending_key, delayed_key, prioritized_key, sequence_key, ready_at, priority, stored)
    end

    local holder = redis.call('HMGET', lock_key, 'id', 'member')
    if holder[1] then
        if debounce ~= '1' then
            return {holder[1], 'held'}
        end
        local removed = redis.call('ZREM', delayed_key, holder[2])
        if removed == 0 then
            removed = redis.call('ZREM', prioritized_key, holder[2])
        end
        if removed == 0 then
            removed = redis.call('LREM', pending_key, 1, holder[2])
        end
        if removed == 1 then
            local replacement = string.sub(member, 1, 7) .. holder[1] .. string.sub(member, 40)
            store(replacement)
            redis.call('HSET', lock_key, 'member', replacement)
            redis.call('PEXPIRE', lock_key, lifetime)
            return {holder[1], 'replaced'}
        end
    end
    store(member)
    redis.call('HSET', lock_key, 'id', id, 'member', member)
    redis.call('PEXPIRE', lock_key, lifetime)
    return {id, 'pushed'}
end
