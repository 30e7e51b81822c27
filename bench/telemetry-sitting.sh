#!/usr/bin/env bash
# The cost of the per-link telemetry (issue 40), in one sitting, against a build without it:
#  1. the round trip of an ordinary `ping` wave (`sdm-bench rtt`), both builds interleaved;
#  2. the daemons' CPU per ordinary wave (bench/cpu-per-wave.sh), both builds interleaved;
#  3. one telemetry wave itself: its round trip and the bytes of the records reaching the
#     front-end (`sdm top --tree --json`, `wave_us` and `wave_bytes`), this build only.
#
# Usage: bench/telemetry-sitting.sh BASE_DIR [N [REPS]]
#   BASE_DIR  release `sdm`, `sdm-bench` of the build to compare against (e.g. the parent
#             commit's), built beforehand; this checkout's release `sdm` is built first.
#             Both builds' daemons are driven by BASE_DIR's `sdm-bench` (the front-end is
#             not what is measured, and so it is the same for both).
#   N         servers (16)        REPS  rounds of each measurement (3)
# Prints JSON lines on stdout for steps 1 and 3 (one per measurement); step 2 and the
# builds print text on stderr (bench/cpu-per-wave.sh's table).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=$(realpath "$1")
N=${2:-16}
REPS=${3:-3}
cargo build --release -p sdm >&2
NEW=$(mktemp -d)
trap 'rm -rf "$NEW"' EXIT
cp "${CARGO_TARGET_DIR:-target}/release/sdm" "$NEW/"
cp "$BASE/sdm-bench" "$NEW/"
for _ in $(seq "$REPS"); do
  for spec in "base=$BASE" "telemetry=$NEW"; do
    name=${spec%%=*}
    dir=${spec#*=}
    SDM_BIN=$dir/sdm "$BASE/sdm-bench" rtt -n "$N" --ranks-per-server 1 --iters 500 \
      --warmup 50 |
      python3 -c 'import json,sys; v=json.loads(sys.stdin.read()); v["build"]=sys.argv[1]; print(json.dumps(v))' "$name"
  done
done
bench/cpu-per-wave.sh -n "$N" -r "$REPS" "base=$BASE:--ranks-per-server 1" \
  "telemetry=$NEW:--ranks-per-server 1" >&2
SDM_BIN=$NEW/sdm "$NEW/sdm" top --tree -n "$N" --ranks-per-server 1 --period 0.2 \
  --count 50 --json -- sleep 1000 |
  python3 -c '
import json, statistics, sys
def parse(l):
    try:
        return json.loads(l)
    except ValueError:
        return None
waves = [v for v in map(parse, sys.stdin) if isinstance(v, dict) and "links" in v]
us = [w["wave_us"] for w in waves[5:]]
b = [w["wave_bytes"] for w in waves[5:]]
print(json.dumps({"bench": "telemetry-wave", "servers": int(sys.argv[1]), "waves": len(us),
                  "p50_us": statistics.median(us), "min_us": min(us), "max_us": max(us),
                  "bytes_p50": statistics.median(b), "links": len(waves[-1]["links"])}))
' "$N"
