#!/usr/bin/env bash
# What `[upstream] legacy-only` costs a modern client, in one run, against the TypeScript SDK's
# server (tests/peers/ts-upstream.mjs, which speaks 2025-11-25 only):
#
#   (L) a legacy client through the gateway: one session, `tools/call echo` in it
#   (M) a modern client through the gateway with legacy-only: each `tools/call echo` alone,
#       carried in a legacy session of its own (initialize, initialized, the call, DELETE)
#
# Both gateways run the same build, the development issuer and `allow-all`; one client calls
# one after another (latency, not throughput: the bridge adds round trips, not CPU). Each round
# times BENCH_CALLS calls of (L) then of (M); the report gives the median per-call time of
# each over the rounds and their ratio M/L, with the spread of the per-round ratios.
#
#   scripts/bench-bridge.sh
#   BENCH_CALLS=200 BENCH_ROUNDS=5 scripts/bench-bridge.sh
#
# Environment (all optional): BENCH_CALLS=300 BENCH_ROUNDS=5 BENCH_SKIP_BUILD=0
# BENCH_TARGET_DIR (default: target). Every process it starts is stopped on exit; each step is
# bounded in time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peers="$root/tests/peers"
calls="${BENCH_CALLS:-300}"
rounds="${BENCH_ROUNDS:-5}"
target="${BENCH_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}"
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
die() { echo "bench-bridge: $*" >&2; exit 1; }

[[ "$calls" =~ ^[1-9][0-9]*$ && "$calls" -le 5000 ]] || die "BENCH_CALLS: 1 to 5000"
[[ "$rounds" =~ ^[1-9][0-9]*$ && "$rounds" -le 20 ]] || die "BENCH_ROUNDS: 1 to 20"

[[ -d "$peers/node_modules" && -x "$peers/.venv/bin/python" ]] || "$root/scripts/setup-peers.sh"
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  CARGO_TARGET_DIR="$target" cargo build --release -q -p mcp-gate-server
fi
gateway="$target/release/mcp-gate-server"
[[ -x "$gateway" ]] || die "no $gateway"

# The upstream: its ready line names its URL.
TS_UPSTREAM_MAX_SECONDS=600 node "$peers/ts-upstream.mjs" > "$work/upstream.json" 2> "$work/upstream.log" &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/upstream.json" ]] && break; sleep 0.1; done
upstream="$("$peers/.venv/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$work/upstream.json")"

free_port() { "$peers/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_gateway NAME LEGACY_ONLY: a gateway on a free port; prints its port.
start_gateway() {
  local name="$1" legacy_only="$2" port
  port="$(free_port)"
  cat > "$work/$name.toml" <<EOF
listen = "127.0.0.1:$port"
[upstream]
url = "$upstream"
legacy-only = $legacy_only
[resource]
uri = "http://127.0.0.1:$port/mcp"
[development-issuer]
[policy]
allow-all = true
[reload]
watch-interval = "0s"
EOF
  RUST_LOG=warn "$gateway" --config "$work/$name.toml" > "$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/.well-known/oauth-protected-resource/mcp" && break
    sleep 0.1
  done
  echo "$port"
}

legacy_port="$(start_gateway legacy false)"
bridge_port="$(start_gateway bridge true)"

# The development issuer's token endpoint, from each gateway's metadata.
token_for() {
  local port="$1" issuer
  issuer="$(curl -sf "http://127.0.0.1:$port/.well-known/oauth-protected-resource/mcp" \
    | "$peers/.venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["authorization_servers"][0])')"
  curl -sf -u dev-client:dev-secret -d grant_type=client_credentials \
    -d "resource=http://127.0.0.1:$port/mcp" "$issuer/token" \
    | "$peers/.venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["access_token"])'
}

timeout 600 "$peers/.venv/bin/python" - "$calls" "$rounds" \
  "http://127.0.0.1:$legacy_port/mcp" "$(token_for "$legacy_port")" \
  "http://127.0.0.1:$bridge_port/mcp" "$(token_for "$bridge_port")" <<'PY'
import json, statistics, sys, time
import httpx2 as httpx

calls, rounds = int(sys.argv[1]), int(sys.argv[2])
legacy_url, legacy_token, bridge_url, bridge_token = sys.argv[3:7]
ACCEPT = "application/json, text/event-stream"

def result_of(answer):
    """The JSON-RPC message in a JSON or event-stream answer."""
    answer.raise_for_status()
    if answer.headers["content-type"].startswith("text/event-stream"):
        data = [l[5:].strip() for l in answer.text.splitlines() if l.startswith("data:") and l[5:].strip()]
        return json.loads(data[-1])
    return answer.json()

def legacy_round(client):
    head = {"authorization": f"Bearer {legacy_token}", "accept": ACCEPT}
    init = client.post(legacy_url, headers=head, json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
    result_of(init)
    head |= {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    client.post(legacy_url, headers=head, json={"jsonrpc": "2.0", "method": "notifications/initialized"}).raise_for_status()
    start = time.perf_counter()
    for i in range(calls):
        answer = client.post(legacy_url, headers=head, json={"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}}})
        assert result_of(answer)["result"]["content"][0]["text"] == "hi"
    elapsed = time.perf_counter() - start
    client.delete(legacy_url, headers=head)
    return elapsed / calls

def modern_round(client):
    head = {"authorization": f"Bearer {bridge_token}", "accept": ACCEPT,
            "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    start = time.perf_counter()
    for i in range(calls):
        answer = client.post(bridge_url, headers=head, json={"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta}})
        result = result_of(answer)["result"]
        assert result["content"][0]["text"] == "hi" and result["resultType"] == "complete", result
    return (time.perf_counter() - start) / calls

with httpx.Client(timeout=30) as client:
    legacy_round(client); modern_round(client)  # warm-up
    pairs = [(legacy_round(client), modern_round(client)) for _ in range(rounds)]
legacy = statistics.median(p[0] for p in pairs) * 1e6
modern = statistics.median(p[1] for p in pairs) * 1e6
ratios = sorted(m / l for l, m in pairs)
print(f"{calls} calls x {rounds} rounds, one client, tools/call echo, TypeScript SDK upstream")
print(f"(L) legacy client through the gateway:          {legacy:8.0f} us/call (median)")
print(f"(M) modern client through the legacy-only bridge: {modern:8.0f} us/call (median)")
print(f"M/L {statistics.median(ratios):.2f} [min {ratios[0]:.2f}, max {ratios[-1]:.2f}]")
PY
