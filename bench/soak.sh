#!/usr/bin/env bash
# A soak run of the real daemon: on a small metadata device with the cleaner daemon attached,
# extract a Linux source tree ROUNDS times (deleting the previous copy after each new one, so
# two copies are alive at the peak) while PostMark and the metadata-rate workers run beside
# it; then unmount, `fsck-dualfs -f -n`, mount again and compare the last copy with the
# tarball extracted on the host. Prints the time, the cleaner's figures and the verdicts;
# exits non-zero on any failure.
#
#   bench/soak.sh [--rounds 5] [--meta-size 128M] [--out DIR]
#
# With --out DIR: DIR/soak.csv (workload time, cleaner figures, verdicts) and DIR/soak.png.
#
# Needs root and /dev/fuse; installs PostMark and Debian's linux-source if missing.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

ROUNDS=5 META_SIZE=128M OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --meta-size) META_SIZE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) bench_usage "$0" 0 ;;
        *) echo "unknown argument $1" >&2; bench_usage "$0" 2 ;;
    esac
done

bench_init
bench_install postmark xz-utils
[ -n "$OUT" ] && bench_install gnuplot-nox python3
bench_build
bench_example metarate
bench_out_init "$OUT" soak
TARBALL=$(ls /usr/src/linux-source-*.tar.* 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$TARBALL" ]; then
    bench_install linux-source
    TARBALL=$(ls /usr/src/linux-source-*.tar.* | sort -V | tail -1)
fi
BIN="$CARGO_TARGET_DIR/release"
dir="$BENCH_TMP/soak" mnt="$BENCH_TMP/mnt-soak"
mkdir -p "$dir" "$mnt"
"$BIN/mkfs-dualfs" -q --size-meta "$META_SIZE" --size-data 8G "$dir/meta.img" "$dir/data.img"
BENCH_MOUNTS+=("dualfs|$mnt")
"$BIN/dualfs" mount "$dir/meta.img" "$dir/data.img" "$mnt"
"$BIN/dualfs-cleaner" "$mnt" --log-file "$dir/cleaner.log"

bench_log "soak: $ROUNDS tree extractions beside PostMark and metarate on a $META_SIZE log"
t0=$(bench_now)
(
    for i in $(seq 1 "$ROUNDS"); do
        mkdir -p "$mnt/k$i"
        tar -xf "$TARBALL" -C "$mnt/k$i"
        if [ "$i" -gt 1 ]; then rm -rf "$mnt/k$((i - 1))"; fi
    done
) >"$dir/tar.log" 2>&1 &
tar_pid=$!
(
    mkdir -p "$mnt/pm"
    printf 'set location %s\nset number 5000\nset transactions 30000\nset subdirectories 50\nrun\nquit\n' "$mnt/pm" |
        (cd "$dir" && postmark)
) >"$dir/postmark.log" 2>&1 &
pm_pid=$!
(
    for _ in 1 2 3 4 5; do "$BIN/examples/metarate" "$mnt" --workers 1,4 --files 3000; done
) >"$dir/metarate.log" 2>&1 &
mr_pid=$!
fail=0
wait "$tar_pid" || { fail=1; bench_log "tar failed:"; tail "$dir/tar.log" >&2; }
wait "$pm_pid" || { fail=1; bench_log "PostMark failed:"; tail "$dir/postmark.log" >&2; }
wait "$mr_pid" || { fail=1; bench_log "metarate failed:"; tail "$dir/metarate.log" >&2; }
elapsed=$(bench_since "$t0")
status=$("$BIN/dualfs-cleaner" --status "$mnt")
status_json=$("$BIN/dualfs-cleaner" --status --json "$mnt" 2>/dev/null || echo '{}')
"$BIN/dualfs" umount "$mnt"
_bench_forget_mount "$mnt"

fsck_out=$("$BIN/fsck-dualfs" -f -n "$dir/meta.img" "$dir/data.img") || { fail=1; fsck_failed=1; echo "$fsck_out" >&2; }
mkdir -p "$dir/ref"
tar -xf "$TARBALL" -C "$dir/ref"
BENCH_MOUNTS+=("dualfs|$mnt")
"$BIN/dualfs" mount "$dir/meta.img" "$dir/data.img" "$mnt"
if diff -r --no-dereference "$dir/ref" "$mnt/k$ROUNDS" >"$dir/diff.log" 2>&1; then
    verdict="identical to the tarball"
else
    verdict="DIFFERS from the tarball ($(wc -l <"$dir/diff.log") lines of diff)"
    fail=1
fi
"$BIN/dualfs" umount "$mnt"
_bench_forget_mount "$mnt"

echo
echo "Soak: $ROUNDS extractions of $(basename "$TARBALL") with PostMark and metarate beside them," \
    "$META_SIZE metadata device, cleaner daemon attached; $(nproc) CPUs"
echo "workload time: $elapsed s"
echo "$status" | grep -E "utilization|cleaned|cleaning wrote|write cost|ENOSPC"
echo "fsck -f -n: $(echo "$fsck_out" | tail -1)"
echo "last copy after a remount: $verdict"
bench_row dualfs workload seconds "$elapsed" s
if [ -n "$BENCH_CSV" ]; then
    python3 -c '
import json, sys
s = json.loads(sys.argv[1])
c = s.get("counters", {})
for k in ("passes", "write_path_passes", "segments_cleaned", "bytes_written", "bytes_freed", "enospc"):
    if k in c: print(f"{k},{c[k]}")
for k in ("utilization", "write_cost"):
    if k in s: print(f"{k},{s[k]}")' "$status_json" 2>/dev/null | while IFS=, read -r k v; do bench_row dualfs cleaner "$k" "$v" value; done
fi
bench_row dualfs verdict fsck_clean "$([ -z "${fsck_failed:-}" ] && echo 1 || echo 0)" bool
bench_row dualfs verdict tree_identical "$([ "$verdict" = "identical to the tarball" ] && echo 1 || echo 0)" bool
bench_chart seconds "Soak: $ROUNDS tree extractions beside PostMark and metarate, $META_SIZE metadata device" time
exit $fail
