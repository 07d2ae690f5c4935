-- relay_push: store envelopes sent by the outbox relay, each once (kinetis_queue/outbox/relay.py).
--
-- A relay killed after its send and before deleting the outbox rows leaves them to the next relay,
-- which sends them again. Each envelope here comes with a marker key, {prefix}kinetis_queue:relayed:
-- {id}:{pushedAt}, set with SET NX and an expiry (and deleted again when storing the envelope fails):
-- an envelope whose marker is already set was stored by an earlier send and is skipped. The marker
-- names the push itself (a snoozed job's replacement has the same id but a new pushedAt), so only a
-- resend is recognised. Otherwise as push_many.lua: an immediate envelope goes to the head of its
-- queue's pending list (one with a priority to its queue's prioritized set, priority.lua), a delayed
-- one to its delayed set.
--
-- KEYS[1] = kinetis_queue:{queue}:pending   of the first queue (queue number 1), KEYS[2] its delayed
--     set, KEYS[3] its prioritized set, KEYS[4] its sequence key
-- KEYS[4q-3] to KEYS[4q] = the same four keys of queue number q (1 to Q)
-- KEYS[4Q + i]         = envelope i's marker key
-- ARGV[1] = 4Q (how many queue keys come first), ARGV[2] = the markers' expiry in seconds
-- ARGV[4i-1], ARGV[4i], ARGV[4i+1], ARGV[4i+2] = envelope i's queue number, ready-at time ("" when
--     immediate), priority (0: none), JSON
-- Returns how many envelopes were stored (the others had been already)

local queue_keys = tonumber(ARGV[1])

local stored = 0
local i = 0
for a = 3, #ARGV, 4 do
    i = i + 1
    if redis.call('SET', KEYS[queue_keys + i], '1', 'NX', 'EX', ARGV[2]) then
        -- A store that fails (a queue key of another type) takes its marker back before the error ends
        -- the script: the relay's resend then stores this envelope and those after it, and skips the
        -- ones stored before it.
        local base = 4 * tonumber(ARGV[a])
        local ok, err = pcall(store_envelope, KEYS[base - 3], KEYS[base - 2], KEYS[base - 1], KEYS[base],
            ARGV[a + 1], ARGV[a + 2], ARGV[a + 3])
        if not ok then
            redis.call('DEL', KEYS[queue_keys + i])
            error(err)
        end
        stored = stored + 1
    end
end
return stored
