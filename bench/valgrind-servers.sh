# Sourced by bench/footprint.sh and bench/hot-symbols.sh: builds the release `sdm` and
# `sdm-bench`, makes a scratch directory $D (removed on exit) and writes $D/sdm, a stand-in
# for `sdm` that runs every `sdm server` (the local launcher's supervisor and the copies it
# forks) under `valgrind "$@"` and anything else as is. Sets B, the release directory.
# In the valgrind arguments, @D@ stands for $D.
# Usage: . bench/valgrind-servers.sh NAME VALGRIND-ARGS...   (NAME: the script, for errors)
command -v valgrind >/dev/null || { echo "$1: needs valgrind" >&2; exit 1; }
shift
cargo build --release -p sdm -p sdm-bench
B=$(realpath "${CARGO_TARGET_DIR:-target}/release")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cat > "$D/sdm" <<EOF
#!/bin/sh
if [ "\$1" = server ]; then
  exec valgrind ${*//@D@/$D} $B/sdm "\$@"
fi
exec $B/sdm "\$@"
EOF
chmod +x "$D/sdm"
