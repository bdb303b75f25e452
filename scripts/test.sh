#!/usr/bin/env bash
# The whole test suite, as CI runs it (as root: tests mount file systems, use loop devices).
#   1. every unit, integration, FUSE, crash-state and hostile-image test;
#   2. each cargo-fuzz target for a few seconds (fuzz/run.sh; cargo-fuzz on stable Rust via
#      RUSTC_BOOTSTRAP=1, installed if missing). The seeded hostile-image test in step 1 is
#      the deterministic part; this catches what a short random run finds.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release --locked
fuzz/run.sh "${DUALFS_FUZZ_SECONDS:-5}"
