#!/usr/bin/env bash
# What extended attributes cost, on DualFS and kernel ext4 on a loop device in one run: the
# create rate of plain files against files that each get two small user. attributes, and the
# throughput of 4 KiB writes (each write(2) makes the kernel ask for security.capability) to a
# file without and with attributes. Prints each file system's rates and the ratios, with memfs
# (bench/fuse-tools, the FUSE ceiling, attributes in memory) beside them: each setxattr is a
# FUSE round trip of its own, which bounds the create ratio of any FUSE file system.
#
#   bench/xattr.sh                          # 20,000 files, 256 MiB of writes, best of 3
#   bench/xattr.sh --files 50000 --write-mib 512 --rounds 5 --fs "dualfs memfs ext4"
#   bench/xattr.sh --base /path/to/old/target/release
#                                           # also DualFS built before attributes existed
#                                           # (its mkfs-dualfs and dualfs): the writes before
#
# See examples/xattr.rs for the phases. Needs root and /dev/fuse.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

FILES=20000 WRITE_MIB=256 ROUNDS=3 FS_LIST="dualfs memfs ext4" SIZE=8G BASE=""
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --files) FILES=$2; shift 2 ;;
        --write-mib) WRITE_MIB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --fs) FS_LIST=$2; shift 2 ;;
        --base) BASE=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 1 ;;
    esac
done
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST
if [ -n "$BASE" ] && { [ ! -x "$BASE/dualfs" ] || [ ! -x "$BASE/mkfs-dualfs" ]; }; then
    bench_die "--base $BASE: no dualfs and mkfs-dualfs there"
fi

bench_init
bench_install e2fsprogs
bench_build
(cd "$BENCH_REPO" && cargo build --release --quiet --example xattr) || bench_die "xattr build failed"
XATTR="$CARGO_TARGET_DIR/release/examples/xattr"

declare -A R=() # "column|phase" -> rate
COLUMNS=()
run_column() { # COLUMN FS [--no-xattr]
    local col=$1 fs=$2 mnt="$BENCH_TMP/mnt-$1"
    shift 2
    bench_log "$col: mkfs + mount"
    fs_mount "$fs" "$mnt" "$SIZE"
    bench_log "$col: $FILES files, $WRITE_MIB MiB of 4 KiB writes, $(bench_rounds best "$ROUNDS")"
    while read -r _ p r _; do
        R[$col|${p#phase=}]=${r#rate=}
    done < <("$XATTR" "$mnt" --files "$FILES" --write-mib "$WRITE_MIB" --rounds "$ROUNDS" "$@")
    fs_umount "$fs" "$mnt"
    COLUMNS+=("$col")
}
for fs in $FS_LIST; do
    run_column "$(bench_fs_label "$fs")" "$fs"
done
if [ -n "$BASE" ]; then
    # The same mount and mkfs steps with the older programs (their own on-disk format).
    NEW_BIN=$DUALFS_BIN NEW_MKFS=$MKFS_DUALFS_BIN
    DUALFS_BIN="$BASE/dualfs" MKFS_DUALFS_BIN="$BASE/mkfs-dualfs"
    run_column "DualFS before" dualfs --no-xattr
    DUALFS_BIN=$NEW_BIN MKFS_DUALFS_BIN=$NEW_MKFS
fi

echo
echo "Extended attributes: $FILES files, $WRITE_MIB MiB of 4 KiB pwrites + fsync, $(bench_rounds best "$ROUNDS");" \
    "$(nproc) CPUs, kernel $(uname -r)"
printf '%-16s %10s %14s %6s   %9s %14s %6s\n' "file system" "create/s" "create+2xattr/s" "ratio" \
    "4K MiB/s" "4K+xattr MiB/s" "ratio"
for col in "${COLUMNS[@]}"; do
    printf '%-16s %10s %14s %6s   %9s %14s %6s\n' "$col" \
        "${R[$col|create]}" "${R[$col|create+2xattr]}" \
        "$(bench_ratio "${R[$col|create+2xattr]}" "${R[$col|create]}")" \
        "${R[$col|write4k]}" "${R[$col|write4k+xattr]}" \
        "$(bench_ratio "${R[$col|write4k+xattr]}" "${R[$col|write4k]}")"
done
if [ -n "${R[DualFS|create]:-}" ] && [ -n "${R[memfs (ceiling)|create]:-}" ]; then
    echo "DualFS's create+2xattr ratio / the FUSE ceiling's:" \
        "$(bench_ratio "$(bench_ratio "${R[DualFS|create+2xattr]}" "${R[DualFS|create]}")" \
            "$(bench_ratio "${R[memfs (ceiling)|create+2xattr]}" "${R[memfs (ceiling)|create]}")")"
fi
if [ -n "$BASE" ]; then
    echo "4 KiB writes with attributes supported / before (DualFS, files without attributes):" \
        "$(bench_ratio "${R[DualFS|write4k]:-}" "${R[DualFS before|write4k]}")"
fi
