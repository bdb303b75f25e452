#!/usr/bin/env bash
# What the core costs per metadata operation, without FUSE: examples/coreops.rs (metarate's
# create, lookup and unlink phases, one directory per worker, called on the library API over
# in-memory devices; and `--clean`, cleaning passes on a filled log) for this build and, with
# --base, another build of it, taking turns round by round; the process's CPU time per
# operation (per live block moved for cleaning; the best round), the rate, and this build's
# CPU over the base's. Far below the noise of a FUSE benchmark: for changes to
# the core that FUSE figures cannot resolve.
#
#   bench/core.sh                                   # 1 and 2 workers, 20,000 files each
#   bench/core.sh --base /path/to/old/target/release/examples/coreops --rounds 5
#
# Options: --workers LIST (default 1,2: two workers stand for the mount's two FUSE threads),
# --files N (per worker), --rounds R (turns of each build; best of R), --base BIN (the
# coreops binary of another build, e.g. before a change: `cargo build --release --example
# coreops` there), --out DIR (DIR/core.csv). Needs no root.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

WORKERS=1,2 FILES=20000 ROUNDS=3 BASE="" OUT=""
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --workers) WORKERS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --base) BASE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
[ -z "$BASE" ] || [ -x "$BASE" ] || bench_die "--base $BASE: not an executable"
bench_example coreops
THIS=$BENCH_EXAMPLE
bench_out_init "$OUT" core

declare -A NS=() RATE=() MAXMS=() # "build|workers|phase" -> best CPU ns per op, its ops/s
BUILDS="this"
[ -n "$BASE" ] && BUILDS="this base"
IFS=, read -r -a WS <<<"$WORKERS"
for round in $(seq "$ROUNDS"); do
    for build in $BUILDS; do
        bin=$THIS
        [ "$build" = base ] && bin=$BASE
        for w in "${WS[@]}"; do
            bench_log "round $round: $build, $w worker(s)"
            while read -r _ ww phase rate ns; do
                k="$build|${ww#workers=}|${phase#phase=}"
                rate=${rate#ops_per_sec=} ns=${ns#cpu_ns_per_op=}
                if [ -z "${NS[$k]:-}" ] || [ "$ns" -lt "${NS[$k]}" ]; then
                    NS[$k]=$ns RATE[$k]=$rate
                fi
            done < <("$bin" --workers "$w" --files "$FILES" --rounds 1 2>/dev/null)
        done
        bench_log "round $round: $build, cleaning passes"
        line=$("$bin" --clean --rounds 6 2>/dev/null || true)
        ns=$(sed -n 's/.*cpu_ns_per_block=\([0-9]*\).*/\1/p' <<<"$line")
        ms=$(sed -n 's/.*max_pass_ms=\([0-9.]*\).*/\1/p' <<<"$line")
        if [ -n "$ns" ] && { [ -z "${NS[$build|clean]:-}" ] || [ "$ns" -lt "${NS[$build|clean]}" ]; }; then
            NS[$build|clean]=$ns MAXMS[$build|clean]=$ms
        fi
    done
done

echo
echo "The core without FUSE: CPU per operation (ns, $(bench_rounds best "$ROUNDS")) and ops/s," \
    "$FILES files per worker; $(nproc) CPUs"
printf '%-8s %7s %10s %10s' phase workers "ns/op" "ops/s"
[ -n "$BASE" ] && printf ' %10s %10s %7s' "base ns/op" "base ops/s" "x base"
echo
for w in "${WS[@]}"; do
    for phase in create lookup unlink; do
        printf '%-8s %7s %10s %10s' "$phase" "$w" "${NS[this|$w|$phase]:-n/a}" "${RATE[this|$w|$phase]:-n/a}"
        bench_row dualfs "$phase W=$w" cpu_ns_per_op "${NS[this|$w|$phase]:-}" ns
        if [ -n "$BASE" ]; then
            printf ' %10s %10s %7s' "${NS[base|$w|$phase]:-n/a}" "${RATE[base|$w|$phase]:-n/a}" \
                "$(bench_ratio "${NS[this|$w|$phase]:-}" "${NS[base|$w|$phase]:-}")"
            bench_row dualfs-base "$phase W=$w" cpu_ns_per_op "${NS[base|$w|$phase]:-}" ns
        fi
        echo
    done
done
echo
echo "Cleaning (coreops --clean: 6 greedy passes of up to 18 segments on a 256 MiB log at 65%," \
    "$(bench_rounds best "$ROUNDS")): CPU per live block moved, and the longest pass"
printf '%-8s %10s %12s' "" "ns/block" "longest ms"
[ -n "$BASE" ] && printf ' %10s %12s %7s' "base ns" "base ms" "x base"
echo
printf '%-8s %10s %12s' clean "${NS[this|clean]:-n/a}" "${MAXMS[this|clean]:-n/a}"
bench_row dualfs clean cpu_ns_per_block "${NS[this|clean]:-}" ns
if [ -n "$BASE" ]; then
    printf ' %10s %12s %7s' "${NS[base|clean]:-n/a}" "${MAXMS[base|clean]:-n/a}" \
        "$(bench_ratio "${NS[this|clean]:-}" "${NS[base|clean]:-}")"
    bench_row dualfs-base clean cpu_ns_per_block "${NS[base|clean]:-}" ns
fi
echo
