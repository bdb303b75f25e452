#!/usr/bin/env bash
# Preallocation, holes and copies, side by side on DualFS, DualFS -o writeback_cache and
# kernel ext4 (a loop device), in one run: seconds for each step, and the blocks a copy took.
#   - fallocate -l 10G (DualFS records unwritten blocks, writes no data);
#   - the issue's sparse file, 4.6 GiB with 8 MiB of data at its end: cp --sparse=auto of it
#     (SEEK_DATA/SEEK_HOLE skip the hole; with writeback_cache the kernel reads it all),
#     tar -S of it, SEEK_DATA from 0 (1000 times);
#   - copy_file_range of a 512 MiB file (inside the daemon) against cat of it (its data
#     through FUSE twice), the source's pages dropped from the kernel's cache before each;
#   - punching 5 GiB out of the 10 GiB preallocation.
#
#   bench/holes.sh                      # dualfs dualfs-wb ext4
#   bench/holes.sh --fs "dualfs ext4"
#
# Needs root, /dev/fuse and loop devices; sparse images go to a temporary folder.
set -euo pipefail
export LC_ALL=C
. "$(dirname "$0")/lib.sh"

FS_LIST="dualfs dualfs-wb ext4" SIZE=16G
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --fs) FS_LIST=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument $1" >&2; usage 1 ;;
    esac
done
# shellcheck disable=SC2086
bench_check_fs_list $FS_LIST

bench_init
bench_install e2fsprogs
bench_log "building DualFS (release) into $CARGO_TARGET_DIR"
(cd "$BENCH_REPO" && cargo build --release --workspace --quiet) || bench_die "DualFS build failed"

declare -A T=() # "fs|step" -> seconds (or a count)
timed() { # FS STEP CMD...: run CMD, record its wall time
    local fs=$1 step=$2 t0
    shift 2
    t0=$(bench_now)
    "$@"
    T[$fs|$step]=$(bench_since "$t0")
}
blocks_mib() { echo $(($(stat -c %b "$1") * 512 / 1048576)); }
seek_data_1000() {
    python3 -c 'import os,sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(1000): os.lseek(fd, 0, os.SEEK_DATA)' "$1"
}
# Drop the page cache of one file (its clean pages): the copies below read it from the file
# system, not from the kernel's cache.
forget_pages() {
    python3 -c 'import os,sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}
copy_range() {
    python3 -c 'import os,sys
s = os.open(sys.argv[1], os.O_RDONLY); d = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o644)
n = os.fstat(s).st_size; done = 0
while done < n: done += os.copy_file_range(s, d, n - done, done, done)
os.fsync(d)' "$1" "$2"
}

for fs in $FS_LIST; do
    mnt="$BENCH_TMP/mnt-$fs"
    bench_log "$(bench_fs_label "$fs"): mkfs + mount"
    fs_mount "$fs" "$mnt" "$SIZE"
    timed "$fs" fallocate fallocate -l 10G "$mnt/pre"
    truncate -s 4600M "$mnt/sparse"
    dd if=/dev/urandom of="$mnt/sparse" bs=1M count=8 seek=4600 conv=notrunc status=none
    sync -f "$mnt/sparse"
    timed "$fs" cp cp --sparse=auto "$mnt/sparse" "$mnt/sparse-copy"
    T[$fs|cp-mib]=$(blocks_mib "$mnt/sparse-copy")
    cmp "$mnt/sparse" "$mnt/sparse-copy" || bench_die "$fs: the copy differs"
    timed "$fs" tar sh -c "tar -S -cf - -C '$mnt' sparse | wc -c > '$BENCH_TMP/tar-$fs'"
    T[$fs|tar-mib]=$(($(cat "$BENCH_TMP/tar-$fs") / 1048576))
    timed "$fs" seek seek_data_1000 "$mnt/sparse"
    dd if=/dev/urandom of="$mnt/dense" bs=1M count=512 status=none
    sync -f "$mnt/dense"
    forget_pages "$mnt/dense"
    timed "$fs" copy_range copy_range "$mnt/dense" "$mnt/dense-cfr"
    forget_pages "$mnt/dense"
    timed "$fs" cat sh -c "cat '$mnt/dense' > '$mnt/dense-cat' && sync -f '$mnt/dense-cat'"
    cmp "$mnt/dense" "$mnt/dense-cfr" || bench_die "$fs: copy_file_range made something else"
    timed "$fs" punch fallocate -p -o 0 -l 5G "$mnt/pre"
    fs_umount "$fs" "$mnt"
done

echo
echo "Preallocation, holes and copies (seconds; $(nproc) CPUs, kernel $(uname -r))"
printf '%-36s' "step"
for fs in $FS_LIST; do printf ' %17s' "$(bench_fs_label "$fs")"; done
echo
row() { # LABEL KEY
    printf '%-36s' "$1"
    for fs in $FS_LIST; do printf ' %17s' "${T[$fs|$2]:-n/a}"; done
    echo
}
row "fallocate -l 10G" fallocate
row "cp --sparse=auto, 4.6 GiB sparse" cp
row "  MiB the copy holds" cp-mib
row "tar -S of it" tar
row "  MiB in the archive" tar-mib
row "1000 x SEEK_DATA from 0 (python)" seek
row "copy_file_range, 512 MiB" copy_range
row "cat, 512 MiB (read + write)" cat
row "punch 5 GiB" punch
first=${FS_LIST%% *}
for fs in $FS_LIST; do
    [ "$fs" = "$first" ] && continue
    echo "$(bench_fs_label "$fs") / $(bench_fs_label "$first"): fallocate" \
        "$(bench_ratio "${T[$fs|fallocate]}" "${T[$first|fallocate]}"), cp" \
        "$(bench_ratio "${T[$fs|cp]}" "${T[$first|cp]}"), copy_file_range" \
        "$(bench_ratio "${T[$fs|copy_range]}" "${T[$first|copy_range]}")"
done
