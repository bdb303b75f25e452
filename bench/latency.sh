#!/usr/bin/env bash
# Tail latency of single operations, idle and under load (examples/latency.rs): open + read
# 4 KiB of a cached file, stat of a cached file, create of an empty file, each timed one by
# one; p50, p99 and the maximum, first with nothing else running, then while another process
# writes fsync'd 16 MiB files and makes bursts of creates and unlinks. In one run, three
# variants:
#
#   plain    DualFS, kernel ext4 (loop device) and memfs (the FUSE ceiling) on fast devices;
#   slow     every I/O of DualFS's metadata device waits 5 ms (an HDD-like device: the
#            metadata image sits on delayfs, a FUSE pass-through of bench/fuse-tools that
#            delays each read, write and fsync), with kernel ext4 on a loop device over a
#            delayfs file beside it (every one of its I/Os waits the same);
#   cleaner  DualFS on a small metadata device (256 MiB) filled with small files until the
#            log is at 81% utilization (or 2 points below the mount's live limit, beyond
#            which writers get ENOSPC, when that is lower), the load being bursts of
#            creates and unlinks of small files (churn), so the cleaner must work during the
#            measurement; prints the
#            utilization seen and the cleaning passes that ran, and of those the ones that
#            ran in an operation's write path, beside operations (the mount's cleaner
#            thread), and the operations that waited for room (from `dualfs-cleaner --status
#            --json`, when the mount reports them). 256 MiB: the reserve is a number of
#            segments (it grows only with the meta files), so on a 64 MiB log writers stop at
#            0.76 utilization and 80% cannot be held.
#
#   bench/latency.sh                          # all three variants
#   bench/latency.sh --variant plain,cleaner  # some of them
#   bench/latency.sh --samples 1000 --files 500 --out DIR
#
# Options: --variant LIST (plain,slow,cleaner), --fs "LIST" (the plain variant's file systems,
# default "dualfs ext4 memfs"), --samples N (timed operations of each kind per phase, default
# 2000), --files N (cached files read and stat'ed, default 1000), --pause-us US (between
# rounds, default 500), --delay-ms MS (the slow variant's delay, default 5), --meta-size SIZE
# (the cleaner variant's metadata device, default 256M), --utilization U (the fill target,
# default 0.81), --max-live N (most files the fill makes, default 1000000), --out DIR
# (DIR/latency.csv, DIR/latency.png: p99 over ext4's, DIR/latency-max.png: maxima).
#
# Ratios printed: "x idle" = loaded p99 / idle p99 of the same file system; "max x ext4" =
# loaded maximum / kernel ext4's loaded maximum in the same run (plain variant). Figures of
# one run only are comparable: the machine's load moves them.
#
# Needs root and /dev/fuse; installs e2fsprogs and gnuplot-nox with apt-get if missing.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

VARIANTS=plain,slow,cleaner FS_LIST="dualfs ext4 memfs" SAMPLES=2000 FILES=1000 PAUSE_US=500
DELAY=5 META_SMALL=256M UTIL_TARGET=0.81 MAX_LIVE=1000000 OUT="" SIZE=4G
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --variant) VARIANTS=$2; shift 2 ;;
        --fs) FS_LIST=$2; shift 2 ;;
        --samples) SAMPLES=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --pause-us) PAUSE_US=$2; shift 2 ;;
        --delay-ms) DELAY=$2; shift 2 ;;
        --meta-size) META_SMALL=$2; shift 2 ;;
        --utilization) UTIL_TARGET=$2; shift 2 ;;
        --max-live) MAX_LIVE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
for v in ${VARIANTS//,/ }; do
    case "$v" in plain | slow | cleaner) ;; *) echo "unknown variant $v" >&2; usage 2 ;; esac
done
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST
export BENCH_DELAY_MS=$DELAY

bench_init
bench_install e2fsprogs python3
[ -n "$OUT" ] && bench_install gnuplot-nox
bench_build
bench_example latency
LAT=$BENCH_EXAMPLE
bench_out_init "$OUT" latency

declare -A L=()      # "key|op|phase|stat" -> microseconds
declare -A EXTRA=()  # key -> notes printed under the tables
RAN=()               # keys in the order they ran

# The mount's cleaner status as "utilization passes write_path_passes live_limit
# background_passes room_waits" (n/a for what it lacks; live_limit: the utilization beyond
# which writers get ENOSPC; room_waits: operations that found the log short of room).
cleaner_status() { # MNT
    "$CLEANER_BIN" --status --json "$1" 2>/dev/null | python3 -c '
import json, sys
try:
    s = json.load(sys.stdin)
except Exception:
    print("n/a n/a n/a n/a n/a n/a"); sys.exit()
c = s.get("counters", {})
log = s.get("log_segments", 0) * s.get("segment_bytes", 0)
limit = s["live_limit_bytes"] / log if log and "live_limit_bytes" in s else "n/a"
print(s.get("utilization", "n/a"), c.get("passes", "n/a"), c.get("write_path_passes", c.get("emergency_passes", "n/a")), limit,
      c.get("background_passes", "n/a"), c.get("room_waits", "n/a"))'
}

# run_latency KEY FS LOADKIND: mount FS, (cleaner variant: fill), measure, unmount.
run_latency() {
    local key=$1 fs=$2 kind=$3 mnt="$BENCH_TMP/mnt-$1" out="$BENCH_TMP/latency-$1.out" poll_pid=""
    bench_log "$(bench_fs_label "$key"): mkfs + mount"
    fs_mount "$fs" "$mnt" "$SIZE"
    if [ "$key" = dualfs-small ]; then
        # Fill with small files until the log's utilization reaches the target; if the mount
        # refuses first (ENOSPC: its live limit), give the last 2,000 files back, so that the
        # measurement's own files fit, and go on at the utilization reached.
        local util limit live=0 why="target reached" target=$UTIL_TARGET
        read -r util _ _ limit _ < <(cleaner_status "$mnt")
        # Writers get ENOSPC beyond the live limit (which moves as the log fills): aim a little
        # below it when it is lower than the target (the measurement's own files fit in 2
        # points of a 256 MiB log).
        aim() { awk -v t="$UTIL_TARGET" -v l="$limit" 'BEGIN { if (l != "n/a" && l - 0.02 < t) t = l - 0.02; print t }'; }
        # Big steps while far from the aim, 2,000 files near it.
        step() { awk -v u="$util" -v t="$target" 'BEGIN { print (u != "n/a" && u < t - 0.05) ? 20000 : 2000 }'; }
        target=$(aim)
        while awk -v u="$util" -v t="$target" 'BEGIN { exit !(u == "n/a" || u < t) }'; do
            if [ "$live" -ge "$MAX_LIVE" ]; then why="--max-live reached"; break; fi
            local count
            count=$(step)
            if ! "$LAT" fill "$mnt" --count "$count" --size 100 2>"$BENCH_TMP/fill.err"; then
                why="the mount refused more ($(tail -n 1 "$BENCH_TMP/fill.err" | sed 's/.*: //')); the last 2,000 files removed"
                (cd "$mnt/live" && ls | sort -V | tail -n 21 | xargs rm -rf)
                live=$(find "$mnt/live" -type f | wc -l)
                # Until the cleaner has made room, creates may still be refused: wait for it.
                local waited=0
                until mkdir "$mnt/.room" 2>/dev/null; do
                    waited=$((waited + 1))
                    if [ $waited -gt 120 ]; then
                        EXTRA[$key]="not measured: after $live live files the mount refused creates (ENOSPC) and still did 60 s after 2,000 files were deleted (utilization shown: $util, live limit $limit)"
                        bench_log "$(bench_fs_label "$key"): ${EXTRA[$key]}"
                        RAN+=("$key")
                        fs_umount "$fs" "$mnt"
                        return 0
                    fi
                    sleep 0.5
                done
                rmdir "$mnt/.room"
                why="$why; creates were refused for another $((waited / 2)) s after that"
                sleep 6   # a flush interval: the utilization figure catches up
                read -r util _ _ limit _ < <(cleaner_status "$mnt")
                break
            fi
            live=$((live + count))
            sleep 1
            read -r util _ _ limit _ < <(cleaner_status "$mnt")
            target=$(aim)
            bench_log "$(bench_fs_label "$key"): $live live files, utilization $util (live limit $limit)"
        done
        EXTRA[$key]="fill: $live live files of 100 B on a $META_SMALL metadata device, utilization $util (target $target), $why; the mount's live limit (writers get ENOSPC beyond it): $limit"
        bench_row "$key" fill live_files "$live" files
        bench_row "$key" fill utilization "$util" fraction
        bench_row "$key" fill live_limit "$limit" fraction
        # Sample the cleaner's figures every half second while the measurement runs.
        (while mountpoint -q "$mnt"; do cleaner_status "$mnt"; sleep 0.5; done) >"$BENCH_TMP/poll-$key" 2>/dev/null &
        poll_pid=$!
    fi
    bench_log "$(bench_fs_label "$key"): measuring ($SAMPLES samples per operation and phase, load: $kind)"
    "$LAT" run "$mnt" --files "$FILES" --samples "$SAMPLES" --pause-us "$PAUSE_US" --load "$kind" >"$out" ||
        { cat "$out" >&2; bench_die "$(bench_fs_label "$key"): the latency run failed"; }
    if [ -n "$poll_pid" ]; then
        kill "$poll_pid" 2>/dev/null; wait "$poll_pid" 2>/dev/null || true
        local first last
        first=$(awk '$2 != "n/a" { print; exit }' "$BENCH_TMP/poll-$key")
        last=$(awk '$2 != "n/a" { l = $0 } END { print l }' "$BENCH_TMP/poll-$key")
        read -r umin umax < <(awk '$1 != "n/a" { if (min == "" || $1 < min) min = $1; if ($1 > max) max = $1 }
            END { print (min == "" ? "n/a" : min), (max == "" ? "n/a" : max) }' "$BENCH_TMP/poll-$key")
        local passes="n/a" emergency="n/a" background="n/a" waits="n/a"
        # The change of field N of the status line between the first and the last sample.
        delta() { awk -v a="${first#* }" -v b="${last#* }" -v n="$1" 'BEGIN { split(a, x, " "); split(b, y, " "); if (y[n] == "n/a" || y[n] == "") print "n/a"; else print y[n] - x[n] }'; }
        if [ -n "$first" ] && [ -n "$last" ]; then
            passes=$(delta 1) emergency=$(delta 2) background=$(delta 4) waits=$(delta 5)
        fi
        EXTRA[$key]="${EXTRA[$key]}; during the measurement: utilization $umin-$umax, cleaning passes $passes: in an operation's write path $emergency, beside operations (the mount's thread) $background; operations that waited for room: $waits"
        [ "$emergency" = n/a ] && EXTRA[$key]="${EXTRA[$key]} (this build's --status does not count write-path passes)"
        bench_row "$key" measurement utilization_min "$umin" fraction
        bench_row "$key" measurement utilization_max "$umax" fraction
        bench_row "$key" measurement cleaning_passes "$passes" passes
        bench_row "$key" measurement write_path_passes "$emergency" passes
        bench_row "$key" measurement background_passes "$background" passes
        bench_row "$key" measurement room_waits "$waits" operations
    fi
    fs_umount "$fs" "$mnt"
    local line k v phase op
    while read -r line; do
        case "$line" in
            latency\ *)
                phase="" op=""
                for k in $line; do
                    case "$k" in
                        phase=*) phase=${k#phase=} ;;
                        op=*) op=${k#op=} ;;
                        *_us=*) v=${k#*=}; L[$key|$op|$phase|${k%%=*}]=$v; bench_row "$key" "$op $phase" "${k%%=*}" "$v" us ;;
                    esac
                done ;;
            load\ *) EXTRA[$key]="${EXTRA[$key]:+${EXTRA[$key]}; }load: ${line#load }" ;;
            errors\ *) EXTRA[$key]="${EXTRA[$key]:+${EXTRA[$key]}; }${line}" ;;
        esac
    done <"$out"
    RAN+=("$key")
    bench_log "$(bench_fs_label "$key"): done"
}

for v in ${VARIANTS//,/ }; do
    case "$v" in
        plain)
            # shellcheck disable=SC2086
            for fs in $(bench_available $FS_LIST); do run_latency "$fs" "$fs" full; done ;;
        slow)
            for fs in $(bench_available dualfs-slow ext4-slow); do run_latency "$fs" "$fs" full; done ;;
        cleaner)
            BENCH_META_SIZE=$META_SMALL run_latency dualfs-small dualfs churn ;;
    esac
done

label() { case "$1" in dualfs-small) echo "DualFS $META_SMALL meta" ;; *) bench_fs_label "$1" ;; esac; }
echo
echo "Tail latency, microseconds: $SAMPLES timed operations of each kind per phase, $FILES cached files;" \
    "loaded = beside a process writing fsync'd 16 MiB files and bursts of creates/unlinks (the"
echo "cleaner variant: bursts of 2,000 creates/unlinks of 100-byte files). slow = every I/O of the" \
    "metadata device (DualFS) or of the whole device (ext4) waits $DELAY ms. $(nproc) CPUs, kernel $(uname -r)."
echo "x idle = loaded p99 / idle p99; max x ext4 = loaded max / kernel ext4's loaded max in this run"
for op in read stat create; do
    echo
    printf '%-7s %-18s %9s %9s %9s | %9s %9s %9s | %7s %10s\n' "$op" "file system" "idle p50" "p99" "max" \
        "loaded p50" "p99" "max" "x idle" "max x ext4"
    for key in "${RAN[@]}"; do
        printf '%-7s %-18s %9s %9s %9s | %9s %9s %9s | %7s %10s\n' "" "$(label "$key")" \
            "${L[$key|$op|idle|p50_us]:-n/a}" "${L[$key|$op|idle|p99_us]:-n/a}" "${L[$key|$op|idle|max_us]:-n/a}" \
            "${L[$key|$op|loaded|p50_us]:-n/a}" "${L[$key|$op|loaded|p99_us]:-n/a}" "${L[$key|$op|loaded|max_us]:-n/a}" \
            "$(bench_ratio "${L[$key|$op|loaded|p99_us]:-}" "${L[$key|$op|idle|p99_us]:-}")" \
            "$(bench_ratio "${L[$key|$op|loaded|max_us]:-}" "${L[ext4|$op|loaded|max_us]:-}")"
    done
done
echo
for key in "${RAN[@]}"; do
    [ -n "${EXTRA[$key]:-}" ] && printf '%s: %s\n' "$(label "$key")" "${EXTRA[$key]}"
done
bench_print_skipped
bench_chart p99_us "Tail latency: p99 of single operations, idle and loaded" "p99 latency"
BENCH_CHART_SUFFIX=max bench_chart max_us "Tail latency: the slowest single operation, idle and loaded" "maximum latency"
