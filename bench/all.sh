#!/usr/bin/env bash
# The whole benchmark suite in one command: PostMark (one process, then 4 at once: postmark and
# postmark-4procs), kernel compile, metadata rates, tail latency, big directory, cleaner, fsck
# and write economy, one after the other, each with --out into a folder of its own; then one
# summary in Markdown (DIR/summary.md) with the headline figures of every benchmark side by
# side, each benchmark's full table and links to its chart, CSV and printed output.
#
#   bench/all.sh --out DIR                  # the full configurations (several hours on 2 CPUs)
#   bench/all.sh --out DIR --quick          # reduced configurations (below), about an hour
#   bench/all.sh --out DIR --only postmark,latency
#   bench/all.sh --out DIR --skip kernel-compile,fsck
#   bench/all.sh --out DIR --no-kernel-build  # kernel compile without config/build/clean
#   bench/all.sh --summary DIR              # only rewrite DIR/summary.md from the CSVs there
#
# --quick: PostMark (1 and 4 processes) and write economy as usual (the paper's PostMark: it
# takes minutes); kernel compile on DualFS, ext2, ext4 and memfs only; metadata rates with 1
# and 4 workers, 5,000 files each; latency 1,000 samples per operation and phase on 500 files;
# big directory 100,000 files (with ext4); cleaner and fsck as usual (2,000 files and 10 rounds
# are too few for the cleaner benchmark to need in-process cleaning).
#
# DIR/NAME/ holds NAME.csv, NAME.png (and more charts for some), NAME.txt (what the script
# printed) and NAME.log (its progress and errors). A benchmark that fails is reported as such
# in the summary and the suite goes on. Options of the scripts themselves: see their --help.
#
# Needs root, /dev/fuse and loop devices; each script installs what it needs with apt-get.
set -euo pipefail
export LC_ALL=C
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

ALL="postmark postmark-4procs kernel-compile scan metarate latency bigdir cleaner fsck write-economy"
OUT="" QUICK="" ONLY="" SKIP="" SUMMARY_ONLY="" KERNEL_BUILD=1
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --only) ONLY=${2//,/ }; shift 2 ;;
        --skip) SKIP=${2//,/ }; shift 2 ;;
        --summary) OUT=$2; SUMMARY_ONLY=1; shift 2 ;;
        --no-kernel-build) KERNEL_BUILD=""; shift ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
[ -n "$OUT" ] || { echo "--out DIR is required" >&2; usage 2; }
for b in $ONLY $SKIP; do
    case " $ALL " in *" $b "*) ;; *) echo "unknown benchmark $b (known: $ALL)" >&2; usage 2 ;; esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# The script a benchmark runs (postmark-4procs is bench/postmark.sh --procs 4).
script_of() { case "$1" in postmark-*procs) echo postmark ;; *) echo "$1" ;; esac; }

args_of() { # NAME: the script's arguments in this configuration
    case "$1" in postmark-*procs) local n=${1#postmark-}; printf '%s ' --procs "${n%procs}" ;; esac
    [ "$1" = kernel-compile ] && [ -z "$KERNEL_BUILD" ] && printf '%s ' --no-build
    if [ -z "$QUICK" ]; then
        case "$1" in
            bigdir) echo "--ext4" ;;
        esac
        return
    fi
    case "$1" in
        kernel-compile) echo "--fs dualfs,ext2,ext4,memfs" ;;
        metarate) echo "--workers 1,4 --files 5000" ;;
        latency) echo "--samples 1000 --files 500" ;;
        bigdir) echo "--files 100000 --ext4" ;;
    esac
}

run_bench() { # NAME
    local name=$1 dir="$OUT/$1" t0 rc=0 args
    mkdir -p "$dir"
    args=$(args_of "$name")
    bench_log "== $name ${args:+($args)}"
    t0=$(bench_now)
    # --fs takes a space-separated list: the comma form above keeps args_of one word each.
    local argv=()
    read -r -a argv <<<"$args"
    local i
    for i in "${!argv[@]}"; do
        [ "${argv[$i]}" = --fs ] && argv[i + 1]=${argv[i + 1]//,/ }
    done
    "$HERE/$(script_of "$name").sh" "${argv[@]}" --out "$dir" 2>"$dir/$name.log" | tee "$dir/$name.txt" || rc=$?
    printf '%s %s %s\n' "$rc" "$(bench_since "$t0")" "$args" >"$dir/.status"
    bench_log "== $name: exit $rc after $(bench_since "$t0") s"
}

if [ -z "$SUMMARY_ONLY" ]; then
    {
        echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "machine: $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory, kernel $(uname -r)"
        echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "configuration: $([ -n "$QUICK" ] && echo "--quick (reduced)" || echo "full")"
        echo "commit: $(git -C "$BENCH_REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    } >"$OUT/machine.txt"
    for b in $ALL; do
        [ -n "$ONLY" ] && case " $ONLY " in *" $b "*) ;; *) continue ;; esac
        case " $SKIP " in *" $b "*) continue ;; esac
        run_bench "$b"
    done
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
fi

# ---- The summary.
# Headline figures: which rows of each CSV go into the table at the top (an awk condition on
# $3 phase, $4 metric).
headline() {
    case "$1" in
        postmark | postmark-*procs) echo '$3 == "total" && ($4 == "seconds" || $4 == "time_over_memfs")' ;;
        kernel-compile) echo '($4 == "seconds" && ($3 == "total" || $3 == "unpack" || $3 == "find" || $3 == "grep" || $3 == "build" || $3 == "rm")) || $4 ~ /^peak_rss/ || $4 == "cache_budget_bytes"' ;;
        metarate) echo '$4 == "ops_per_sec"' ;;
        latency) echo '($4 == "p99_us" || $4 == "max_us") && $3 ~ /loaded$/' ;;
        bigdir) echo '($4 == "ops_per_sec" && $3 != "stat warm") || ($3 == "list" && $4 == "seconds")' ;;
        cleaner) echo '($3 == "total" && $4 == "seconds") || $4 == "write_cost" || $4 == "write_path_passes"' ;;
        fsck | scan) echo '$4 == "seconds"' ;;
        write-economy) echo '$4 ~ /^bytes/' ;;
        *) echo 0 ;;
    esac
}
fmt_awk='function fmt(v, u) {
    if (u == "bytes") return sprintf("%.1f MiB", v / 1048576)
    if (v == int(v) && (v < 0 ? -v : v) < 1e7) return sprintf("%d", v)
    a = v < 0 ? -v : v
    return a >= 1000 ? sprintf("%.0f", v) : sprintf("%.3g", v)
}'
LABELS=""
for f in $BENCH_ALL_FS $BENCH_EXTRA_FS dualfs-small; do LABELS="$LABELS$f=$(bench_fs_label "$f");"; done
# pivot CSV CONDITION: a Markdown table, one row per (phase, metric), one column per file system.
pivot() {
    awk -F, -v labels="$LABELS" "$fmt_awk"'
        BEGIN { n = split(labels, l, ";"); for (i = 1; i <= n; i++) { split(l[i], kv, "="); name[kv[1]] = kv[2] } }
        NR > 1 && ('"$2"') {
            k = $3 " | " $4 " (" $6 ")"; if (!(k in ks)) { ks[k] = 1; rows[nr++] = k }
            if (!($2 in fs)) { fs[$2] = 1; cols[nc++] = $2 }
            v[k, $2] = fmt($5, $6)
        }
        END {
            if (nr == 0) { print "(no figures)"; exit }
            printf "| phase | figure |"; for (j = 0; j < nc; j++) printf " %s |", (cols[j] in name) ? name[cols[j]] : cols[j]; printf "\n"
            printf "|---|---|"; for (j = 0; j < nc; j++) printf "---:|"; printf "\n"
            for (i = 0; i < nr; i++) {
                printf "| %s |", rows[i]
                for (j = 0; j < nc; j++) printf " %s |", ((rows[i], cols[j]) in v) ? v[rows[i], cols[j]] : ""
                printf "\n"
            } }' "$1"
}

S="$OUT/summary.md"
{
    echo "# DualFS benchmarks: summary"
    echo
    [ -f "$OUT/machine.txt" ] && sed 's/^/- /' "$OUT/machine.txt"
    echo
    echo "Figures of one run; columns of one table are comparable, across runs they are not (the"
    echo "machine's load moves FUSE timings a lot). Times and latencies: lower is better; rates"
    echo "(ops_per_sec): higher is better. Charts: each phase's time over ext2's (or ext4's), as in"
    echo "the DualFS paper."
    echo
    echo "| benchmark | configuration | result | wall time |"
    echo "|---|---|---|---:|"
    for b in $ALL; do
        st="$OUT/$b/.status"
        [ -f "$st" ] || continue
        read -r rc secs args <"$st" || true
        echo "| [$b](#$b) | ${args:-defaults} | $([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc; see $b/$b.log)") | $(printf '%.0f s' "$secs") |"
    done
    echo
    echo "## Headline figures"
    echo
    echo "The main figures of every benchmark in one table (each benchmark's full table is below)."
    echo
    # One CSV of the headline rows of all benchmarks (the phase prefixed by the benchmark), its
    # columns in a fixed order: DualFS first, then the kernel's, the other FUSE ones, variants.
    hl="$OUT/.headline.csv"
    echo "benchmark,fs,phase,metric,value,unit" >"$hl"
    for b in $ALL; do
        csv="$OUT/$b/$b.csv"
        [ -f "$csv" ] || continue
        awk -F, -v OFS=, "NR > 1 && ($(headline "$b")) { \$3 = \"$b: \" \$3; print }" "$csv" >>"$hl"
    done
    order="dualfs dualfs-wb ext2 ext3 ext4 fuse2fs memfs dualfs-slow ext4-slow dualfs-small daemon in-process"
    awk -F, -v order="$order" 'NR == 1 { print; next }
        { n = split(order, o, " "); k = n + 1; for (i = 1; i <= n; i++) if (o[i] == $2) k = i; print k "\t" NR "\t" $0 }' "$hl" |
        { read -r header; echo "$header"; sort -t $'\t' -k1,1n -k2,2n | cut -f3-; } >"$hl.sorted"
    # The rows keep the benchmarks' order: pivot() orders rows by first appearance, columns too,
    # so feed it the rows in benchmark order but one row of each column first.
    {
        head -n 1 "$hl"
        awk -F, 'NR > 1 && !seen[$2]++ { print }' "$hl.sorted" | sed 's/,[^,]*,[^,]*,[^,]*,[^,]*$/,__order,__order,0,__order/'
        tail -n +2 "$hl"
    } >"$hl.pivot"
    pivot "$hl.pivot" '$3 != "__order"'
    rm -f "$hl" "$hl.sorted" "$hl.pivot"
    for b in $ALL; do
        csv="$OUT/$b/$b.csv"
        [ -f "$csv" ] || continue
        echo
        echo "## $b"
        echo
        for png in "$OUT/$b"/*.png; do [ -f "$png" ] && echo "![$b]($b/$(basename "$png"))"; done
        echo
        echo "Every figure ([CSV]($b/$b.csv), [printed output]($b/$b.txt)):"
        echo
        pivot "$csv" 1
    done
} >"$S"
bench_log "summary: $S"
