#!/usr/bin/env bash
# Reproduces the "Macro benchmarks (issue 3)" table of BENCHMARKS.md: sdm against the
# minimal-relay baseline, start-up / rtt / throughput, for each size, REPS times, sdm and
# baseline interleaved so drift on the machine hits both alike. Prints the table (medians).
#
# Usage: bench/run-macro.sh [OUT.jsonl]
# Environment: SIZES ("64 256 1024"), REPS (3), ITERS (200), WAVES (500), WINDOW (16).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"64 256 1024"}
REPS=${REPS:-3}
ITERS=${ITERS:-200}
WAVES=${WAVES:-500}
WINDOW=${WINDOW:-16}
OUT=${1:-target/macro-$(date -u +%Y%m%dT%H%M%SZ).jsonl}

# 1024 servers: the front-end holds a pipe per server; raise the soft limit to the hard one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cargo build --release -p sdm -p sdm-bench
B=${CARGO_TARGET_DIR:-target}/release/sdm-bench
: > "$OUT"
echo "# sdm $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, ulimit -n $(ulimit -n), results in $OUT" >&2

for n in $SIZES; do
  for rep in $(seq "$REPS"); do
    for flag in "" --baseline; do
      echo "# n=$n rep=$rep ${flag:-sdm}" >&2
      "$B" startup -n "$n" $flag | tee -a "$OUT"
      "$B" rtt -n "$n" --iters "$ITERS" $flag | tee -a "$OUT"
      "$B" throughput -n "$n" --waves "$WAVES" --window "$WINDOW" $flag | tee -a "$OUT"
    done
  done
done

"$B" table "$OUT"
