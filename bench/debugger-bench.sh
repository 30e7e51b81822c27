#!/usr/bin/env bash
# `print x` and `next` at scale against gdb. For each size N,
# tests/programs/ranks.c (-O0 -g) runs as N ranks started stopped at `main`, and
# sdm-debug-bench times, to the merged reply of all N ranks:
#   handover+print : the first `print rank` (what the first symbolic command costs)
#   print          : each further `print rank` (median of K)
#   next           : each `next` on every rank (median of K)
# against gdb run on each process in turn (on GDB_MAX processes at most; beyond, scaled to N):
#   gdb print      : `gdb -batch -p PID -ex "print rank"` on each running rank
#   gdb next       : `gdb -batch -ex "break main" -ex run -ex next` on each rank (a gdb
#                    session per rank, as without sdm: compare with handover+print + next)
# REPS runs of each, medians, one Markdown table row per size.
# With an older build (--old-bin DIR, or OLD_BIN), both builds' sdm-debug-bench run in each
# rep, their order alternating from rep to rep, and the table gives old, new and new/old for
# each sdm column (the gdb runs are then skipped).
#
# Usage: bench/debugger-bench.sh [--old-bin DIR]
#   --old-bin DIR  the older build: DIR holds its release `sdm` and `sdm-debug-bench`
# Environment: SIZES ("64 256"), REPS (3), K (10), GDB_MAX (64; 0 skips the gdb runs),
# PROFILE (release; `dev` for the debug build), OLD_BIN (as --old-bin), NEW_BIN (a directory
# with the `sdm` and `sdm-debug-bench` to run as the new build, not this tree's). A size whose
# gdbs would not fit in the free memory (70 MB each) is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

OLD_BIN=${OLD_BIN:-}
if [ "${1:-}" = --old-bin ]; then
  OLD_BIN=${2:?--old-bin needs a directory}
  shift 2
fi
[ -f "$OLD_BIN" ] && OLD_BIN=$(dirname "$OLD_BIN")
if [ -n "$OLD_BIN" ]; then
  for b in sdm sdm-debug-bench; do
    [ -x "$OLD_BIN/$b" ] || { echo "debugger-bench.sh: no $b in $OLD_BIN" >&2; exit 1; }
  done
fi

SIZES=${SIZES:-"64 256"}
REPS=${REPS:-3}
K=${K:-10}
GDB_MAX=${GDB_MAX:-64}

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v gdb >/dev/null || { echo "needs gdb (deploy/ci-setup.sh)" >&2; exit 1; }
PROFILE=${PROFILE:-release}
# NEW_BIN: a directory holding the new build's `sdm` and `sdm-debug-bench`, instead of
# building this tree's.
if [ -n "${NEW_BIN:-}" ]; then dir=$NEW_BIN; else
  cargo build --profile "$PROFILE" -p sdm --bin sdm -p sdm-bench --bin sdm-debug-bench >&2
  dir=${CARGO_TARGET_DIR:-target}/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
fi
BENCH=$dir/sdm-debug-bench
export SDM_BIN=$dir/sdm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prog=$work/ranks
cc -O0 -g -o "$prog" tests/programs/ranks.c

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]] / 1000)" "$1" "$2"; }

# One run of sdm-debug-bench from $1 (a build's directory) with $n ranks: its JSON line, after
# checking that the first print merged into one group.
debug_bench() {
  local out
  out=$(SDM_BIN=$1/sdm "$1/sdm-debug-bench" -n "$n" --program "$prog" --iters "$K")
  [ "$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['print_groups'])" "$out")" = 1 ] \
    || { echo "print did not merge into one line: $out" >&2; exit 1; }
  echo "$out"
}
# The old build against the new at $n ranks, order by rep $1; appends to the o*/n* arrays.
old_vs_new() {
  local order=(old new) sys out
  [ $(($1 % 2)) -eq 0 ] && order=(new old)
  for sys in "${order[@]}"; do
    if [ "$sys" = old ]; then
      out=$(debug_bench "$OLD_BIN")
      ohp+=("$(field "$out" handover_print_ms)") opr+=("$(field "$out" print_p50_ms)")
      onx+=("$(field "$out" next_p50_ms)")
    else
      out=$(debug_bench "$dir")
      nhp+=("$(field "$out" handover_print_ms)") npr+=("$(field "$out" print_p50_ms)")
      nnx+=("$(field "$out" next_p50_ms)")
    fi
  done
  echo "# n=$n rep=$1 old: handover+print=${ohp[-1]} print=${opr[-1]} next=${onx[-1]} new: handover+print=${nhp[-1]} print=${npr[-1]} next=${nnx[-1]} load: $(cut -d' ' -f1 /proc/loadavg)" >&2
}
# Whether $n gdbs fit in the free memory (said on stderr when not).
fits() {
  local free_mb
  free_mb=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
  [ $((n * 70)) -le "$free_mb" ] && return 0
  echo "# n=$n skipped: $n gdbs need about $((n * 70)) MB, $free_mb MB available" >&2
  return 1
}
med() { printf '%s\n' "$@" | median; }
ratio() { echo "$2 / $1" | bc -l; }

echo "# sdm $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $(date -u +%Y-%m-%d), REPS=$REPS K=$K, old build: ${OLD_BIN:-none}, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ -n "$OLD_BIN" ]; then
  echo "| ranks | old handover + first print (s) | new (s) | new / old | old print (s) | new (s) | new / old | old next (s) | new (s) | new / old |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for n in $SIZES; do
    fits || continue
    ohp=() opr=() onx=() nhp=() npr=() nnx=()
    for rep in $(seq "$REPS"); do old_vs_new "$rep"; done
    OHP=$(med "${ohp[@]}") OPR=$(med "${opr[@]}") ONX=$(med "${onx[@]}")
    NHP=$(med "${nhp[@]}") NPR=$(med "${npr[@]}") NNX=$(med "${nnx[@]}")
    printf '| %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f |\n' "$n" \
      "$OHP" "$NHP" "$(ratio "$OHP" "$NHP")" "$OPR" "$NPR" "$(ratio "$OPR" "$NPR")" \
      "$ONX" "$NNX" "$(ratio "$ONX" "$NNX")"
  done
  exit 0
fi
echo "| ranks | handover + first print (s) | print, all ranks merged (s) | gdb print on each rank in turn (s) | next, all ranks merged (s) | gdb next on each rank in turn (s) |"
echo "| --- | --- | --- | --- | --- | --- |"
for n in $SIZES; do
  fits || continue
  hp=() pr=() nx=() gp=() gn=()
  m=$(( n < GDB_MAX ? n : GDB_MAX ))
  for rep in $(seq "$REPS"); do
    out=$("$BENCH" -n "$n" --program "$prog" --iters "$K")
    [ "$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['print_groups'])" "$out")" = 1 ] \
      || { echo "print did not merge into one line: $out" >&2; exit 1; }
    hp+=("$(field "$out" handover_print_ms)")
    pr+=("$(field "$out" print_p50_ms)")
    nx+=("$(field "$out" next_p50_ms)")
    if [ "$m" -eq 0 ]; then
      gp+=(0) gn+=(0)
      echo "# n=$n rep=$rep handover+print=${hp[-1]} print=${pr[-1]} next=${nx[-1]}" >&2
      continue
    fi
    # gdb on each process in turn: print on running ranks...
    pids=()
    for r in $(seq 0 $((m - 1))); do
      SDM_RANK=$r setsid "$prog" </dev/null >/dev/null 2>&1 &
      pids+=($!)
    done
    sleep 0.5
    t0=$(now)
    for pid in "${pids[@]}"; do
      gdb -nx -batch -iex "set debuginfod enabled off" -p "$pid" -ex "print rank" </dev/null >/dev/null 2>&1
    done
    t1=$(now)
    kill -9 "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    gp+=("$(echo "($t1 - $t0) * $n / $m" | bc -l)")
    # ... and a session per rank that runs to main and does one next.
    t0=$(now)
    for r in $(seq 0 $((m - 1))); do
      SDM_RANK=$r gdb -nx -batch -iex "set debuginfod enabled off" -ex "break main" -ex run -ex next "$prog" </dev/null >/dev/null 2>&1
    done
    t1=$(now)
    gn+=("$(echo "($t1 - $t0) * $n / $m" | bc -l)")
    echo "# n=$n rep=$rep handover+print=${hp[-1]} print=${pr[-1]} next=${nx[-1]} gdb_print=${gp[-1]} gdb_next=${gn[-1]}" >&2
  done
  scaled=""
  [ "$m" -lt "$n" ] && scaled=" (scaled from $m)"
  HP=$(printf '%s\n' "${hp[@]}" | median); PR=$(printf '%s\n' "${pr[@]}" | median)
  NX=$(printf '%s\n' "${nx[@]}" | median); GP=$(printf '%s\n' "${gp[@]}" | median)
  GN=$(printf '%s\n' "${gn[@]}" | median)
  printf '| %s | %.2f | %.3f | %.1f%s | %.3f | %.1f%s |\n' "$n" "$HP" "$PR" "$GP" "$scaled" "$NX" "$GN" "$scaled"
done
