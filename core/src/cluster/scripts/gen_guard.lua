-- One Redis: spent only within the token's generation (KEYS[5] the gen key,
-- ARGV[7] the token's `gen`); else {-1, 0, 0, 0} and nothing is written.
if redis.call('GET', KEYS[5]) ~= rare().run_id() .. ':' .. ARGV[7] then
  return {-1, 0, 0, 0}
end
