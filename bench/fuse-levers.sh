#!/usr/bin/env bash
# The FUSE levers of DualFS, each turned off in turn, side by side with kernel ext4 in one run:
# the directory listing cache (dir_cache=kept|open|off), the kernel opening directories itself
# (-o noopendir: no OPENDIR round trip), cached symlink targets (nocache_symlinks), READDIRPLUS
# (readdirplus=auto|always|never), the read-ahead window (readahead=SIZE, the mount's bdi
# read_ahead_kb) and the number of FUSE threads. One DualFS image holds the tree; each variant remounts it, so every
# variant starts with empty kernel caches and an empty DualFS cache (the images themselves stay
# in the host's page cache: "first" is DualFS-cold, not disk-cold).
#
#   bench/fuse-levers.sh                           # the unpacked Linux tree, one round
#   bench/fuse-levers.sh --repeat 3                # three rounds (variants interleaved), medians
#   bench/fuse-levers.sh --tree /usr/include       # a copy of a directory instead of the tarball
#   bench/fuse-levers.sh --variants "default before"  # a subset (names below)
#   bench/fuse-levers.sh --fuse-ops                # also count the FUSE requests of each phase
#
# Options: --repeat N, --tree DIR, --tarball FILE (default /usr/src/linux-source-*.tar.xz),
# --variants "LIST", --big-file SIZE (default 512M), --image-size SIZE (default 24G),
# --fuse-ops (perf and the fuse:fuse_request_send tracepoint: request counts do not depend on
# the machine's load, times do).
#
# Phases (seconds): find1 (`find TREE`, the first after mount), find (the same, warm: the second
# run), stat (`find TREE -printf '%s %m'`, warm: lstat of every entry), grep1 (`grep -r -c` of a
# word over every file, the first after mount), grep (the same, warm), links (the targets of
# 20,000 symlinks, `find -printf %l`, warm), read (cat of one big file, the first after mount:
# sequential reads through the read-ahead window).
#
# Variants: default (today's defaults); before (the levers as they were before they were
# measured: dir_cache=open, nocache_symlinks, readahead=128K); open (dir_cache=open: the listing is dropped at
# every opendir); noopendir (listings kept, no OPENDIR round trips); off (dir_cache=off);
# nolinks (nocache_symlinks); rdp-always, rdp-never (readdirplus=always|never); ra128k, ra4m
# (readahead=128K, the kernel's own, and 4M, instead of 1M); t2, t4, t8, t16 (--threads N).
#
# Needs root and /dev/fuse.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

REPEAT=1 TREE_DIR="" TARBALL="" SIZE=24G BIG=512M FUSE_OPS=""
ALL_VARIANTS="default before open noopendir off nolinks rdp-always rdp-never ra128k ra4m t2 t4 t8 t16"
VARIANTS=$ALL_VARIANTS
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --repeat) REPEAT=$2; shift 2 ;;
        --tree) TREE_DIR=$2; shift 2 ;;
        --tarball) TARBALL=$2; shift 2 ;;
        --variants) VARIANTS=$2; shift 2 ;;
        --big-file) BIG=$2; shift 2 ;;
        --image-size) SIZE=$2; shift 2 ;;
        --fuse-ops) FUSE_OPS=1; shift ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done

# variant NAME: OPTS (-o list, may be empty), THREADS (empty: the default).
variant() {
    OPTS="" THREADS=""
    case "$1" in
        default) ;;
        before) OPTS="dir_cache=open,nocache_symlinks,readahead=128K" ;;
        open) OPTS="dir_cache=open" ;;
        noopendir) OPTS="noopendir" ;;
        off) OPTS="dir_cache=off" ;;
        nolinks) OPTS="nocache_symlinks" ;;
        rdp-always) OPTS="readdirplus=always" ;;
        rdp-never) OPTS="readdirplus=never" ;;
        ra128k) OPTS="readahead=128K" ;;
        ra4m) OPTS="readahead=4M" ;;
        t[0-9]*) THREADS=${1#t} ;;
        *) bench_die "unknown variant '$1' (known: $ALL_VARIANTS)" ;;
    esac
}
for v in $VARIANTS; do variant "$v"; done

bench_init
[ -n "$FUSE_OPS" ] && bench_install linux-perf
bench_build
MNT="$BENCH_TMP/mnt-dualfs" EXT_MNT="$BENCH_TMP/mnt-ext4"
if [ -n "$TREE_DIR" ]; then
    [ -d "$TREE_DIR" ] || bench_die "--tree $TREE_DIR: not a directory"
    TREE=tree
else
    bench_kernel_tar "$TARBALL"
    TREE=$BENCH_TAR_TREE
fi
GREP_WORD=include
N_LINKS=20000

# fill MNT: the tree, 20,000 symlinks and the big file.
fill() {
    local mnt=$1
    if [ -n "$TREE_DIR" ]; then
        cp -a "$TREE_DIR" "$mnt/$TREE"
    else
        tar -xf "$BENCH_TAR" -C "$mnt"
    fi
    mkdir "$mnt/links"
    (cd "$mnt/links" && seq 1 "$N_LINKS" | xargs -n 1000 sh -c 'for i; do ln -s "target/of/link/$i" "l$i"; done' sh)
    head -c "$(numfmt --from=iec "$BIG")" /dev/urandom >"$mnt/big"
    sync
}

bench_log "DualFS: mkfs, mount, fill"
fs_mount dualfs "$MNT" "$SIZE"
fill "$MNT"
_bench_unmount dualfs "$MNT"
DEVS=${BENCH_DEV[$MNT]}   # "meta=PATH data=PATH"
META=${DEVS#meta=} META=${META%% data=*} DATA=${DEVS##* data=}
bench_log "ext4: mkfs, mount, fill"
fs_mount ext4 "$EXT_MNT" "$SIZE"
fill "$EXT_MNT"

declare -A R=()   # "variant|phase|round" -> seconds
declare -A OPS=() # "variant|phase" -> FUSE requests of round 1 (--fuse-ops)
PHASES="find1 find stat grep1 grep links read"

# timed NAME ROUND PHASE CMD...: run CMD with its output discarded, R gets the seconds.
timed() {
    local name=$1 round=$2 p=$3 t0 count=""
    shift 3
    [ -n "$FUSE_OPS" ] && [ "$round" = 1 ] && [ "$name" != ext4 ] && count=1
    [ -n "$count" ] && bench_fuseops_start "$MNT"
    t0=$(bench_now)
    "$@" >/dev/null 2>&1 || true
    R[$name|$p|$round]=$(bench_since "$t0")
    if [ -n "$count" ]; then
        bench_fuseops_stop
        OPS[$name|$p]=$BENCH_FUSEOPS
    fi
}

# scan NAME ROUND MNT: every phase on MNT (freshly mounted).
scan() {
    local name=$1 round=$2 mnt=$3 src="$3/$TREE"
    timed "$name" "$round" find1 find "$src"
    timed "$name" "$round" find find "$src"
    find "$src" -printf '%s %m\n' >/dev/null
    timed "$name" "$round" stat find "$src" -printf '%s %m\n'
    timed "$name" "$round" grep1 grep -r -c "$GREP_WORD" "$src"
    timed "$name" "$round" grep grep -r -c "$GREP_WORD" "$src"
    find "$mnt/links" -printf '%l\n' >/dev/null
    timed "$name" "$round" links find "$mnt/links" -printf '%l\n'
    timed "$name" "$round" read cat "$mnt/big"
    bench_log "$name: $(for p in $PHASES; do printf '%s %s  ' "$p" "${R[$name|$p|$round]}"; done)"
}

# mount_variant NAME: mount the DualFS image with the variant's options.
mount_variant() {
    variant "$1"
    local args=("$META" "$DATA" "$MNT")
    [ -n "$OPTS" ] && args+=(-o "$OPTS")
    [ -n "$THREADS" ] && args+=(--threads "$THREADS")
    BENCH_MOUNTS+=("dualfs|$MNT")
    "$DUALFS_BIN" mount "${args[@]}"
}

for round in $(seq 1 "$REPEAT"); do
    for v in $VARIANTS; do
        mount_variant "$v"
        scan "$v" "$round" "$MNT"
        _bench_unmount dualfs "$MNT"
    done
    umount "$EXT_MNT"
    mount -t ext4 "${BENCH_LOOP[$EXT_MNT]}" "$EXT_MNT"
    scan ext4 "$round" "$EXT_MNT"
done

declare -A M=()
for name in $VARIANTS ext4; do
    for p in $PHASES; do
        vals=()
        for r in $(seq 1 "$REPEAT"); do vals+=("${R[$name|$p|$r]:-n/a}"); done
        M[$name|$p]=$(bench_median "${vals[@]}")
    done
done

echo
n_entries=$(find "$EXT_MNT/$TREE" | wc -l)
echo "FUSE levers: $TREE ($n_entries entries), $N_LINKS symlinks, a $BIG file; $(bench_rounds median "$REPEAT");" \
    "$(nproc) CPUs, kernel $(uname -r)"
echo "Seconds per phase, then x ext4 = this time / kernel ext4's (lower is better)"
echo
printf '%-11s' variant
for p in $PHASES; do printf ' %7s' "$p"; done
printf ' |'
for p in $PHASES; do printf ' %6s' "$p"; done
echo
for name in $VARIANTS ext4; do
    printf '%-11s' "$name"
    for p in $PHASES; do printf ' %7s' "${M[$name|$p]}"; done
    printf ' |'
    for p in $PHASES; do printf ' %6s' "$(bench_ratio "${M[$name|$p]}" "${M[ext4|$p]}")"; done
    echo
done
if [ "$REPEAT" -gt 1 ]; then
    echo
    echo "Every round, seconds (find/grep/read):"
    for name in $VARIANTS ext4; do
        line=""
        for r in $(seq 1 "$REPEAT"); do line="$line ${R[$name|find|$r]}/${R[$name|grep|$r]}/${R[$name|read|$r]}"; done
        printf '%-11s%s\n' "$name" "$line"
    done
fi
if [ -n "$FUSE_OPS" ]; then
    echo
    echo "FUSE requests per phase (round 1): total, then by kind:"
    for name in $VARIANTS; do
        for p in $PHASES; do printf '%-11s %-6s %s\n' "$name" "$p" "${OPS[$name|$p]:-n/a}"; done
    done
fi
