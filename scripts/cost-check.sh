#!/usr/bin/env bash
# The cost check: the gate's own work, counted with callgrind (deterministic) and the benches'
# allocation counters, compared with the committed baseline, benches/cost-baseline.txt.
#
#   scripts/cost-check.sh                        # measure, print each figure against the baseline
#   COST_STRICT=1 scripts/cost-check.sh          # ... and exit 3 when a judged figure grew
#   COST_BLESS=1 scripts/cost-check.sh           # measure and rewrite the baseline
#   COST_ONLY=call COST_FEATURES=metrics COST_ENV="PIPELINE_METRICS=prometheus" scripts/cost-check.sh
#
# What it measures (release builds of benches/pipeline.rs and benches/answers.rs):
#   call  per `tools/call`: bare rmcp (a), allowed through the gate (b), denied by the gate (d);
#         instructions from callgrind's totals at two request counts (the set-up cancels out),
#         the gate's own = (b) - (a), with the SHA-256 of the token (sha2's compress256,
#         inclusive) apart; heap allocations and bytes from the pipeline bench's own counter.
#   list  per entry of a `tools/list` (answers bench): the gate's instructions, (gated - bare)
#         at 1,000 entries minus the same at 10, over 990 entries; allocations from the bench's
#         slope line.
#   args  per argument byte (`PIPELINE_ARG_BYTES`): per-call instructions at each size of
#         COST_ARG_SIZES minus those of the default 19-byte argument, over the bytes added,
#         bare and gated, and the gate's extra; bytes allocated by the gate per argument byte
#         (about 1 per copy of the body it keeps). Judged at the largest size.
#
# Environment (all optional):
#   COST_ONLY=call,list,args  the parts to measure (COST_BLESS needs all three)
#   COST_STRICT=0             1: exit 3 when a judged figure is above baseline x (1 + tolerance)
#                             (per-call instructions: or baseline + 1,000, whichever is more)
#   COST_TOLERANCE=3          that tolerance, in per cent
#   COST_BLESS=0              1: rewrite the baseline (refused with COST_FEATURES or COST_ENV)
#   COST_BASELINE=benches/cost-baseline.txt
#   COST_FEATURES=            crate features of both bench builds (e.g. metrics)
#   COST_ENV=                 NAME=VALUE words for every bench run (PIPELINE_LIMIT=..., ...)
#   COST_ARG_SIZES=100,10240,1048576
#   COST_REPEAT=3             pairs of runs per call figure (the median is taken)
#   COST_TARGET_DIR           the cargo target folder (default: CARGO_TARGET_DIR, or target)
#
# Needs valgrind (Debian: apt-get install valgrind). 5 to 10 minutes on 2 cores once built.
# Exit status: 0; 1 on a failure; 2 for a bad setting; 3 (COST_STRICT=1) when a figure grew.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'cost-check: %s\n' "$*" >&2; }
die() {
  log "$*"
  exit 1
}
bad() {
  log "$*"
  exit 2
}

# ---- Settings --------------------------------------------------------------------------------
only=${COST_ONLY:-call,list,args}
[[ "$only" =~ ^(call|list|args)(,(call|list|args))*$ ]] || bad "COST_ONLY=$only: a comma list of call, list, args"
wants() { [[ ",$only," == *",$1,"* ]]; }
strict=${COST_STRICT:-0}
bless=${COST_BLESS:-0}
[[ "$strict" =~ ^[01]$ && "$bless" =~ ^[01]$ ]] || bad "COST_STRICT and COST_BLESS are 0 or 1"
tolerance=${COST_TOLERANCE:-3}
[[ "$tolerance" =~ ^[0-9]+(\.[0-9]+)?$ ]] || bad "COST_TOLERANCE=$tolerance: a percentage"
features=${COST_FEATURES:-}
[[ "$features" =~ ^[a-z0-9_,-]*$ ]] || bad "COST_FEATURES: a comma-separated list, not $features"
read -r -a extra_env <<<"${COST_ENV:-}"
for word in ${extra_env[@]+"${extra_env[@]}"}; do
  [[ "$word" =~ ^[A-Z_][A-Z0-9_]*=.*$ ]] || bad "COST_ENV: NAME=VALUE words, not $word"
done
repeat=${COST_REPEAT:-3}
[[ "$repeat" =~ ^[1-9]$ ]] || bad "COST_REPEAT=$repeat: 1 to 9"
arg_sizes=${COST_ARG_SIZES:-100,10240,1048576}
[[ "$arg_sizes" =~ ^[0-9]+(,[0-9]+)*$ ]] || bad "COST_ARG_SIZES: a comma list of byte counts"
baseline=${COST_BASELINE:-$root/benches/cost-baseline.txt}
target=${COST_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}
if ((bless == 1)); then
  [[ -z "$features" && -z "${COST_ENV:-}" ]] || bad "COST_BLESS: the baseline is of the default build (no COST_FEATURES, no COST_ENV)"
  [[ "$only" == *call* && "$only" == *list* && "$only" == *args* ]] || bad "COST_BLESS measures every part (unset COST_ONLY)"
fi
# The default argument of benches/pipeline.rs: "mcp-gate-bench-ping".
default_arg=19

for tool in valgrind callgrind_annotate cargo git; do
  command -v "$tool" >/dev/null 2>&1 || die "missing $tool (valgrind: apt-get install valgrind)"
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# ---- Builds ----------------------------------------------------------------------------------
build() { # BENCH: the release bench binary's path
  local with=() binary
  [[ -z "$features" ]] || with=(--features "$features")
  binary=$(cd "$root" && CARGO_TARGET_DIR="$target" timeout 3600 cargo bench --bench "$1" \
    --no-run "${with[@]}" --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
  [[ -x "$binary" ]] || die "no $1 bench binary built (cargo bench --bench $1 --no-run)"
  printf '%s' "$binary"
}
log "building the benches (release${features:+, features $features})"
pipeline=$(build pipeline)
answers=""
wants list && answers=$(build answers)

# ---- Measuring -------------------------------------------------------------------------------
# callgrind BINARY OUT NAME=VALUE...: run under callgrind; prints the total instructions.
callgrind() {
  local binary=$1 out=$2
  shift 2
  env ${extra_env[@]+"${extra_env[@]}"} "$@" timeout 1800 \
    valgrind --tool=callgrind --callgrind-out-file="$out" "$binary" >"$out.log" 2>&1 ||
    die "callgrind run failed ($*): $(tail -3 "$out.log")"
  awk '/^summary:/ {print $2}' "$out"
}
# inclusive OUT FUNCTION: callgrind's inclusive instructions of FUNCTION (0 when absent).
inclusive() {
  callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$1" 2>/dev/null |
    awk -v f="$2" 'index($0, f) {gsub(",", "", $1); print $1; found = 1; exit} END {if (!found) print 0}'
}
# per_call CONFIG FEW MANY [NAME=VALUE...]: instructions per call of pipeline configuration
# CONFIG, and of those the SHA-256's; each run makes N/10 warm-up calls before its N. The
# median over COST_REPEAT pairs of runs: glibc's malloc does more or less work from one process
# to the next (its heap's layout follows the random hash seeds and keys), a few hundred
# instructions per call.
per_call() {
  local config=$1 few=$2 many=$3 ir_few ir_many sha_few sha_many calls round
  shift 3
  calls=$((many + many / 10 - few - few / 10))
  for round in $(seq "$repeat"); do
    ir_few=$(callgrind "$pipeline" "$scratch/cg-$config-$few" PIPELINE_ONLY="$config" PIPELINE_ROUNDS=1 PIPELINE_REQUESTS="$few" "$@")
    ir_many=$(callgrind "$pipeline" "$scratch/cg-$config-$many" PIPELINE_ONLY="$config" PIPELINE_ROUNDS=1 PIPELINE_REQUESTS="$many" "$@")
    sha_few=$(inclusive "$scratch/cg-$config-$few" 'sha2::sha256::compress256')
    sha_many=$(inclusive "$scratch/cg-$config-$many" 'sha2::sha256::compress256')
    awk -v a="$ir_few" -v b="$ir_many" -v s="$sha_few" -v t="$sha_many" -v n="$calls" \
      'BEGIN {printf "%.0f %.0f\n", (b - a) / n, (t - s) / n}'
  done | sort -n | awk -v runs="$repeat" '{line[NR] = $0} END {if (NR == runs) print line[int((NR + 1) / 2)]}'
}
# numbers VALUE...: stop unless every value is a number (a run that failed inside $(...)).
numbers() {
  local value
  for value in "$@"; do
    [[ "$value" =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || die "a measurement failed (got '$value'); see the lines above"
  done
}
# allocations [NAME=VALUE...]: the pipeline bench's counts, "a_count a_bytes b_count b_bytes d_count d_bytes"
allocations() {
  local out="$scratch/allocations.log"
  env ${extra_env[@]+"${extra_env[@]}"} PIPELINE_ROUNDS=1 "$@" timeout 900 "$pipeline" >"$out" 2>&1 ||
    die "pipeline bench failed: $(tail -3 "$out")"
  sed -n 's/^ *(\([abd]\)) .* \([0-9.]*\) (\([0-9]*\) bytes).*/\2 \3/p' "$out" | tr '\n' ' '
}

declare -A now=()
declare -A shown=() # figures printed but not judged: the inner server's, and totals
note() { # KEY VALUE [info]
  now[$1]=$2
  [[ -z "${3:-}" ]] || shown[$1]=1
}

if wants call; then
  log "call: callgrind of (a), (b) and (d) at 500 and 1,500 requests"
  read -r bare_ir _ <<<"$(per_call a 500 1500)"
  read -r allowed_ir allowed_sha <<<"$(per_call b 500 1500)"
  read -r denied_ir _ <<<"$(per_call d 500 1500)"
  numbers "$bare_ir" "$allowed_ir" "$allowed_sha" "$denied_ir"
  read -r a_n a_b b_n b_b d_n d_b <<<"$(allocations PIPELINE_REQUESTS=2000)"
  [[ -n "${d_b:-}" ]] || die "the pipeline bench printed no allocation counts"
  note call.bare.instructions "$bare_ir" info
  note call.bare.allocations "$a_n" info
  note call.allowed.instructions "$allowed_ir" info
  note call.allowed.allocations "$b_n" info
  note call.gate.instructions $((allowed_ir - bare_ir))
  note call.gate.sha256_instructions "$allowed_sha" info
  note call.gate.instructions_beyond_sha256 $((allowed_ir - bare_ir - allowed_sha))
  note call.gate.allocations "$(awk -v b="$b_n" -v a="$a_n" 'BEGIN {print b - a}')"
  note call.gate.bytes "$(awk -v b="$b_b" -v a="$a_b" 'BEGIN {print b - a}')"
  note call.denied.instructions "$denied_ir"
  note call.denied.allocations "$d_n"
fi

if wants list; then
  log "list: callgrind of tools/list at 10 and 1,000 entries, gated and bare"
  list_ir() { # MODE ENTRIES
    callgrind "$answers" "$scratch/cg-$1-$2" ANSWERS_ONLY="$1" ANSWERS_ENTRIES="$2" ANSWERS_REQUESTS=20
  }
  g10=$(list_ir list 10)
  g1000=$(list_ir list 1000)
  b10=$(list_ir bare-list 10)
  b1000=$(list_ir bare-list 1000)
  numbers "$g10" "$g1000" "$b10" "$b1000"
  note list.entry.instructions "$(awk -v g10="$g10" -v g="$g1000" -v b10="$b10" -v b="$b1000" \
    'BEGIN {printf "%.0f", ((g - g10) - (b - b10)) / (990 * 20)}')"
  env ${extra_env[@]+"${extra_env[@]}"} ANSWERS_REQUESTS=100 timeout 900 "$answers" >"$scratch/answers.log" 2>&1 ||
    die "answers bench failed: $(tail -3 "$scratch/answers.log")"
  entry_allocations=$(sed -n 's/.*per listed entry: .* µs, \([0-9.]*\) allocations.*/\1/p' "$scratch/answers.log")
  [[ -n "$entry_allocations" ]] || die "the answers bench printed no allocations per listed entry"
  note list.entry.allocations "$entry_allocations"
fi

if wants args; then
  # The reference: the default argument, at the same request counts as each size.
  declare -A reference=()
  args_table="$scratch/args.tsv"
  : >"$args_table"
  for size in ${arg_sizes//,/ }; do
    ((size > default_arg)) || bad "COST_ARG_SIZES: each size above $default_arg bytes"
    if ((size <= 65536)); then counts=(500 1500) allocs=2000; else counts=(10 30) allocs=20; fi
    log "args: callgrind of (a) and (b) with a $size-byte argument"
    if [[ -z "${reference[${counts[0]}]:-}" ]]; then
      read -r ref_a _ <<<"$(per_call a "${counts[@]}")"
      read -r ref_b _ <<<"$(per_call b "${counts[@]}")"
      read -r _ ref_ab _ ref_bb _ <<<"$(allocations PIPELINE_REQUESTS=$allocs)"
      reference[${counts[0]}]="$ref_a $ref_b $ref_ab $ref_bb"
    fi
    read -r ref_a ref_b ref_ab ref_bb <<<"${reference[${counts[0]}]}"
    read -r size_a _ <<<"$(per_call a "${counts[@]}" PIPELINE_ARG_BYTES="$size")"
    read -r size_b _ <<<"$(per_call b "${counts[@]}" PIPELINE_ARG_BYTES="$size")"
    numbers "$ref_a" "$ref_b" "$size_a" "$size_b"
    read -r _ size_ab _ size_bb _ <<<"$(allocations PIPELINE_REQUESTS=$allocs PIPELINE_ARG_BYTES="$size")"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$size_a" "$size_b" "$ref_a" "$ref_b" \
      "$size_ab" "$size_bb" "$(awk -v a="$ref_ab" -v b="$ref_bb" 'BEGIN {print b - a}')" >>"$args_table"
  done
  echo
  echo "per argument byte (tools/call echo; per byte = per-call change from the $default_arg-byte argument, over the bytes added)"
  printf '  %10s %12s %12s %10s %10s %10s %14s\n' bytes 'bare Ir' 'gated Ir' 'bare/B' 'gated/B' 'gate/B' 'gate bytes/B'
  awk -F'\t' -v d="$default_arg" '{
      added = $1 - d
      bare = ($2 - $4) / added; gated = ($3 - $5) / added
      copies = (($7 - $6) - $8) / added
      printf "  %10d %12d %12d %10.2f %10.2f %10.2f %14.2f\n", $1, $2, $3, bare, gated, gated - bare, copies
    }' "$args_table"
  largest=$(sort -n "$args_table" | tail -n 1)
  note args.byte.instructions "$(awk -F'\t' -v d="$default_arg" '{printf "%.3f", (($3 - $5) - ($2 - $4)) / ($1 - d)}' <<<"$largest")"
  note args.byte.bytes "$(awk -F'\t' -v d="$default_arg" '{printf "%.3f", (($7 - $6) - $8) / ($1 - d)}' <<<"$largest")"
  note args.byte.bare_instructions "$(awk -F'\t' -v d="$default_arg" '{printf "%.3f", ($2 - $4) / ($1 - d)}' <<<"$largest")" info
fi

# ---- Against the baseline --------------------------------------------------------------------
head_rev=$(git -C "$root" rev-parse --short HEAD)
keys=$(printf '%s\n' "${!now[@]}" | sort)
if ((bless == 1)); then
  {
    echo "# The cost check's baseline: written by COST_BLESS=1 scripts/cost-check.sh (see benches/README.md)."
    echo "# One figure a line: NAME VALUE. Re-bless with the change that moves a figure, and say why"
    echo "# in its commit message. Measured at $head_rev$(git -C "$root" diff --quiet HEAD -- src examples Cargo.toml Cargo.lock 'benches/*.rs'  || echo ' (with changes)'), $(rustc --version | cut -d' ' -f1-2), $(valgrind --version)."
    echo "# Figures with 'info' after them are shown, not judged (the inner server's own, and totals)."
    for key in $keys; do
      printf '%s %s%s\n' "$key" "${now[$key]}" "${shown[$key]:+ info}"
    done
  } >"$baseline"
  log "wrote $baseline"
fi

declare -A base=()
if [[ -f "$baseline" ]]; then
  while read -r key value _; do
    [[ -z "$key" || "$key" == \#* ]] || base[$key]=$value
  done <"$baseline"
else
  log "no baseline at $baseline: figures only (COST_BLESS=1 writes one)"
fi

echo
echo "cost check: $head_rev${features:+, features $features}${COST_ENV:+, $COST_ENV} against $(basename "$baseline") ($(sed -n 's/.*Measured at \([^,]*\),.*/\1/p' "$baseline" 2>/dev/null | head -n 1))"
printf '  %-42s %14s %14s %9s  %s\n' figure baseline now now/base ''
grew=0
for key in $keys; do
  was=${base[$key]:-}
  verdict=$(awk -v key="$key" -v now="${now[$key]}" -v was="$was" -v tol="$tolerance" -v info="${shown[$key]:-}" 'BEGIN {
    if (was == "") { printf "%9s  %s", "-", "not in the baseline"; exit }
    ratio = (was != 0) ? sprintf("%9.3f", now / was) : sprintf("%9s", "-")
    limit = (was != 0) ? was * (1 + tol / 100) : 0.5
    # per-call instructions move by a few hundred between processes (see per_call)
    if (key ~ /^call\..*instructions/ && limit < was + 1000) limit = was + 1000
    if (info != "") verdict = "(shown)"
    else if (now > limit) verdict = "GREW beyond " tol "%"
    else if (was != 0 && now < 2 * was - limit) verdict = "lower: re-bless with the change that did it"
    else verdict = "ok"
    printf "%s  %s", ratio, verdict
  }')
  printf '  %-42s %14s %14s %s\n' "$key" "${was:--}" "${now[$key]}" "$verdict"
  [[ "$verdict" != *GREW* ]] || grew=$((grew + 1))
done
if ((grew > 0 && strict == 1)); then
  log "$grew figure(s) grew beyond ${tolerance}% (COST_STRICT=1)"
  exit 3
fi
