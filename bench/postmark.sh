#!/usr/bin/env bash
# PostMark on DualFS (with and without -o writeback_cache), kernel ext2/ext3/ext4 on loop
# devices, fuse2fs (on an ext4 image) and memfs (the in-memory FUSE ceiling), all in one run,
# with a table of the figures and each file system's ratio to DualFS.
#
#   bench/postmark.sh                      # 20,000 files, 100 subdirectories, 50,000 transactions
#   bench/postmark.sh --repeat 3           # three rounds (file systems interleaved), medians
#   bench/postmark.sh --files 5000 --transactions 10000 --subdirs 10
#   bench/postmark.sh --fs "dualfs ext4 memfs"      # a subset
#   bench/postmark.sh --procs 4            # 4 PostMarks at once, each in its own directory of the mount
#   bench/postmark.sh --perf dualfs        # also perf record -g the DualFS daemon during its run
#   bench/postmark.sh --fuse-ops           # count the FUSE requests of each FUSE file system, by kind
#   bench/postmark.sh --threads 2,4,8      # each DualFS with 2, 4 and 8 FUSE threads (dualfs-t2, ...)
#   bench/postmark.sh --out DIR            # also DIR/postmark.csv (every figure) and DIR/postmark.png
#                                          # (with --procs N > 1: DIR/postmark-Nprocs.csv and .png)
#
# Options: --files F, --transactions T, --subdirs S, --size MIN-MAX (bytes, default 500-10000),
# --procs N (default 1), --repeat N, --fs "LIST" (default: dualfs dualfs-wb ext2 ext3 ext4
# fuse2fs memfs), --perf "LIST", --fuse-ops, --image-size SIZE (each file system's image,
# default 4G), --threads LIST (each DualFS of --fs once per count of FUSE threads, the mount's
# --threads N: dualfs-tN, dualfs-wb-tN; default the daemon's own count), --out DIR.
#
# Defaults are those of the DualFS paper: 20,000 files of 500 B-10 KB in 100 subdirectories,
# 50,000 transactions; PostMark's other settings stay at its defaults (512-byte reads and
# writes, buffered stdio, seed 42), so every file system gets the same operations.
#
# PostMark counts time in whole seconds (time(2)), so its own figures are coarse for fast file
# systems; the script also timestamps PostMark's progress lines and reports the wall-clock
# time of each phase (create = subdirectories + files, transactions, delete) and "umount":
# from the unmount call until everything is on the images (kernel: sync; DualFS: its final
# checkpoint; fuse2fs/memfs: the daemon's exit). Ratios are speed relative to DualFS:
# DualFS's time / this one's time (above 1 = faster than DualFS). The chart (--out) shows each
# phase's time over ext2's, as the DualFS paper's figures do; "t/memfs" is the other way round,
# this one's time over memfs's (the FUSE ceiling's): 1.10 = 10% slower than the ceiling.
#
# --procs N starts N PostMark processes together on the same mount, each with the settings
# above in its own directory (p1, p2, ...: its "set location"), so the file system serves N
# times the files and transactions at once. "total" is then the wall time until the last of
# them finished, each process's own wall time is listed beside it, create/trans./delete are the
# longest of the N processes' phases, tx/s and PostMark's rates are summed over them.
#
# A file system that cannot be set up here (memfs when bench/fuse-tools does not build, fuse2fs
# without the package) is skipped with a note.
#
# Needs root and /dev/fuse; installs postmark, fuse2fs and gnuplot-nox with apt-get if missing.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

REPEAT=1 PROCS=1 FILES=20000 TRANSACTIONS=50000 SUBDIRS=100 MIN_SIZE=500 MAX_SIZE=10000
FS_LIST=$BENCH_ALL_FS PERF_FS="" SIZE=4G FUSE_OPS="" OUT="" THREADS=""
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --repeat) REPEAT=$2; shift 2 ;;
        --procs) PROCS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --transactions) TRANSACTIONS=$2; shift 2 ;;
        --subdirs) SUBDIRS=$2; shift 2 ;;
        --size) MIN_SIZE=${2%-*}; MAX_SIZE=${2#*-}; shift 2 ;;
        --fs) FS_LIST=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --perf) PERF_FS=$2; shift 2 ;;
        --fuse-ops) FUSE_OPS=1; shift ;;
        --image-size) SIZE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
[[ "$PROCS" =~ ^[1-9][0-9]*$ ]] || { echo "--procs: a number of processes, 1 or more" >&2; usage 2; }
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST
FS_LIST=$(bench_fs_threads_list "$FS_LIST" "$THREADS")

bench_init
bench_install postmark fuse2fs e2fsprogs coreutils
[ -n "$OUT" ] && bench_install gnuplot-nox
[ -n "$PERF_FS$FUSE_OPS" ] && bench_install linux-perf
bench_build
NAME=postmark
[ "$PROCS" -gt 1 ] && NAME="postmark-${PROCS}procs"
bench_out_init "$OUT" "$NAME"
# shellcheck disable=SC2086
FS_LIST=$(bench_available $FS_LIST)
[ -n "$FS_LIST" ] || bench_die "no file system to run on"

declare -A R=()  # "fs|metric|round" -> value ("fs|pK|round": process K's wall time)
LOC=()           # process K's directory (its PostMark's "set location")

# parse_log LOG T0: one PostMark's figures from its timestamped output ("FAIL" if it did not
# complete): create, transactions and delete seconds (create counted from T0, when all the
# processes were started), then PostMark's own total s, tx/s, read and write MB/s.
parse_log() {
    # PostMark scales its data rates ("702.12 kilobytes read (351.06 kilobytes per second)"):
    # every rate is turned into MB/s, and a rate it does not print is 0, so a line always has
    # seven fields.
    awk -v t0="$2" '
        function rate(line,   r, f) {
            if (!match(line, /\([0-9.]+ ([a-z]+ )?per second\)/)) return 0
            split(substr(line, RSTART + 1, RLENGTH - 2), f, " ")
            r = f[1]
            if (f[2] == "bytes") r /= 1048576
            else if (f[2] == "kilobytes") r /= 1024
            else if (f[2] == "gigabytes") r *= 1024
            return r
        }
        BEGIN { pmtps = rd = wr = 0 }
        /Creating files\.\.\.Done/ { files = $1 }
        /Performing transactions.*Done/ { tx = $1 }
        /Deleting subdirectories\.\.\.Done/ { del = $1 }
        /seconds total/ { pmtotal = $2 }
        /seconds of transactions/ { pmtps = rate($0) }
        /bytes read \(/ { rd = rate($0) }
        /bytes written \(/ { wr = rate($0) }
        END {
            if (files == "" || tx == "" || del == "" || pmtotal == "") { print "FAIL"; exit }
            printf "%.3f %.3f %.3f %s %.0f %.3f %.3f\n", files - t0, tx - files, del - tx, pmtotal, pmtps, rd, wr
        }' "$1"
}

# One PostMark run (PROCS processes started together) on a fresh FS; fills R for this round.
# With one process it works in the mount's root, with more each in its own directory p1, p2...
run_one() {
    local fs=$1 round=$2 mnt="$BENCH_TMP/mnt-$1" out="$BENCH_TMP/postmark-$1-$2" t0 k
    local pids=() failed=""
    bench_log "$(bench_fs_label "$fs"): mkfs + mount"
    fs_mount "$fs" "$mnt" "$SIZE"
    for k in $(seq 1 "$PROCS"); do
        if [ "$PROCS" = 1 ]; then LOC[$k]=$mnt; else LOC[$k]="$mnt/p$k"; mkdir "${LOC[$k]}"; fi
        rm -f "$out-p$k.log" "$out-p$k.end"
    done
    sync
    bench_perf_wanted "$fs" "$PERF_FS" && bench_perf_start "$fs" "$mnt" "postmark-$fs-$round"
    [ -n "$FUSE_OPS" ] && bench_is_fuse "$fs" && bench_fuseops_start "$mnt"
    bench_log "$(bench_fs_label "$fs"): PostMark round $round$([ "$PROCS" -gt 1 ] && echo ", $PROCS processes")"
    t0=$(bench_now)
    for k in $(seq 1 "$PROCS"); do
        {
            bench_postmark "${LOC[$k]}" "$out-p$k.log" "$FILES" "$TRANSACTIONS" "$SUBDIRS" "$MIN_SIZE" "$MAX_SIZE"
            echo "$EPOCHREALTIME" >"$out-p$k.end"
        } &
        pids+=($!)
    done
    for k in "${!pids[@]}"; do wait "${pids[$k]}" || failed="$failed $((k + 1))"; done
    R[$fs|wall|$round]=$(bench_since "$t0")
    bench_perf_wanted "$fs" "$PERF_FS" && bench_perf_stop
    if [ -n "$FUSE_OPS" ] && bench_is_fuse "$fs"; then
        bench_fuseops_stop
        R[$fs|ops|$round]=$BENCH_FUSEOPS
        bench_log "$(bench_fs_label "$fs"): FUSE requests: $BENCH_FUSEOPS"
    fi
    fs_umount "$fs" "$mnt"
    R[$fs|umount|$round]=$BENCH_UMOUNT_SECS
    # Phase ends from the timestamps; PostMark's own figures from its report. With several
    # processes: each phase the longest of theirs, the rates and MB/s summed over them.
    local parsed all=""
    for k in $(seq 1 "$PROCS"); do
        parsed=$(parse_log "$out-p$k.log" "$t0")
        if [ "$parsed" = FAIL ] || [ ! -s "$out-p$k.end" ]; then
            bench_log "$(bench_fs_label "$fs"): PostMark$([ "$PROCS" -gt 1 ] && echo " process $k") did not complete${failed:+ (failed:$failed)}; its output:"
            cat "$out-p$k.log" >&2
            return 0
        fi
        R[$fs|p$k|$round]=$(awk -v a="$t0" -v b="$(cat "$out-p$k.end")" 'BEGIN { printf "%.3f", b - a }')
        all="$all$parsed ${R[$fs|p$k|$round]}"$'\n'
    done
    local vals i=0
    read -r -a vals <<<"$(awk -v n="$TRANSACTIONS" '
        NF == 8 { for (i = 1; i <= 3; i++) if ($i > m[i]) m[i] = $i
                  if ($4 > pt) pt = $4
                  ps += $5; rd += $6; wr += $7; txps += ($2 > 0 ? n / $2 : 0) }
        END { printf "%.3f %.3f %.3f %s %s %s %s %.0f\n", m[1], m[2], m[3], pt, ps, rd, wr, txps }' <<<"$all")"
    for k in create tx delete pmtotal pmtps rd wr txps; do R[$fs|$k|$round]=${vals[$i]}; i=$((i + 1)); done
    R[$fs|ok|$round]=1
    local each=""
    [ "$PROCS" -gt 1 ] && for k in $(seq 1 "$PROCS"); do each="$each ${R[$fs|p$k|$round]}"; done
    bench_log "$(bench_fs_label "$fs"): wall ${R[$fs|wall|$round]} s (create ${R[$fs|create|$round]}, transactions ${R[$fs|tx|$round]}, delete ${R[$fs|delete|$round]}${each:+; each process:$each}), umount ${R[$fs|umount|$round]} s; PostMark: ${R[$fs|pmtotal|$round]} s, ${R[$fs|pmtps|$round]} tx/s"
}

for round in $(seq 1 "$REPEAT"); do
    for fs in $FS_LIST; do run_one "$fs" "$round"; done
done

med() { # fs metric -> median over rounds where the run completed
    local v=() r
    for r in $(seq 1 "$REPEAT"); do
        if [ -n "${R[$1|ok|$r]:-}" ]; then v+=("${R[$1|$2|$r]}"); fi
    done
    bench_median "${v[@]}"
}
REF=dualfs
case " $FS_LIST " in *" dualfs "*) ;; *) REF=${FS_LIST%% *} ;; esac
declare -A M=()
for fs in $FS_LIST; do
    for k in wall create tx delete umount txps pmtotal pmtps rd wr; do M[$fs|$k]=$(med "$fs" "$k"); done
    for k in $(seq 1 "$PROCS"); do M[$fs|p$k]=$(med "$fs" "p$k"); done
done
CEIL=""
case " $FS_LIST " in *" memfs "*) CEIL=memfs ;; esac

echo
if [ "$PROCS" -gt 1 ]; then
    echo "PostMark, $PROCS processes at once (each in its own directory of the mount), each:" \
        "$FILES files of $MIN_SIZE-$MAX_SIZE B in $SUBDIRS subdirectories, $TRANSACTIONS transactions;" \
        "$(bench_rounds median "$REPEAT"); $(nproc) CPUs, kernel $(uname -r)"
else
    echo "PostMark: $FILES files of $MIN_SIZE-$MAX_SIZE B in $SUBDIRS subdirectories, $TRANSACTIONS transactions;" \
        "$(bench_rounds median "$REPEAT"); $(nproc) CPUs, kernel $(uname -r)"
fi
echo "x $(bench_fs_label "$REF") = $(bench_fs_label "$REF")'s time / this one's (or rate / its rate): above 1 = faster than $(bench_fs_label "$REF")"
[ -n "$CEIL" ] && echo "t/memfs = this one's time / memfs's (the FUSE ceiling's): above 1 = slower than the ceiling"
echo
echo "As PostMark reports them (whole seconds$([ "$PROCS" -gt 1 ] && echo "; total: the longest process's, rates: summed over the $PROCS")):"
# The ratio columns are as wide as their headings (a DualFS with its thread count is a long name).
RW=$((${#REF} + 2 > 10 ? ${#REF} + 2 : 10)) RW2=$((${#REF} + 5 > 10 ? ${#REF} + 5 : 10))
printf '%-17s %8s %8s %10s %10s %*s\n' "file system" "total s" "tx/s" "read MB/s" "write MB/s" "$RW" "x $REF"
for fs in $FS_LIST; do
    printf '%-17s %8s %8s %10s %10s %*s\n' "$(bench_fs_label "$fs")" "${M[$fs|pmtotal]%.*}" "${M[$fs|pmtps]%.*}" \
        "${M[$fs|rd]}" "${M[$fs|wr]}" "$RW" "$(bench_ratio "${M[$fs|pmtps]}" "${M[$REF|pmtps]}")"
done
echo
if [ "$PROCS" -gt 1 ]; then
    echo "Wall clock, seconds (total = until all $PROCS processes finished; create/trans./delete = the longest"
    echo "process's phase, from the progress lines; tx/s summed; each = every process's own total;"
    echo "umount = until all is on the images):"
else
    echo "Wall clock, seconds (PostMark's phases from its progress lines; umount = until all is on the images):"
fi
printf '%-17s %8s %8s %8s %8s %9s %8s %*s %*s' "file system" "total" "create" "trans." "delete" "tx/s" "umount" \
    "$RW" "x $REF" "$RW2" "x $REF+um"
[ -n "$CEIL" ] && printf ' %8s' "t/memfs"
[ "$PROCS" -gt 1 ] && printf '   %s' "each process"
echo
for fs in $FS_LIST; do
    tot_um=$(awk -v a="${M[$fs|wall]}" -v b="${M[$fs|umount]}" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/) print a + b; else print "n/a" }')
    ref_um=$(awk -v a="${M[$REF|wall]}" -v b="${M[$REF|umount]}" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/) print a + b; else print "n/a" }')
    printf '%-17s %8s %8s %8s %8s %9s %8s %*s %*s' "$(bench_fs_label "$fs")" "${M[$fs|wall]}" "${M[$fs|create]}" \
        "${M[$fs|tx]}" "${M[$fs|delete]}" "${M[$fs|txps]%.*}" "${M[$fs|umount]}" \
        "$RW" "$(bench_ratio "${M[$REF|wall]}" "${M[$fs|wall]}")" "$RW2" "$(bench_ratio "$ref_um" "$tot_um")"
    [ -n "$CEIL" ] && printf ' %8s' "$(bench_ratio "${M[$fs|wall]}" "${M[$CEIL|wall]}")"
    if [ "$PROCS" -gt 1 ]; then
        printf '  '
        for k in $(seq 1 "$PROCS"); do printf ' %s' "${M[$fs|p$k]}"; done
    fi
    echo
done
if [ "$REPEAT" -gt 1 ]; then
    echo
    echo "Every round, wall seconds total (umount):"
    for fs in $FS_LIST; do
        line=""
        for r in $(seq 1 "$REPEAT"); do line="$line ${R[$fs|wall|$r]:-n/a} (${R[$fs|umount|$r]:-n/a})"; done
        printf '%-17s%s\n' "$(bench_fs_label "$fs")" "$line"
    done
fi
bench_print_skipped
for fs in $FS_LIST; do
    for k in create tx delete umount; do bench_row "$fs" "$([ $k = tx ] && echo transactions || echo $k)" seconds "${M[$fs|$k]}" s; done
    bench_row "$fs" total seconds "${M[$fs|wall]}" s
    bench_row "$fs" transactions tx_per_sec "${M[$fs|txps]}" tx/s
    bench_row "$fs" postmark-total seconds_postmark "${M[$fs|pmtotal]}" s
    bench_row "$fs" postmark-transactions tx_per_sec_postmark "${M[$fs|pmtps]}" tx/s
    bench_row "$fs" postmark-read mb_per_sec "${M[$fs|rd]}" MB/s
    bench_row "$fs" postmark-write mb_per_sec "${M[$fs|wr]}" MB/s
    [ -n "$CEIL" ] && bench_row "$fs" total time_over_memfs "$(bench_ratio "${M[$fs|wall]}" "${M[$CEIL|wall]}")" ratio
    if [ "$PROCS" -gt 1 ]; then
        for k in $(seq 1 "$PROCS"); do bench_row "$fs" "process $k" seconds_process "${M[$fs|p$k]}" s; done
    fi
done
bench_chart seconds "PostMark$([ "$PROCS" -gt 1 ] && echo ", $PROCS processes at once, each"): $FILES files, $SUBDIRS subdirectories, $TRANSACTIONS transactions ($(bench_rounds median "$REPEAT"))" time
if [ -n "$FUSE_OPS" ]; then
    echo
    echo "FUSE requests during the run (round 1): total, then by kind:"
    for fs in $FS_LIST; do
        bench_is_fuse "$fs" && printf '%-17s %s\n' "$(bench_fs_label "$fs")" "${R[$fs|ops|1]:-n/a}"
    done
fi
