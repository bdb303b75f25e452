#!/usr/bin/env bash
# Scans on read-only mounts: Debian's linux-source tree unpacked onto DualFS and onto kernel
# ext4 (loop device), each mounted again read-only, then a warm `find` and a warm `grep -r`
# (the second of two runs after the mount) on each. DualFS runs twice per round, as a
# read-only mount opens files by default (the kernel opens them itself: no OPEN or RELEASE
# requests, and no access times to refresh) and with `-o ro,open` (every open sent to DualFS,
# as on a read-write mount). Rounds interleave the three; prints medians and ratios to ext4.
#
#   bench/scan.sh                        # one round
#   bench/scan.sh --repeat 3             # three rounds, medians
#   bench/scan.sh --fuse-ops             # also count DualFS's FUSE requests in each warm grep
#   bench/scan.sh --tarball FILE         # another tree (.tar, .tar.xz or .tar.gz)
#   bench/scan.sh --out DIR              # also DIR/scan.csv and DIR/scan.png (times over ext4's)
#
# Options: --repeat N, --fuse-ops, --tarball FILE, --image-size SIZE (each image, default 8G),
# --out DIR.
#
# The scans of a read-write mount are phases of bench/kernel-compile.sh. Needs root,
# /dev/fuse and loop devices; installs linux-source with apt-get if its tarball is missing.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

REPEAT=1
FUSE_OPS=""
TARBALL=""
SIZE=8G
OUT=""
usage() { bench_usage "$0" "$1"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --repeat) REPEAT=$2; shift 2 ;;
        --fuse-ops) FUSE_OPS=1; shift ;;
        --tarball) TARBALL=$2; shift 2 ;;
        --image-size) SIZE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "--repeat: a number of rounds, 1 or more" >&2; usage 2; }

bench_init
bench_install e2fsprogs xz-utils coreutils findutils grep
[ -n "$TARBALL" ] || bench_install linux-source
[ -n "$FUSE_OPS" ] && bench_install linux-perf
[ -n "$OUT" ] && bench_install gnuplot-nox
bench_build
bench_out_init "$OUT" scan
bench_kernel_tar "$TARBALL"

GREP_WORD=include # in nearly every file, so grep -c reads every file to its end
DUALFS_MNT="$BENCH_TMP/mnt-dualfs"
EXT4_MNT="$BENCH_TMP/mnt-ext4"
declare -A T=() # "variant|find|round", "variant|grep|round" -> seconds; "variant|ops|round"

# fs_remount FS MNT OPTS: unmount FS, keeping its images, and mount them again with -o OPTS.
fs_remount() {
    local fs=$1 mnt=$2 opts=$3 dev meta data
    _bench_unmount "$fs" "$mnt" || bench_die "$fs: unmounting $mnt failed"
    BENCH_MOUNTS+=("$fs|$mnt")
    case "$fs" in
        dualfs)
            dev=${BENCH_DEV[$mnt]}
            meta=${dev#meta=} meta=${meta%% data=*} data=${dev##* data=}
            "$DUALFS_BIN" mount "$meta" "$data" "$mnt" -o "${DUALFS_OPTS:+$DUALFS_OPTS,}$opts"
            ;;
        ext4) mount -t ext4 -o "$opts" "${BENCH_LOOP[$mnt]}" "$mnt" ;;
    esac
    mountpoint -q "$mnt" || bench_die "$fs: $mnt is not mounted again"
}

# scan VARIANT DIR ROUND: the warm find and grep of DIR (each the second of two runs).
scan() {
    local variant=$1 dir=$2 round=$3 t0
    find "$dir" >/dev/null
    t0=$(bench_now)
    find "$dir" >/dev/null
    T[$variant|find|$round]=$(bench_since "$t0")
    grep -r -c "$GREP_WORD" "$dir" >/dev/null || true
    [ -n "$FUSE_OPS" ] && [ "$variant" != ext4 ] && bench_fuseops_start "$dir"
    t0=$(bench_now)
    grep -r -c "$GREP_WORD" "$dir" >/dev/null || true
    T[$variant|grep|$round]=$(bench_since "$t0")
    if [ -n "$FUSE_OPS" ] && [ "$variant" != ext4 ]; then
        bench_fuseops_stop
        T[$variant|ops|$round]=$BENCH_FUSEOPS
    fi
    bench_log "$variant, round $round: warm find ${T[$variant|find|$round]} s, warm grep ${T[$variant|grep|$round]} s${T[$variant|ops|$round]:+; FUSE requests of the grep: ${T[$variant|ops|$round]}}"
}

for fs in dualfs ext4; do
    mnt=$DUALFS_MNT
    [ "$fs" = ext4 ] && mnt=$EXT4_MNT
    bench_log "$(bench_fs_label "$fs"): mkfs + mount, unpacking $BENCH_TAR_TREE"
    fs_mount "$fs" "$mnt" "$SIZE"
    tar -xf "$BENCH_TAR" -C "$mnt"
done

for round in $(seq 1 "$REPEAT"); do
    fs_remount dualfs "$DUALFS_MNT" ro
    scan "dualfs ro" "$DUALFS_MNT" "$round"
    fs_remount dualfs "$DUALFS_MNT" ro,open
    scan "dualfs ro,open" "$DUALFS_MNT" "$round"
    fs_remount ext4 "$EXT4_MNT" ro
    scan ext4 "$EXT4_MNT" "$round"
done
fs_umount dualfs "$DUALFS_MNT"
fs_umount ext4 "$EXT4_MNT"

med() { # VARIANT PHASE
    local v=() r
    for r in $(seq 1 "$REPEAT"); do v+=("${T[$1|$2|$r]}"); done
    bench_median "${v[@]}"
}
echo
echo "Warm scans of read-only mounts: $BENCH_TAR_TREE ($BENCH_TAR_ENTRIES entries), $(bench_rounds median "$REPEAT"); $(nproc) CPUs, kernel $(uname -r)"
echo "x ext4 = this one's time / kernel ext4's (below 2 meets issue 11's target for the scans)"
echo
printf '%-22s %10s %10s %10s %10s\n' "variant" "find s" "grep s" "find x ext4" "grep x ext4"
E_FIND=$(med ext4 find) E_GREP=$(med ext4 grep)
for variant in "dualfs ro" "dualfs ro,open" ext4; do
    label="DualFS -o ${variant#dualfs }"
    [ "$variant" = ext4 ] && label="ext4 (kernel) -o ro"
    f=$(med "$variant" find) g=$(med "$variant" grep)
    key=${variant// /-} key=${key//,/-}
    bench_row "$key" "warm find" seconds "$f" s
    bench_row "$key" "warm grep" seconds "$g" s
    printf '%-22s %10s %10s %10s %10s\n' "$label" "$f" "$g" "$(bench_ratio "$f" "$E_FIND")" "$(bench_ratio "$g" "$E_GREP")"
done
if [ -n "$FUSE_OPS" ]; then
    echo
    echo "FUSE requests of DualFS's warm grep (round 1):"
    for variant in "dualfs ro" "dualfs ro,open"; do
        printf '  %-16s %s\n' "-o ${variant#dualfs }" "${T[$variant|ops|1]}"
    done
fi
bench_chart seconds "Warm scans of read-only mounts: $BENCH_TAR_TREE ($(bench_rounds median "$REPEAT"))" time
