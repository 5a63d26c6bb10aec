-- wrk script for scripts/bench-peers.sh: POST a JSON-RPC `tools/call` of `echo` to the MCP
-- endpoint, with one Authorization header for every request (BENCH_AUTHORIZATION, e.g.
-- "Bearer eyJ...", or unset for the unauthenticated configuration). The request is static, so
-- wrk builds it once and the generator costs as little as it can.
--
-- done() prints one machine-readable line, BENCH-RESULT key=value..., that the script parses.

wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call",'
  .. '"params":{"name":"echo","arguments":{"text":"mcp-gate-bench-ping"}}}'
-- BENCH_METHOD=list: a `tools/list` instead (scripts/bench-peers.sh).
if os.getenv("BENCH_METHOD") == "list" then
  wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
end
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json, text/event-stream"

local authorization = os.getenv("BENCH_AUTHORIZATION")
if authorization and authorization ~= "" then
  wrk.headers["authorization"] = authorization
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    "BENCH-RESULT requests=%d duration_us=%d p50_us=%.0f p99_us=%.0f"
      .. " non2xx=%d connect=%d read=%d write=%d timeout=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    errors.status, errors.connect, errors.read, errors.write, errors.timeout))
end
