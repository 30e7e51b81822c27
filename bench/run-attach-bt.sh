#!/usr/bin/env bash
# Attach + one merged `bt` of a hung job of N ranks (256) against py-spy and gdb run on each
# rank in turn, in one sitting. Each job has every rank but the last waiting in a barrier
# called from step(), the last computing in compute() called from step():
#   py-mpi4py : bench/programs/py_hang.py under Open MPI 5's mpirun with mpi4py
#   py-loop   : the same program started by a plain shell loop, RANK and WORLD_SIZE set
#   c-ompi5   : tests/programs/mpi_hang.c built with Open MPI 5's mpicc, under its mpirun
# and each rep times, end to end (wall clock):
#   sdm    : `sdm attach TARGET -c 'bt --classes' -c detach`, TARGET the launcher's pid when
#            `sdm attach PID --table` lists all N ranks from it, else `--pids` (ATTACH)
#   py-spy : `py-spy dump --pid PID` on each rank in turn (Python jobs only)
#   gdb    : `gdb -batch -p PID -ex 'thread apply all bt'` on each rank in turn (on GDB_MAX
#            ranks at most; beyond, the time is scaled to N and the line says so)
# the tools' order rotating from rep to rep. A run counts only when complete: sdm's classes
# hold every rank and it detached from all; every py-spy and gdb run exited 0 and printed a
# stack of the program. A failed run is written as failed, without a time. One JSON line
# per run goes to OUT.jsonl; the Markdown table of medians (min-max) and ratios follows.
#
# Usage: bench/run-attach-bt.sh [OUT.jsonl]     a sitting (results in OUT.jsonl)
#        bench/run-attach-bt.sh --smoke         4 shell-loop ranks, one rep (under 30 s)
#        bench/run-attach-bt.sh --table FILE    the table of a sitting's results
# Environment: SDM (the `sdm` binary to measure; default: this tree's release build, built),
# N (256), REPS (3), JOBS ("py-mpi4py py-loop c-ompi5"), GDB_MAX (N), PYSPY_MAX (N), ATTACH
# (auto, pids or launcher), NICE (19: the jobs' niceness, so 256 spinning ranks leave the
# tools and the machine's other work their share of two cores), VENV (/opt/sdm-venv: Open
# MPI 5, mpi4py, py-spy), READY_TIMEOUT (900 s for a job's ranks to start).
# Benchmarks are not tests: CI does not run this.
set -euo pipefail
MODE=sitting
case "${1:-}" in
  --smoke) MODE=smoke; shift ;;
  --table) MODE=table; shift; [ -n "${1:-}" ] || { echo "--table needs a results file" >&2; exit 2; } ;;
esac
# Paths as given, before the cd.
[ -z "${SDM:-}" ] || SDM=$(realpath -m -- "$SDM")
[ -z "${1:-}" ] || set -- "$(realpath -m -- "$1")"
cd "$(dirname "$0")/.."
[ "$MODE" = table ] && exec python3 bench/attach_bt.py table "$1"
VENV=${VENV:-/opt/sdm-venv}
if [ "$MODE" = smoke ]; then
  N=4 REPS=1 JOBS=py-loop GDB_MAX=1 PYSPY_MAX=4
fi
N=${N:-256}
REPS=${REPS:-3}
JOBS=${JOBS:-"py-mpi4py py-loop c-ompi5"}
GDB_MAX=${GDB_MAX:-$N}
PYSPY_MAX=${PYSPY_MAX:-$N}
ATTACH=${ATTACH:-auto}
NICE=${NICE:-19}
READY_TIMEOUT=${READY_TIMEOUT:-900}
OUT=${1:-target/attach-bt-$(date -u +%Y%m%dT%H%M%SZ).jsonl}

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
command -v gdb >/dev/null || { echo "run-attach-bt.sh: needs gdb" >&2; exit 1; }
for tool in mpirun mpicc python py-spy; do
  [ -x "$VENV/bin/$tool" ] || { echo "run-attach-bt.sh: no $VENV/bin/$tool (deploy/ci-setup.sh)" >&2; exit 1; }
done
if [ -z "${SDM:-}" ]; then
  if [ "$MODE" = smoke ]; then
    cargo build -q -p sdm >&2
    SDM=${CARGO_TARGET_DIR:-target}/debug/sdm
  else
    cargo build --release -p sdm >&2
    SDM=${CARGO_TARGET_DIR:-target}/release/sdm
  fi
fi
[ -x "$SDM" ] || { echo "run-attach-bt.sh: no sdm at $SDM" >&2; exit 1; }
export SDM_BIN=$SDM # the daemons sdm starts are the same build

work=$(mktemp -d /tmp/attach-bt-XXXXXX)
# A smoke run's results go with the rest of its files, unless a file is named.
[ "$MODE" = smoke ] && [ -z "${1:-}" ] && OUT=$work/smoke.jsonl
mkdir -p "$(dirname "$OUT")"
job=
ranks=()
# Ends the job running: its launcher, then any rank left behind (a shell loop's ranks
# outlive the shell).
stop_job() {
  [ -n "$job" ] || return 0
  kill "$job" 2>/dev/null || true
  [ ${#ranks[@]} -eq 0 ] || kill "${ranks[@]}" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
  sleep 2
  [ ${#ranks[@]} -eq 0 ] || kill -KILL "${ranks[@]}" 2>/dev/null || true
  job=''
  ranks=()
}
trap 'stop_job; rm -rf "$work"' EXIT

now() { date +%s.%N; }
load() { cut -d' ' -f1 /proc/loadavg; }
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
sdm_version=$("$SDM" --version 2>/dev/null || echo '?')

# Starts job $1 of N ranks in the background ($job: its launcher's pid), output in
# $work/out (appended to: ranks write at once).
start_job() {
  local py=bench/programs/py_hang.py
  : >"$work/out"
  case "$1" in
    py-mpi4py)
      prog=$py
      setsid nice -n "$NICE" "$VENV/bin/mpirun" --allow-run-as-root --oversubscribe -n "$N" \
        "$VENV/bin/python" "$py" --mpi </dev/null >>"$work/out" 2>&1 &
      ;;
    py-loop)
      prog=$py
      # shellcheck disable=SC2016 # the loop's own arguments, expanded by its shell
      setsid nice -n "$NICE" bash -c 'for r in $(seq 0 $(($2 - 1))); do
          RANK=$r WORLD_SIZE=$2 "$1" "$3" & done; wait' loop "$VENV/bin/python" "$N" "$py" \
        </dev/null >>"$work/out" 2>&1 &
      ;;
    c-ompi5)
      prog=$work/mpi_hang
      [ -x "$prog" ] || "$VENV/bin/mpicc" -O2 -g -Wall -o "$prog" tests/programs/mpi_hang.c
      setsid nice -n "$NICE" env -u SLURM_JOB_ID "$VENV/bin/mpirun" --allow-run-as-root \
        --oversubscribe -n "$N" "$prog" </dev/null >>"$work/out" 2>&1 &
      ;;
    *) echo "run-attach-bt.sh: unknown job $1 in JOBS" >&2; exit 1 ;;
  esac
  job=$!
}

# Waits until every rank printed `ready`, then sets ranks (pids in rank order) and
# target (what sdm attaches to).
await_job() {
  local t0 have=0
  t0=$(now)
  while [ "$have" -lt "$N" ]; do
    have=$(grep -o ready "$work/out" | wc -l || true)
    kill -0 "$job" 2>/dev/null || { echo "$1: the job ended:" >&2; tail "$work/out" >&2; exit 1; }
    if [ "$(echo "$(now) - $t0 > $READY_TIMEOUT" | bc)" = 1 ]; then
      echo "$1: only $have of $N ranks ready after $READY_TIMEOUT s" >&2; exit 1
    fi
    sleep 1
  done
  printf '# %s: %s ranks ready in %.0f s, load %s\n' "$1" "$N" "$(echo "$(now) - $t0" | bc)" "$(load)" >&2
  mapfile -t ranks < <(python3 bench/attach_bt.py ranks "$job" "$prog" "$N")
  target=(--pids "$(IFS=,; echo "${ranks[*]}")") how=pids
  if [ "$ATTACH" != pids ]; then
    # The launcher's own table (MPIR, PMIx, its process tree), when sdm reads all N ranks.
    local listed
    listed=$(timeout 60 "$SDM" attach "$job" --table --json 2>/dev/null | grep -c '"pid":[1-9]' || true)
    if [ "$listed" -eq "$N" ]; then
      target=("$job") how=launcher
    elif [ "$ATTACH" = launcher ]; then
      echo "$1: sdm lists $listed of $N ranks from launcher $job" >&2; exit 1
    fi
  fi
}

# One JSON line of a run: job, tool, rep, seconds measured, ranks timed (0 for a failed
# run, which gets no time).
record() {
  local job_name=$1 tool=$2 rep=$3 secs=$4 timed=$5
  python3 - "$job_name" "$tool" "$rep" "$secs" "$timed" "$N" "$how" "$NICE" "$(load)" \
    "$commit" "$sdm_version" "$SDM" >>"$OUT" <<'PY'
import json, sys
job, tool, rep, secs, timed, n, how, nice, load, commit, version, sdm = sys.argv[1:]
line = {"bench": "attach-bt", "job": job, "tool": tool, "n": int(n), "rep": int(rep),
        "attach": how if tool == "sdm" else None, "nice": int(nice), "load1": float(load),
        "commit": commit, "sdm": version, "sdm_path": sdm}
if int(timed) == 0:
    line["failed"] = True
else:
    # Timed on fewer ranks than the job has: scaled to all of them, and said so.
    line["seconds"] = float(secs) * int(n) / int(timed)
    line["timed_ranks"] = int(timed)
    line["scaled"] = int(timed) < int(n)
print(json.dumps(line))
PY
}

# The timed runs of tool $2 on job $1, rep $3.
run_sdm() {
  local t0 t1 rc=0
  t0=$(now)
  timeout 600 "$SDM" attach "${target[@]}" -c 'bt --classes' -c detach </dev/null >"$work/sdm.txt" 2>&1 || rc=$?
  t1=$(now)
  if [ "$rc" -eq 0 ] && python3 bench/attach_bt.py check-classes "$N" <"$work/sdm.txt"; then
    record "$1" sdm "$2" "$(echo "$t1 - $t0" | bc)" "$N"
  else
    echo "$1: sdm failed (exit $rc):" >&2; tail -20 "$work/sdm.txt" >&2
    record "$1" sdm "$2" 0 0
  fi
}
# Whether `$1` (py-spy or gdb) printed a stack of process $2, in $work/one.txt.
one_stack() {
  if [ "$1" = py-spy ]; then
    "$VENV/bin/py-spy" dump --pid "$2" >"$work/one.txt" 2>&1 </dev/null || return 1
    grep -q 'py_hang.py' "$work/one.txt"
  else
    gdb -nx -batch -p "$2" -ex 'thread apply all bt' >"$work/one.txt" 2>&1 </dev/null || return 1
    grep -q '^#1 ' "$work/one.txt" && grep -q 'detached\]' "$work/one.txt"
  fi
}
run_each() {
  local job_name=$1 tool=$2 rep=$3 max=$4 t0 t1 pid ok=1
  local m=$((N < max ? N : max))
  t0=$(now)
  for pid in "${ranks[@]:0:$m}"; do
    one_stack "$tool" "$pid" || { ok=0; break; }
  done
  t1=$(now)
  if [ "$ok" = 1 ]; then
    record "$job_name" "$tool" "$rep" "$(echo "$t1 - $t0" | bc)" "$m"
  else
    echo "$job_name: $tool failed on pid $pid:" >&2; tail -20 "$work/one.txt" >&2
    record "$job_name" "$tool" "$rep" 0 0
  fi
}

echo "# sdm $commit ($SDM), $(nproc) cores, $(date -u +%FT%TZ), N=$N REPS=$REPS GDB_MAX=$GDB_MAX NICE=$NICE, results in $OUT" >&2
for j in $JOBS; do
  start_job "$j"
  await_job "$j"
  tools=(sdm gdb)
  [ "${j#py-}" = "$j" ] || tools=(sdm py-spy gdb)
  for rep in $(seq "$REPS"); do
    # Rotate the order so that drift during the sitting hits every tool alike.
    for k in $(seq 0 $((${#tools[@]} - 1))); do
      tool=${tools[$(((k + rep) % ${#tools[@]}))]}
      case "$tool" in
        sdm) run_sdm "$j" "$rep" ;;
        py-spy) run_each "$j" py-spy "$rep" "$PYSPY_MAX" ;;
        gdb) run_each "$j" gdb "$rep" "$GDB_MAX" ;;
      esac
      echo "# $j rep $rep $tool: $(tail -1 "$OUT")" >&2
    done
  done
  stop_job
done
python3 bench/attach_bt.py table "$OUT"
# A smoke run fails when any of its runs did.
if [ "$MODE" = smoke ] && grep -q '"failed"' "$OUT"; then exit 1; fi
