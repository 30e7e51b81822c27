#!/usr/bin/env bash
# Attach and `bt` at scale against gdb: for each size N a job of N tasks
# waiting in nanosleep is started by Slurm (`srun --overcommit -n N sleep`; LAUNCHER=mpirun:
# Open MPI's `mpirun -n N sleep`, whose table sdm reads from its process tree), then
#   attach : `sdm attach SRUN_PID -c detach`            (table via MPIR, N servers, attach, detach)
#   bt     : `sdm attach SRUN_PID -c bt -c detach` minus attach (one merged bt of all N ranks)
#   gdb    : `gdb -p PID -batch -ex bt` on each task in turn (on GDB_MAX tasks at most; beyond,
#            the time for GDB_MAX is scaled to N and marked "scaled")
# REPS runs of each, medians printed as one Markdown table row per size.
# With an older build (--old-bin, or OLD_BIN), both builds attach to the same job in each rep,
# their order alternating from rep to rep, and the table gives old, new and new/old for
# attach+detach and for attach+bt+detach end to end (the gdb runs are then skipped).
#
# Usage: bench/attach-bench.sh [--old-bin PATH]
#   --old-bin PATH  the older build's `sdm` (or the directory holding it), e.g.
#                   /work/old-bin/sdm, a build with one server per rank
# Environment: SIZES ("64 256 1024"), REPS (3), GDB_MAX (256), LAUNCHER (srun; Slurm's
# default MaxTasksPerNode, 512, caps srun on one node: use mpirun for 1024), OLD_BIN (as
# --old-bin), SDM_ARGS (extra `sdm attach` options of the new build, e.g.
# `--ranks-per-server 1`), NEW_BIN (run that `sdm` as the new build, not this tree's),
# GDB_MAX=0 skips the gdb runs. Each build runs with SDM_BIN set to itself, so that the
# daemons it starts are its own.
set -euo pipefail
cd "$(dirname "$0")/.."

OLD_BIN=${OLD_BIN:-}
if [ "${1:-}" = --old-bin ]; then
  OLD_BIN=${2:?--old-bin needs a path}
  shift 2
fi
[ -d "$OLD_BIN" ] && OLD_BIN=$OLD_BIN/sdm
[ -z "$OLD_BIN" ] || [ -x "$OLD_BIN" ] || { echo "attach-bench.sh: no sdm at $OLD_BIN" >&2; exit 1; }
read -r -a SDM_ARGS <<<"${SDM_ARGS:-}"
SIZES=${SIZES:-"64 256 1024"}
REPS=${REPS:-3}
GDB_MAX=${GDB_MAX:-256}
LAUNCHER=${LAUNCHER:-srun}

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v "$LAUNCHER" >/dev/null || { echo "needs $LAUNCHER (deploy/ci-setup.sh)" >&2; exit 1; }
command -v gdb >/dev/null || { echo "needs gdb (deploy/ci-setup.sh)" >&2; exit 1; }
# NEW_BIN: run that build as the new one instead of building this tree's.
if [ -n "${NEW_BIN:-}" ]; then SDM=$NEW_BIN; else
  cargo build --release -p sdm >&2
  SDM=${CARGO_TARGET_DIR:-target}/release/sdm
fi

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Seconds of one end-to-end run of `$1 attach JOB ARGS...`, its output in $out; the build's
# own options (SDM_ARGS) go to the new build only.
out=/tmp/sdm-attach-bench-$$.txt
# On any exit, the job still running (a session of its own: setsid) goes too.
trap 'rm -f "$out"; [ -z "${job:-}" ] || kill -- -"$job" 2>/dev/null || true' EXIT
timed_attach() {
  local bin=$1 job=$2 t0 t1
  shift 2
  local extra=()
  [ "$bin" = "$SDM" ] && extra=("${SDM_ARGS[@]}")
  t0=$(now)
  SDM_BIN=$bin "$bin" attach "$job" "${extra[@]}" "$@" >"$out"
  t1=$(now)
  echo "$t1 - $t0" | bc -l
}
# The old build against the new on job $1, order by rep $2: sets o_a, o_b, n_a, n_b (attach
# + detach, attach + bt + detach, end to end).
old_vs_new() {
  local job=$1 rep=$2 sys
  local order=(old new)
  [ $((rep % 2)) -eq 0 ] && order=(new old)
  for sys in "${order[@]}"; do
    local bin=$SDM
    [ "$sys" = old ] && bin=$OLD_BIN
    local a b
    a=$(timed_attach "$bin" "$job" -c detach)
    b=$(timed_attach "$bin" "$job" -c bt -c detach)
    grep -q "nanosleep" "$out" || { echo "$sys: bt shows no nanosleep:" >&2; cat "$out" >&2; exit 1; }
    if [ "$sys" = old ]; then o_a=$a o_b=$b; else n_a=$a n_b=$b; fi
  done
}

echo "# sdm $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $(date -u +%Y-%m-%d), REPS=$REPS, old build: ${OLD_BIN:-none}, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ -n "$OLD_BIN" ]; then
  echo "| ranks ($LAUNCHER) | old attach+detach (s) | new (s) | new / old | old attach+bt+detach (s) | new (s) | new / old |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
else
  echo "| ranks ($LAUNCHER) | sdm attach+detach (s) | sdm bt, all ranks merged (s) | gdb bt on each rank in turn (s) | gdb / sdm bt |"
  echo "| --- | --- | --- | --- | --- |"
fi
for n in $SIZES; do
  attach=() bt=() gdbt=() scaled="" oa=() ob=() na=() nb=()
  for rep in $(seq "$REPS"); do
    case "$LAUNCHER" in
      srun) setsid srun --overcommit -n "$n" sleep 3600 </dev/null >/dev/null 2>&1 & ;;
      mpirun) setsid env -u SLURM_JOB_ID mpirun --allow-run-as-root --oversubscribe -n "$n" \
        sleep 3600 </dev/null >/dev/null 2>&1 & ;;
    esac
    job=$!
    # The table is complete once srun has every task, each with its pid.
    for _ in $(seq 600); do
      have=$("$SDM" attach "$job" --table 2>/dev/null | awk '$3 > 0' | wc -l || true)
      [ "$have" -eq "$n" ] && break
      sleep 0.1
    done
    [ "$have" -eq "$n" ] || { echo "$LAUNCHER -n $n: only $have tasks in the table" >&2; kill "$job"; exit 1; }
    if [ -n "$OLD_BIN" ]; then
      old_vs_new "$job" "$rep"
      kill "$job" 2>/dev/null; wait "$job" 2>/dev/null || true; job=
      oa+=("$o_a") ob+=("$o_b") na+=("$n_a") nb+=("$n_b")
      echo "# n=$n rep=$rep old: attach=$o_a attach+bt=$o_b new: attach=$n_a attach+bt=$n_b load: $(cut -d' ' -f1 /proc/loadavg)" >&2
      continue
    fi
    t0=$(now); SDM_BIN=$SDM "$SDM" attach "$job" -c detach >/dev/null; t1=$(now)
    SDM_BIN=$SDM "$SDM" attach "$job" -c bt -c detach >/tmp/sdm-attach-bench-bt.txt; t2=$(now)
    grep -q "nanosleep" /tmp/sdm-attach-bench-bt.txt || { echo "bt shows no nanosleep:" >&2; cat /tmp/sdm-attach-bench-bt.txt >&2; exit 1; }
    a=$(echo "$t1 - $t0" | bc -l); b=$(echo "($t2 - $t1) - $a" | bc -l)
    mapfile -t pids < <("$SDM" attach "$job" --table | awk '{print $3}')
    m=$(( n < GDB_MAX ? n : GDB_MAX ))
    t3=$(now)
    for pid in "${pids[@]:0:$m}"; do gdb -nx -p "$pid" -batch -ex bt </dev/null >/dev/null 2>&1; done
    t4=$(now)
    g=0
    [ "$m" -gt 0 ] && g=$(echo "($t4 - $t3) * $n / $m" | bc -l)
    [ "$m" -lt "$n" ] && scaled=" (scaled from $m)"
    kill "$job" 2>/dev/null; wait "$job" 2>/dev/null || true; job=
    attach+=("$a") bt+=("$b") gdbt+=("$g")
    echo "# n=$n rep=$rep attach=$a bt=$b gdb=$g" >&2
  done
  if [ -n "$OLD_BIN" ]; then
    OA=$(printf '%s\n' "${oa[@]}" | median); OB=$(printf '%s\n' "${ob[@]}" | median)
    NA=$(printf '%s\n' "${na[@]}" | median); NB=$(printf '%s\n' "${nb[@]}" | median)
    printf '| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n' "$n" "$OA" "$NA" \
      "$(echo "$NA / $OA" | bc -l)" "$OB" "$NB" "$(echo "$NB / $OB" | bc -l)"
    continue
  fi
  A=$(printf '%s\n' "${attach[@]}" | median); B=$(printf '%s\n' "${bt[@]}" | median); G=$(printf '%s\n' "${gdbt[@]}" | median)
  if [ "$GDB_MAX" -gt 0 ]; then
    printf '| %s | %.2f | %.2f | %.1f%s | %.0fx |\n' "$n" "$A" "$B" "$G" "$scaled" "$(echo "$G / $B" | bc -l)"
  else
    printf '| %s | %.2f | %.2f | - | - |\n' "$n" "$A" "$B"
  fi
done
