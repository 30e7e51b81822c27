#!/usr/bin/env bash
# The macro benchmarks of BENCHMARKS.md: sdm against the minimal-relay baseline, start-up /
# rtt / throughput / CPU per daemon per wave, for each size, REPS times, the systems
# interleaved so drift on the machine hits all alike. Prints the table (medians, min-max in
# brackets); `bench/plot.sh OUT.jsonl` draws it.
#
# Usage: bench/run-macro.sh [--old-bin DIR] [OUT.jsonl]
#   --old-bin DIR  also runs an older build (DIR holds its release `sdm`, `sdm-bench` and
#                  `sdm-relay`, e.g. from `git worktree add /tmp/old OLD && cargo build
#                  --release -p sdm -p sdm-bench` there), as system `sdm-old`: before and
#                  after in one sitting.
# Environment: SIZES ("64 256 1024"), REPS (3), BENCHES ("startup rtt throughput": which to
# run), SDM_ARGS (extra sdm-bench options for the sdm runs, e.g. `--ranks-per-server 1`),
# OLD_ARGS (the same for the old build; SDM_ARGS unless set), ITERS (200), WINDOW (16),
# WAVES (by size: 2048000 / n, at least 2000, so that each throughput run lasts seconds and
# its CPU per wave is steady; a number fixes it for every size).
set -euo pipefail
cd "$(dirname "$0")/.."

OLD=
if [ "${1:-}" = --old-bin ]; then
  OLD=${2:?--old-bin needs a directory}
  shift 2
  for b in sdm sdm-bench; do
    [ -x "$OLD/$b" ] || { echo "run-macro.sh: no $b in $OLD" >&2; exit 1; }
  done
fi
SIZES=${SIZES:-"64 256 1024"}
REPS=${REPS:-3}
BENCHES=${BENCHES:-"startup rtt throughput"}
SDM_ARGS=${SDM_ARGS:-}
OLD_ARGS=${OLD_ARGS-$SDM_ARGS}
ITERS=${ITERS:-200}
WAVES=${WAVES:-}
WINDOW=${WINDOW:-16}
OUT=${1:-target/macro-$(date -u +%Y%m%dT%H%M%SZ).jsonl}

# 1024 servers: the front-end holds a pipe per server; raise the soft limit to the hard one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cargo build --release -p sdm -p sdm-bench
B=${CARGO_TARGET_DIR:-target}/release/sdm-bench
: > "$OUT"
echo "# sdm $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, ulimit -n $(ulimit -n), old build: ${OLD:-none}, results in $OUT" >&2

# One system's three benchmarks at size $1; $2: sdm-bench binary; $3: extra flag; $4: label.
run() {
  local n=$1 bin=$2 flag=$3 label=$4
  local waves=${WAVES:-$((2048000 / n > 2000 ? 2048000 / n : 2000))}
  echo "# n=$n rep=$rep $label" >&2
  local b args
  for b in $BENCHES; do
    case "$b" in
      startup) args="startup -n $n" ;;
      rtt) args="rtt -n $n --iters $ITERS" ;;
      throughput) args="throughput -n $n --waves $waves --window $WINDOW" ;;
      *) echo "run-macro.sh: unknown bench $b in BENCHES" >&2; exit 1 ;;
    esac
    # shellcheck disable=SC2086
    if [ "$label" = sdm-old ]; then
      SDM_BIN="$OLD/sdm" "$bin" $args $flag | sed 's/"system":"sdm"/"system":"sdm-old"/' | tee -a "$OUT"
    else
      SDM_BIN="${B%/*}/sdm" "$bin" $args $flag | tee -a "$OUT"
    fi
  done
}

for n in $SIZES; do
  for rep in $(seq "$REPS"); do
    [ -n "$OLD" ] && run "$n" "$OLD/sdm-bench" "$OLD_ARGS" sdm-old
    run "$n" "$B" "$SDM_ARGS" sdm
    run "$n" "$B" --baseline baseline
  done
done

"$B" table "$OUT"
