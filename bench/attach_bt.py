"""Helpers of bench/run-attach-bt.sh.

ranks LAUNCHER PROG N    the pids of the job's N ranks in rank order, one a line: the
                         processes below LAUNCHER running PROG, ranked by their environment
                         (OMPI_COMM_WORLD_RANK, PMIX_RANK or RANK)
check-classes N          whether `bt --classes` and `detach` on standard input account for
                         every rank 0..N-1 (exit status 1, saying what is missing, if not)
table FILE.jsonl         the Markdown table of a sitting: medians (min-max) per job and tool,
                         and each tool's median over sdm's
"""

import json
import os
import re
import statistics
import sys

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK")


def children():
    """Parent pid -> child pids, from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(d))
    return out


def ranks(launcher, prog, n):
    kids, todo, found = children(), [launcher], {}
    prog = os.path.realpath(prog)
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0") if a]
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(
                    e.decode(errors="replace").split("=", 1)
                    for e in f.read().split(b"\0")
                    if b"=" in e
                )
        except OSError:
            continue
        if not any(os.path.realpath(a) == prog for a in argv[:2]):
            continue
        rank = next((int(env[v]) for v in RANK_VARS if v in env), None)
        if rank is not None:
            found[rank] = pid
    if sorted(found) != list(range(n)):
        sys.exit(f"attach_bt.py: found ranks {sorted(found)} of {n} below {launcher}")
    for r in range(n):
        print(found[r])


def idset(text):
    """`0-3,7` -> {0, 1, 2, 3, 7}."""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def check_classes(n):
    text = sys.stdin.read()
    seen, detached = set(), set()
    for line in text.splitlines():
        m = re.match(r"\[([0-9,-]+)\] \(representative \d+\) ", line)
        if m:
            seen |= idset(m.group(1))
        m = re.fullmatch(r"\[([0-9,-]+)\] detached", line)
        if m:
            detached |= idset(m.group(1))
    want = set(range(n))
    if seen != want or detached != want:
        sys.exit(
            f"attach_bt.py: ranks in no class: {sorted(want - seen)[:20]}, "
            f"not detached: {sorted(want - detached)[:20]}"
        )


def table(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    jobs = list(dict.fromkeys(r["job"] for r in runs))
    print("| job | ranks | tool | runs | seconds, median (min-max) | / sdm |")
    print("| --- | --- | --- | --- | --- | --- |")
    for job in jobs:
        mine = [r for r in runs if r["job"] == job]
        tools = [t for t in ("sdm", "py-spy", "gdb") if any(r["tool"] == t for r in mine)]
        times = {t: [r["seconds"] for r in mine if r["tool"] == t and not r.get("failed")]
                 for t in tools}
        base = statistics.median(times["sdm"]) if times.get("sdm") else None
        for t in tools:
            done = [r for r in mine if r["tool"] == t and not r.get("failed")]
            failed = sum(1 for r in mine if r["tool"] == t and r.get("failed"))
            note = f", {failed} failed" if failed else ""
            if any(r.get("scaled") for r in done):
                note += f", scaled from {done[0]['timed_ranks']} ranks"
            if t == "sdm" and done:
                note += f", attach by {done[0]['attach']}"
            if not done:
                print(f"| {job} | {mine[0]['n']} | {t} | 0{note} | - | - |")
                continue
            ts = times[t]
            med = statistics.median(ts)
            ratio = f"{med / base:.1f}" if base else "-"
            print(f"| {job} | {mine[0]['n']} | {t} | {len(ts)}{note} | "
                  f"{med:.2f} ({min(ts):.2f}-{max(ts):.2f}) | {ratio} |")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "ranks":
        ranks(int(args[0]), args[1], int(args[2]))
    elif cmd == "check-classes":
        check_classes(int(args[0]))
    elif cmd == "table":
        table(args[0])
    else:
        sys.exit(f"attach_bt.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
