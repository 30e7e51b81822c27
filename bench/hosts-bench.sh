#!/usr/bin/env bash
# Round trip and throughput by layout: N ranks (SIZES) served by 1, 4
# and 16 servers on this host (`--ranks-per-server N/S`), and by one server on each of four
# network-namespace hosts with their own sshd (`--launcher ssh`, tests/src/bin/sdm-hosts.rs),
# against the minimal relay with the same number of processes (S relays plus the root, as
# sdm's S servers plus the master). `sdm-bench rtt` (a `ping` to every rank, ITERS times
# after 20 warm-up) and `throughput` (waves of `value` summed in the tree, WINDOW in flight).
# The layouts alternate within each rep, so drift on the machine hits all alike. Prints a
# Markdown table of medians (JSON lines in OUT; `bench/plot.sh OUT` draws them).
#
# CPU per wave is not given: over ssh the servers are not this process's descendants.
# Usage: bench/hosts-bench.sh [OUT.jsonl]   (root: the namespace hosts need it)
# Environment: SIZES ("64 256 1024"), REPS (3), ITERS (200), WINDOW (16), WAVES (by size:
# 1024000 / n, at least 2000), NS (1: also the four namespace hosts; 0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"64 256 1024"}
REPS=${REPS:-3}
ITERS=${ITERS:-200}
WINDOW=${WINDOW:-16}
NS=${NS:-1}
OUT=${1:-target/hosts-$(date -u +%Y%m%dT%H%M%SZ).jsonl}
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cargo build --release -p sdm -p sdm-bench >&2
cargo build --release -p sdm-e2e --bin sdm-hosts >&2
dir=$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)  # absolute: the hosts run it over ssh
B=$dir/sdm-bench
export SDM_BIN=$dir/sdm
: > "$OUT"

hosts=
if [ "$NS" = 1 ]; then
  coproc HOSTS { "$dir/sdm-hosts" 4; }
  trap 'exec {HOSTS[1]}>&-; wait "$HOSTS_PID" 2>/dev/null || true' EXIT
  for _ in 1 2 3 4; do
    read -r -u "${HOSTS[0]}" h || { echo "hosts-bench.sh: sdm-hosts failed" >&2; exit 1; }
    hosts=${hosts:+$hosts,}$h
  done
fi
echo "# sdm $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $(date -u +%FT%TZ), REPS=$REPS, hosts: ${hosts:-none}, results in $OUT" >&2

# One run of both benchmarks; $1: layout label; the rest: sdm-bench's common options.
run() {
  local label=$1 n=$2
  shift 2
  local waves=${WAVES:-$((1024000 / n > 2000 ? 1024000 / n : 2000))}
  sdm() { "$B" "$@" | sed "s/^{/{\"layout\":\"$label\",/" | tee -a "$OUT" >/dev/null; }
  sdm rtt -n "$n" --iters "$ITERS" "$@"
  sdm throughput -n "$n" --waves "$waves" --window "$WINDOW" "$@"
}

for n in $SIZES; do
  for rep in $(seq "$REPS"); do
    echo "# n=$n rep=$rep load: $(cut -d' ' -f1 /proc/loadavg)" >&2
    for s in 1 4 16; do
      [ "$s" -le "$n" ] || continue
      run "local:$s" "$n" --ranks-per-server $((n / s))
      run "relay:$s" "$s" --baseline
    done
    [ -n "$hosts" ] && run "ssh:4" "$n" --launcher ssh --hosts "$hosts"
  done
done

python3 - "$OUT" "$SIZES" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(src, bench, field, scale=1.0):
    v = [r[field] * scale for r in src if r["bench"] == bench]
    return statistics.median(v) if v else float("nan")
print("| ranks | servers | where | sdm rtt p50 (ms) | relay rtt p50 (ms) | sdm / relay "
      "| sdm waves/s | relay waves/s | sdm / relay |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for n in map(int, sys.argv[2].split()):
    for layout, s, where in [("local:1", 1, "this host"), ("local:4", 4, "this host"),
                             ("ssh:4", 4, "4 namespace hosts"), ("local:16", 16, "this host")]:
        mine = [r for r in rows if r["layout"] == layout and r["n"] == n]
        if not mine:
            continue
        # The relay of as many processes (its runs at every size: it serves no ranks).
        relay = [r for r in rows if r["layout"] == f"relay:{s}"]
        a, b = med(mine, "rtt", "p50_us", 1e-3), med(relay, "rtt", "p50_us", 1e-3)
        c, d = med(mine, "throughput", "waves_per_second"), med(relay, "throughput", "waves_per_second")
        print(f"| {n} | {s} | {where} | {a:.3f} | {b:.3f} | {a / b:.2f} | {c:.0f} | {d:.0f} | {c / d:.2f} |")
PY
