-- A Redis Cluster: spent only within the token's slot generation (KEYS[5]
-- the slot's key, ARGV[7] the token's `gen`); else nothing is spent and the
-- reply is {-1, 0, 0, 0, <the slot's generation>}, renewed first if another
-- run of Redis (a promoted replica, a restart) wrote it.
do
  local r = rare()
  local run = r.run_id()
  local v = redis.call('GET', KEYS[5])
  if v ~= run .. ':' .. ARGV[7] then
    local at, gen = string.match(v or '', '^(%w*):(%d+)$')
    if at ~= run or not gen then gen = r.new_generation(KEYS[5], run) end
    return {-1, 0, 0, 0, tonumber(gen)}
  end
end
