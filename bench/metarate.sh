#!/usr/bin/env bash
# Metadata rates against the number of concurrent workers (mdtest-style, one directory per
# worker: create, stat, unlink), on DualFS, kernel ext4 on a loop device, fuse2fs and memfs
# (the in-memory FUSE ceiling), all in one run. Prints ops/s for each worker count, the
# scaling (rate with W workers / rate with 1) and DualFS's share of the FUSE ceiling.
#
#   bench/metarate.sh                               # 1, 2 and 4 workers, 20,000 files each
#   bench/metarate.sh --workers 1,2,4,8 --files 10000 --rounds 3 --fs "dualfs memfs"
#   bench/metarate.sh --threads 2,4,8 --fs "dualfs memfs"   # DualFS-t2, -t4, -t8 side by side
#   bench/metarate.sh --out DIR     # also DIR/metarate.csv and DIR/metarate.png (time per op)
#   BENCH_LIBFUSE=/path/to/libfuse-build bench/metarate.sh --workers 1,2,8 --files 10000 \
#       --rounds 3 --fs "dualfs-ring dualfs-dev memfs-ll-ring memfs-ll"   # the two transports
#
# Options: --workers LIST, --files N (per worker), --rounds R (best of), --fs "LIST" (default
# "dualfs ext4 fuse2fs memfs"), --threads LIST (DualFS once per count of FUSE threads, the
# mount's --threads N: columns dualfs-tN; default one DualFS with the daemon's own count), --out DIR,
# --ceiling FS (the column every rate is divided by at the largest worker count; default the
# first of memfs-ll-ring, memfs, memfs-ll in the list). dualfs-ring / dualfs-dev: DualFS over
# each FUSE transport; memfs-ll / memfs-ll-ring: libfuse's memfs_ll over each (bench/lib.sh).
# --pin CPUS: the workers run on those CPUs only (taskset): a lone worker woken by a busy
# daemon thread is otherwise moved to an idle CPU, and on a virtual machine whose idle CPUs
# halt that move costs more than the request (bench/RESULTS.md, "The two transports").
#
# With 2 CPUs, a FUSE file system shares them between the workers and its daemon, so its
# ceiling is well below 2x: memfs shows what the FUSE path itself allows. See
# examples/metarate.rs for the phases. Needs root and /dev/fuse.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

WORKERS=1,2,4 FILES=20000 ROUNDS=1 FS_LIST="dualfs ext4 fuse2fs memfs" SIZE=8G OUT="" THREADS="" CEILING="" PIN=""
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --workers) WORKERS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --fs) FS_LIST=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --ceiling) CEILING=$2; shift 2 ;;
        --pin) PIN=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST
FS_LIST=$(bench_fs_threads_list "$FS_LIST" "$THREADS")

bench_init
bench_install fuse2fs e2fsprogs
[ -n "$OUT" ] && bench_install gnuplot-nox
bench_build
bench_example metarate
METARATE=$BENCH_EXAMPLE
bench_out_init "$OUT" metarate
# shellcheck disable=SC2086
FS_LIST=$(bench_available $FS_LIST)
[ -n "$FS_LIST" ] || bench_die "no file system to run on"
if [ -z "$CEILING" ]; then
    for c in memfs-ll-ring memfs memfs-ll; do
        case " $FS_LIST " in *" $c "*) CEILING=$c; break ;; esac
    done
fi
case " $FS_LIST " in *" $CEILING "*) ;; *) CEILING="" ;; esac

declare -A R=() # "fs|workers|phase" -> ops/s
for fs in $FS_LIST; do
    mnt="$BENCH_TMP/mnt-$fs"
    bench_log "$(bench_fs_label "$fs"): mkfs + mount"
    fs_mount "$fs" "$mnt" "$SIZE"
    bench_log "$(bench_fs_label "$fs"): workers $WORKERS, $FILES files each, $(bench_rounds best "$ROUNDS")"
    while read -r _ w p r; do
        R[$fs|${w#workers=}|${p#phase=}]=${r#ops_per_sec=}
    done < <(${PIN:+taskset -c "$PIN"} "$METARATE" "$mnt" --workers "$WORKERS" --files "$FILES" --rounds "$ROUNDS")
    fs_umount "$fs" "$mnt"
done

IFS=, read -r -a WS <<<"$WORKERS"
echo
echo "Metadata ops/s by concurrent workers (own directory each, $FILES files per worker," \
    "$(bench_rounds best "$ROUNDS")${PIN:+, workers on CPU $PIN}); $(nproc) CPUs, kernel $(uname -r)"
legend="scale = rate with W workers / rate with ${WS[0]}"
[ -n "$CEILING" ] && legend="$legend; x ceiling = rate / the rate of $(bench_fs_label "$CEILING") at W=${WS[${#WS[@]} - 1]}"
echo "$legend"
for phase in create stat unlink; do
    echo
    printf '%-8s %-17s' "$phase" "file system"
    for w in "${WS[@]}"; do printf ' %9s %6s' "W=$w" "scale"; done
    [ -n "$CEILING" ] && printf ' %9s' "x ceiling"
    echo
    for fs in $FS_LIST; do
        printf '%-8s %-17s' "" "$(bench_fs_label "$fs")"
        for w in "${WS[@]}"; do
            printf ' %9s %6s' "${R[$fs|$w|$phase]:-n/a}" "$(bench_ratio "${R[$fs|$w|$phase]:-}" "${R[$fs|${WS[0]}|$phase]:-}")"
        done
        last=${WS[${#WS[@]} - 1]}
        [ -n "$CEILING" ] && printf ' %9s' "$(bench_ratio "${R[$fs|$last|$phase]:-}" "${R[$CEILING|$last|$phase]:-}")"
        echo
    done
done
bench_print_skipped
for fs in $FS_LIST; do
    for phase in create stat unlink; do
        for w in "${WS[@]}"; do
            r=${R[$fs|$w|$phase]:-}
            bench_row "$fs" "$phase W=$w" ops_per_sec "$r" ops/s
            # The chart's figure: time per operation (lower is better, as in the paper's charts).
            bench_row "$fs" "$phase W=$w" us_per_op "$(awk -v r="$r" 'BEGIN { if (r + 0 > 0) printf "%.3f", 1e6 / r }')" us
        done
    done
done
bench_chart us_per_op "Metadata rates: $FILES files per worker, workers ${WORKERS//,/, } ($(bench_rounds best "$ROUNDS"))" "time per operation"
