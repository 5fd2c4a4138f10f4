-- One spend per solution, and the strike its 429 recorded taken back
-- (`SPEND_SCRIPT`: KEYS, ARGV and the reply). ARGV[6] adds up what the
-- spend is (`args::spend_mode`): 1 the zone decided it, 2 its 429 counted
-- no strike, 4 its 429's Retry-After has ended (a wait may have taken its
-- strike back).
local b = breaker(KEYS[2], KEYS[3], KEYS[4], 2)
local mode = tonumber(ARGV[6])
local decided, unstruck, waited_out = mode % 2 == 1, mode % 4 >= 2, mode >= 4
if not decided then
  local strikes, block, block_ms = breaker_status(b)
  if block > 0 then return {2, strikes, block, block_ms} end
end
local strikes = tonumber(redis.call('GET', b.sk) or 0)
if not redis.call('SET', KEYS[1], '1', 'PX', ARGV[1], 'NX') then
  return {0, strikes, 0, 0}
end
-- Only an unpaid strike, never below 0: paying takes back no failed
-- verification. DECR keeps the expiry.
if unstruck then
  -- Its 429 counted no strike: nothing to take back.
elseif strikes > 0 and tonumber(redis.call('GET', b.uk) or 0) > 0 then
  redis.call('DECR', b.uk)
  strikes = redis.call('DECR', b.sk)
elseif b.threshold > 0 and KEYS[6] and not waited_out then
  -- No unpaid strike here yet, before the 429's Retry-After ended (no wait
  -- can have taken it back): the 429 was refused by a node whose batch has
  -- not arrived. The batch takes it back (at most `threshold` wait, for
  -- the strike time). Later, a strike a wait took back is not taken back
  -- twice.
  if redis.call('INCR', KEYS[6]) > b.threshold then redis.call('DECR', KEYS[6]) end
  redis.call('PEXPIRE', KEYS[6], ARGV[3])
end
return {1, strikes, 0, 0}
