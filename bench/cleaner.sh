#!/usr/bin/env bash
# The DualFS cleaner benchmark (not part of the test suite): copy a directory tree of several
# thousand files onto a mounted DualFS, delete 7/8 of its regular files, repeat 20 times, on a
# metadata device small enough that the log would run out without cleaning. Runs once with the
# dualfs-cleaner daemon attached and once with the mount's in-process cleaning only, and prints
# side by side: total time, bytes the cleaner wrote, segments cleaned, write cost (bytes
# written by cleaning / bytes freed), final utilization, and the checker's verdict.
# See examples/cleaner.rs.
#
#   bench/cleaner.sh                          # 4,000 generated files, 20 rounds, 16 MiB log
#   bench/cleaner.sh --source /usr/include    # copy a real tree instead
#   bench/cleaner.sh --files 8000 --meta 24   # bigger tree, bigger log
#   bench/cleaner.sh --only daemon            # one of the two runs
#   bench/cleaner.sh --policy greedy          # victims by utilization only (default cost-benefit)
#
# Needs root and /dev/fuse. Sparse images go to $TMPDIR (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -p dualfs --bin dualfs --example cleaner
cargo build --release -p dualfs-cleaner
exec "$CARGO_TARGET_DIR/release/examples/cleaner" "$@"
