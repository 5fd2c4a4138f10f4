-- A node's locally refused requests, one batch per client, of one or more
-- clients (`BATCH_SCRIPT`: KEYS, ARGV and the reply).
-- Client i's keys are KEYS[6i-5 .. 6i], its arguments ARGV[8i-7 .. 8i].
local out = {}
for i = 0, #KEYS / 6 - 1 do
  local k, a = 6 * i, 8 * i
  local total, window = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local b = breaker(KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], a + 3)
  local run = tonumber(ARGV[a + 7])
  -- What this worker's calls applied: '<run> <total>'. An earlier run's
  -- call (its entry gone, so all applied) and a total already applied add
  -- nothing. Without a record of the run (a later run, or Redis lost it),
  -- what the worker knows was applied (ARGV[a + 8]) is the start.
  -- (Written first and read back in one call: the record goes back as it
  -- was in the rare case that this call is the older one.)
  local n = total - tonumber(ARGV[a + 8])
  local last = redis.call('SET', KEYS[k + 5], ARGV[a + 7] .. ' ' .. ARGV[a + 1], 'PX', '600000',
    'GET')
  if last then
    local lrun, ltotal = string.match(last, '^(%d+) (%d+)$')
    lrun, ltotal = tonumber(lrun), tonumber(ltotal)
    if lrun and (lrun > run or (lrun == run and ltotal >= total)) then
      redis.call('SET', KEYS[k + 5], last, 'PX', '600000')
      n = 0
    elseif lrun == run then
      n = total - ltotal
    end
  end
  local fresh = n > 0
  local over
  if fresh then
    over = redis.call('INCRBY', KEYS[k + 1], n)
    if over == n then redis.call('PEXPIRE', KEYS[k + 1], 2 * window) end
  else
    over = tonumber(redis.call('GET', KEYS[k + 1]) or 0)
  end
  local strikes, block, block_ms = breaker_status(b)
  local tripped = 0
  -- Refusals already paid for (on another node, before this batch came):
  -- no strike.
  if fresh and b.threshold > 0 then
    local paid = math.min(tonumber(redis.call('GET', KEYS[k + 6]) or 0), n)
    if paid > 0 then redis.call('DECRBY', KEYS[k + 6], paid) end
    n = n - paid
  end
  if fresh and b.threshold > 0 and n > 0 then
    if block == 0 then
      strikes, tripped = rare().strike_n(b, n, true)
    elseif redis.call('PTTL', b.sk) > 0 then
      -- Blocked meanwhile (by another node): the 429s this node sent still
      -- count, but neither extend the block nor trip again.
      strikes = redis.call('INCRBY', b.sk, n)
      redis.call('INCRBY', b.uk, n)
      redis.call('PEXPIRE', b.uk, redis.call('PTTL', b.sk))
    end
    strikes, block, block_ms = breaker_status(b)
  end
  out[#out + 1] = string.format('%d %d %d %d %d', over, strikes, block, block_ms, tripped)
end
-- One bulk string of decimal integers: an array reply of every client's
-- five would exceed what the node accepts of a reply (16 elements).
return table.concat(out, ' ')
