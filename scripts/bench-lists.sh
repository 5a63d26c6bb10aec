#!/usr/bin/env bash
# The gate's instructions per `tools/list` and per listed entry, at 10, 100 and 1,000 tools
# (callgrind, deterministic), from `benches/answers.rs` run one configuration at a time.
#
#   scripts/bench-lists.sh                    # builds the bench (release), then measures
#   LISTS_BIN=path/to/answers scripts/bench-lists.sh   # an answers binary built already
#   LISTS_HIDE=1 scripts/bench-lists.sh       # the policy hides every other tool
#   LISTS_ERA=modern scripts/bench-lists.sh   # the lists in the 2026-07-28 era (written private)
#
# Per request = the difference of callgrind's totals between two request counts (20 and 40;
# 10 and 20 at 1,000 tools) over the difference in count: the set-up (the gate built, the
# first token verified) cancels out. The gate's own = gated minus bare (the same canned inner
# answer, no layer); per entry = the gate's own over the tool count; growth = per entry at N
# over per entry at 10 (1.00: the cost grows linearly, below: the fixed part thins out).
# Needs valgrind. Exit status: 0, 1 on a failure, 2 for a bad setting.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'bench-lists: %s\n' "$*" >&2; }

hide=${LISTS_HIDE:-0}
[[ "$hide" == 0 || "$hide" == 1 ]] || {
  log "LISTS_HIDE is 0 or 1"
  exit 2
}
era=${LISTS_ERA:-legacy}
[[ "$era" == legacy || "$era" == modern ]] || {
  log "LISTS_ERA is legacy or modern"
  exit 2
}
command -v valgrind >/dev/null || {
  log "valgrind is not installed"
  exit 1
}
bin=${LISTS_BIN:-}
if [[ -z "$bin" ]]; then
  bin=$(cd "$root" && cargo bench --bench answers --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*answers-[^)]*\)).*/\1/p' | tail -n 1)
fi
[[ -x "$bin" ]] || {
  log "no answers binary (LISTS_BIN=$bin)"
  exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Callgrind's total for one configuration: ir MODE ENTRIES REQUESTS
ir() {
  local file="$out/cg.$1.$2.$3"
  ANSWERS_ONLY=$1 ANSWERS_ENTRIES=$2 ANSWERS_REQUESTS=$3 ANSWERS_HIDE=$hide ANSWERS_ERA=$era \
    valgrind --tool=callgrind --callgrind-out-file="$file" "$bin" >/dev/null 2>"$out/log" || {
    cat "$out/log" >&2
    log "callgrind failed: $1 $2 $3"
    exit 1
  }
  sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$file" | head -n 1
}

# Instructions per request: per_request MODE ENTRIES
per_request() {
  local low=20 high=40
  if [[ $2 -ge 1000 ]]; then low=10 high=20; fi
  local a b
  a=$(ir "$1" "$2" "$low")
  b=$(ir "$1" "$2" "$high")
  echo $(((b - a) / (high - low)))
}

printf 'tools/list through the gate, instructions per request (callgrind; LISTS_HIDE=%s, LISTS_ERA=%s)\n' "$hide" "$era"
printf '  %7s %12s %12s %12s %10s %8s\n' tools bare gated "gate's own" "per entry" growth
first=""
for entries in 10 100 1000; do
  bare=$(per_request bare-list "$entries")
  gated=$(per_request list "$entries")
  own=$((gated - bare))
  each=$((own / entries))
  [[ -n "$first" ]] || first=$each
  growth=$(awk -v a="$each" -v b="$first" 'BEGIN { printf "%.2f", a / b }')
  printf '  %7d %12d %12d %12d %10d %8s\n' "$entries" "$bare" "$gated" "$own" "$each" "$growth"
  [[ $entries -eq 10 ]] && own10=$own
  [[ $entries -eq 1000 ]] && own1000=$own
done
printf '  slope, 10 to 1,000 tools: %d instructions per listed entry\n' $(((own1000 - own10) / 990))
