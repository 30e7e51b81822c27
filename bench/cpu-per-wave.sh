#!/usr/bin/env bash
# User and system CPU time per daemon per wave of `sdm-bench throughput`, from `perf stat`
# over all its processes: the difference of a 1000-wave and a 5000-wave run, divided by
# 4000 waves and N + 1 daemons, so start-up and shut-down cancel out. Builds run
# interleaved, REPS times each, so drift on the machine hits all alike; compare within one
# invocation.
#
# Usage: bench/cpu-per-wave.sh [-n N] [-r REPS] [NAME=DIR[:ARGS]...]
#   -n N      servers (256)          -r REPS   rounds (3)
#   NAME=DIR[:ARGS]   a build to measure: DIR holds `sdm` and `sdm-bench` (and `sdm-relay`
#             for `--baseline`), ARGS are more `sdm-bench throughput` arguments. Default:
#             this checkout's release build as `sdm`, and its relay as `relay`
#             (`relay=target/release:--baseline`).
set -euo pipefail
cd "$(dirname "$0")/.."
N=256
REPS=3
while getopts n:r: opt; do
  case $opt in
    n) N=$OPTARG ;;
    r) REPS=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
command -v perf >/dev/null || { echo "cpu-per-wave.sh: needs perf" >&2; exit 1; }
if [ $# -eq 0 ]; then
  cargo build --release -p sdm -p sdm-bench
  R=${CARGO_TARGET_DIR:-target}/release
  set -- "sdm=$R" "relay=$R:--baseline"
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for _ in $(seq "$REPS"); do
  for spec in "$@"; do
    name=${spec%%=*}
    rest=${spec#*=}
    dir=${rest%%:*}
    extra=()
    if [ "$rest" != "$dir" ]; then
      read -r -a extra <<<"${rest#*:}"
    fi
    for waves in 1000 5000; do
      SDM_BIN=$dir/sdm perf stat -e user_time,system_time -x, -o "$T/$waves.txt" -- \
        "$dir/sdm-bench" throughput -n "$N" --waves "$waves" "${extra[@]}" > /dev/null
    done
    python3 - "$T" "$name" "$N" <<'PY'
import sys

def load(path):
    """perf stat's CSV: value, unit, event, ... (times in nanoseconds)."""
    out = {}
    for line in open(path):
        p = line.strip().split(",")
        if len(p) > 3 and p[0].replace(".", "").isdigit():
            out[p[2].split(":")[0]] = float(p[0])
    return out

t, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
a, b = load(f"{t}/1000.txt"), load(f"{t}/5000.txt")
per = {k: (b[k] - a[k]) / 4000 / (n + 1) / 1000 for k in ("user_time", "system_time")}
print(f"{name}: user {per['user_time']:.2f} us, system {per['system_time']:.2f} us, "
      f"total {per['user_time'] + per['system_time']:.2f} us per daemon per wave (n={n})")
PY
  done
done
