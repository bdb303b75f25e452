#!/usr/bin/env bash
# Recovery time against the checkpoint interval (not part of the test suite): for each interval
# (default 5, 15, 30 s) a metadata-heavy workload runs on a fresh DualFS until a checkpoint is
# almost due, the power is cut in-process, and the mount that rolls the log forward is timed
# (images evicted from the page cache first). Prints interval, log replayed and recovery time
# side by side. See examples/recovery.rs for the details and options.
#
#   bench/recovery.sh                          # intervals 5, 15, 30 s (about 2 minutes)
#   bench/recovery.sh --intervals 2,4,8        # quicker
#   bench/recovery.sh --checkpoint-segments 32 # the mount program's segment trigger too
#
# Sparse images (4 GiB + 1 GiB) go to $TMPDIR (or /tmp), or --dir DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --example recovery
exec "$CARGO_TARGET_DIR/release/examples/recovery" "$@"
