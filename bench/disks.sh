#!/usr/bin/env bash
# The DualFS paper's experiments on simulated disks, compared by the disks' busy time (the
# paper's "disk I/O time"): the kernel compile with 1 and with 8 processes, PostMark, the
# cleaner experiment, and two read-mostly cases (a cold find + grep -r, a cold tar c), on kernel
# ext2, ext3, ext4, XFS and DualFS, each on a fresh simulated disk served by diskmodel
# (bench/fuse-tools; the paper5400 parameter set by default: a 5,400 RPM IDE disk of the
# paper's time), and on split configurations with their metadata on a simulated SSD.
#
#   bench/disks.sh --quick                       # CI size (about 3 minutes): PostMark at a tenth of the paper's
#                                                # size + a cold scan of a generated tree of 500 files, on
#                                                # ext2, ext4, dualfs, ext4-ssdjournal, dualfs-ssdmeta
#   bench/disks.sh                               # every phase, every configuration (hours on paper5400)
#   bench/disks.sh --phases postmark --fs "ext2 dualfs"   # what this script did before its phases
#   bench/disks.sh --phases "kc-1p kc-8p" --configs "ext4 dualfs" --out DIR
#   bench/disks.sh --quick --write-cache on      # the HDD's write cache on (paper5400: 2 MB)
#
# Phases (--phases "LIST", default all six; --quick: postmark cold-scan):
#   kc-1p, kc-8p  the kernel compile: make CONFIG (tinyconfig), then make -j1 / make -j8, in the
#                 Linux tree (Debian's linux-source) already on the file system. The unpack is
#                 not timed, as in the paper (which timed the compile): the tree is unpacked
#                 onto the images before the simulated disk is mounted, so it costs no disk time.
#   postmark      PostMark, the paper's parameters: 20,000 files of 500-10,000 B in 100
#                 subdirectories, 50,000 transactions (--quick: 2,000 / 10 / 5,000).
#   cleaner       the cleaner experiment as the slides do it: copy a tree (the generated tree of
#                 examples/cleaner.rs, here 2,000 files, 33 MiB), delete 7/8 of its regular
#                 files (all but every 8th in path order), 20 times. DualFS's metadata partition
#                 is small there (--cleaner-meta, 16M, in log segments of --cleaner-segment,
#                 256K, as examples/cleaner.rs has it) so that its log wraps and the mount's own
#                 cleaner thread has to clean; "dualfs-noclean" (added to this phase with dualfs)
#                 is the same DualFS with a metadata partition of --meta-size (256M), which the
#                 workload never fills: no cleaning at all.
#   cold-scan     `find TREE` of the whole tree, then `grep -r -c include` of its folder
#                 --read-dir (the Linux tree: fs, 2,078 files, 40 MiB), after a fresh mount and
#                 drop_caches; the find's own figures are reported too. The Linux tree's grep
#                 reads only a folder because all of it (1.2 GiB in 78,600 files) takes 12
#                 minutes of disk time per file system on paper5400; --read-dir . reads it all.
#   cold-tar      `tar c DIR | wc -c` of the same folder, cold the same way.
#   The scans' tree is the Linux tree, or with --tree-files N (--quick: 500) a generated tree
#   of N files as the cleaner's, read whole.
#
# Configurations (--configs or --fs "LIST"; default: ext2 ext3 ext4 xfs dualfs ext4-ssdjournal
# xfs-rt dualfs-ssdmeta; --quick: ext2 ext4 dualfs ext4-ssdjournal dualfs-ssdmeta):
#   one disk (an HDD of --model): ext2, ext3, ext4, xfs (kernel, their image at address 0,
#     through a loop device with direct I/O), dualfs (metadata partition at address 0, data
#     partition right after it, both opened by DualFS on the disk), dualfs-wb (the same with
#     -o writeback_cache), dualfs-nora (the same without read-ahead in its log or of its file
#     data: -o log_readahead=0,data_readahead=0). DUALFS_OPTS in the environment: more -o
#     options for every DualFS configuration; DUALFS_LOG_DIR=DIR: each DualFS mount appends
#     its daemon's log (RUST_LOG's levels) to DIR/CFG-PHASE.log; DISKMODEL_TRACE=FILE: the
#     disks' requests of each phase and configuration in FILE.CFG-PHASE (diskmodel's trace).
#   split (metadata on an SSD of --ssd-model, data on the HDD):
#     ext4-ssdjournal  ext4 on the HDD, its journal on the SSD (mke2fs -O journal_dev; the size
#                      mkfs.ext4 gives an internal journal of that file system)
#     xfs-rt           XFS whose data device (all its metadata and its log) is on the SSD and
#                      whose realtime device on the HDD holds all file data (mkfs.xfs -d
#                      rtinherit=1 -r rtdev=...); skipped on kernels built without CONFIG_XFS_RT
#     xfs-ssdlog       (not in the default list) XFS on the HDD with its log on the SSD
#                      (-l logdev=..., the size of its internal log): the nearest XFS split
#                      where xfs-rt cannot run
#     dualfs-ssdmeta   DualFS's metadata partition on the SSD, its data partition on the HDD
#   For the split configurations the figures are per disk: disk_io_seconds is the HDD's busy
#   time, ssd_io_seconds the SSD's.
#
# Options: --quick, --phases "LIST", --configs/--fs "LIST"; PostMark: --files F,
# --transactions T, --subdirs S, --size MIN-MAX (bytes, default 500-10000); the kernel tree:
# --tarball FILE (default the newest /usr/src/linux-source-*.tar.xz), --config tinyconfig|
# allnoconfig; the scans: --tree-files N, --read-dir DIR (a folder of the tree, . for all);
# the cleaner: --cleaner-files N (2000), --cleaner-rounds N (20), --cleaner-meta SIZE,
# --cleaner-segment SIZE; the disks: --model SPEC (the HDD, default paper5400), --ssd-model SPEC
# (default ssd), --capacity SIZE (the HDD, default 4G; 8G for the phases on the Linux tree),
# --image-size SIZE (each file system's space, default 1536M; 3G on the Linux tree),
# --meta-size SIZE (DualFS's metadata partition, out of the image size, default 256M; 512M on
# the Linux tree), --write-cache off|on|SIZE (the HDD's, default: the model's own setting, off
# for paper5400); memory: --memory SIZE|none|auto, --kc-memory SIZE|none, --dirty auto|keep;
# --out DIR (DIR/disks.csv, DIR/disks.png of disk I/O time over ext2's, DIR/disks-wall.png of
# wall time over ext2's).
#
# Every phase of every configuration gets fresh disks (head at address 0, caches empty) and a
# fresh file system: mkfs (and, for the phases on a tree, the tree put on it with the file
# system mounted straight on its images in memory) happens before the disks are mounted and
# costs no disk time. The disks' capacity is small so that the images cover a realistic share
# of them (seek distances as on a disk mostly used by this file system).
#
# Measured for each phase, from after the mount + sync + drop_caches to the end of the
# unmount and a flush of the disks' write caches (so that data written back at unmount
# counts): each disk's busy time (from MNT/.diskmodel-stats before and after), its ratio to
# ext2's, the wall time, and where the HDD's time went (requests, seeks, seek / rotation /
# transfer seconds), with each image's requests and bytes (for DualFS and the split
# configurations: which partition they were for). The backing images live in memory
# (BENCH_TMPDIR, default /dev/shm), so that the host's storage does not make requests late
# ("late": requests whose real I/O outlasted the model's time).
#
# The memory: the paper's machine had 256 MB of RAM, this one may have a hundred times more, in
# which a kernel file system keeps everything a workload writes until it is deleted. So each
# workload runs in a memory cgroup (v2 if its memory controller is there, else v1): PostMark in
# the paper machine's 256 MiB scaled by its files (FILES / 20,000: 25.6 MiB with --quick),
# the cleaner and the scans in 256 MiB, the kernel compile in --kc-memory (default 1G: make
# -j8 of tinyconfig peaked at 0.6-0.9 GB here, page cache included, and compilers that
# outgrow a limit are killed, there being no swap). --memory SIZE sets the first two, none
# drops the cgroups. The page cache a workload fills and dirties (a kernel file system's, or
# that of DualFS's files in the FUSE mount) is charged to its cgroup. DualFS's daemon stays
# outside it: its own caches (metadata, log segments) are part of its design, but its cache of
# written data (data_cache) gets the dirty limit the kernel file systems get (the memory / 5).
# The kernel's dirty limits are global (vm.dirty_*): with --dirty auto they are set for each
# phase to the kernel's default ratios (10% background, 20% limit) of that phase's memory, and
# restored at exit (this throttles every writer of the host meanwhile). --dirty keep leaves
# the host's.
#
# Needs root, /dev/fuse and loop devices; installs postmark, e2fsprogs, xfsprogs (and, for the
# kernel compile or the Linux tree, linux-source and the kernel's build dependencies; gnuplot-nox
# with --out) with apt-get if missing.
set -euo pipefail
export LC_ALL=C
export BENCH_TMPDIR="${BENCH_TMPDIR:-/dev/shm}"
. "$(dirname "$0")/lib.sh"

ALL_PHASES="kc-1p kc-8p postmark cleaner cold-scan cold-tar"
KNOWN_CONFIGS="ext2 ext3 ext4 xfs dualfs dualfs-wb dualfs-nora ext4-ssdjournal xfs-rt xfs-ssdlog dualfs-ssdmeta"
PHASES=$ALL_PHASES CONFIGS="ext2 ext3 ext4 xfs dualfs ext4-ssdjournal xfs-rt dualfs-ssdmeta"
FILES=20000 TRANSACTIONS=50000 SUBDIRS=100 MIN_SIZE=500 MAX_SIZE=10000
MODEL=paper5400 SSD_MODEL=ssd CAPACITY="" IMAGE="" META="" WRITE_CACHE=""
TARBALL="" KC_CONFIG=tinyconfig TREE_FILES="" READ_DIR="" CLEANER_FILES=2000 CLEANER_ROUNDS=20 CLEANER_META=16M CLEANER_SEGMENT=256K
MEMORY=auto KC_MEMORY=1G DIRTY=auto OUT="" QUICK=""
usage() { bench_usage "$0" "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 FILES=2000 TRANSACTIONS=5000 SUBDIRS=10; shift ;;
        --phases) PHASES=$2; PHASES_GIVEN=1; shift 2 ;;
        --configs | --fs) CONFIGS=$2; CONFIGS_GIVEN=1; shift 2 ;;
        --files) FILES=$2; shift 2 ;;
        --transactions) TRANSACTIONS=$2; shift 2 ;;
        --subdirs) SUBDIRS=$2; shift 2 ;;
        --size) MIN_SIZE=${2%-*}; MAX_SIZE=${2#*-}; shift 2 ;;
        --tarball) TARBALL=$2; shift 2 ;;
        --config) KC_CONFIG=$2; shift 2 ;;
        --tree-files) TREE_FILES=$2; shift 2 ;;
        --read-dir) READ_DIR=$2; shift 2 ;;
        --cleaner-files) CLEANER_FILES=$2; shift 2 ;;
        --cleaner-rounds) CLEANER_ROUNDS=$2; shift 2 ;;
        --cleaner-meta) CLEANER_META=$2; shift 2 ;;
        --cleaner-segment) CLEANER_SEGMENT=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --ssd-model) SSD_MODEL=$2; shift 2 ;;
        --capacity) CAPACITY=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --meta-size) META=$2; shift 2 ;;
        --write-cache) WRITE_CACHE=$2; shift 2 ;;
        --memory) MEMORY=$2; shift 2 ;;
        --kc-memory) KC_MEMORY=$2; shift 2 ;;
        --dirty) DIRTY=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 2 ;;
    esac
done
if [ -n "$QUICK" ]; then
    [ -n "${PHASES_GIVEN:-}" ] || PHASES="postmark cold-scan"
    [ -n "${CONFIGS_GIVEN:-}" ] || CONFIGS="ext2 ext4 dualfs ext4-ssdjournal dualfs-ssdmeta"
    [ -n "$TREE_FILES" ] || TREE_FILES=500
fi
for p in $PHASES; do
    case " $ALL_PHASES " in *" $p "*) ;; *) bench_die "--phases: unknown phase '$p' (known: $ALL_PHASES)" ;; esac
done
for c in $CONFIGS; do
    case " $KNOWN_CONFIGS " in *" $c "*) ;; *) bench_die "--configs: unknown configuration '$c' (known: $KNOWN_CONFIGS)" ;; esac
done
case "$KC_CONFIG" in tinyconfig | allnoconfig) ;; *) bench_die "--config: tinyconfig or allnoconfig" ;; esac
case "$DIRTY" in auto | keep) ;; *) bench_die "--dirty: auto or keep" ;; esac
bytes_of() { numfmt --from=iec "$2" 2>/dev/null || bench_die "$1 $2: not a size"; }
has_phase() { case " $PHASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# The sizes of the two kinds of phases: PostMark and the cleaner on an empty file system of
# --image-size on a disk of --capacity (as before the other phases existed); the kernel
# compile and the scans of the Linux tree (1.3 GB in 84,000 entries) on larger ones.
P_CAPACITY=${CAPACITY:-4G} P_IMAGE=${IMAGE:-1536M} P_META=${META:-256M}
T_CAPACITY=${CAPACITY:-8G} T_IMAGE=${IMAGE:-3G} T_META=${META:-512M}
P_CAPACITY_BYTES=$(bytes_of --capacity "$P_CAPACITY") && T_CAPACITY_BYTES=$(bytes_of --capacity "$T_CAPACITY") &&
    P_IMAGE_BYTES=$(bytes_of --image-size "$P_IMAGE") && T_IMAGE_BYTES=$(bytes_of --image-size "$T_IMAGE") &&
    P_META_BYTES=$(bytes_of --meta-size "$P_META") && T_META_BYTES=$(bytes_of --meta-size "$T_META") &&
    CLEANER_META_BYTES=$(bytes_of --cleaner-meta "$CLEANER_META") || exit 1
if [ "$P_META_BYTES" -ge "$P_IMAGE_BYTES" ] || [ "$T_META_BYTES" -ge "$T_IMAGE_BYTES" ]; then
    bench_die "--meta-size must be below --image-size"
fi
if [ "$P_CAPACITY_BYTES" -lt "$P_IMAGE_BYTES" ] || [ "$T_CAPACITY_BYTES" -lt "$T_IMAGE_BYTES" ]; then
    bench_die "--image-size does not fit on a disk of --capacity"
fi
# The memory of each kind of phase, in bytes ("" = no cgroup).
case "$MEMORY" in
    none) PM_MEMORY="" TREE_MEMORY="" ;;
    auto) PM_MEMORY=$((268435456 * FILES / 20000)); [ "$PM_MEMORY" -ge 16777216 ] || PM_MEMORY=16777216
        TREE_MEMORY=268435456 ;;
    *) PM_MEMORY=$(bytes_of --memory "$MEMORY") || exit 1; TREE_MEMORY=$PM_MEMORY ;;
esac
case "$KC_MEMORY" in none) KC_MEMORY_BYTES="" ;; *) KC_MEMORY_BYTES=$(bytes_of --kc-memory "$KC_MEMORY") || exit 1 ;; esac
HDD_SPEC_BASE="$MODEL${WRITE_CACHE:+,write_cache=$WRITE_CACHE}"
DISKMODEL_BIN="$CARGO_TARGET_DIR/release/diskmodel"
GREP_WORD=include

bench_init
bench_install postmark e2fsprogs xfsprogs python3
NEED_LINUX=""
if has_phase kc-1p || has_phase kc-8p; then NEED_LINUX=1; fi
if [ -z "$TREE_FILES" ] && { has_phase cold-scan || has_phase cold-tar; }; then NEED_LINUX=1; fi
[ -n "$NEED_LINUX" ] && [ -z "$TARBALL" ] && bench_install linux-source
[ -n "$NEED_LINUX" ] && bench_install build-essential bc flex bison libelf-dev libssl-dev xz-utils cpio perl kmod
[ -n "$OUT" ] && bench_install gnuplot-nox
bench_build
[ -x "$DISKMODEL_BIN" ] || bench_die "diskmodel was not built: ${BENCH_FUSE_TOOLS_ERR:-see bench/fuse-tools}"
HDD_PARAMS=$("$DISKMODEL_BIN" --show "$HDD_SPEC_BASE,capacity=$P_CAPACITY" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["params"]))') ||
    bench_die "bad disk model: $HDD_SPEC_BASE"
HDD_PARAMS_T=$("$DISKMODEL_BIN" --show "$HDD_SPEC_BASE,capacity=$T_CAPACITY" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["params"]))') ||
    bench_die "bad disk model: $HDD_SPEC_BASE,capacity=$T_CAPACITY"
SSD_PARAMS=$("$DISKMODEL_BIN" --show "$SSD_MODEL" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["params"]))') ||
    bench_die "bad disk model: $SSD_MODEL"
bench_out_init "$OUT" disks

is_dualfs_cfg() { case "$1" in dualfs*) return 0 ;; *) return 1 ;; esac; }
is_split() { case "$1" in ext4-ssdjournal | xfs-rt | xfs-ssdlog | dualfs-ssdmeta) return 0 ;; *) return 1 ;; esac; }
cfg_label() {
    case "$1" in
        dualfs-noclean) echo "DualFS, no cleaning" ;;
        dualfs-ssdmeta) echo "DualFS, meta on SSD" ;;
        ext4-ssdjournal) echo "ext4, journal on SSD" ;;
        xfs-rt) echo "XFS, realtime on HDD" ;;
        xfs-ssdlog) echo "XFS, log on SSD" ;;
        *) bench_fs_label "$1" ;;
    esac
}

# ---- What can run here.
# xfs-rt needs a kernel built with CONFIG_XFS_RT: try a small one.
probe_xfs_rt() {
    local dir="$BENCH_TMP/probe-rt" d r rc=0
    mkdir -p "$dir/mnt"
    truncate -s 512M "$dir/fs.img"
    truncate -s 64M "$dir/rt.img"
    d=$(losetup -f --show "$dir/fs.img") || { echo "losetup failed"; return 1; }
    r=$(losetup -f --show "$dir/rt.img") || { losetup -d "$d"; echo "losetup failed"; return 1; }
    if ! mkfs.xfs -q -f -d rtinherit=1 -r rtdev="$r" "$d" >/dev/null 2>&1; then
        echo "mkfs.xfs -r rtdev= failed"; rc=1
    elif ! mount -t xfs -o rtdev="$r" "$d" "$dir/mnt" 2>/dev/null; then
        if dmesg 2>/dev/null | tail -n 20 | grep -q "Not built with CONFIG_XFS_RT"; then
            echo "this kernel has no XFS realtime support (CONFIG_XFS_RT is not set)"
        else
            echo "mount -o rtdev= failed: $(dmesg 2>/dev/null | tail -n 1)"
        fi
        rc=1
    else
        umount "$dir/mnt"
    fi
    losetup -d "$d" "$r"
    rm -rf "$dir"
    return $rc
}
AVAILABLE=""
for c in $CONFIGS; do
    case "$c" in
        dualfs*) if [ ! -x "$DUALFS_BIN" ] || [ ! -x "$MKFS_DUALFS_BIN" ]; then BENCH_SKIP[$c]="DualFS was not built"; continue; fi ;;
        ext*) command -v "mkfs.${c%%-*}" >/dev/null || { BENCH_SKIP[$c]="mkfs.${c%%-*} is not installed"; continue; } ;;
        xfs*) command -v mkfs.xfs >/dev/null || { BENCH_SKIP[$c]="mkfs.xfs is not installed"; continue; } ;;
    esac
    if [ "$c" = xfs-rt ]; then
        why=$(probe_xfs_rt) || { BENCH_SKIP[$c]=$why; continue; }
    fi
    AVAILABLE="$AVAILABLE $c"
done
AVAILABLE=${AVAILABLE# }
for c in "${!BENCH_SKIP[@]}"; do bench_log "$c: skipped (${BENCH_SKIP[$c]})"; done
[ -n "$AVAILABLE" ] || bench_die "no configuration to run"
SPLIT_RAN=""
for c in $AVAILABLE; do is_split "$c" && SPLIT_RAN=1; done

# ---- Memory cgroups and dirty limits.
# The memory cgroup a workload runs in: a child of the root (cgroup v2, with the memory
# controller enabled for the root's children) or of this script's own memory cgroup (v1), one
# per phase and configuration (its peak is that run's), removed after it.
CG_VERSION="" CG_PARENT="" CG=""
DIRTY_SAVED=()
if [ -n "$PM_MEMORY$TREE_MEMORY$KC_MEMORY_BYTES" ]; then
    if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
        CG_VERSION=2 CG_PARENT=/sys/fs/cgroup
    elif [ -f /sys/fs/cgroup/unified/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/unified/cgroup.controllers; then
        CG_VERSION=2 CG_PARENT=/sys/fs/cgroup/unified
    elif [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
        CG_VERSION=1 CG_PARENT=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/self/cgroup)
        CG_PARENT=${CG_PARENT%/}
    else
        bench_die "--memory: no cgroup memory controller (mount | grep cgroup); --memory none --kc-memory none run without one"
    fi
    if [ "$CG_VERSION" = 2 ] && ! grep -qw memory "$CG_PARENT/cgroup.subtree_control"; then
        echo +memory >"$CG_PARENT/cgroup.subtree_control" || bench_die "--memory: cannot enable the memory controller in $CG_PARENT"
    fi
fi
cg_start() { # NAME BYTES: a fresh cgroup limited to BYTES ("" = none) for the workload
    CG=""
    [ -n "$2" ] && [ -n "$CG_VERSION" ] || return 0
    CG=$CG_PARENT/dualfs-bench-disks-$$-$1
    mkdir "$CG" || bench_die "cannot create the cgroup $CG"
    if [ "$CG_VERSION" = 2 ]; then
        [ ! -f "$CG/memory.swap.max" ] || echo 0 >"$CG/memory.swap.max"
        echo "$2" >"$CG/memory.max"
    else
        echo "$2" >"$CG/memory.limit_in_bytes"
    fi || bench_die "cannot limit $CG to $2 bytes"
}
cg_stop() { # KEY: its peak memory and reclaim figures in R, then the cgroup removed
    [ -n "$CG" ] || return 0
    if [ "$CG_VERSION" = 2 ]; then
        R[$1|mem_peak]=$(cat "$CG/memory.peak" 2>/dev/null || echo 0)
        R[$1|mem_oom]=$(awk '$1 == "oom_kill" { print $2 }' "$CG/memory.events")
    else
        R[$1|mem_peak]=$(cat "$CG/memory.max_usage_in_bytes")
        R[$1|mem_failcnt]=$(cat "$CG/memory.failcnt")
        R[$1|mem_oom]=$(awk '$1 == "oom_kill" { print $2 }' "$CG/memory.oom_control")
    fi
    R[$1|mem_stat]=$(awk '$1 ~ /^(total_)?(pgscan|pgsteal|workingset_refault_file|pgmajfault)$/ { printf "%s%s=%s", sep, $1, $2; sep = " " }' "$CG/memory.stat")
    rmdir "$CG" 2>/dev/null || { sleep 1; rmdir "$CG" 2>/dev/null; } || bench_log "could not remove $CG"
    CG=""
}
# cg_run CMD...: CMD in the phase's cgroup (if there is one).
cg_run() {
    if [ -n "$CG" ]; then
        # shellcheck disable=SC2016
        bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' cg_run "$CG" "$@"
    else
        "$@"
    fi
}
if [ "$DIRTY" = auto ]; then
    # Restored at exit in this order, zeros skipped: a ratio written sets its bytes setting to
    # 0 (the kernel refuses a 0 written there), a bytes setting written sets its ratio to 0.
    for key in vm.dirty_background_ratio vm.dirty_ratio vm.dirty_background_bytes vm.dirty_bytes; do
        DIRTY_SAVED+=("$key=$(sysctl -n "$key")")
    done
fi
set_dirty() { # BYTES: the kernel's dirty limits for a machine of that memory ("": the host's)
    [ "$DIRTY" = auto ] || return 0
    local kv
    if [ -z "$1" ]; then
        for kv in "${DIRTY_SAVED[@]}"; do [ "${kv#*=}" = 0 ] || sysctl -q -w "$kv" >/dev/null; done
        return 0
    fi
    sysctl -q -w vm.dirty_background_bytes=$(($1 / 10)) vm.dirty_bytes=$(($1 / 5)) ||
        bench_die "--dirty auto: cannot set vm.dirty_background_bytes / vm.dirty_bytes"
}
bench_cleanup_extra() {
    local kv
    [ -n "$CG" ] && [ -d "$CG" ] && rmdir "$CG" 2>/dev/null
    for kv in "${DIRTY_SAVED[@]}"; do [ "${kv#*=}" = 0 ] || sysctl -q -w "$kv" >/dev/null; done
}

# ---- The trees.
# The tree of examples/cleaner.rs: N files in folders of 40, two levels deep, their sizes
# skewed small as a source tree's (half under 2 KiB, 5% of 64-256 KiB), their bytes a pattern
# of their number; the same tree as that benchmark's for the same N.
generate_tree() { # DIR N
    python3 - "$1" "$2" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
M = (1 << 64) - 1
def size_of(i):
    h = ((i * 0x9E3779B97F4A7C15) & M) >> 11
    m = h % 100
    if m < 50: return h % 2048
    if m < 80: return 2048 + h % 14336
    if m < 95: return 16384 + h % 49152
    return 65536 + h % 196608
for i in range(n):
    d = os.path.join(root, "d%02d" % (i // 1600), "s%03d" % ((i // 40) % 40))
    if i % 40 == 0:
        os.makedirs(d, exist_ok=True)
    block = bytes((((k ^ (i & 0xFF)) * 31) & 0xFF) for k in range(256))
    size = size_of(i)
    with open(os.path.join(d, "file%06d.c" % i), "wb") as f:
        f.write((block * (size // 256 + 1))[:size])
EOF
}
tree_summary() { # DIR: "FILES files, MiB MiB"
    find "$1" -type f -printf '%s\n' | awk '{ n++; b += $1 } END { printf "%d files, %.1f MiB\n", n, b / 1048576 }'
}
LINUX_TAR="" LINUX_TREE="" SCAN_TREE="" SCAN_SRC="" SCAN_WHAT="" READ_PATH="" READ_WHAT="" CLEAN_SRC="" CLEAN_WHAT=""
if [ -n "$NEED_LINUX" ]; then
    bench_kernel_tar "$TARBALL"
    LINUX_TAR=$BENCH_TAR LINUX_TREE=$BENCH_TAR_TREE
fi
if [ -n "$TREE_FILES" ]; then
    SCAN_SRC="$BENCH_TMP/src-scan" SCAN_TREE=tree
    mkdir -p "$SCAN_SRC"
    generate_tree "$SCAN_SRC/$SCAN_TREE" "$TREE_FILES"
    SCAN_WHAT="a generated tree ($(tree_summary "$SCAN_SRC/$SCAN_TREE"))"
    READ_DIR=${READ_DIR:-.}
else
    SCAN_TREE=$LINUX_TREE
    READ_DIR=${READ_DIR:-fs}
    [ -z "$LINUX_TREE" ] || SCAN_WHAT="the Linux tree $LINUX_TREE ($BENCH_TAR_ENTRIES entries, $((BENCH_TAR_BYTES >> 20)) MiB)"
fi
# What grep -r and tar c read: the tree, or its folder READ_DIR.
READ_DIR=${READ_DIR#./} READ_DIR=${READ_DIR%/}
if [ "$READ_DIR" = . ] || [ -z "$READ_DIR" ]; then
    READ_PATH=$SCAN_TREE READ_WHAT="all of it"
elif [ -n "$SCAN_SRC" ]; then
    READ_PATH=$SCAN_TREE/$READ_DIR
    [ -d "$SCAN_SRC/$READ_PATH" ] || bench_die "--read-dir $READ_DIR: not a folder of the generated tree"
    READ_WHAT="its folder $READ_DIR ($(tree_summary "$SCAN_SRC/$READ_PATH"))"
elif [ -n "$LINUX_TAR" ]; then
    READ_PATH=$SCAN_TREE/$READ_DIR
    READ_WHAT=$(tar -tvf "$LINUX_TAR" | awk -v p="$READ_PATH/" '$1 ~ /^-/ && index($6, p) == 1 { n++; b += $3 }
        END { if (n) printf "its folder %s (%d files, %.1f MiB)\n", substr(p, 1, length(p) - 1), n, b / 1048576 }')
    [ -n "$READ_WHAT" ] || bench_die "--read-dir $READ_DIR: no files under $READ_PATH in the tarball"
fi
if has_phase cleaner; then
    CLEAN_SRC="$BENCH_TMP/src-cleaner"
    mkdir -p "$CLEAN_SRC"
    generate_tree "$CLEAN_SRC/tree" "$CLEANER_FILES"
    CLEAN_WHAT="a generated tree ($(tree_summary "$CLEAN_SRC/tree"), as examples/cleaner.rs makes it)"
fi

# ---- Each configuration's images: mkfs, placement on the disks, mount, unmount.
# The geometry of a phase: G_CAP (the HDD's capacity), G_IMAGE, G_META (DualFS's metadata
# partition), G_MEM (the workload's memory), G_CONTENT (what is on the file system when the
# phase starts: "", linux or generated).
geometry() { # PHASE CFG
    G_SEGMENT=""   # DualFS's log segment size ("": mkfs's default)
    case "$1" in
        postmark) G_CAP=$P_CAPACITY G_IMAGE=$P_IMAGE_BYTES G_META=$P_META_BYTES G_MEM=$PM_MEMORY G_CONTENT="" ;;
        cleaner)
            G_CAP=$P_CAPACITY G_IMAGE=$P_IMAGE_BYTES G_META=$CLEANER_META_BYTES G_MEM=$TREE_MEMORY G_CONTENT=""
            G_SEGMENT=$CLEANER_SEGMENT
            [ "$2" != dualfs-noclean ] || G_META=$P_META_BYTES ;;
        kc-*) G_CAP=$T_CAPACITY G_IMAGE=$T_IMAGE_BYTES G_META=$T_META_BYTES G_MEM=$KC_MEMORY_BYTES G_CONTENT=linux ;;
        cold-*)
            G_MEM=$TREE_MEMORY
            if [ -n "$TREE_FILES" ]; then
                G_CAP=$P_CAPACITY G_IMAGE=$P_IMAGE_BYTES G_META=$P_META_BYTES G_CONTENT=generated
            else
                G_CAP=$T_CAPACITY G_IMAGE=$T_IMAGE_BYTES G_META=$T_META_BYTES G_CONTENT=linux
            fi ;;
    esac
}

# The internal journal mkfs.ext4 makes (or log mkfs.xfs makes) for a file system of BYTES: the
# external one gets that size. Bytes.
declare -A JOURNAL_SIZE=()
ext4_journal_bytes() { # BYTES
    if [ -z "${JOURNAL_SIZE[ext4|$1]:-}" ]; then
        truncate -s "$1" "$BENCH_TMP/probe.img"
        mkfs.ext4 -q -F "$BENCH_TMP/probe.img" >/dev/null
        JOURNAL_SIZE[ext4|$1]=$(dumpe2fs -h "$BENCH_TMP/probe.img" 2>/dev/null |
            awk -F: '/^Total journal size/ { v = $2; gsub(/ /, "", v); print v }' | numfmt --from=iec)
        rm -f "$BENCH_TMP/probe.img"
    fi
    echo "${JOURNAL_SIZE[ext4|$1]}"
}
xfs_log_bytes() { # BYTES
    if [ -z "${JOURNAL_SIZE[xfs|$1]:-}" ]; then
        truncate -s "$1" "$BENCH_TMP/probe.img"
        JOURNAL_SIZE[xfs|$1]=$(mkfs.xfs -N -f "$BENCH_TMP/probe.img" |
            sed -n 's/^log *=internal.*bsize=\([0-9]*\) *blocks=\([0-9]*\).*/\1 \2/p' | awk '{ print $1 * $2 }')
        rm -f "$BENCH_TMP/probe.img"
    fi
    echo "${JOURNAL_SIZE[xfs|$1]}"
}
XFS_RT_DATA=$((512 << 20))   # xfs-rt's data device on the SSD (mkfs.xfs wants 300 MB at least)

# mkfs_cfg CFG DIR: make CFG's images in DIR (G_IMAGE, G_META) and the file system on them.
# (Loop devices only where mkfs needs block devices: an external journal, log or realtime device.)
mkfs_cfg() {
    local cfg=$1 dir=$2 jdev xdev fsdev
    mkdir -p "$dir"
    local ext_opts="lazy_itable_init=0"
    case "$cfg" in
        dualfs*)
            truncate -s "$G_META" "$dir/meta.img"
            truncate -s $((G_IMAGE - G_META)) "$dir/data.img"
            "$MKFS_DUALFS_BIN" -q ${G_SEGMENT:+--segment-size "$G_SEGMENT"} "$dir/meta.img" "$dir/data.img" >/dev/null
            ;;
        ext2 | ext3 | ext4)
            truncate -s "$G_IMAGE" "$dir/fs.img"
            [ "$cfg" != ext2 ] && ext_opts="$ext_opts,lazy_journal_init=0"
            "mkfs.$cfg" -q -F -E "$ext_opts" "$dir/fs.img" >/dev/null
            ;;
        xfs)
            truncate -s "$G_IMAGE" "$dir/fs.img"
            mkfs.xfs -q -f "$dir/fs.img" >/dev/null
            ;;
        ext4-ssdjournal)
            truncate -s "$G_IMAGE" "$dir/fs.img"
            truncate -s "$(ext4_journal_bytes "$G_IMAGE")" "$dir/journal.img"
            _bench_attach jdev "$dir/journal.img"
            _bench_attach fsdev "$dir/fs.img"
            if ! mke2fs -q -F -O journal_dev -b 4096 "$jdev" >/dev/null ||
                ! mkfs.ext4 -q -F -J device="$jdev" -E "$ext_opts" "$fsdev" >/dev/null; then
                losetup -d "$jdev" "$fsdev"
                bench_die "$cfg: mkfs failed"
            fi
            losetup -d "$jdev" "$fsdev"
            ;;
        xfs-rt)
            truncate -s "$XFS_RT_DATA" "$dir/fs.img"
            truncate -s "$G_IMAGE" "$dir/rt.img"
            _bench_attach fsdev "$dir/fs.img"
            _bench_attach xdev "$dir/rt.img"
            mkfs.xfs -q -f -d rtinherit=1 -r rtdev="$xdev" "$fsdev" >/dev/null || { losetup -d "$fsdev" "$xdev"; bench_die "$cfg: mkfs failed"; }
            losetup -d "$fsdev" "$xdev"
            ;;
        xfs-ssdlog)
            truncate -s "$G_IMAGE" "$dir/fs.img"
            truncate -s "$(xfs_log_bytes "$G_IMAGE")" "$dir/log.img"
            _bench_attach fsdev "$dir/fs.img"
            _bench_attach xdev "$dir/log.img"
            mkfs.xfs -q -f -l logdev="$xdev" "$fsdev" >/dev/null || { losetup -d "$fsdev" "$xdev"; bench_die "$cfg: mkfs failed"; }
            losetup -d "$fsdev" "$xdev"
            ;;
    esac
}
# layout CFG: L_FILES (diskmodel's --file arguments) and L_IMAGES (the images, HDD's first).
layout() {
    case "$1" in
        dualfs | dualfs-wb | dualfs-nora | dualfs-noclean) L_FILES=(--file meta.img:d:0 --file "data.img:d:$G_META") L_IMAGES="meta.img data.img" ;;
        dualfs-ssdmeta) L_FILES=(--file data.img:d:0 --file meta.img:s:0) L_IMAGES="data.img meta.img" ;;
        ext4-ssdjournal) L_FILES=(--file fs.img:d:0 --file journal.img:s:0) L_IMAGES="fs.img journal.img" ;;
        xfs-rt) L_FILES=(--file rt.img:d:0 --file fs.img:s:0) L_IMAGES="rt.img fs.img" ;;
        xfs-ssdlog) L_FILES=(--file fs.img:d:0 --file log.img:s:0) L_IMAGES="fs.img log.img" ;;
        *) L_FILES=(--file fs.img:d:0) L_IMAGES="fs.img" ;;
    esac
}

# fs_up CFG DIR MNT DIRECT [DUALFS_OPTS]: mount CFG's file system from its images in DIR at
# MNT; DIRECT=1: through loop devices with direct I/O (images on the simulated disks).
_attach() { # IMAGE: a loop device on it, added to LOOPS and BENCH_LOOP[MNT]
    local l
    l=$(losetup ${DIO:+--direct-io=on} -f --show "$UP_DIR/$1") || bench_die "losetup $UP_DIR/$1 failed"
    LOOPS+=("$l")
    BENCH_LOOP[$UP_MNT]="${LOOPS[*]}"
}
fs_up() {
    local cfg=$1 opts=${5:-}
    UP_DIR=$2 UP_MNT=$3 DIO="" LOOPS=()
    [ "$4" = 1 ] && DIO=1
    mkdir -p "$UP_MNT"
    if is_dualfs_cfg "$cfg"; then
        [ "$cfg" = dualfs-wb ] && opts="${opts:+$opts,}writeback_cache"
        [ "$cfg" = dualfs-nora ] && opts="${opts:+$opts,}log_readahead=0,data_readahead=0"
        [ -n "${DUALFS_OPTS:-}" ] && opts="${opts:+$opts,}$DUALFS_OPTS"
        BENCH_MOUNTS+=("dualfs|$UP_MNT")   # unmounted with `dualfs umount` (waits for its last write)
        local logf=()
        [ -n "${DUALFS_LOG_DIR:-}" ] && logf=(--log-file "$DUALFS_LOG_DIR/$cfg-${UP_PHASE:-mount}.log")
        "$DUALFS_BIN" mount "${logf[@]}" "$UP_DIR/meta.img" "$UP_DIR/data.img" "$UP_MNT" ${opts:+-o "$opts"} || return 1
    else
        BENCH_MOUNTS+=("$cfg|$UP_MNT")
        case "$cfg" in
            ext4-ssdjournal) _attach journal.img; _attach fs.img; mount -t ext4 -o "journal_path=${LOOPS[0]}" "${LOOPS[1]}" "$UP_MNT" ;;
            xfs-rt) _attach fs.img; _attach rt.img; mount -t xfs -o "rtdev=${LOOPS[1]}" "${LOOPS[0]}" "$UP_MNT" ;;
            xfs-ssdlog) _attach fs.img; _attach log.img; mount -t xfs -o "logdev=${LOOPS[1]}" "${LOOPS[0]}" "$UP_MNT" ;;
            *) _attach fs.img; mount -t "$cfg" "${LOOPS[0]}" "$UP_MNT" ;;
        esac || return 1
    fi
    mountpoint -q "$UP_MNT"
}
fs_down() { # CFG MNT: unmount (DualFS: until its last write is done), detach the loop devices
    local fs=$1 l
    is_dualfs_cfg "$1" && fs=dualfs
    _bench_unmount "$fs" "$2" || return 1
    for l in ${BENCH_LOOP[$2]:-}; do losetup -d "$l" || return 1; done
    unset "BENCH_LOOP[$2]"
}

# The file systems with a tree on them, made once per configuration (the file system mounted
# straight on its images in memory), copied for each phase that starts from it.
declare -A GOLDEN=()   # "cfg|content|geometry" -> a folder of images
golden() { # CFG CONTENT: GOLDEN_DIR = CFG's images with CONTENT on them
    local key="$1|$2|$G_IMAGE|$G_META" dir mnt="$BENCH_TMP/mnt-fill" t0
    if [ -z "${GOLDEN[$key]:-}" ]; then
        dir="$BENCH_TMP/golden-${#GOLDEN[@]}"
        mkfs_cfg "$1" "$dir"
        bench_log "$1: putting the $2 tree on it (not timed, no disk)"
        t0=$(bench_now)
        fs_up "$1" "$dir" "$mnt" 0 || bench_die "$1: mount on the images failed"
        case "$2" in
            linux) tar -xf "$LINUX_TAR" -C "$mnt" ;;
            generated) cp -a "$SCAN_SRC/$SCAN_TREE" "$mnt/" ;;
        esac || bench_die "$1: could not put the $2 tree on it"
        fs_down "$1" "$mnt" || bench_die "$1: unmount failed"
        bench_log "$1: tree in place ($(bench_since "$t0") s)"
        GOLDEN[$key]=$dir
    fi
    GOLDEN_DIR=${GOLDEN[$key]}
}
golden_drop() { local k; for k in "${!GOLDEN[@]}"; do rm -rf "${GOLDEN[$k]}"; unset "GOLDEN[$k]"; done; }

# ---- The disks' figures: each disk's (d: the HDD, s: the SSD) as DISK.key=value, then each
# partition's requests and bytes as IMAGE:key=value.
STAT_KEYS="busy_s reads writes bytes_read bytes_written seeks seek_s rotation_s transfer_s flushes destages destaged_bytes late"
PART_KEYS="reads writes bytes_read bytes_written"
model_stats() { # DISK_MNT
    python3 - "$1/.diskmodel-stats" "$STAT_KEYS" "$PART_KEYS" <<'EOF'
import json, sys
for disk in json.load(open(sys.argv[1]))["disks"]:
    for key in sys.argv[2].split():
        print(f"{disk['name']}.{key}={disk[key]}")
    for part in disk["partitions"]:
        for key in sys.argv[3].split():
            print(f"{part['file']}:{key}={part[key]}")
EOF
}
# stats_diff KEY PREFIX BEFORE AFTER: R[KEY|PREFIXname] = after - before, for every figure.
stats_diff() {
    local name value
    while IFS='=' read -r name value; do
        R[$1|$2$name]=$value
    done < <(awk -F= 'FNR == 1 { file++ } file == 1 { v[$1] = $2; next } { printf "%s=%.6f\n", $1, $2 - v[$1] }' \
        <(echo "$3") <(echo "$4"))
}

# ---- The workloads, run in the phase's cgroup with the file system at $1; 0 = done.
work_postmark() { # MNT LOG
    BENCH_POSTMARK_CGROUP=$CG bench_postmark "$1" "$2" "$FILES" "$TRANSACTIONS" "$SUBDIRS" "$MIN_SIZE" "$MAX_SIZE"
    grep -q "seconds total" "$2"
}
work_kc() { # MNT LOG JOBS
    cg_run make -C "$1/$LINUX_TREE" "$KC_CONFIG" >"$2" 2>&1 && cg_run make -C "$1/$LINUX_TREE" -j"$3" >>"$2" 2>&1
}
work_cleaner() { # MNT LOG
    # shellcheck disable=SC2016
    cg_run bash -c 'set -e
        for r in $(seq -w 1 "$3"); do
            cp -a "$2" "$1/copy$r"
            # Keep the first of every 8 regular files (in path order), delete the others.
            find "$1/copy$r" -type f -print0 | sort -z | awk -v RS="\0" -v ORS="\0" "NR % 8 != 1" | xargs -0 -r rm -f
            echo "$EPOCHREALTIME round $r"
        done' cleaner "$1" "$CLEAN_SRC/tree" "$CLEANER_ROUNDS" >"$2" 2>&1
}
work_cold_scan() { # MNT LOG DISK KEY: find, the disks' figures, grep -r
    local mid t0
    t0=$(bench_now)
    cg_run find "$1/$SCAN_TREE" >"$2" 2>&1 || return 1
    R[$4|find_wall]=$(bench_since "$t0")
    mid=$(model_stats "$3")
    stats_diff "$4" "find:" "$BEFORE" "$mid"
    # grep exits 1 when a file has no match; -c with output to a file makes it read all.
    # shellcheck disable=SC2016
    cg_run sh -c 'grep -r -c "$1" "$2"; [ $? -le 1 ]' grep "$GREP_WORD" "$1/$READ_PATH" >>"$2" 2>&1
}
work_cold_tar() { # MNT LOG
    # Into a pipe: GNU tar does not read the files' contents when it writes to /dev/null.
    # shellcheck disable=SC2016
    cg_run sh -c 'tar -C "$1" -cf - "$2" | wc -c' tar "$1" "$READ_PATH" >"$2" 2>&1
}

declare -A R=()     # "cfg|phase|figure" -> value
declare -A NOTE=()  # "cfg|phase" -> why it has no figures
LOG_DIR=${BENCH_LOG_DIR:-/var/tmp/dualfs-bench-logs}   # logs of failed phases are kept there

# One phase of one configuration on fresh disks.
run_phase() { # PHASE CFG
    local phase=$1 cfg=$2 key="$2|$1" back="$BENCH_TMP/back" disk="$BENCH_TMP/disk" mnt="$BENCH_TMP/mnt"
    local log="$BENCH_TMP/$2-$1.log" t0 rc=0 img opts="" after disks
    geometry "$phase" "$cfg"
    rm -rf "$back"
    if [ -n "$G_CONTENT" ]; then
        golden "$cfg" "$G_CONTENT"
        cp -a --sparse=always "$GOLDEN_DIR" "$back"
    else
        mkfs_cfg "$cfg" "$back"
    fi
    layout "$cfg"
    disks=(--disk "d:$HDD_SPEC_BASE,capacity=$G_CAP")
    is_split "$cfg" && disks+=(--disk "s:$SSD_MODEL")
    mkdir -p "$disk" "$mnt"
    BENCH_MOUNTS+=("diskmodel|$disk")
    # DISKMODEL_TRACE=FILE: each run's requests in FILE.CFG-PHASE.
    DISKMODEL_TRACE=${DISKMODEL_TRACE:+$DISKMODEL_TRACE.$cfg-$phase} \
        _bench_start_fuse "$disk" "$BENCH_TMP/diskmodel-$cfg-$phase.log" "$DISKMODEL_BIN" "$back" "$disk" "${disks[@]}" "${L_FILES[@]}"
    # DualFS's write-back cache of file data lives in its daemon, outside the workload's
    # cgroup: it gets the dirty limit the kernel file systems get, so that neither side holds
    # more written data back from the disk.
    is_dualfs_cfg "$cfg" && [ -n "$G_MEM" ] && opts="data_cache=$((G_MEM / 5))"
    bench_log "$cfg $phase: mount on the simulated disk(s)"
    UP_PHASE=$phase fs_up "$cfg" "$disk" "$mnt" 1 "$opts" || bench_die "$cfg: mount failed"
    set_dirty "$G_MEM"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    BEFORE=$(model_stats "$disk")
    cg_start "$cfg-$phase" "$G_MEM"
    bench_log "$cfg $phase: running"
    t0=$(bench_now)
    case "$phase" in
        postmark) work_postmark "$mnt" "$log" || rc=$? ;;
        kc-1p) work_kc "$mnt" "$log" 1 || rc=$? ;;
        kc-8p) work_kc "$mnt" "$log" 8 || rc=$? ;;
        cleaner) work_cleaner "$mnt" "$log" || rc=$? ;;
        cold-scan) work_cold_scan "$mnt" "$log" "$disk" "$key" || rc=$? ;;
        cold-tar) work_cold_tar "$mnt" "$log" || rc=$? ;;
    esac
    if [ "$phase" = cleaner ] && is_dualfs_cfg "$cfg"; then
        R[$key|cleaner_status]=$("$CLEANER_BIN" --status --json "$mnt" 2>/dev/null || true)
    fi
    bench_log "$cfg $phase: unmount"
    fs_down "$cfg" "$mnt" || bench_die "$cfg: unmount failed"
    # Everything out of the disks' write caches too (sync FILE: an fsync of the image through
    # the model, which waits for the cache).
    for img in $L_IMAGES; do sync "$disk/$img"; done
    R[$key|wall]=$(bench_since "$t0")
    cg_stop "$key"
    set_dirty ""
    after=$(model_stats "$disk")
    stats_diff "$key" "" "$BEFORE" "$after"
    _bench_unmount diskmodel "$disk" || bench_die "$cfg: diskmodel did not stop"
    rm -rf "$back"
    if [ $rc != 0 ]; then
        mkdir -p "$LOG_DIR"
        cp "$log" "$LOG_DIR/disks-$cfg-$phase.log"
        NOTE[$key]="failed (exit $rc): $(grep -m1 -E 'error|Error|\*\*\*|Killed|No space|cannot' "$log" | cut -c1-160 || tail -n 1 "$log" | cut -c1-160); log: $LOG_DIR/disks-$cfg-$phase.log"
        bench_log "$cfg $phase: FAILED: ${NOTE[$key]}"
        R[$key|failed]=1
        return 0
    fi
    R[$key|ok]=1
    bench_log "$cfg $phase: disk I/O ${R[$key|d.busy_s]} s$(is_split "$cfg" && echo " (HDD), ${R[$key|s.busy_s]} s (SSD)"), wall ${R[$key|wall]} s"
}

# The configurations of a phase: the cleaner gets dualfs-noclean beside dualfs.
phase_configs() { # PHASE
    local c list=""
    for c in $AVAILABLE; do
        list="$list $c"
        if [ "$1" = cleaner ] && [ "$c" = dualfs ]; then list="$list dualfs-noclean"; fi
    done
    echo "${list# }"
}
bench_log "configurations: $AVAILABLE; phases: $PHASES"
for cfg in $AVAILABLE; do
    for phase in $PHASES; do
        for c in $(phase_configs "$phase"); do
            case "$c" in "$cfg" | "$cfg"-noclean) run_phase "$phase" "$c" ;; esac
        done
    done
    golden_drop
done

# ---- Results.
REF=ext2
case " $AVAILABLE " in *" ext2 "*) ;; *) REF=${AVAILABLE%% *} ;; esac
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
fig() { echo "${R[$1]:-n/a}"; }
ok() { [ -n "${R[$1|ok]:-}" ]; }
phase_title() {
    case "$1" in
        postmark) echo "PostMark: $FILES files of $MIN_SIZE-$MAX_SIZE B in $SUBDIRS subdirectories, $TRANSACTIONS transactions" ;;
        kc-1p) echo "Kernel compile, 1 process: make $KC_CONFIG; make -j1 in $LINUX_TREE" ;;
        kc-8p) echo "Kernel compile, 8 processes: make $KC_CONFIG; make -j8 in $LINUX_TREE" ;;
        cleaner) echo "Cleaner experiment: copy $CLEAN_WHAT, delete 7/8 of its regular files, $CLEANER_ROUNDS times" ;;
        cold-scan) echo "Cold scan: find of $SCAN_WHAT, then grep -r -c $GREP_WORD of $READ_WHAT" ;;
        cold-tar) echo "Cold tar: tar c | wc -c of $READ_WHAT in $SCAN_WHAT" ;;
    esac
}
cleaner_summary() { # STATUS_JSON (dualfs-cleaner --status --json): one line
    python3 - "$1" <<'EOF' 2>/dev/null || echo "no cleaner status"
import json, sys
s = json.loads(sys.argv[1])
c = s["counters"]
print(f"{c['segments_cleaned']} segments cleaned in {c['passes']} passes ({c['write_path_passes']} in the write path), "
      f"{c['bytes_written'] / 1e6:.1f} MB written by cleaning, write cost {s['write_cost']:.3f}, "
      f"{s['clean']} of {s['log_segments']} segments clean at the end, ENOSPC {c['enospc']}, "
      f"{c.get('room_waits', '?')} operations waited for room (what is cached written back first)")
EOF
}
echo
echo "DualFS and kernel file systems on simulated disks; 1 round each; $(nproc) CPUs, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "HDD: $HDD_SPEC_BASE (capacity $P_CAPACITY for PostMark and the cleaner, $T_CAPACITY for the Linux tree); parameters: $HDD_PARAMS"
[ -z "$NEED_LINUX" ] || echo "HDD parameters with the Linux tree: $HDD_PARAMS_T"
[ -z "$SPLIT_RAN" ] || echo "SSD (split configurations): $SSD_MODEL; parameters: $SSD_PARAMS"
echo "Space: PostMark and the cleaner $P_IMAGE per file system, the Linux tree $T_IMAGE; DualFS's metadata partition $P_META / $T_META of it (the cleaner: $CLEANER_META), at address 0 of the HDD (split: at address 0 of the SSD), data after it"
mem_text() { if [ -n "$1" ]; then echo "$(($1 >> 10)) KiB"; else echo "unlimited"; fi; }
echo "Memory (cgroup v${CG_VERSION:-none}): PostMark $(mem_text "$PM_MEMORY"), cleaner and scans $(mem_text "$TREE_MEMORY")," \
    "kernel compile $(mem_text "$KC_MEMORY_BYTES"); dirty limits: $([ "$DIRTY" = auto ] && echo "10% / 20% of that memory for each phase" || echo "the host's");" \
    "DualFS's data_cache: the memory / 5"
echo "Disk I/O = a disk's busy time from after mount + sync + drop_caches to the end of unmount + cache flush (split configurations: disk I/O is the HDD's, SSD I/O the SSD's);" \
    "x $REF = disk I/O over $(cfg_label "$REF")'s in the same phase"
for phase in $PHASES; do
    echo
    echo "== $phase: $(phase_title "$phase")"
    printf '%-22s %9s %7s %8s %9s   %7s %7s %8s %8s %7s %8s %9s %9s %8s %6s\n' "configuration" "disk I/O" "x $REF" "SSD I/O" "wall s" \
        "reads" "writes" "MB read" "MB writ." "seeks" "seek s" "rotation" "transfer" "destages" "late"
    for c in $(phase_configs "$phase"); do
        k="$c|$phase"
        if ! ok "$k"; then printf '%-22s %s\n' "$(cfg_label "$c")" "n/a: ${NOTE[$k]:-not run}"; continue; fi
        ssd="-"
        is_split "$c" && ssd=$(printf '%.2f' "${R[$k|s.busy_s]}")
        printf '%-22s %9.2f %7s %8s %9.2f   %7.0f %7.0f %8s %8s %7.0f %8.2f %9.2f %9.2f %8.0f %6.0f\n' "$(cfg_label "$c")" \
            "${R[$k|d.busy_s]}" "$(bench_ratio "${R[$k|d.busy_s]}" "$(fig "$REF|$phase|d.busy_s")")" "$ssd" "${R[$k|wall]}" \
            "${R[$k|d.reads]}" "${R[$k|d.writes]}" "$(mb "${R[$k|d.bytes_read]}")" "$(mb "${R[$k|d.bytes_written]}")" \
            "${R[$k|d.seeks]}" "${R[$k|d.seek_s]}" "${R[$k|d.rotation_s]}" "${R[$k|d.transfer_s]}" \
            "${R[$k|d.destages]}" "$(awk -v a="${R[$k|d.late]}" -v b="${R[$k|s.late]:-0}" 'BEGIN { print a + b }')"
    done
    for c in $(phase_configs "$phase"); do
        k="$c|$phase"
        ok "$k" || continue
        layout "$c"
        # shellcheck disable=SC2086
        set -- $L_IMAGES
        [ $# -gt 1 ] || continue
        line=""
        for img in "$@"; do
            line="${line:+$line; }$img ${R[$k|$img:reads]%.*} reads, ${R[$k|$img:writes]%.*} writes, $(mb "${R[$k|$img:bytes_read]}") MB read, $(mb "${R[$k|$img:bytes_written]}") MB written"
        done
        echo "  $(cfg_label "$c") by image (the first on the HDD): $line"
    done
    if [ "$phase" = cold-scan ]; then
        echo "  The find alone (HDD requests and busy time; SSD busy time):"
        for c in $(phase_configs "$phase"); do
            k="$c|$phase"
            ok "$k" || continue
            printf '    %-22s HDD %6.0f reads %6.0f writes %8.2f s   SSD %s   wall %s s\n' "$(cfg_label "$c")" "${R[$k|find:d.reads]}" \
                "${R[$k|find:d.writes]}" "${R[$k|find:d.busy_s]}" \
                "$(is_split "$c" && printf '%.0f reads %.3f s' "${R[$k|find:s.reads]}" "${R[$k|find:s.busy_s]}" || echo -)" "${R[$k|find_wall]}"
        done
    fi
    if [ "$phase" = cleaner ]; then
        for c in $(phase_configs "$phase"); do
            k="$c|$phase"
            [ -n "${R[$k|cleaner_status]:-}" ] || continue
            echo "  $(cfg_label "$c"): $(cleaner_summary "${R[$k|cleaner_status]}")"
        done
    fi
    for c in $(phase_configs "$phase"); do
        k="$c|$phase"
        [ -n "${R[$k|mem_peak]:-}" ] || continue
        echo "  $(cfg_label "$c") cgroup: peak $(mb "${R[$k|mem_peak]}") MB${R[$k|mem_failcnt]:+, limit hit ${R[$k|mem_failcnt]} times}${R[$k|mem_oom]:+, OOM kills ${R[$k|mem_oom]}}; ${R[$k|mem_stat]}"
    done
done
echo
echo "reads/writes: the file system's requests to the HDD (a write into the write cache counts when it is taken in);" \
    "seeks and seek/rotation/transfer: the HDD mechanism's, destages included; late: requests (both disks) whose real I/O outlasted the model's time"

# Summary: disk I/O seconds and the ratio to the reference, a column per phase.
echo
echo "Disk I/O seconds (split configurations: the HDD's), and x $REF:"
printf '%-22s' "configuration"
for phase in $PHASES; do printf ' %17s' "$phase"; done
echo
for c in $AVAILABLE dualfs-noclean; do
    [ "$c" = dualfs-noclean ] && ! ok "$c|cleaner" && continue
    printf '%-22s' "$(cfg_label "$c")"
    for phase in $PHASES; do
        k="$c|$phase"
        if ok "$k"; then
            printf ' %9.2f (%5s)' "${R[$k|d.busy_s]}" "$(bench_ratio "${R[$k|d.busy_s]}" "$(fig "$REF|$phase|d.busy_s")")"
        else printf ' %17s' "-"; fi
    done
    echo
done

# The ratios the design is judged by.
ratio_of() { # CFG_A CFG_B PHASE [FIGURE]: A's figure over B's
    local f=${4:-d.busy_s}
    if ! ok "$1|$3" || ! ok "$2|$3"; then echo n/a; return; fi
    bench_ratio "${R[$1|$3|$f]}" "${R[$2|$3|$f]}"
}
echo
echo "Ratios (disk I/O time; lower is better for DualFS):"
for phase in $PHASES; do
    line=""
    for b in ext2 ext3 ext4 xfs; do line="$line  /$b $(ratio_of dualfs "$b" "$phase")"; done
    printf '  %-10s DualFS (one disk):%s\n' "$phase" "$line"
    if ok "dualfs-ssdmeta|$phase"; then
        line=""
        for b in ext4-ssdjournal xfs-rt xfs-ssdlog; do line="$line  /$b $(ratio_of dualfs-ssdmeta "$b" "$phase")"; done
        printf '  %-10s DualFS meta on SSD, HDD time:%s\n' "$phase" "$line"
    fi
    if [ "$phase" = cleaner ]; then
        printf '  %-10s DualFS with cleaning / without: %s; / ext2 %s; / ext3 %s\n' "$phase" \
            "$(ratio_of dualfs dualfs-noclean cleaner)" "$(ratio_of dualfs ext2 cleaner)" "$(ratio_of dualfs ext3 cleaner)"
    fi
    if [ "$phase" = cold-scan ] && ok "dualfs-ssdmeta|$phase"; then
        printf '  %-10s the cold find on DualFS meta on SSD: %s HDD requests\n' "$phase" \
            "$(awk -v a="${R[dualfs-ssdmeta|cold-scan|find:d.reads]}" -v b="${R[dualfs-ssdmeta|cold-scan|find:d.writes]}" 'BEGIN { print a + b }')"
    fi
done
for c in "${!BENCH_SKIP[@]}"; do printf '%s: skipped: %s\n' "$c" "${BENCH_SKIP[$c]}"; done

# The CSV: disk_io_seconds (the HDD's), ssd_io_seconds (split only), wall_seconds, and the
# HDD's requests and bytes; for cold-scan also the find's.
for phase in $PHASES; do
    for c in $(phase_configs "$phase"); do
        k="$c|$phase"
        ok "$k" || continue
        bench_row "$c" "$phase" disk_io_seconds "${R[$k|d.busy_s]}" s
        is_split "$c" && bench_row "$c" "$phase" ssd_io_seconds "${R[$k|s.busy_s]}" s
        bench_row "$c" "$phase" wall_seconds "${R[$k|wall]}" s
        bench_row "$c" "$phase" disk_reads "${R[$k|d.reads]%.*}" requests
        bench_row "$c" "$phase" disk_writes "${R[$k|d.writes]%.*}" requests
        bench_row "$c" "$phase" disk_bytes_read "${R[$k|d.bytes_read]%.*}" bytes
        bench_row "$c" "$phase" disk_bytes_written "${R[$k|d.bytes_written]%.*}" bytes
        if [ "$phase" = cold-scan ]; then
            bench_row "$c" "$phase" find_disk_io_seconds "${R[$k|find:d.busy_s]}" s
            bench_row "$c" "$phase" find_disk_requests "$(awk -v a="${R[$k|find:d.reads]}" -v b="${R[$k|find:d.writes]}" 'BEGIN { print a + b }')" requests
            is_split "$c" && bench_row "$c" "$phase" find_ssd_io_seconds "${R[$k|find:s.busy_s]}" s
        fi
    done
done
for c in "${!BENCH_SKIP[@]}"; do bench_row "$c" all skipped 1 note; done
SPLIT_NOTE=""
[ -z "$SPLIT_RAN" ] || SPLIT_NOTE=" (split: the HDD's)"
CHART_WHAT="$(echo "$PHASES" | wc -w) phases on $HDD_SPEC_BASE$SPLIT_NOTE"
bench_chart disk_io_seconds "Disk I/O time, $CHART_WHAT" "disk I/O time"
BENCH_CHART_SUFFIX=wall bench_chart wall_seconds "Wall time, $CHART_WHAT" "wall time"
