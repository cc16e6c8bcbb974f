-- wrk script for the keepalive-varied scenario: every request differs from the
-- one before in its target and in a header, so no proxy can reuse the parse of
-- an earlier head (the backend adds a per-response X-Request-Id the same way).
local n = 0

request = function()
  n = n + 1
  return wrk.format("GET", "/varied?n=" .. n, { ["Host"] = wrk.headers["Host"], ["X-Seq"] = tostring(n) })
end
