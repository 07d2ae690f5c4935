-- priority: the functions the scripts that store a job share (scripts.py puts this text before theirs).
--
-- A job whose priority is not 0 (kinetis_queue.priority) waits in its queue's prioritized sorted set
-- instead of the pending list, scored so that the set's ascending order is delivery order:
--   score = (100 - priority) * 2^45 + 2^44 + n
-- so a higher priority comes first, and every score of a priority above 0 is below PRIORITY_ZERO (the
-- pending list's place: its jobs run after those and before the ones below 0). n orders one priority:
-- the queue's sequence key counts up (INCR), so a job joining at the back gets +n, after every job
-- already there, and a job given back ahead (reclaim, unreserve) -n, before them (the last given back
-- runs first, as on the pending list's tail). Every score is an integer below 2^53, exact in a double,
-- while fewer than 2^44 jobs join one queue's set between two moments it is empty (sweep.lua then
-- deletes the sequence key).

local PRIORITY_SPAN = 35184372088832   -- 2^45
local PRIORITY_MIDDLE = 17592186044416 -- 2^44
local PRIORITY_ZERO = '3518437208883200' -- 100 * 2^45, as the text a score range takes

-- The score of a job of `priority` joining the prioritized set, at the back or (ahead) at the front,
-- as text: Redis would turn a Lua number into text with 14 significant digits, losing n.
local function priority_score(sequence_key, priority, ahead)
    local n = redis.call('INCR', sequence_key)
    if ahead then
        n = -n
    end
    return string.format('%.0f', (100 - tonumber(priority)) * PRIORITY_SPAN + PRIORITY_MIDDLE + n)
end

-- The priority an envelope carries in its metadata, 0 when none (or none that is valid): only read
-- when the envelope names the key, so a job without priority costs one substring search.
local function envelope_priority(member)
    if not string.find(member, '"kinetis_queue.priority":', 1, true) then
        return 0
    end
    local ok, decoded = pcall(cjson.decode, member)
    if not ok or type(decoded) ~= 'table' or type(decoded['metadata']) ~= 'table' then
        return 0
    end
    local priority = decoded['metadata']['kinetis_queue.priority']
    if type(priority) ~= 'number' or priority ~= math.floor(priority) or priority < -100 or priority > 100 then
        return 0
    end
    return priority
end

-- Make `member` (of `priority`) ready: on the pending list's head (priority 0) or in the prioritized set.
local function make_ready(pending_key, prioritized_key, sequence_key, member, priority)
    if tonumber(priority) == 0 then
        redis.call('LPUSH', pending_key, member)
    else
        redis.call('ZADD', prioritized_key, priority_score(sequence_key, priority, false), member)
    end
end


-- Store `member` in its queue, as push_many.lua and relay_push.lua do for each envelope: immediate
-- (`ready_at` "") ready at once (make_ready), else in the delayed set scored by its ready-at time (the
-- envelope carries its priority to its promotion).
local function store_envelope(pending_key, delayed_key, prioritized_key, sequence_key, ready_at, priority, member)
    if ready_at == '' then
        make_ready(pending_key, prioritized_key, sequence_key, member, priority)
    else
        redis.call('ZADD', delayed_key, ready_at, member)
    end
end
