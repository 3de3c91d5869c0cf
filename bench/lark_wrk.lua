-- wrk script of bench/lark_ingest.py and bench/lark_workers.py: signed, encrypted Lark webhooks,
-- each request its own event. The payloads come from a file of
-- "timestamp<TAB>nonce<TAB>signature<TAB>body" lines (wrk ... -s lark_wrk.lua URL -- FILE THREADS);
-- thread k takes lines k, k+THREADS, ... so no event is sent twice unless a thread runs out and
-- starts again ("wraps" in the result).

local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  local path, count = args[1], tonumber(args[2])
  requests, n, i, wraps = {}, 0, 0, 0
  local k = 0
  for line in io.lines(path) do
    if k % count == id then
      local ts, nonce, sig, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
      n = n + 1
      requests[n] = wrk.format("POST", nil, {
        ["Content-Type"] = "application/json",
        ["X-Lark-Request-Timestamp"] = ts,
        ["X-Lark-Request-Nonce"] = nonce,
        ["X-Lark-Signature"] = sig,
      }, body)
    end
    k = k + 1
  end
end

function request()
  i = i + 1
  if i > n then
    i, wraps = 1, wraps + 1
  end
  return requests[i]
end

function done(summary, latency, _)
  local wrapped = 0
  for _, thread in ipairs(threads) do
    wrapped = wrapped + (thread:get("wraps") or 0)
  end
  local e = summary.errors
  -- One JSON line: the counts, and the latency distribution in ms (wrk records every request).
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, '
      .. '"p50_ms": %.3f, "p90_ms": %.3f, "p99_ms": %.3f, "p999_ms": %.3f, '
      .. '"mean_ms": %.3f, "max_ms": %.3f, "wraps": %d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.mean / 1000, latency.max / 1000, wrapped))
end
