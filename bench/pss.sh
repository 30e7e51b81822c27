#!/usr/bin/env bash
# Memory of the tool on a host: the proportional set size (PSS, from
# /proc/PID/smaps_rollup) summed over every process of the `sdm` binary under test (front-end,
# master, servers), for N ranks on this one host, in two states:
#   idle : `sdm launch -n N --hold`, once every server reported ready
#   bt   : `sdm attach SRUN_PID -x -` of a job of N tasks in nanosleep (`srun --overcommit -n N
#          sleep`), once one merged `bt` of every rank has printed (unwind tables and symbols
#          loaded, the tree up); then `detach`
# PSS counts a page shared by k processes as 1/k to each, so the sum is what the tool costs
# the host, shared code and libraries once. With an older build (--old-bin), both builds run
# in each rep, their order alternating, and the table gives old, new and new/old.
#
# Usage: bench/pss.sh [--old-bin PATH]
#   --old-bin PATH  the older build's `sdm` (or the directory holding it)
# Environment: SIZES ("64"), REPS (3), OLD_BIN (as --old-bin), NEW_BIN (run that `sdm` as the
# new build instead of building this tree's). Each build runs with SDM_BIN set to itself, so
# that the daemons it starts are its own.
set -euo pipefail
cd "$(dirname "$0")/.."

OLD_BIN=${OLD_BIN:-}
if [ "${1:-}" = --old-bin ]; then
  OLD_BIN=${2:?--old-bin needs a path}
  shift 2
fi
[ -d "$OLD_BIN" ] && OLD_BIN=$OLD_BIN/sdm
[ -z "$OLD_BIN" ] || [ -x "$OLD_BIN" ] || { echo "pss.sh: no sdm at $OLD_BIN" >&2; exit 1; }
SIZES=${SIZES:-64}
REPS=${REPS:-3}
command -v srun >/dev/null || { echo "pss.sh: needs srun (deploy/ci-setup.sh)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ -n "${NEW_BIN:-}" ]; then SDM=$NEW_BIN; else
  cargo build --release -p sdm >&2
  SDM=${CARGO_TARGET_DIR:-target}/release/sdm
fi
SDM=$(readlink -f "$SDM")
[ -n "$OLD_BIN" ] && OLD_BIN=$(readlink -f "$OLD_BIN")
work=$(mktemp -d)
# On any exit, the job still running (a session of its own: setsid) goes too.
trap 'rm -rf "$work"; [ -z "${job:-}" ] || kill -- -"$job" 2>/dev/null || true' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# PSS in MB summed over the live processes running binary $1, and how many there are.
pss_of() {
  local kb=0 count=0 p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$1" ] || continue
    local k
    k=$(awk '/^Pss:/ {print $2}' "$p/smaps_rollup" 2>/dev/null) || continue
    [ -n "$k" ] || continue
    kb=$((kb + k)) count=$((count + 1))
  done
  echo "$(echo "$kb / 1024" | bc -l) $count"
}

# Waits up to 120 s for file $1 to match pattern $2.
wait_for() {
  for _ in $(seq 1200); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "pss.sh: no '$2' in $1:" >&2
  cat "$1" >&2
  return 1
}

# Idle tree of binary $1 at $n ranks: prints "MB processes".
idle() {
  local out=$work/idle.out pid
  SDM_BIN=$1 setsid "$1" launch -n "$n" --hold --json </dev/null >"$out" 2>&1 &
  pid=$!
  wait_for "$out" '"ready_count"'
  sleep 1
  pss_of "$1"
  kill -INT "$pid"
  wait "$pid" 2>/dev/null || true
}

# Binary $1 attached to job $2 after one bt: prints "MB processes".
after_bt() {
  local out=$work/bt.out fifo=$work/cmds pid
  rm -f "$fifo"
  mkfifo "$fifo"
  SDM_BIN=$1 "$1" attach "$2" -x - <"$fifo" >"$out" 2>&1 &
  pid=$!
  exec 9>"$fifo"
  echo bt >&9
  wait_for "$out" nanosleep
  sleep 1
  pss_of "$1"
  echo detach >&9
  exec 9>&-
  wait "$pid"
}

# Both measures of binary $1 ($2: its label, old or new) at $n ranks, appended to the
# arrays ${2}_idle and ${2}_bt; the process counts go to ${2}_idle_n and ${2}_bt_n.
measure() {
  local -n idle_mb=${2}_idle bt_mb=${2}_bt idle_n=${2}_idle_n bt_n=${2}_bt_n
  local m c
  read -r m c <<<"$(idle "$1")"
  idle_mb+=("$m") idle_n=$c
  read -r m c <<<"$(after_bt "$1" "$job")"
  bt_mb+=("$m") bt_n=$c
  printf '# n=%s rep=%s %s: idle %.1f MB in %s processes, after bt %.1f MB in %s processes\n' \
    "$n" "$rep" "$2" "${idle_mb[-1]}" "$idle_n" "$m" "$c" >&2
}

echo "# sdm $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $(date -u +%Y-%m-%d), REPS=$REPS, old build: ${OLD_BIN:-none}, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ -n "$OLD_BIN" ]; then
  echo "| ranks | old idle PSS (MB, processes) | new | new / old | old PSS after bt (MB, processes) | new | new / old |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
else
  echo "| ranks | idle PSS (MB, processes) | PSS after bt (MB, processes) |"
  echo "| --- | --- | --- |"
fi
for n in $SIZES; do
  new_idle=() new_bt=() old_idle=() old_bt=() new_idle_n=0 new_bt_n=0 old_idle_n=0 old_bt_n=0
  for rep in $(seq "$REPS"); do
    setsid srun --overcommit -n "$n" sleep 3600 </dev/null >/dev/null 2>&1 &
    job=$!
    for _ in $(seq 600); do
      have=$("$SDM" attach "$job" --table 2>/dev/null | awk '$3 > 0' | wc -l || true)
      [ "$have" -eq "$n" ] && break
      sleep 0.1
    done
    [ "$have" -eq "$n" ] || { echo "srun -n $n: only $have tasks in the table" >&2; kill "$job"; exit 1; }
    if [ -z "$OLD_BIN" ]; then measure "$SDM" new
    elif [ $((rep % 2)) -eq 1 ]; then measure "$OLD_BIN" old; measure "$SDM" new
    else measure "$SDM" new; measure "$OLD_BIN" old
    fi
    kill "$job" 2>/dev/null; wait "$job" 2>/dev/null || true; job=
  done
  NI=$(printf '%s\n' "${new_idle[@]}" | median) NB=$(printf '%s\n' "${new_bt[@]}" | median)
  if [ -z "$OLD_BIN" ]; then
    printf '| %s | %.1f (%s) | %.1f (%s) |\n' "$n" "$NI" "$new_idle_n" "$NB" "$new_bt_n"
    continue
  fi
  OI=$(printf '%s\n' "${old_idle[@]}" | median) OB=$(printf '%s\n' "${old_bt[@]}" | median)
  printf '| %s | %.1f (%s) | %.1f (%s) | %.2f | %.1f (%s) | %.1f (%s) | %.2f |\n' "$n" \
    "$OI" "$old_idle_n" "$NI" "$new_idle_n" "$(echo "$NI / $OI" | bc -l)" \
    "$OB" "$old_bt_n" "$NB" "$new_bt_n" "$(echo "$NB / $OB" | bc -l)"
done
