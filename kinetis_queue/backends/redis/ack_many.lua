-- ack_many: settle several deliveries at once, each fenced on its own exact leased envelope.
--
-- One ZREM per delivery, so each is acked wholly or refused on its own: a delivery whose envelope
-- is no longer leased (settled, reclaimed, released) removes nothing and answers 0, which the
-- caller reports as a stale ack in its place. The deliveries may come from several queues: KEYS
-- holds each queue's leased key once, and every delivery names its key by index.
--
-- KEYS[1] = kinetis_queue:{queue}:leased    of the first queue the deliveries came from
-- KEYS[n] = kinetis_queue:{queue}:leased    of the n-th one (each queue's key once)
-- ARGV[2i-1] = the index in KEYS of delivery i's leased key
-- ARGV[2i]   = delivery i's leased envelope, exactly as stored (its handle)
-- Returns { 1 or 0 per delivery, in order: 1 acked, 0 stale }

local results = {}
for i = 1, #ARGV, 2 do
    results[#results + 1] = redis.call('ZREM', KEYS[tonumber(ARGV[i])], ARGV[i + 1])
end
return results
