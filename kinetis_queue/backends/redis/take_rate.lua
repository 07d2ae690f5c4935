-- take_rate: count one start of a rate key, or say how long until the next one is allowed (kinetis_queue.ratelimits).
--
-- On the server's clock (TIME), so every worker of the connection counts against the same time.
-- window: a sorted set of the starts of the last `per` seconds, each a token scored by its time. Starts that
--         aged out are removed first; a start is counted while fewer than `limit` remain, else the wait is
--         until the oldest one ages out. The set expires a second after its newest start would.
-- bucket: one string, the theoretical arrival time of GCRA: a start is counted while that time is at most
--         (capacity - 1) intervals ahead of now, and moves it one interval (per / limit) on.
--
-- KEYS[1] = {prefix}kinetis_queue:rate:{digest}
-- ARGV[1] = 'window' or 'bucket', ARGV[2] = limit, ARGV[3] = per (seconds),
-- ARGV[4] = the start's token (window) or the bucket's capacity (bucket)
-- Returns '0' when the start is counted, else the seconds to wait (a string: Lua numbers lose their fraction)

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local limit = tonumber(ARGV[2])
local per = tonumber(ARGV[3])
if ARGV[1] == 'window' then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - per)
    if redis.call('ZCARD', KEYS[1]) >= limit then
        local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
        return tostring(tonumber(oldest[2]) + per - now)
    end
    redis.call('ZADD', KEYS[1], now, ARGV[4])
    redis.call('PEXPIRE', KEYS[1], math.ceil(per * 1000) + 1000)
    return '0'
end
local interval = per / limit
local arrival = tonumber(redis.call('GET', KEYS[1]) or '0')
if arrival < now then
    arrival = now
end
local ahead = arrival - now - (tonumber(ARGV[4]) - 1) * interval
if ahead > 0 then
    return tostring(ahead)
end
redis.call('SET', KEYS[1], tostring(arrival + interval), 'PX', math.ceil((arrival + interval - now) * 1000) + 1000)
return '0'
