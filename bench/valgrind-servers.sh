# Sourced by bench/footprint.sh: builds the release `sdm` and
# `sdm-bench`, makes a scratch directory $D (removed on exit) and writes $D/sdm, a stand-in
# for `sdm` that runs every `sdm server` (the local launcher's supervisor and the copies it
# forks) under `valgrind "$@"` and anything else as is. Sets B, the release directory, and
# defines `valgrind_wrapper`. In the valgrind arguments, @D@ stands for $D.
# Usage: . bench/valgrind-servers.sh NAME VALGRIND-ARGS...   (NAME: the script, for errors)
command -v valgrind >/dev/null || { echo "$1: needs valgrind" >&2; exit 1; }
shift
cargo build --release -p sdm -p sdm-bench
B=$(realpath "${CARGO_TARGET_DIR:-target}/release")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT

# valgrind_wrapper OUT BIN WHEN VALGRIND-ARGS...: writes OUT, which runs BIN under valgrind
# when its first argument is WHEN (always if WHEN is empty), as is otherwise.
valgrind_wrapper() {
  local out=$1 bin=$2 when=$3
  shift 3
  cat > "$out" <<EOF
#!/bin/sh
if [ -z "$when" ] || [ "\$1" = "$when" ]; then
  exec valgrind ${*//@D@/$D} $bin "\$@"
fi
exec $bin "\$@"
EOF
  chmod +x "$out"
}
valgrind_wrapper "$D/sdm" "$B/sdm" server "$@"
