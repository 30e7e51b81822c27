#!/usr/bin/env bash
# Writes sdm/hot-symbols.txt: the functions a daemon runs on every wake-up, hottest first,
# which sdm/build.rs has the linker lay out together at the start of the text (see there
# and BENCHMARKS.md, "Per-hop cost, seventh pass"), or checks a binary against it.
#
# Usage: bench/hot-symbols.sh            regenerate the list (needs valgrind, python3)
#        bench/hot-symbols.sh --check [BIN]
#                                        check that BIN (target/release/sdm) has at least
#                                        90% of the listed functions, laid out in the listed
#                                        order, back to back; exits 1 if not (run by CI)
#
# The list comes from callgrind over a 4-server tree (`sdm-bench rtt` and `throughput`),
# each run short and long: a function whose cost grows with the run is on the per-frame
# path; what start-up and shut-down run is in both and cancels out. The names are the
# release build's mangled symbols. They keep from one source change to the next, but not
# across a new toolchain, a changed Cargo.lock or another profile: regenerate then (a
# stale list only costs the layout; the check says when).
set -euo pipefail
cd "$(dirname "$0")/.."
LIST=sdm/hot-symbols.txt

if [ "${1:-}" = --check ]; then
  BIN=${2:-${CARGO_TARGET_DIR:-target}/release/sdm}
  nm -S --defined-only "$BIN" | python3 -c '
import sys
listed = [l.split("#")[0].strip() for l in open(sys.argv[1])]
listed = [n for n in listed if n]
syms = {}
for line in sys.stdin:
    p = line.split()
    if len(p) == 4 and p[2] in "tT":
        syms[p[3]] = (int(p[0], 16), int(p[1], 16))
here = [(n, *syms[n]) for n in listed if n in syms]
print(f"hot-symbols: {len(here)} of {len(listed)} listed functions in {sys.argv[2]}")
bad = 0
if not here or len(here) < 0.9 * len(listed):
    print("hot-symbols: the list is stale (another toolchain, Cargo.lock or profile?): "
          "regenerate it with bench/hot-symbols.sh", file=sys.stderr)
    bad = 1
for (n0, a0, s0), (n1, a1, _) in zip(here, here[1:]):
    if not a0 + s0 <= a1 < a0 + s0 + 64:
        print(f"hot-symbols: {n1} at {a1:#x} does not follow {n0} ({a0:#x}+{s0:#x}): "
              "the linker did not take the list (see sdm/build.rs)", file=sys.stderr)
        bad = 1
        break
if not bad:
    span = here[-1][1] + here[-1][2] - here[0][1]
    print(f"hot-symbols: laid out in order, {span} bytes from {here[0][1]:#x}")
sys.exit(bad)
' "$LIST" "$BIN"
  exit
fi

# Every `sdm server` under callgrind, each run's files in its own $SDM_CG_DIR.
. bench/valgrind-servers.sh hot-symbols.sh -q --tool=callgrind --demangle=no \
  '--callgrind-out-file=$SDM_CG_DIR/cg.%p.out'
SHORT=200
LONG=1000
runs=()
for bench in "rtt --iters" "throughput --waves"; do
  for len in $SHORT $LONG; do
    dir="$D/${bench%% *}.$len"
    mkdir -p "$dir"
    # shellcheck disable=SC2086
    SDM_CG_DIR=$dir SDM_BIN=$D/sdm "$B/sdm-bench" $bench $len -n 4 --timeout 600 > "$dir/bench.json"
    runs+=("$dir")
  done
done
python3 - "$B/sdm" "$LIST" $((LONG - SHORT)) "${runs[@]}" <<'PY'
import collections, glob, re, subprocess, sys

binary, out, extra, dirs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]

def cost(path):
    """Self cost per function of the sdm binary in one callgrind file (read directly:
    callgrind_annotate leaves the object off some lines)."""
    names = {"ob": {}, "fn": {}}
    ob = fn = None
    after_call = False
    d = collections.Counter()
    for line in open(path):
        key, _, rest = line.rstrip("\n").partition("=")
        if key in ("ob", "fn", "cob", "cfn"):
            kind = key[-2:]
            m = re.match(r"\((\d+)\)(?: (.*))?", rest)
            if m:
                if m.group(2) is not None:
                    names[kind][m.group(1)] = m.group(2)
                value = names[kind].get(m.group(1))
            else:
                value = rest
            if key == "ob":
                ob = value
            elif key == "fn":
                fn = value
            continue
        if key == "calls":
            after_call = True
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            if after_call:
                after_call = False  # the callee's inclusive cost, not this function's
            elif ob == binary and fn:
                d[fn] += int(line.split()[1])
    return d

def files(d):
    # By pid: the supervisor first, then the servers in id order.
    return sorted(glob.glob(f"{d}/cg.*.out"), key=lambda f: int(f.split(".")[-2]))

growth = collections.Counter()
for short, long in zip(dirs[::2], dirs[1::2]):
    for a, b in zip(files(short), files(long)):
        ca, cb = cost(a), cost(b)
        for name, v in cb.items():
            if v > ca.get(name, 0):
                growth[name] += v - ca.get(name, 0)
# Instructions per extra wave, summed over the servers and the two benchmarks; below one, a
# function is not on the per-frame path (only timing moved it between the two runs). Rounded,
# so that a second run writes the same list.
names = [n for n, _ in sorted(((n, round(v / extra)) for n, v in growth.items()
                               if v >= extra), key=lambda x: (-x[1], x[0]))]
if not names:
    sys.exit("hot-symbols.sh: callgrind found no function of the sdm binary")
with open(out, "w") as f:
    f.write("# Written by bench/hot-symbols.sh: the functions a daemon runs per frame, hottest\n"
            "# first, as mangled in the release build. sdm/build.rs hands this to the linker.\n")
    f.writelines(n + "\n" for n in names)
print(f"hot-symbols.sh: {len(names)} functions written to {out}")
PY
