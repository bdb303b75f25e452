#!/usr/bin/env bash
# Checker speed: a Linux source tree (about 80,000 files) copied onto DualFS through a FUSE
# mount and onto ext4, both on loop devices; then `fsck-dualfs -f -n` against `e2fsck -f -n`,
# each timed with the page cache dropped (cold), as the best of five runs (warm), and by CPU
# time. Prints the times and the ratios.
#
#   bench/fsck.sh                  # the tarball of Debian's linux-source package
#   bench/fsck.sh --tree DIR       # any directory tree instead
#   bench/fsck.sh --keep           # keep the images (prints where they are)
#   bench/fsck.sh --images DIR     # time again on images a --keep run left in DIR
#   bench/fsck.sh --out DIR        # also DIR/fsck.csv and DIR/fsck.png (times over ext4's)
#
# Options: --tree DIR, --keep, --images DIR, --out DIR.
#
# Needs root, /dev/fuse, loop devices, e2fsprogs; installs linux-source with apt-get if its
# tarball is missing. Work files go to $TMPDIR (default /var/tmp): about 3 GB of sparse images
# and 1.4 GB for the unpacked tree.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$BENCH_REPO"

TREE=""
KEEP=0
IMAGES=""
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --tree) TREE="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --images) IMAGES="$2"; KEEP=1; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h | --help) bench_usage "$0" 0 ;;
        *) echo "unknown argument $1" >&2; bench_usage "$0" 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "bench/fsck.sh: run as root (it mounts and uses loop devices)" >&2
    exit 1
fi

cargo build --release --locked -p dualfs -p dualfs-mkfs -p dualfs-fsck
BIN="$CARGO_TARGET_DIR/release"

if [ -n "$IMAGES" ]; then
    WORK=$IMAGES
else
    WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/dualfs-fsck-bench.XXXXXX")
fi
LOOPS=()
MOUNTS=()
cleanup() {
    set +e
    for m in "${MOUNTS[@]}"; do
        if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m"; fi
    done
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null; done
    if [ "$KEEP" = 1 ]; then
        echo "kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }

attach() { # VAR image size: attach the image (made sparse if missing), VAR = its loop device
    [ -e "$2" ] || truncate -s "$3" "$2"
    local l
    l=$(losetup --find --show "$2")
    LOOPS+=("$l")
    printf -v "$1" '%s' "$l"
}

if [ -n "$IMAGES" ]; then
    attach META "$WORK/dualfs-meta.img" 1G
    attach DATA "$WORK/dualfs-data.img" 3G
    attach EXT4 "$WORK/ext4.img" 3G
    FILES=$(cat "$WORK/files" 2>/dev/null || echo "?")
    BYTES=$(cat "$WORK/bytes" 2>/dev/null || echo 0)
else
    # ---- The tree.
    if [ -z "$TREE" ]; then
        TARBALL=$(ls /usr/src/linux-source-*.tar.* 2>/dev/null | sort -V | tail -1 || true)
        if [ -z "$TARBALL" ]; then
            echo "== installing Debian's linux-source package"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-source >/dev/null
            TARBALL=$(ls /usr/src/linux-source-*.tar.* | sort -V | tail -1)
        fi
        echo "== unpacking $TARBALL"
        mkdir -p "$WORK/src"
        tar -xf "$TARBALL" -C "$WORK/src"
        TREE="$WORK/src"
    fi
    FILES=$(find "$TREE" | wc -l)
    BYTES=$(du -sb "$TREE" | cut -f1)
    echo "== tree: $FILES files and directories, $((BYTES / 1048576)) MiB"
    echo "$FILES" > "$WORK/files"; echo "$BYTES" > "$WORK/bytes"

    # ---- DualFS.
    echo "== DualFS: mkfs, copy through FUSE, unmount"
    attach META "$WORK/dualfs-meta.img" 1G
    attach DATA "$WORK/dualfs-data.img" 3G
    "$BIN/mkfs-dualfs" -q -f "$META" "$DATA"
    mkdir -p "$WORK/mnt-dualfs"
    MOUNTS+=("$WORK/mnt-dualfs")
    "$BIN/dualfs" mount "$META" "$DATA" "$WORK/mnt-dualfs"
    t0=$(date +%s.%N)
    cp -a "$TREE/." "$WORK/mnt-dualfs/"
    sync -f "$WORK/mnt-dualfs" 2>/dev/null || true
    "$BIN/dualfs" umount "$WORK/mnt-dualfs"
    t1=$(date +%s.%N)
    echo "   copied in $(calc "$t1 - $t0") s"

    # ---- ext4.
    echo "== ext4: mkfs, copy, unmount"
    attach EXT4 "$WORK/ext4.img" 3G
    mkfs.ext4 -q -F "$EXT4"
    mkdir -p "$WORK/mnt-ext4"
    MOUNTS+=("$WORK/mnt-ext4")
    mount "$EXT4" "$WORK/mnt-ext4"
    cp -a "$TREE/." "$WORK/mnt-ext4/"
    umount "$WORK/mnt-ext4"
    # The unpacked tree is not needed any more (a --tree given is the caller's).
    rm -rf "$WORK/src"
fi

# ---- Timing. Both checks must find their file system clean. Wall-clock time is what a user
# waits; CPU time (user + system) is what the check costs, and is steadier on a busy machine.
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# Wall and CPU (user + system, from the child's rusage) time with microsecond resolution.
TIMER='import resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT)
w = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{w:.4f} {u.ru_utime + u.ru_stime:.4f}")
sys.exit(r.returncode)'
run_timed() { # command... -> "wall cpu" in seconds (fails if the command does)
    python3 -c "$TIMER" "$WORK/last.out" "$@" || {
        cat "$WORK/last.out" >&2; echo "FAILED: $*" >&2; exit 1; }
}
best_of() { # n command... -> best wall and best cpu of n runs
    local n=$1; shift
    local bw="" bc="" w c
    for _ in $(seq "$n"); do
        read -r w c < <(run_timed "$@")
        if [ -z "$bw" ] || [ "$(calc "($w < $bw)")" = "1.000" ]; then bw=$w; fi
        if [ -z "$bc" ] || [ "$(calc "($c < $bc)")" = "1.000" ]; then bc=$c; fi
    done
    echo "$bw $bc"
}
command -v python3 >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
DUALFS_CMD=("$BIN/fsck-dualfs" -f -n "$META" "$DATA")
E2FSCK_CMD=(e2fsck -f -n "$EXT4")

cold() { # command... -> the best wall time of 3 runs, each with the page cache dropped
    local best="" w c
    for _ in 1 2 3; do
        drop_caches
        read -r w c < <(run_timed "$@")
        if [ -z "$best" ] || [ "$(calc "($w < $best)")" = "1.000" ]; then best=$w; fi
    done
    echo "$best"
}
D_COLD=$(cold "${DUALFS_CMD[@]}")
tail -1 "$WORK/last.out"
E_COLD=$(cold "${E2FSCK_CMD[@]}")
tail -1 "$WORK/last.out"
read -r D_WARM D_CPU < <(best_of 9 "${DUALFS_CMD[@]}")
read -r E_WARM E_CPU < <(best_of 9 "${E2FSCK_CMD[@]}")

ratio() { awk "BEGIN { printf \"%.2f\", $1 / $2 }"; }
echo
echo "== fsck of a $FILES-entry tree ($((BYTES / 1048576)) MiB); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-22s %10s %10s %10s\n" "" "cold (s)" "warm (s)" "CPU (s)"
printf "%-22s %10.4f %10.4f %10.4f\n" "fsck-dualfs -f -n" "$D_COLD" "$D_WARM" "$D_CPU"
printf "%-22s %10.4f %10.4f %10.4f\n" "e2fsck -f -n" "$E_COLD" "$E_WARM" "$E_CPU"
printf "%-22s %10s %10s %10s\n" "ratio DualFS / ext4" "$(ratio "$D_COLD" "$E_COLD")" \
    "$(ratio "$D_WARM" "$E_WARM")" "$(ratio "$D_CPU" "$E_CPU")"
echo "(cold: page cache dropped first, best of 3; warm: best of 9; CPU: user + system, best of 9)"

bench_out_init "$OUT" fsck
for k in cold warm cpu; do
    case $k in cold) d=$D_COLD e=$E_COLD ;; warm) d=$D_WARM e=$E_WARM ;; cpu) d=$D_CPU e=$E_CPU ;; esac
    bench_row dualfs "$k" seconds "$d" s
    bench_row ext4 "$k" seconds "$e" s
done
bench_row dualfs tree entries "$FILES" entries
bench_row dualfs tree bytes "$BYTES" bytes
bench_chart seconds "fsck-dualfs -f -n against e2fsck -f -n on a $FILES-entry tree" time
