-- bench/soak.lua — wrk's request mix for bench/soak.sh (the stateless bulk).
--
--   wrk -s bench/soak.lua ... http://127.0.0.1:<port>/
--
-- Per request, at random:
--   60 % green:      /g with one of SOAK_GREEN_KEYS client keys (X-Soak-Key),
--                    a limit no key reaches                     -> 200
--   25 % over limit: /y with one of 50 keys, pow_shield_limit 1 1d -> 429
--   15 % garbage:    malformed or forged-looking PoW headers on /y, and
--                    odd client keys on /g (empty, 6000 bytes, high-bit
--                    bytes): 400/403/422/429/200, never 5xx; one request
--                    carries a 9000-byte header (nginx answers 400 itself
--                    and closes the connection; wrk reconnects)
-- Requests are prebuilt strings (HTTP/1.1, keep-alive), so duplicate
-- headers can be sent too.

local green_keys = tonumber(os.getenv("SOAK_GREEN_KEYS") or "") or 5000
local green, yellow, garbage = {}, {}, {}

local function req(path, headers)
    return "GET " .. path .. " HTTP/1.1\r\nHost: soak\r\n" .. headers .. "\r\n"
end

local function pow(token, nonce)
    local h = ""
    if token then h = h .. "X-PoW-Challenge: " .. token .. "\r\n" end
    if nonce then h = h .. "X-PoW-Nonce: " .. nonce .. "\r\n" end
    return req("/y", "X-Soak-Key: y1\r\n" .. h)
end

-- A syntactically plausible token: base64url payload "." base64url MAC.
local fake = "eyJpcCI6IjEyNy4wLjAuMSIsInRzIjoxLCJkaWZmaWN1bHR5IjoxLCJzYWx0IjoiYWIifQ"
    .. "." .. string.rep("Q", 43)

function init(args)
    math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000)
    for i = 1, green_keys do
        green[i] = req("/g", "X-Soak-Key: g" .. i .. "\r\n")
    end
    for i = 1, 50 do
        yellow[i] = req("/y", "X-Soak-Key: y" .. i .. "\r\n")
    end
    garbage = {
        pow("no-dot-at-all", "1"),                          -- 400 malformed
        pow(nil, "1"),                                      -- 400 nonce only
        pow(fake, nil),                                     -- 400 token only
        pow("a.b", "1"),                                    -- 403 (MAC)
        pow(".", "1"),                                      -- 400/403
        pow("...", "1"),                                    -- 400
        pow(fake, "1"),                                     -- 403 (MAC)
        pow(fake, "12abc"),                                 -- 403/422
        pow(fake, "-1"),                                    -- 403/422
        pow(fake, string.rep("9", 40)),                     -- 403/422
        pow(fake, string.rep("7", 7000)),                   -- 403/422, big header
        pow(string.rep("A", 7000) .. "." .. string.rep("B", 43), "1"), -- 403
        pow(string.rep("A", 43) .. "." .. string.rep("B", 7000), "1"), -- 403
        pow("\xff\xfe\x80." .. string.rep("\xc3\xa9", 30), "\xef\xbb\xbf1"), -- 400/403
        pow(fake .. "\t", " 1 "),                           -- header whitespace
        req("/y", "X-Soak-Key: y2\r\nX-PoW-Challenge: " .. fake .. "\r\nX-PoW-Challenge: a.b\r\nX-PoW-Nonce: 1\r\nX-PoW-Nonce: 2\r\n"),
        req("/y", "X-Soak-Key: y3\r\nX-PoW-Challenge: " .. string.rep("x", 9000) .. "\r\n"), -- 400 by nginx
        req("/g", "X-Soak-Key: \r\n"),                      -- empty key: exempt, 200
        req("/g", "X-Soak-Key: " .. string.rep("k", 6000) .. "\r\n"),  -- long key (hashed)
        req("/g", "X-Soak-Key: \xff\x80\xfe-" .. math.random(1000) .. "\r\n"),
        req("/y", "X-Soak-Key: y4\r\nX-PoW-Challenge: " .. fake .. "\r\nX-PoW-Nonce: 1\r\nContent-Length: 5\r\n") .. "hello",
    }
end

function request()
    local r = math.random(100)
    if r <= 60 then
        return green[math.random(green_keys)]
    elseif r <= 85 then
        return yellow[math.random(50)]
    end
    return garbage[math.random(#garbage)]
end
