#!/usr/bin/env bash
# Sequential I/O: one large file written with dd (1 MiB requests, then fsync: conv=fsync) and
# read back cold (the kernel's caches dropped first, also those of the images), on DualFS and
# kernel ext4 (a loop device) side by side in one run, the file systems taking turns round by
# round; MiB/s per round, the median, and DualFS's median over ext4's.
#
#   bench/seqio.sh                              # 1 GiB, 3 rounds, dualfs and ext4
#   bench/seqio.sh --mib 256 --rounds 5 --fs "dualfs dualfs-wb ext4"
#   bench/seqio.sh --base /path/to/old/target/release   # adds a column "DualFS base"
#   bench/seqio.sh --perf dualfs                # perf record -g of the daemon, both phases
#
# Options: --mib N (file size, default 1024), --rounds N (default 3), --fs "LIST" (dualfs,
# dualfs-wb, dualfs-ring, dualfs-dev, ext2, ext3, ext4; default "dualfs ext4"), --image-size SIZE (default 4G),
# --base DIR (dualfs and mkfs-dualfs of another build, e.g. before a change), --perf "LIST"
# (profiles in $BENCH_PERF_DIR, see lib.sh), --out DIR (DIR/seqio.csv).
#
# Dropping the caches (echo 3 > /proc/sys/vm/drop_caches) is machine-wide: on a shared
# machine it slows others' I/O for a moment, and their load makes these figures noisy.
# Needs root, /dev/fuse and loop devices; sparse images go to a temporary folder.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

MIB=1024 ROUNDS=3 FS_LIST="dualfs ext4" SIZE=4G BASE="" PERF="" OUT=""
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --mib) MIB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --fs) FS_LIST=$2; shift 2 ;;
        --image-size) SIZE=$2; shift 2 ;;
        --base) BASE=$2; shift 2 ;;
        --perf) PERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST
for f in $FS_LIST; do
    case "$f" in dualfs | dualfs-wb | dualfs-ring | dualfs-dev | ext2 | ext3 | ext4) ;; *) echo "$f: not measured here" >&2; usage 2 ;; esac
done
if [ -n "$BASE" ] && { [ ! -x "$BASE/dualfs" ] || [ ! -x "$BASE/mkfs-dualfs" ]; }; then
    bench_die "--base $BASE: no dualfs and mkfs-dualfs there"
fi

bench_init
bench_install e2fsprogs
[ -n "$PERF" ] && bench_install linux-perf
case " $FS_LIST " in
    *" dualfs"*)
        bench_log "building DualFS (release) into $CARGO_TARGET_DIR"
        (cd "$BENCH_REPO" && cargo build --release --workspace --exclude dualfs-bench-fuse --quiet) ||
            bench_die "DualFS build failed" ;;
esac
bench_out_init "$OUT" seqio
COLUMNS_FS=$FS_LIST
[ -n "$BASE" ] && COLUMNS_FS="$COLUMNS_FS dualfs-base"

declare -A R=() # "fs|phase" -> MiB/s of each round, space-separated
mibps() { awk -v m="$MIB" -v s="$1" 'BEGIN { printf "%.1f\n", m / s }'; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

one_round() { # COLUMN ROUND
    local col=$1 round=$2 fs=$1 mnt t0 secs saved_bin=$DUALFS_BIN saved_mkfs=$MKFS_DUALFS_BIN
    if [ "$col" = dualfs-base ]; then
        fs=dualfs DUALFS_BIN="$BASE/dualfs" MKFS_DUALFS_BIN="$BASE/mkfs-dualfs"
    fi
    mnt="$BENCH_TMP/mnt-$col"
    fs_mount "$fs" "$mnt" "$SIZE"
    drop_caches
    bench_perf_wanted "$col" "$PERF" && bench_perf_start "$fs" "$mnt" "seqio-write-$col-$round"
    t0=$(bench_now)
    dd if=/dev/zero of="$mnt/seq" bs=1M count="$MIB" conv=fsync status=none
    secs=$(bench_since "$t0")
    bench_perf_wanted "$col" "$PERF" && bench_perf_stop
    R[$col|write]+="$(mibps "$secs") "
    bench_row "$col" "write round $round" seconds "$secs" s
    drop_caches
    bench_perf_wanted "$col" "$PERF" && bench_perf_start "$fs" "$mnt" "seqio-read-$col-$round"
    t0=$(bench_now)
    dd if="$mnt/seq" of=/dev/null bs=1M status=none
    secs=$(bench_since "$t0")
    bench_perf_wanted "$col" "$PERF" && bench_perf_stop
    R[$col|read]+="$(mibps "$secs") "
    bench_row "$col" "read round $round" seconds "$secs" s
    fs_umount "$fs" "$mnt"
    DUALFS_BIN=$saved_bin MKFS_DUALFS_BIN=$saved_mkfs
}

for round in $(seq 1 "$ROUNDS"); do
    for col in $COLUMNS_FS; do
        bench_log "round $round: $col"
        one_round "$col" "$round"
    done
done

label() { [ "$1" = dualfs-base ] && echo "DualFS base" || bench_fs_label "$1"; }
echo
echo "Sequential I/O, $MIB MiB file, 1 MiB requests, MiB/s per round and median" \
    "($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r))"
printf '%-18s %-8s %-32s %8s\n' "file system" phase rounds median
declare -A MED=()
for col in $COLUMNS_FS; do
    for phase in write read; do
        # shellcheck disable=SC2086
        MED[$col|$phase]=$(bench_median ${R[$col|$phase]})
        printf '%-18s %-8s %-32s %8s\n' "$(label "$col")" "$phase" "${R[$col|$phase]}" "${MED[$col|$phase]}"
        bench_row "$col" "$phase" mib_per_sec "${MED[$col|$phase]}" MiB/s
    done
done
for col in $COLUMNS_FS; do
    case "$col" in ext*) continue ;; esac
    for ref in $FS_LIST; do
        # Over kernel ext*, and DualFS over io_uring over DualFS over /dev/fuse.
        case "$ref" in ext* | dualfs-dev) ;; *) continue ;; esac
        [ "$ref" = "$col" ] && continue
        echo "$(label "$col") / $(label "$ref"): write+fsync" \
            "$(bench_ratio "${MED[$col|write]}" "${MED[$ref|write]}"), cold read" \
            "$(bench_ratio "${MED[$col|read]}" "${MED[$ref|read]}")"
    done
done
