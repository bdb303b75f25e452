#!/usr/bin/env bash
# Direct I/O to the devices (-o devio=direct) against buffered I/O (-o devio=buffered): DualFS
# on image files in a loop-mounted ext4, and on loop block devices, each mounted both ways,
# side by side in one run. Each column, on a fresh file system: a file written (dd, 1 MiB
# requests, conv=fsync), the caches dropped, the file read twice (dd, 1 MiB); MiB/s of each
# phase, and after each the page cache held: the FUSE file's pages, the data and metadata
# devices' pages (mincore(2) of the image files or of the block devices), and how much the
# machine's Cached + Buffers (/proc/meminfo) grew since the caches were dropped. Then, on the
# same mount, the metadata rates (examples/metarate, one worker: create, stat, unlink) and
# small files: PostMark (its wall-clock seconds; files of 500 B-10 KB written in small pieces,
# each a FUSE request that DualFS writes to the data device at once).
#
#   bench/direct-io.sh                              # 4 GiB file, 1 round, both setups
#   bench/direct-io.sh --mib 1024 --rounds 3 --files 5000
#   bench/direct-io.sh --setups image --out DIR     # DIR/direct-io.csv
#
# Options: --mib N (file size, default 4096), --rounds N (each figure the median of N rounds,
# the columns taking turns; default 1), --files N (metarate's files, default 50000),
# --postmark FILES,TRANSACTIONS (default 5000,20000, in 10 subdirectories; 0,0: none),
# --setups "LIST" (image, block; default both), --out DIR.
#
# The storage under both setups is files of zeros in the temporary folder, written in full
# once at the start (so that the host's file system allocates nothing during a run), behind
# loop devices with --direct-io=on (so that the host's page cache holds none of it): what is
# cached is DualFS's doing, and each loop device behaves as a disk. image: DualFS's two images
# are sparse files, made anew for each column, in an ext4 on such a loop device; their page
# cache is ext4's. block: DualFS's devices are two such loop devices, formatted anew for each
# column; their page cache is the block devices' own (counted in Buffers). The files of zeros
# take 18.5 GiB for the default 4 GiB file (3.75 times the file and 3.5 GiB).
# Dropping the caches (echo 3 > /proc/sys/vm/drop_caches) is machine-wide: on a shared machine
# it slows others' I/O for a moment, and their load makes the figures noisy (Cached + Buffers
# most of all: the per-file figures are exact). Needs root, /dev/fuse, loop devices and
# python3 (for mincore).
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

MIB=4096 ROUNDS=1 FILES=50000 PM="5000,20000" SETUPS="image block" OUT=""
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --mib) MIB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --postmark) PM=$2; shift 2 ;;
        --setups) SETUPS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
for s in $SETUPS; do
    case "$s" in image | block) ;; *) echo "unknown setup $s" >&2; usage 2 ;; esac
done
command -v python3 >/dev/null || bench_die "python3 is needed (mincore of the files)"
IFS=, read -r PM_FILES PM_TRANSACTIONS <<<"$PM"
[[ "$PM_FILES" =~ ^[0-9]+$ && "$PM_TRANSACTIONS" =~ ^[0-9]+$ ]] || bench_die "--postmark $PM: expected FILES,TRANSACTIONS"

bench_init
bench_install e2fsprogs
[ "$PM_FILES" -gt 0 ] && bench_install postmark
bench_log "building DualFS (release) into $CARGO_TARGET_DIR"
(cd "$BENCH_REPO" && cargo build --release --workspace --exclude dualfs-bench-fuse --quiet) ||
    bench_die "DualFS build failed"
bench_example metarate
METARATE=$BENCH_EXAMPLE
bench_out_init "$OUT" direct-io

# Sizes: the data device holds the file with room to spare, the metadata device a quarter.
DATA_BYTES=$(((MIB + MIB / 2 + 1024) << 20))
META_BYTES=$((DATA_BYTES / 4))
[ $META_BYTES -lt $((1 << 30)) ] && META_BYTES=$((1 << 30))
META_BYTES=$((META_BYTES >> 22 << 22)) DATA_BYTES=$((DATA_BYTES >> 22 << 22))

# The bytes of PATH... (files or block devices) in the page cache, by mincore(2) of a
# read-only shared mapping (nothing is read in; a FUSE file's mapping sends no request).
resident() {
    python3 - "$@" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
page = os.sysconf("SC_PAGE_SIZE")
total = 0
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    size = os.lseek(fd, 0, os.SEEK_END)  # also a block device's size
    off = 0
    while off < size:
        n = min(1 << 30, size - off)
        addr = libc.mmap(None, n, 1, 1, fd, off)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            sys.exit(f"mmap {path}: {os.strerror(ctypes.get_errno())}")
        pages = (n + page - 1) // page
        vec = ctypes.create_string_buffer(pages)
        if libc.mincore(addr, n, vec) != 0:
            sys.exit(f"mincore {path}: {os.strerror(ctypes.get_errno())}")
        total += (pages - vec.raw[:pages].count(0)) * page
        libc.munmap(addr, n)
        off += n
    os.close(fd)
print(total)
PY
}
mib_of() { awk -v b="$1" 'BEGIN { printf "%.0f\n", b / 1048576 }'; }
# Cached + Buffers of /proc/meminfo, in bytes.
page_cache() { awk '$1 == "Cached:" || $1 == "Buffers:" { kb += $2 } END { printf "%.0f\n", kb * 1024 }' /proc/meminfo; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
mibps() { awk -v m="$MIB" -v s="$1" 'BEGIN { printf "%.1f\n", m / s }'; }

# written_file PATH BYTES: a file of BYTES zeros, every block written (not sparse, not
# preallocated): the loop device over it then behaves as a disk does, with no allocation by
# the host's file system on a first write, for either mode.
written_file() {
    bench_log "writing $(mib_of "$2") MiB of zeros to $(basename "$1")"
    dd if=/dev/zero of="$1" bs=4M count=$(($2 >> 22)) oflag=direct status=none
}
# attach VAR FILE: a loop device with --direct-io=on over FILE in VAR, detached by the trap.
attach() {
    local l
    l=$(losetup -f --show --direct-io=on "$2") || bench_die "losetup $2 failed"
    BENCH_LOOP[$BENCH_TMP/loops]+="$l "
    printf -v "$1" '%s' "$l"
}

# image: an ext4 on a loop device; DualFS's images are sparse files in it, made anew for each
# column (as a person makes them, with truncate). block: two loop devices, formatted anew for
# each column.
EXT4="" BLOCK_META="" BLOCK_DATA=""
if [[ " $SETUPS " == *" image "* ]]; then
    EXT4="$BENCH_TMP/ext4"
    mkdir -p "$EXT4"
    written_file "$BENCH_TMP/ext4.img" $(((DATA_BYTES + META_BYTES + (1 << 30)) >> 22 << 22))
    attach loop "$BENCH_TMP/ext4.img"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loop" >/dev/null
    BENCH_MOUNTS+=("ext4|$EXT4")
    mount -t ext4 "$loop" "$EXT4"
fi
if [[ " $SETUPS " == *" block "* ]]; then
    written_file "$BENCH_TMP/block-meta.img" $META_BYTES
    written_file "$BENCH_TMP/block-data.img" $DATA_BYTES
    attach BLOCK_META "$BENCH_TMP/block-meta.img"
    attach BLOCK_DATA "$BENCH_TMP/block-data.img"
fi

# mount_dualfs SETUP IO MNT: a fresh DualFS mounted at MNT with -o devio=IO; its devices in
# META_DEV and DATA_DEV.
mount_dualfs() {
    local setup=$1 io=$2 mnt=$3
    mkdir -p "$mnt"
    if [ "$setup" = image ]; then
        META_DEV="$EXT4/meta.img" DATA_DEV="$EXT4/data.img"
        truncate -s $META_BYTES "$META_DEV"
        truncate -s $DATA_BYTES "$DATA_DEV"
    else
        META_DEV=$BLOCK_META DATA_DEV=$BLOCK_DATA
    fi
    "$MKFS_DUALFS_BIN" -q -f "$META_DEV" "$DATA_DEV" >/dev/null
    BENCH_MOUNTS+=("dualfs|$mnt")
    "$DUALFS_BIN" mount "$META_DEV" "$DATA_DEV" "$mnt" -o "devio=$io"
    mountpoint -q "$mnt" || bench_die "$setup/$io: $mnt is not mounted"
}

umount_dualfs() { # SETUP MNT
    "$DUALFS_BIN" umount "$2"
    _bench_forget_mount "$2"
    if [ "$1" = image ]; then rm -f "$EXT4/meta.img" "$EXT4/data.img"; fi
}

declare -A R=() # "column|phase metric" -> the figure of each round, space-separated
put() { # COLUMN PHASE METRIC VALUE UNIT
    R[$1|$2 $3]+="$4 "
    bench_row "$1" "$2 round $ROUND" "$3" "$4" "$5"
}

# cached COLUMN PHASE MNT: the page cache figures after PHASE (MiB).
cached() {
    local col=$1 phase=$2 mnt=$3
    put "$col" "$phase" fuse_file_mib "$(mib_of "$(resident "$mnt/seq")")" MiB
    put "$col" "$phase" data_dev_mib "$(mib_of "$(resident "$DATA_DEV")")" MiB
    put "$col" "$phase" meta_dev_mib "$(mib_of "$(resident "$META_DEV")")" MiB
    put "$col" "$phase" machine_mib "$(mib_of $(($(page_cache) - BASE)))" MiB
}

one_column() { # SETUP IO
    local setup=$1 io=$2 col="$1-$2" mnt="$BENCH_TMP/mnt-$1-$2" t0 secs w p r
    mount_dualfs "$setup" "$io" "$mnt"
    drop_caches
    BASE=$(page_cache)
    t0=$(bench_now)
    dd if=/dev/zero of="$mnt/seq" bs=1M count="$MIB" conv=fsync status=none
    secs=$(bench_since "$t0")
    put "$col" write mib_per_sec "$(mibps "$secs")" MiB/s
    cached "$col" write "$mnt"
    for pass in 1 2; do
        if [ $pass = 1 ]; then drop_caches; BASE=$(page_cache); fi
        t0=$(bench_now)
        dd if="$mnt/seq" of=/dev/null bs=1M status=none
        secs=$(bench_since "$t0")
        put "$col" "read$pass" mib_per_sec "$(mibps "$secs")" MiB/s
        cached "$col" "read$pass" "$mnt"
    done
    rm "$mnt/seq"
    sync
    while read -r _ w p r; do
        [ "${w#workers=}" = 1 ] && put "$col" "${p#phase=}" ops_per_sec "${r#ops_per_sec=}" ops/s
    done < <("$METARATE" "$mnt" --workers 1 --files "$FILES" --rounds 1)
    if [ "$PM_FILES" -gt 0 ]; then
        mkdir "$mnt/pm"
        t0=$(bench_now)
        bench_postmark "$mnt/pm" "$BENCH_TMP/postmark-$col.log" "$PM_FILES" "$PM_TRANSACTIONS" 10 500 10000
        sync
        put "$col" postmark seconds "$(bench_since "$t0")" s
    fi
    umount_dualfs "$setup" "$mnt"
}

COLUMNS=""
for s in $SETUPS; do COLUMNS="$COLUMNS $s-buffered $s-direct"; done
for ROUND in $(seq 1 "$ROUNDS"); do
    for col in $COLUMNS; do
        bench_log "round $ROUND: $col"
        one_column "${col%-*}" "${col##*-}"
    done
done

echo
echo "DualFS with -o devio=buffered and -o devio=direct: a $MIB MiB file written (dd bs=1M" \
    "conv=fsync), the caches dropped, read twice (dd bs=1M); $(bench_rounds median "$ROUNDS");" \
    "metarate: one worker, $FILES files ($(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
    "kernel $(uname -r), $(git -C "$BENCH_REPO" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "image: the two devices are image files in an ext4; block: loop block devices."
echo "Page cache in MiB after each phase: the FUSE file's, the data and metadata devices'," \
    "and the machine's Cached + Buffers growth since the caches were dropped (write: before it)."
printf '%-28s' ""
for col in $COLUMNS; do printf ' %15s' "$col"; done
echo
row() { # LABEL FIGURE [FORMAT]
    printf '%-28s' "$1"
    for col in $COLUMNS; do
        # shellcheck disable=SC2086
        printf ' %15s' "$(bench_median ${R[$col|$2]:-} | awk -v f="${3:-%.0f}" '/^-?[0-9.]+$/ { printf f, $1; next } { print }')"
    done
    echo
}
for phase in write read1 read2; do
    row "$phase MiB/s" "$phase mib_per_sec"
    row "  FUSE file cached" "$phase fuse_file_mib"
    row "  data device cached" "$phase data_dev_mib"
    row "  meta device cached" "$phase meta_dev_mib"
    row "  machine Cached+Buffers" "$phase machine_mib"
done
for p in create stat unlink; do row "metarate $p ops/s" "$p ops_per_sec"; done
if [ "$PM_FILES" -gt 0 ]; then
    echo "PostMark: $PM_FILES files of 500 B-10 KB in 10 subdirectories, $PM_TRANSACTIONS transactions, then sync; wall-clock seconds, lower is better:"
    row "postmark seconds" "postmark seconds" "%.1f"
fi
