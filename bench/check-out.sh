#!/usr/bin/env bash
# Check what a benchmark wrote with --out DIR (CI runs it after bench/postmark.sh): DIR/NAME.csv
# exists with the CSV header of bench/lib.sh, DIR/NAME.png exists and is a PNG image, and
# every file system named has numeric figures in the CSV (at least one row of METRIC, default
# "seconds", for PHASE, default "total") and no "skipped" row. When the printed summary was
# saved beside them (DIR/NAME.txt), it names one round "1 round", not "median of 1" or "best
# of 1" (its header and the chart's title say it alike, bench_rounds). Exit 0 when all holds,
# 1 with what is missing otherwise.
#
#   bench/check-out.sh DIR NAME "FS..." [PHASE] [METRIC]
#   bench/check-out.sh /tmp/pm postmark "dualfs dualfs-wb ext2 ext3 ext4 fuse2fs memfs"
set -euo pipefail
case "${1:-}" in -h | --help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;; esac
[ $# -ge 3 ] || { echo "usage: $0 DIR NAME \"FS...\" [PHASE] [METRIC]" >&2; exit 2; }
dir=$1 name=$2 fs_list=$3 phase=${4:-total} metric=${5:-seconds}
csv="$dir/$name.csv" png="$dir/$name.png" fail=0
bad() { echo "check-out: $*" >&2; fail=1; }
if [ ! -s "$csv" ]; then
    bad "$csv is missing or empty"
elif [ "$(head -n 1 "$csv")" != "benchmark,fs,phase,metric,value,unit" ]; then
    bad "$csv: unexpected header: $(head -n 1 "$csv")"
fi
if [ ! -s "$png" ]; then
    bad "$png is missing or empty"
elif [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
    bad "$png is not a PNG image"
fi
if [ -s "$csv" ]; then
    for fs in $fs_list; do
        awk -F, -v f="$fs" 'NR > 1 && $2 == f && $3 == "all" && $4 == "skipped" { found = 1 } END { exit !found }' "$csv" &&
            bad "$fs was skipped"
        awk -F, -v f="$fs" -v p="$phase" -v m="$metric" \
            'NR > 1 && $1 != "" && $2 == f && $3 == p && $4 == m && $5 ~ /^[0-9.]+$/ { found = 1 } END { exit !found }' "$csv" ||
            bad "$csv has no $phase $metric row for $fs"
    done
fi
txt="$dir/$name.txt"
if [ -s "$txt" ] && grep -Eq '(median|best) of 1([^0-9.]|$)' "$txt"; then
    bad "$txt: one round called a median or best of 1: $(grep -Em 1 '(median|best) of 1([^0-9.]|$)' "$txt")"
fi
[ $fail = 0 ] && echo "check-out: $name: CSV ($(($(wc -l <"$csv") - 1)) figures) and PNG present; figures of: $fs_list"
exit $fail
