#!/usr/bin/env bash
# SVG plots of round trip, throughput and start-up against the number of ranks, one line per
# system, from the JSON lines of bench/run-macro.sh and bench/hosts-bench.sh (sdm-plot).
# FILE.jsonl gives OUT/FILE-rtt.svg, OUT/FILE-throughput.svg and OUT/FILE-startup.svg.
#
# Usage: bench/plot.sh [FILE.jsonl...]   (default: bench/results/macro-*.jsonl and
#                                        bench/results/hosts-*.jsonl, the committed sittings)
# Environment: OUT (bench/plots).
set -euo pipefail
files=()
for f in "$@"; do files+=("$(realpath -m -- "$f")"); done  # as given, before the cd
cd "$(dirname "$0")/.."
shopt -s nullglob
[ ${#files[@]} -gt 0 ] || files=(bench/results/macro-*.jsonl bench/results/hosts-*.jsonl)
[ ${#files[@]} -gt 0 ] || { echo "plot.sh: no results files given or in bench/results" >&2; exit 1; }
cargo build -q -p sdm-bench --bin sdm-plot
"${CARGO_TARGET_DIR:-target}/debug/sdm-plot" --out "${OUT:-bench/plots}" "${files[@]}"
