-- wrk script for the memory run of scripts/bench-peers.sh: the same `tools/call echo` POST as
-- echo.lua, but every request carries one of many distinct tokens, and the run stops after a
-- fixed number of responses (wrk itself only knows durations: give it -d as an upper bound).
--
-- Environment:
--   BENCH_TOKENS_FILE   one token per line
--   BENCH_TOKENS_FROM   first line to use, 0-based (default 0)
--   BENCH_TOKENS_COUNT  how many lines from there (default: the rest of the file)
--   BENCH_REQUESTS      responses to wait for, over all threads (default 100000)
--   BENCH_THREADS       wrk's -t, to split BENCH_REQUESTS between the threads
--   BENCH_DONE_DIR      where each thread leaves a file `done-ID` once it has its share
--
-- Thread t (0-based) of T sends its k-th request with token (t + k*T) mod COUNT, so that every
-- token is used, in turn, as often as any other. Each thread checks that every response is a 200
-- carrying the echoed text, and stops itself once it has seen its share of responses (a few
-- more may complete before it does: the count printed is the real one).
-- done() prints one line, BENCH-RESULT key=value..., that the script parses.

local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call",'
  .. '"params":{"name":"echo","arguments":{"text":"mcp-gate-bench-ping"}}}'
local marker = "mcp-gate-bench-ping"

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local tokens = {}
local count, stride, quota
local sent = 0
-- Globals, so that done() can read them from each thread with thread:get().
seen, bad = 0, 0

function init(args)
  local file = assert(os.getenv("BENCH_TOKENS_FILE"), "BENCH_TOKENS_FILE is not set")
  local from = tonumber(os.getenv("BENCH_TOKENS_FROM") or "0")
  local wanted = tonumber(os.getenv("BENCH_TOKENS_COUNT") or "0")
  local line_number = 0
  for line in io.lines(file) do
    if line_number >= from and (wanted == 0 or #tokens < wanted) and line ~= "" then
      table.insert(tokens, line)
    end
    line_number = line_number + 1
  end
  count = #tokens
  assert(count > 0, "no tokens read from " .. file)
  stride = tonumber(os.getenv("BENCH_THREADS") or "1")
  local total = tonumber(os.getenv("BENCH_REQUESTS") or "100000")
  -- Thread `id` takes the remainder as well, so that the shares add up to `total`.
  quota = math.floor(total / stride)
  if id < total % stride then
    quota = quota + 1
  end
  wrk.headers["content-type"] = "application/json"
  wrk.headers["accept"] = "application/json, text/event-stream"
end

function request()
  local token = tokens[((id + sent * stride) % count) + 1]
  sent = sent + 1
  wrk.headers["authorization"] = "Bearer " .. token
  return wrk.format("POST", nil, nil, body)
end

function response(status, headers, response_body)
  seen = seen + 1
  if status ~= 200 or not string.find(response_body, marker, 1, true) then
    bad = bad + 1
  end
  if seen == quota then
    -- wrk runs for its whole -d even when every thread has stopped: tell the script, which
    -- then interrupts wrk (SIGINT makes it print its summary at once).
    local dir = os.getenv("BENCH_DONE_DIR")
    if dir then
      local marker_file = io.open(dir .. "/done-" .. id, "w")
      if marker_file then
        marker_file:close()
      end
    end
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local checked, wrong = 0, 0
  for _, thread in ipairs(threads) do
    checked = checked + (thread:get("seen") or 0)
    wrong = wrong + (thread:get("bad") or 0)
  end
  local errors = summary.errors
  io.write(string.format(
    "BENCH-RESULT requests=%d duration_us=%d p50_us=%.0f p99_us=%.0f"
      .. " non2xx=%d connect=%d read=%d write=%d timeout=%d checked=%d wrong=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    errors.status, errors.connect, errors.read, errors.write, errors.timeout, checked, wrong))
end
