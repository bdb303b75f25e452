#!/usr/bin/env bash
# The DualFS paper's experiment on one simulated disk: PostMark on DualFS and on kernel ext2,
# ext3, ext4 (and XFS when mkfs.xfs is installed), each on a fresh simulated disk of diskmodel
# (bench/fuse-tools; the paper5400 parameter set by default: a 5,400 RPM IDE disk of the
# paper's time), compared by the disk's busy time: the paper's "disk I/O time".
#
#   bench/disks.sh --quick                       # 2,000 files, 10 subdirectories, 5,000 transactions
#   bench/disks.sh                               # the paper's 20,000 files, 100 subdirectories, 50,000
#   bench/disks.sh --quick --write-cache on      # the disk's write cache on (paper5400: 2 MB)
#   bench/disks.sh --quick --fs "ext2 dualfs" --out DIR   # a subset; DIR/disks.csv and DIR/disks.png
#
# Options: --quick, --files F, --transactions T, --subdirs S, --size MIN-MAX (bytes, default
# 500-10000), --fs "LIST" (default: ext2 ext3 ext4 xfs dualfs; also dualfs-wb: DualFS with
# -o writeback_cache), --model SPEC (default
# paper5400), --capacity SIZE (the disk's, default 4G), --image-size SIZE (each file system's
# space, default 1536M), --meta-size SIZE (DualFS's metadata partition, out of --image-size,
# default 256M), --write-cache off|on|SIZE (default: the model's own setting, off for
# paper5400), --memory SIZE|none (default auto), --dirty auto|keep (default auto), --out DIR.
#
# The memory: the paper's machine had 256 MB of RAM, this one may have a hundred times more, in
# which a kernel file system keeps all of PostMark's files until they are deleted: nothing but
# the unmount's metadata would reach the disk. So PostMark runs in a memory cgroup (v2 if its
# memory controller is there, else v1) limited to --memory: auto is the paper machine's 256 MiB
# scaled by the workload (FILES / 20,000: 25.6 MiB with --quick, whose files are a tenth of the
# paper's), so that the files take the same share of memory as in the paper. The page cache
# PostMark fills and dirties (a kernel file system's, or that of DualFS's files in the FUSE
# mount) is charged to that cgroup, as are the kernel file systems' metadata buffers that
# PostMark's calls read. DualFS's daemon stays outside it: its own caches (metadata, log
# segments) are part of its design, but its cache of written data (data_cache) gets the dirty
# limit the kernel file systems get (MEMORY / 5). The kernel's dirty page limits are global (vm.dirty_*, by
# default 10% and 20% of the host's available memory): with --dirty
# auto they are set for the run to the kernel's default ratios (10% background, 20% limit) of
# the memory limit, i.e. what the kernel would allow on a machine of that size, and restored at
# exit (this throttles every writer of the host meanwhile). --memory none and --dirty keep give
# the host's behaviour.
#
# The disk: every file system gets a fresh one (head at address 0, cache empty). A kernel file
# system's image is the partition at address 0, reached through a loop device with direct I/O
# (losetup --direct-io=on: the kernel's own request order and sizes reach the disk); DualFS's
# metadata image is the partition at address 0 and its data image the one after it, both
# opened by DualFS on the diskmodel mount, so the two share the disk's head. mkfs writes the
# images before the disk is mounted (not timed). The capacity is small so that the images
# cover a realistic share of the disk (seek distances as on a disk mostly used by this file
# system).
#
# Measured for each file system, from after mount + sync + drop_caches to the end of the
# unmount and a flush of the disk's write cache (so that data written back at unmount counts):
# the disk's busy time (disk I/O seconds, from MNT/.diskmodel-stats before and after), its
# ratio to ext2's, the wall time, and where the disk time went (requests, seeks, seek /
# rotation / transfer seconds). The backing images live in memory (BENCH_TMPDIR, default
# /dev/shm), so that the host's storage does not make requests late (counted as "late").
#
# Needs root, /dev/fuse and loop devices; installs postmark and e2fsprogs with apt-get if
# missing (gnuplot-nox with --out).
set -euo pipefail
export LC_ALL=C
export BENCH_TMPDIR="${BENCH_TMPDIR:-/dev/shm}"
. "$(dirname "$0")/lib.sh"

FILES=20000 TRANSACTIONS=50000 SUBDIRS=100 MIN_SIZE=500 MAX_SIZE=10000
FS_LIST="ext2 ext3 ext4 xfs dualfs" MODEL=paper5400 CAPACITY=4G IMAGE=1536M META=256M
WRITE_CACHE="" OUT="" MEMORY=auto DIRTY=auto
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) FILES=2000 TRANSACTIONS=5000 SUBDIRS=10; shift ;;
        --files) FILES=$2; shift 2 ;;
        --transactions) TRANSACTIONS=$2; shift 2 ;;
        --subdirs) SUBDIRS=$2; shift 2 ;;
        --size) MIN_SIZE=${2%-*}; MAX_SIZE=${2#*-}; shift 2 ;;
        --fs) FS_LIST=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --capacity) CAPACITY=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --meta-size) META=$2; shift 2 ;;
        --write-cache) WRITE_CACHE=$2; shift 2 ;;
        --memory) MEMORY=$2; shift 2 ;;
        --dirty) DIRTY=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
for fs in $FS_LIST; do
    case "$fs" in ext2 | ext3 | ext4 | xfs | dualfs | dualfs-wb) ;; *) bench_die "--fs: unknown file system '$fs' (known: ext2 ext3 ext4 xfs dualfs dualfs-wb)" ;; esac
done
IMAGE_BYTES=$(numfmt --from=iec "$IMAGE") || bench_die "--image-size $IMAGE: not a size"
META_BYTES=$(numfmt --from=iec "$META") || bench_die "--meta-size $META: not a size"
[ "$META_BYTES" -lt "$IMAGE_BYTES" ] || bench_die "--meta-size $META must be below --image-size $IMAGE"
DATA_BYTES=$((IMAGE_BYTES - META_BYTES))
case "$MEMORY" in
    none) MEMORY_BYTES="" ;;
    auto) MEMORY_BYTES=$((268435456 * FILES / 20000)); [ "$MEMORY_BYTES" -ge 16777216 ] || MEMORY_BYTES=16777216 ;;
    *) MEMORY_BYTES=$(numfmt --from=iec "$MEMORY") || bench_die "--memory $MEMORY: not a size" ;;
esac
case "$DIRTY" in auto | keep) ;; *) bench_die "--dirty: auto or keep" ;; esac
[ -z "$MEMORY_BYTES" ] && DIRTY=keep
SPEC="$MODEL,capacity=$CAPACITY${WRITE_CACHE:+,write_cache=$WRITE_CACHE}"
DISKMODEL_BIN="$CARGO_TARGET_DIR/release/diskmodel"

bench_init
bench_install postmark e2fsprogs python3
[ -n "$OUT" ] && bench_install gnuplot-nox
bench_build
[ -x "$DISKMODEL_BIN" ] || bench_die "diskmodel was not built: ${BENCH_FUSE_TOOLS_ERR:-see bench/fuse-tools}"
PARAMS=$("$DISKMODEL_BIN" --show "$SPEC" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["params"]))') ||
    bench_die "bad disk model: $SPEC"
[ "$(numfmt --from=iec "$CAPACITY")" -ge "$IMAGE_BYTES" ] || bench_die "--image-size $IMAGE does not fit on a disk of --capacity $CAPACITY"
AVAILABLE=""
for fs in $FS_LIST; do
    case "$fs" in
        dualfs | dualfs-wb) if [ ! -x "$DUALFS_BIN" ] || [ ! -x "$MKFS_DUALFS_BIN" ]; then BENCH_SKIP[$fs]="DualFS was not built"; continue; fi ;;
        *) command -v "mkfs.$fs" >/dev/null || { BENCH_SKIP[$fs]="mkfs.$fs is not installed"; continue; } ;;
    esac
    AVAILABLE="$AVAILABLE $fs"
done
for fs in "${!BENCH_SKIP[@]}"; do bench_log "$fs: skipped (${BENCH_SKIP[$fs]})"; done
[ -n "$AVAILABLE" ] || bench_die "no file system to run on"
bench_out_init "$OUT" disks

# The memory cgroup PostMark runs in: a child of the root (cgroup v2, with the memory controller
# enabled for the root's children) or of this script's own memory cgroup (v1), one per file
# system (its peak is that run's), removed after it.
CG_VERSION="" CG_PARENT="" CG=""
DIRTY_SAVED=()
if [ -n "$MEMORY_BYTES" ]; then
    if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
        CG_VERSION=2 CG_PARENT=/sys/fs/cgroup
    elif [ -f /sys/fs/cgroup/unified/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/unified/cgroup.controllers; then
        CG_VERSION=2 CG_PARENT=/sys/fs/cgroup/unified
    elif [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        CG_VERSION=1 CG_PARENT=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/self/cgroup)
        CG_PARENT=${CG_PARENT%/}
    else
        bench_die "--memory: no cgroup memory controller (mount | grep cgroup); --memory none runs without one"
    fi
    if [ "$CG_VERSION" = 2 ] && ! grep -qw memory "$CG_PARENT/cgroup.subtree_control"; then
        echo +memory >"$CG_PARENT/cgroup.subtree_control" || bench_die "--memory: cannot enable the memory controller in $CG_PARENT"
    fi
fi
cg_start() { # FS: a fresh cgroup for PostMark on FS
    [ -n "$CG_VERSION" ] || return 0
    CG=$CG_PARENT/dualfs-bench-disks-$$-$1
    mkdir "$CG" || bench_die "cannot create the cgroup $CG"
    if [ "$CG_VERSION" = 2 ]; then
        [ ! -f "$CG/memory.swap.max" ] || echo 0 >"$CG/memory.swap.max"
        echo "$MEMORY_BYTES" >"$CG/memory.max"
    else
        echo "$MEMORY_BYTES" >"$CG/memory.limit_in_bytes"
    fi || bench_die "cannot limit $CG to $MEMORY_BYTES bytes"
    BENCH_POSTMARK_CGROUP=$CG
}
cg_stop() { # FS: its peak memory and reclaim figures, then the cgroup removed
    [ -n "$CG" ] || return 0
    local peak
    if [ "$CG_VERSION" = 2 ]; then
        peak=$(cat "$CG/memory.peak" 2>/dev/null || echo 0)
    else
        peak=$(cat "$CG/memory.max_usage_in_bytes")
        R[$1|mem_failcnt]=$(cat "$CG/memory.failcnt")
    fi
    R[$1|mem_peak]=$peak
    R[$1|mem_stat]=$(awk '$1 ~ /^(total_)?(pgscan|pgsteal|workingset_refault_file|file_writeback|file_dirty|pgmajfault)/ { printf "%s%s=%s", sep, $1, $2; sep = " " }' "$CG/memory.stat")
    rmdir "$CG" 2>/dev/null || { sleep 1; rmdir "$CG" 2>/dev/null; } || bench_log "could not remove $CG"
    CG="" BENCH_POSTMARK_CGROUP=""
}
bench_cleanup_extra() {
    local kv
    [ -n "$CG" ] && [ -d "$CG" ] && rmdir "$CG" 2>/dev/null
    for kv in "${DIRTY_SAVED[@]}"; do [ "${kv#*=}" = 0 ] || sysctl -q -w "$kv" >/dev/null; done
}
if [ "$DIRTY" = auto ]; then
    # Restored at exit in this order, zeros skipped: a ratio written sets its bytes setting to
    # 0 (the kernel refuses a 0 written there), a bytes setting written sets its ratio to 0.
    for key in vm.dirty_background_ratio vm.dirty_ratio vm.dirty_background_bytes vm.dirty_bytes; do
        DIRTY_SAVED+=("$key=$(sysctl -n "$key")")
    done
    sysctl -q -w vm.dirty_background_bytes=$((MEMORY_BYTES / 10)) vm.dirty_bytes=$((MEMORY_BYTES / 5)) ||
        bench_die "--dirty auto: cannot set vm.dirty_background_bytes / vm.dirty_bytes"
fi

# The disk's figures from the model's report, one "key=value" a line (the first disk), then
# each partition's requests and bytes as IMAGE:key=value (DualFS: which image they were for).
STAT_KEYS="busy_s reads writes bytes_read bytes_written seeks seek_s rotation_s transfer_s flushes destages destaged_bytes late"
PART_KEYS="reads writes bytes_read bytes_written"
model_stats() { # DISK_MNT
    python3 - "$1/.diskmodel-stats" "$STAT_KEYS" "$PART_KEYS" <<'EOF'
import json, sys
disk = json.load(open(sys.argv[1]))["disks"][0]
for key in sys.argv[2].split():
    print(f"{key}={disk[key]}")
for part in disk["partitions"]:
    for key in sys.argv[3].split():
        print(f"{part['file']}:{key}={part[key]}")
EOF
}

declare -A R=()            # "fs|key" -> figure of the phase
declare -A STAT_KEYS_OF=() # fs -> its partitions' keys (IMAGE:reads ...)

# One file system on a fresh disk: mkfs on the backing images, the disk mounted, the file
# system mounted on it, PostMark, unmount, the disk's cache flushed, figures taken.
run_one() {
    local fs=$1 back="$BENCH_TMP/back-$1" disk="$BENCH_TMP/disk-$1" mnt="$BENCH_TMP/mnt-$1"
    local files=() loop="" t0 line key image before after log="$BENCH_TMP/postmark-$1.log"
    mkdir -p "$back" "$disk" "$mnt"
    bench_log "$fs: mkfs on the backing image(s)"
    case "$fs" in
        dualfs | dualfs-wb)
            truncate -s "$META_BYTES" "$back/meta.img"
            truncate -s "$DATA_BYTES" "$back/data.img"
            "$MKFS_DUALFS_BIN" -q "$back/meta.img" "$back/data.img" >/dev/null
            files=(--file meta.img:d:0 --file "data.img:d:$META_BYTES")
            ;;
        xfs)
            truncate -s "$IMAGE_BYTES" "$back/fs.img"
            mkfs.xfs -q -f "$back/fs.img" >/dev/null
            files=(--file fs.img:d:0)
            ;;
        *)
            truncate -s "$IMAGE_BYTES" "$back/fs.img"
            local ext_opts="lazy_itable_init=0"
            [ "$fs" != ext2 ] && ext_opts="$ext_opts,lazy_journal_init=0"
            "mkfs.$fs" -q -F -E "$ext_opts" "$back/fs.img" >/dev/null
            files=(--file fs.img:d:0)
            ;;
    esac
    BENCH_MOUNTS+=("diskmodel|$disk")
    _bench_start_fuse "$disk" "$BENCH_TMP/diskmodel-$fs.log" "$DISKMODEL_BIN" "$back" "$disk" --disk "d:$SPEC" "${files[@]}"
    bench_log "$fs: mount on the simulated disk"
    BENCH_MOUNTS+=("$fs|$mnt")
    if [ "$fs" = dualfs ] || [ "$fs" = dualfs-wb ]; then
        # DualFS's write-back cache of file data lives in its daemon, outside PostMark's
        # cgroup: it gets the dirty limit the kernel file systems get (vm.dirty_bytes, set
        # above), so that neither side holds more written data back from the disk.
        local opts=""
        [ -z "$MEMORY_BYTES" ] || opts="data_cache=$((MEMORY_BYTES / 5))"
        [ "$fs" = dualfs ] || opts="${opts:+$opts,}writeback_cache"
        "$DUALFS_BIN" mount "$disk/meta.img" "$disk/data.img" "$mnt" ${opts:+-o "$opts"} || bench_die "$fs: mount failed"
    else
        loop=$(losetup --direct-io=on -f --show "$disk/fs.img") || bench_die "$fs: losetup --direct-io=on failed"
        BENCH_LOOP[$mnt]=$loop
        mount -t "$fs" "$loop" "$mnt" || bench_die "$fs: mount of $loop failed"
    fi
    mountpoint -q "$mnt" || bench_die "$fs: $mnt is not mounted"

    sync
    echo 3 >/proc/sys/vm/drop_caches
    before=$(model_stats "$disk")
    bench_log "$fs: PostMark"
    t0=$(bench_now)
    cg_start "$fs"
    bench_postmark "$mnt" "$log" "$FILES" "$TRANSACTIONS" "$SUBDIRS" "$MIN_SIZE" "$MAX_SIZE"
    grep -q "seconds total" "$log" || { cat "$log" >&2; bench_die "$fs: PostMark did not complete"; }
    # Everything the file system still holds goes to the disk, then out of its write cache
    # (sync FILE: an fsync of the image through the model, which waits for the cache).
    bench_log "$fs: unmount"
    _bench_unmount "$fs" "$mnt" || bench_die "$fs: unmount failed"
    if [ -n "$loop" ]; then
        losetup -d "$loop" || bench_die "$fs: losetup -d $loop failed"
        unset "BENCH_LOOP[$mnt]"
    fi
    for line in "${files[@]}"; do
        case "$line" in *.img:*) sync "$disk/${line%%:*}" ;; esac
    done
    R[$fs|wall]=$(bench_since "$t0")
    cg_stop "$fs"
    after=$(model_stats "$disk")
    for image in "${files[@]}"; do
        case "$image" in *.img:*) for key in $PART_KEYS; do STAT_KEYS_OF[$fs]="${STAT_KEYS_OF[$fs]:-} ${image%%:*}:$key"; done ;; esac
    done
    for key in $STAT_KEYS ${STAT_KEYS_OF[$fs]:-}; do
        R[$fs|$key]=$(awk -v k="$key" -F= '
            FNR == 1 { file++ }
            $1 == k { v[file] = $2 }
            END { printf "%.6f\n", v[2] - v[1] }' <(echo "$before") <(echo "$after"))
    done
    _bench_unmount diskmodel "$disk" || bench_die "$fs: diskmodel did not stop"
    rm -rf "$back"
    bench_log "$fs: disk I/O ${R[$fs|busy_s]} s, wall ${R[$fs|wall]} s"
}

for fs in $AVAILABLE; do run_one "$fs"; done

REF=ext2
[ -n "${R[ext2|busy_s]:-}" ] || REF=${AVAILABLE# }; REF=${REF%% *}
echo
echo "PostMark on one simulated disk: $FILES files of $MIN_SIZE-$MAX_SIZE B in $SUBDIRS subdirectories," \
    "$TRANSACTIONS transactions; 1 round; $(nproc) CPUs, kernel $(uname -r)"
echo "Disk: $SPEC; each file system's space $IMAGE at address 0 (DualFS: metadata $META there, data after it)"
echo "Model parameters: $PARAMS"
if [ -n "$MEMORY_BYTES" ]; then
    echo "Memory: PostMark in a cgroup v$CG_VERSION limited to $((MEMORY_BYTES >> 10)) KiB (under $CG_PARENT); DualFS's daemon outside it (its own caches are its design);" \
        "vm.dirty_background_bytes / dirty_bytes $(if [ "$DIRTY" = auto ]; then echo "$((MEMORY_BYTES / 10)) / $((MEMORY_BYTES / 5)) for the run"; else echo "the host's"; fi)"
else
    echo "Memory: the host's ($(awk '/MemTotal/ { printf "%d MiB", $2 / 1024 }' /proc/meminfo)), no cgroup; dirty limits the host's"
fi
echo "Disk I/O = the disk's busy time from after mount to the end of unmount + cache flush; x $REF = its disk I/O over $REF's"
echo
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
printf '%-8s %9s %7s %8s   %7s %7s %8s %8s %7s %9s %9s %9s %8s %8s %6s\n' "fs" "disk I/O" "x $REF" "wall s" \
    "reads" "writes" "MB read" "MB writ." "seeks" "seek s" "rotation" "transfer" "flushes" "destages" "late"
for fs in $AVAILABLE; do
    printf '%-8s %9.2f %7s %8.2f   %7.0f %7.0f %8s %8s %7.0f %9.2f %9.2f %9.2f %8.0f %8.0f %6.0f\n' "$fs" \
        "${R[$fs|busy_s]}" "$(bench_ratio "${R[$fs|busy_s]}" "${R[$REF|busy_s]}")" "${R[$fs|wall]}" \
        "${R[$fs|reads]}" "${R[$fs|writes]}" "$(mb "${R[$fs|bytes_read]}")" "$(mb "${R[$fs|bytes_written]}")" \
        "${R[$fs|seeks]}" "${R[$fs|seek_s]}" "${R[$fs|rotation_s]}" "${R[$fs|transfer_s]}" \
        "${R[$fs|flushes]}" "${R[$fs|destages]}" "${R[$fs|late]}"
done
for fs in $AVAILABLE; do
    [ -n "${R[$fs|meta.img:reads]:-}" ] || continue
    echo "$(bench_fs_label "$fs") by image: metadata (meta.img) ${R[$fs|meta.img:reads]%.*} reads, ${R[$fs|meta.img:writes]%.*} writes," \
        "$(mb "${R[$fs|meta.img:bytes_read]}") MB read, $(mb "${R[$fs|meta.img:bytes_written]}") MB written;" \
        "data (data.img) ${R[$fs|data.img:reads]%.*} reads, ${R[$fs|data.img:writes]%.*} writes," \
        "$(mb "${R[$fs|data.img:bytes_read]}") MB read, $(mb "${R[$fs|data.img:bytes_written]}") MB written"
done
for fs in $AVAILABLE; do
    [ -n "${R[$fs|mem_peak]:-}" ] || continue
    echo "$(bench_fs_label "$fs") PostMark's cgroup: peak $(mb "${R[$fs|mem_peak]}") MB${R[$fs|mem_failcnt]:+, limit hit ${R[$fs|mem_failcnt]} times}; ${R[$fs|mem_stat]}"
done
echo "reads/writes: the file system's requests (a write into the write cache counts when it is taken in);" \
    "seeks and seek/rotation/transfer: the mechanism's, destages included; late: requests whose real I/O outlasted the model's time"
for fs in "${!BENCH_SKIP[@]}"; do printf '%s: skipped: %s\n' "$fs" "${BENCH_SKIP[$fs]}"; done
for fs in $AVAILABLE; do
    bench_row "$fs" postmark disk_io_seconds "${R[$fs|busy_s]}" s
    bench_row "$fs" postmark wall_seconds "${R[$fs|wall]}" s
done
for fs in "${!BENCH_SKIP[@]}"; do bench_row "$fs" all skipped 1 note; done
bench_chart disk_io_seconds "PostMark, $FILES files, $TRANSACTIONS transactions, on $SPEC" "disk I/O time"
