#!/usr/bin/env bash
# The one-directory benchmark (not part of the test suite): 1,000,000 empty files created in one
# directory of a mounted DualFS, stat'ed by name in random order, then listed; creates/s,
# lookups/s and the listing time are printed. See examples/bigdir.rs for the phases.
#
#   bench/bigdir.sh                 # DualFS, 1,000,000 files
#   bench/bigdir.sh --ext4          # and kernel ext4 on a loop device, side by side
#   bench/bigdir.sh --files 100000  # fewer files
#
# Needs root, /dev/fuse (and loop devices for --ext4). Sparse images go to $TMPDIR (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin dualfs --example bigdir
exec "$CARGO_TARGET_DIR/release/examples/bigdir" "$@"
