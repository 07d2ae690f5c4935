-- push_many: store several envelopes in one call, when they go to several queues or mix delays.
--
-- One script call is one round trip, and it runs whole: no other client's command runs in the middle
-- of it, a call whose bytes did not all arrive never runs, and an out-of-memory refusal comes at its
-- first write, so nothing is stored. Redis has no rollback: a runtime error part-way (a key someone
-- made another type) keeps what was written before it.
--
-- An immediate envelope goes to the head of its queue's pending list (reserve takes the tail), in
-- the order given, so the batch pops in that order behind the jobs already waiting (one with a
-- priority: at the back of its priority in the prioritized set, priority.lua); a delayed one goes to
-- the delayed set scored by its ready-at time (its envelope carries its priority to its promotion).
-- RedisQueue._push sends a single immediate job with a priority here too.
--
-- KEYS[1] = kinetis_queue:{queue}:pending       of the first queue (queue number 1)
-- KEYS[2] = kinetis_queue:{queue}:delayed
-- KEYS[3] = kinetis_queue:{queue}:prioritized
-- KEYS[4] = kinetis_queue:{queue}:sequence
-- KEYS[4q-3] to KEYS[4q] = the same four keys of queue number q
-- ARGV[4i-3] = envelope i's queue number q
-- ARGV[4i-2] = envelope i's ready-at time (epoch seconds, the pushing process's clock), "" when immediate
-- ARGV[4i-1] = envelope i's priority (0: none)
-- ARGV[4i]   = envelope i, its JSON
-- Returns the number of envelopes stored

local stored = 0
for i = 1, #ARGV, 4 do
    local base = 4 * tonumber(ARGV[i])
    store_envelope(KEYS[base - 3], KEYS[base - 2], KEYS[base - 1], KEYS[base], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
    stored = stored + 1
end
return stored
