#!/usr/bin/env bash
# Attach and `bt` at scale against gdb (issue 14, item 5): for each size N a job of N tasks
# waiting in nanosleep is started by Slurm (`srun --overcommit -n N sleep`; LAUNCHER=mpirun:
# Open MPI's `mpirun -n N sleep`, whose table sdm reads from its process tree), then
#   attach : `sdm attach SRUN_PID -c detach`            (table via MPIR, N servers, attach, detach)
#   bt     : `sdm attach SRUN_PID -c bt -c detach` minus attach (one merged bt of all N ranks)
#   gdb    : `gdb -p PID -batch -ex bt` on each task in turn (on GDB_MAX tasks at most; beyond,
#            the time for GDB_MAX is scaled to N and marked "scaled")
# REPS runs of each, medians printed as one Markdown table row per size.
#
# Usage: bench/attach-bench.sh
# Environment: SIZES ("64 256 1024"), REPS (3), GDB_MAX (256), LAUNCHER (srun; Slurm's
# default MaxTasksPerNode, 512, caps srun on one node: use mpirun for 1024).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"64 256 1024"}
REPS=${REPS:-3}
GDB_MAX=${GDB_MAX:-256}
LAUNCHER=${LAUNCHER:-srun}

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v "$LAUNCHER" >/dev/null || { echo "needs $LAUNCHER (deploy/ci-setup.sh)" >&2; exit 1; }
command -v gdb >/dev/null || { echo "needs gdb (deploy/ci-setup.sh)" >&2; exit 1; }
cargo build --release -p sdm >&2
SDM=${CARGO_TARGET_DIR:-target}/release/sdm

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "# sdm $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $(date -u +%Y-%m-%d), REPS=$REPS" >&2
echo "| ranks ($LAUNCHER) | sdm attach+detach (s) | sdm bt, all ranks merged (s) | gdb bt on each rank in turn (s) | gdb / sdm bt |"
echo "| --- | --- | --- | --- | --- |"
for n in $SIZES; do
  attach=() bt=() gdbt=() scaled=""
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
    [ "$have" -eq "$n" ] || { echo "srun -n $n: only $have tasks in the table" >&2; kill "$job"; exit 1; }
    t0=$(now); "$SDM" attach "$job" -c detach >/dev/null; t1=$(now)
    "$SDM" attach "$job" -c bt -c detach >/tmp/sdm-attach-bench-bt.txt; t2=$(now)
    grep -q "nanosleep" /tmp/sdm-attach-bench-bt.txt || { echo "bt shows no nanosleep:" >&2; cat /tmp/sdm-attach-bench-bt.txt >&2; exit 1; }
    a=$(echo "$t1 - $t0" | bc -l); b=$(echo "($t2 - $t1) - $a" | bc -l)
    mapfile -t pids < <("$SDM" attach "$job" --table | awk '{print $3}')
    m=$(( n < GDB_MAX ? n : GDB_MAX ))
    t3=$(now)
    for pid in "${pids[@]:0:$m}"; do gdb -nx -p "$pid" -batch -ex bt </dev/null >/dev/null 2>&1; done
    t4=$(now)
    g=$(echo "($t4 - $t3) * $n / $m" | bc -l)
    [ "$m" -lt "$n" ] && scaled=" (scaled from $m)"
    kill "$job" 2>/dev/null; wait "$job" 2>/dev/null || true
    attach+=("$a") bt+=("$b") gdbt+=("$g")
    echo "# n=$n rep=$rep attach=$a bt=$b gdb=$g" >&2
  done
  A=$(printf '%s\n' "${attach[@]}" | median); B=$(printf '%s\n' "${bt[@]}" | median); G=$(printf '%s\n' "${gdbt[@]}" | median)
  printf '| %s | %.2f | %.2f | %.1f%s | %.0fx |\n' "$n" "$A" "$B" "$G" "$scaled" "$(echo "$G / $B" | bc -l)"
done
