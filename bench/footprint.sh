#!/usr/bin/env bash
# What one wake-up of a daemon touches, sdm against the minimal relay: instructions, and
# the distinct 64-byte cache lines and 4 KiB pages of data and of code, per wake-up, at
# a leaf (and at sdm's one interior server). With a thousand daemons on two cores every
# wake-up finds its process's lines evicted, so lines touched per wake-up cost time even
# where instructions do not.
#
# Usage: bench/footprint.sh [ITERS]   (needs valgrind and python3; about a minute)
# Runs `sdm-bench rtt -n 4 --iters ITERS` (300) twice, with every server (and then every
# relay) under valgrind's lackey tool, which logs each instruction, each memory access and
# each system call. A wake-up is what lies between two waits: two `epoll_wait` calls for
# sdm (tokio parks there), two `recvfrom` calls for a relay leaf (it blocks there). The
# median over the middle third of the wake-ups is printed (the first and last third are
# start-up and shut-down).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-300}
# Every `sdm server`, and every relay, under lackey.
LACKEY="--tool=lackey --trace-mem=yes --trace-syscalls=yes"
# shellcheck disable=SC2086
. bench/valgrind-servers.sh footprint.sh $LACKEY --log-file=@D@/sdm.%p.log
# shellcheck disable=SC2086
valgrind_wrapper "$D/relay" "$B/sdm-relay" "" $LACKEY --log-file=@D@/relay.%p.log
SDM_BIN=$D/sdm "$B/sdm-bench" rtt -n 4 --iters "$ITERS" --timeout 600 > "$D/sdm.json"
SDM_RELAY_BIN=$D/relay "$B/sdm-bench" rtt -n 4 --iters "$ITERS" --timeout 600 --baseline > "$D/relay.json"

# By pid: sdm's supervisor then servers 0-3; relays at positions 0-4. In the binomial tree
# over the master (position 0) and servers 0-3 (positions 1-4), position 2 (server 1) is
# the one interior server, with position 3 (server 2) below it, a leaf.
sdm_logs=$(ls "$D"/sdm.*.log | sort -t. -k2 -n)
relay_logs=$(ls "$D"/relay.*.log | sort -t. -k2 -n)
python3 - "$(echo "$sdm_logs" | sed -n 4p)" "$(echo "$sdm_logs" | sed -n 3p)" \
  "$(echo "$relay_logs" | sed -n 4p)" <<'EOF'
import statistics, sys

def wakes(path, mark):
    """Per wake-up: instructions, data lines, code lines, data pages, code pages."""
    out, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("SYSCALL"):
                if mark in line:
                    if cur is not None:
                        out.append(cur)
                    cur = [0, set(), set(), set(), set()]
                continue
            if cur is None:
                continue
            if line.startswith("I "):
                a = int(line[3:].split(",")[0], 16)
                cur[0] += 1
                cur[2].add(a >> 6)
                cur[4].add(a >> 12)
            elif len(line) > 3 and line[0] == " " and line[1] in "LSM":
                a, size = line[3:].split(",")
                a, size = int(a, 16), int(size)
                cur[1].update(range(a >> 6, ((a + size - 1) >> 6) + 1))
                cur[3].add(a >> 12)
    mid = out[len(out) // 3 : 2 * len(out) // 3]
    if not mid:
        sys.exit(f"footprint.sh: no wake-ups found in {path}")
    cols = [[w[0] for w in mid]] + [[len(w[k]) for w in mid] for k in range(1, 5)]
    return len(mid), [statistics.median(c) for c in cols]

rows = [
    ("sdm leaf (server 2)", sys.argv[1], "sys_epoll_wait ("),
    ("sdm interior (server 1)", sys.argv[2], "sys_epoll_wait ("),
    ("relay leaf (position 3)", sys.argv[3], "sys_recvfrom ("),
]
print("| daemon | wake-ups | instructions | data lines | code lines | data pages | code pages |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name, path, mark in rows:
    n, m = wakes(path, mark)
    print(f"| {name} | {n} | " + " | ".join(f"{v:.0f}" for v in m) + " |")
EOF
