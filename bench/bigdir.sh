#!/usr/bin/env bash
# The one-directory benchmark (not part of the test suite): 1,000,000 empty files created in one
# directory of a mounted DualFS, stat'ed by name in random order, then listed; creates/s,
# lookups/s and the listing time are printed. See examples/bigdir.rs for the phases.
#
#   bench/bigdir.sh                 # DualFS, 1,000,000 files
#   bench/bigdir.sh --ext4          # and kernel ext4 on a loop device, side by side
#   bench/bigdir.sh --files 100000  # fewer files
#   bench/bigdir.sh --out DIR       # also DIR/bigdir.csv and DIR/bigdir.png (time per phase)
#
# Options: --files N, --ext4, --no-dualfs (with --ext4: ext4 only), --out DIR.
#
# Needs root, /dev/fuse (and loop devices for --ext4). Sparse images go to $TMPDIR (or /tmp).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_wrapper_args "$@"
cd "$BENCH_REPO"
cargo build --release --bin dualfs --example bigdir
bench_out_init "$BENCH_OUT_DIR" bigdir
csv=()
[ -n "$BENCH_CSV" ] && csv=(--csv "$BENCH_OUT/.bigdir.rows")
"$CARGO_TARGET_DIR/release/examples/bigdir" "${BENCH_ARGS[@]}" "${csv[@]}"
bench_import_csv "$BENCH_OUT/.bigdir.rows"
bench_chart seconds "One directory: create, stat (cold, warm), list and unmount" time
