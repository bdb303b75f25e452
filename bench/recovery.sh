#!/usr/bin/env bash
# Recovery time against the checkpoint interval (not part of the test suite): for each interval
# (default 5, 15, 30 s) a metadata-heavy workload runs on a fresh DualFS until a checkpoint is
# almost due, the power is cut in-process, and the mount that rolls the log forward is timed
# (images evicted from the page cache first). Prints interval, log replayed and recovery time
# side by side. See examples/recovery.rs for the details.
#
#   bench/recovery.sh                          # intervals 5, 15, 30 s (about 2 minutes)
#   bench/recovery.sh --intervals 2,4,8        # quicker
#   bench/recovery.sh --checkpoint-segments 32 # the mount program's segment trigger too
#   bench/recovery.sh --out DIR                # also DIR/recovery.csv and DIR/recovery.png
#
# Options: --intervals LIST, --seconds N, --threads N (default 2), --rate OPS_PER_SECOND
# (default 20000), --fsync-every N (64), --flush SECONDS (1), --checkpoint-segments N,
# --dir DIR, --no-check, --out DIR.
#
# Sparse images (4 GiB + 1 GiB) go to $TMPDIR (or /tmp), or --dir DIR.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_wrapper_args "$@"
cd "$BENCH_REPO"
cargo build --release --example recovery
bench_out_init "$BENCH_OUT_DIR" recovery
csv=()
[ -n "$BENCH_CSV" ] && csv=(--csv "$BENCH_OUT/.recovery.rows")
"$CARGO_TARGET_DIR/release/examples/recovery" "${BENCH_ARGS[@]}" "${csv[@]}"
bench_import_csv "$BENCH_OUT/.recovery.rows"
bench_chart recovery_seconds "Recovery (mount after a power cut) against the checkpoint interval" "recovery time"
