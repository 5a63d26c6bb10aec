#!/usr/bin/env bash
# Side-by-side loopback benchmark with a real load generator (wrk), in one run:
#
#   (a) the example rmcp server, no authentication
#   (b) the same behind mcp-gate: valid ES256 token, policy allows (token cache on)
#   (c) the same behind mcp-gate: valid ES256 token, policy denies (`unavailable`)
#   (d) the TypeScript SDK: `requireBearerAuth` + `McpServer` (tests/peers/ts-bearer-server.mjs)
#   (e) optional: as (b) with the token cache off (BENCH_CONFIGS=abcde)
#   (g) optional: the gateway binary (mcp-gate-server) in front of (a), same token, allow-all
#       (BENCH_CONFIGS=abg: the upstream direct, through the gateway, through the layer)
#
# Every configuration answers the same `tools/call echo` POST on http://127.0.0.1:PORT/mcp, and
# (b) to (e) verify the very same tokens against the same JWK set. Then a memory run: the gated
# server (cache on), VmRSS before and after 100,000 requests over 10,000 distinct tokens, and
# after as many again over 10,000 other tokens.
#
#   scripts/bench-peers.sh
#   BENCH_SECONDS=5 BENCH_ROUNDS=1 scripts/bench-peers.sh        # quick
#   BENCH_CONNECTIONS=1,32,256 BENCH_SECONDS=3 BENCH_MEMORY=0 scripts/bench-peers.sh   # scaling table
#
# Environment (all optional; see benches/README.md):
#   BENCH_SECONDS=10 BENCH_WARMUP=2 BENCH_ROUNDS=3 BENCH_CONNECTIONS=32 BENCH_THREADS=2
#   (BENCH_CONNECTIONS may be a list, 1,32,256: one run per count, then a table of them all;
#   wrk's threads are at most the connections)
#   BENCH_CONFIGS=abcd BENCH_PORT=18931 BENCH_MEMORY=1 BENCH_MEM_REQUESTS=100000
#   BENCH_MEM_TOKENS=10000 BENCH_MEM_PASSES=2 BENCH_MEM_MAX_SECONDS=180 BENCH_RSS_BOUND_MIB=64
#   BENCH_STRICT=0 (1: exit 3 when a goal is missed) BENCH_SKIP_BUILD=0 BENCH_OUT=target/bench-peers
#   BENCH_TS_VALIDATOR_PER_REQUEST=0 (1: each TS server builds its own Ajv validator)
#   BENCH_FEATURES= (the crate features bench_target is built with; `metrics`: the gated
#   servers count every decision into an installed Prometheus recorder)
#   BENCH_PIN=0 (1: the server under test runs on CPU 0 and wrk on CPU 1, with taskset, so the
#   two never share a core and throughput is what one core of server work gives; needs two
#   cores or more)
#   BENCH_METHOD=call (list: every configuration answers `tools/list` instead, the example's
#   13 tools, each judged by the gate; every configuration but c, which lists nothing; the
#   list goal b/a >= 0.9 in place of the call's)
#
# Installs wrk (Debian package) when missing and the Node peers when missing. Every step is
# bounded in time, and every process it starts is stopped on exit. Exit status: 0, or 1 when a
# request failed or a server misbehaved, 2 for a bad setting, 3 (BENCH_STRICT=1) for a missed goal.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peers="$root/tests/peers"
lua="$root/benches/lua"

log() { printf 'bench-peers: %s\n' "$*" >&2; }
die() {
  log "$*"
  exit 1
}

# ---- Settings --------------------------------------------------------------------------------
setting() { # NAME DEFAULT MIN MAX: an integer setting from the environment
  local name=$1 value=${!1:-$2}
  if ! [[ "$value" =~ ^[0-9]+$ ]] || ((value < $3 || value > $4)); then
    log "$name=$value: expected an integer in $3..$4"
    exit 2
  fi
  printf '%s' "$value"
}
# ---- Several connection counts: one run of this script per count, then the scaling table ----
if [[ "${BENCH_CONNECTIONS:-}" == *,* ]]; then
  [[ "$BENCH_CONNECTIONS" =~ ^[0-9]+(,[0-9]+)+$ ]] || {
    log "BENCH_CONNECTIONS=$BENCH_CONNECTIONS: a count, or a comma list of counts"
    exit 2
  }
  IFS=, read -r -a counts <<<"$BENCH_CONNECTIONS"
  out=${BENCH_OUT:-$root/target/bench-peers}
  mkdir -p "$out"
  status=0
  # The memory run once: with 32 connections when listed (as in a run of one count), else the last.
  memory_at=${counts[${#counts[@]} - 1]}
  [[ ",$BENCH_CONNECTIONS," != *,32,* ]] || memory_at=32
  for i in "${!counts[@]}"; do
    memory_here=0
    [[ ${counts[i]} != "$memory_at" ]] || memory_here=${BENCH_MEMORY:-1}
    # The build once, before the first count.
    BENCH_CONNECTIONS=${counts[i]} BENCH_OUT="$out/c${counts[i]}" BENCH_MEMORY=$memory_here \
      BENCH_SKIP_BUILD=$((i > 0 ? 1 : ${BENCH_SKIP_BUILD:-0})) \
      "${BASH_SOURCE[0]}" || { code=$?; ((code == 3 && status != 0)) || status=$code; }
  done
  # One row per count: its medians over rounds, and the paired ratios.
  : >"$out/scaling.tsv"
  for c in "${counts[@]}"; do
    [[ -s "$out/c$c/results.tsv" ]] || continue
    awk -F'\t' -v c="$c" '
      function median(list, n,    i, j, v) {
        for (i = 2; i <= n; i++) { v = list[i]; for (j = i - 1; j >= 1 && list[j] > v; j--) list[j + 1] = list[j]; list[j + 1] = v }
        return n == 0 ? 0 : (n % 2 ? list[(n + 1) / 2] : (list[n / 2] + list[n / 2 + 1]) / 2)
      }
      { rps[$1, $2] = $3; us[$1, $2] = $6; rounds[$2] = 1 }
      END {
        for (r in rounds) {
          if (rps["a", r] > 0) { na++; ra[na] = rps["a", r]; ua[na] = us["a", r] }
          if (rps["b", r] > 0) { nb++; rb[nb] = rps["b", r]; ub[nb] = us["b", r] }
          if (rps["d", r] > 0) { nd++; rd[nd] = rps["d", r] }
          if (rps["a", r] > 0 && rps["b", r] > 0) { nba++; ba[nba] = rps["b", r] / rps["a", r] }
          if (rps["d", r] > 0 && rps["b", r] > 0) { nbd++; bd[nbd] = rps["b", r] / rps["d", r] }
        }
        printf "%d\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.1f\t%.1f\n", c, median(ra, na), median(rb, nb),
          median(rd, nd), median(ba, nba), median(bd, nbd), median(ua, na), median(ub, nb)
      }' "$out/c$c/results.tsv" >>"$out/scaling.tsv"
  done
  echo
  echo "scaling with connections (medians over rounds; b/a and b/d: medians of the per-round ratios;"
  echo "us/req: the server's CPU per request; gate: (b) minus (a), and its growth against the first row)"
  awk -F'\t' 'BEGIN {
      printf "%6s %10s %10s %10s %6s %7s %11s %11s %9s %7s\n", "conns", "(a) req/s", "(b) req/s", "(d) req/s",
        "b/a", "b/d", "(a) us/req", "(b) us/req", "gate us", "growth"
    }
    {
      gate = $8 - $7
      if (NR == 1) first = gate
      growth = (first > 0) ? sprintf("%7.2f", gate / first) : sprintf("%7s", "-")
      d = ($4 > 0) ? sprintf("%10d", $4) : sprintf("%10s", "-")
      bd = ($6 > 0) ? sprintf("%7.2f", $6) : sprintf("%7s", "-")
      printf "%6d %10d %10d %s %6.2f %s %11.1f %11.1f %9.1f %s\n", $1, $2, $3, d, $5, bd, $7, $8, gate, growth
    }' "$out/scaling.tsv"
  echo "logs: $out/c*"
  exit "$status"
fi

seconds=$(setting BENCH_SECONDS 10 1 600)
warmup=$(setting BENCH_WARMUP 2 0 60)
rounds=$(setting BENCH_ROUNDS 3 1 50)
connections=$(setting BENCH_CONNECTIONS 32 1 1024)
threads=$(setting BENCH_THREADS 2 1 64)
pin=$(setting BENCH_PIN 0 0 1)
port=$(setting BENCH_PORT 18931 1024 65535)
memory=$(setting BENCH_MEMORY 1 0 1)
mem_requests=$(setting BENCH_MEM_REQUESTS 100000 1 10000000)
mem_tokens=$(setting BENCH_MEM_TOKENS 10000 1 1000000)
mem_passes=$(setting BENCH_MEM_PASSES 2 1 5)
mem_max_seconds=$(setting BENCH_MEM_MAX_SECONDS 180 5 3600)
rss_bound_mib=$(setting BENCH_RSS_BOUND_MIB 64 1 100000)
strict=$(setting BENCH_STRICT 0 0 1)
skip_build=$(setting BENCH_SKIP_BUILD 0 0 1)
ts_validator_per_request=$(setting BENCH_TS_VALIDATOR_PER_REQUEST 0 0 1)
method=${BENCH_METHOD:-call}
case $method in
call) configs=${BENCH_CONFIGS:-abcd} ;;
list) configs=${BENCH_CONFIGS:-abd} ;;
*)
  log "BENCH_METHOD=$method: call or list"
  exit 2
  ;;
esac
features=${BENCH_FEATURES:-}
if ! [[ "$features" =~ ^[a-z0-9_,-]*$ ]]; then
  log "BENCH_FEATURES=$features: a comma-separated list of the crate's features"
  exit 2
fi
if [[ $method == list && $configs == *c* ]]; then
  log "BENCH_CONFIGS=$configs: (c) denies every entry, so it has no list to measure (BENCH_METHOD=list)"
  exit 2
fi
if ! [[ "$configs" =~ ^[a-eg]+$ ]]; then
  log "BENCH_CONFIGS=$configs: use letters among a, b, c, d, e and g"
  exit 2
fi
# Pinned: the server on CPU 0, wrk on CPU 1.
server_cpu=() client_cpu=()
if ((pin == 1)); then
  command -v taskset >/dev/null 2>&1 || {
    log "BENCH_PIN=1 needs taskset (Debian: util-linux)"
    exit 2
  }
  (($(nproc) >= 2)) || {
    log "BENCH_PIN=1 needs two cores; this machine has $(nproc)"
    exit 2
  }
  server_cpu=(taskset -c 0) client_cpu=(taskset -c 1)
fi
# wrk gives each thread at least one connection.
((threads <= connections)) || threads=$connections
out=${BENCH_OUT:-$root/target/bench-peers}
url="http://127.0.0.1:$port/mcp"
# Servers exit by themselves after this long, should this script ever leave one behind.
server_life=$((rounds * 5 * (seconds + warmup + 60) + mem_passes * mem_max_seconds + 600))

declare -A label=(
  [a]="(a) rmcp, no auth"
  [b]="(b) mcp-gate, ES256, allow"
  [c]="(c) mcp-gate, ES256, deny"
  [d]="(d) TS SDK requireBearerAuth"
  [e]="(e) mcp-gate, allow, no cache"
  [g]="(g) mcp-gate-server -> (a)"
)

# ---- Processes: every one we start is stopped on exit ----------------------------------------
started=()
cleanup() {
  local pid
  for pid in "${started[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  sleep 0.2
  for pid in "${started[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- Tools -----------------------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
  as_root=()
  [[ "$(id -u)" -eq 0 ]] || as_root=(sudo -n)
  command -v apt-get >/dev/null 2>&1 || die "wrk is missing and apt-get is not available: install wrk"
  log "apt-get install wrk"
  timeout 600 "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  timeout 600 "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends wrk >/dev/null
fi
for tool in wrk node npm curl cargo timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "missing $tool"
done

# The TS peer's packages (the same lock as scripts/setup-peers.sh, held only while installing).
if ! (cd "$peers" && timeout 60 node --input-type=module -e "
    await import('@modelcontextprotocol/sdk/server/mcp.js');
    await import('@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js');
    await import('jose'); await import('express'); await import('zod/v4');") >/dev/null 2>&1; then
  log "npm ci in tests/peers"
  (
    if command -v flock >/dev/null 2>&1; then
      exec 9<"$root/scripts/setup-peers.sh"
      flock 9
    fi
    cd "$peers" && timeout 900 npm ci --no-audit --no-fund --loglevel=error >/dev/null
  )
fi

bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench_target"
feature_args=()
[[ -z "$features" ]] || feature_args=(--features "$features")
if ((skip_build == 0)); then
  log "cargo build --release --example bench_target ${feature_args[*]}"
  (cd "$root" && timeout 3600 cargo build --quiet --release --example bench_target "${feature_args[@]}")
fi
[[ -x "$bin" ]] || die "$bin is missing (build it, or unset BENCH_SKIP_BUILD)"
gateway_bin="${CARGO_TARGET_DIR:-$root/target}/release/mcp-gate-server"
if [[ $configs == *g* ]]; then
  if ((skip_build == 0)); then
    log "cargo build --release -p mcp-gate-server"
    (cd "$root" && timeout 3600 cargo build --quiet --release -p mcp-gate-server)
  fi
  [[ -x "$gateway_bin" ]] || die "$gateway_bin is missing (build it, or unset BENCH_SKIP_BUILD)"
fi

mkdir -p "$out"
# Only what an earlier run left there (BENCH_OUT may name a directory that holds other things).
rm -rf "$out/keys" "$out"/done-* "$out"/server-*.log "$out"/wrk-*.log "$out/results.tsv" "$out/.times" "$out/.body"
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
port_in_use && die "127.0.0.1:$port is in use: set BENCH_PORT to a free port"

# ---- Keys and tokens, shared by every configuration ------------------------------------------
token_count=$((memory == 1 ? mem_tokens * mem_passes : 1))
log "minting the key set and $token_count token(s)"
timeout 600 "$bin" mint --port "$port" --out "$out/keys" --tokens "$token_count" \
  --lifetime $((server_life + 3600)) >/dev/null
token=$(<"$out/keys/token.txt")

# ---- Measurement helpers ---------------------------------------------------------------------
ticks_per_second=$(getconf CLK_TCK)
process_ticks() { # utime + stime of a process, in clock ticks
  local stat
  stat=$(<"/proc/$1/stat") || {
    echo 0
    return
  }
  # Fields after the command name (which may hold spaces) start at field 3.
  awk '{print $12 + $13}' <<<"${stat##*) }"
}
machine_busy_ticks() { awk 'NR == 1 {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
snapshot_children() { # in this shell, not a subshell: CPU of its reaped children (wrk, curl)
  times >"$out/.times"
}
children_seconds() { # from the last snapshot_children
  awk 'NR == 2 {
    total = 0
    for (i = 1; i <= 2; i++) { split($i, part, "m"); sub("s", "", part[2]); total += part[1] * 60 + part[2] }
    print total
  }' "$out/.times"
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
field() { # KEY LINE: the value of key=value in a BENCH-RESULT line
  sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<" $2"
}

target_pid=""
upstream_pid="" # (g): the bare server behind the gateway binary
upstream_port=$((port + 1))
server_ticks() { # the measured server's CPU: (g) counts the gateway and its upstream together
  local ticks
  ticks=$(process_ticks "$target_pid")
  [[ -z $upstream_pid ]] || ticks=$((ticks + $(process_ticks "$upstream_pid")))
  echo "$ticks"
}
start_gateway() { # LOGFILE: (a) on the next port, then the gateway binary in front of it
  local logfile=$1 deadline
  "$bin" serve --config bare --port "$upstream_port" --max-seconds "$server_life" >"$logfile.upstream" 2>&1 &
  upstream_pid=$!
  started+=("$upstream_pid")
  deadline=$((SECONDS + 30))
  until grep -q '"ready":true' "$logfile.upstream" 2>/dev/null; do
    kill -0 "$upstream_pid" 2>/dev/null || die "the upstream of (g) exited at start: $(tail -5 "$logfile.upstream")"
    ((SECONDS < deadline)) || die "the upstream of (g) is not listening after 30 s"
    sleep 0.05
  done
  cat >"$out/gateway.toml" <<TOML
listen = "127.0.0.1:$port"
[upstream]
url = "http://127.0.0.1:$upstream_port/mcp"
[resource]
uri = "$url"
[[issuer]]
url = "https://issuer.bench.example"
jwks-file = "keys/jwks.json"
[policy]
allow-all = true
allow-destructive = true
[reload]
watch-interval = "0s"
TOML
  # A simple command, so that $! is the gateway itself (its CPU time is measured).
  RUST_LOG=warn "$gateway_bin" --config "$out/gateway.toml" >"$logfile" 2>&1 &
  target_pid=$!
  started+=("$target_pid")
  deadline=$((SECONDS + 30))
  until grep -q 'Send SIGTERM' "$logfile" 2>/dev/null; do
    kill -0 "$target_pid" 2>/dev/null || die "${label[g]} exited at start: $(tail -5 "$logfile")"
    ((SECONDS < deadline)) || die "${label[g]} not listening after 30 s: $(tail -5 "$logfile")"
    sleep 0.05
  done
}
start_target() { # CONFIG LOGFILE: start a server, wait until it listens
  local config=$1 logfile=$2 deadline command
  if [[ $config == g ]]; then
    start_gateway "$logfile"
    return
  fi
  case $config in
  a) command=("$bin" serve --config bare) ;;
  b) command=("$bin" serve --config allow --jwks "$out/keys/jwks.json") ;;
  c) command=("$bin" serve --config deny --jwks "$out/keys/jwks.json") ;;
  e) command=("$bin" serve --config nocache --jwks "$out/keys/jwks.json") ;;
  d)
    command=(node "$peers/ts-bearer-server.mjs" --jwks "$out/keys/jwks.json")
    ((ts_validator_per_request == 0)) || command+=(--validator-per-request)
    ;;
  esac
  # A simple command, so that $! is the server itself (its CPU time and memory are measured).
  # taskset runs the command in its own place, so $! stays the server.
  ${server_cpu[@]+"${server_cpu[@]}"} "${command[@]}" --port "$port" --max-seconds "$server_life" >"$logfile" 2>&1 &
  target_pid=$!
  started+=("$target_pid")
  deadline=$((SECONDS + 30))
  until grep -q '"ready":true' "$logfile" 2>/dev/null; do
    kill -0 "$target_pid" 2>/dev/null || die "${label[$config]} exited at start: $(tail -5 "$logfile")"
    ((SECONDS < deadline)) || die "${label[$config]} not listening after 30 s: $(tail -5 "$logfile")"
    sleep 0.05
  done
}
stop_target() {
  local i
  if [[ -n $upstream_pid ]]; then
    kill -TERM "$upstream_pid" 2>/dev/null || true
    wait "$upstream_pid" 2>/dev/null || true
    upstream_pid=""
  fi
  kill -TERM "$target_pid" 2>/dev/null || true
  for i in $(seq 50); do
    kill -0 "$target_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$target_pid" 2>/dev/null || true
  wait "$target_pid" 2>/dev/null || true
  # The next server binds the same port.
  for i in $(seq 50); do
    port_in_use || break
    sleep 0.1
  done
  target_pid=""
}

body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"mcp-gate-bench-ping"}}}'
# What a healthy answer carries: the echoed text, or for a list the `echo` tool among the listed.
expected='"text":"mcp-gate-bench-ping"'
if [[ $method == list ]]; then
  body='{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
  expected='"name":"echo"'
fi
post() { # [AUTHORIZATION]: prints "STATUS BODY"
  local args=(-sS --max-time 10 -o "$out/.body" -w '%{http_code}' -X POST "$url"
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d "$body")
  [[ $# -eq 0 ]] || args+=(-H "authorization: $1")
  printf '%s %s' "$(curl "${args[@]}" 2>&1)" "$(tr -d '\n' <"$out/.body" 2>/dev/null)"
}
sanity_check() { # CONFIG: the answer is the expected one, and the gate really is in front
  local config=$1 answer
  if [[ $config == a ]]; then
    answer=$(post)
  else
    answer=$(post "Bearer $token")
  fi
  case $config in
  c) [[ $answer == 200\ * && $answer == *'"remediation":"unavailable"'* ]] ;;
  *) [[ $answer == 200\ * && $answer == *"$expected"* ]] ;;
  esac || {
    log "!!! ${label[$config]}: unexpected answer: ${answer:0:400}"
    return 1
  }
  if [[ $config != a ]]; then
    answer=$(post)
    [[ $answer == 401\ * ]] || {
      log "!!! ${label[$config]}: a request without a token got ${answer:0:200}, not 401"
      return 1
    }
  fi
}

run_wrk() { # CONFIG DURATION LOGFILE: one wrk run with echo.lua; prints its BENCH-RESULT line
  local config=$1 duration=$2 logfile=$3 authorization=""
  [[ $config == a ]] || authorization="Bearer $token"
  BENCH_AUTHORIZATION="$authorization" BENCH_METHOD="$method" timeout -k 5 $((duration + 30)) \
    ${client_cpu[@]+"${client_cpu[@]}"} wrk -t "$threads" -c "$connections" -d "${duration}s" --timeout 10s --latency \
    -s "$lua/echo.lua" "$url" >"$logfile" 2>&1 || true
  grep '^BENCH-RESULT ' "$logfile" || {
    log "!!! ${label[$config]}: wrk gave no result: $(tail -5 "$logfile")"
    return 1
  }
}

failures=0
results="$out/results.tsv" # config round rps p50_ms p99_ms server_us_per_req server_cores others_cores errors
: >"$results"

log "loadavg $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; wrk -t$threads -c$connections," \
  "${warmup}s warm-up + ${seconds}s x $rounds rounds per configuration ($configs)"

# ---- Throughput: configurations alternate a, b, c, d, d, c, b, a, a, b, ... ------------------
# Every round runs each configuration once, and every other round runs them in reverse order:
# noise hits them all, and a machine that slows down or speeds up during the run does not
# favour whichever configuration happens to run first.
for round in $(seq "$rounds"); do
  order=$configs
  if ((round % 2 == 0)); then
    order=""
    for ((i = ${#configs} - 1; i >= 0; i--)); do order+=${configs:i:1}; done
  fi
  for config in $(grep -o . <<<"$order"); do
    start_target "$config" "$out/server-$config-$round.log"
    if ! sanity_check "$config"; then
      failures=$((failures + 1))
      stop_target
      continue
    fi
    if ((warmup > 0)); then
      run_wrk "$config" "$warmup" "$out/wrk-$config-$round-warmup.log" >/dev/null || true
    fi
    server_before=$(server_ticks)
    busy_before=$(machine_busy_ticks)
    snapshot_children
    children_before=$(children_seconds)
    line=$(run_wrk "$config" "$seconds" "$out/wrk-$config-$round.log") || {
      failures=$((failures + 1))
      stop_target
      continue
    }
    snapshot_children
    children_after=$(children_seconds)
    busy_after=$(machine_busy_ticks)
    server_after=$(server_ticks)
    stop_target
    requests=$(field requests "$line")
    duration_us=$(field duration_us "$line")
    errors=$(($(field non2xx "$line") + $(field connect "$line") + $(field read "$line") +
      $(field write "$line") + $(field timeout "$line")))
    ((errors == 0)) || {
      log "!!! ${label[$config]} round $round: $errors failed requests (see $out/wrk-$config-$round.log)"
      failures=$((failures + 1))
    }
    awk -v c="$config" -v r="$round" -v n="$requests" -v us="$duration_us" \
      -v p50="$(field p50_us "$line")" -v p99="$(field p99_us "$line")" \
      -v s0="$server_before" -v s1="$server_after" -v b0="$busy_before" -v b1="$busy_after" \
      -v w0="$children_before" -v w1="$children_after" -v hz="$ticks_per_second" -v e="$errors" \
      'BEGIN {
        secs = us / 1e6; server = (s1 - s0) / hz; busy = (b1 - b0) / hz; client = w1 - w0
        others = busy - server - client; if (others < 0) others = 0
        printf "%s\t%d\t%.1f\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t%d\n", c, r, n / secs, p50 / 1000,
          p99 / 1000, (n > 0 ? server * 1e6 / n : 0), server / secs, others / secs, e
      }' >>"$results"
    tail -1 "$results" | awk -F'\t' -v l="${label[$config]}" \
      '{printf "bench-peers: round %d %-30s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  server %5.0f us/req  others %.2f cores\n", $2, l, $3, $4, $5, $6, $8}' >&2
  done
done

# ---- Report ----------------------------------------------------------------------------------
median() { # CONFIG COLUMN: median over rounds
  awk -F'\t' -v c="$1" -v k="$2" '$1 == c {print $k}' "$results" | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
max_others=$(awk -F'\t' 'BEGIN {m = 0} $8 > m {m = $8} END {print m}' "$results")

echo
echo "mcp-gate vs peers, loopback, $method, wrk -t$threads -c$connections, ${seconds}s x $rounds round(s), median over rounds${features:+, features: $features}$( ((pin == 0)) || echo ", server on CPU 0, wrk on CPU 1")"
printf '%-32s %10s %9s %9s %14s %12s %7s\n' configuration 'req/s' 'p50 ms' 'p99 ms' 'server us/req' 'server cores' errors
declare -A rps=()
for config in $(grep -o . <<<"$configs"); do
  rps[$config]=$(median "$config" 3)
  [[ -n ${rps[$config]} ]] || {
    printf '%-32s %10s\n' "${label[$config]}" 'no result'
    continue
  }
  printf '%-32s %10.0f %9.2f %9.2f %14.0f %12.2f %7d\n' "${label[$config]}" "${rps[$config]}" \
    "$(median "$config" 4)" "$(median "$config" 5)" "$(median "$config" 6)" "$(median "$config" 7)" \
    "$(awk -F'\t' -v c="$config" '$1 == c {s += $9} END {print s + 0}' "$results")"
done
echo

missed=0
# Each ratio is judged on its paired measurement: the two configurations of one round ran back
# to back, so their ratio is little touched by the machine drifting between rounds, which on a
# shared VM moves throughput far more than the gate does. The median of those per-round ratios
# comes with a 95% interval (order statistics of the binomial, distribution-free), and the goal
# is met only when the whole interval clears it: a run too noisy to tell says so instead of
# passing or failing on luck. The ratio of the median throughputs is printed beside it.
ratio() { # NAME NUMERATOR DENOMINATOR GOAL AIM MEANING
  local name=$1 top=$2 bottom=$3 goal=$4 aim=$5 meaning=$6
  if [[ -z ${rps[$top]:-} || -z ${rps[$bottom]:-} ]]; then
    printf '%-5s %8s   %s\n' "$name" 'n/a' "$meaning (needs $top and $bottom in BENCH_CONFIGS)"
    return
  fi
  awk -F'\t' -v n="$name" -v top="$top" -v bottom="$bottom" -v g="$goal" -v a="$aim" \
    -v m="$meaning" -v medians="$(awk -v t="${rps[$top]}" -v b="${rps[$bottom]}" 'BEGIN {print t / b}')" '
    $1 == top {t[$2] = $3}
    $1 == bottom {b[$2] = $3}
    END {
      count = 0
      for (r in t) if ((r in b) && t[r] > 0 && b[r] > 0) ratios[++count] = t[r] / b[r]
      # insertion sort: at most 50 rounds
      for (i = 2; i <= count; i++) {
        v = ratios[i]
        for (j = i - 1; j >= 1 && ratios[j] > v; j--) ratios[j + 1] = ratios[j]
        ratios[j + 1] = v
      }
      if (count == 0) { printf "%-5s %8s   no round has both\n", n, "n/a"; exit 0 }
      median = (count % 2) ? ratios[(count + 1) / 2] : (ratios[count / 2] + ratios[count / 2 + 1]) / 2
      # the largest k with P(Binomial(count, 1/2) <= k - 1) <= 0.025: [ratios[k], ratios[count - k + 1]]
      k = 0; cumulative = 0; term = 0.5 ^ count
      for (i = 0; i < count; i++) {
        cumulative += term
        if (cumulative > 0.025) break
        k = i + 1
        term = term * (count - i) / (i + 1)
      }
      if (k >= 1) {
        low = ratios[k]; high = ratios[count - k + 1]
        interval = sprintf("[%.2f, %.2f]", low, high)
      } else {
        low = median; high = median
        interval = "(no interval: < 6 rounds)"
      }
      if (g == "-") verdict = "(no goal)"
      else if (high < g) verdict = sprintf("MISSED goal >= %s", g)
      else if (low < g) verdict = sprintf("NOT SHOWN: goal >= %s inside the interval", g)
      else if (a != "-" && low < a) verdict = sprintf("goal >= %s met, aim %s not shown", g, a)
      else verdict = sprintf("goal >= %s met", g) (a != "-" ? sprintf(", aim %s met", a) : "")
      printf "%-5s %8.2f %-26s %10.2f   %-44s %s\n", n, median, interval, medians, verdict, m
      exit (g != "-" && low < g) ? 1 : 0
    }' "$results" || missed=$((missed + 1))
}
echo "ratios: median of the per-round ratios, its 95% interval, and the ratio of the median throughputs"
printf '%-5s %8s %-26s %10s   %-44s %s\n' '' 'paired' '95% interval' 'medians' 'verdict (on the interval)' ''
if [[ $method == list ]]; then
  ratio b/a b a 0.9 - "cost of the gate on a tools/list (every entry judged)"
else
  ratio b/a b a 0.9 0.95 "cost of the gate on an allowed call"
fi
ratio c/a c a - - "a denial answered by the gate vs the bare server"
ratio b/d b d 5 10 "mcp-gate vs the TS SDK's bearer middleware"
ratio c/b c b 2 - "a denial vs an allowed call through the gate"
[[ $configs != *e* ]] || ratio e/d e d - - "mcp-gate without its token cache vs the TS SDK"
if [[ $configs == *g* ]]; then
  ratio g/a g a - - "the gateway binary in front of the server vs the server direct"
  ratio g/b g b - - "the gateway binary vs the same gate in-process (the layer)"
fi
if [[ $configs == *a* && $configs == *b* && $rounds -gt 1 ]]; then
  awk -F'\t' -v rounds="$rounds" '$1 == "a" {a[$2] = $3} $1 == "b" {b[$2] = $3}
    END {
      printf "b/a per round:"
      for (r = 1; r <= rounds; r++) if (a[r] > 0 && b[r] > 0) printf " %.2f", b[r] / a[r]
      printf "\n"
    }' "$results"
fi
spread() { # CONFIG: the lowest and highest throughput of one configuration over the rounds
  awk -F'\t' -v c="$1" '$1 == c {if (lo == "" || $3 < lo) lo = $3; if ($3 > hi) hi = $3}
    END {if (lo > 0) printf "%.0f to %.0f req/s (x%.2f)", lo, hi, hi / lo}' "$results"
}
if [[ $configs == *a* && $rounds -gt 1 ]]; then
  # The same binary doing the same work: how far it moves is how noisy the machine was.
  echo "machine noise: ${label[a]} alone ran at $(spread a) across rounds"
fi
awk -v m="$max_others" 'BEGIN {
  printf "other processes: up to %.2f cores during a measured round", m
  if (m > 0.25) printf "  WARNING: the machine was not quiet, the figures are noisy"
  printf "\n"
}'

# ---- Memory: the gated server, token cache on, many distinct tokens --------------------------
if ((memory == 1)); then
  echo
  echo "memory: ${label[b]} (token cache on), $mem_passes x $mem_requests requests, $mem_tokens distinct tokens each"
  start_target b "$out/server-memory.log"
  sanity_check b || failures=$((failures + 1))
  rss_start=$(rss_kib "$target_pid")
  # Warm the runtime, the connections and the allocator up with one token first.
  run_wrk b 2 "$out/wrk-memory-warmup.log" >/dev/null || failures=$((failures + 1))
  rss_before=$(rss_kib "$target_pid")
  printf '  VmRSS at start %8.1f MiB, after a 2 s warm-up with one token %8.1f MiB\n' \
    "$(awk -v k="$rss_start" 'BEGIN {print k / 1024}')" "$(awk -v k="$rss_before" 'BEGIN {print k / 1024}')"
  rss_after=$rss_before
  for pass in $(seq "$mem_passes"); do
    done_dir="$out/done-$pass"
    mkdir -p "$done_dir"
    pass_started=$SECONDS
    BENCH_TOKENS_FILE="$out/keys/tokens.txt" BENCH_TOKENS_FROM=$(((pass - 1) * mem_tokens)) \
      BENCH_TOKENS_COUNT="$mem_tokens" BENCH_REQUESTS="$mem_requests" BENCH_THREADS="$threads" \
      BENCH_DONE_DIR="$done_dir" timeout -k 5 $((mem_max_seconds + 30)) \
      wrk -t "$threads" -c "$connections" -d "${mem_max_seconds}s" --timeout 10s \
      -s "$lua/tokens.lua" "$url" >"$out/wrk-memory-$pass.log" 2>&1 &
    wrk_pid=$!
    started+=("$wrk_pid")
    # wrk runs its whole -d even when every thread has stopped: interrupt it once they all have.
    while kill -0 "$wrk_pid" 2>/dev/null; do
      if (($(find "$done_dir" -name 'done-*' | wc -l) >= threads)); then
        sleep 0.2
        kill -INT "$wrk_pid" 2>/dev/null || true
        break
      fi
      sleep 0.1
    done
    wait "$wrk_pid" 2>/dev/null || true
    line=$(grep '^BENCH-RESULT ' "$out/wrk-memory-$pass.log") || {
      log "!!! memory pass $pass: wrk gave no result: $(tail -5 "$out/wrk-memory-$pass.log")"
      failures=$((failures + 1))
      continue
    }
    rss_after=$(rss_kib "$target_pid")
    checked=$(field checked "$line")
    wrong=$(field wrong "$line")
    errors=$(($(field non2xx "$line") + $(field connect "$line") + $(field read "$line") +
      $(field write "$line") + $(field timeout "$line") + wrong))
    ((errors == 0)) || failures=$((failures + 1))
    ((checked >= mem_requests)) || {
      log "!!! memory pass $pass: only $checked of $mem_requests requests within ${mem_max_seconds}s"
      failures=$((failures + 1))
    }
    printf '  after pass %d: %7d requests over tokens %d..%d in %3d s, %d failed: VmRSS %8.1f MiB\n' \
      "$pass" "$checked" $(((pass - 1) * mem_tokens)) $((pass * mem_tokens - 1)) $((SECONDS - pass_started)) \
      "$errors" "$(awk -v k="$rss_after" 'BEGIN {print k / 1024}')"
  done
  hwm=$(hwm_kib "$target_pid")
  stop_target
  awk -v b="$rss_before" -v a="$rss_after" -v h="$hwm" -v bound="$rss_bound_mib" 'BEGIN {
    printf "  growth %+.1f MiB; peak (VmHWM) %.1f MiB; bound: VmRSS <= %d MiB -> %s\n",
      (a - b) / 1024, h / 1024, bound, (a / 1024 <= bound ? "within" : "EXCEEDED")
    exit (a / 1024 <= bound) ? 0 : 1
  }' || missed=$((missed + 1))
fi

echo
echo "logs: $out"
if ((failures > 0)); then
  log "$failures failure(s): see the !!! lines above"
  exit 1
fi
if ((missed > 0 && strict == 1)); then
  log "$missed goal(s) missed (BENCH_STRICT=1)"
  exit 3
fi
