#!/usr/bin/env bash
# Instructions each daemon runs per wave of `sdm-bench throughput -n 4`, under callgrind:
# the difference of a SHORT-wave and a LONG-wave run, divided by LONG - SHORT, so start-up
# and shut-down cancel out. Nearly deterministic (how many waves one wake-up takes varies a
# little), which a timed benchmark is not: the figure to compare a change against.
#
# Usage: bench/instructions-per-wave.sh [DIR [SHORT LONG]]
#   DIR    a directory holding a release `sdm` whose daemons to measure (default: this
#          checkout's release build, made first); e.g. an older build, for before/after.
#          The front-end is always this checkout's `sdm-bench` (it is not measured).
#   SHORT LONG   waves of the two runs (1000 5000)
# More `sdm-bench throughput` arguments may be given in $THROUGHPUT_ARGS (e.g.
# `--service sdm`).
# Prints one line per daemon, in pid order: the supervisor (0: it only forks), then the
# servers 0-3 (forked in id order). In the binomial tree over the master and 4 servers,
# server 1 is the one interior server (server 2 is below it) and the others are leaves.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC2016
. bench/valgrind-servers.sh instructions-per-wave.sh -q --tool=callgrind \
  '--callgrind-out-file=$SDM_CG_DIR/cg.%p.out'
if [ -n "${1:-}" ]; then
  valgrind_wrapper "$D/sdm" "$(realpath "$1")/sdm" server -q --tool=callgrind \
    '--callgrind-out-file=$SDM_CG_DIR/cg.%p.out'
fi
SHORT=${2:-1000}
LONG=${3:-5000}
for len in "$SHORT" "$LONG"; do
  mkdir -p "$D/$len"
  # shellcheck disable=SC2086
  SDM_CG_DIR=$D/$len SDM_BIN=$D/sdm "$B/sdm-bench" throughput -n 4 --waves "$len" \
    --timeout 600 ${THROUGHPUT_ARGS:-} > "$D/$len/bench.json"
done
python3 - "$D/$SHORT" "$D/$LONG" $((LONG - SHORT)) <<'PY'
import glob, re, sys

def totals(d):
    """Instructions of each daemon's run, in pid order."""
    out = []
    for f in sorted(glob.glob(f"{d}/cg.*.out"), key=lambda f: int(f.split(".")[-2])):
        m = re.search(r"^(?:summary|totals): (\d+)", open(f).read(), re.M)
        out.append(int(m.group(1)))
    return out

short, long, waves = totals(sys.argv[1]), totals(sys.argv[2]), int(sys.argv[3])
if len(short) != len(long) or not short:
    sys.exit("instructions-per-wave.sh: the two runs have different daemons")
names = ["supervisor"] + [f"server {k}" + (" (interior)" if k == 1 else " (leaf)")
                         for k in range(len(short) - 1)]
for name, a, b in zip(names, short, long):
    print(f"{name}: {(b - a) / waves:.0f} instructions per wave")
PY
