#!/usr/bin/env bash
# The whole test suite, as CI runs it (as root: tests mount file systems, use loop devices).
#   0. cargo fmt --check and cargo clippy with warnings as errors;
#   1. every unit, integration, FUSE, crash-state and hostile-image test, over FUSE over
#      io_uring: the run switches the kernel's enable_uring on and puts it back at the end
#      (on a kernel without FUSE over io_uring every mount serves over /dev/fuse);
#   2. the POSIX tests again with -o writeback_cache, and again over /dev/fuse
#      (-o transport=dev);
#   3. the benchmarks as a user runs them from a clone: bench/postmark.sh on a tiny
#      configuration with --out, on every file system bench/ sets up (DualFS with and without
#      writeback cache, kernel ext2/ext3/ext4, fuse2fs, the in-repo memfs ceiling), checking
#      that its CSV has figures of every one and that its chart was drawn (about a minute);
#      and bench/disks.sh --quick, the paper's experiment on simulated disks (about 4 minutes);
#   4. each cargo-fuzz target for a few seconds (fuzz/run.sh; cargo-fuzz on stable Rust via
#      RUSTC_BOOTSTRAP=1, installed if missing). The seeded hostile-image test in step 1 is
#      the deterministic part; this catches what a short random run finds.
#   Every step runs even when an earlier one failed (cargo test with --no-fail-fast: every
#   test binary), so one failure does not hide the rest; a summary with a line per step ends
#   the run, and the exit status is 1 when any step failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
summary=()
failed=0
# FUSE over io_uring for the whole run, where the kernel has it (every mount asks for it unless
# told otherwise); what enable_uring was is put back when the run ends.
uring_param=/sys/module/fuse/parameters/enable_uring
uring_old=$(cat "$uring_param" 2>/dev/null || true)
if [ -n "$uring_old" ] && echo Y >"$uring_param"; then
    echo "=== scripts/test.sh: FUSE over io_uring on (enable_uring was $uring_old)"
else
    uring_old=""
    echo "=== scripts/test.sh: no FUSE over io_uring here: every mount serves over /dev/fuse"
fi
bench_out=""
cleanup() {
    if [ -n "$uring_old" ]; then
        echo "$uring_old" >"$uring_param"
    fi
    if [ -n "$bench_out" ]; then
        rm -rf "$bench_out"
    fi
}
trap cleanup EXIT
# run_step NAME COMMAND...: runs COMMAND, records "passed" or "FAILED" for the summary.
run_step() {
    local name=$1 started=$SECONDS status=0
    shift
    echo "=== scripts/test.sh: $name"
    "$@" || status=$?
    if [ "$status" -eq 0 ]; then
        summary+=("passed  $name ($((SECONDS - started)) s)")
    else
        summary+=("FAILED  $name (exit $status, $((SECONDS - started)) s)")
        failed=1
    fi
}
benchmark_check() {
    # The printed summary is kept beside the CSV for check-out.sh (NAME.txt).
    bench/postmark.sh --files 300 --transactions 600 --subdirs 5 --image-size 1G --out "$bench_out" |
        tee "$bench_out/postmark.txt" &&
        bench/check-out.sh "$bench_out" postmark "dualfs dualfs-wb ext2 ext3 ext4 fuse2fs memfs"
}
disk_benchmark_check() {
    # The paper's experiment at its CI size: PostMark and a cold scan on simulated disks.
    bench/disks.sh --quick --out "$bench_out" | tee "$bench_out/disks.txt" &&
        bench/check-out.sh "$bench_out" disks "ext2 ext4 dualfs ext4-ssdjournal dualfs-ssdmeta" \
            postmark disk_io_seconds
}
# Build every binary first: integration tests run the sibling crates' programs
# (dualfs-cleaner, mkfs-dualfs, fsck-dualfs), which `cargo test` alone only builds as test
# harnesses, not as target/release/<name>.
# The habits that keep the code one style and free of the lints' findings, first: they take
# seconds and say at once what a reviewer would.
run_step "format (cargo fmt --check)" cargo fmt --all -- --check
run_step "lints (cargo clippy -D warnings)" cargo clippy --workspace --all-targets --locked -- -D warnings
run_step "build (cargo build --workspace --bins)" cargo build --workspace --release --locked --bins
run_step "tests (cargo test --workspace)" cargo test --workspace --release --locked --no-fail-fast
# The POSIX, persistence, attribute and ACL tests again with the kernel's writeback cache
# (-o writeback_cache),
# where writes, times and errors reach the daemon later and by other paths.
run_step "tests again with -o writeback_cache" env DUALFS_TEST_EXTRA_OPTS=writeback_cache \
    cargo test --release --locked --no-fail-fast \
    --test posix_files --test posix_attr --test posix_dirs --test posix_perms \
    --test posix_rename --test posix_falloc --test persistence --test threads --test shutdown \
    --test node_ids --test inode_flags --test shutdown_ioctl --test xattr --test acl
# The POSIX and persistence tests again over /dev/fuse (the main pass ran over io_uring).
run_step "tests again over /dev/fuse (-o transport=dev)" env DUALFS_TEST_EXTRA_OPTS=transport=dev \
    cargo test --release --locked --no-fail-fast \
    --test posix_files --test posix_attr --test posix_dirs --test posix_perms \
    --test posix_rename --test posix_falloc --test persistence --test threads --test shutdown \
    --test node_ids --test inode_flags --test shutdown_ioctl --test xattr --test acl \
    --test session_end
bench_out=$(mktemp -d "${TMPDIR:-/var/tmp}/dualfs-test-bench.XXXXXX")
run_step "benchmark check (bench/postmark.sh --out, bench/check-out.sh)" benchmark_check
run_step "disk benchmark check (bench/disks.sh --quick, bench/check-out.sh)" disk_benchmark_check
run_step "fuzz (fuzz/run.sh)" fuzz/run.sh "${DUALFS_FUZZ_SECONDS:-5}"
echo "=== scripts/test.sh: summary"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
    echo "scripts/test.sh: FAILED (see the steps above)"
    exit 1
fi
echo "scripts/test.sh: every step passed"
