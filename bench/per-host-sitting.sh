#!/usr/bin/env bash
# Every figure of BENCHMARKS.md's "One server per host" section in one sitting, this build
# against an older one (e.g. one server per rank), one script after the other, each script's
# table and log in OUTDIR:
#   attach-512.md   attach + merged bt + detach, 512-rank srun job   (attach-bench.sh)
#   attach-1024.md  the same, 1024-rank mpirun job                   (attach-bench.sh)
#   print-256.md    first print (and print, next) over 256 ranks    (debugger-bench.sh)
#   startup.md      start-up of 1024 ranks                           (run-macro.sh)
#   hosts.md        rtt and throughput by layout, against the relay  (hosts-bench.sh)
#   pss.md          memory of the tool at 64 ranks                   (pss.sh)
#   sim.txt         the simulator, 10^6 ranks on 10^4 and 10^6 servers
#
# Usage: bench/per-host-sitting.sh OLD_DIR [OUTDIR]
#   OLD_DIR: the older build's release `sdm`, `sdm-bench` and `sdm-debug-bench`
# Environment: PARTS (the outputs' names to make, e.g. "attach-512 pss"; default all).
# Needs root, Slurm and Open MPI (deploy/ci-setup.sh), gdb. Takes 30-60 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/per-host-sitting.sh OLD_DIR [OUTDIR]}
OUT=${2:-target/per-host-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
say() { echo "# $(date -u +%T) $*" | tee -a "$OUT/sitting.log" >&2; }

cargo build --release -p sdm -p sdm-bench >&2
say "sdm $(git rev-parse --short HEAD), old build $OLD"
PARTS=${PARTS:-"attach-512 attach-1024 print-256 startup hosts pss sim"}
step() {
  local name=$1
  shift
  [[ " $PARTS " == *" ${name%.*} "* ]] || return 0
  say "$name: $*"
  "$@" > "$OUT/$name" 2> "$OUT/${name%.*}.log" || say "$name FAILED (see ${name%.*}.log)"
}
step attach-512.md env SIZES=512 REPS=3 bench/attach-bench.sh --old-bin "$OLD/sdm"
step attach-1024.md env LAUNCHER=mpirun SIZES=1024 REPS=2 bench/attach-bench.sh --old-bin "$OLD/sdm"
step print-256.md env SIZES=256 REPS=2 K=5 bench/debugger-bench.sh --old-bin "$OLD"
step startup.md env BENCHES=startup SIZES=1024 REPS=3 bench/run-macro.sh --old-bin "$OLD" "$OUT/startup.jsonl"
step hosts.md bench/hosts-bench.sh "$OUT/hosts.jsonl"
step pss.md env SIZES=64 REPS=3 bench/pss.sh --old-bin "$OLD/sdm"
sim=${CARGO_TARGET_DIR:-target}/release/sdm-sim
step sim.txt sh -c "$sim --servers 10000 --ranks 1000000; $sim --servers 1000000"
say done
