#!/usr/bin/env bash
# Run every fuzz target for SECONDS seconds (default 10): the decoders of every on-disk
# structure, and the checker plus mount over damaged images.
#
#   fuzz/run.sh            # 10 s per target
#   fuzz/run.sh 60         # a minute each
#   fuzz/run.sh 5 node     # only the targets named
#
# cargo-fuzz needs nightly compiler flags (-Zsanitizer=address): on stable Rust they are
# allowed with RUSTC_BOOTSTRAP=1, which this script sets. It installs cargo-fuzz if missing.
# Crashes are kept in fuzz/artifacts/<target>/; reproduce one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")"
SECONDS_EACH=${1:-10}
shift || true
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_FUZZ_TARGET_DIR:-$PWD/target}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <(cargo fuzz list | grep -v -x make-seeds)
fi
cargo fuzz build --release
if [ ! -d corpus ]; then
    # Starting inputs cut from a real image (the seed maker is built with the targets).
    HOST=$(rustc -vV | sed -n 's/^host: //p')
    "$CARGO_TARGET_DIR/$HOST/release/make-seeds"
fi
failed=()
for t in "${TARGETS[@]}"; do
    echo "== $t: ${SECONDS_EACH}s"
    mkdir -p "corpus/$t"
    if ! cargo fuzz run --release "$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
        2>&1 | tail -12; then
        failed+=("$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz targets that failed: ${failed[*]}" >&2
    exit 1
fi
echo "all ${#TARGETS[@]} fuzz targets ran ${SECONDS_EACH}s without a failure"
