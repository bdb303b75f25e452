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
#   bench/cleaner.sh --out DIR                # also DIR/cleaner.csv and DIR/cleaner.png
#
# Options: --files N, --rounds N, --meta MIB, --data MIB, --source DIR, --policy
# cost-benefit|greedy, --only daemon|inprocess, --out DIR.
#
# Needs root and /dev/fuse. Sparse images go to $TMPDIR (or /tmp).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_wrapper_args "$@"
cd "$BENCH_REPO"
cargo build --release -p dualfs --bin dualfs --example cleaner
cargo build --release -p dualfs-cleaner
bench_out_init "$BENCH_OUT_DIR" cleaner
csv=()
[ -n "$BENCH_CSV" ] && csv=(--csv "$BENCH_OUT/.cleaner.rows")
rc=0
"$CARGO_TARGET_DIR/release/examples/cleaner" "${BENCH_ARGS[@]}" "${csv[@]}" || rc=$?
bench_import_csv "$BENCH_OUT/.cleaner.rows"
bench_chart seconds "Cleaner benchmark: the same workload with the cleaner daemon and with in-process cleaning" time
exit $rc
