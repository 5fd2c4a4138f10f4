-- (The end of `rare.lua`'s function.)
  return R
end
