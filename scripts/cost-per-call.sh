#!/usr/bin/env bash
# The gate's cost per allowed call, this tree against an earlier commit, in one run: heap
# allocations (the pipeline bench's own count) and instructions (callgrind, deterministic).
#
#   scripts/cost-per-call.sh BASE_REV                      # feature off on both sides
#   COST_FEATURES=metrics scripts/cost-per-call.sh BASE_REV   # this tree with features
#   COST_ENV="PIPELINE_METRICS=prometheus" COST_FEATURES=metrics scripts/cost-per-call.sh BASE_REV
#
# BASE_REV is built from a temporary worktree, with no features (COST_BASE_FEATURES to change
# that), this tree with COST_FEATURES; both in one target folder (COST_TARGET_DIR, default
# target/cost), release, `benches/pipeline.rs`. Instructions per allowed call are the
# difference of callgrind's totals between 500 and 1,500 requests of configuration (b), over
# the 1,100 calls that difference makes (each run makes a tenth more as a warm-up): the set-up
# cancels out. Needs valgrind (installed with apt-get when missing).
# COST_CARGO_ARGS adds arguments to both builds (for instance
# "--config profile.release.package.mcp-gate.codegen-units=1", to see how much of a change is
# the compiler's partitioning). COST_KEEP=DIR keeps the two binaries there (DIR/before, DIR/after), for a closer look
# (callgrind by function, `valgrind --tool=dhat` by allocation site).
# Exit status: 0, 1 on a failure, 2 for a bad argument.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'cost-per-call: %s\n' "$*" >&2; }

[[ $# -eq 1 ]] || {
  log "usage: scripts/cost-per-call.sh BASE_REV"
  exit 2
}
base_rev=$(git -C "$root" rev-parse --verify --quiet "$1^{commit}") || {
  log "$1 is not a commit"
  exit 2
}
features=${COST_FEATURES:-}
base_features=${COST_BASE_FEATURES:-}
for list in "$features" "$base_features"; do
  [[ "$list" =~ ^[a-z0-9_,-]*$ ]] || {
    log "features: a comma-separated list, not $list"
    exit 2
  }
done
read -r -a extra_env <<<"${COST_ENV:-}"
target=${COST_TARGET_DIR:-$root/target/cost}

if ! command -v valgrind >/dev/null 2>&1; then
  as_root=()
  [[ "$(id -u)" -eq 0 ]] || as_root=(sudo -n)
  log "apt-get install valgrind"
  timeout 600 "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends valgrind >/dev/null
fi

scratch=$(mktemp -d)
# A fixed path: the binary holds its sources' paths, and a path of another length moves the
# instruction count by a few hundred.
worktree="$target/cost-base-worktree"
git -C "$root" worktree remove --force "$worktree" >/dev/null 2>&1 || rm -rf "$worktree"
cleanup() {
  git -C "$root" worktree remove --force "$worktree" >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

# build DIR FEATURES: the pipeline bench's binary, copied out (cargo reuses the name).
# The crate's own artifacts are removed first: the two trees are one package to cargo (its
# artifact names hash the path relative to the workspace, not the checkout), and with the same
# manifest cargo takes the other tree's build as fresh, since its sources are older than it.
build() {
  local dir=$1 with=() binary
  [[ -z "$2" ]] || with=(--features "$2")
  (cd "$dir" && CARGO_TARGET_DIR="$target" cargo clean --quiet --release -p mcp-gate)
  binary=$(cd "$dir" && CARGO_TARGET_DIR="$target" timeout 3600 cargo bench --bench pipeline \
    --no-run "${with[@]}" ${COST_CARGO_ARGS:-} --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
  [[ -x "$binary" ]] || {
    log "no bench binary built in $dir"
    exit 1
  }
  printf '%s' "$binary"
}

log "building $base_rev (worktree) and this tree"
git -C "$root" worktree add --detach --quiet "$worktree" "$base_rev"
cp "$(build "$worktree" "$base_features")" "$scratch/before"
cp "$(build "$root" "$features")" "$scratch/after"
if cmp -s "$scratch/before" "$scratch/after"; then
  log "the two builds are the same binary: nothing to compare"
  exit 1
fi
if [[ -n "${COST_KEEP:-}" ]]; then
  mkdir -p "$COST_KEEP"
  cp "$scratch/before" "$scratch/after" "$COST_KEEP/"
fi

# allocations BINARY: the bench's allocation line for (b).
allocations() {
  env ${extra_env[@]+"${extra_env[@]}"} PIPELINE_REQUESTS=2000 PIPELINE_ROUNDS=1 \
    timeout 600 "$1" 2>&1 | sed -n 's/^ *(b) gated, allow *\([0-9.]*\) (\([0-9]*\) bytes).*/\1 \2/p' |
    tail -n 1
}
# instructions BINARY: callgrind's total for (b) alone, with REQUESTS requests.
instructions() {
  local out="$scratch/callgrind.$RANDOM"
  env ${extra_env[@]+"${extra_env[@]}"} PIPELINE_ONLY=b PIPELINE_ROUNDS=1 PIPELINE_REQUESTS="$2" \
    timeout 1200 valgrind --tool=callgrind --callgrind-out-file="$out" "$1" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
}
per_call() { # BINARY: instructions per allowed call
  local few many
  few=$(instructions "$1" 500)
  many=$(instructions "$1" 1500)
  echo $(((many - few) / 1100))
}

read -r allocs_before bytes_before <<<"$(allocations "$scratch/before")"
read -r allocs_after bytes_after <<<"$(allocations "$scratch/after")"
ir_before=$(per_call "$scratch/before")
ir_after=$(per_call "$scratch/after")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%+.2f%%", (b - a) * 100 / a}'; }
echo
echo "per allowed call, $base_rev${base_features:+ (features: $base_features)} -> this tree${features:+ (features: $features)}${COST_ENV:+, $COST_ENV}"
printf '  %-22s %12s %12s %9s\n' '' before after change
printf '  %-22s %12s %12s %9s\n' instructions "$ir_before" "$ir_after" "$(ratio "$ir_before" "$ir_after")"
printf '  %-22s %12s %12s %9s\n' 'heap allocations' "$allocs_before" "$allocs_after" "$(ratio "$allocs_before" "$allocs_after")"
printf '  %-22s %12s %12s %9s\n' 'bytes allocated' "$bytes_before" "$bytes_after" "$(ratio "$bytes_before" "$bytes_after")"
