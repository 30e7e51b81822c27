#!/usr/bin/env bash
# Fuzz sdm's decoders for a bounded time on the stable toolchain; prints executions per target.
#
#   fuzz/run.sh TARGET|all SECONDS        e.g. fuzz/run.sh all 20 (CI), fuzz/run.sh frame 300
#
# Engine (SDM_FUZZ_ENGINE): `libfuzzer` (default) builds the fuzz_targets/ binaries with
# libFuzzer (compiled from the libfuzzer-sys crate's source) and rustc's stable sancov
# coverage flags, no sanitizer, into target/fuzz; `random` runs the coverage-less `sdm-fuzz`
# driver instead. Corpora persist in target/fuzz/corpus/TARGET; crashes land in
# target/fuzz/artifacts/TARGET. Exit status is non-zero if any target crashed or hung.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz/run.sh TARGET|all SECONDS}
secs=${2:?usage: fuzz/run.sh TARGET|all SECONDS}
engine=${SDM_FUZZ_ENGINE:-libfuzzer}
out=target/fuzz
host=$(rustc -vV | sed -n 's/^host: //p')

# The plain driver lists the targets and writes their seeds.
cargo build --quiet --release -p sdm-fuzz --bin sdm-fuzz
driver=target/release/sdm-fuzz
if [ "$target" = all ]; then
  targets=$("$driver" list)
else
  targets=$target
fi

if [ "$engine" = libfuzzer ]; then
  # The flags cargo-fuzz passes with `--sanitizer none`; all are stable. --target keeps them
  # off build scripts and proc macros.
  export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    -Cdebug-assertions -Coverflow-checks"
  bins=()
  for t in $targets; do bins+=(--bin "fuzz_$t"); done
  CARGO_TARGET_DIR=$out/libfuzzer cargo build --quiet --release -p sdm-fuzz \
    --features libfuzzer --target "$host" "${bins[@]}"
  unset RUSTFLAGS
fi

status=0
summary=()
for t in $targets; do
  corpus=$out/corpus/$t
  artifacts=$out/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  "$driver" seeds "$t" "$corpus"
  log=$out/$engine-$t.log
  if [ "$engine" = libfuzzer ]; then
    set +e
    "$out/libfuzzer/$host/release/fuzz_$t" "$corpus" \
      -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    line="$t: ${execs:-?} executions in ${secs} s (libfuzzer, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l))"
  else
    set +e
    (cd "$artifacts" && "$OLDPWD/$driver" run "$t" "$secs" "$OLDPWD/$corpus") >"$log" 2>&1
    rc=$?
    set -e
    line=$(tail -1 "$log")
  fi
  if [ "$rc" -ne 0 ]; then
    status=1
    line="$line FAILED (exit $rc): see $log and $artifacts"
    tail -40 "$log" >&2
  fi
  echo "fuzz $line"
  summary+=("$line")
done
echo "fuzz summary ($engine, $secs s per target):"
printf '  %s\n' "${summary[@]}"
exit $status
