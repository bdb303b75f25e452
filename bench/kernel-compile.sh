#!/usr/bin/env bash
# Kernel compile on DualFS (with and without -o writeback_cache), kernel ext2/ext3/ext4 on loop
# devices, fuse2fs (on an ext4 image) and memfs (the in-memory FUSE ceiling), all in one run:
# unpack Debian's linux-source tree onto each, scan it (find, grep -r), configure, build, make
# clean, rm -rf, unmount; each phase timed separately, with a table and each file system's
# ratio to DualFS.
#
#   bench/kernel-compile.sh                        # tinyconfig, make -j2, one round
#   bench/kernel-compile.sh --config defconfig     # the default configuration (much longer)
#   bench/kernel-compile.sh --repeat 3             # three rounds (file systems interleaved), medians
#   bench/kernel-compile.sh --fs "dualfs ext4"     # a subset
#   bench/kernel-compile.sh --jobs 4               # make -j4 (default: -j2)
#   bench/kernel-compile.sh --perf dualfs          # perf record -g the DualFS daemon in each phase
#   bench/kernel-compile.sh --fuse-ops             # count each FUSE file system's requests per phase
#   bench/kernel-compile.sh --out DIR              # also DIR/kernel-compile.csv and .png
#
# Options: --config tinyconfig|defconfig|allnoconfig, --jobs N, --repeat N, --fs "LIST",
# --perf "LIST", --fuse-ops, --image-size SIZE (default 24G), --tarball FILE (.tar, .tar.xz or
# .tar.gz of a kernel tree; default Debian's /usr/src/linux-source-*.tar.xz), --no-build
# (unpack, scans and rm only), --out DIR.
#
# The tarball (/usr/src/linux-source-*.tar.xz, package linux-source) is decompressed once into
# the temporary folder, so "unpack" times `tar -xf` of a plain tar that is in the page cache:
# file creation, not xz. Phases: unpack (tar -xf), find (`find TREE`, warm: the second of two
# runs), grep (`grep -r -c` of a word over every file of the tree, warm: the second of two
# runs), config (make CONFIG), build (make -jN), clean (make clean), rm (rm -rf of the tree),
# umount (from the unmount call until everything is on the images). "total" is the sum of
# unpack, config, build, clean, rm and umount (the scans are apart, as they were added later).
# A phase that fails is reported as n/a, with the reason under the table (when tar reports
# errors the rest still runs on the partial tree, marked *). Ratios are speed relative to
# DualFS: DualFS's time / this one's (above 1 = faster than DualFS); the chart (--out) shows
# every phase's time over ext2's.
#
# Memory: for each FUSE file system (DualFS, DualFS wbcache, fuse2fs, memfs) the peak resident
# memory of its daemon during the unpack: VmHWM of /proc/PID/status right after tar, reset to
# the resident size just before it with `echo 5 > /proc/PID/clear_refs` (where the kernel does
# not allow that, the peak since the mount, marked so), and VmRSS then. Beside DualFS's: its
# cache budget from the mount options (cache_size=SIZE, in DUALFS_OPTS or the default that
# `dualfs mount --help` states): tree nodes up to cache_size/2, inodes with their indirect
# blocks up to cache_size/2 (trimmed at each flush), inode blocks read from the log up to
# cache_size/8, so 1.125 x cache_size in all. The file system's tables (IFile, segment usage,
# bitmaps), each FUSE thread's request buffer and the program itself are outside that budget.
#
# Needs root and /dev/fuse; installs linux-source, the kernel's build dependencies and fuse2fs
# with apt-get if they are missing.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

REPEAT=1 CONFIG=tinyconfig JOBS=2 FS_LIST=$BENCH_ALL_FS PERF_FS="" SIZE=24G TARBALL="" FUSE_OPS=""
OUT="" BUILD=1
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --repeat) REPEAT=$2; shift 2 ;;
        --config) CONFIG=$2; shift 2 ;;
        --jobs | -j) JOBS=$2; shift 2 ;;
        --fs) FS_LIST=$2; shift 2 ;;
        --perf) PERF_FS=$2; shift 2 ;;
        --fuse-ops) FUSE_OPS=1; shift ;;
        --image-size) SIZE=$2; shift 2 ;;
        --tarball) TARBALL=$2; shift 2 ;;
        --no-build) BUILD=""; shift ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
case "$CONFIG" in tinyconfig | defconfig | allnoconfig) ;; *) echo "--config: tinyconfig, defconfig or allnoconfig" >&2; usage 2 ;; esac
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST

bench_init
bench_install linux-source build-essential bc flex bison libelf-dev libssl-dev xz-utils cpio \
    perl kmod time fuse2fs e2fsprogs
[ -n "$OUT" ] && bench_install gnuplot-nox
[ -n "$PERF_FS$FUSE_OPS" ] && bench_install linux-perf
bench_build
bench_out_init "$OUT" kernel-compile
# shellcheck disable=SC2086
FS_LIST=$(bench_available $FS_LIST)
[ -n "$FS_LIST" ] || bench_die "no file system to run on"

bench_kernel_tar "$TARBALL"
TAR=$BENCH_TAR TREE=$BENCH_TAR_TREE N_ENTRIES=$BENCH_TAR_ENTRIES N_SYMLINKS=$BENCH_TAR_SYMLINKS
TAR_MB=$(($(stat -c %s "$TAR") >> 20))

LOG_DIR=${BENCH_LOG_DIR:-/var/tmp/dualfs-bench-logs}   # logs of failed phases are kept there
declare -A R=()      # "fs|phase|round" -> seconds or n/a
declare -A CPU=()    # "fs|phase|user/sys/daemon|round" -> CPU seconds
declare -A OPS=()    # "fs|phase|round" -> FUSE requests (--fuse-ops)
declare -A FLAG=()   # "fs|phase" -> a mark printed after the figure
declare -A NOTE=()   # fs -> notes (reasons for n/a, partial trees)
declare -A MEM=()    # "fs|peak/after|round" -> the daemon's resident bytes; "fs|from" -> since when
PHASES="unpack find grep config build clean rm umount"
GREP_WORD=include   # in nearly every file, so grep -c reads every file to its end

note() { # fs text: remember a note once
    case "${NOTE[$1]:-}" in *"$2"*) ;; *) NOTE[$1]="${NOTE[$1]:+${NOTE[$1]}; }$2" ;; esac
}

# phase FS ROUND NAME LOG CMD...: run CMD timed, its output in LOG; R gets the time or n/a.
phase() {
    local fs=$1 round=$2 name=$3 log=$4 t0 rc=0
    shift 4
    bench_perf_wanted "$fs" "$PERF_FS" && bench_perf_start "$fs" "$MNT" "kc-$fs-$name-$round"
    [ -n "$FUSE_OPS" ] && bench_is_fuse "$fs" && bench_fuseops_start "$MNT"
    local dpid="" d0="" d1=""
    bench_is_fuse "$fs" && dpid=$(fs_daemon_pid "$fs" "$MNT") && d0=$(bench_proc_cpu "$dpid")
    t0=$(bench_now)
    /usr/bin/time -f "%U %S" -o "$log.cpu" "$@" >"$log" 2>&1 || rc=$?
    R[$fs|$name|$round]=$(bench_since "$t0")
    [ -n "$d0" ] && d1=$(bench_proc_cpu "$dpid")
    # CPU seconds: the command's user and system time (with its children), the FUSE daemon's.
    read -r CPU_U CPU_S < <(tail -n 1 "$log.cpu")
    CPU[$fs|$name|user|$round]=$CPU_U
    CPU[$fs|$name|sys|$round]=$CPU_S
    CPU[$fs|$name|daemon|$round]=$(awk -v a="$d0" -v b="$d1" 'BEGIN { if (a == "" || b == "") print "-"; else printf "%.2f\n", b - a }')
    bench_perf_wanted "$fs" "$PERF_FS" && bench_perf_stop
    if [ -n "$FUSE_OPS" ] && bench_is_fuse "$fs"; then
        bench_fuseops_stop
        OPS[$fs|$name|$round]=$BENCH_FUSEOPS
        bench_log "$(bench_fs_label "$fs"): $name FUSE requests: $BENCH_FUSEOPS"
    fi
    if [ $rc != 0 ] && [ "$name" = build ] && grep -q "bzImage is ready" "$log" &&
        grep -q "failed to create symbolic link" "$log"; then
        # Everything was built; only the final `ln -s` next to bzImage failed (no symlinks).
        FLAG[$fs|build]="+"
        note "$fs" "build (+): bzImage was built, only the final 'ln -s' of it failed (no symlinks); its time is shown"
        bench_log "$(bench_fs_label "$fs"): build ${R[$fs|$name|$round]} s (bzImage built; the final ln -s failed)"
        return 0
    fi
    if [ $rc != 0 ]; then
        R[$fs|$name|$round]="n/a"
        local why
        why=$(grep -m1 -E "error:|\*\*\*|Error [0-9]|Cannot|not implemented|not permitted|No such file" "$log" ||
            tail -n 1 "$log")
        mkdir -p "$LOG_DIR"
        cp "$log" "$LOG_DIR/kc-$fs-$name-$round.log"
        note "$fs" "$name failed: ${why:0:160}"
        bench_log "$(bench_fs_label "$fs"): $name FAILED (exit $rc): ${why:0:200} (log: $LOG_DIR/kc-$fs-$name-$round.log)"
        tail -n 5 "$log" >&2
        return 1
    fi
    bench_log "$(bench_fs_label "$fs"): $name ${R[$fs|$name|$round]} s"
}

run_one() {
    local fs=$1 round=$2 logs="$BENCH_TMP/logs-$1-$2" src partial=""
    MNT="$BENCH_TMP/mnt-$fs"
    src="$MNT/$TREE"
    mkdir -p "$logs"
    bench_log "$(bench_fs_label "$fs"): mkfs + mount (round $round)"
    fs_mount "$fs" "$MNT" "$SIZE"
    sync
    local dpid=""
    if bench_is_fuse "$fs"; then
        dpid=$(fs_daemon_pid "$fs" "$MNT" || true)
        [ -n "$dpid" ] || bench_log "$(bench_fs_label "$fs"): no daemon found, no memory figures"
        # Reset the peak to what is resident now, so VmHWM after tar is the unpack's peak.
        if [ -n "$dpid" ] && echo 5 2>/dev/null >"/proc/$dpid/clear_refs"; then MEM[$fs|from]=unpack; else MEM[$fs|from]="since mount"; fi
    fi
    if ! phase "$fs" "$round" unpack "$logs/unpack.log" tar -xf "$TAR" -C "$MNT"; then
        local n_err
        n_err=$(grep -c "Cannot\|Error" "$logs/unpack.log" || true)
        note "$fs" "tar reported $n_err errors; the phases after it ran on the partial tree (*)"
        partial="*"
    fi
    if [ -n "$dpid" ]; then
        local peak after
        read -r peak after < <(awk '/^VmHWM:/ { h = $2 * 1024 } /^VmRSS:/ { r = $2 * 1024 }
            END { printf "%s %s\n", (h == "" ? "n/a" : h), (r == "" ? "n/a" : r) }' "/proc/$dpid/status" 2>/dev/null || echo "n/a n/a")
        MEM[$fs|peak|$round]=$peak MEM[$fs|after|$round]=$after
        bench_log "$(bench_fs_label "$fs"): daemon $dpid peak RSS ($([ "${MEM[$fs|from]}" = unpack ] && echo "during unpack" || echo "since mount")) ${MEM[$fs|peak|$round]} bytes, ${MEM[$fs|after|$round]} after"
    fi
    if [ -d "$src" ]; then
        # Warm scans: the first run brings everything into the caches, the second is timed.
        # grep exits 1 when a file has no match; -c with output to a file makes it read all.
        find "$src" >/dev/null 2>&1 || true
        phase "$fs" "$round" find "$logs/find.log" find "$src" || true
        grep -r -c "$GREP_WORD" "$src" >"$logs/grep0.log" 2>&1 || true
        phase "$fs" "$round" grep "$logs/grep.log" sh -c 'grep -r -c "$1" "$2"; [ $? -le 1 ]' grep "$GREP_WORD" "$src" || true
        if [ -n "$BUILD" ]; then
            phase "$fs" "$round" config "$logs/config.log" make -C "$src" "$CONFIG" || true
            phase "$fs" "$round" build "$logs/build.log" make -C "$src" -j"$JOBS" || true
            phase "$fs" "$round" clean "$logs/clean.log" make -C "$src" clean || true
        else
            for p in config build clean; do R[$fs|$p|$round]=0; done
        fi
        phase "$fs" "$round" rm "$logs/rm.log" rm -rf "$src" || true
    else
        for p in find grep config build clean rm; do R[$fs|$p|$round]="n/a"; done
        note "$fs" "no source tree after unpack"
    fi
    fs_umount "$fs" "$MNT"
    R[$fs|umount|$round]=$BENCH_UMOUNT_SECS
    R[$fs|partial]=$partial
    bench_log "$(bench_fs_label "$fs"): umount $BENCH_UMOUNT_SECS s"
}

for round in $(seq 1 "$REPEAT"); do
    for fs in $FS_LIST; do run_one "$fs" "$round"; done
done

REF=dualfs
case " $FS_LIST " in *" dualfs "*) ;; *) REF=${FS_LIST%% *} ;; esac
declare -A M=()
for fs in $FS_LIST; do
    for p in $PHASES; do
        v=()
        for r in $(seq 1 "$REPEAT"); do v+=("${R[$fs|$p|$r]:-n/a}"); done
        M[$fs|$p]=$(bench_median "${v[@]}")
    done
    # The sum of the phases that all completed.
    M[$fs|total]=$(awk -v a="${M[$fs|unpack]}" -v b="${M[$fs|config]}" -v c="${M[$fs|build]}" -v d="${M[$fs|clean]}" \
        -v e="${M[$fs|rm]}" -v f="${M[$fs|umount]}" 'BEGIN { s = 0
        n = split(a " " b " " c " " d " " e " " f, x, " ")
        for (i = 1; i <= n; i++) { if (x[i] !~ /^[0-9.]+$/) { print "n/a"; exit } s += x[i] }
        printf "%.3f\n", s }')
done

echo
echo "Kernel compile: $TREE ($N_ENTRIES entries, $N_SYMLINKS symlinks, $TAR_MB MiB), make $CONFIG, make -j$JOBS;" \
    "$(bench_rounds median "$REPEAT"); $(nproc) CPUs, kernel $(uname -r)"
echo "Seconds per phase; x $REF = $(bench_fs_label "$REF")'s time / this one's (above 1 = faster than $(bench_fs_label "$REF"))"
echo
printf '%-17s %9s %7s %7s %8s %9s %8s %8s %8s %9s | %7s %6s %6s %7s %7s %7s\n' "file system" "unpack" "find" "grep" \
    "config" "build" "clean" "rm" "umount" "total" "unpack" "find" "grep" "build" "rm" "total"
for fs in $FS_LIST; do
    p=${R[$fs|partial]:-}
    printf '%-17s %9s %7s %7s %8s %9s %8s %8s %8s %9s | %7s %6s %6s %7s %7s %7s\n' "$(bench_fs_label "$fs")" \
        "${M[$fs|unpack]}" "${M[$fs|find]}$p" "${M[$fs|grep]}$p" \
        "${M[$fs|config]}$p" "${M[$fs|build]}$p${FLAG[$fs|build]:-}" "${M[$fs|clean]}$p" "${M[$fs|rm]}$p" \
        "${M[$fs|umount]}$p" "${M[$fs|total]}" \
        "$(bench_ratio "${M[$REF|unpack]}" "${M[$fs|unpack]}")" "$(bench_ratio "${M[$REF|find]}" "${M[$fs|find]}")" \
        "$(bench_ratio "${M[$REF|grep]}" "${M[$fs|grep]}")" "$(bench_ratio "${M[$REF|build]}" "${M[$fs|build]}")" \
        "$(bench_ratio "${M[$REF|rm]}" "${M[$fs|rm]}")" "$(bench_ratio "${M[$REF|total]}" "${M[$fs|total]}")"
done
[ -z "$BUILD" ] && echo "(--no-build: config, build and clean were not run; counted as 0)"
printf '%-17s %s\n' "" "(ratios: x $REF)"
for fs in $FS_LIST; do
    [ -n "${NOTE[$fs]:-}" ] && printf '%s: %s\n' "$(bench_fs_label "$fs")" "${NOTE[$fs]}"
done
bench_print_skipped
for fs in $FS_LIST; do
    for p in $PHASES total; do
        [ -z "$BUILD" ] && case "$p" in config | build | clean) continue ;; esac
        bench_row "$fs" "$p" seconds "${M[$fs|$p]}" s
    done
done
echo
echo "CPU seconds (median): the phase's commands user + system (with their children), and the FUSE"
echo "daemon's user + system; the build's user time is the same work everywhere, so a load change"
echo "shows there, while the file system's own cost shows in system and daemon time."
printf '%-17s %22s %22s %22s\n' "" "unpack" "build" "rm"
printf '%-17s %22s %22s %22s\n' "file system" "user/sys/daemon" "user/sys/daemon" "user/sys/daemon"
for fs in $FS_LIST; do
    line=""
    for p in unpack build rm; do
        cell=""
        for k in user sys daemon; do
            v=()
            for r in $(seq 1 "$REPEAT"); do v+=("${CPU[$fs|$p|$k|$r]:-n/a}"); done
            m=$(bench_median "${v[@]}")
            bench_row "$fs" "$p" "cpu_$k" "$m" s
            [ "$m" = n/a ] && m="-"
            cell="${cell:+$cell/}${m%0}"
        done
        line="$line $(printf '%22s' "$cell")"
    done
    printf '%-17s%s\n' "$(bench_fs_label "$fs")" "$line"
done

# DualFS's cache budget (see the header): what cache_size lets its caches hold, in bytes.
dualfs_cache_size() {
    local v
    v=$(tr ',' '\n' <<<"${DUALFS_OPTS:-}" | sed -n 's/^cache_size=//p' | tail -n 1)
    [ -n "$v" ] || v=$("$DUALFS_BIN" mount --help 2>/dev/null |
        sed -n 's/.*cache_size=SIZE.*(default \([0-9.]*[KMGT]\{0,1\}\)).*/\1/p' | head -n 1)
    [ -n "$v" ] && numfmt --from=iec "$v"
}
mib() { awk -v b="$1" 'BEGIN { if (b ~ /^[0-9.]+$/) printf "%.1f", b / 1048576; else print "n/a" }'; }
MEM_FS=""
for fs in $FS_LIST; do bench_is_fuse "$fs" && MEM_FS="$MEM_FS $fs"; done
if [ -n "$MEM_FS" ]; then
    CACHE=$(dualfs_cache_size || true)
    BUDGET=$(awk -v c="$CACHE" 'BEGIN { if (c ~ /^[0-9]+$/) printf "%.0f", c / 2 + c / 2 + c / 8; else print "n/a" }')
    echo
    echo "Resident memory of the FUSE daemon, MiB (median): peak during unpack (VmHWM after tar, reset"
    echo "with clear_refs just before it; \"since mount\" where the kernel refused the reset), and resident"
    echo "after unpack; for DualFS beside its cache budget and the peak's share of it."
    printf '%-17s %9s %11s %12s %13s %9s\n' "file system" "peak RSS" "RSS after" "peak since" "cache budget" "/ budget"
    for fs in $MEM_FS; do
        v=() a=()
        for r in $(seq 1 "$REPEAT"); do v+=("${MEM[$fs|peak|$r]:-n/a}"); a+=("${MEM[$fs|after|$r]:-n/a}"); done
        peak=$(bench_median "${v[@]}") after=$(bench_median "${a[@]}")
        budget="-" share="-"
        if bench_is_dualfs "$fs"; then budget=$(mib "$BUDGET") share=$(bench_ratio "$peak" "$BUDGET"); fi
        printf '%-17s %9s %11s %12s %13s %9s\n' "$(bench_fs_label "$fs")" "$(mib "$peak")" "$(mib "$after")" \
            "${MEM[$fs|from]:-n/a}" "$budget" "$share"
        metric=peak_rss_bytes
        [ "${MEM[$fs|from]:-}" = unpack ] || metric=peak_rss_since_mount_bytes
        bench_row "$fs" unpack "$metric" "${peak%.*}" bytes
        bench_row "$fs" "after unpack" rss_bytes "${after%.*}" bytes
        bench_is_dualfs "$fs" && bench_row "$fs" unpack cache_budget_bytes "$BUDGET" bytes
    done
    if [ "$CACHE" ]; then
        echo "DualFS's cache budget: cache_size=$(mib "$CACHE") MiB$(case ",${DUALFS_OPTS:-}," in *,cache_size=*) ;; *) echo " (the default)" ;; esac):" \
            "tree nodes $(mib $((CACHE / 2))), inodes with their indirect blocks $(mib $((CACHE / 2))), inode blocks $(mib $((CACHE / 8)))"
        echo "= $(mib "$BUDGET") MiB; outside it: the tables (IFile, segment usage, bitmaps), the FUSE threads' buffers, the program."
    else
        echo "DualFS's cache budget: unknown (no cache_size in DUALFS_OPTS, and 'dualfs mount --help' names no default)"
    fi
fi
if [ "$REPEAT" -gt 1 ]; then
    echo
    echo "Every round, seconds (unpack/build/rm):"
    for fs in $FS_LIST; do
        line=""
        for r in $(seq 1 "$REPEAT"); do line="$line ${R[$fs|unpack|$r]:-n/a}/${R[$fs|build|$r]:-n/a}/${R[$fs|rm|$r]:-n/a}"; done
        printf '%-17s%s\n' "$(bench_fs_label "$fs")" "$line"
    done
fi
if [ -n "$FUSE_OPS" ]; then
    echo
    echo "FUSE requests per phase (round 1): total, then by kind:"
    for fs in $FS_LIST; do
        bench_is_fuse "$fs" || continue
        for p in unpack find grep config build clean rm; do
            printf '%-17s %-7s %s\n' "$(bench_fs_label "$fs")" "$p" "${OPS[$fs|$p|1]:-n/a}"
        done
    done
fi
bench_chart seconds "Kernel compile: $TREE, make $CONFIG -j$JOBS ($(bench_rounds median "$REPEAT"))" time
