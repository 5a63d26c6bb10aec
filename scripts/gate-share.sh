#!/usr/bin/env bash
# What the gate costs an allowed call, from CPU samples rather than from req/s.
#
#   scripts/gate-share.sh                                   # 3 rounds x 12 s of (a) and of (b)
#   SHARE_SECONDS=20 SHARE_ROUNDS=3 scripts/gate-share.sh
#
# Why: on a shared machine, req/s moves by tens of percent from one second to the next (the
# host lends the VM's cores out), far more than the gate costs, so (b)/(a) in
# scripts/bench-peers.sh needs many rounds to say anything. A share of CPU samples does not
# move with the machine's speed: whatever runs in one process at one moment runs at the same
# speed, and the samples split in proportion to the work. Two estimates of (b)/(a) on a
# CPU-bound machine come out of it:
#
# - the server's share: rmcp's request handler (`StreamableHttpService::handle_post`, with all
#   it calls) does the same work with and without the gate in front, so its share of the
#   samples in (b) over its share in (a) is cost(a) / cost(b). This one counts everything the
#   gate brings about: its own code, the axum layering, the longer request, the caches it
#   disturbs;
# - the gate's own code: each sample of (b) goes to the nearest frame, walking from the leaf
#   towards the root, that belongs either to mcp-gate (`mcp_gate::`) or to the service behind
#   it (rmcp, or the axum route the gate forwards to); 1 - the gate's share is the ratio if
#   nothing else changed. It also says where the gate's time goes.
#
# How: builds `bench_target` with frame pointers (in target/frame-pointers), then for each
# round starts `serve --config bare` and `serve --config allow` in turn, loads each with wrk
# (benches/lua/echo.lua, as (a) and (b) in bench-peers.sh) and records `perf record -g` on it.
#
# Needs perf (the `linux-perf` package on Debian) with permission to sample a process
# (`kernel.perf_event_paranoid` <= 2), wrk and python3. Everything it starts is stopped on exit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds=${SHARE_SECONDS:-12}
rounds=${SHARE_ROUNDS:-3}
port=${SHARE_PORT:-18941}
out="$root/target/gate-share"
log() { printf 'gate-share: %s\n' "$*" >&2; }
die() {
  log "$*"
  exit 1
}
[[ $seconds =~ ^[0-9]+$ ]] && ((seconds >= 4 && seconds <= 120)) || die "SHARE_SECONDS=$seconds: 4..120"
[[ $rounds =~ ^[0-9]+$ ]] && ((rounds >= 1 && rounds <= 10)) || die "SHARE_ROUNDS=$rounds: 1..10"
for tool in perf wrk python3 cargo timeout; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing"
done

log "cargo build --release --example bench_target, with frame pointers"
(cd "$root" && RUSTFLAGS="-C force-frame-pointers=yes" CARGO_TARGET_DIR="$root/target/frame-pointers" \
  timeout 3600 cargo build --quiet --release --example bench_target)
bin="$root/target/frame-pointers/release/examples/bench_target"

rm -rf "$out" && mkdir -p "$out"
timeout 120 "$bin" mint --port "$port" --out "$out/keys" --tokens 1 --lifetime 3600 >/dev/null
server=""
cleanup() { [[ -z $server ]] || kill "$server" 2>/dev/null || true; }
trap cleanup EXIT
token="Bearer $(<"$out/keys/token.txt")"
url="http://127.0.0.1:$port/mcp"
profile() { # CONFIG ROUND: one server under wrk, its samples in $out/CONFIG-ROUND.data
  local config=$1 round=$2 load
  "$bin" serve --config "$config" --jwks "$out/keys/jwks.json" --port "$port" \
    --max-seconds $((seconds + 60)) >"$out/server-$config-$round.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    grep -q '"ready":true' "$out/server-$config-$round.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q '"ready":true' "$out/server-$config-$round.log" || die "$config did not start"
  if [[ $config == allow ]]; then export BENCH_AUTHORIZATION=$token; else unset BENCH_AUTHORIZATION; fi
  timeout 30 wrk -t2 -c32 -d2s -s "$root/benches/lua/echo.lua" "$url" >/dev/null
  timeout $((seconds + 30)) wrk -t2 -c32 -d"${seconds}s" -s "$root/benches/lua/echo.lua" "$url" \
    >"$out/wrk-$config-$round.log" &
  load=$!
  sleep 1
  timeout $((seconds + 30)) perf record -q -F 999 -g -p "$server" -o "$out/$config-$round.data" \
    -- sleep $((seconds - 2)) >"$out/perf.log" 2>&1 || die "perf record failed: $(tail -3 "$out/perf.log")"
  wait "$load"
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
  grep -q 'non2xx=0 ' "$out/wrk-$config-$round.log" || die "$config: failed requests: $(tail -3 "$out/wrk-$config-$round.log")"
}
for round in $(seq "$rounds"); do
  log "round $round of $rounds: (a) bare, then (b) allow, ${seconds}s each"
  profile bare "$round"
  profile allow "$round"
done

stacks() { # CONFIG ROUND: the samples of one run, one frame a line, samples apart by a blank line
  perf script -i "$out/$1-$2.data" -F ip,sym 2>/dev/null
}
for round in $(seq "$rounds"); do
  stacks bare "$round" >"$out/a-$round.stacks"
  stacks allow "$round" >"$out/b-$round.stacks"
done
python3 - "$out" "$rounds" <<'PYTHON'
import collections, re, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])

def name(line):
    # "  addr symbol+0xoff" or "  addr symbol": the symbol alone
    parts = line.strip().split(" ", 1)
    return re.sub(r"\+0x[0-9a-f]+$", "", parts[1]) if len(parts) > 1 else ""

def samples(path):
    with open(path, encoding="utf-8", errors="replace") as stream:
        for block in stream.read().split("\n\n"):
            frames = [name(line) for line in block.strip().split("\n") if line.strip()]
            if frames:
                yield frames

def owner(symbol):
    if "mcp_gate::" in symbol:
        return "gate"
    if "rmcp::" in symbol or "axum::routing::route::Route" in symbol:
        return "server"
    return None

HANDLER = "StreamableHttpService<S,M>::handle_post"

def handler_share(path):
    total = inside = 0
    for frames in samples(path):
        total += 1
        inside += any(HANDLER in f for f in frames)
    if total == 0:
        raise SystemExit(f"gate-share: no samples in {path}")
    return inside / total

everything, own = [], []
leaves, b_total = collections.Counter(), 0
for r in range(1, rounds + 1):
    share_a = handler_share(f"{out}/a-{r}.stacks")
    share_b, gate, total = 0, 0, 0
    for frames in samples(f"{out}/b-{r}.stacks"):
        total += 1
        share_b += any(HANDLER in f for f in frames)
        if next((o for o in map(owner, frames) if o), None) == "gate":
            gate += 1
            leaves[frames[0][:100]] += 1
    share_b /= total
    b_total += total
    everything.append(share_b / share_a)
    own.append(1 - gate / total)
    print(f"round {r}: handler {100 * share_a:.1f}% of (a), {100 * share_b:.1f}% of (b); "
          f"gate's own code {100 * gate / total:.1f}% of (b)")

def summary(values):
    listed = " ".join(f"{v:.3f}" for v in values)
    return f"{statistics.median(values):.3f} (rounds: {listed})"

print(f"(b)/(a), everything the gate brings about (handler share in b / in a): {summary(everything)}")
print(f"(b)/(a), the gate's own code only (1 - its share of b):               {summary(own)}")
print("where the gate's own samples end (leaf functions, share of all of (b)'s samples):")
for leaf, count in leaves.most_common(12):
    print(f"  {100 * count / b_total:5.2f}%  {leaf}")
PYTHON
