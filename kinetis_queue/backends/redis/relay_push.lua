-- relay_push: store envelopes sent by the outbox relay, each once (kinetis_queue/outbox/relay.py).
--
-- A relay killed after its send and before deleting the outbox rows leaves them to the next relay,
-- which sends them again. Each envelope here comes with a marker key, {prefix}kinetis_queue:relayed:
-- {id}:{pushedAt}, set with SET NX and an expiry: an envelope whose marker is already set was stored by
-- an earlier send and is skipped. The marker names the push itself (a snoozed job's replacement has
-- the same id but a new pushedAt), so only a resend is recognised. Otherwise as push_many.lua: an
-- immediate envelope goes to the head of its queue's pending list, a delayed one to its delayed set.
--
-- KEYS[1] = kinetis_queue:{queue}:pending   of the first queue (queue number 1), KEYS[2] its delayed set
-- KEYS[2q-1], KEYS[2q] = the pending list and delayed set of queue number q (1 to Q)
-- KEYS[2Q + i]         = envelope i's marker key
-- ARGV[1] = 2Q (how many queue keys come first), ARGV[2] = the markers' expiry in seconds
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2] = envelope i's queue number, ready-at time ("" when immediate), JSON
-- Returns how many envelopes were stored (the others had been already)

local queue_keys = tonumber(ARGV[1])
local stored = 0
local i = 0
for a = 3, #ARGV, 3 do
    i = i + 1
    if redis.call('SET', KEYS[queue_keys + i], '1', 'NX', 'EX', ARGV[2]) then
        local base = 2 * tonumber(ARGV[a])
        if ARGV[a + 1] == '' then
            redis.call('LPUSH', KEYS[base - 1], ARGV[a + 2])
        else
            redis.call('ZADD', KEYS[base], ARGV[a + 1], ARGV[a + 2])
        end
        stored = stored + 1
    end
end
return stored
