#!/usr/bin/env bash
# Instructions per request over real loopback HTTP: the benchmark server (`bench_target`, the
# example rmcp server) bare and behind the layer, each under callgrind while wrk sends it the
# same requests as `scripts/bench-peers.sh`. Instruction counts do not move with the machine's
# load the way loopback throughput does, so this gives the gated/bare ratio of bench-peers'
# setup as the server's own work, with the token's SHA-256 apart (callgrind runs sha2's
# software path; the CPU's SHA instructions do it in a few hundred nanoseconds, which
# `cargo bench --bench pipeline` prints).
#
#   scripts/cost-loopback.sh                       # tools/call echo, bare (a) and allowed (b)
#   LOOPBACK_METHOD=list scripts/cost-loopback.sh  # tools/list of the example's tools
#
# Each server starts under callgrind; wrk warms it for LOOPBACK_WARMUP seconds, then
# callgrind's counters are zeroed, wrk runs LOOPBACK_SECONDS more, and the counters are
# dumped: per request = the dump's total over the requests wrk completed in that window
# (the server's idle polling between requests is counted in, about equally on both sides).
#
# Environment (all optional):
#   LOOPBACK_METHOD=call       call or list
#   LOOPBACK_SECONDS=10        the measured window, per configuration (1..600)
#   LOOPBACK_WARMUP=3          wrk's warm-up before it (1..60)
#   LOOPBACK_CONNECTIONS=4     wrk's connections (one thread; valgrind runs the server on one
#                              core at a time)
#   LOOPBACK_PORT=18941        the server's port (the tokens' audience names it)
#   LOOPBACK_BIN               a bench_target built already (else built, release, into
#                              CARGO_TARGET_DIR or target)
#   LOOPBACK_KEEP              a folder to copy each measured window's callgrind dump into
#                              (cg.bare, cg.allow), for callgrind_annotate
#
# Needs valgrind and wrk. Exit status: 0; 1 on a failure; 2 for a bad setting.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'cost-loopback: %s\n' "$*" >&2; }
die() {
  log "$*"
  exit 1
}
bad() {
  log "$*"
  exit 2
}

method=${LOOPBACK_METHOD:-call}
[[ "$method" == call || "$method" == list ]] || bad "LOOPBACK_METHOD=$method: call or list"
number() { # NAME VALUE LOW HIGH
  [[ "$2" =~ ^[0-9]+$ ]] && (($2 >= $3 && $2 <= $4)) || bad "$1=$2: a whole number in $3..$4"
}
seconds=${LOOPBACK_SECONDS:-10}
number LOOPBACK_SECONDS "$seconds" 1 600
warmup=${LOOPBACK_WARMUP:-3}
number LOOPBACK_WARMUP "$warmup" 1 60
connections=${LOOPBACK_CONNECTIONS:-4}
number LOOPBACK_CONNECTIONS "$connections" 1 256
port=${LOOPBACK_PORT:-18941}
number LOOPBACK_PORT "$port" 1024 65535
keep=${LOOPBACK_KEEP:-}
[[ -z "$keep" || -d "$keep" ]] || bad "LOOPBACK_KEEP=$keep: not a folder"
for tool in valgrind callgrind_control callgrind_annotate wrk timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "missing $tool (Debian: apt-get install valgrind wrk)"
done

bin=${LOOPBACK_BIN:-}
if [[ -z "$bin" ]]; then
  log "cargo build --release --example bench_target"
  (cd "$root" && timeout 3600 cargo build --quiet --release --example bench_target)
  bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench_target"
fi
[[ -x "$bin" ]] || die "no bench_target at $bin"

out=$(mktemp -d)
server=""
cleanup() {
  [[ -z "$server" ]] || kill -KILL "$server" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
port_in_use && die "127.0.0.1:$port is in use: set LOOPBACK_PORT to a free port"

timeout 120 "$bin" mint --port "$port" --out "$out/keys" --tokens 1 >/dev/null
token=$(<"$out/keys/token.txt")

# One configuration: prints "requests total sha" for the measured window.
measure() { # CONFIG
  local config=$1 authorization="" deadline requests dump
  [[ $config == bare ]] || authorization="Bearer $token"
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$config.%p" \
    "$bin" serve --config "$config" --jwks "$out/keys/jwks.json" --port "$port" \
    --max-seconds $((seconds + warmup + 300)) >"$out/server.$config.log" 2>&1 &
  server=$!
  deadline=$((SECONDS + 120))
  until grep -q '"ready":true' "$out/server.$config.log" 2>/dev/null; do
    kill -0 "$server" 2>/dev/null || die "$config exited at start: $(tail -5 "$out/server.$config.log")"
    ((SECONDS < deadline)) || die "$config not ready after 120 s under valgrind"
    sleep 0.2
  done
  load() { # DURATION LOG
    BENCH_AUTHORIZATION="$authorization" BENCH_METHOD="$method" timeout -k 5 $(($1 + 60)) \
      wrk -t 1 -c "$connections" -d "$1s" --timeout 30s -s "$root/benches/lua/echo.lua" \
      "http://127.0.0.1:$port/mcp" >"$2" 2>&1 || true
  }
  load "$warmup" "$out/wrk.$config.warmup"
  callgrind_control -z "$server" >/dev/null 2>&1
  load "$seconds" "$out/wrk.$config"
  callgrind_control -d "$server" >/dev/null 2>&1
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
  local result
  result=$(grep '^BENCH-RESULT ' "$out/wrk.$config") || die "$config: wrk gave no result: $(tail -3 "$out/wrk.$config")"
  [[ $result == *" non2xx=0 "* ]] || die "$config: answers that were not 2xx: $result"
  requests=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' <<<"$result")
  ((requests > 0)) || die "$config: no request completed"
  # The dump made on request is the file with a part number.
  dump=$(ls "$out"/cg."$config".*.[0-9]* 2>/dev/null | head -n 1)
  [[ -n "$dump" ]] || die "$config: callgrind wrote no dump"
  [[ -z "$keep" ]] || cp "$dump" "$keep/cg.$config"
  local total sha
  total=$(sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$dump" | head -n 1)
  sha=$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null |
    sed -n 's/^ *\([0-9,]*\) .*sha2::sha256::compress256 .*/\1/p' | head -n 1 | tr -d ,)
  echo "$requests $total ${sha:-0}"
}

log "bare (a), $method, ${seconds}s under callgrind"
read -r a_requests a_total a_sha < <(measure bare)
log "allowed (b), $method, ${seconds}s under callgrind"
read -r b_requests b_total b_sha < <(measure allow)

awk -v ar="$a_requests" -v at="$a_total" -v as="$a_sha" \
  -v br="$b_requests" -v bt="$b_total" -v bs="$b_sha" -v method="$method" 'BEGIN {
  a = at / ar; b = bt / br; sha = bs / br - as / ar; own = b - a
  printf "instructions per request over loopback (callgrind; wrk, %s; %d and %d requests)\n", method, ar, br
  printf "  %-44s %12.0f\n", "(a) bare", a
  printf "  %-44s %12.0f\n", "(b) allowed through the gate", b
  printf "  %-44s %12.0f\n", "the gate'"'"'s own, (b) - (a)", own
  printf "  %-44s %12.0f\n", "  of which the token'"'"'s SHA-256 (software)", sha
  printf "  %-44s %12.0f\n", "  beyond the SHA-256", own - sha
  printf "  %-44s %12.3f\n", "a/b in instructions", a / b
  printf "  %-44s %12.3f\n", "a/b without the SHA-256 (b - SHA)", a / (b - sha)
}'
