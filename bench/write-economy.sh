#!/usr/bin/env bash
# Write economy: how many bytes each file system sends to its devices for the same workload,
# measured from the block devices: every file system sits on loop devices (DualFS's two
# images too, one loop device each), and the bytes are the sectors written that
# /sys/block/loopN/stat counts from just after the mount to the end of the unmount (mkfs and
# the mount itself left out; the unmount's final writes counted). DualFS's metadata and data
# devices are shown apart. Kernel ext2, ext3 (ordered journal) and ext4 run beside DualFS.
#
#   bench/write-economy.sh                          # untar of a kernel tree, then PostMark
#   bench/write-economy.sh --workloads untar        # one of them
#   bench/write-economy.sh --files 5000 --transactions 10000 --out DIR
#
# Workloads, each on a fresh file system:
#   untar     tar -xf of Debian's linux-source tree (decompressed first; --tarball FILE for
#             another .tar/.tar.xz/.tar.gz), then unmount;
#   postmark  PostMark (default 20,000 files of 500 B-10 KB in 100 subdirectories, 50,000
#             transactions, as in the DualFS paper), then unmount.
#
# Options: --fs "LIST" (default "ext2 ext3 ext4 dualfs"; dualfs-wb too), --workloads LIST
# (untar,postmark), --tarball FILE, --files F, --transactions T, --subdirs S, --image-size SIZE
# (default 8G), --out DIR (DIR/write-economy.csv, DIR/write-economy.png: bytes over ext2's).
#
# "x ext2" = bytes written / ext2's for the same workload; "x payload" = bytes written / the
# file contents the workload wrote (tar: the sum of the tree's file sizes; PostMark: the
# megabytes it reports writing).
#
# Needs root and loop devices (and /dev/fuse for DualFS); installs postmark with apt-get.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

FS_LIST="ext2 ext3 ext4 dualfs" WORKLOADS=untar,postmark TARBALL="" SIZE=8G OUT=""
FILES=20000 TRANSACTIONS=50000 SUBDIRS=100
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --fs) FS_LIST=$2; shift 2 ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --tarball) TARBALL=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --transactions) TRANSACTIONS=$2; shift 2 ;;
        --subdirs) SUBDIRS=$2; shift 2 ;;
        --image-size) SIZE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
for w in ${WORKLOADS//,/ }; do
    case "$w" in untar | postmark) ;; *) echo "unknown workload $w" >&2; usage 2 ;; esac
done
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST
for f in $FS_LIST; do
    case "$f" in ext2 | ext3 | ext4 | dualfs | dualfs-wb) ;; *) echo "$f: not on block devices here" >&2; usage 2 ;; esac
done

bench_init
bench_install postmark e2fsprogs xz-utils
case ",$WORKLOADS," in *,untar,*) [ -n "$TARBALL" ] || bench_install linux-source ;; esac
[ -n "$OUT" ] && bench_install gnuplot-nox
bench_build
bench_out_init "$OUT" write-economy
# shellcheck disable=SC2086
FS_LIST=$(bench_available $FS_LIST)
case ",$WORKLOADS," in *,untar,*) bench_kernel_tar "$TARBALL" ;; esac
export BENCH_DUALFS_LOOP=1 BENCH_KEEP_LOOPS=1

declare -A B=()        # "workload|fs|role" -> bytes (role: all, meta, data)
declare -A PAYLOAD=()  # workload -> bytes of file contents it wrote
declare -A T=()        # "workload|fs" -> seconds (workload + unmount)

run_one() { # WORKLOAD FS
    local w=$1 fs=$2 mnt="$BENCH_TMP/mnt-$2" t0 role dev d before=() after=() i=0
    bench_log "$(bench_fs_label "$fs"): $w"
    fs_mount "$fs" "$mnt" "$SIZE"
    sync
    local devs=(${BENCH_DEV[$mnt]})
    for d in "${devs[@]}"; do before+=("$(bench_dev_written "${d#*=}")"); done
    t0=$(bench_now)
    case "$w" in
        untar) tar -xf "$BENCH_TAR" -C "$mnt" || bench_die "$(bench_fs_label "$fs"): tar failed" ;;
        postmark)
            bench_postmark "$mnt" "$BENCH_TMP/pm-$fs.log" "$FILES" "$TRANSACTIONS" "$SUBDIRS" 500 10000
            grep -q "megabytes written" "$BENCH_TMP/pm-$fs.log" || { cat "$BENCH_TMP/pm-$fs.log" >&2; bench_die "PostMark failed"; }
            PAYLOAD[postmark]=$(awk '/megabytes written/ { printf "%.0f", $2 * 1048576 }' "$BENCH_TMP/pm-$fs.log") ;;
    esac
    fs_umount "$fs" "$mnt"
    T[$w|$fs]=$(bench_since "$t0")
    sync
    for d in "${devs[@]}"; do
        role=${d%%=*} dev=${d#*=}
        B[$w|$fs|$role]=$(($(bench_dev_written "$dev") - ${before[$i]}))
        i=$((i + 1))
    done
    [ -n "${B[$w|$fs|all]:-}" ] || B[$w|$fs|all]=$((B[$w|$fs|meta] + B[$w|$fs|data]))
    fs_release "$fs" "$mnt"
    bench_log "$(bench_fs_label "$fs"): $w wrote $((B[$w|$fs|all] >> 20)) MiB in ${T[$w|$fs]} s"
}

PAYLOAD[untar]=${BENCH_TAR_BYTES:-0}
for w in ${WORKLOADS//,/ }; do
    for fs in $FS_LIST; do run_one "$w" "$fs"; done
done

mib() { awk -v b="$1" 'BEGIN { if (b == "") print "n/a"; else printf "%.1f", b / 1048576 }'; }
echo
echo "Write economy: bytes sent to the devices (loop devices' sectors written, from after the mount to" \
    "the end of the unmount); $(nproc) CPUs, kernel $(uname -r)"
[ -n "${BENCH_TAR_TREE:-}" ] && echo "untar: $BENCH_TAR_TREE, $BENCH_TAR_ENTRIES entries, $(mib "$BENCH_TAR_BYTES") MiB of file contents"
case ",$WORKLOADS," in *,postmark,*) echo "postmark: $FILES files, $SUBDIRS subdirectories, $TRANSACTIONS transactions; it reports $(mib "${PAYLOAD[postmark]:-}") MiB written" ;; esac
for w in ${WORKLOADS//,/ }; do
    echo
    printf '%-9s %-17s %12s %12s %12s %8s %10s %9s\n' "$w" "file system" "MiB written" "metadata" "data" "x ext2" "x payload" "seconds"
    for fs in $FS_LIST; do
        all=${B[$w|$fs|all]:-}
        printf '%-9s %-17s %12s %12s %12s %8s %10s %9s\n' "" "$(bench_fs_label "$fs")" "$(mib "$all")" \
            "$(bench_is_dualfs "$fs" && mib "${B[$w|$fs|meta]}" || echo -)" "$(bench_is_dualfs "$fs" && mib "${B[$w|$fs|data]}" || echo -)" \
            "$(bench_ratio "$all" "${B[$w|ext2|all]:-}")" "$(bench_ratio "$all" "${PAYLOAD[$w]}")" "${T[$w|$fs]}"
        bench_row "$fs" "$w" bytes "$all" bytes
        if bench_is_dualfs "$fs"; then
            bench_row "$fs" "$w" bytes_meta "${B[$w|$fs|meta]}" bytes
            bench_row "$fs" "$w" bytes_data "${B[$w|$fs|data]}" bytes
        fi
        bench_row "$fs" "$w" seconds "${T[$w|$fs]}" s
    done
    bench_row payload "$w" payload_bytes "${PAYLOAD[$w]}" bytes
done
echo "(metadata/data: DualFS's two devices; the ext file systems have one device, counted under MiB written)"
bench_print_skipped
bench_chart bytes "Write economy: bytes written to the devices per workload" "bytes written"
